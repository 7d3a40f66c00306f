//! Recreate-on-reset: the old instance closes in the background while calls queue up, and the
//! new instance replays them in order; a stale instance cannot fail the job.

mod common;

use common::Failures;
use sluice_coordinator::gateway::memory::InMemoryTransport;
use sluice_coordinator::*;
use sluice_core::{AttemptNumber, CheckpointId, NodeId, OperatorEvent, SubtaskIndex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};

/// What every instance did, in order, as "instance:call".
#[derive(Default)]
struct Log {
    entries: Mutex<Vec<String>>,
    changed: Notify,
}

impl Log {
    fn push(&self, entry: String) {
        self.entries.lock().unwrap().push(entry);
        self.changed.notify_waiters();
    }

    fn entries(&self) -> Vec<String> {
        self.entries.lock().unwrap().clone()
    }

    async fn wait_for(&self, entry: &str) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.entries().iter().any(|e| e == entry) {
                return;
            }
            notified.await;
        }
    }
}

/// A coordinator that logs its calls. Its close waits for a gate when the test set one, and
/// it may try to fail the job while closing.
struct Recorder {
    id: usize,
    log: Arc<Log>,
    context: CoordinatorContext,
    gates: Arc<Mutex<HashMap<usize, oneshot::Receiver<()>>>>,
    fail_while_closing: Arc<Mutex<Vec<usize>>>,
}

impl Recorder {
    fn record(&self, what: String) -> CoordinatorFuture<'_> {
        self.log.push(format!("{}:{what}", self.id));
        done(Ok(()))
    }
}

impl OperatorCoordinator for Recorder {
    fn start(&mut self) -> CoordinatorFuture<'_> {
        self.record("start".into())
    }

    fn close(&mut self) -> CoordinatorFuture<'_> {
        Box::pin(async move {
            self.log.push(format!("{}:close-begin", self.id));
            if self.fail_while_closing.lock().unwrap().contains(&self.id) {
                self.context.fail_job("stale instance complains".into());
            }
            let gate = self.gates.lock().unwrap().remove(&self.id);
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            self.log.push(format!("{}:close-end", self.id));
            Ok(())
        })
    }

    fn handle_event_from_operator(
        &mut self,
        s: SubtaskIndex,
        a: AttemptNumber,
        e: OperatorEvent,
    ) -> CoordinatorFuture<'_> {
        self.record(format!("event {s}/{a} {:?}", e.payload()))
    }

    fn checkpoint_coordinator(
        &mut self,
        id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_> {
        result.complete(vec![self.id as u8]);
        self.record(format!("checkpoint {id}"))
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> CoordinatorFuture<'_> {
        self.record(format!("complete {id}"))
    }

    fn notify_checkpoint_aborted(&mut self, id: CheckpointId) -> CoordinatorFuture<'_> {
        self.record(format!("aborted {id}"))
    }

    fn reset_to_checkpoint(
        &mut self,
        id: CheckpointId,
        state: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_> {
        self.record(format!("reset {id} {state:?}"))
    }

    fn subtask_reset(&mut self, s: SubtaskIndex, id: CheckpointId) -> CoordinatorFuture<'_> {
        self.record(format!("subtask_reset {s} {id}"))
    }

    fn execution_attempt_failed(
        &mut self,
        s: SubtaskIndex,
        a: AttemptNumber,
        _reason: Option<String>,
    ) -> CoordinatorFuture<'_> {
        self.record(format!("failed {s}/{a}"))
    }

    fn execution_attempt_ready(
        &mut self,
        s: SubtaskIndex,
        a: AttemptNumber,
        _g: SubtaskGateway,
    ) -> CoordinatorFuture<'_> {
        self.record(format!("ready {s}/{a}"))
    }
}

/// Makes recorders numbered 0, 1, ...; close gates and stale failures are set per instance
/// and looked up when the instance closes.
#[derive(Default)]
struct Factory {
    next: AtomicUsize,
    log: Arc<Log>,
    gates: Arc<Mutex<HashMap<usize, oneshot::Receiver<()>>>>,
    fail_while_closing: Arc<Mutex<Vec<usize>>>,
}

impl Factory {
    fn gate(&self, instance: usize) -> oneshot::Sender<()> {
        let (tx, rx) = oneshot::channel();
        self.gates.lock().unwrap().insert(instance, rx);
        tx
    }
}

impl CoordinatorProvider for Factory {
    fn create(
        &self,
        context: CoordinatorContext,
    ) -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(Recorder {
            id,
            log: self.log.clone(),
            context,
            gates: self.gates.clone(),
            fail_while_closing: self.fail_while_closing.clone(),
        }))
    }
}

fn setup() -> (Arc<Factory>, RecreateOnResetCoordinator, Arc<Failures>) {
    let factory = Arc::new(Factory::default());
    let failures = Failures::new();
    let context = CoordinatorContext::new("recreated", NodeId(3), 2, failures.hook());
    let provider: Arc<dyn CoordinatorProvider> = factory.clone();
    let wrapper = RecreateOnResetCoordinator::new(provider, context).unwrap();
    (factory, wrapper, failures)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn calls_made_during_a_slow_close_are_replayed_in_order_on_the_new_instance() {
    let (factory, mut c, failures) = setup();
    let release_close = factory.gate(0);
    factory.fail_while_closing.lock().unwrap().push(0);
    let transport = InMemoryTransport::new(4);

    c.start().await.unwrap();
    c.reset_to_checkpoint(CheckpointId(5), Some(vec![5]))
        .await
        .unwrap();
    factory.log.wait_for("0:close-begin").await;

    // The old instance is still closing: these calls queue up.
    c.execution_attempt_failed(0, 0, Some("lost".into()))
        .await
        .unwrap();
    c.execution_attempt_ready(0, 1, transport.gateway(0, 1))
        .await
        .unwrap();
    c.handle_event_from_operator(0, 1, OperatorEvent::new(vec![1]))
        .await
        .unwrap();
    c.handle_event_from_operator(1, 0, OperatorEvent::new(vec![2]))
        .await
        .unwrap();
    let (result, state) = CheckpointResult::new(CheckpointId(6));
    c.checkpoint_coordinator(CheckpointId(6), result)
        .await
        .unwrap();
    c.notify_checkpoint_complete(CheckpointId(6)).await.unwrap();
    assert!(!factory.log.entries().iter().any(|e| e.starts_with("1:")));

    release_close.send(()).unwrap();
    c.settled().await;
    // A call after catching up goes straight to the new instance.
    c.handle_event_from_operator(1, 0, OperatorEvent::new(vec![3]))
        .await
        .unwrap();

    assert_eq!(
        factory.log.entries(),
        strings(&[
            "0:start",
            "0:close-begin",
            "0:close-end",
            "1:reset 5 Some([5])",
            "1:start",
            "1:failed 0/0",
            "1:ready 0/1",
            "1:event 0/1 [1]",
            "1:event 1/0 [2]",
            "1:checkpoint 6",
            "1:complete 6",
            "1:event 1/0 [3]",
        ])
    );
    // The state came from the new instance.
    assert_eq!(state.await, Ok(vec![1]));
    // The stale instance's complaint while closing did not fail the job.
    assert!(failures.messages().is_empty());
    c.close().await.unwrap();
}

#[tokio::test]
async fn the_new_instance_is_started_only_if_the_wrapper_was() {
    let (factory, mut c, _) = setup();
    c.reset_to_checkpoint(NO_CHECKPOINT, None).await.unwrap();
    c.settled().await;
    c.start().await.unwrap();
    assert_eq!(
        factory.log.entries(),
        strings(&["0:close-begin", "0:close-end", "1:reset 0 None", "1:start"])
    );
    c.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_close_that_times_out_fails_the_job_and_the_new_instance_still_takes_over() {
    let (factory, c, failures) = setup();
    let mut c = c.with_close_timeout(Duration::from_secs(60));
    let _never_released = factory.gate(0);
    c.start().await.unwrap();
    c.reset_to_checkpoint(CheckpointId(2), None).await.unwrap();
    c.notify_checkpoint_aborted(CheckpointId(3)).await.unwrap();
    // The paused clock jumps to the timeout once everything waits.
    let failed = failures.wait_for(1).await;
    assert!(failed[0].contains("timed out after 60s"), "{}", failed[0]);
    c.settled().await;
    assert_eq!(
        factory.log.entries(),
        strings(&[
            "0:start",
            "0:close-begin",
            "1:reset 2 None",
            "1:start",
            "1:aborted 3"
        ])
    );
    c.close().await.unwrap();
}

#[tokio::test]
async fn a_second_reset_supersedes_the_first_and_drops_its_queued_calls() {
    let (factory, mut c, failures) = setup();
    let release_close = factory.gate(0);
    c.start().await.unwrap();
    c.reset_to_checkpoint(CheckpointId(1), None).await.unwrap();
    factory.log.wait_for("0:close-begin").await;
    c.handle_event_from_operator(0, 0, OperatorEvent::new(vec![9]))
        .await
        .unwrap();
    let (result, dropped_state) = CheckpointResult::new(CheckpointId(2));
    c.checkpoint_coordinator(CheckpointId(2), result)
        .await
        .unwrap();

    // A second global failover before the first finished.
    c.reset_to_checkpoint(CheckpointId(1), Some(vec![1]))
        .await
        .unwrap();
    c.handle_event_from_operator(1, 1, OperatorEvent::new(vec![7]))
        .await
        .unwrap();
    release_close.send(()).unwrap();
    c.settled().await;

    // The superseded switch created no instance; the calls queued for it were dropped and
    // its checkpoint declined.
    assert!(dropped_state.await.is_err());
    assert_eq!(
        factory.log.entries(),
        strings(&[
            "0:start",
            "0:close-begin",
            "0:close-end",
            "1:reset 1 Some([1])",
            "1:start",
            "1:event 1/1 [7]",
        ])
    );
    assert!(failures.messages().is_empty());
    c.close().await.unwrap();
}

#[tokio::test]
async fn a_full_queue_of_pending_calls_makes_callers_wait_until_replayed() {
    let (factory, c, _) = setup();
    let mut c = c.with_pending_capacity(2);
    let release_close = factory.gate(0);
    c.reset_to_checkpoint(CheckpointId(1), None).await.unwrap();
    factory.log.wait_for("0:close-begin").await;
    c.notify_checkpoint_complete(CheckpointId(1)).await.unwrap();
    c.notify_checkpoint_complete(CheckpointId(2)).await.unwrap();
    // The third call waits for room; release the close concurrently.
    let third = c.notify_checkpoint_complete(CheckpointId(3));
    let release = async move {
        release_close.send(()).unwrap();
    };
    let (r, ()) = tokio::join!(third, release);
    r.unwrap();
    c.settled().await;
    let entries = factory.log.entries();
    assert_eq!(
        &entries[entries.len() - 3..],
        &strings(&["1:complete 1", "1:complete 2", "1:complete 3"])[..]
    );
    c.close().await.unwrap();
}
