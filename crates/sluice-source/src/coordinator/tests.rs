//! The seed's test plan for the source coordinator on the context base: reader registration as
//! attempts come and go, assignment from any thread, refusals, failures reported once,
//! checkpoint and restore of the enumerator, and subtask resets through the tracker.

use crate::Boundedness;
use crate::api::{
    ReaderContext, ReaderPoll, Source, SourceReader, SourceSplit, SplitEnumerator, SplitId,
};
use crate::coordinator::{SourceCoordinator, SourceLogic, SplitEnumeratorContext};
use crate::event::{EnumeratorEvent, ReaderEvent};
use serde::{Deserialize, Serialize};
use sluice_coordinator::gateway::memory::{InMemoryTransport, SubtaskInbox};
use sluice_coordinator::{
    CheckpointResult, CoordinatorContext, JobFailureHook, OperatorCoordinator, decode_event,
    encode_event,
};
use sluice_core::{AttemptNumber, CheckpointId, NodeId, SubtaskIndex, UserError};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::Notify;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Split(u32);

impl SourceSplit for Split {
    fn split_id(&self) -> SplitId {
        SplitId::from(self.0.to_string())
    }
}

#[derive(Clone, Copy, Default)]
struct Behaviour {
    fail_start: bool,
    panic_on_request: bool,
    failing_async_call: bool,
}

type Shared<T> = Arc<Mutex<T>>;

/// A source whose enumerator hands out its splits in order, one per request, and logs what it
/// is told; it exposes its context so that a test can assign from another thread.
#[derive(Clone, Default)]
struct TestSource {
    splits: Vec<u32>,
    behaviour: Behaviour,
    log: Shared<Vec<String>>,
    context: Shared<Option<SplitEnumeratorContext<TestEnumerator>>>,
}

struct TestEnumerator {
    unassigned: Vec<Split>,
    behaviour: Behaviour,
    log: Shared<Vec<String>>,
}

impl TestEnumerator {
    fn note(&self, s: String) {
        self.log.lock().unwrap().push(s);
    }
}

impl SplitEnumerator for TestEnumerator {
    type Split = Split;
    type Checkpoint = Vec<Split>;

    fn start(&mut self, ctx: &SplitEnumeratorContext<Self>) -> Result<(), UserError> {
        if self.behaviour.fail_start {
            return Err("cannot reach the catalog".into());
        }
        if self.behaviour.failing_async_call {
            ctx.call_async(
                || -> Result<(), UserError> { Err("listing the bucket failed".into()) },
                |_e: &mut Self, _ctx, ()| Ok(()),
            )?;
        }
        Ok(())
    }

    fn handle_split_request(
        &mut self,
        ctx: &SplitEnumeratorContext<Self>,
        subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        if self.behaviour.panic_on_request {
            panic!("the enumerator tripped over subtask {subtask}");
        }
        if self.unassigned.is_empty() {
            ctx.signal_no_more_splits(subtask)?;
        } else {
            let split = self.unassigned.remove(0);
            ctx.assign_split(subtask, vec![split])?;
        }
        Ok(())
    }

    fn add_splits_back(
        &mut self,
        _ctx: &SplitEnumeratorContext<Self>,
        splits: Vec<Split>,
        subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        let ids: Vec<u32> = splits.iter().map(|s| s.0).collect();
        self.note(format!("back from {subtask}: {ids:?}"));
        for s in splits.into_iter().rev() {
            self.unassigned.insert(0, s);
        }
        Ok(())
    }

    fn add_reader(
        &mut self,
        _ctx: &SplitEnumeratorContext<Self>,
        subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        self.note(format!("reader {subtask}"));
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint: CheckpointId) -> Result<Vec<Split>, UserError> {
        Ok(self.unassigned.clone())
    }

    /// Any source event asks the enumerator to log the registered readers.
    fn handle_source_event(
        &mut self,
        ctx: &SplitEnumeratorContext<Self>,
        _subtask: SubtaskIndex,
        _event: Vec<u8>,
    ) -> Result<(), UserError> {
        let readers: Vec<(usize, u32)> = ctx
            .registered_readers()
            .values()
            .map(|r| (r.subtask, r.attempt))
            .collect();
        self.note(format!("readers {readers:?}"));
        Ok(())
    }
}

/// Never used: the coordinator tests run no subtasks.
struct NoReader;

impl SourceReader for NoReader {
    type Out = u32;
    type Split = Split;
    fn poll_next(
        &mut self,
        _: &mut Context<'_>,
        _: usize,
    ) -> Poll<Result<ReaderPoll<u32>, UserError>> {
        Poll::Ready(Ok(ReaderPoll::NeedsSplits))
    }
    fn add_splits(&mut self, _: Vec<Split>) -> Result<(), UserError> {
        Ok(())
    }
    fn snapshot_state(&mut self, _: CheckpointId) -> Result<Vec<Split>, UserError> {
        Ok(Vec::new())
    }
}

impl Source for TestSource {
    type Out = u32;
    type Split = Split;
    type Enumerator = TestEnumerator;
    type Reader = NoReader;

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }

    fn create_enumerator(
        &self,
        ctx: &SplitEnumeratorContext<TestEnumerator>,
    ) -> Result<TestEnumerator, UserError> {
        let splits = self.splits.iter().copied().map(Split).collect();
        self.restore_enumerator(ctx, splits)
    }

    fn restore_enumerator(
        &self,
        ctx: &SplitEnumeratorContext<TestEnumerator>,
        checkpoint: Vec<Split>,
    ) -> Result<TestEnumerator, UserError> {
        *self.context.lock().unwrap() = Some(ctx.clone());
        Ok(TestEnumerator {
            unassigned: checkpoint,
            behaviour: self.behaviour,
            log: self.log.clone(),
        })
    }

    fn create_reader(&self, _ctx: ReaderContext) -> Result<NoReader, UserError> {
        Ok(NoReader)
    }
}

/// Job failures, waited on rather than slept for.
#[derive(Default)]
struct Failures {
    messages: Mutex<Vec<String>>,
    changed: Notify,
}

impl Failures {
    fn hook(self: &Arc<Self>) -> JobFailureHook {
        let me = self.clone();
        JobFailureHook::new(move |f| {
            me.messages.lock().unwrap().push(f.to_string());
            me.changed.notify_waiters();
        })
    }

    fn messages(&self) -> Vec<String> {
        self.messages.lock().unwrap().clone()
    }

    async fn first(&self) -> String {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(m) = self.messages().first() {
                return m.clone();
            }
            notified.await;
        }
    }
}

/// A source coordinator of parallelism 2 with an in-memory transport to its subtasks.
struct Harness {
    source: TestSource,
    coordinator: SourceCoordinator<TestSource>,
    transport: Arc<InMemoryTransport>,
    failures: Arc<Failures>,
}

impl Harness {
    async fn start(source: TestSource) -> Self {
        let mut h = Self::create(source);
        h.coordinator.start().await.unwrap();
        h
    }

    fn create(source: TestSource) -> Self {
        let failures = Arc::new(Failures::default());
        let ctx = CoordinatorContext::new("files", NodeId(3), 2, failures.hook());
        let coordinator =
            SourceCoordinator::new(ctx, SourceLogic::new(Arc::new(source.clone()))).unwrap();
        Harness {
            source,
            coordinator,
            transport: InMemoryTransport::new(16),
            failures,
        }
    }

    /// Attempt `attempt` of `subtask` is running and registered its reader.
    async fn reader(&mut self, subtask: SubtaskIndex, attempt: AttemptNumber) -> SubtaskInbox {
        let inbox = self.transport.start_attempt(subtask, attempt);
        let gateway = self.transport.gateway(subtask, attempt);
        self.coordinator
            .execution_attempt_ready(subtask, attempt, gateway)
            .await
            .unwrap();
        self.send(subtask, attempt, ReaderEvent::Register).await;
        inbox
    }

    async fn send(&mut self, subtask: SubtaskIndex, attempt: AttemptNumber, e: ReaderEvent) {
        let event = encode_event(&e).unwrap();
        self.coordinator
            .handle_event_from_operator(subtask, attempt, event)
            .await
            .unwrap();
        self.coordinator.flush().await.unwrap();
    }

    async fn checkpoint(&mut self, id: u64) -> Vec<u8> {
        let (result, state) = CheckpointResult::new(CheckpointId(id));
        self.coordinator
            .checkpoint_coordinator(CheckpointId(id), result)
            .await
            .unwrap();
        state.await.unwrap()
    }

    async fn complete(&mut self, id: u64) {
        self.coordinator
            .notify_checkpoint_complete(CheckpointId(id))
            .await
            .unwrap();
        self.coordinator.flush().await.unwrap();
    }

    /// Requests one split at a time: `expected` come in order, then "no more splits".
    async fn served_until_the_end(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        inbox: &mut SubtaskInbox,
        expected: &[u32],
    ) {
        for &split in expected {
            self.send(subtask, attempt, ReaderEvent::RequestSplit).await;
            assert_eq!(
                received(inbox).await,
                EnumeratorEvent::AddSplits(vec![Split(split)])
            );
        }
        self.send(subtask, attempt, ReaderEvent::RequestSplit).await;
        assert_eq!(received(inbox).await, EnumeratorEvent::NoMoreSplits);
    }

    fn log(&self) -> Vec<String> {
        self.source.log.lock().unwrap().clone()
    }

    fn context(&self) -> SplitEnumeratorContext<TestEnumerator> {
        self.source.context.lock().unwrap().clone().unwrap()
    }

    async fn close(mut self) {
        self.coordinator.close().await.unwrap();
    }
}

fn source(splits: &[u32]) -> TestSource {
    TestSource {
        splits: splits.to_vec(),
        ..Default::default()
    }
}

/// The next event `inbox` received, decoded.
async fn received(inbox: &mut SubtaskInbox) -> EnumeratorEvent<Split> {
    let delivery = inbox.recv().await.unwrap();
    decode_event(&delivery.ack()).unwrap()
}

#[tokio::test]
async fn readers_register_and_unregister_as_attempts_fail() {
    let mut h = Harness::start(source(&[1, 2, 3])).await;
    let _r0 = h.reader(0, 0).await;
    let _r1 = h.reader(1, 0).await;
    h.send(1, 0, ReaderEvent::Source(vec![])).await;
    h.coordinator
        .execution_attempt_failed(0, 0, Some("lost".into()))
        .await
        .unwrap();
    h.send(1, 0, ReaderEvent::Source(vec![])).await;
    let _r0 = h.reader(0, 1).await;
    h.send(1, 0, ReaderEvent::Source(vec![])).await;
    assert_eq!(
        h.log(),
        vec![
            "reader 0",
            "reader 1",
            "readers [(0, 0), (1, 0)]",
            "readers [(1, 0)]",
            "reader 0",
            "readers [(0, 1), (1, 0)]",
        ]
    );
    assert!(h.failures.messages().is_empty());
    h.close().await;
}

#[tokio::test]
async fn splits_assigned_from_the_coordinator_thread_and_another_thread_are_tracked_the_same() {
    let mut h = Harness::start(source(&[7])).await;
    let mut inbox = h.reader(0, 0).await;
    // From the coordinator thread: the enumerator answers a request.
    h.send(0, 0, ReaderEvent::RequestSplit).await;
    // From a plain thread: the call waits for the coordinator thread.
    let ctx = h.context();
    std::thread::spawn(move || ctx.assign_split(0, vec![Split(8)]))
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(
        received(&mut inbox).await,
        EnumeratorEvent::AddSplits(vec![Split(7)])
    );
    assert_eq!(
        received(&mut inbox).await,
        EnumeratorEvent::AddSplits(vec![Split(8)])
    );
    assert_eq!(h.context().tracked_assignments(), 2);
    // Both come back on a reset to a checkpoint taken before them.
    h.coordinator
        .execution_attempt_failed(0, 0, None)
        .await
        .unwrap();
    h.coordinator
        .subtask_reset(0, CheckpointId(0))
        .await
        .unwrap();
    h.coordinator.flush().await.unwrap();
    assert_eq!(h.log().last().unwrap(), "back from 0: [7, 8]");
    assert_eq!(h.context().tracked_assignments(), 0);
    h.close().await;
}

#[tokio::test]
async fn assignment_to_an_unregistered_reader_fails_naming_the_subtask() {
    let mut h = Harness::start(source(&[1])).await;
    let _r0 = h.reader(0, 0).await;
    // From another thread the caller gets the error; nothing is assigned.
    let ctx = h.context();
    let err = std::thread::spawn(move || ctx.assign_split(1, vec![Split(5)]))
        .join()
        .unwrap()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot assign splits [5] to subtask 1"),
        "{err}"
    );
    assert_eq!(h.context().tracked_assignments(), 0);
    // From the enumerator (subtask 1 asks before registering), the job fails naming it.
    h.send(1, 0, ReaderEvent::RequestSplit).await;
    let failure = h.failures.first().await;
    assert!(
        failure.contains(
            "cannot assign splits [1] to subtask 1 because the subtask has no registered reader"
        ),
        "{failure}"
    );
    h.close().await;
}

#[tokio::test]
async fn a_failing_start_fails_the_job_once_with_its_cause() {
    let mut s = source(&[1]);
    s.behaviour.fail_start = true;
    let mut h = Harness::start(s).await;
    let failure = h.failures.first().await;
    assert!(
        failure.contains("the split enumerator failed to start: cannot reach the catalog"),
        "{failure}"
    );
    // Later calls find no enumerator and do nothing; nothing fails twice.
    let _r0 = h.reader(0, 0).await;
    h.send(0, 0, ReaderEvent::RequestSplit).await;
    assert_eq!(h.failures.messages().len(), 1);
    h.close().await;
}

#[tokio::test]
async fn a_panicking_callback_fails_the_job_once_with_its_message() {
    let mut s = source(&[1]);
    s.behaviour.panic_on_request = true;
    let mut h = Harness::start(s).await;
    let _r0 = h.reader(0, 0).await;
    h.send(0, 0, ReaderEvent::RequestSplit).await;
    let failure = h.failures.first().await;
    assert!(
        failure.contains("the enumerator tripped over subtask 0"),
        "{failure}"
    );
    h.send(0, 0, ReaderEvent::RequestSplit).await;
    assert_eq!(h.failures.messages().len(), 1);
    h.close().await;
}

#[tokio::test]
async fn a_failing_async_call_fails_the_job_once_with_its_cause() {
    let mut s = source(&[1]);
    s.behaviour.failing_async_call = true;
    let h = Harness::start(s).await;
    let failure = h.failures.first().await;
    assert!(failure.contains("listing the bucket failed"), "{failure}");
    h.coordinator_flushed().await;
    assert_eq!(h.failures.messages().len(), 1);
    h.close().await;
}

impl Harness {
    async fn coordinator_flushed(&self) {
        // The base's flush reaches the thread: anything queued before has run.
        self.context().base().flush().await.unwrap();
    }
}

#[tokio::test]
async fn checkpoint_and_restore_keep_unassigned_splits_and_forget_registered_readers() {
    let mut h = Harness::start(source(&[1, 2, 3])).await;
    let mut r0 = h.reader(0, 0).await;
    h.send(0, 0, ReaderEvent::RequestSplit).await;
    assert_eq!(
        received(&mut r0).await,
        EnumeratorEvent::AddSplits(vec![Split(1)])
    );
    let state = h.checkpoint(1).await;
    h.close().await;

    // A new coordinator restored from checkpoint 1 (a global failover recreates it).
    let s = source(&[]);
    let mut h = Harness::create(s);
    h.coordinator
        .reset_to_checkpoint(CheckpointId(1), Some(state))
        .await
        .unwrap();
    h.coordinator.start().await.unwrap();
    // No reader is registered: subtask 0 must register again before it is served.
    h.send(0, 1, ReaderEvent::Source(vec![])).await;
    assert_eq!(h.log(), vec!["readers []"]);
    let mut r0 = h.reader(0, 1).await;
    h.served_until_the_end(0, 1, &mut r0, &[2, 3]).await;
    assert!(h.failures.messages().is_empty());
    h.close().await;
}

#[tokio::test]
async fn after_a_subtask_reset_splits_assigned_after_the_checkpoint_are_served_again() {
    let mut h = Harness::start(source(&[10, 11, 12, 13])).await;
    let mut r0 = h.reader(0, 0).await;
    let _r1 = h.reader(1, 0).await;
    h.send(0, 0, ReaderEvent::RequestSplit).await; // 10, before checkpoint 1
    h.checkpoint(1).await;
    h.complete(1).await;
    h.send(0, 0, ReaderEvent::RequestSplit).await; // 11, in checkpoint 2
    h.checkpoint(2).await;
    h.send(0, 0, ReaderEvent::RequestSplit).await; // 12, after checkpoint 2
    for expected in [10, 11, 12] {
        assert_eq!(
            received(&mut r0).await,
            EnumeratorEvent::AddSplits(vec![Split(expected)])
        );
    }

    // Subtask 0 fails and is reset to checkpoint 1 (region failover).
    h.coordinator
        .execution_attempt_failed(0, 0, Some("disk".into()))
        .await
        .unwrap();
    h.coordinator
        .subtask_reset(0, CheckpointId(1))
        .await
        .unwrap();
    h.coordinator.flush().await.unwrap();
    assert_eq!(h.log().last().unwrap(), "back from 0: [11, 12]");

    // The new attempt gets 11 and 12 again, then the rest; never 10.
    let mut r0 = h.reader(0, 1).await;
    h.served_until_the_end(0, 1, &mut r0, &[11, 12, 13]).await;
    assert!(h.failures.messages().is_empty());
    h.close().await;
}

#[tokio::test]
async fn a_request_after_no_more_splits_is_not_passed_to_the_enumerator() {
    let mut h = Harness::start(source(&[])).await;
    let mut r0 = h.reader(0, 0).await;
    h.send(0, 0, ReaderEvent::RequestSplit).await;
    assert_eq!(received(&mut r0).await, EnumeratorEvent::NoMoreSplits);
    h.send(0, 0, ReaderEvent::RequestSplit).await;
    assert!(r0.try_recv().is_none(), "the second request is dropped");
    h.close().await;
}
