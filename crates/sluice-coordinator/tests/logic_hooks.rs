//! The optional hooks of `CoordinatorLogic` that `BaseCoordinator` calls: an attempt that
//! failed reaches the logic on the coordinator thread, after the events queued before it, and
//! `close` reaches the logic once, after everything queued.

mod common;

use common::Failures;
use sluice_coordinator::gateway::memory::InMemoryTransport;
use sluice_coordinator::{
    BaseCoordinator, CoordinatorContext, CoordinatorContextBase, CoordinatorLogic,
    OperatorCoordinator,
};
use sluice_core::{AttemptNumber, NodeId, OperatorEvent, SubtaskIndex, UserError};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl CoordinatorLogic for Recorder {
    fn handle_event(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        _event: OperatorEvent,
    ) -> Result<(), UserError> {
        assert!(base.is_coordinator_thread());
        self.0
            .lock()
            .unwrap()
            .push(format!("event {subtask}/{attempt}"));
        Ok(())
    }

    fn attempt_failed(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
    ) -> Result<(), UserError> {
        assert!(base.is_coordinator_thread());
        assert!(!base.is_subtask_ready(subtask), "the gateway is gone first");
        self.0
            .lock()
            .unwrap()
            .push(format!("failed {subtask}/{attempt}"));
        Ok(())
    }

    fn close(&mut self, base: &CoordinatorContextBase) -> Result<(), UserError> {
        assert!(base.is_coordinator_thread());
        self.0.lock().unwrap().push("close".into());
        Err("closing errors are only logged".into())
    }
}

#[tokio::test]
async fn attempt_failures_and_close_reach_the_logic_in_order_on_the_coordinator_thread() {
    let failures = Failures::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let ctx = CoordinatorContext::new("hooks", NodeId(1), 2, failures.hook());
    let mut c = BaseCoordinator::new(ctx, Recorder(log.clone())).unwrap();
    c.start().await.unwrap();
    let transport = InMemoryTransport::new(4);
    let _inbox = transport.start_attempt(1, 0);
    c.execution_attempt_ready(1, 0, transport.gateway(1, 0))
        .await
        .unwrap();
    c.handle_event_from_operator(1, 0, OperatorEvent::new(vec![]))
        .await
        .unwrap();
    c.execution_attempt_failed(1, 0, Some("boom".into()))
        .await
        .unwrap();
    c.close().await.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        vec!["event 1/0".to_string(), "failed 1/0".into(), "close".into()]
    );
    assert!(failures.messages().is_empty(), "close never fails the job");
}

#[tokio::test]
async fn an_attempt_failure_before_start_is_not_passed_to_the_logic() {
    let failures = Failures::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let ctx = CoordinatorContext::new("early", NodeId(1), 1, failures.hook());
    let mut c = BaseCoordinator::new(ctx, Recorder(log.clone())).unwrap();
    c.execution_attempt_failed(0, 0, None).await.unwrap();
    c.close().await.unwrap();
    assert!(log.lock().unwrap().is_empty());
}
