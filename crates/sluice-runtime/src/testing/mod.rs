//! Test utilities (compiled with the `testing` feature): fault injection, an operator test
//! harness, a keyed counter with checkpointed state, and a seeded random number generator.
//!
//! - [`OperatorTestHarness`] (`harness.rs`): one operator driven by hand: batches, watermarks,
//!   snapshots and restores (also at another parallelism), checkpoint notifications, end of
//!   input and asynchronous pending work;
//! - [`FailureInjector`]: a pass-through operator that fails on plan;
//! - [`CoordinatorFaultInjector`] (`coordinator.rs`): operator coordinators that fail on plan
//!   (an error, a job failure through the context's hook, or a panic on the coordinator thread),
//!   and [`IgnoreEvents`], coordinator logic that accepts every event;
//! - [`KeyedCounter`]: keyed counts in checkpointed state, exact under failures, and
//!   [`CountingPassThrough`], which also passes its records through;
//! - [`InputGate`] (`gate.rs`): a pass-through that stops taking input after some records per
//!   subtask, to hold a job mid-way for a savepoint or a cancel;
//! - [`PassThrough`] (`pass_through.rs`): a pass-through operator whose hooks signal batches,
//!   snapshots, completed checkpoints and end of input, to watch a running job (or to send
//!   events to its coordinator);
//! - [`SplitMix64`]: a seeded random number generator; [`rescale_states`]: a restore's
//!   redistribution of states.
//!
//! [`FailureInjector`] is an operator that passes records through unchanged and panics when its
//! plan says so: at a record count of one subtask, with a seeded probability per batch, or while
//! snapshotting. A shared budget limits how many failures happen over the whole job (across
//! restarts), so a test can inject exactly N failures and still expect the job to finish. The
//! first injected panic installs a panic hook that reports injected panics on one line, without
//! a backtrace, and passes every other panic to the previous hook.
//!
//! ```
//! use sluice_runtime::prelude::*;
//! use sluice_runtime::testing::FailureInjector;
//!
//! let env = StreamEnvironment::new();
//! env.set_parallelism(2);
//! let fail = FailureInjector::at_record(1, 50);
//! let _out = env.from_iter(0u64..1_000).process(fail.clone()).collect();
//! let err = env.execute_blocking("boom").unwrap_err();
//! assert!(err.to_string().contains("injected failure"), "{err}");
//! assert_eq!(err.task_failure().unwrap().subtask, 1);
//! assert_eq!(fail.injected(), 1);
//! ```

mod coordinator;
mod gate;
mod harness;
mod pass_through;
mod services;

pub use coordinator::{CoordinatorFault, CoordinatorFaultInjector, FaultyLogic, IgnoreEvents};
pub use gate::InputGate;
pub use harness::OperatorTestHarness;
pub use pass_through::{HookResult, PassThrough};
pub use services::{create_s3_bucket, required_env};

use crate::operator::{Collector, Operator, OperatorContext};
use crate::state::{OperatorState, ValueState};
use sluice_core::{CheckpointId, Data, UserError};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The start of every injected panic's message.
const INJECTED: &str = "injected failure";

/// Installs, once per process, a panic hook that reports injected panics on one line (without a
/// backtrace) and hands every other panic to the hook that was there before.
fn quiet_injected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = sluice_core::panic_message(info.payload());
            if message.starts_with(INJECTED) {
                eprintln!("(expected) {message}");
            } else {
                previous(info);
            }
        }));
    });
}

/// `probability` (clamped to `0..=1`) in millionths, as the injectors' seeded triggers draw it.
fn per_million(probability: f64) -> u32 {
    (probability.clamp(0.0, 1.0) * 1e6) as u32
}

/// The failures an injector may still inject, and how many it did, shared by its clones (so
/// counted over the whole job, across restarts).
#[derive(Clone, Debug)]
struct Budget {
    left: Arc<AtomicU32>,
    injected: Arc<AtomicU32>,
}

impl Budget {
    /// One failure to inject.
    fn new() -> Self {
        Budget {
            left: Arc::new(AtomicU32::new(1)),
            injected: Arc::new(AtomicU32::new(0)),
        }
    }

    /// Sets how many failures are left.
    fn set(&self, failures: u32) {
        self.left.store(failures, Ordering::SeqCst);
    }

    /// Takes one failure from the budget; false when none is left.
    fn take(&self) -> bool {
        self.left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
            .is_ok()
    }

    /// Counts one injected failure; returns its number (1-based).
    fn count(&self) -> u32 {
        self.injected.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// How many failures were injected.
    fn injected(&self) -> u32 {
        self.injected.load(Ordering::SeqCst)
    }
}

#[derive(Clone, Copy, Debug)]
enum Trigger {
    /// Subtask `subtask` panics when it has seen `records` records in the current attempt.
    AtRecord { subtask: usize, records: u64 },
    /// Every batch panics with this probability (per million), from a seeded generator.
    Random { per_million: u32, seed: u64 },
}

/// A pass-through operator that panics according to a plan. Clones share the failure budget.
#[derive(Clone, Debug)]
pub struct FailureInjector {
    trigger: Trigger,
    in_snapshot: bool,
    budget: Budget,
    seen: u64,
    subtask: usize,
    rng: u64,
    fire_at_snapshot: bool,
}

impl FailureInjector {
    fn new(trigger: Trigger) -> Self {
        FailureInjector {
            trigger,
            in_snapshot: false,
            budget: Budget::new(),
            seen: 0,
            subtask: 0,
            rng: 0,
            fire_at_snapshot: false,
        }
    }

    /// Subtask `subtask` panics once, when it has seen `records` records.
    pub fn at_record(subtask: usize, records: u64) -> Self {
        Self::new(Trigger::AtRecord { subtask, records })
    }

    /// Every batch, on any subtask, panics with `probability`, drawn from `seed` (and the subtask
    /// and attempt, so that runs are reproducible).
    pub fn seeded(probability: f64, seed: u64) -> Self {
        Self::new(Trigger::Random {
            per_million: per_million(probability),
            seed,
        })
    }

    /// Panics while snapshotting instead: at the first checkpoint after the trigger fired.
    pub fn during_snapshot(mut self) -> Self {
        self.in_snapshot = true;
        self
    }

    /// At most `failures` failures over the whole job (default 1).
    pub fn times(self, failures: u32) -> Self {
        self.budget.set(failures);
        self
    }

    /// How many failures were injected so far.
    pub fn injected(&self) -> u32 {
        self.budget.injected()
    }

    fn next_random(&mut self) -> u64 {
        let mut r = SplitMix64(self.rng);
        let v = r.next_u64();
        self.rng = r.0;
        v
    }

    fn armed(&mut self, batch_len: usize) -> bool {
        match self.trigger {
            Trigger::AtRecord { subtask, records } => {
                let before = self.seen;
                self.seen = self.seen.saturating_add(batch_len as u64);
                subtask == self.subtask && before < records && self.seen >= records
            }
            Trigger::Random { per_million, .. } => {
                self.next_random() % 1_000_000 < u64::from(per_million)
            }
        }
    }

    fn take_budget(&self) -> bool {
        self.budget.take()
    }

    fn fail(&self, where_: &str) -> ! {
        quiet_injected_panics();
        let n = self.budget.count();
        panic!("{INJECTED} #{n} {where_} (subtask {})", self.subtask);
    }
}

impl<T: Data> Operator<T> for FailureInjector {
    type Out = T;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.subtask = ctx.subtask_index();
        self.seen = 0;
        self.fire_at_snapshot = false;
        if let Trigger::Random { seed, .. } = self.trigger {
            self.rng = seed
                ^ ((ctx.subtask_index() as u64) << 32)
                ^ u64::from(ctx.attempt_number()).wrapping_mul(0x1000_0000_01b3);
        }
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<T>, out: &mut Collector<T>) -> Result<(), UserError> {
        if self.armed(batch.len()) {
            if self.in_snapshot {
                self.fire_at_snapshot = true;
            } else if self.take_budget() {
                self.fail("while processing records");
            }
        }
        out.forward_batch(batch);
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        _out: &mut Collector<T>,
    ) -> Result<OperatorState, UserError> {
        if self.fire_at_snapshot {
            self.fire_at_snapshot = false;
            if self.take_budget() {
                self.fail("while snapshotting");
            }
        }
        Ok(OperatorState::default())
    }
}

/// A small, fast, seeded random number generator (SplitMix64) for reproducible tests.
///
/// ```
/// use sluice_runtime::testing::SplitMix64;
/// let mut a = SplitMix64(7);
/// let mut b = SplitMix64(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!((3..=9).contains(&a.range(3, 9)));
/// ```
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// Counts records per key (the record is the key) in checkpointed keyed state and emits every
/// `(key, count)` at end of input: with exactly-once state, the counts are exact after any number
/// of failures and restores.
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::testing::KeyedCounter;
///
/// let env = StreamEnvironment::new();
/// let out = env.from_iter(vec![3u64, 1, 3]).key_by(|k| *k).process(KeyedCounter::new()).collect();
/// env.execute_blocking("count").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec![(1, 1), (3, 2)]);
/// ```
#[derive(Clone, Debug)]
pub struct KeyedCounter {
    counts: ValueState<u64, u64>,
    max_parallelism: usize,
}

impl Default for KeyedCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyedCounter {
    /// A counter with no counts.
    pub fn new() -> Self {
        KeyedCounter {
            counts: ValueState::new("counts"),
            max_parallelism: crate::DEFAULT_MAX_PARALLELISM,
        }
    }

    /// Counts one record of `key`.
    fn count(&mut self, key: u64) {
        *self.counts.get_or_default(key) += 1;
    }
}

impl Operator<u64> for KeyedCounter {
    type Out = (u64, u64);

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.max_parallelism = ctx.max_parallelism();
        ctx.attach_keyed_state(&mut self.counts)?;
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        _out: &mut Collector<(u64, u64)>,
    ) -> Result<(), UserError> {
        for k in batch {
            self.count(k);
        }
        match self.counts.take_error() {
            None => Ok(()),
            Some(e) => Err(e.into()),
        }
    }

    fn end_input(&mut self, out: &mut Collector<(u64, u64)>) -> Result<(), UserError> {
        self.counts.for_each_mut(|k, v| {
            out.collect((*k, *v));
            Ok::<(), UserError>(())
        })
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        _out: &mut Collector<(u64, u64)>,
    ) -> Result<OperatorState, UserError> {
        let mut s = OperatorState::default();
        self.counts.snapshot_into(self.max_parallelism, &mut s)?;
        Ok(s)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.counts.restore_from(&state)?;
        Ok(())
    }
}

/// Passes `(key, value)` records through unchanged and counts them per key in checkpointed keyed
/// state, as [`KeyedCounter`] does; at end of input emits one `(key, u64::MAX - count)` marker
/// per key with its final count. With values below `u64::MAX / 2`, a test tells the markers
/// from the records by their value and checks both the records and the keyed state that a
/// job committed, after any number of failures, restores or savepoints.
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::testing::CountingPassThrough;
///
/// let env = StreamEnvironment::new();
/// let out = env
///     .from_iter(vec![(3u64, 10u64), (1, 11), (3, 12)])
///     .key_by(|r: &(u64, u64)| r.0)
///     .process(CountingPassThrough::new())
///     .collect();
/// env.execute_blocking("count").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec![(1, 11), (1, u64::MAX - 1), (3, 10), (3, 12), (3, u64::MAX - 2)]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct CountingPassThrough {
    counter: KeyedCounter,
}

impl CountingPassThrough {
    /// A pass-through with no counts.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Operator<(u64, u64)> for CountingPassThrough {
    type Out = (u64, u64);

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.counter.open(ctx)
    }

    fn process_batch(
        &mut self,
        batch: Vec<(u64, u64)>,
        out: &mut Collector<(u64, u64)>,
    ) -> Result<(), UserError> {
        for r in &batch {
            self.counter.count(r.0);
        }
        if let Some(e) = self.counter.counts.take_error() {
            return Err(e.into());
        }
        out.forward_batch(batch);
        Ok(())
    }

    fn end_input(&mut self, out: &mut Collector<(u64, u64)>) -> Result<(), UserError> {
        self.counter.counts.for_each_mut(|k, c| {
            out.collect((*k, u64::MAX - *c));
            Ok::<(), UserError>(())
        })
    }

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        out: &mut Collector<(u64, u64)>,
    ) -> Result<OperatorState, UserError> {
        self.counter.snapshot_state(checkpoint, out)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.counter.initialize_state(state)
    }
}

/// Deals the states snapshotted by the `old.len()` subtasks of an operator to `new_parallelism`
/// new subtasks exactly as a restore does: at the same parallelism each subtask gets its own
/// state back; otherwise list entries are cut into contiguous, even shares and keyed entries go
/// to the subtask owning their key group (of `max_parallelism`).
///
/// ```
/// use sluice_runtime::OperatorState;
/// use sluice_runtime::testing::rescale_states;
///
/// let old = vec![
///     OperatorState::from_entries(vec![vec![1], vec![2], vec![3]]),
///     OperatorState::from_entries(vec![vec![4]]),
/// ];
/// let new = rescale_states(old, 3, 128);
/// assert_eq!(new[0].entries(), &[vec![1], vec![2]]);
/// assert_eq!(new[2].entries(), &[vec![4]]);
/// ```
pub fn rescale_states(
    old: Vec<OperatorState>,
    new_parallelism: usize,
    max_parallelism: usize,
) -> Vec<OperatorState> {
    crate::state::redistribute(old, new_parallelism, max_parallelism)
}
