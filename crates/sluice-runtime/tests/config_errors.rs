//! Bad configuration is a clear `JobError::InvalidJob` from `submit`, before any user code runs.
//!
//! Every job here counts calls into its user code (generator, map, operator `open`); they must all
//! still be zero after the error.

use sluice_runtime::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts every call into user code of the job it is used in.
#[derive(Clone, Default)]
struct Calls(Arc<AtomicU64>);

impl Calls {
    fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A pass-through operator that counts its `open` calls.
#[derive(Clone)]
struct CountOpens(Calls);

impl Operator<u64> for CountOpens {
    type Out = u64;
    fn open(&mut self, _ctx: &OperatorContext) -> Result<(), UserError> {
        self.0.bump();
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

/// A source whose generator and map count their calls, then an operator counting its opens.
fn counted_pipeline(env: &StreamEnvironment, calls: &Calls) -> DataStream<u64> {
    let (c1, c2) = (calls.clone(), calls.clone());
    env.from_generator(
        Generator::new(move |i| {
            c1.bump();
            i
        })
        .take(1_000),
    )
    .map(move |i| {
        c2.bump();
        i
    })
    .name("counted map")
    .process(CountOpens(calls.clone()))
    .name("counted open")
}

/// Submits, expects `InvalidJob`, checks that nothing ran, and returns the message.
async fn invalid(env: &StreamEnvironment, calls: &Calls) -> String {
    let message = match env.submit("invalid") {
        Err(JobError::InvalidJob(m)) => m,
        Err(e) => panic!("expected an invalid-job error, got {e:?}"),
        Ok(_) => panic!("an invalid job was submitted"),
    };
    // Give any task that might have been spawned a chance to run before looking.
    tokio::task::yield_now().await;
    assert_eq!(calls.get(), 0, "user code ran although the job was invalid");
    message
}

#[tokio::test]
async fn parallelism_zero_on_an_operator_is_rejected_naming_it() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    counted_pipeline(&env, &calls)
        .map(|i| i + 1)
        .name("broken map")
        .parallelism(0)
        .discard();
    let m = invalid(&env, &calls).await;
    assert!(
        m.contains("'broken map'") && m.contains("parallelism"),
        "{m}"
    );
}

#[tokio::test]
async fn default_parallelism_zero_is_rejected() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    env.set_parallelism(0);
    counted_pipeline(&env, &calls).discard();
    let m = invalid(&env, &calls).await;
    assert!(m.contains("parallelism") && m.contains('0'), "{m}");
}

#[tokio::test]
async fn parallelism_above_max_parallelism_is_rejected() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    env.set_max_parallelism(8);
    counted_pipeline(&env, &calls)
        .rebalance()
        .map(|i| i)
        .name("too wide")
        .parallelism(9)
        .discard();
    let m = invalid(&env, &calls).await;
    assert!(
        m.contains("'too wide'") && m.contains("max parallelism"),
        "{m}"
    );
}

#[tokio::test]
async fn a_forward_edge_between_different_parallelisms_is_rejected() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    env.set_parallelism(2);
    counted_pipeline(&env, &calls)
        .forward()
        .map(|i| i)
        .name("wider")
        .parallelism(3)
        .discard();
    let m = invalid(&env, &calls).await;
    assert!(
        m.contains("forward") && m.contains("'counted open'") && m.contains("'wider'"),
        "{m}"
    );
}

#[tokio::test]
async fn a_job_without_a_sink_is_rejected() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    let _dangling = counted_pipeline(&env, &calls).map(|i| i * 2);
    let m = invalid(&env, &calls).await;
    assert!(m.contains("no sink"), "{m}");
}

#[tokio::test]
async fn an_empty_job_is_rejected() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    let m = invalid(&env, &calls).await;
    assert!(m.contains("no sink"), "{m}");
}

#[tokio::test]
async fn batch_size_zero_is_rejected() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    env.set_batch_size(0);
    counted_pipeline(&env, &calls).discard();
    let m = invalid(&env, &calls).await;
    assert!(m.contains("batch size"), "{m}");
}

#[tokio::test]
async fn channel_capacity_zero_is_rejected() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    env.set_channel_capacity(0);
    counted_pipeline(&env, &calls).discard();
    let m = invalid(&env, &calls).await;
    assert!(m.contains("channel capacity"), "{m}");
}

#[tokio::test]
async fn max_parallelism_zero_is_rejected() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    env.set_max_parallelism(0);
    counted_pipeline(&env, &calls).discard();
    let m = invalid(&env, &calls).await;
    assert!(m.contains("max parallelism"), "{m}");
}

#[test]
fn submit_outside_a_tokio_runtime_is_rejected() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    counted_pipeline(&env, &calls).discard();
    match env.submit("no runtime") {
        Err(JobError::InvalidJob(m)) => assert!(m.contains("tokio runtime"), "{m}"),
        Err(e) => panic!("expected an invalid-job error, got {e:?}"),
        Ok(_) => panic!("submitted without a runtime"),
    }
    assert_eq!(calls.get(), 0);
}

#[tokio::test]
async fn execute_blocking_inside_a_runtime_is_rejected() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    counted_pipeline(&env, &calls).discard();
    match env.execute_blocking("nested") {
        Err(JobError::InvalidJob(m)) => assert!(m.contains("execute_blocking"), "{m}"),
        other => panic!("expected an invalid-job error, got {other:?}"),
    }
    assert_eq!(calls.get(), 0);
}

/// The same checks at `execute`: the error comes back instead of a result.
#[tokio::test]
async fn execute_reports_the_configuration_error() {
    let (env, calls) = (StreamEnvironment::new(), Calls::default());
    env.set_batch_size(0);
    counted_pipeline(&env, &calls).discard();
    let err = env.execute("invalid").await.unwrap_err();
    assert!(matches!(err, JobError::InvalidJob(_)), "{err:?}");
    assert!(err.to_string().starts_with("invalid job:"), "{err}");
    assert_eq!(calls.get(), 0);
}
