//! Failures: a panic or an error in user code fails the job with the operator, subtask and
//! message named, and every other task of the job is stopped before `execute` returns.
//!
//! The jobs read unbounded generators, so a task that was not stopped would never end. Each
//! generator closure and operator instance holds a [`LiveGuard`](common::LiveGuard); once
//! `execute` has returned, no instance of any subtask may be alive.

mod common;

use common::{Guarded, LiveCounter};
use sluice_runtime::key_groups::{key_group, subtask_for_key_group};
use sluice_runtime::prelude::*;
use sluice_runtime::{JobError, TaskFailure};

fn task_failure(result: Result<JobResult, JobError>) -> TaskFailure {
    match result {
        Err(JobError::TaskFailed(f)) => f,
        other => panic!("expected a task failure, got {other:?}"),
    }
}

/// An unbounded generator whose every subtask instance is counted by `live`.
fn counted_source(env: &StreamEnvironment, live: &LiveCounter) -> DataStream<u64> {
    let guard = live.guard();
    env.from_generator(Generator::new(move |i| {
        let _alive = &guard;
        i
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_map_at_subtask_2_of_4_fails_the_job_naming_it_and_stops_every_task() {
    let live = LiveCounter::new();
    let env = StreamEnvironment::new();
    env.set_parallelism(4).set_batch_size(64);
    // Generator subtask s makes the indices s, s + 4, ...; the chained map sees the same share,
    // so only map subtask 2 sees `i % 4 == 2`.
    counted_source(&env, &live)
        .map(|i| {
            if i % 4 == 2 && i >= 40_000 {
                panic!("boom at record {i}");
            }
            i
        })
        .name("explode")
        .key_by(|i: &u64| i % 64)
        .process(Guarded::new(&live))
        .name("downstream")
        .discard();
    // A second pipeline shares no channel with the failing one: only the job master can stop it.
    counted_source(&env, &live)
        .rebalance()
        .process(Guarded::new(&live))
        .name("bystander")
        .discard();
    let failure = task_failure(env.execute("panic").await);

    assert_eq!(failure.operator_name, "explode");
    assert_eq!(failure.subtask, 2);
    assert_eq!(failure.parallelism, 4);
    assert!(
        failure.message.contains("boom at record 40002"),
        "{}",
        failure.message
    );
    let text = JobError::TaskFailed(failure).to_string();
    assert!(
        text.contains("'explode'") && text.contains("subtask 2 of 4"),
        "{text}"
    );
    // 8 generator instances and 8 downstream operators ran; none outlives `execute`.
    assert!(live.peak() >= 16, "peak {}", live.peak());
    assert_eq!(live.live(), 0, "some task still runs after the job failed");
}

/// Fails with an error (no panic) on one record, after a keyed exchange.
#[derive(Clone)]
struct RejectRecord {
    bad: u64,
    _alive: common::LiveGuard,
}

impl Operator<u64> for RejectRecord {
    type Out = u64;
    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        for r in batch {
            if r == self.bad {
                return Err(format!("record {r} is not acceptable").into());
            }
            out.collect(r);
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_returned_by_a_user_operator_fails_the_job_naming_it() {
    const BAD: u64 = 123_457;
    let live = LiveCounter::new();
    let env = StreamEnvironment::new();
    env.set_parallelism(3);
    counted_source(&env, &live)
        .key_by(|i: &u64| *i)
        .process(RejectRecord {
            bad: BAD,
            _alive: live.guard(),
        })
        .name("validate")
        .discard();
    let failure = task_failure(env.execute("error").await);

    assert_eq!(failure.operator_name, "validate");
    assert_eq!(
        failure.subtask,
        subtask_for_key_group(key_group(&BAD, 128), 128, 3),
        "the failing subtask is the one that owns the bad record's key"
    );
    assert_eq!(failure.parallelism, 3);
    assert!(
        failure.message.contains("record 123457 is not acceptable"),
        "{}",
        failure.message
    );
    assert_eq!(live.live(), 0, "some task still runs after the job failed");
}

/// Fails in `open` on one subtask, before it processed anything.
#[derive(Clone)]
struct FailingOpen {
    _alive: common::LiveGuard,
}

impl Operator<u64> for FailingOpen {
    type Out = u64;
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        if ctx.subtask_index() == 1 {
            return Err("no connection".into());
        }
        Ok(())
    }
    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        out.emit_batch(batch);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_in_open_fails_the_job() {
    let live = LiveCounter::new();
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    counted_source(&env, &live)
        .rebalance()
        .transform(
            "connect",
            FailingOpen {
                _alive: live.guard(),
            },
        )
        .discard();
    let failure = task_failure(env.execute("open error").await);
    assert_eq!(
        (failure.operator_name.as_str(), failure.subtask),
        ("connect", 1)
    );
    assert!(
        failure.message.contains("no connection"),
        "{}",
        failure.message
    );
    assert_eq!(live.live(), 0);
}

/// A user sink that rejects its input.
#[derive(Clone)]
struct RejectingSink;

impl Sink<u64> for RejectingSink {
    fn write_batch(&mut self, _batch: Vec<u64>) -> Result<(), UserError> {
        Err("disk full".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_in_a_sink_fails_the_job_naming_the_sink() {
    let live = LiveCounter::new();
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    counted_source(&env, &live)
        .rebalance()
        .sink_to(RejectingSink)
        .name("files");
    let failure = task_failure(env.execute("sink error").await);
    assert_eq!(failure.operator_name, "files");
    assert!(failure.message.contains("disk full"), "{}", failure.message);
    assert_eq!(live.live(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_generator_fails_the_job_naming_the_source() {
    let live = LiveCounter::new();
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let guard = live.guard();
    env.from_generator(Generator::new(move |i| {
        let _alive = &guard;
        assert!(i != 1_001, "cannot make record {i}");
        i
    }))
    .name("numbers")
    .rebalance()
    .process(Guarded::new(&live))
    .discard();
    let failure = task_failure(env.execute("source panic").await);
    // Index 1001 belongs to generator subtask 1 (odd indices).
    assert_eq!(
        (failure.operator_name.as_str(), failure.subtask),
        ("numbers", 1)
    );
    assert!(
        failure.message.contains("cannot make record 1001"),
        "{}",
        failure.message
    );
    assert_eq!(live.live(), 0);
}
