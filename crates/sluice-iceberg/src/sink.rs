//! [`IcebergSink`] and its builder: which table (created if asked, with a partition spec and a
//! sort order), the Parquet file size and compression, the distribution in front of the writers
//! ([`DistributionMode`], Iceberg's `write.distribution-mode`), and how the job graph is laid
//! out: (range shuffle or key-by →) writers → committer at parallelism 1.

use crate::catalog::IcebergCatalog;
use crate::catalog::retry::{RetryPolicy, with_retries};
use crate::committer::IcebergCommitter;
use crate::committer::decide::DEFAULT_MAX_CONTINUOUS_EMPTY_COMMITS;
use crate::error::IcebergSinkError;
use crate::io;
use crate::schema::key::{KeyExtractor, PartitionField};
use crate::schema::{check_compatible, iceberg_schema_from_arrow};
use crate::writer::IcebergWriterOp;
use iceberg::spec::{
    NullOrder, SortDirection, SortField, SortOrder, Transform, UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableCreation, TableIdent};
use parquet::basic::{Compression, ZstdLevel};
use serde::Serialize;
use sluice_core::Data;
use sluice_runtime::{DataStream, DataStreamSink};
use sluice_shuffle::{RangeShuffle, RangeShuffleConfig};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;

/// How records are distributed to the writers: Iceberg's `write.distribution-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DistributionMode {
    /// `none` (the default): records stay on the subtask they arrive at; every writer may write
    /// every partition.
    #[default]
    None,
    /// `hash`: records are keyed by their partition key, so each partition is written by one
    /// writer. An unpartitioned table falls back to `none`, as in Iceberg's Flink sink.
    Hash,
    /// `range`: the range shuffle, keyed by partition key then sort order, sends balanced,
    /// clustered key ranges to the writers (heavy keys split over several). Needs a partition
    /// spec or a sort order.
    Range,
}

impl DistributionMode {
    /// Iceberg's name: `none`, `hash` or `range`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DistributionMode::None => "none",
            DistributionMode::Hash => "hash",
            DistributionMode::Range => "range",
        }
    }

    /// Parses Iceberg's name (case-insensitive).
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "none" => Some(DistributionMode::None),
            "hash" => Some(DistributionMode::Hash),
            "range" => Some(DistributionMode::Range),
            _ => None,
        }
    }
}

/// Called after each checkpoint's snapshot is committed, with the checkpoint id; an error fails
/// the job (tests use it to fail between a commit and the checkpoint's acknowledgement).
pub type AfterCommit = Arc<dyn Fn(u64) -> Result<(), String> + Send + Sync>;

/// What the writers and the committer share.
pub(crate) struct SinkConfig {
    pub(crate) catalog: IcebergCatalog,
    pub(crate) table: TableIdent,
    pub(crate) target_file_size: usize,
    pub(crate) compression: Compression,
    pub(crate) retry: RetryPolicy,
    pub(crate) job_id: Option<String>,
    pub(crate) after_commit: Option<AfterCommit>,
    pub(crate) max_continuous_empty_commits: NonZeroUsize,
}

impl SinkConfig {
    pub(crate) fn table_name(&self) -> String {
        self.table.to_string()
    }

    /// Loads the table, retrying with backoff.
    pub(crate) fn load_table(&self) -> Result<Table, IcebergSinkError> {
        let catalog = self.catalog.catalog().clone();
        let (table, retry) = (self.table.clone(), self.retry);
        let loaded =
            io::run(async move { with_retries(&retry, || catalog.load_table(&table)).await })
                .map_err(IcebergSinkError::Io)?;
        loaded.map_err(|e| IcebergSinkError::Catalog {
            catalog: self.catalog.name().to_string(),
            table: self.table_name(),
            action: "load table".to_string(),
            message: e.to_string(),
        })
    }
}

/// An exactly-once Iceberg sink: writer subtasks write Parquet data files, a single committer
/// commits each completed checkpoint's files as one snapshot. Build it with
/// [`IcebergSink::builder`], then end a stream in it with [`IcebergSinkBuilder::sink`].
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_iceberg::{IcebergCatalog, IcebergSink, DistributionMode, PartitionField};
/// use arrow_schema::{DataType, Field, Schema};
/// use std::sync::Arc;
///
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// struct Click { user: String, region: String, n: i64 }
///
/// let warehouse = tempfile::tempdir().unwrap();
/// let catalog = IcebergCatalog::sqlite("local", warehouse.path()).unwrap();
/// let schema = Arc::new(Schema::new(vec![
///     Field::new("user", DataType::Utf8, false),
///     Field::new("region", DataType::Utf8, false),
///     Field::new("n", DataType::Int64, false),
/// ]));
/// let sink = IcebergSink::builder(catalog, "db.clicks")
///     .create_if_missing(schema)
///     .partition_by(PartitionField::identity("region"))
///     .distribution_mode(DistributionMode::Hash);
///
/// let env = StreamEnvironment::new();
/// let clicks = env.from_iter((0..100i64).map(|n| Click {
///     user: format!("u{}", n % 7),
///     region: ["eu", "us"][n as usize % 2].to_string(),
///     n,
/// }));
/// sink.sink(&clicks);
/// env.execute_blocking("clicks to iceberg").unwrap();
/// ```
pub struct IcebergSink;

impl IcebergSink {
    /// A builder for the table `table` (`namespace.name`, dots separating namespace levels) of
    /// `catalog`.
    pub fn builder(catalog: IcebergCatalog, table: &str) -> IcebergSinkBuilder {
        IcebergSinkBuilder {
            catalog,
            table: table.to_string(),
            create: None,
            create_error: None,
            partition: Vec::new(),
            sort: Vec::new(),
            target_file_size: 512 * 1024 * 1024,
            compression: Compression::ZSTD(ZstdLevel::default()),
            distribution: DistributionMode::None,
            range: RangeShuffleConfig::default(),
            writer_parallelism: None,
            retry: RetryPolicy::default(),
            job_id: None,
            after_commit: None,
            max_continuous_empty_commits: DEFAULT_MAX_CONTINUOUS_EMPTY_COMMITS.get(),
        }
    }
}

/// Settings of an [`IcebergSink`].
pub struct IcebergSinkBuilder {
    catalog: IcebergCatalog,
    table: String,
    create: Option<arrow_schema::SchemaRef>,
    /// Why the record type's schema could not be derived (fails the submission).
    create_error: Option<String>,
    partition: Vec<PartitionField>,
    sort: Vec<String>,
    target_file_size: usize,
    compression: Compression,
    distribution: DistributionMode,
    range: RangeShuffleConfig,
    writer_parallelism: Option<usize>,
    retry: RetryPolicy,
    job_id: Option<String>,
    after_commit: Option<AfterCommit>,
    max_continuous_empty_commits: usize,
}

impl fmt::Debug for IcebergSinkBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IcebergSinkBuilder")
            .field("catalog", &self.catalog)
            .field("table", &self.table)
            .field("partition", &self.partition)
            .field("sort", &self.sort)
            .field("target_file_size", &self.target_file_size)
            .field("distribution", &self.distribution)
            .finish_non_exhaustive()
    }
}

impl IcebergSinkBuilder {
    /// Creates the table (and its namespace) if it does not exist, with the records' Arrow
    /// schema (field ids are assigned in order), the partition spec of
    /// [`partition_by`](Self::partition_by) and the sort order of [`sort_by`](Self::sort_by). When
    /// the table exists, the schema must fit it (checked before submit).
    pub fn create_if_missing(mut self, schema: arrow_schema::SchemaRef) -> Self {
        self.create = Some(schema);
        self.create_error = None;
        self
    }

    /// Creates the table if it does not exist, as [`create_if_missing`](Self::create_if_missing),
    /// with the schema derived from the record type `T` (traced through its `Deserialize` impl:
    /// see [`schema::serde_type`](crate::schema::serde_type) for the type mapping). A type
    /// with a field that has no Iceberg type (`u64`, an enum with data, ...) fails the
    /// submission, naming the field. Feature `serde-schema` (on by default).
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_iceberg::{IcebergCatalog, IcebergSink};
    ///
    /// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
    /// struct Reading { sensor: String, celsius: f64, note: Option<String> }
    ///
    /// let warehouse = tempfile::tempdir().unwrap();
    /// let catalog = IcebergCatalog::sqlite("local", warehouse.path()).unwrap();
    /// let env = StreamEnvironment::new();
    /// let readings = env.from_iter((0..10).map(|i| Reading {
    ///     sensor: format!("s{}", i % 3),
    ///     celsius: 20.0 + i as f64,
    ///     note: None,
    /// }));
    /// IcebergSink::builder(catalog, "db.readings")
    ///     .create_if_missing_for::<Reading>()
    ///     .sink(&readings);
    /// env.execute_blocking("readings").unwrap();
    /// ```
    #[cfg(feature = "serde-schema")]
    pub fn create_if_missing_for<T: for<'de> serde::Deserialize<'de>>(mut self) -> Self {
        match crate::schema::arrow_schema_for::<T>() {
            Ok(schema) => {
                self.create = Some(schema);
                self.create_error = None;
            }
            Err(reason) => {
                self.create = None;
                self.create_error = Some(reason);
            }
        }
        self
    }

    /// Adds a partition field (for a table this sink creates; the distribution keys use it too).
    pub fn partition_by(mut self, field: PartitionField) -> Self {
        self.partition.push(field);
        self
    }

    /// Adds a sort column, ascending (for a table this sink creates, and for the range key).
    pub fn sort_by(mut self, column: &str) -> Self {
        self.sort.push(column.to_string());
        self
    }

    /// Rolls data files at this size in bytes (Iceberg's `write.target-file-size-bytes`, default
    /// 512 MiB).
    pub fn target_file_size(mut self, bytes: usize) -> Self {
        self.target_file_size = bytes;
        self
    }

    /// Parquet compression (default zstd, as Iceberg's `write.parquet.compression-codec`).
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// The distribution in front of the writers (default [`DistributionMode::None`]).
    pub fn distribution_mode(mut self, mode: DistributionMode) -> Self {
        self.distribution = mode;
        self
    }

    /// The range shuffle's settings, for [`DistributionMode::Range`].
    pub fn range_config(mut self, config: RangeShuffleConfig) -> Self {
        self.range = config;
        self
    }

    /// The writers' parallelism (default: the environment's).
    pub fn writer_parallelism(mut self, parallelism: usize) -> Self {
        self.writer_parallelism = Some(parallelism);
        self
    }

    /// Retries of catalog calls (loads and commits) before the job fails.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The job id recorded in snapshot summaries (`sluice.job-id`) when the job starts without a
    /// checkpoint; by default a new UUID. A restored job keeps the id in its checkpoint.
    pub fn job_id(mut self, id: &str) -> Self {
        self.job_id = Some(id.to_string());
        self
    }

    /// Commits a checkpoint without data files when it is the `n`-th such checkpoint in a row,
    /// as a snapshot that only records the checkpoint, so the table's max committed checkpoint
    /// moves on (Iceberg's `flink.max-continuous-empty-commits`, default 10). A checkpoint with
    /// files is always committed, and any commit starts the count again. `n` must be positive:
    /// 0 fails the submission.
    pub fn max_continuous_empty_commits(mut self, n: usize) -> Self {
        self.max_continuous_empty_commits = n;
        self
    }

    /// Calls `hook` after each checkpoint's commit; an error fails the job there.
    pub fn after_commit(mut self, hook: AfterCommit) -> Self {
        self.after_commit = Some(hook);
        self
    }

    pub(crate) fn ident(&self) -> Result<TableIdent, IcebergSinkError> {
        let parts: Vec<&str> = self.table.split('.').collect();
        if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
            return Err(IcebergSinkError::Config {
                table: self.table.clone(),
                reason: "the table must be named `namespace.name`".to_string(),
            });
        }
        TableIdent::from_strs(parts).map_err(|e| IcebergSinkError::Config {
            table: self.table.clone(),
            reason: e.to_string(),
        })
    }

    /// Checks the settings that need no table.
    fn check_settings(&self) -> Result<(), IcebergSinkError> {
        if self.max_continuous_empty_commits == 0 {
            return Err(IcebergSinkError::Config {
                table: self.table.clone(),
                reason: "max_continuous_empty_commits (Iceberg's \
                         flink.max-continuous-empty-commits) must be positive, got 0"
                    .to_string(),
            });
        }
        Ok(())
    }

    /// Loads the table, creating it if asked and missing; checks the records' schema against it.
    pub(crate) fn prepare(&self, ident: &TableIdent) -> Result<Table, IcebergSinkError> {
        if let Some(reason) = &self.create_error {
            return Err(IcebergSinkError::IncompatibleSchema {
                table: self.table.clone(),
                reason: reason.clone(),
            });
        }
        let catalog = self.catalog.catalog().clone();
        let catalog_err = |action: &str, message: String| IcebergSinkError::Catalog {
            catalog: self.catalog.name().to_string(),
            table: self.table.clone(),
            action: action.to_string(),
            message,
        };
        let (id, retry) = (ident.clone(), self.retry);
        let exists =
            io::run(async move { with_retries(&retry, || catalog.table_exists(&id)).await })
                .map_err(IcebergSinkError::Io)?
                .map_err(|e| catalog_err("check that the table exists", e.to_string()))?;
        let records = match &self.create {
            Some(arrow) => Some(iceberg_schema_from_arrow(arrow).map_err(|reason| {
                IcebergSinkError::IncompatibleSchema {
                    table: self.table.clone(),
                    reason,
                }
            })?),
            None => None,
        };
        let table = if exists {
            let catalog = self.catalog.catalog().clone();
            let id = ident.clone();
            io::run(async move { with_retries(&retry, || catalog.load_table(&id)).await })
                .map_err(IcebergSinkError::Io)?
                .map_err(|e| catalog_err("load table", e.to_string()))?
        } else {
            let Some(schema) = records.clone() else {
                return Err(catalog_err(
                    "load table",
                    "the table does not exist (ask the sink to create it with `create_if_missing`)"
                        .to_string(),
                ));
            };
            let mut spec = UnboundPartitionSpec::builder();
            for p in &self.partition {
                let source =
                    schema
                        .field_by_name(p.source())
                        .ok_or_else(|| IcebergSinkError::Config {
                            table: self.table.clone(),
                            reason: format!(
                                "partition column `{}` is not in the schema",
                                p.source()
                            ),
                        })?;
                spec = spec
                    .add_partition_field(source.id, p.name(), p.transform())
                    .map_err(|e| IcebergSinkError::Config {
                        table: self.table.clone(),
                        reason: format!("partition field `{}`: {e}", p.name()),
                    })?;
            }
            let mut order = SortOrder::builder();
            for s in &self.sort {
                let source = schema
                    .field_by_name(s)
                    .ok_or_else(|| IcebergSinkError::Config {
                        table: self.table.clone(),
                        reason: format!("sort column `{s}` is not in the schema"),
                    })?;
                order.with_sort_field(SortField {
                    source_id: source.id,
                    transform: Transform::Identity,
                    direction: SortDirection::Ascending,
                    null_order: NullOrder::First,
                });
            }
            let order = order.build(&schema).map_err(|e| IcebergSinkError::Config {
                table: self.table.clone(),
                reason: format!("sort order: {e}"),
            })?;
            let creation = TableCreation::builder()
                .name(ident.name().to_string())
                .schema(schema)
                .partition_spec(spec.build())
                .sort_order(order)
                .build();
            let catalog = self.catalog.catalog().clone();
            let namespace: NamespaceIdent = ident.namespace().clone();
            io::run(async move {
                if !catalog.namespace_exists(&namespace).await? {
                    catalog
                        .create_namespace(&namespace, Default::default())
                        .await?;
                }
                catalog.create_table(&namespace, creation).await
            })
            .map_err(IcebergSinkError::Io)?
            .map_err(|e| catalog_err("create table", e.to_string()))?
        };
        if let Some(records) = &records {
            check_compatible(table.metadata().current_schema(), records).map_err(|reason| {
                IcebergSinkError::IncompatibleSchema {
                    table: self.table.clone(),
                    reason,
                }
            })?;
        }
        Ok(table)
    }

    /// Creates / loads and checks the table; returns the shared configuration, the table (when
    /// it could be prepared) and the error that must fail the submission (when not).
    pub(crate) fn config(&self) -> (Arc<SinkConfig>, Option<Table>, Option<String>) {
        let prepared = self.check_settings().and_then(|()| {
            let ident = self.ident()?;
            let table = self.prepare(&ident)?;
            Ok((ident, table))
        });
        let (ident, table, error) = match prepared {
            Ok((ident, table)) => (Some(ident), Some(table), None),
            Err(e) => (None, None, Some(e.to_string())),
        };
        let ident = ident.unwrap_or_else(|| {
            TableIdent::new(NamespaceIdent::new("invalid".into()), "invalid".into())
        });
        let config = Arc::new(SinkConfig {
            catalog: self.catalog.clone(),
            table: ident,
            target_file_size: self.target_file_size,
            compression: self.compression,
            retry: self.retry,
            job_id: self.job_id.clone(),
            after_commit: self.after_commit.clone(),
            // 0 fails the submission (`check_settings`).
            max_continuous_empty_commits: NonZeroUsize::new(self.max_continuous_empty_commits)
                .unwrap_or(DEFAULT_MAX_CONTINUOUS_EMPTY_COMMITS),
        });

        (config, table, error)
    }

    /// Ends `stream` in the sink: (distribution →) writers → committer (parallelism 1). The
    /// table is created (if asked) and checked now; anything wrong with it or with the settings
    /// fails the job's submission with the error, naming the catalog, table or field.
    pub fn sink<T: Data + Serialize>(self, stream: &DataStream<T>) -> DataStreamSink {
        let (config, table, mut error) = self.config();

        // The distribution keys come from the table's own spec and sort order when it exists.
        let writer = IcebergWriterOp::<T>::new(config.clone());
        let name = "Iceberg writer";
        let mut writers = None;
        if let Some(table) = &table {
            let (partition, sort) = table_keys(table, &self.partition, &self.sort);
            let schema = table.metadata().current_schema();
            match self.distribution {
                DistributionMode::None => {}
                DistributionMode::Hash if partition.is_empty() => {
                    tracing::warn!(table = %self.table, "hash distribution on an unpartitioned table: falling back to none");
                }
                DistributionMode::Hash => match KeyExtractor::new(schema, &partition, &[]) {
                    Ok(keys) => {
                        writers = Some(
                            stream
                                .key_by(move |r: &T| keys.key_of(r))
                                .transform(name, writer.clone()),
                        );
                    }
                    Err(reason) => {
                        error.get_or_insert(format!(
                            "Iceberg sink for table `{}`: {reason}",
                            self.table
                        ));
                    }
                },
                DistributionMode::Range => match KeyExtractor::new(schema, &partition, &sort) {
                    Ok(keys) if keys.is_empty() => {
                        error.get_or_insert(format!(
                            "Iceberg sink for table `{}`: invalid write distribution mode: range. Need to define sort order or partition spec.",
                            self.table
                        ));
                    }
                    Ok(keys) => {
                        writers = Some(
                            stream
                                .range_shuffle(move |r: &T| keys.key_of(r), self.range.clone())
                                .transform(name, writer.clone()),
                        );
                    }
                    Err(reason) => {
                        error.get_or_insert(format!(
                            "Iceberg sink for table `{}`: {reason}",
                            self.table
                        ));
                    }
                },
            }
        }
        let mut writers = writers.unwrap_or_else(|| stream.transform(name, writer));
        if let Some(p) = self.writer_parallelism {
            writers = writers.parallelism(p);
        }
        if let Some(message) = error {
            writers = writers.reject_at_submit(message);
        }
        writers
            .rebalance()
            .sink_to_exactly_once(IcebergCommitter::new(config))
            .name("Iceberg committer")
            .parallelism(1)
    }
}

/// The partition fields and sort columns of an existing table (identity, day and hour fields;
/// other transforms are left out of the distribution key), or the builder's when the table
/// has none.
fn table_keys(
    table: &Table,
    partition: &[PartitionField],
    sort: &[String],
) -> (Vec<PartitionField>, Vec<String>) {
    let metadata = table.metadata();
    let schema = metadata.current_schema();
    let name_of = |id: i32| schema.field_by_id(id).map(|f| f.name.clone());
    let mut fields = Vec::new();
    for f in metadata.default_partition_spec().fields() {
        let Some(source) = name_of(f.source_id) else {
            continue;
        };
        match f.transform {
            Transform::Identity => fields.push(PartitionField::Identity(source)),
            Transform::Day => fields.push(PartitionField::Day(source)),
            Transform::Hour => fields.push(PartitionField::Hour(source)),
            _ => {}
        }
    }
    let mut columns: Vec<String> = metadata
        .default_sort_order()
        .fields
        .iter()
        .filter_map(|f| name_of(f.source_id))
        .collect();
    if fields.is_empty() {
        fields = partition.to_vec();
    }
    if columns.is_empty() {
        columns = sort.to_vec();
    }
    (fields, columns)
}
