//! [`OperatorTestHarness`]: one operator instance driven by hand, as Flink's
//! `OneInputStreamOperatorTestHarness` and `KeyedOneInputStreamOperatorTestHarness`; for a
//! two-input operator (an operator over [`Either`]) also as Flink's
//! `TwoInputStreamOperatorTestHarness`, with a watermark per input.

use crate::operator::to_coordinator::{
    CoordinatorLink, DirectSlot, TO_COORDINATOR_CAPACITY, ToCoordinator,
};
use crate::operator::{Collector, ContextParts, Operator, OperatorContext};
use crate::state::OperatorState;
use sluice_core::{
    CheckpointId, Data, Either, NodeId, OperatorEvent, StreamElement, SubtaskIndex, UserError,
    Watermark,
};
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// A two-input operator (`DataStream::connect`, the joins) driven by hand: records of either
/// input, and a watermark per input, of which the operator sees the minimum, only when it
/// rises (as the runtime's input gate gives it).
///
/// ```
/// use sluice_core::{Either, Watermark};
/// use sluice_runtime::process::CoMapOperator;
/// use sluice_runtime::testing::OperatorTestHarness;
///
/// let op = CoMapOperator::new(|n: u32| Some(n as u64), |s: String| Some(s.len() as u64));
/// let mut h = OperatorTestHarness::<Either<u32, String>, _>::new(op);
/// h.process_element1_at(7, 10).unwrap();
/// h.process_element2_at("abc".to_string(), 20).unwrap();
/// h.process_watermark1(Watermark::new(30)).unwrap();
/// assert!(h.watermarks().is_empty(), "the second input holds the watermark back");
/// h.process_watermark2(Watermark::new(25)).unwrap();
/// assert_eq!(h.watermarks(), vec![Watermark::new(25)]);
/// assert_eq!(h.timed_records(), vec![(7, Some(10)), (3, Some(20))]);
/// ```
impl<A: Data, B: Data, Op: Operator<Either<A, B>>> OperatorTestHarness<Either<A, B>, Op> {
    /// Feeds one record of the first input.
    pub fn process_element1(&mut self, record: A) -> Result<(), UserError> {
        self.process_record(Either::Left(record))
    }

    /// Feeds one record of the first input with its event time.
    pub fn process_element1_at(&mut self, record: A, timestamp: i64) -> Result<(), UserError> {
        self.process_record_at(Either::Left(record), timestamp)
    }

    /// Feeds one record of the second input.
    pub fn process_element2(&mut self, record: B) -> Result<(), UserError> {
        self.process_record(Either::Right(record))
    }

    /// Feeds one record of the second input with its event time.
    pub fn process_element2_at(&mut self, record: B, timestamp: i64) -> Result<(), UserError> {
        self.process_record_at(Either::Right(record), timestamp)
    }

    /// The first input's watermark advanced to `watermark`.
    pub fn process_watermark1(&mut self, watermark: Watermark) -> Result<(), UserError> {
        self.input_watermark(0, watermark)
    }

    /// The second input's watermark advanced to `watermark`.
    pub fn process_watermark2(&mut self, watermark: Watermark) -> Result<(), UserError> {
        self.input_watermark(1, watermark)
    }

    fn input_watermark(&mut self, input: usize, watermark: Watermark) -> Result<(), UserError> {
        self.input_watermarks[input] = self.input_watermarks[input].max(watermark.timestamp());
        let min = self.input_watermarks[0].min(self.input_watermarks[1]);
        if min > self.combined_watermark {
            self.combined_watermark = min;
            return self.process_watermark(Watermark::new(min));
        }
        Ok(())
    }
}

/// Where the harnessed operator is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Built; state may still be restored.
    Created,
    /// `open` was called.
    Open,
    /// `close` was called.
    Closed,
}

/// Drives one instance of an [`Operator`] outside a job, in the order the runtime would: restore
/// (`initialize_state`), `open` (done on the first call that needs it), batches, watermarks,
/// pending asynchronous work, snapshots, checkpoint notifications, end of input, `close`.
///
/// Everything the operator emits is kept, in order, as [`StreamElement`]s: read it with
/// [`output`](Self::output), [`records`](Self::records) and [`watermarks`](Self::watermarks), or
/// take it with [`take_output`](Self::take_output). Errors returned by the operator are returned
/// as they are; a panic in the operator is not caught (the test fails with it).
///
/// A snapshot taken with [`snapshot`](Self::snapshot) restores into a new harness with
/// [`restore`](Self::restore), at the same subtask and parallelism or, for rescaling, at another
/// one: the states of all old subtasks are dealt to the new ones exactly as a job restore deals
/// them (list entries in contiguous shares, keyed entries by key group). For keyed operators,
/// [`owns_key`](Self::owns_key) tells which subtask a key belongs to, as `key_by` would route it.
///
/// Asynchronous operators (such as the async I/O operator) are driven with
/// [`poll_pending`](Self::poll_pending) (what is ready now, without waiting) and
/// [`wait_pending`](Self::wait_pending) (await until nothing is in flight). Both must run inside a
/// tokio runtime when the operator uses tokio's timers; with a paused clock
/// (`#[tokio::test(start_paused = true)]`) time advances by itself while the test awaits.
///
/// ```
/// use sluice_core::Watermark;
/// use sluice_runtime::testing::{KeyedCounter, OperatorTestHarness};
///
/// // Count keys on subtask 0 of 2, check that watermarks pass, and snapshot at checkpoint 1.
/// let mut harness = OperatorTestHarness::for_subtask(KeyedCounter::new(), 0, 2);
/// let mine: Vec<u64> = (0..20).filter(|k| harness.owns_key(k)).collect();
/// harness.process_batch(mine.clone()).unwrap();
/// harness.process_watermark(Watermark::new(5)).unwrap();
/// assert_eq!(harness.watermarks(), vec![Watermark::new(5)]);
/// let snapshot = harness.snapshot(1).unwrap();
/// harness.notify_checkpoint_complete(1).unwrap();
///
/// // Restore the snapshot (and an empty one of subtask 1) into one subtask, count again.
/// let mut restored = OperatorTestHarness::new(KeyedCounter::new())
///     .restore(vec![snapshot, Default::default()])
///     .unwrap();
/// restored.process_batch(mine.clone()).unwrap();
/// restored.end_input().unwrap();
/// restored.close().unwrap();
/// let mut counts = restored.records();
/// counts.sort();
/// assert_eq!(counts, mine.iter().map(|&k| (k, 2)).collect::<Vec<_>>());
/// ```
pub struct OperatorTestHarness<In: Data, Op: Operator<In>> {
    op: Op,
    ctx: OperatorContext,
    collector: Collector<Op::Out>,
    output: Vec<StreamElement<Op::Out>>,
    phase: Phase,
    /// What the operator sent to its coordinator, when connected with `with_coordinator`.
    sent: Option<tokio::sync::mpsc::Receiver<ToCoordinator>>,
    /// A two-input operator's watermark per input, and the minimum it was last given.
    input_watermarks: [i64; 2],
    combined_watermark: i64,
    _in: PhantomData<fn(In)>,
}

impl<In: Data, Op: Operator<In>> std::fmt::Debug for OperatorTestHarness<In, Op> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorTestHarness")
            .field("context", &self.ctx.describe())
            .field("phase", &self.phase)
            .field("output_elements", &self.output.len())
            .finish()
    }
}

impl<In: Data, Op: Operator<In>> OperatorTestHarness<In, Op> {
    /// A harness running `op` as subtask 0 of 1.
    pub fn new(op: Op) -> Self {
        Self::for_subtask(op, 0, 1)
    }

    /// A harness running `op` as subtask `subtask` of `parallelism`, with the default max
    /// parallelism.
    ///
    /// # Panics
    ///
    /// If `subtask` is not below `parallelism`.
    pub fn for_subtask(op: Op, subtask: SubtaskIndex, parallelism: usize) -> Self {
        assert!(
            subtask < parallelism,
            "subtask {subtask} of {parallelism} does not exist"
        );
        Self::with_context(
            op,
            context("test operator", subtask, parallelism, None, None),
        )
    }

    /// A harness running `op` with the given context.
    pub fn with_context(op: Op, ctx: OperatorContext) -> Self {
        OperatorTestHarness {
            op,
            ctx,
            collector: Collector::new(),
            output: Vec::new(),
            phase: Phase::Created,
            sent: None,
            input_watermarks: [i64::MIN; 2],
            combined_watermark: i64::MIN,
            _in: PhantomData,
        }
    }

    /// Sets the number of key groups (before anything else happens). Restored keyed state and
    /// [`owns_key`](Self::owns_key) use it.
    pub fn with_max_parallelism(mut self, max_parallelism: usize) -> Self {
        let c = &self.ctx;
        self.ctx = context(
            c.operator_name(),
            c.subtask_index(),
            c.parallelism(),
            Some(max_parallelism),
            None,
        );
        self
    }

    /// Gives the operator a coordinator that records what it is sent: every event the
    /// operator sends with `send_event_to_coordinator` (or `send_to_coordinator`) is kept, in
    /// order, for [`take_sent_events`](Self::take_sent_events). Call it before anything else
    /// (it makes a new context for the same subtask).
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::testing::{OperatorTestHarness, PassThrough};
    ///
    /// let reports = PassThrough::new().on_snapshot(|ctx, c| ctx.send_to_coordinator(&c.0));
    /// let mut h = OperatorTestHarness::<u64, _>::new(reports).with_coordinator();
    /// h.snapshot(7).unwrap();
    /// let sent = h.take_sent_events();
    /// assert_eq!(sluice_core::codec::decode::<u64>(sent[0].payload()).unwrap(), 7);
    /// ```
    pub fn with_coordinator(mut self) -> Self {
        let (tx, rx) = tokio::sync::mpsc::channel(TO_COORDINATOR_CAPACITY);
        let c = &self.ctx;
        self.ctx = context(
            c.operator_name(),
            c.subtask_index(),
            c.parallelism(),
            Some(c.max_parallelism()),
            Some(CoordinatorLink {
                master: tx,
                direct: DirectSlot::default(),
            }),
        );
        self.sent = Some(rx);
        self
    }

    /// The events the operator sent to its coordinator since the last call (see
    /// [`with_coordinator`](Self::with_coordinator)), in send order.
    pub fn take_sent_events(&mut self) -> Vec<OperatorEvent> {
        let mut out = Vec::new();
        if let Some(rx) = &mut self.sent {
            while let Ok(e) = rx.try_recv() {
                out.push(e.event);
            }
        }
        out
    }

    /// Restores the state `snapshots` that the old subtasks of the operator took (one per old
    /// subtask, in subtask order), dealt to this harness's subtask as a job restore would deal
    /// them at this parallelism, then calls `initialize_state`. Must come before anything else.
    pub fn restore(mut self, snapshots: Vec<OperatorState>) -> Result<Self, UserError> {
        if self.phase != Phase::Created {
            return Err("restore must come before the operator is opened".into());
        }
        let mut shares = crate::state::redistribute(
            snapshots,
            self.ctx.parallelism(),
            self.ctx.max_parallelism(),
        );
        let mine = shares.swap_remove(self.ctx.subtask_index());
        self.op.initialize_state(mine)?;
        Ok(self)
    }

    /// The operator's context.
    pub fn context(&self) -> &OperatorContext {
        &self.ctx
    }

    /// The operator instance.
    pub fn operator(&self) -> &Op {
        &self.op
    }

    /// The operator instance, mutably.
    pub fn operator_mut(&mut self) -> &mut Op {
        &mut self.op
    }

    /// Whether `key` belongs to this subtask: its key group is in this subtask's range, as
    /// `key_by` routes records.
    pub fn owns_key<K: std::hash::Hash + ?Sized>(&self, key: &K) -> bool {
        let max = self.ctx.max_parallelism();
        let group = crate::key_groups::key_group(key, max);
        crate::key_groups::subtask_for_key_group(group, max, self.ctx.parallelism())
            == self.ctx.subtask_index()
    }

    /// Calls `open` now (it is otherwise called on the first call that needs it).
    pub fn open(&mut self) -> Result<(), UserError> {
        match self.phase {
            Phase::Created => {
                self.phase = Phase::Open;
                self.op.open(&self.ctx)
            }
            Phase::Open => Ok(()),
            Phase::Closed => Err("the operator is closed".into()),
        }
    }

    /// Feeds one batch of records (an empty batch is skipped, as the runtime never sends one).
    pub fn process_batch(&mut self, batch: Vec<In>) -> Result<(), UserError> {
        self.open()?;
        if batch.is_empty() {
            return Ok(());
        }
        let result = self.op.process_batch(batch, &mut self.collector);
        self.drain(result)
    }

    /// Feeds one batch of records with their event times (one per record), as a batch behind a
    /// timestamp assigner arrives.
    ///
    /// # Panics
    /// When the two lengths differ.
    pub fn process_timed_batch(
        &mut self,
        batch: Vec<In>,
        timestamps: Vec<i64>,
    ) -> Result<(), UserError> {
        assert_eq!(batch.len(), timestamps.len(), "one timestamp per record");
        self.open()?;
        if batch.is_empty() {
            return Ok(());
        }
        self.collector.set_input_timestamps(Some(timestamps));
        let result = self.op.process_batch(batch, &mut self.collector);
        self.collector.set_input_timestamps(None);
        self.drain(result)
    }

    /// Feeds one record, as a batch of one.
    pub fn process_record(&mut self, record: In) -> Result<(), UserError> {
        self.process_batch(vec![record])
    }

    /// Feeds one record with its event time, as a batch of one.
    pub fn process_record_at(&mut self, record: In, timestamp: i64) -> Result<(), UserError> {
        self.process_timed_batch(vec![record], vec![timestamp])
    }

    /// Feeds a watermark.
    pub fn process_watermark(&mut self, watermark: Watermark) -> Result<(), UserError> {
        self.open()?;
        let result = self.op.process_watermark(watermark, &mut self.collector);
        self.drain(result)
    }

    /// Hands an operator event (as from the operator's coordinator) to the operator.
    pub fn handle_operator_event(&mut self, event: OperatorEvent) -> Result<(), UserError> {
        self.open()?;
        let result = self.op.handle_operator_event(event, &mut self.collector);
        self.drain(result)
    }

    /// Snapshots the operator's state for checkpoint `checkpoint`. What it emits while
    /// snapshotting joins the output (in a job it would precede the barrier).
    pub fn snapshot(&mut self, checkpoint: u64) -> Result<OperatorState, UserError> {
        self.open()?;
        let result = self
            .op
            .snapshot_state(CheckpointId(checkpoint), &mut self.collector);
        self.output.extend(self.collector.take_elements());
        result
    }

    /// Tells the operator that checkpoint `checkpoint` completed.
    pub fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<(), UserError> {
        self.open()?;
        self.op.notify_checkpoint_complete(CheckpointId(checkpoint))
    }

    /// Tells the operator that checkpoint `checkpoint` was aborted.
    pub fn notify_checkpoint_aborted(&mut self, checkpoint: u64) -> Result<(), UserError> {
        self.open()?;
        self.op.notify_checkpoint_aborted(CheckpointId(checkpoint))
    }

    /// Ends the input (`end_input`). Asynchronous work may still be in flight: drive it with
    /// [`wait_pending`](Self::wait_pending) before [`close`](Self::close).
    pub fn end_input(&mut self) -> Result<(), UserError> {
        self.open()?;
        let result = self.op.end_input(&mut self.collector);
        self.drain(result)
    }

    /// Closes the operator.
    pub fn close(&mut self) -> Result<(), UserError> {
        self.open()?;
        self.phase = Phase::Closed;
        self.op.close()
    }

    /// Whether asynchronous work is in flight (`has_pending`).
    pub fn has_pending(&self) -> bool {
        self.op.has_pending()
    }

    /// Whether the operator refuses input right now (`is_input_blocked`): a job would stop
    /// feeding it. The harness does not enforce it.
    pub fn is_input_blocked(&self) -> bool {
        self.op.is_input_blocked()
    }

    /// Emits whatever asynchronous work completed, without waiting: polls `poll_pending` until it
    /// is `Pending`. Returns whether anything was ready.
    pub fn poll_pending(&mut self) -> Result<bool, UserError> {
        self.open()?;
        let mut cx = Context::from_waker(Waker::noop());
        let mut progressed = false;
        loop {
            match self.op.poll_pending(&mut cx, &mut self.collector) {
                Poll::Ready(result) => {
                    progressed = true;
                    self.drain(result)?;
                }
                Poll::Pending => return Ok(progressed),
            }
        }
    }

    /// Awaits the operator's asynchronous work until nothing is in flight (`has_pending` is
    /// false), emitting what completes, as the task loop does after end of input.
    pub async fn wait_pending(&mut self) -> Result<(), UserError> {
        self.open()?;
        while self.op.has_pending() {
            let (op, collector) = (&mut self.op, &mut self.collector);
            let result = std::future::poll_fn(|cx| op.poll_pending(cx, collector)).await;
            self.drain(result)?;
        }
        Ok(())
    }

    /// Everything emitted so far, in order.
    pub fn output(&self) -> &[StreamElement<Op::Out>] {
        &self.output
    }

    /// Takes everything emitted so far, leaving the output empty.
    pub fn take_output(&mut self) -> Vec<StreamElement<Op::Out>> {
        std::mem::take(&mut self.output)
    }

    /// The records emitted so far, in order (watermarks and other elements left out).
    pub fn records(&self) -> Vec<Op::Out> {
        self.output
            .iter()
            .filter_map(|e| match e {
                StreamElement::Records(r) => Some(r.records().iter().cloned()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The records emitted so far with their event times (`None` for a record without one), in
    /// order.
    pub fn timed_records(&self) -> Vec<(Op::Out, Option<i64>)> {
        self.output
            .iter()
            .filter_map(|e| match e {
                StreamElement::Records(r) => Some(
                    r.iter_timed()
                        .map(|(r, t)| (r.clone(), t))
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The watermarks emitted so far, in order.
    pub fn watermarks(&self) -> Vec<Watermark> {
        self.output
            .iter()
            .filter_map(|e| match e {
                StreamElement::Watermark(w) => Some(*w),
                _ => None,
            })
            .collect()
    }

    /// Moves what the operator emitted into the output, then returns `result`.
    fn drain(&mut self, result: Result<(), UserError>) -> Result<(), UserError> {
        self.output.extend(self.collector.take_elements());
        result
    }
}

/// A context for a harness: operator id 0, attempt 0, no coordinator, checkpointing on (so that
/// sinks committing on checkpoints wait for notifications, as they do in a checkpointed job).
fn context(
    name: &str,
    subtask: SubtaskIndex,
    parallelism: usize,
    max_parallelism: Option<usize>,
    to_coordinator: Option<CoordinatorLink>,
) -> OperatorContext {
    OperatorContext::new(ContextParts {
        operator_id: NodeId(0),
        operator_name: name.to_string(),
        subtask_index: subtask,
        parallelism,
        max_parallelism: max_parallelism.unwrap_or(crate::DEFAULT_MAX_PARALLELISM),
        attempt_number: 0,
        metrics: Arc::new(crate::metrics::OperatorMetrics::default()),
        checkpointing: true,
        to_coordinator,
        state_backend: crate::state::StateBackend::default(),
        checkpoint_storage: None,
    })
}
