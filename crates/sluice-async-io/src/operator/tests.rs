//! Operator-level tests: the operator driven by hand, with completions released one by one, so
//! snapshots can be taken with requests at every stage (running, done but not emitted, in
//! backoff, in the backlog).
//!
//! Every test runs for each way of making calls ([`CALLS`]): one call per record, and batches
//! (of one record, where a test releases completions one by one, and of several records where
//! the order of completions is free), so the batched operator passes the same tests.
//!
//! The tests run unconstrained by tokio's cooperative budget: they drive the operator by hand,
//! polling many of [`Gated`]'s tokio one-shot channels within a single poll of the test's task,
//! and once the budget is spent tokio defers those channels' wake-ups until the task yields,
//! which a hand-driven test never does. (The operator's own hand-over from a batch to its
//! records is no channel at all: a batch's outcomes come back by slot; see `calls.rs`.)

use super::*;
use crate::batch::{AsyncBatchFunction, BatchRetryScope, Batched};
use crate::function::AsyncFunction;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::task::Waker;
use tokio::sync::oneshot;

/// What the operator emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    R(u64),
    W(i64),
}

impl Emitter<u64> for Vec<Ev> {
    fn record(&mut self, r: u64, _timestamp: Option<i64>) {
        self.push(Ev::R(r));
    }
    fn watermark(&mut self, w: Watermark) {
        self.push(Ev::W(w.timestamp()));
    }
}

type Reply = oneshot::Sender<Result<Vec<u64>, String>>;

/// Every call made: its input and, until replied to, where to reply.
type CallLog = Arc<Mutex<Vec<(u64, Option<Reply>)>>>;

/// A function whose calls complete only when the test says so.
#[derive(Clone, Default)]
struct Gated {
    calls: CallLog,
}

impl AsyncFunction<u64> for Gated {
    type Out = u64;
    type Results = Vec<u64>;

    fn invoke(
        &self,
        input: u64,
    ) -> impl Future<Output = Result<Vec<u64>, UserError>> + Send + use<> {
        let (tx, rx) = oneshot::channel();
        self.calls.lock().unwrap().push((input, Some(tx)));
        async move {
            match rx.await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(e.into()),
                Err(_) => Err("reply dropped".into()),
            }
        }
    }

    fn timeout(&self, input: &u64) -> Result<Vec<u64>, UserError> {
        Ok(vec![1_000_000 + input])
    }
}

impl Gated {
    /// Inputs in the order they were invoked (retries included).
    fn calls(&self) -> Vec<u64> {
        self.calls.lock().unwrap().iter().map(|c| c.0).collect()
    }

    /// Inputs with a call waiting for its reply.
    fn open_calls(&self) -> Vec<u64> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|c| c.1.as_ref().is_some_and(|tx| !tx.is_closed()))
            .map(|c| c.0)
            .collect()
    }

    /// Replies to the oldest open call of `input`.
    fn reply(&self, input: u64, result: Result<Vec<u64>, String>) {
        let mut calls = self.calls.lock().unwrap();
        let call = calls
            .iter_mut()
            .find(|c| c.0 == input && c.1.as_ref().is_some_and(|tx| !tx.is_closed()))
            .unwrap_or_else(|| panic!("no open call for {input}"));
        let _ = call.1.take().unwrap().send(result);
    }

    fn ok(&self, input: u64) {
        self.reply(input, Ok(vec![input]));
    }
}

fn settings(
    capacity: usize,
    timeout: Option<Duration>,
    mode: Mode,
    retry: AsyncRetryStrategy<Vec<u64>>,
) -> Settings<u64, Vec<u64>> {
    Settings {
        capacity,
        timeout,
        mode,
        retry,
        key_fn: (mode == Mode::KeyOrdered).then(|| Arc::new(|x: &u64| x % 3) as KeyFn<u64>),
        metrics: AsyncMetrics::default(),
    }
}

/// [`Gated`] as a batch function: a batch completes when every record of it was replied to,
/// or fails with the first error.
#[derive(Clone)]
struct GatedBatch(Gated);

impl AsyncBatchFunction<u64> for GatedBatch {
    type Out = u64;
    type Results = Vec<u64>;

    fn invoke_batch(
        &self,
        inputs: Vec<u64>,
    ) -> impl Future<Output = Result<Vec<Vec<u64>>, UserError>> + Send + use<> {
        let calls: Vec<_> = inputs.into_iter().map(|x| self.0.invoke(x)).collect();
        futures::future::try_join_all(calls)
    }

    fn timeout(&self, input: &u64) -> Result<Vec<u64>, UserError> {
        self.0.timeout(input)
    }
}

/// How an operator under test makes its calls.
#[derive(Clone, Copy, Debug)]
enum Calls {
    PerRecord,
    /// Batches of at most this many records, sent as soon as the operator runs.
    Batched(usize),
}

/// The ways of making calls every test runs with, unless it needs completions of single
/// records to end their calls.
const CALLS: [Calls; 2] = [Calls::PerRecord, Calls::Batched(1)];

/// The operator as the tests drive it, whatever its way of making calls.
trait TestOp {
    fn on_batch(&mut self, batch: Vec<u64>, out: &mut Vec<Ev>) -> Result<(), UserError>;
    fn on_watermark(&mut self, w: Watermark, out: &mut Vec<Ev>) -> Result<(), UserError>;
    fn on_poll(&mut self, cx: &mut Context<'_>, out: &mut Vec<Ev>) -> Poll<Result<(), UserError>>;
    fn blocked(&self) -> bool;
    fn pending(&self) -> bool;
    fn restore_state(&mut self, state: OperatorState);
    /// Takes a snapshot through the runtime's interface; it must emit nothing.
    fn snapshot_state(&mut self) -> OperatorState;
}

impl<F, I> TestOp for AsyncWaitOperator<u64, F, I>
where
    F: AsyncFunction<u64, Out = u64>,
    I: Invoker<u64, F> + Send + 'static,
    I::Fut: Send + 'static,
{
    fn on_batch(&mut self, batch: Vec<u64>, out: &mut Vec<Ev>) -> Result<(), UserError> {
        AsyncWaitOperator::on_batch(self, batch, None, out)
    }
    fn on_watermark(&mut self, w: Watermark, out: &mut Vec<Ev>) -> Result<(), UserError> {
        AsyncWaitOperator::on_watermark(self, w, out)
    }
    fn on_poll(&mut self, cx: &mut Context<'_>, out: &mut Vec<Ev>) -> Poll<Result<(), UserError>> {
        AsyncWaitOperator::on_poll(self, cx, out)
    }
    fn blocked(&self) -> bool {
        AsyncWaitOperator::blocked(self)
    }
    fn pending(&self) -> bool {
        AsyncWaitOperator::pending(self)
    }
    fn restore_state(&mut self, state: OperatorState) {
        Operator::initialize_state(self, state).unwrap();
    }
    fn snapshot_state(&mut self) -> OperatorState {
        let mut out = Collector::new();
        let state = Operator::snapshot_state(self, CheckpointId(1), &mut out).unwrap();
        assert!(out.is_empty(), "a snapshot emits nothing");
        state
    }
}

/// A batched operator with explicit batch settings.
fn make_batched(
    f: Gated,
    settings: Settings<u64, Vec<u64>>,
    batching: BatchSettings,
) -> Box<dyn TestOp> {
    let batches = Batches::new(
        |b: &GatedBatch, inputs: Vec<u64>| b.invoke_batch(inputs),
        batching,
        settings.retry.clone(),
        settings.capacity,
    );
    Box::new(AsyncWaitOperator::new(
        Batched(GatedBatch(f)),
        batches,
        settings,
    ))
}

fn make(calls: Calls, f: Gated, settings: Settings<u64, Vec<u64>>) -> Box<dyn TestOp> {
    match calls {
        Calls::PerRecord => Box::new(AsyncWaitOperator::new(
            f,
            PerRecord::new(|f: &Gated, x: u64| f.invoke(x)),
            settings,
        )),
        Calls::Batched(max_size) => make_batched(
            f,
            settings,
            BatchSettings {
                max_size,
                max_delay: Duration::ZERO,
                scope: BatchRetryScope::FailedElements,
            },
        ),
    }
}

macro_rules! make_op {
    ($calls:expr, $f:expr, $settings:expr) => {
        make($calls, $f, $settings)
    };
}

/// Polls until the operator has nothing more to do right now.
macro_rules! settle {
    ($op:expr, $out:expr) => {{
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            match $op.on_poll(&mut cx, $out) {
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(e)) => panic!("operator failed: {e}"),
                Poll::Pending => break,
            }
        }
    }};
}

fn records(out: &[Ev]) -> Vec<u64> {
    out.iter()
        .filter_map(|e| match e {
            Ev::R(r) => Some(*r),
            Ev::W(_) => None,
        })
        .collect()
}

#[tokio::test]
async fn overflow_is_held_blocks_input_and_drains_in_order() {
    tokio::task::unconstrained(async move {
        for calls in CALLS {
            let f = Gated::default();
            let mut op = make_op!(
                calls,
                f.clone(),
                settings(3, None, Mode::Ordered, AsyncRetryStrategy::none())
            );
            let mut out = Vec::new();
            op.on_batch((0..10).collect(), &mut out).unwrap();
            assert!(op.blocked(), "a held overflow blocks the input");
            assert!(op.pending());
            settle!(op, &mut out);
            assert_eq!(
                f.calls(),
                vec![0, 1, 2],
                "capacity records are called; no slot was freed, nothing more is"
            );
            for i in 0..10 {
                // In flight never exceeds capacity.
                assert!(f.open_calls().len() <= 3);
                f.ok(i);
                settle!(op, &mut out);
            }
            assert_eq!(records(&out), (0..10).collect::<Vec<_>>());
            assert!(!op.blocked());
            assert!(!op.pending());
        }
    })
    .await;
}

#[tokio::test]
async fn ordered_results_wait_for_the_head_and_watermarks_keep_their_place() {
    tokio::task::unconstrained(async move {
        for calls in CALLS {
            let f = Gated::default();
            let mut op = make_op!(
                calls,
                f.clone(),
                settings(8, None, Mode::Ordered, AsyncRetryStrategy::none())
            );
            let mut out = Vec::new();
            op.on_watermark(Watermark::new(1), &mut out).unwrap();
            assert_eq!(
                out,
                vec![Ev::W(1)],
                "an idle operator forwards a watermark at once"
            );
            op.on_batch(vec![10, 11], &mut out).unwrap();
            op.on_watermark(Watermark::new(2), &mut out).unwrap();
            op.on_batch(vec![12], &mut out).unwrap();
            // As the task loop does after every batch: batched calls are made when it polls.
            settle!(op, &mut out);
            f.ok(12);
            f.ok(11);
            settle!(op, &mut out);
            assert_eq!(out, vec![Ev::W(1)]);
            f.ok(10);
            settle!(op, &mut out);
            assert_eq!(
                out,
                vec![Ev::W(1), Ev::R(10), Ev::R(11), Ev::W(2), Ev::R(12)]
            );
        }
    })
    .await;
}

#[tokio::test]
async fn an_error_names_the_input_and_attempt() {
    tokio::task::unconstrained(async move {
        for calls in CALLS {
            let f = Gated::default();
            let mut op = make_op!(
                calls,
                f.clone(),
                settings(2, None, Mode::Unordered, AsyncRetryStrategy::none())
            );
            let mut out = Vec::new();
            op.on_batch(vec![41, 42], &mut out).unwrap();
            settle!(op, &mut out);
            f.reply(42, Err("service said no".into()));
            let mut cx = Context::from_waker(Waker::noop());
            match op.on_poll(&mut cx, &mut out) {
                Poll::Ready(Err(e)) => assert_eq!(
                    e.to_string(),
                    "async function failed on input 42 (attempt 1): service said no"
                ),
                other => panic!("expected a failure, got {other:?}"),
            }
        }
    })
    .await;
}

/// Runs `inputs` (with a watermark after every `wm_every` records) through an operator with
/// `capacity`, completing calls in the order given by `order` (indices into the open calls),
/// taking a snapshot after `cut` completions. Returns what was emitted before the snapshot and
/// the snapshot.
fn run_until_snapshot(
    calls: Calls,
    mode: Mode,
    capacity: usize,
    inputs: &[u64],
    wm_every: usize,
    order: &[usize],
    cut: usize,
) -> (Vec<Ev>, OperatorState) {
    let f = Gated::default();
    let mut op = make_op!(
        calls,
        f.clone(),
        settings(capacity, None, mode, AsyncRetryStrategy::none())
    );
    let mut out = Vec::new();
    for (i, chunk) in inputs.chunks(wm_every.max(1)).enumerate() {
        op.on_batch(chunk.to_vec(), &mut out).unwrap();
        op.on_watermark(Watermark::new(i as i64), &mut out).unwrap();
    }
    settle!(op, &mut out);
    for &pick in order.iter().take(cut) {
        let open = f.open_calls();
        if open.is_empty() {
            break;
        }
        f.ok(open[pick % open.len()]);
        settle!(op, &mut out);
    }
    let state = op.snapshot_state();
    (out, state)
}

/// Restores `state` into a fresh operator and completes everything, in random order.
fn restore_and_finish(
    calls: Calls,
    mode: Mode,
    capacity: usize,
    state: OperatorState,
) -> (Vec<Ev>, Vec<u64>) {
    let f = Gated::default();
    let mut op = make_op!(
        calls,
        f.clone(),
        settings(capacity, None, mode, AsyncRetryStrategy::none())
    );
    op.restore_state(state);
    let mut out = Vec::new();
    settle!(op, &mut out);
    let mut guard = 0;
    while op.pending() {
        let open = f.open_calls();
        assert!(
            !open.is_empty(),
            "restored operator is stuck: nothing in flight"
        );
        f.ok(open[guard % open.len()]);
        settle!(op, &mut out);
        guard += 7;
    }
    (out, f.calls())
}

/// The watermarks of `out`, and whether each record respects them given its input position.
fn check_watermarks(inputs: &[u64], wm_every: usize, out: &[Ev]) {
    // Input i belongs before watermark i / wm_every.
    let mut seen_wm = -1i64;
    for e in out {
        match e {
            Ev::W(w) => {
                assert!(*w > seen_wm, "watermarks out of order: {out:?}");
                seen_wm = *w;
            }
            Ev::R(r) => {
                let pos = inputs.iter().position(|x| x == r).unwrap();
                let wm = (pos / wm_every.max(1)) as i64;
                assert!(
                    wm > seen_wm,
                    "record {r} left after watermark {seen_wm}: {out:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn snapshot_holds_every_unemitted_input_and_restore_reinvokes_in_order() {
    tokio::task::unconstrained(async move {
        for calls in CALLS {
            let inputs: Vec<u64> = (100..120).collect();
            // Capacity 4: 4 in flight, 16 in the backlog; 101, 102 and 103 complete but wait behind 100.
            let (before, state) =
                run_until_snapshot(calls, Mode::Ordered, 4, &inputs, 20, &[2, 1, 3], 3);
            assert!(before.is_empty());
            // 20 records (running, done, backlog) and the watermark after them.
            assert_eq!(state.entries().len(), 21);
            let (after, called) = restore_and_finish(calls, Mode::Ordered, 4, state);
            assert_eq!(called, inputs, "re-invoked in input order");
            assert_eq!(
                records(&after),
                inputs,
                "nothing lost, doubled or reordered"
            );
            assert_eq!(after.last(), Some(&Ev::W(0)));
        }
    })
    .await;
}

#[tokio::test]
async fn restore_with_more_entries_than_capacity_does_not_deadlock() {
    tokio::task::unconstrained(async move {
        for calls in CALLS {
            let inputs: Vec<u64> = (0..50).collect();
            let (before, state) =
                run_until_snapshot(calls, Mode::Unordered, 16, &inputs, 10, &[], 0);
            assert!(before.is_empty());
            assert_eq!(state.entries().len(), 55, "50 records and 5 watermarks");
            let f = Gated::default();
            let mut op = make_op!(
                calls,
                f.clone(),
                settings(2, None, Mode::Unordered, AsyncRetryStrategy::none())
            );
            op.restore_state(state);
            assert!(op.blocked(), "restored entries come before new input");
            let mut out = Vec::new();
            settle!(op, &mut out);
            assert_eq!(
                f.open_calls().len(),
                2,
                "only capacity requests are in flight"
            );
            let (after, _) = {
                while op.pending() {
                    let open = f.open_calls();
                    assert!(open.len() <= 2);
                    f.ok(*open.last().unwrap());
                    settle!(op, &mut out);
                }
                (out, ())
            };
            assert!(!op.blocked());
            let mut got = records(&after);
            got.sort();
            assert_eq!(got, inputs);
            check_watermarks(&inputs, 10, &after);
        }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn restore_keeps_attempts_and_the_remaining_timeout_budget() {
    tokio::task::unconstrained(async move {
        for calls in CALLS {
            let f = Gated::default();
            let retry = AsyncRetryStrategy::fixed_delay(1, Duration::from_secs(60))
                .if_empty_result()
                .build()
                .unwrap();
            let timeout = Some(Duration::from_secs(10));
            let mut op = make_op!(
                calls,
                f.clone(),
                settings(4, timeout, Mode::Unordered, retry.clone())
            );
            let mut out = Vec::new();
            op.on_batch(vec![1, 2], &mut out).unwrap();
            settle!(op, &mut out);
            f.reply(1, Ok(vec![])); // attempt 1 of record 1 is empty: backoff of 60 s
            settle!(op, &mut out);
            tokio::time::advance(Duration::from_secs(7)).await;
            settle!(op, &mut out);
            assert!(out.is_empty());
            let state = op.snapshot_state();

            let g = Gated::default();
            let mut restored = make_op!(
                calls,
                g.clone(),
                settings(4, timeout, Mode::Unordered, retry)
            );
            restored.restore_state(state);
            settle!(restored, &mut out);
            // Record 1 is called again as attempt 2 (its retry), record 2 as attempt 1 again.
            assert_eq!(g.calls(), vec![1, 2]);
            g.reply(1, Ok(vec![]));
            settle!(restored, &mut out);
            assert_eq!(
                out,
                vec![],
                "attempt 2 used the last allowed retry: its empty result is final"
            );
            assert_eq!(g.calls(), vec![1, 2], "no third call of record 1");
            // 3 s of the 10 s budget are left for record 2.
            tokio::time::advance(Duration::from_millis(2_900)).await;
            settle!(restored, &mut out);
            assert!(out.is_empty(), "timed out too early: {out:?}");
            tokio::time::advance(Duration::from_millis(200)).await;
            settle!(restored, &mut out);
            assert_eq!(
                out,
                vec![Ev::R(1_000_002)],
                "the timeout fallback of record 2"
            );
            assert!(!restored.pending());
        }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_record_restored_without_budget_times_out_without_a_call() {
    tokio::task::unconstrained(async move {
        for calls in CALLS {
            let f = Gated::default();
            let timeout = Some(Duration::from_secs(1));
            let mut op = make_op!(
                calls,
                f.clone(),
                settings(1, timeout, Mode::Ordered, AsyncRetryStrategy::none())
            );
            let mut out = Vec::new();
            op.on_batch(vec![5], &mut out).unwrap();
            settle!(op, &mut out);
            // The snapshot is taken just when the budget is used up (before the timer was handled).
            tokio::time::advance(Duration::from_secs(1)).await;
            let state = op.snapshot_state();
            let g = Gated::default();
            let mut restored = make_op!(
                calls,
                g.clone(),
                settings(1, timeout, Mode::Ordered, AsyncRetryStrategy::none())
            );
            restored.restore_state(state);
            settle!(restored, &mut out);
            tokio::time::advance(Duration::from_millis(1)).await;
            settle!(restored, &mut out);
            assert!(g.calls().is_empty(), "no budget: not called again");
            assert_eq!(out, vec![Ev::R(1_000_005)]);
        }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_batch_leaves_when_full_or_when_its_oldest_record_waited_the_delay() {
    tokio::task::unconstrained(async move {
        let f = Gated::default();
        let batching = BatchSettings {
            max_size: 3,
            max_delay: Duration::from_millis(10),
            scope: BatchRetryScope::FailedElements,
        };
        let timeout = Some(Duration::from_secs(60));
        let mut op = make_batched(
            f.clone(),
            settings(8, timeout, Mode::Ordered, AsyncRetryStrategy::none()),
            batching,
        );
        let mut out = Vec::new();
        op.on_batch(vec![1, 2, 3, 4], &mut out).unwrap();
        settle!(op, &mut out);
        assert_eq!(f.calls(), vec![1, 2, 3], "a full batch leaves at once");
        tokio::time::advance(Duration::from_millis(4)).await;
        op.on_batch(vec![5], &mut out).unwrap();
        settle!(op, &mut out);
        tokio::time::advance(Duration::from_millis(5)).await;
        settle!(op, &mut out);
        assert_eq!(f.calls(), vec![1, 2, 3], "4 waited 9 ms of 10");
        tokio::time::advance(Duration::from_millis(1)).await;
        settle!(op, &mut out);
        assert_eq!(f.calls(), vec![1, 2, 3, 4, 5], "4 waited 10 ms: [4 5] left");
        // The records waiting for their batch were in flight all along: a snapshot holds them.
        for x in [3, 1, 2, 5, 4] {
            f.ok(x);
        }
        settle!(op, &mut out);
        assert_eq!(records(&out), vec![1, 2, 3, 4, 5]);
        // With every slot taken nothing more can join: the batch leaves without waiting.
        let g = Gated::default();
        let mut full = make_batched(
            g.clone(),
            settings(2, timeout, Mode::Ordered, AsyncRetryStrategy::none()),
            batching,
        );
        full.on_batch(vec![7, 8, 9], &mut out).unwrap();
        settle!(full, &mut out);
        assert_eq!(g.calls(), vec![7, 8]);
        assert_eq!(full.snapshot_state().entries().len(), 3);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_late_answer_for_a_timed_out_record_does_not_complete_its_slots_next_record() {
    tokio::task::unconstrained(async move {
        let f = Gated::default();
        let timeout = Some(Duration::from_secs(1));
        let mut op = make_batched(
            f.clone(),
            settings(2, timeout, Mode::Unordered, AsyncRetryStrategy::none()),
            BatchSettings {
                max_size: 1,
                max_delay: Duration::ZERO,
                scope: BatchRetryScope::FailedElements,
            },
        );
        let mut out = Vec::new();
        op.on_batch(vec![1], &mut out).unwrap();
        settle!(op, &mut out);
        tokio::time::advance(Duration::from_secs(1)).await;
        settle!(op, &mut out);
        assert_eq!(out, vec![Ev::R(1_000_001)], "1 timed out");
        // 2 takes the slot 1 had; 1's batch is still out and answers now.
        op.on_batch(vec![2], &mut out).unwrap();
        settle!(op, &mut out);
        assert_eq!(f.open_calls(), vec![1, 2]);
        f.ok(1);
        settle!(op, &mut out);
        assert_eq!(
            out,
            vec![Ev::R(1_000_001)],
            "1's answer is ignored, 2 still waits"
        );
        assert!(op.pending());
        f.ok(2);
        settle!(op, &mut out);
        assert_eq!(out, vec![Ev::R(1_000_001), Ev::R(2)]);
        assert!(!op.pending());
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_retry_scope_retries_the_failed_records_or_their_whole_batch() {
    tokio::task::unconstrained(async move {
        for (scope, want) in [
            (BatchRetryScope::FailedElements, vec![1, 2, 1]),
            (BatchRetryScope::WholeBatch, vec![1, 2, 1, 2]),
        ] {
            let f = Gated::default();
            let retry = AsyncRetryStrategy::fixed_delay(1, Duration::from_millis(5))
                .if_empty_result()
                .build()
                .unwrap();
            let timeout = Some(Duration::from_secs(60));
            let mut op = make_batched(
                f.clone(),
                settings(4, timeout, Mode::Ordered, retry),
                BatchSettings {
                    max_size: 2,
                    max_delay: Duration::ZERO,
                    scope,
                },
            );
            let mut out = Vec::new();
            op.on_batch(vec![1, 2], &mut out).unwrap();
            settle!(op, &mut out);
            f.reply(1, Ok(vec![]));
            f.ok(2);
            settle!(op, &mut out);
            tokio::time::advance(Duration::from_millis(5)).await;
            settle!(op, &mut out);
            assert_eq!(f.calls(), want, "{scope:?}");
            for x in f.open_calls() {
                f.ok(x);
            }
            settle!(op, &mut out);
            assert_eq!(records(&out), vec![1, 2], "{scope:?}");
        }
    })
    .await;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Snapshot at a random point with random completions, restore at another parallelism with
    /// the runtime's redistribution (or any other split): every input is emitted exactly once
    /// overall, per-subtask order and watermarks hold.
    #[test]
    fn any_split_of_a_snapshot_loses_and_doubles_nothing(
        n in 1usize..40,
        capacity in 1usize..8,
        wm_every in 1usize..12,
        order in proptest::collection::vec(any::<usize>(), 0..40),
        cut in 0usize..40,
        mode in 0..3u8,
        new_p in 1usize..5,
        custom_split in proptest::collection::vec(0usize..4, 0..80),
        batch in 0usize..5,
    ) {
        // Batch sizes above one are fine here: completions are picked among the open calls, so
        // a batch completes once all its records were picked.
        let calls = if batch == 0 { Calls::PerRecord } else { Calls::Batched(batch) };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(tokio::task::unconstrained(async {
            let mode = [Mode::Ordered, Mode::Unordered, Mode::KeyOrdered][mode as usize];
            let inputs: Vec<u64> = (0..n as u64).collect();
            let (before, state) = run_until_snapshot(calls, mode, capacity, &inputs, wm_every, &order, cut);
            let splits: Vec<Vec<OperatorState>> = vec![
                sluice_runtime::testing::rescale_states(vec![state.clone()], new_p, 128),
                {
                    // An arbitrary (non-contiguous) assignment of entries, order kept per share.
                    let mut shares = vec![Vec::new(); 4];
                    for (i, e) in state.entries().iter().enumerate() {
                        shares[custom_split.get(i).copied().unwrap_or(0)].push(e.clone());
                    }
                    shares.into_iter().map(OperatorState::from_entries).collect()
                },
            ];
            for shares in splits {
                let mut all: BTreeMap<u64, usize> = BTreeMap::new();
                for r in records(&before) {
                    *all.entry(r).or_default() += 1;
                }
                for share in shares {
                    let (after, _) = restore_and_finish(calls, mode, capacity, share);
                    for r in records(&after) {
                        *all.entry(r).or_default() += 1;
                    }
                }
                let want: BTreeMap<u64, usize> = inputs.iter().map(|&i| (i, 1)).collect();
                assert_eq!(all, want);
            }
            // Same parallelism: one restore continues the stream with order and watermarks intact.
            let (after, _) = restore_and_finish(calls, mode, capacity, state);
            let mut whole = before.clone();
            whole.extend(after);
            check_watermarks(&inputs, wm_every, &whole);
            let recs = records(&whole);
            match mode {
                Mode::Ordered => assert_eq!(recs, inputs),
                Mode::KeyOrdered => {
                    for k in 0..3 {
                        let of_k: Vec<u64> = recs.iter().copied().filter(|r| r % 3 == k).collect();
                        let want: Vec<u64> = inputs.iter().copied().filter(|r| r % 3 == k).collect();
                        assert_eq!(of_k, want, "key {} out of order", k);
                    }
                }
                Mode::Unordered => {
                    let mut sorted = recs.clone();
                    sorted.sort();
                    assert_eq!(sorted, inputs);
                }
            }
        }));
    }
}
