//! Loom models of the coordinator event delivery protocol ([`EventDelivery`]): every
//! interleaving of the coordinator's sends, the snapshot's completion hook, the job master's
//! checkpoint steps and a subtask's task, up to the preemption bound.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p sluice-coordinator --test loom_delivery
//! --release` (see `.ci/run`); without the cfg this file is empty.
//!
//! Each model asserts what a subtask's mailbox ends up with, in order, with the barrier of the
//! checkpoint marked where the master would inject it (after the coordinator's part is ready,
//! before the subtask reports it took the barrier): events sent before the snapshot are before
//! the barrier, events sent after it are behind it, none lost, none twice, none reordered.

#![cfg(loom)]

use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use sluice_coordinator::delivery::{NotReady, PutError, TryPutError};
use sluice_coordinator::{EventDelivery, EventTransport, Mailbox, SendError, SubtaskAttempt};
use sluice_core::{CheckpointId, OperatorEvent};

/// What a mailbox received, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Item {
    Event(u8),
    /// Where the master injected the checkpoint's barrier.
    Barrier,
}

use Item::{Barrier, Event};

struct Queue {
    /// Everything ever put, in order (a task taking an item only frees room).
    log: Vec<Item>,
    taken: usize,
    capacity: usize,
    closed: bool,
}

/// A bounded task mailbox over loom's mutex and condvar.
#[derive(Clone)]
struct Inbox(Arc<(Mutex<Queue>, Condvar)>);

impl Inbox {
    fn new(capacity: usize) -> Self {
        Inbox(Arc::new((
            Mutex::new(Queue {
                log: Vec::new(),
                taken: 0,
                capacity,
                closed: false,
            }),
            Condvar::new(),
        )))
    }

    /// The master injects the barrier (it travels on the data path, not through the mailbox's
    /// capacity).
    fn mark_barrier(&self) {
        self.0.0.lock().unwrap().log.push(Barrier);
    }

    /// The task takes the next event, waiting for one.
    fn take(&self) -> u8 {
        let (m, cv) = &*self.0;
        let mut q = m.lock().unwrap();
        loop {
            let next = q.log[q.taken..].iter().position(|i| *i != Barrier);
            if let Some(at) = next {
                let at = q.taken + at;
                q.taken = at + 1;
                let Event(e) = q.log[at] else { unreachable!() };
                cv.notify_all();
                return e;
            }
            q = cv.wait(q).unwrap();
        }
    }

    fn log(&self) -> Vec<Item> {
        self.0.0.lock().unwrap().log.clone()
    }
}

fn events_queued(q: &Queue) -> usize {
    q.log[q.taken..].iter().filter(|i| **i != Barrier).count()
}

fn payload(event: &OperatorEvent) -> u8 {
    event.payload()[0]
}

impl Mailbox for Inbox {
    type Pending = OperatorEvent;

    fn try_put(&self, event: OperatorEvent) -> Result<(), TryPutError<OperatorEvent>> {
        let (m, cv) = &*self.0;
        let mut q = m.lock().unwrap();
        if q.closed {
            return Err(TryPutError::Gone);
        }
        if events_queued(&q) >= q.capacity {
            return Err(TryPutError::Full(event));
        }
        q.log.push(Event(payload(&event)));
        cv.notify_all();
        Ok(())
    }

    fn put(&self, event: OperatorEvent) -> Result<(), PutError> {
        let (m, cv) = &*self.0;
        let mut q = m.lock().unwrap();
        loop {
            if q.closed {
                return Err(PutError::Gone);
            }
            if events_queued(&q) < q.capacity {
                q.log.push(Event(payload(&event)));
                cv.notify_all();
                return Ok(());
            }
            q = cv.wait(q).unwrap();
        }
    }
}

fn ev(n: u8) -> OperatorEvent {
    OperatorEvent::new(vec![n])
}

const C1: CheckpointId = CheckpointId(1);
const C2: CheckpointId = CheckpointId(2);
const S0: SubtaskAttempt = SubtaskAttempt::new(0, 0);

/// Explores every interleaving of `f`, or (with a bound) those with at most `bound` preemptions,
/// which keeps the larger models within a minute or so.
fn model(bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = bound;
    builder.check(f);
}

/// The coordinator thread sends `0` and `1`, completes its snapshot of checkpoint 1 (the
/// completion hook closes the valve on that thread) and sends `2`, while the master waits for
/// the coordinator's part, injects the barrier and reports subtask 0 took it.
fn events_around_a_checkpoint(capacity: usize, with_task: bool) {
    let d = Arc::new(EventDelivery::<Inbox>::new());
    let inbox = Inbox::new(capacity);
    d.attempt_ready(S0, Some(inbox.clone()));
    d.trigger(C1).unwrap();

    let coordinator = {
        let d = d.clone();
        thread::spawn(move || {
            let before = [d.send(S0, ev(0)), d.send(S0, ev(1))];
            d.coordinator_checkpoint_done(C1, true);
            let after = d.send(S0, ev(2));
            (before, after)
        })
    };
    let task = with_task.then(|| {
        let inbox = inbox.clone();
        thread::spawn(move || [inbox.take(), inbox.take(), inbox.take()])
    });

    loom::future::block_on(d.ready(C1)).unwrap();
    inbox.mark_barrier();
    d.barrier_taken(S0, C1);

    let (before, mut after) = coordinator.join().unwrap();
    if let Some(task) = task {
        assert_eq!(task.join().unwrap(), [0, 1, 2]);
    }
    assert_eq!(inbox.log(), vec![Event(0), Event(1), Barrier, Event(2)]);
    for mut ack in before {
        assert_eq!(ack.try_result(), Some(Ok(())));
    }
    assert_eq!(after.try_result(), Some(Ok(())));
    assert_eq!(d.take_lost(), None);
}

#[test]
fn events_sent_around_a_checkpoint_stay_on_their_side_of_the_barrier() {
    model(None, || events_around_a_checkpoint(8, false));
}

/// As above with a mailbox of one and a task taking events: the coordinator waits for room for
/// `1` (the checkpoint is not ready until `1` is in), the release of the held `2` waits for room
/// holding the order lock, and nothing deadlocks.
#[test]
fn a_full_mailbox_delays_but_never_reorders_or_deadlocks() {
    model(Some(3), || events_around_a_checkpoint(1, true));
}

/// A second sender (a worker-pool thread with the same gateway) races the coordinator thread and
/// its snapshot: its events may fall on either side of the barrier, but in order; the
/// coordinator thread's events stay on their side; and nothing enters the mailbox between the
/// coordinator's part becoming ready and the barrier (every event the valve let through before
/// it closed was in by then).
fn concurrent_senders(capacity: usize, with_task: bool) {
    let d = Arc::new(EventDelivery::<Inbox>::new());
    let inbox = Inbox::new(capacity);
    d.attempt_ready(S0, Some(inbox.clone()));
    d.trigger(C1).unwrap();
    // With a mailbox of one, the race starts with it full.
    let first = d.send(S0, ev(0));

    let coordinator = {
        let d = d.clone();
        thread::spawn(move || {
            d.coordinator_checkpoint_done(C1, true);
            d.send(S0, ev(2))
        })
    };
    let pool = {
        let d = d.clone();
        thread::spawn(move || [d.send(S0, ev(10)), d.send(S0, ev(11))])
    };
    let task = with_task.then(|| {
        let inbox = inbox.clone();
        thread::spawn(move || (0..4).map(|_| inbox.take()).collect::<Vec<u8>>())
    });

    loom::future::block_on(d.ready(C1)).unwrap();
    let at_ready = inbox.log();
    inbox.mark_barrier();
    d.barrier_taken(S0, C1);

    let after = coordinator.join().unwrap();
    let [a, b] = pool.join().unwrap();
    let log = inbox.log();
    if let Some(task) = task {
        let taken: Vec<Item> = task.join().unwrap().into_iter().map(Event).collect();
        let events: Vec<Item> = log.iter().filter(|i| **i != Barrier).cloned().collect();
        assert_eq!(taken, events);
    }
    let barrier = log.iter().position(|i| *i == Barrier).unwrap();
    assert_eq!(
        log[..barrier],
        at_ready[..],
        "an event slipped in before the barrier"
    );
    let at = |n: u8| log.iter().position(|i| *i == Event(n)).unwrap();
    assert!(at(0) < barrier && barrier < at(2));
    assert!(at(10) < at(11));
    assert_eq!(log.len(), 5);
    for mut ack in [first, after, a, b] {
        assert_eq!(ack.try_result(), Some(Ok(())));
    }
}

#[test]
fn concurrent_senders_around_a_checkpoint() {
    model(Some(3), || concurrent_senders(8, false));
}

/// As above with a mailbox of one, full when the race starts, and a task taking events: a send
/// waiting for room holds the order lock, so the valve cannot close while it waits.
#[test]
fn concurrent_senders_with_a_full_mailbox() {
    model(Some(2), || concurrent_senders(1, true));
}

/// After the coordinator's snapshot the valve holds `2` and `3`; the master completes (or
/// aborts) the checkpoint concurrently: both arrive once, in order, acknowledged, whether they
/// were held and released or sent after the valve reopened.
fn reopening_releases_in_order(complete: bool) {
    let d = Arc::new(EventDelivery::<Inbox>::new());
    let inbox = Inbox::new(8);
    d.attempt_ready(S0, Some(inbox.clone()));
    d.trigger(C1).unwrap();
    d.coordinator_checkpoint_done(C1, true);

    let coordinator = {
        let d = d.clone();
        thread::spawn(move || [d.send(S0, ev(2)), d.send(S0, ev(3))])
    };
    if complete {
        d.checkpoint_complete(C1);
    } else {
        d.checkpoint_aborted(C1);
    }
    for mut ack in coordinator.join().unwrap() {
        assert_eq!(ack.try_result(), Some(Ok(())));
    }
    assert_eq!(inbox.log(), vec![Event(2), Event(3)]);
}

#[test]
fn checkpoint_completion_releases_held_events_in_order() {
    model(None, || reopening_releases_in_order(true));
}

#[test]
fn checkpoint_abort_releases_held_events_in_order() {
    model(None, || reopening_releases_in_order(false));
}

/// Subtask 0's attempt 0 fails while the coordinator sends to it with the valve closed for
/// checkpoint 1: the event is dropped (its acknowledgement fails), never delivered to attempt 0
/// nor to attempt 1; attempt 1 gets only the event sent to it, once checkpoint 1 completes.
#[test]
fn failover_drops_the_failed_attempts_held_events() {
    model(None, || {
        let d = Arc::new(EventDelivery::<Inbox>::new());
        let old = Inbox::new(8);
        d.attempt_ready(S0, Some(old.clone()));
        d.trigger(C1).unwrap();
        d.coordinator_checkpoint_done(C1, true);

        let coordinator = {
            let d = d.clone();
            thread::spawn(move || d.send(S0, ev(1)))
        };
        let new = Inbox::new(8);
        let s0_1 = SubtaskAttempt::new(0, 1);
        d.attempt_failed(S0);
        d.attempt_ready(s0_1, Some(new.clone()));
        let mut fresh = d.send(s0_1, ev(2));
        d.checkpoint_complete(C1);

        let mut stale = coordinator.join().unwrap();
        assert_eq!(
            stale.try_result(),
            Some(Err(SendError::TaskNotRunning { target: S0 }))
        );
        assert_eq!(fresh.try_result(), Some(Ok(())));
        assert_eq!(old.log(), vec![]);
        assert_eq!(new.log(), vec![Event(2)]);
        assert_eq!(d.take_lost(), None);
    });
}

/// An event held for checkpoint 1 is counted by checkpoint 2 (it was not acknowledged when the
/// coordinator took snapshot 2). When its attempt fails, the event is dropped: the master waiting
/// for checkpoint 2's part learns that it failed instead of waiting forever.
#[test]
fn a_failed_attempt_fails_the_checkpoints_counting_its_held_events() {
    model(None, || {
        let d = Arc::new(EventDelivery::<Inbox>::new());
        d.attempt_ready(S0, Some(Inbox::new(8)));
        d.trigger(C1).unwrap();
        d.coordinator_checkpoint_done(C1, true);
        let mut held = d.send(S0, ev(1));
        d.trigger(C2).unwrap();
        d.coordinator_checkpoint_done(C2, true);

        let region_failover = {
            let d = d.clone();
            thread::spawn(move || d.attempt_failed(S0))
        };
        assert_eq!(
            loom::future::block_on(d.ready(C2)),
            Err(NotReady::EventLost(C2))
        );
        region_failover.join().unwrap();
        assert_eq!(
            held.try_result(),
            Some(Err(SendError::TaskNotRunning { target: S0 }))
        );
    });
}
