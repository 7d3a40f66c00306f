//! Distribution modes on Zipf-skewed keys at 4 writers, table partitioned by key. Each mode must
//! produce its own file pattern: `none` spreads each key over every writer (about keys × writers
//! files per checkpoint); `hash` writes each key at one writer (at most one file per key per
//! checkpoint, unbalanced); `range` gives each writer a contiguous key range (at most keys +
//! writers − 1 files per checkpoint once the statistics are in, at most one file per key per
//! writer) with balanced writer load.

mod common;

use common::*;
use rand::SeedableRng;
use rand::distr::Distribution;
use sluice_iceberg::{DistributionMode, IcebergSink, PartitionField};
use sluice_runtime::prelude::*;
use sluice_shuffle::{RangeShuffleConfig, StatisticsType};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

const WRITERS: usize = 4;
const KEYS: u64 = 16;
const N: u64 = 60_000;

/// Zipf-distributed keys (s = 1.1), the same for every mode.
fn zipf_keys() -> Arc<Vec<u64>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let zipf = rand_distr::Zipf::new(KEYS as f64, 1.1).unwrap();
    Arc::new((0..N).map(|_| zipf.sample(&mut rng) as u64 - 1).collect())
}

fn run(mode: DistributionMode) -> Vec<(u64, Vec<AddedFile>)> {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let keys = zipf_keys();
    let env = StreamEnvironment::new();
    env.set_parallelism(WRITERS)
        .enable_checkpointing(Duration::from_millis(40));
    env.set_checkpoint_storage(checkpoints.path());
    let stream = env.from_generator(
        Generator::new(move |i| Event {
            id: i as i64,
            key: format!("k{:03}", keys[i as usize]),
            ts: 0,
        })
        .take(N)
        .rate_limit(15_000.0),
    );
    IcebergSink::builder(catalog.clone(), "db.skewed")
        .create_if_missing(schema())
        .partition_by(PartitionField::identity("key"))
        .distribution_mode(mode)
        .range_config(RangeShuffleConfig::default().statistics_type(StatisticsType::Map))
        .sink(&stream);
    env.execute_blocking("distribution").unwrap();
    let files = files_per_snapshot(&catalog, "db.skewed");
    assert_eq!(
        files
            .iter()
            .flat_map(|(_, f)| f)
            .map(|f| f.records)
            .sum::<u64>(),
        N,
        "{mode:?}"
    );
    files
}

/// Checkpoints after the first two (the range shuffle routes round robin until its first
/// statistics are in) and before the last (the end of input's remainder).
fn steady(files: &[(u64, Vec<AddedFile>)]) -> &[(u64, Vec<AddedFile>)] {
    assert!(
        files.len() >= 5,
        "only {} checkpoints committed",
        files.len()
    );
    &files[2..files.len() - 1]
}

#[test]
fn none_spreads_every_key_over_every_writer() {
    let files = run(DistributionMode::None);
    let mut writers_of: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for f in files.iter().flat_map(|(_, f)| f) {
        writers_of
            .entry(f.partition.clone())
            .or_default()
            .insert(f.writer);
    }
    // The heaviest keys (a few thousand records each) reach every writer.
    let spread = writers_of.values().filter(|w| w.len() == WRITERS).count();
    assert!(spread >= KEYS as usize / 2, "{writers_of:?}");
    for (c, fs) in steady(&files) {
        assert!(
            fs.len() > KEYS as usize + WRITERS,
            "checkpoint {c}: only {} files",
            fs.len()
        );
    }
}

#[test]
fn hash_writes_each_key_at_one_writer() {
    let files = run(DistributionMode::Hash);
    let mut writers_of: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for (c, fs) in &files {
        assert!(
            fs.len() <= KEYS as usize,
            "checkpoint {c}: {} files",
            fs.len()
        );
        for f in fs {
            writers_of
                .entry(f.partition.clone())
                .or_default()
                .insert(f.writer);
        }
    }
    assert!(writers_of.values().all(|w| w.len() == 1), "{writers_of:?}");
}

#[test]
fn range_gives_each_writer_a_clustered_range_with_balanced_load() {
    let files = run(DistributionMode::Range);
    let mut load = [0u64; WRITERS];
    for (c, fs) in steady(&files) {
        assert!(
            fs.len() < KEYS as usize + WRITERS,
            "checkpoint {c}: {} files for {KEYS} keys at {WRITERS} writers",
            fs.len()
        );
        let mut per_writer_key = BTreeSet::new();
        for f in fs {
            assert!(
                per_writer_key.insert((f.writer, f.partition.clone())),
                "checkpoint {c}: two files of {} at writer {}",
                f.partition,
                f.writer
            );
            load[f.writer] += f.records;
        }
    }
    let mean = load.iter().sum::<u64>() as f64 / WRITERS as f64;
    let max = *load.iter().max().unwrap() as f64;
    assert!(max / mean < 1.3, "writer load {load:?}");
}
