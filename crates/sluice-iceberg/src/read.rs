//! Reading a table back, as a user checks what a job committed: [`IcebergCatalog::scan_table`]
//! (the current snapshot's rows, through iceberg-rust's scan), [`IcebergCatalog::table_overview`]
//! (its snapshots and data files, with the writer subtask that wrote each) and
//! [`IcebergCatalog::drop_table`] (for a job that starts a table afresh). Each call runs on the
//! sink's I/O runtime and waits for it, so it can be made from synchronous code or a tokio task
//! (where it waits inside `block_in_place`, as the sink's own calls do).

use crate::catalog::IcebergCatalog;
use crate::error::IcebergSinkError;
use crate::io;
use arrow_array::RecordBatch;
use futures::TryStreamExt;
use iceberg::TableIdent;

/// One data file of a table's current snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataFileInfo {
    /// The file's location.
    pub path: String,
    /// Its partition value, as text (empty braces for an unpartitioned table).
    pub partition: String,
    /// Records in it.
    pub records: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// The writer subtask that wrote it, when the file's name says so (files the sink wrote
    /// start with the writer's index).
    pub writer: Option<usize>,
}

/// What a table holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableOverview {
    /// The table's location.
    pub location: String,
    /// Snapshots in its history (one per committed checkpoint, for tables the sink writes).
    pub snapshots: usize,
    /// The data files of the current snapshot.
    pub files: Vec<DataFileInfo>,
}

impl TableOverview {
    /// Records in the current snapshot.
    pub fn records(&self) -> u64 {
        self.files.iter().map(|f| f.records).sum()
    }
}

/// `namespace.name` as a table identifier.
fn ident(catalog: &IcebergCatalog, table: &str) -> Result<TableIdent, IcebergSinkError> {
    let parts: Vec<&str> = table.split('.').collect();
    if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(IcebergSinkError::Config {
            table: table.to_string(),
            reason: format!(
                "the table must be named `namespace.name` (catalog `{}`)",
                catalog.name()
            ),
        });
    }
    TableIdent::from_strs(parts).map_err(|e| IcebergSinkError::Config {
        table: table.to_string(),
        reason: e.to_string(),
    })
}

impl IcebergCatalog {
    fn failed(&self, table: &str, action: &str) -> impl FnOnce(String) -> IcebergSinkError {
        let (catalog, table, action) = (
            self.name().to_string(),
            table.to_string(),
            action.to_string(),
        );
        move |message| IcebergSinkError::Catalog {
            catalog,
            table,
            action,
            message,
        }
    }

    /// Every row of the current snapshot of `table` (`namespace.name`), read with iceberg-rust's
    /// scan, as Arrow record batches; `columns` projects (`None`: every column). A table without
    /// a snapshot has no batches.
    ///
    /// ```
    /// use sluice_iceberg::{IcebergCatalog, IcebergSink};
    /// use sluice_runtime::prelude::*;
    /// use arrow_schema::{DataType, Field, Schema};
    /// use std::sync::Arc;
    ///
    /// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
    /// struct Row { n: i64 }
    ///
    /// let warehouse = tempfile::tempdir().unwrap();
    /// let catalog = IcebergCatalog::sqlite("local", warehouse.path()).unwrap();
    /// let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    /// let env = StreamEnvironment::new();
    /// let rows = env.from_iter((0..10).map(|n| Row { n }));
    /// IcebergSink::builder(catalog.clone(), "db.rows").create_if_missing(schema).sink(&rows);
    /// env.execute_blocking("rows").unwrap();
    ///
    /// let batches = catalog.scan_table("db.rows", Some(&["n"])).unwrap();
    /// assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 10);
    /// let overview = catalog.table_overview("db.rows").unwrap();
    /// assert_eq!(overview.records(), 10);
    /// assert_eq!(overview.snapshots, 1);
    /// ```
    pub fn scan_table(
        &self,
        table: &str,
        columns: Option<&[&str]>,
    ) -> Result<Vec<RecordBatch>, IcebergSinkError> {
        let ident = ident(self, table)?;
        let catalog = self.catalog().clone();
        let columns: Option<Vec<String>> =
            columns.map(|c| c.iter().map(|s| s.to_string()).collect());
        io::run(async move {
            let table = catalog
                .load_table(&ident)
                .await
                .map_err(|e| e.to_string())?;
            if table.metadata().current_snapshot().is_none() {
                return Ok(Vec::new());
            }
            let scan = match columns {
                Some(columns) => table.scan().select(columns),
                None => table.scan(),
            };
            let stream = scan
                .build()
                .map_err(|e| e.to_string())?
                .to_arrow()
                .await
                .map_err(|e| e.to_string())?;
            stream.try_collect().await.map_err(|e| e.to_string())
        })
        .map_err(IcebergSinkError::Io)?
        .map_err(self.failed(table, "scan"))
    }

    /// The snapshots and current data files of `table` (`namespace.name`).
    pub fn table_overview(&self, table: &str) -> Result<TableOverview, IcebergSinkError> {
        let ident = ident(self, table)?;
        let catalog = self.catalog().clone();
        io::run(async move {
            let table = catalog
                .load_table(&ident)
                .await
                .map_err(|e| e.to_string())?;
            let metadata = table.metadata();
            let mut overview = TableOverview {
                location: metadata.location().to_string(),
                snapshots: metadata.snapshots().count(),
                files: Vec::new(),
            };
            if metadata.current_snapshot().is_none() {
                return Ok(overview);
            }
            let tasks: Vec<_> = table
                .scan()
                .build()
                .map_err(|e| e.to_string())?
                .plan_files()
                .await
                .map_err(|e| e.to_string())?
                .try_collect()
                .await
                .map_err(|e| e.to_string())?;
            for t in tasks {
                overview.files.push(DataFileInfo {
                    writer: writer_of(&t.data_file_path),
                    partition: match &t.partition {
                        Some(p) => format!("{p:?}"),
                        None => "{}".to_string(),
                    },
                    records: t.record_count.unwrap_or(0),
                    bytes: t.file_size_in_bytes,
                    path: t.data_file_path,
                });
            }
            Ok(overview)
        })
        .map_err(IcebergSinkError::Io)?
        .map_err(self.failed(table, "read table overview"))
    }

    /// Drops `table` (`namespace.name`) from the catalog if it exists; returns its location then
    /// (its files stay where they are: remove them there if they should go too), `None` when
    /// there was no such table.
    pub fn drop_table(&self, table: &str) -> Result<Option<String>, IcebergSinkError> {
        let ident = ident(self, table)?;
        let catalog = self.catalog().clone();
        io::run(async move {
            if !catalog
                .table_exists(&ident)
                .await
                .map_err(|e| e.to_string())?
            {
                return Ok(None);
            }
            let location = catalog
                .load_table(&ident)
                .await
                .map_err(|e| e.to_string())?
                .metadata()
                .location()
                .to_string();
            catalog
                .drop_table(&ident)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Some(location))
        })
        .map_err(IcebergSinkError::Io)?
        .map_err(self.failed(table, "drop table"))
    }
}

/// The writer subtask in a data file's name (`00001-0-<uuid>-....parquet`: subtask, attempt).
fn writer_of(path: &str) -> Option<usize> {
    let name = path.rsplit('/').next()?;
    let (index, _) = name.split_once('-')?;
    (index.len() == 5).then(|| index.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::writer_of;

    #[test]
    fn the_writer_comes_from_the_file_name() {
        assert_eq!(
            writer_of("file:///w/db/t/data/00003-1-0b7c-00001.parquet"),
            Some(3)
        );
        assert_eq!(writer_of("file:///w/db/t/data/part-0.parquet"), None);
        assert_eq!(writer_of("file:///w/db/t/data/1234-x.parquet"), None);
        assert_eq!(writer_of(""), None);
    }
}
