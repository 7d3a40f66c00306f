//! Shared by the integration tests: the record type, its Arrow schema, a SQLite catalog in a
//! temporary directory, and reading a table back with iceberg-rust's scan.

#![allow(dead_code)]

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use futures::TryStreamExt;
use iceberg::TableIdent;
use sluice_iceberg::IcebergCatalog;
use std::sync::Arc;

/// One input record: `id` is unique, `key` is the partition / sort key, `ts` a timestamp in
/// microseconds.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Event {
    pub id: i64,
    pub key: String,
    pub ts: i64,
}

pub const MICROS_PER_HOUR: i64 = 3_600_000_000;

pub fn event(i: u64, keys: u64) -> Event {
    Event {
        id: i as i64,
        key: format!("k{:03}", i % keys),
        ts: (i % 48) as i64 * MICROS_PER_HOUR,
    }
}

pub fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("key", DataType::Utf8, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
    ]))
}

/// A fresh SQLite catalog in `dir`.
pub fn catalog(dir: &std::path::Path) -> IcebergCatalog {
    IcebergCatalog::sqlite("test", dir).unwrap()
}

/// Runs `f` to completion on a runtime of its own (the tests are synchronous; iceberg-rust is
/// async).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// The current schema of `table` and every record batch a scan of it returns (`columns`: a
/// projection, or every column); no batches before the first snapshot.
pub fn scan(
    catalog: &IcebergCatalog,
    table: &str,
    columns: Option<&[&str]>,
) -> (iceberg::spec::SchemaRef, Vec<RecordBatch>) {
    let catalog = catalog.catalog().clone();
    let ident = TableIdent::from_strs(table.split('.')).unwrap();
    block_on(async move {
        let table = catalog.load_table(&ident).await.unwrap();
        let schema = table.metadata().current_schema().clone();
        if table.metadata().current_snapshot().is_none() {
            return (schema, Vec::new());
        }
        let scan = match columns {
            Some(columns) => table.scan().select(columns.iter().copied()),
            None => table.scan(),
        };
        let batches = scan
            .build()
            .unwrap()
            .to_arrow()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        (schema, batches)
    })
}

/// Every row of `table` (ids and keys), read with iceberg-rust's scan.
pub fn read_rows(catalog: &IcebergCatalog, table: &str) -> Vec<(i64, String)> {
    let (_, batches) = scan(catalog, table, Some(&["id", "key"]));
    let mut rows = Vec::new();
    for b in batches {
        let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let keys = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        for i in 0..b.num_rows() {
            rows.push((ids.value(i), keys.value(i).to_string()));
        }
    }
    rows
}

/// The table's snapshots, oldest first: (summary properties, data files added).
pub fn snapshots(
    catalog: &IcebergCatalog,
    table: &str,
) -> Vec<std::collections::HashMap<String, String>> {
    let catalog = catalog.catalog().clone();
    let ident = TableIdent::from_strs(table.split('.')).unwrap();
    block_on(async move {
        let table = catalog.load_table(&ident).await.unwrap();
        let mut snaps: Vec<_> = table.metadata().snapshots().cloned().collect();
        snaps.sort_by_key(|s| s.sequence_number());
        snaps
            .iter()
            .map(|s| s.summary().additional_properties.clone())
            .collect()
    })
}

/// Data files of the current snapshot: (partition key string, record count, file size, path).
pub fn data_files(catalog: &IcebergCatalog, table: &str) -> Vec<(String, u64, u64, String)> {
    let catalog = catalog.catalog().clone();
    let ident = TableIdent::from_strs(table.split('.')).unwrap();
    block_on(async move {
        let table = catalog.load_table(&ident).await.unwrap();
        if table.metadata().current_snapshot().is_none() {
            return Vec::new();
        }
        let tasks: Vec<_> = table
            .scan()
            .build()
            .unwrap()
            .plan_files()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let mut files = Vec::new();
        for t in tasks {
            files.push((
                format!("{:?}", t.partition),
                t.record_count.unwrap_or(0),
                t.file_size_in_bytes,
                t.data_file_path.clone(),
            ));
        }
        files
    })
}

/// One data file as a snapshot added it.
#[derive(Clone, Debug)]
pub struct AddedFile {
    /// The writer subtask (from the file name's prefix).
    pub writer: usize,
    /// The partition value, as text.
    pub partition: String,
    pub records: u64,
    pub bytes: u64,
}

/// The files each snapshot added, oldest snapshot first, with the checkpoint it committed.
pub fn files_per_snapshot(catalog: &IcebergCatalog, table: &str) -> Vec<(u64, Vec<AddedFile>)> {
    let catalog = catalog.catalog().clone();
    let ident = TableIdent::from_strs(table.split('.')).unwrap();
    block_on(async move {
        let table = catalog.load_table(&ident).await.unwrap();
        let metadata = table.metadata();
        let mut snaps: Vec<_> = metadata.snapshots().cloned().collect();
        snaps.sort_by_key(|s| s.sequence_number());
        let mut out = Vec::new();
        for s in snaps {
            let checkpoint =
                s.summary().additional_properties["sluice.max-committed-checkpoint-id"]
                    .parse()
                    .unwrap();
            let bytes = table
                .file_io()
                .new_input(s.manifest_list())
                .unwrap()
                .read()
                .await
                .unwrap();
            let list =
                iceberg::spec::ManifestList::parse_with_version(&bytes, metadata.format_version())
                    .unwrap();
            let mut files = Vec::new();
            for m in list.entries() {
                if m.added_snapshot_id != s.snapshot_id() {
                    continue;
                }
                let manifest = m.load_manifest(table.file_io()).await.unwrap();
                for e in manifest.entries() {
                    let f = e.data_file();
                    let name = f.file_path().rsplit('/').next().unwrap();
                    files.push(AddedFile {
                        writer: name[..5].parse().unwrap(),
                        partition: format!("{:?}", f.partition()),
                        records: f.record_count(),
                        bytes: f.file_size_in_bytes(),
                    });
                }
            }
            out.push((checkpoint, files));
        }
        out
    })
}

/// The checksum `read_with_pyiceberg.py` prints for rows of (id, key).
pub fn pyiceberg_checksum(rows: impl IntoIterator<Item = (i64, String)>) -> u64 {
    const P: u64 = (1 << 61) - 1;
    rows.into_iter().fold(0, |acc, (id, key)| {
        let bytes: u64 = key.bytes().map(u64::from).sum();
        (acc + (id as u64 * 31 + bytes) % P) % P
    })
}
