//! [`IcebergWriterOp`], the writer subtasks: each encodes its records into Arrow batches of the
//! table's schema, splits them by partition, and writes Parquet data files rolled by size
//! (iceberg-rust's fan-out, rolling and data-file writers). The writes run on the sink's I/O
//! runtime while the task goes on encoding the next batches: `process_batch` starts a write (or
//! queues the batch behind the one in flight), `poll_pending` takes the files back when it is
//! done, and the input blocks while a full queue waits. At each checkpoint barrier it waits for
//! the writes, closes its open files and emits their list as a [`WriteResult`] ahead of the
//! barrier, for the committer; at end of input it does the same. It keeps no state of its own:
//! files not yet handed on belong to no checkpoint, and after a failure their records are
//! replayed.

use crate::error::IcebergSinkError;
use crate::io;
use crate::schema::RecordEncoder;
use crate::sink::SinkConfig;
use arrow_array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{
    DataFile, DataFileFormat, FormatVersion, PartitionSpecRef, StructType,
    serialize_data_file_to_json,
};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::{DataFileWriter, DataFileWriterBuilder};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use sluice_core::{CheckpointId, Data, UserError};
use sluice_runtime::operator::{Collector, Operator, OperatorContext};
use sluice_runtime::state::OperatorState;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Rows encoded and waiting behind the write in flight before the input blocks.
const MAX_QUEUED_ROWS: usize = 8 * 1024;

/// Pieces of encoded batches, each with its partition key (`None` when unpartitioned).
type Pieces = Vec<(Option<iceberg::spec::PartitionKey>, RecordBatch)>;

/// One data file as the committer receives it: iceberg-rust's JSON form of the `DataFile` and the
/// id of the partition spec it was written with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The partition spec id.
    pub spec_id: i32,
    /// The data file (`serialize_data_file_to_json`).
    pub json: String,
}

/// What a writer subtask hands on at a barrier (or at end of input): the data files it closed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteResult {
    /// The writer subtask.
    pub subtask: usize,
    /// The files it closed, in the order it closed them.
    pub files: Vec<FileEntry>,
    /// Records in them.
    pub records: u64,
}

type DataWriterBuilder =
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;
type DataWriter =
    DataFileWriter<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;

/// The open data files of one subtask.
enum OpenFiles {
    Unpartitioned(Box<DataWriter>),
    Partitioned(Box<FanoutWriter<DataWriterBuilder>>),
}

impl OpenFiles {
    /// New open files: a fan-out writer (one rolling file per partition) or a single rolling
    /// data file writer.
    async fn open(builder: RollingBuilder, partitioned: bool) -> iceberg::Result<OpenFiles> {
        let data = DataFileWriterBuilder::new(builder);
        Ok(if partitioned {
            OpenFiles::Partitioned(Box::new(FanoutWriter::new(data)))
        } else {
            OpenFiles::Unpartitioned(Box::new(data.build(None).await?))
        })
    }

    /// Writes `pieces` into `files`, opening them first if there are none; hands the files
    /// back with the result.
    async fn write_pieces(
        files: Option<OpenFiles>,
        builder: RollingBuilder,
        partitioned: bool,
        pieces: Pieces,
    ) -> (Option<OpenFiles>, iceberg::Result<()>) {
        let mut files = match files {
            Some(files) => files,
            None => match OpenFiles::open(builder, partitioned).await {
                Ok(files) => files,
                Err(e) => return (None, Err(e)),
            },
        };
        let written = files.write(pieces).await;
        (Some(files), written)
    }

    async fn write(&mut self, pieces: Pieces) -> iceberg::Result<()> {
        for (key, batch) in pieces {
            match (&mut *self, key) {
                (OpenFiles::Unpartitioned(w), _) => w.write(batch).await?,
                (OpenFiles::Partitioned(w), Some(k)) => w.write(k, batch).await?,
                (OpenFiles::Partitioned(_), None) => {
                    return Err(iceberg::Error::new(
                        iceberg::ErrorKind::Unexpected,
                        "a partitioned writer got a batch without partition key",
                    ));
                }
            }
        }
        Ok(())
    }

    async fn close(self) -> iceberg::Result<Vec<DataFile>> {
        match self {
            OpenFiles::Unpartitioned(mut w) => w.close().await,
            OpenFiles::Partitioned(w) => (*w).close().await,
        }
    }
}

type RollingBuilder = RollingFileWriterBuilder<
    ParquetWriterBuilder,
    DefaultLocationGenerator,
    DefaultFileNameGenerator,
>;

/// The write in flight on the I/O runtime; it owns the open files until it is done.
type Writing = tokio::task::JoinHandle<(Option<OpenFiles>, iceberg::Result<()>)>;

/// What a subtask set up at `open`.
struct Opened {
    subtask: usize,
    encoder: RecordEncoder,
    splitter: Option<RecordBatchPartitionSplitter>,
    builder: RollingBuilder,
    partition_type: StructType,
    spec: PartitionSpecRef,
    format_version: FormatVersion,
    /// The open files, when no write holds them.
    open: Option<OpenFiles>,
    /// The write in flight (it holds the open files).
    writing: Option<Writing>,
    /// Encoded pieces waiting for the write in flight, and their rows.
    queued: Pieces,
    queued_rows: usize,
    records: u64,
}

impl Opened {
    /// Starts writing the queued pieces on the I/O runtime (nothing when a write is in flight
    /// or nothing is queued).
    fn start_write(&mut self) -> Result<(), IcebergSinkError> {
        if self.writing.is_some() || self.queued.is_empty() {
            return Ok(());
        }
        let pieces = std::mem::take(&mut self.queued);
        self.queued_rows = 0;
        let write = OpenFiles::write_pieces(
            self.open.take(),
            self.builder.clone(),
            self.splitter.is_some(),
            pieces,
        );
        self.writing = Some(io::spawn(write).map_err(IcebergSinkError::Io)?);
        Ok(())
    }

    /// The files back from a finished write, or its error.
    fn finished(
        &mut self,
        done: Result<(Option<OpenFiles>, iceberg::Result<()>), tokio::task::JoinError>,
        table: &str,
    ) -> Result<(), IcebergSinkError> {
        let (files, written) =
            done.map_err(|e| IcebergSinkError::Io(format!("Iceberg I/O task failed: {e}")))?;
        self.open = files;
        written.map_err(|e| IcebergSinkError::Write {
            table: table.to_string(),
            message: e.to_string(),
        })
    }

    /// Waits until every encoded piece is written (blocking: for the barrier and end of input).
    fn settle(&mut self, table: &str) -> Result<(), IcebergSinkError> {
        loop {
            if let Some(writing) = self.writing.take() {
                let done = io::wait_join(writing);
                self.finished(done, table)?;
            }
            if self.queued.is_empty() {
                return Ok(());
            }
            self.start_write()?;
        }
    }
}

/// The writer operator (one per writer subtask). Emits one [`WriteResult`] per checkpoint that
/// saw data, ahead of the barrier.
pub struct IcebergWriterOp<T> {
    config: Arc<SinkConfig>,
    opened: Option<Opened>,
    _t: PhantomData<fn(T)>,
}

impl<T> Clone for IcebergWriterOp<T> {
    fn clone(&self) -> Self {
        IcebergWriterOp {
            config: self.config.clone(),
            opened: None,
            _t: PhantomData,
        }
    }
}

impl<T> IcebergWriterOp<T> {
    pub(crate) fn new(config: Arc<SinkConfig>) -> Self {
        IcebergWriterOp {
            config,
            opened: None,
            _t: PhantomData,
        }
    }

    fn setup(&self, table: &Table, ctx: &OperatorContext) -> Result<Opened, IcebergSinkError> {
        let cfg = &self.config;
        let write_err = |e: iceberg::Error| IcebergSinkError::Write {
            table: cfg.table_name(),
            message: e.to_string(),
        };
        let metadata = table.metadata();
        let schema = metadata.current_schema().clone();
        let arrow = iceberg::arrow::schema_to_arrow_schema(&schema).map_err(write_err)?;
        let encoder = RecordEncoder::new(Arc::new(arrow)).map_err(|e| IcebergSinkError::Write {
            table: cfg.table_name(),
            message: e,
        })?;
        let spec = metadata.default_partition_spec().clone();
        let partition_type = spec.partition_type(&schema).map_err(write_err)?;
        let splitter = if spec.is_unpartitioned() {
            None
        } else {
            Some(
                RecordBatchPartitionSplitter::try_new_with_computed_values(
                    schema.clone(),
                    spec.clone(),
                )
                .map_err(write_err)?,
            )
        };
        let properties = WriterProperties::builder()
            .set_compression(cfg.compression)
            .build();
        let parquet = ParquetWriterBuilder::new(properties, schema.clone());
        let locations = DefaultLocationGenerator::new(metadata).map_err(write_err)?;
        // Unique per subtask and attempt: a restarted attempt never overwrites a file that a
        // committed snapshot (or a checkpoint still to commit) references.
        let names = DefaultFileNameGenerator::new(
            format!(
                "{:05}-{}-{}",
                ctx.subtask_index(),
                ctx.attempt_number(),
                uuid::Uuid::new_v4()
            ),
            None,
            DataFileFormat::Parquet,
        );
        let rolling = RollingFileWriterBuilder::new(
            parquet,
            cfg.target_file_size,
            table.file_io().clone(),
            locations,
            names,
        );
        Ok(Opened {
            subtask: ctx.subtask_index(),
            encoder,
            splitter,
            builder: rolling,
            partition_type,
            spec,
            format_version: metadata.format_version(),
            open: None,
            writing: None,
            queued: Vec::new(),
            queued_rows: 0,
            records: 0,
        })
    }

    /// Closes the open files and returns their list (`None` when nothing was written).
    fn flush(&mut self) -> Result<Option<WriteResult>, IcebergSinkError> {
        let table = self.config.table_name();
        let Some(opened) = self.opened.as_mut() else {
            return Ok(None);
        };
        opened.settle(&table)?;
        let Some(files) = opened.open.take() else {
            return Ok(None);
        };
        let closed = io::run(files.close()).map_err(IcebergSinkError::Io)?;
        let closed = closed.map_err(|e| IcebergSinkError::Write {
            table: table.clone(),
            message: format!("closing data files: {e}"),
        })?;
        let mut entries = Vec::with_capacity(closed.len());
        for file in closed {
            let json =
                serialize_data_file_to_json(file, &opened.partition_type, opened.format_version)
                    .map_err(|e| IcebergSinkError::Write {
                        table: table.clone(),
                        message: format!("encoding a data file for the committer: {e}"),
                    })?;
            entries.push(FileEntry {
                spec_id: opened.spec.spec_id(),
                json,
            });
        }
        let records = std::mem::take(&mut opened.records);
        Ok(Some(WriteResult {
            subtask: opened.subtask,
            files: entries,
            records,
        }))
    }
}

impl<T: Data + Serialize> Operator<T> for IcebergWriterOp<T> {
    type Out = WriteResult;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let table = self.config.load_table()?;
        self.opened = Some(self.setup(&table, ctx)?);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<T>,
        _out: &mut Collector<WriteResult>,
    ) -> Result<(), UserError> {
        let table = self.config.table_name();
        let Some(opened) = self.opened.as_mut() else {
            return Err("Iceberg writer used before open".into());
        };
        let encoded =
            opened
                .encoder
                .encode(&batch)
                .map_err(|reason| IcebergSinkError::BadRecord {
                    table: table.clone(),
                    reason,
                })?;
        let Some(encoded) = encoded else {
            return Ok(());
        };
        let rows = encoded.num_rows();
        let pieces = match &opened.splitter {
            None => vec![(None, encoded)],
            Some(splitter) => splitter
                .split(&encoded)
                .map_err(|e| IcebergSinkError::BadRecord {
                    table: table.clone(),
                    reason: format!("computing partition values: {e}"),
                })?
                .into_iter()
                .map(|(k, b)| (Some(k), b))
                .collect(),
        };
        opened.queued.extend(pieces);
        opened.queued_rows += rows;
        opened.records += rows as u64;
        opened.start_write()?;
        Ok(())
    }

    fn poll_pending(
        &mut self,
        cx: &mut Context<'_>,
        _out: &mut Collector<WriteResult>,
    ) -> Poll<Result<(), UserError>> {
        let Some(opened) = self.opened.as_mut() else {
            return Poll::Pending;
        };
        let Some(writing) = opened.writing.as_mut() else {
            return Poll::Pending;
        };
        let Poll::Ready(done) = Pin::new(writing).poll(cx) else {
            return Poll::Pending;
        };
        opened.writing = None;
        let table = self.config.table_name();
        let result = opened
            .finished(done, &table)
            .and_then(|()| opened.start_write());
        Poll::Ready(result.map_err(UserError::from))
    }

    fn has_pending(&self) -> bool {
        self.opened
            .as_ref()
            .is_some_and(|o| o.writing.is_some() || !o.queued.is_empty())
    }

    fn is_input_blocked(&self) -> bool {
        self.opened
            .as_ref()
            .is_some_and(|o| o.writing.is_some() && o.queued_rows >= MAX_QUEUED_ROWS)
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        out: &mut Collector<WriteResult>,
    ) -> Result<OperatorState, UserError> {
        if let Some(result) = self.flush()? {
            out.collect(result);
        }
        Ok(OperatorState::default())
    }

    fn end_input(&mut self, out: &mut Collector<WriteResult>) -> Result<(), UserError> {
        if let Some(result) = self.flush()? {
            out.collect(result);
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), UserError> {
        // Files still open belong to no checkpoint: they stay unreferenced (see the crate docs).
        // A write still in flight finishes on the I/O runtime and drops its files.
        self.opened = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IcebergCatalog, IcebergSink};
    use arrow_schema::{DataType, Field, Schema};
    use sluice_runtime::testing::OperatorTestHarness;

    #[derive(Clone, Debug, Serialize, serde::Deserialize)]
    struct Row {
        id: i64,
    }

    fn rows(from: i64, n: i64) -> Vec<Row> {
        (from..from + n).map(|id| Row { id }).collect()
    }

    /// Writes run behind the task: a batch is handed to the I/O runtime and the next ones queue
    /// behind it, the input blocks once the queue holds `MAX_QUEUED_ROWS`, and the barrier waits
    /// for every queued row before it hands the files on.
    #[tokio::test]
    async fn writes_queue_behind_the_one_in_flight_and_block_the_input_when_full() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = IcebergCatalog::sqlite("test", dir.path()).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let (config, table, error) = IcebergSink::builder(catalog, "db.w")
            .create_if_missing(schema)
            .config();
        assert!(table.is_some() && error.is_none(), "{error:?}");
        let mut h = OperatorTestHarness::new(IcebergWriterOp::<Row>::new(config));
        h.open().unwrap();
        let third = (MAX_QUEUED_ROWS / 2 + 1) as i64;

        h.process_batch(rows(0, third)).unwrap();
        assert!(h.has_pending(), "the first batch is being written");
        assert!(!h.is_input_blocked());
        h.process_batch(rows(third, third)).unwrap();
        assert!(!h.is_input_blocked(), "one batch queued is below the bound");
        h.process_batch(rows(2 * third, third)).unwrap();
        assert!(h.is_input_blocked(), "two queued batches reach the bound");

        h.wait_pending().await.unwrap();
        assert!(!h.has_pending() && !h.is_input_blocked());
        h.process_batch(rows(3 * third, 10)).unwrap();
        h.snapshot(1).unwrap();
        let results = h.records();
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].records, 3 * third as u64 + 10);
        assert!(!h.has_pending());
    }
}
