//! A range shuffle over keys that lead with a time bucket, as an Iceberg table partitioned by
//! hour and sorted by user: the bucket moves on every third checkpoint, Auto statistics switch
//! to Sketch at once, and the downstream subtasks still receive balanced traffic. Statistics are
//! two checkpoints old when they route, so each new bucket lies above every sample they hold;
//! routed by the bounds alone (Iceberg's rule), two intervals of every three would all go to the
//! last subtask.

use sluice_core::{CheckpointId, UserError};
use sluice_runtime::prelude::*;
use sluice_shuffle::{RangeShuffle, RangeShuffleConfig, StatisticsType};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// Checkpoints per time bucket.
const CHECKPOINTS_PER_BUCKET: u64 = 3;
/// The bucket at which the test stops.
const LAST_BUCKET: u64 = 12;

/// Gives each record its key (bucket, user): the bucket is the last checkpoint this subtask
/// passed, divided by [`CHECKPOINTS_PER_BUCKET`], so every subtask moves on at the same
/// barrier; users are spread over the u64 range.
#[derive(Clone)]
struct Stamp {
    bucket: u64,
    reached: Arc<Notify>,
}

impl Operator<u64> for Stamp {
    type Out = (u64, u64);
    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<(u64, u64)>,
    ) -> Result<(), UserError> {
        for i in batch {
            out.collect((self.bucket, i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        }
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        _out: &mut Collector<(u64, u64)>,
    ) -> Result<OperatorState, UserError> {
        self.bucket = checkpoint.0 / CHECKPOINTS_PER_BUCKET;
        if self.bucket >= LAST_BUCKET {
            self.reached.notify_one();
        }
        Ok(OperatorState::default())
    }
}

/// Counts the records each downstream subtask receives.
#[derive(Clone)]
struct CountPerSubtask {
    counts: Arc<[AtomicU64; 2]>,
    subtask: usize,
}

impl Operator<(u64, u64)> for CountPerSubtask {
    type Out = (u64, u64);
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.subtask = ctx.subtask_index();
        Ok(())
    }
    fn process_batch(
        &mut self,
        batch: Vec<(u64, u64)>,
        _out: &mut Collector<(u64, u64)>,
    ) -> Result<(), UserError> {
        self.counts[self.subtask].fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advancing_time_buckets_stay_balanced_after_the_switch_to_sketch() {
    let checkpoints = tempfile::tempdir().unwrap();
    let reached = Arc::new(Notify::new());
    let counts: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(64);
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    // Each subtask sees far more than 200 distinct keys per checkpoint: Sketch from the first.
    let config = RangeShuffleConfig::default()
        .statistics_type(StatisticsType::Auto)
        .switch_thresholds(200, 100_000);
    let metrics = config.metrics();
    env.from_generator(Generator::new(|i| i).rate_limit(50_000.0))
        .transform(
            "stamp",
            Stamp {
                bucket: 0,
                reached: reached.clone(),
            },
        )
        .range_shuffle(|r: &(u64, u64)| *r, config)
        .transform(
            "count",
            CountPerSubtask {
                counts: counts.clone(),
                subtask: 0,
            },
        )
        .discard();
    let job = env.submit("advancing").unwrap();
    reached.notified().await;
    job.cancel();
    let _ = job.await;

    let report = metrics.latest().expect("global statistics were applied");
    assert_eq!(report.statistics_type, StatisticsType::Sketch);
    let (a, b) = (
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed),
    );
    let (low, high) = (a.min(b) as f64, a.max(b) as f64);
    assert!(
        low >= 0.9 * high,
        "records per downstream subtask {a} and {b}: more than 10 % apart; the shuffle routed \
         {} keys outside the sampled range by hash",
        metrics.unknown_keys()
    );
    assert!(
        metrics.unknown_keys() > 0,
        "new buckets were spread by hash"
    );
}
