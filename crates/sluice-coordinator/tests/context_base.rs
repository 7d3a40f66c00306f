//! The coordinator context base: calls into the coordinator thread, failures, sends and
//! readiness, the worker pool, close.

mod common;

use common::base;
use sluice_coordinator::gateway::memory::InMemoryTransport;
use sluice_coordinator::{CallFailure, CoordinatorError, LiveAttempts, SendError, SubmitError};
use sluice_core::OperatorEvent;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

fn ev(b: u8) -> OperatorEvent {
    OperatorEvent::new(vec![b])
}

fn thread_name() -> Option<String> {
    std::thread::current().name().map(str::to_string)
}

#[tokio::test]
async fn a_call_from_the_coordinator_thread_runs_inline() {
    let (base, failures) = base("inline", 1);
    let b = base.clone();
    let outcome = base
        .call_in_coordinator_thread_async(
            move || {
                let ran = Arc::new(AtomicBool::new(false));
                let r = ran.clone();
                // Queued instead of inline, this would wait for the very thread it runs on.
                let inner = b.call_in_coordinator_thread(
                    move || {
                        r.store(true, Ordering::SeqCst);
                        Ok(thread_name())
                    },
                    "inner call",
                )?;
                Ok((inner, ran.load(Ordering::SeqCst), b.is_coordinator_thread()))
            },
            "outer call",
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        (Some("coordinator-inline".to_string()), true, true)
    );
    assert!(failures.messages().is_empty());
    base.close();
}

#[test]
fn a_call_from_another_thread_waits_for_the_coordinator_thread() {
    let (base, _) = base("waiting", 1);
    let b = base.clone();
    let from_plain_thread = std::thread::spawn(move || {
        b.call_in_coordinator_thread(|| Ok((thread_name(), 6 * 7)), "cannot compute")
    })
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(
        from_plain_thread,
        (Some("coordinator-waiting".to_string()), 42)
    );
    assert!(!base.is_coordinator_thread());
    base.close();
}

#[tokio::test]
async fn a_blocking_call_from_a_tokio_worker_is_refused_and_the_async_form_waits() {
    let (base, _) = base("tokio", 1);
    let err = base
        .call_in_coordinator_thread(|| Ok(1), "sync from tokio")
        .unwrap_err();
    assert!(matches!(err.failure(), CallFailure::WouldBlockRuntime));
    let value = base
        .call_in_coordinator_thread_async(|| Ok(thread_name()), "async from tokio")
        .await
        .unwrap();
    assert_eq!(value.as_deref(), Some("coordinator-tokio"));
    base.close();
}

#[tokio::test]
async fn a_failing_call_carries_its_message_and_does_not_fail_the_job() {
    let (base, failures) = base("failing", 1);
    let err = base
        .call_in_coordinator_thread_async(
            || -> Result<(), _> { Err("the split is gone".into()) },
            "cannot assign split 3",
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "cannot assign split 3: the split is gone");
    assert_eq!(err.message(), "cannot assign split 3");

    let err = base
        .call_in_coordinator_thread_async(
            || -> Result<(), _> { panic!("index out of bounds") },
            "cannot assign split 4",
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot assign split 4: the call panicked: index out of bounds"
    );
    assert!(failures.messages().is_empty());
    base.close();
}

#[tokio::test]
async fn a_panic_in_run_in_coordinator_thread_fails_the_job_once_naming_the_coordinator() {
    let (base, failures) = base("enumerator", 2);
    base.run_in_coordinator_thread(|| panic!("first boom"))
        .unwrap();
    base.run_in_coordinator_thread(|| Err("second failure".into()))
        .unwrap();
    let first = failures.wait_for(1).await;
    // Everything queued before this call has run when it returns.
    base.call_in_coordinator_thread_async(|| Ok(()), "barrier")
        .await
        .unwrap();
    assert_eq!(failures.messages(), first);
    assert_eq!(first.len(), 1);
    let message = &first[0];
    assert!(message.contains("'enumerator'"), "{message}");
    assert!(message.contains("coordinator-enumerator"), "{message}");
    assert!(message.contains("first boom"), "{message}");
    assert!(base.has_failed());

    // After a reset the job can be failed again.
    base.reset_failure();
    base.run_in_coordinator_thread(|| Err("third".into()))
        .unwrap();
    let all = failures.wait_for(2).await;
    assert!(all[1].contains("third"));
    base.close();
}

#[tokio::test]
async fn run_in_event_loop_checks_started_and_names_the_failed_action() {
    let (base, failures) = base("loop", 1);
    let err = base
        .run_in_event_loop_async(|| Ok(()), "handle split request")
        .await
        .unwrap_err();
    assert!(matches!(err, CoordinatorError::NotStarted { .. }));
    assert_eq!(
        err.to_string(),
        "the coordinator of 'loop' has not started yet"
    );

    base.mark_started();
    base.run_in_event_loop_async(|| Err("no reader".into()), "handle split request")
        .await
        .unwrap();
    let failed = failures.wait_for(1).await;
    assert!(
        failed[0].contains("failed to execute 'handle split request': no reader"),
        "{}",
        failed[0]
    );
    base.close();
}

#[tokio::test]
async fn sending_to_a_subtask_that_is_not_ready_fails_naming_it() {
    let (base, _) = base("send", 3);
    let err = base.send_event_to_operator_async(2, ev(1)).await.await;
    assert_eq!(err, Err(SendError::NotReady { subtask: 2 }));
    assert_eq!(
        err.unwrap_err().to_string(),
        "subtask 2 is not ready yet to receive events"
    );
    let out_of_range = base.send_event_to_operator_async(3, ev(1)).await.await;
    assert!(matches!(
        out_of_range,
        Err(SendError::NoSuchSubtask { subtask: 3, .. })
    ));
    base.close();
}

#[tokio::test]
async fn ready_then_not_ready_then_ready_with_a_new_attempt() {
    let (base, _) = base("attempts", 1);
    let transport = InMemoryTransport::new(8);

    let mut first = transport.start_attempt(0, 0);
    base.subtask_ready(transport.gateway(0, 0)).unwrap();
    assert!(base.is_subtask_ready(0));
    let ack = base.send_event_to_operator_async(0, ev(1)).await;
    assert_eq!(first.recv().await.unwrap().ack(), ev(1));
    assert_eq!(ack.await, Ok(()));

    // The attempt fails: the job master stops it and tells the coordinator.
    transport.stop_attempt(0, 0);
    assert!(base.attempt_not_ready(0, 0));
    assert!(!base.is_subtask_ready(0));
    assert_eq!(
        base.send_event_to_operator_async(0, ev(2)).await.await,
        Err(SendError::NotReady { subtask: 0 })
    );

    // The new attempt becomes ready: events go to it, and only to it.
    let mut second = transport.start_attempt(0, 1);
    base.subtask_ready(transport.gateway(0, 1)).unwrap();
    assert_eq!(base.ready_attempts(0), vec![1]);
    let ack = base.send_event_to_operator_async(0, ev(3)).await;
    let delivery = second.recv().await.unwrap();
    assert_eq!(delivery.target().attempt, 1);
    assert_eq!(delivery.ack(), ev(3));
    assert_eq!(ack.await, Ok(()));
    assert!(first.try_recv().is_none());
    base.close();
}

#[tokio::test]
async fn an_event_from_an_old_attempt_is_dropped() {
    let (base, _) = base("filter", 2);
    let transport = InMemoryTransport::new(8);
    // The job master's filter and the base's record agree.
    let mut live = LiveAttempts::new(2);
    live.attempt_ready(1, 0);
    base.subtask_ready(transport.gateway(1, 0)).unwrap();
    assert!(live.admit(1, 0) && base.accepts_event_from(1, 0));

    live.attempt_failed(1, 0);
    base.attempt_not_ready(1, 0);
    live.attempt_ready(1, 1);
    base.subtask_ready(transport.gateway(1, 1)).unwrap();

    // A late event of attempt 0 is dropped; attempt 1 is heard.
    let mut delivered = Vec::new();
    for (attempt, payload) in [(0, 10u8), (1, 11), (0, 12)] {
        if live.admit(1, attempt) {
            delivered.push(payload);
        }
        assert_eq!(live.admit(1, attempt), base.accepts_event_from(1, attempt));
    }
    assert_eq!(delivered, vec![11]);
    base.close();
}

#[test]
fn sends_from_a_plain_thread_go_through_the_coordinator_thread_in_order() {
    let (base, _) = base("plain", 1);
    let transport = InMemoryTransport::new(16);
    let mut inbox = transport.start_attempt(0, 0);
    base.subtask_ready(transport.gateway(0, 0)).unwrap();
    let b = base.clone();
    let acks = std::thread::spawn(move || {
        (0..5)
            .map(|i| b.send_event_to_operator(0, ev(i)))
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    for i in 0..5 {
        let got = futures::executor::block_on(inbox.recv()).unwrap().ack();
        assert_eq!(got, ev(i));
    }
    for ack in acks {
        assert_eq!(futures::executor::block_on(ack), Ok(()));
    }
    base.close();
}

#[tokio::test]
async fn fail_job_is_passed_on_once_until_reset_and_never_after_close() {
    let (base, failures) = base("once", 1);
    assert!(base.fail_job("first"));
    assert!(!base.fail_job("second"));
    assert_eq!(failures.messages().len(), 1);
    base.reset_failure();
    assert!(base.fail_job("third"));
    base.reset_failure();
    base.close();
    assert!(!base.fail_job("after close"));
    assert_eq!(failures.messages().len(), 2);
}

#[test]
fn call_async_runs_the_callable_on_a_worker_and_the_handler_on_the_coordinator_thread() {
    let (base, _) = base("async", 1);
    let (tx, rx) = mpsc::channel();
    let b = base.clone();
    base.call_async(
        || Ok(thread_name()),
        move |worker| {
            tx.send((worker.unwrap(), thread_name(), b.is_coordinator_thread()))
                .unwrap();
            Ok(())
        },
    )
    .unwrap();
    let (worker, handler, on_coordinator) = rx.recv().unwrap();
    assert_eq!(worker.as_deref(), Some("coordinator-async-worker-0"));
    assert_eq!(handler.as_deref(), Some("coordinator-async"));
    assert!(on_coordinator);
    base.close();
}

#[tokio::test]
async fn a_failing_callable_reaches_the_handler_and_a_failing_handler_fails_the_job() {
    let (base, failures) = base("handler", 1);
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    base.call_async(
        || -> Result<u32, _> { panic!("disk on fire") },
        move |r| {
            tx.try_send(r.map_err(|e| e.to_string())).unwrap();
            Err("cannot handle it".into())
        },
    )
    .unwrap();
    let seen = rx.recv().await.unwrap();
    assert!(seen.unwrap_err().contains("disk on fire"));
    let failed = failures.wait_for(1).await;
    assert!(
        failed[0].contains("failed to handle the result of an asynchronous call: cannot handle it"),
        "{}",
        failed[0]
    );
    base.close();
}

#[test]
fn a_failing_periodic_run_does_not_cancel_the_period() {
    let (base, failures) = base("periodic", 1);
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let (tx, rx) = mpsc::channel();
    let b = base.clone();
    let periodic = base
        .call_async_periodic(
            move || {
                let n = r.fetch_add(1, Ordering::SeqCst);
                if n == 0 {
                    Err("first run fails".into())
                } else {
                    Ok(n)
                }
            },
            move |result| {
                let _ = tx.send((result.map_err(|e| e.to_string()), b.is_coordinator_thread()));
                Ok(())
            },
            Duration::ZERO,
            Duration::from_millis(1),
        )
        .unwrap();
    let results: Vec<_> = (0..3).map(|_| rx.recv().unwrap()).collect();
    assert_eq!(results[0], (Err("first run fails".to_string()), true));
    assert_eq!(results[1], (Ok(1), true));
    assert_eq!(results[2], (Ok(2), true));
    periodic.cancel();
    assert!(failures.messages().is_empty());
    base.close();
}

#[tokio::test]
async fn close_stops_the_thread_and_refuses_later_work() {
    let (base, _) = base("closing", 1);
    base.close();
    base.terminated().await;
    assert!(base.is_closed());
    assert_eq!(
        base.run_in_coordinator_thread(|| Ok(())),
        Err(SubmitError::Closed)
    );
    let err = base
        .call_in_coordinator_thread_async(|| Ok(()), "after close")
        .await
        .unwrap_err();
    assert!(matches!(
        err.failure(),
        CallFailure::Submit(SubmitError::Closed)
    ));
    assert!(base.call_async(|| Ok(()), |_| Ok(())).is_err());
    assert_eq!(
        base.send_event_to_operator_async(0, ev(1)).await.await,
        Err(SendError::Submit(SubmitError::Closed))
    );
}
