//! One test per rule of the event valve.

use super::*;

const S0: SubtaskAttempt = SubtaskAttempt::new(0, 0);
const S1: SubtaskAttempt = SubtaskAttempt::new(1, 0);
const C1: CheckpointId = CheckpointId(1);
const C2: CheckpointId = CheckpointId(2);
const C3: CheckpointId = CheckpointId(3);

fn valve() -> EventValve<&'static str> {
    let mut v = EventValve::new();
    v.attempt_ready(S0);
    v.attempt_ready(S1);
    v
}

fn deliver(v: &mut EventValve<&'static str>, t: SubtaskAttempt, e: &'static str) -> EventId {
    match v.send(t, e) {
        SendOutcome::Deliver { id, event } => {
            assert_eq!(event, e);
            id
        }
        other => panic!("expected delivery of {e}, got {other:?}"),
    }
}

fn hold(v: &mut EventValve<&'static str>, t: SubtaskAttempt, e: &'static str) -> EventId {
    match v.send(t, e) {
        SendOutcome::Held { id } => id,
        other => panic!("expected {e} to be held, got {other:?}"),
    }
}

fn events(r: Vec<Release<&'static str>>) -> Vec<(SubtaskAttempt, &'static str)> {
    r.into_iter().map(|r| (r.target, r.event)).collect()
}

#[test]
fn regressing_checkpoint_ids_are_rejected() {
    let mut v = valve();
    v.trigger(C2).unwrap();
    assert_eq!(
        v.trigger(C2),
        Err(ValveError::Regressing {
            latest: C2,
            requested: C2
        })
    );
    assert_eq!(
        v.trigger(C1),
        Err(ValveError::Regressing {
            latest: C2,
            requested: C1
        })
    );
    assert_eq!(v.latest_attempted(), C2);
    assert_eq!(v.pending_checkpoints(), vec![C2]);
    v.trigger(C3).unwrap();
}

#[test]
fn events_flow_between_trigger_and_snapshot() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    deliver(&mut v, S0, "a");
    assert!(!v.is_closed(S0));
}

#[test]
fn after_the_snapshot_events_are_held_per_subtask_in_order() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    assert_eq!(v.coordinator_checkpoint_taken(C1), Ok(Readiness::Ready));
    hold(&mut v, S0, "a");
    hold(&mut v, S1, "x");
    hold(&mut v, S0, "b");
    assert_eq!((v.held_events(S0), v.held_events(S1)), (2, 1));
    // Subtask 0 took the barrier: only its events go, in order.
    let released = v.barrier_taken(S0, C1).unwrap();
    assert_eq!(events(released), vec![(S0, "a"), (S0, "b")]);
    assert!(!v.is_closed(S0) && v.is_closed(S1));
    deliver(&mut v, S0, "c");
    hold(&mut v, S1, "y");
}

#[test]
fn a_checkpoint_is_not_ready_while_an_earlier_event_is_unacknowledged() {
    let mut v = valve();
    let a = deliver(&mut v, S0, "a");
    let b = deliver(&mut v, S1, "b");
    v.trigger(C1).unwrap();
    assert_eq!(
        v.coordinator_checkpoint_taken(C1),
        Ok(Readiness::AwaitingAcks { events: 2 })
    );
    assert!(!v.is_checkpoint_ready(C1));
    assert_eq!(v.acked(a), vec![]);
    assert!(!v.is_checkpoint_ready(C1));
    assert_eq!(v.acked(b), vec![C1]);
    assert!(v.is_checkpoint_ready(C1));
    // Acknowledging twice changes nothing.
    assert_eq!(v.acked(b), vec![]);
}

#[test]
fn events_sent_after_the_snapshot_do_not_delay_it() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    let a = deliver(&mut v, S0, "a");
    v.coordinator_checkpoint_taken(C1).unwrap();
    v.barrier_taken(S0, C1).unwrap();
    let _late = deliver(&mut v, S0, "late");
    assert_eq!(v.acked(a), vec![C1]);
}

#[test]
fn a_lost_event_to_a_running_task_fails_it_over_and_fails_the_checkpoint() {
    let mut v = valve();
    let a = deliver(&mut v, S0, "a");
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    let failure = v.delivery_failed(a);
    assert_eq!(
        failure,
        DeliveryFailure {
            failover: Some(S0),
            failed_checkpoints: vec![C1]
        }
    );
    assert!(!v.is_checkpoint_ready(C1));
    // The failed checkpoint is aborted by the driver, which reopens the gateways.
    v.checkpoint_aborted(C1).unwrap();
    assert!(!v.is_closed(S0));
}

#[test]
fn a_lost_event_to_a_dead_task_fails_no_one_over() {
    let mut v = valve();
    let a = deliver(&mut v, S0, "a");
    v.attempt_failed(S0);
    assert_eq!(v.delivery_failed(a).failover, None);
}

#[test]
fn an_event_lost_before_the_snapshot_fails_the_checkpoint_at_its_snapshot() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    let a = deliver(&mut v, S0, "a");
    assert_eq!(v.delivery_failed(a).failed_checkpoints, vec![C1]);
    assert_eq!(v.coordinator_checkpoint_taken(C1), Ok(Readiness::Failed));
    assert!(!v.is_checkpoint_ready(C1));
}

#[test]
fn completion_reopens_every_gateway() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    hold(&mut v, S0, "a");
    hold(&mut v, S1, "b");
    let released = v.checkpoint_complete(C1).unwrap();
    assert_eq!(events(released), vec![(S0, "a"), (S1, "b")]);
    assert!(v.pending_checkpoints().is_empty());
    deliver(&mut v, S0, "c");
}

#[test]
fn an_aborted_checkpoint_releases_held_events() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    hold(&mut v, S0, "a");
    assert_eq!(events(v.checkpoint_aborted(C1).unwrap()), vec![(S0, "a")]);
    deliver(&mut v, S0, "b");
    // A snapshot completing after the abort cannot close anything.
    assert_eq!(
        v.coordinator_checkpoint_taken(C1),
        Err(ValveError::NotPending(C1))
    );
}

#[test]
fn an_abort_before_the_snapshot_makes_the_snapshot_not_pending() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    v.checkpoint_aborted(C1).unwrap();
    assert_eq!(
        v.coordinator_checkpoint_taken(C1),
        Err(ValveError::NotPending(C1))
    );
    deliver(&mut v, S0, "a");
}

#[test]
fn reset_releases_everything_and_forgets_pending_checkpoints() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    hold(&mut v, S0, "a");
    v.trigger(C2).unwrap();
    v.coordinator_checkpoint_taken(C2).unwrap();
    hold(&mut v, S0, "b");
    hold(&mut v, S1, "c");
    assert_eq!(events(v.reset()), vec![(S0, "a"), (S0, "b"), (S1, "c")]);
    assert!(v.pending_checkpoints().is_empty());
    deliver(&mut v, S0, "d");
    // Ids still may not regress after a reset.
    assert!(v.trigger(C2).is_err());
}

#[test]
fn facts_about_unknown_checkpoints_are_refused_and_unmarked_ones_ignored() {
    let mut v = valve();
    assert_eq!(
        v.barrier_taken(S0, C1),
        Err(ValveError::UnknownCheckpoint {
            latest: CheckpointId(0),
            requested: C1
        })
    );
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    hold(&mut v, S0, "a");
    assert_eq!(events(v.barrier_taken(S0, C1).unwrap()), vec![(S0, "a")]);
    // A duplicate barrier report, or one from an attempt that is not ready, does nothing.
    assert!(v.barrier_taken(S0, C1).unwrap().is_empty());
    assert!(
        v.barrier_taken(SubtaskAttempt::new(7, 0), C1)
            .unwrap()
            .is_empty()
    );
    assert!(v.checkpoint_complete(C3).is_err());
}

#[test]
fn with_concurrent_checkpoints_an_event_waits_for_all_of_them() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    hold(&mut v, S0, "after-1");
    v.trigger(C2).unwrap();
    v.coordinator_checkpoint_taken(C2).unwrap();
    hold(&mut v, S0, "after-2");
    // Reopening the later checkpoint first releases nothing: its events merge into the
    // earlier queue, behind the events already there.
    assert!(v.barrier_taken(S0, C2).unwrap().is_empty());
    assert_eq!(v.held_events(S0), 2);
    hold(&mut v, S0, "after-2-reopened");
    assert_eq!(
        events(v.barrier_taken(S0, C1).unwrap()),
        vec![(S0, "after-1"), (S0, "after-2"), (S0, "after-2-reopened")]
    );
    assert!(!v.is_closed(S0));
}

#[test]
fn reopening_the_earlier_checkpoint_releases_only_its_events() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    hold(&mut v, S0, "after-1");
    v.trigger(C2).unwrap();
    v.coordinator_checkpoint_taken(C2).unwrap();
    hold(&mut v, S0, "after-2");
    assert_eq!(
        events(v.barrier_taken(S0, C1).unwrap()),
        vec![(S0, "after-1")]
    );
    hold(&mut v, S0, "still-after-2");
    assert_eq!(
        events(v.barrier_taken(S0, C2).unwrap()),
        vec![(S0, "after-2"), (S0, "still-after-2")]
    );
}

#[test]
fn held_events_of_an_earlier_checkpoint_count_for_the_next_one() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    let held = hold(&mut v, S0, "after-1");
    v.trigger(C2).unwrap();
    assert_eq!(
        v.coordinator_checkpoint_taken(C2),
        Ok(Readiness::AwaitingAcks { events: 1 })
    );
    let released = v.barrier_taken(S0, C1).unwrap();
    assert_eq!(released[0].id, held);
    assert_eq!(v.acked(held), vec![C2]);
}

#[test]
fn an_attempt_ready_during_a_checkpoint_is_closed_for_it() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    let fresh = SubtaskAttempt::new(1, 1);
    v.attempt_failed(S1);
    v.attempt_ready(fresh);
    assert!(v.is_closed(fresh));
    hold(&mut v, fresh, "a");
    assert_eq!(
        events(v.barrier_taken(fresh, C1).unwrap()),
        vec![(fresh, "a")]
    );
    v.checkpoint_complete(C1).unwrap();

    // Marked but not yet snapshotted: the new attempt closes with the others.
    v.trigger(C2).unwrap();
    let fresher = SubtaskAttempt::new(1, 2);
    v.attempt_failed(fresh);
    v.attempt_ready(fresher);
    assert!(!v.is_closed(fresher));
    v.coordinator_checkpoint_taken(C2).unwrap();
    assert!(v.is_closed(fresher));
}

#[test]
fn a_failed_attempt_drops_its_held_events_and_fails_checkpoints_counting_them() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    let a = hold(&mut v, S0, "a");
    v.trigger(C2).unwrap();
    assert_eq!(
        v.coordinator_checkpoint_taken(C2),
        Ok(Readiness::AwaitingAcks { events: 1 })
    );
    let failed = v.attempt_failed(S0);
    assert_eq!(failed.dropped, vec![(a, "a")]);
    assert_eq!(failed.failed_checkpoints, vec![C2]);
    assert_eq!(v.unacked_events(), 0);
    assert!(matches!(
        v.send(S0, "b"),
        SendOutcome::NotRunning { event: "b" }
    ));
}

#[test]
fn completion_subsumes_older_pending_checkpoints() {
    let mut v = valve();
    v.trigger(C1).unwrap();
    v.coordinator_checkpoint_taken(C1).unwrap();
    v.barrier_taken(S0, C1).unwrap();
    v.trigger(C2).unwrap();
    v.coordinator_checkpoint_taken(C2).unwrap();
    hold(&mut v, S1, "b");
    let released = v.checkpoint_complete(C2).unwrap();
    assert_eq!(events(released), vec![(S1, "b")]);
    assert!(v.pending_checkpoints().is_empty());
    assert!(!v.is_closed(S0) && !v.is_closed(S1));
}

#[test]
fn sending_to_an_attempt_that_is_not_ready_is_refused() {
    let mut v: EventValve<&str> = EventValve::new();
    assert_eq!(v.send(S0, "a"), SendOutcome::NotRunning { event: "a" });
    assert_eq!(v.unacked_events(), 0);
}

#[test]
fn acknowledgements_out_of_send_order_are_matched_to_their_events() {
    let mut v = valve();
    let a = deliver(&mut v, S0, "a");
    let b = deliver(&mut v, S1, "b");
    let c = deliver(&mut v, S0, "c");
    // The middle one first, then the last: neither is at the front of the queue.
    assert!(v.acked(b).is_empty());
    assert!(v.acked(c).is_empty());
    assert_eq!(v.unacked_events(), 1);
    v.trigger(C1).unwrap();
    // Only `a` is still owed, so the snapshot waits for exactly one acknowledgement.
    assert_eq!(
        v.coordinator_checkpoint_taken(C1),
        Ok(Readiness::AwaitingAcks { events: 1 })
    );
    // Acknowledging twice, or an id never handed out, changes nothing.
    assert!(v.acked(b).is_empty());
    assert!(v.acked(EventId(99)).is_empty());
    assert_eq!(v.acked(a), vec![C1]);
    // A loss reported for an acknowledged event fails no one over.
    assert_eq!(v.delivery_failed(c), DeliveryFailure::default());
}
