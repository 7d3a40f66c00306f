//! The sluice side of the checkpoint scenario: the pipeline's keyed job (generator -> map ->
//! filter -> key_by -> sum per key) with its sums in keyed state, optional ballast state, and the
//! operators that mark checkpoint instants in a [`Timeline`].

use super::timeline::Timeline;
use crate::scenarios::pipeline::workload::{digest, generate, keep, key, transform};
use anyhow::{Context, bail};
use sluice::checkpoint::CheckpointSettings;
use sluice::core::CheckpointId;
use sluice::failover::RestartStrategy;
use sluice::prelude::*;
use sluice::state::ValueState;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Extra state the summing operator holds and writes at every checkpoint; records never touch
/// it. Built once before the job starts and shared (read-only) by the operator's subtasks.
pub enum Ballast {
    /// No extra state: the sums alone (10 000 keys).
    None,
    /// An opaque byte buffer; subtask `s` of `p` writes its share `[s*n/p, (s+1)*n/p)` as one
    /// list entry, a plain copy (the cheapest snapshot an operator can take).
    Bytes(Vec<u8>),
    /// A `ValueState<u64, u64>` with many keys, written by key group like the sums (parallelism
    /// 1 only: the keys are not split by owner). Behind a lock only because a snapshot takes the
    /// state mutably; one subtask takes it.
    Keyed(std::sync::Mutex<ValueState<u64, u64>>),
}

impl Ballast {
    /// A byte buffer of `bytes` pseudo-random bytes.
    pub fn bytes(bytes: usize) -> Ballast {
        let mut v = Vec::with_capacity(bytes);
        let mut i = 0u64;
        while v.len() < bytes {
            let word = transform(generate(i)).to_le_bytes();
            let take = word.len().min(bytes - v.len());
            v.extend_from_slice(&word[..take]);
            i += 1;
        }
        Ballast::Bytes(v)
    }

    /// A keyed state whose encoded snapshot is about `bytes` long: scrambled u64 keys and values
    /// take about 20 bytes per entry in the codec's variable-length encoding.
    pub fn keyed(bytes: usize) -> Ballast {
        let entries = (bytes / 20) as u64;
        let mut state = ValueState::new("ballast");
        for i in 0..entries {
            let k = generate(i ^ 0x5555_5555);
            state.update(k, transform(k));
        }
        Ballast::Keyed(std::sync::Mutex::new(state))
    }
}

/// Sums per key in a `ValueState`, snapshotted (with the ballast) at every checkpoint; marks its
/// snapshots and completion notifications; at end of input adds the digest of its sums to a
/// shared total. Emits nothing.
#[derive(Clone)]
struct SumPerKey {
    sums: ValueState<u64, u64>,
    ballast: Arc<Ballast>,
    max_parallelism: usize,
    subtask: usize,
    parallelism: usize,
    timeline: Arc<Timeline>,
    digest: Arc<AtomicU64>,
}

impl Operator<u64> for SumPerKey {
    type Out = ();

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.max_parallelism = ctx.max_parallelism();
        self.subtask = ctx.subtask_index();
        self.parallelism = ctx.parallelism();
        if matches!(*self.ballast, Ballast::Keyed(_)) && self.parallelism > 1 {
            return Err("keyed ballast is only supported at parallelism 1".into());
        }
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        _out: &mut Collector<()>,
    ) -> Result<(), UserError> {
        for x in batch {
            let s = self.sums.get_or_default(key(&x));
            *s = s.wrapping_add(x);
        }
        Ok(())
    }

    fn end_input(&mut self, _out: &mut Collector<()>) -> Result<(), UserError> {
        self.digest.fetch_add(
            digest(self.sums.entries()?.iter().map(|(k, v)| (k, v))),
            Ordering::Relaxed,
        );
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        _out: &mut Collector<()>,
    ) -> Result<OperatorState, UserError> {
        let start = Instant::now();
        let mut state = OperatorState::default();
        self.sums.snapshot_into(self.max_parallelism, &mut state)?;
        match &*self.ballast {
            Ballast::None => {}
            Ballast::Bytes(b) => {
                let (s, p) = (self.subtask, self.parallelism.max(1));
                state.push(b[s * b.len() / p..(s + 1) * b.len() / p].to_vec());
            }
            Ballast::Keyed(v) => v
                .lock()
                .map_err(|_| "the keyed ballast's lock is poisoned")?
                .snapshot_into(self.max_parallelism, &mut state)?,
        }
        let end = Instant::now();
        let bytes = state.entries().iter().map(Vec::len).sum::<usize>()
            + state
                .keyed_entries()
                .iter()
                .map(|e| e.data.len())
                .sum::<usize>();
        self.timeline
            .mark_snapshot(checkpoint.0, start, end, bytes as u64);
        Ok(state)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        self.timeline.mark_complete(checkpoint.0);
        Ok(())
    }
}

/// Passes records through unchanged; chained right after the source, its snapshot marks when
/// the source task took the barrier.
#[derive(Clone)]
struct SourceMark(Arc<Timeline>);

impl Operator<u64> for SourceMark {
    type Out = u64;

    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        out.emit_batch(batch);
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        _out: &mut Collector<u64>,
    ) -> Result<OperatorState, UserError> {
        self.0.mark_source(checkpoint.0);
        Ok(OperatorState::default())
    }
}

/// How a job checkpoints.
pub enum Checkpoints<'a> {
    /// Not at all.
    Off,
    /// Every `interval`, into `dir`.
    Every(Duration, &'a Path),
    /// Only when the driver asks (`JobHandle::trigger_checkpoint`), into `dir`.
    Driven(&'a Path),
}

/// A job ready to run, with what it reports into.
pub struct Job {
    /// The environment holding the job.
    pub env: StreamEnvironment,
    /// The digest of the sums, added to at end of input (bounded jobs only).
    pub digest: Arc<AtomicU64>,
    /// The checkpoint marks.
    pub timeline: Arc<Timeline>,
}

/// generator (`records`, or unbounded) -> mark -> map -> filter -> key_by -> sum per key in
/// keyed state (-> discard), at `parallelism`.
pub fn keyed_job(
    records: Option<u64>,
    parallelism: usize,
    checkpoints: Checkpoints<'_>,
    ballast: Arc<Ballast>,
) -> Job {
    let env = StreamEnvironment::new();
    env.set_parallelism(parallelism);
    // A failure must surface, not be retried behind the measurement.
    env.set_restart_strategy(RestartStrategy::none());
    match checkpoints {
        Checkpoints::Off => {}
        Checkpoints::Every(interval, dir) => {
            env.enable_checkpointing(interval);
            env.set_checkpoint_storage(dir);
        }
        Checkpoints::Driven(dir) => {
            // No periodic trigger within any run of the bench.
            env.set_checkpoint_settings(CheckpointSettings::every(Duration::from_secs(24 * 3600)));
            env.set_checkpoint_storage(dir);
        }
    }
    let timeline = Arc::new(Timeline::default());
    let digest = Arc::new(AtomicU64::new(0));
    let generator = match records {
        Some(n) => Generator::new(generate).take(n),
        None => Generator::new(generate),
    };
    env.from_generator(generator)
        .process(SourceMark(timeline.clone()))
        .name("Mark")
        .map(transform)
        .filter(keep)
        .key_by(key)
        .process(SumPerKey {
            sums: ValueState::new("sums"),
            ballast,
            max_parallelism: 0,
            subtask: 0,
            parallelism: 1,
            timeline: timeline.clone(),
            digest: digest.clone(),
        })
        .name("Sum per key")
        .discard();
    Job {
        env,
        digest,
        timeline,
    }
}

/// Runs a bounded job to its end; returns the digest of its sums and how many checkpoints
/// completed.
pub async fn run_bounded(job: Job) -> anyhow::Result<(u64, u64)> {
    let result = job.env.execute("checkpoint-throughput").await?;
    Ok((
        job.digest.load(Ordering::Relaxed),
        result.completed_checkpoints,
    ))
}

/// Runs an unbounded job with driven checkpoints: `warmup` then `count` times, waits `pause`,
/// asks for a checkpoint and waits for its completion notification (at most `timeout`). Then
/// cancels the job. Returns the ids of the `count` measured checkpoints; their trigger instants
/// are in the job's timeline.
pub async fn drive(
    job: &Job,
    warmup: usize,
    count: usize,
    pause: Duration,
    timeout: Duration,
) -> anyhow::Result<Vec<u64>> {
    let mut handle = job.env.submit("checkpoint-duration")?;
    let mut completed = job.timeline.completed();
    let mut measured = Vec::with_capacity(count);
    for n in 0..warmup + count {
        tokio::time::sleep(pause).await;
        let before = *completed.borrow_and_update();
        let start = Instant::now();
        if let Err(e) = handle.trigger_checkpoint().await {
            bail!("could not trigger a checkpoint: {e}");
        }
        let id = tokio::select! {
            done = completed.wait_for(|c| *c > before) => done.map(|c| *c).ok(),
            ended = &mut handle => bail!("the job ended while checkpointing: {ended:?}"),
            () = tokio::time::sleep(timeout) => None,
        };
        let Some(id) = id else {
            handle.cancel();
            let _ = handle.await;
            bail!(
                "checkpoint {} did not complete within {timeout:?}",
                before + 1
            );
        };
        job.timeline.mark_trigger(id, start);
        if n >= warmup {
            measured.push(id);
        }
    }
    handle.cancel();
    match handle.await {
        Ok(_) | Err(JobError::Cancelled) => Ok(measured),
        Err(e) => Err(e).context("the checkpointed job failed"),
    }
}
