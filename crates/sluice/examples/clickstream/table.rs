//! The Iceberg table of clicks per user per minute: its schema, partition spec (hour of the
//! minute) and sort order (user), the sink in front of it (range distribution: the range shuffle
//! by hour and user, so each writer gets a contiguous, balanced range of users), a fresh start
//! (drop the table and its files), and the check that reads the committed table back with
//! iceberg-rust's scan and compares it with what the click files should give.

use crate::events::Expected;
use anyhow::{Context as _, bail};
use arrow_array::{Array, Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use rustc_hash::FxHashMap;
use sluice::shuffle::RangeShuffleConfig;
use sluice_iceberg::{
    DistributionMode, IcebergCatalog, IcebergSink, IcebergSinkBuilder, PartitionField,
    TableOverview,
};
use std::path::Path;
use std::sync::Arc;

/// The name the catalog goes by (PyIceberg and other SQL-catalog clients must use it too).
pub const CATALOG: &str = "clickstream";
/// The name of the range shuffle in front of the writers.
pub const SHUFFLE: &str = "Range shuffle: hour(minute), user";

/// The table's columns; `minute` is a timestamp so that the table can be partitioned by its
/// hour.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("user", DataType::Int64, false),
        Field::new(
            "minute",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
        Field::new("clicks", DataType::Int64, false),
        Field::new("country", DataType::Utf8, false),
        Field::new("tier", DataType::Utf8, false),
    ]))
}

/// The embedded catalog: SQLite in `warehouse/catalog.db`, tables under `warehouse`.
pub fn catalog(warehouse: &Path) -> anyhow::Result<IcebergCatalog> {
    IcebergCatalog::sqlite(CATALOG, warehouse).with_context(|| {
        format!(
            "cannot open the Iceberg warehouse in {}",
            warehouse.display()
        )
    })
}

/// The sink: the table created if missing, partitioned by `hour(minute)` and sorted by `user`,
/// with range distribution.
pub fn sink(catalog: IcebergCatalog, table: &str) -> IcebergSinkBuilder {
    IcebergSink::builder(catalog, table)
        .create_if_missing(schema())
        .partition_by(PartitionField::hour("minute"))
        .sort_by("user")
        .distribution_mode(DistributionMode::Range)
        .range_config(RangeShuffleConfig::default().name(SHUFFLE))
}

/// Drops `table` and, when it lived on the local file system, removes its files; a fresh run
/// then creates it empty.
pub fn start_fresh(catalog: &IcebergCatalog, table: &str) -> anyhow::Result<()> {
    let dropped = catalog
        .drop_table(table)
        .with_context(|| format!("cannot drop the table {table} of the last run"))?;
    if let Some(location) = dropped
        && let Some(path) = location.strip_prefix("file://")
    {
        let path = Path::new(path);
        if path.is_dir() {
            std::fs::remove_dir_all(path)
                .with_context(|| format!("cannot remove the old table's files in {location}"))?;
        }
    }
    Ok(())
}

/// What the table holds after the run.
pub struct Committed {
    /// Its rows: (user, first millisecond of the minute, clicks).
    pub rows: Vec<(u64, i64, u64)>,
    /// Its snapshots and data files.
    pub overview: TableOverview,
}

fn column<'a, A: 'static>(batch: &'a RecordBatch, i: usize, name: &str) -> anyhow::Result<&'a A> {
    match batch.column(i).as_any().downcast_ref::<A>() {
        Some(a) => Ok(a),
        None => bail!(
            "column `{name}` of the table is {}, not the type the job writes",
            batch.column(i).data_type()
        ),
    }
}

/// Reads `table` back with iceberg-rust's scan.
pub fn read_back(catalog: &IcebergCatalog, table: &str) -> anyhow::Result<Committed> {
    let batches = catalog
        .scan_table(table, Some(&["user", "minute", "clicks"]))
        .with_context(|| format!("cannot read the table {table} back"))?;
    let mut rows = Vec::new();
    for b in &batches {
        let users = column::<Int64Array>(b, 0, "user")?;
        let minutes = column::<TimestampMicrosecondArray>(b, 1, "minute")?;
        let clicks = column::<Int64Array>(b, 2, "clicks")?;
        for i in 0..b.num_rows() {
            rows.push((
                users.value(i) as u64,
                minutes.value(i) / 1_000,
                clicks.value(i) as u64,
            ));
        }
    }
    let overview = catalog
        .table_overview(table)
        .with_context(|| format!("cannot list the data files of {table}"))?;
    Ok(Committed { rows, overview })
}

/// The committed rows compared with the expected (user, minute) counts.
#[derive(Debug)]
pub struct Check {
    /// Rows in the table.
    pub rows: u64,
    /// (user, minute) keys the click files give.
    pub expected_keys: u64,
    /// Rows whose (user, minute) key appeared before.
    pub duplicates: u64,
    /// Expected keys missing from the table, or with another count.
    pub wrong: u64,
    /// Keys in the table that the click files do not give.
    pub unexpected: u64,
    /// The sum of the table's counts.
    pub clicks: u64,
    /// Clicks that passed the filters.
    pub passed: u64,
    /// Distinct users in the table.
    pub users: u64,
    /// Distinct minutes in the table.
    pub minutes: u64,
    /// The five users with most clicks, as committed.
    pub top: Vec<(u64, u64)>,
}

impl Check {
    /// Every expected (user, minute) row once, with its count, and nothing else.
    pub fn passed(&self) -> bool {
        self.rows == self.expected_keys
            && self.duplicates == 0
            && self.wrong == 0
            && self.unexpected == 0
            && self.clicks == self.passed
    }
}

/// Compares the committed rows with `expected`.
pub fn check(rows: &[(u64, i64, u64)], expected: &Expected) -> Check {
    let mut seen: FxHashMap<(u64, i64), u64> = FxHashMap::default();
    let mut duplicates = 0;
    let mut per_user: FxHashMap<u64, u64> = FxHashMap::default();
    let mut minutes = rustc_hash::FxHashSet::default();
    for &(user, minute, clicks) in rows {
        if seen.insert((user, minute), clicks).is_some() {
            duplicates += 1;
        }
        *per_user.entry(user).or_insert(0) += clicks;
        minutes.insert(minute);
    }
    let wrong = expected
        .per_minute
        .iter()
        .filter(|&(key, clicks)| seen.get(key) != Some(clicks))
        .count();
    let unexpected = seen
        .keys()
        .filter(|k| !expected.per_minute.contains_key(k))
        .count();
    let mut top: Vec<(u64, u64)> = per_user.iter().map(|(&u, &c)| (u, c)).collect();
    top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(5);
    Check {
        rows: rows.len() as u64,
        expected_keys: expected.per_minute.len() as u64,
        duplicates,
        wrong: wrong as u64,
        unexpected: unexpected as u64,
        clicks: rows.iter().map(|r| r.2).sum(),
        passed: expected.passed(),
        users: per_user.len() as u64,
        minutes: minutes.len() as u64,
        top,
    }
}
