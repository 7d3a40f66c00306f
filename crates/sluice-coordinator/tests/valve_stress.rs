//! Seeded stress test of the event valve: thousands of random interleavings of sends,
//! acknowledgements, losses, checkpoint triggers, coordinator snapshots, barriers, aborts,
//! task failures and global resets, with the consistency invariants checked throughout.
//!
//! The simulation plays the job master (which drives the valve and injects barriers only
//! once the coordinator's part of a checkpoint is ready), the transport (one FIFO per attempt,
//! which may lose an event) and the subtasks (which take events and barriers in any
//! interleaving, since they travel on different channels).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_coordinator::SubtaskAttempt;
use sluice_coordinator::valve::{EventId, EventValve, Readiness, Release, SendOutcome};
use sluice_core::{AttemptNumber, CheckpointId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const SEEDS: u64 = 2_000;
const STEPS: usize = 250;
const PARALLELISM: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ev {
    seq: u64,
    target: SubtaskAttempt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Acked,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ck {
    Triggered,
    Closed,
    Injected,
    Completed,
    Aborted,
}

impl Ck {
    fn pending(self) -> bool {
        matches!(self, Ck::Triggered | Ck::Closed | Ck::Injected)
    }
}

#[derive(Default)]
struct Stats {
    sent: u64,
    completed: u64,
    aborted: u64,
    held: u64,
    failovers: u64,
}

struct Sim {
    rng: StdRng,
    valve: EventValve<Ev>,
    attempts: Vec<AttemptNumber>,
    network: BTreeMap<SubtaskAttempt, VecDeque<(EventId, Ev)>>,
    next_seq: u64,
    next_checkpoint: u64,
    /// The coordinator's log: events sent to each attempt, in order.
    sent_log: BTreeMap<SubtaskAttempt, Vec<u64>>,
    /// For each event: the checkpoints whose snapshot was taken (and still pending) when sent.
    sent_after: BTreeMap<u64, BTreeSet<CheckpointId>>,
    fates: BTreeMap<u64, Fate>,
    received: BTreeMap<SubtaskAttempt, Vec<u64>>,
    barriers_taken: BTreeMap<SubtaskAttempt, BTreeSet<CheckpointId>>,
    barrier_queue: BTreeMap<SubtaskAttempt, VecDeque<CheckpointId>>,
    received_at_barrier: BTreeMap<(SubtaskAttempt, CheckpointId), Vec<u64>>,
    /// Per checkpoint, the coordinator's log at its snapshot.
    snapshot: BTreeMap<CheckpointId, BTreeMap<SubtaskAttempt, Vec<u64>>>,
    checkpoints: BTreeMap<CheckpointId, Ck>,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let mut valve = EventValve::new();
        for s in 0..PARALLELISM {
            valve.attempt_ready(SubtaskAttempt::new(s, 0));
        }
        Sim {
            rng: StdRng::seed_from_u64(seed),
            valve,
            attempts: vec![0; PARALLELISM],
            network: BTreeMap::new(),
            next_seq: 0,
            next_checkpoint: 1,
            sent_log: BTreeMap::new(),
            sent_after: BTreeMap::new(),
            fates: BTreeMap::new(),
            received: BTreeMap::new(),
            barriers_taken: BTreeMap::new(),
            barrier_queue: BTreeMap::new(),
            received_at_barrier: BTreeMap::new(),
            snapshot: BTreeMap::new(),
            checkpoints: BTreeMap::new(),
            stats: Stats::default(),
        }
    }

    fn current(&self, s: usize) -> SubtaskAttempt {
        SubtaskAttempt::new(s, self.attempts[s])
    }

    fn live_targets(&self) -> Vec<SubtaskAttempt> {
        (0..PARALLELISM).map(|s| self.current(s)).collect()
    }

    fn set_fate(&mut self, seq: u64, fate: Fate) {
        let previous = self.fates.insert(seq, fate);
        assert_eq!(previous, None, "event {seq} got a second fate {fate:?}");
    }

    fn release(&mut self, released: Vec<Release<Ev>>) {
        for r in released {
            assert_eq!(r.target, r.event.target, "released to the wrong attempt");
            assert!(
                r.target == self.current(r.target.subtask),
                "released to a dead attempt"
            );
            self.network
                .entry(r.target)
                .or_default()
                .push_back((r.id, r.event));
        }
    }

    fn step(&mut self) {
        match self.rng.random_range(0..1000) {
            0..300 => self.send(),
            300..600 => self.deliver(),
            600..780 => self.take_barrier(),
            780..840 => self.trigger(),
            840..940 => self.snapshot(),
            940..950 => self.lose(),
            950..970 => self.abort_random(),
            970..985 => {
                let s = self.rng.random_range(0..PARALLELISM);
                self.failover(s);
            }
            985..988 => self.global_reset(),
            _ => self.try_regress(),
        }
    }

    fn send(&mut self) {
        let s = self.rng.random_range(0..PARALLELISM);
        let target = self.current(s);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.sent += 1;
        let after: BTreeSet<CheckpointId> = self
            .checkpoints
            .iter()
            .filter(|(_, st)| matches!(st, Ck::Closed | Ck::Injected))
            .map(|(c, _)| *c)
            .collect();
        self.sent_after.insert(seq, after);
        self.sent_log.entry(target).or_default().push(seq);
        match self.valve.send(target, Ev { seq, target }) {
            SendOutcome::Deliver { id, event } => self
                .network
                .entry(target)
                .or_default()
                .push_back((id, event)),
            SendOutcome::Held { .. } => self.stats.held += 1,
            SendOutcome::NotRunning { .. } => panic!("the current attempt {target} is ready"),
        }
    }

    fn pick_network(&mut self) -> Option<SubtaskAttempt> {
        let busy: Vec<SubtaskAttempt> = self
            .network
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(t, _)| *t)
            .collect();
        if busy.is_empty() {
            None
        } else {
            Some(busy[self.rng.random_range(0..busy.len())])
        }
    }

    fn deliver(&mut self) {
        let Some(target) = self.pick_network() else {
            return;
        };
        let Some((id, ev)) = self.network.get_mut(&target).and_then(VecDeque::pop_front) else {
            return;
        };
        self.receive(target, id, ev);
    }

    fn receive(&mut self, target: SubtaskAttempt, id: EventId, ev: Ev) {
        let got = self.received.entry(target).or_default();
        // Per-attempt order is send order.
        if let Some(&last) = got.last() {
            assert!(last < ev.seq, "{target} got event {} after {last}", ev.seq);
        }
        got.push(ev.seq);
        // No event sent after a pending checkpoint's snapshot arrives before that barrier.
        let taken = self
            .barriers_taken
            .get(&target)
            .cloned()
            .unwrap_or_default();
        for c in &self.sent_after[&ev.seq] {
            let st = self.checkpoints[c];
            assert!(
                !st.pending() || taken.contains(c),
                "event {} sent after snapshot {c} reached {target} before barrier {c} ({st:?})",
                ev.seq
            );
        }
        self.set_fate(ev.seq, Fate::Acked);
        let ready = self.valve.acked(id);
        for c in ready {
            self.on_ready(c);
        }
    }

    fn on_ready(&mut self, c: CheckpointId) {
        assert_eq!(
            self.checkpoints[&c],
            Ck::Closed,
            "only a closed checkpoint becomes ready"
        );
        // Every event sent before the snapshot to a running attempt has been acknowledged.
        // (Events to attempts that died before were failed, and their failover aborted what
        // was pending then.)
        for t in self.live_targets() {
            let seqs = self.snapshot[&c].get(&t).cloned().unwrap_or_default();
            for seq in &seqs {
                assert_eq!(
                    self.fates.get(seq),
                    Some(&Fate::Acked),
                    "checkpoint {c} ready before event {seq} was acknowledged"
                );
            }
        }
        assert!(self.valve.is_checkpoint_ready(c));
        self.checkpoints.insert(c, Ck::Injected);
        for t in self.live_targets() {
            self.barrier_queue.entry(t).or_default().push_back(c);
        }
    }

    fn take_barrier(&mut self) {
        let waiting: Vec<SubtaskAttempt> = self
            .barrier_queue
            .iter()
            .filter(|(t, q)| !q.is_empty() && **t == self.current(t.subtask))
            .map(|(t, _)| *t)
            .collect();
        if waiting.is_empty() {
            return;
        }
        let target = waiting[self.rng.random_range(0..waiting.len())];
        let Some(c) = self
            .barrier_queue
            .get_mut(&target)
            .and_then(VecDeque::pop_front)
        else {
            return;
        };
        self.barriers_taken.entry(target).or_default().insert(c);
        let got = self.received.get(&target).cloned().unwrap_or_default();
        self.received_at_barrier.insert((target, c), got);
        let released = self
            .valve
            .barrier_taken(target, c)
            .expect("known checkpoint");
        self.release(released);
        if self.checkpoints[&c] == Ck::Injected
            && self
                .live_targets()
                .iter()
                .all(|t| self.barriers_taken.get(t).is_some_and(|b| b.contains(&c)))
        {
            self.complete(c);
        }
    }

    fn complete(&mut self, c: CheckpointId) {
        // Consistency: what each attempt received before its barrier is exactly what the
        // coordinator had sent it before its snapshot (nothing lost, nothing twice).
        for t in self.live_targets() {
            let before_barrier = &self.received_at_barrier[&(t, c)];
            let before_snapshot = self.snapshot[&c].get(&t).cloned().unwrap_or_default();
            assert_eq!(
                before_barrier, &before_snapshot,
                "checkpoint {c} is inconsistent for {t}"
            );
        }
        self.checkpoints.insert(c, Ck::Completed);
        // Older pending checkpoints are subsumed.
        for (_, st) in self.checkpoints.range_mut(..c) {
            if st.pending() {
                *st = Ck::Aborted;
            }
        }
        self.stats.completed += 1;
        let released = self.valve.checkpoint_complete(c).expect("known checkpoint");
        self.release(released);
    }

    fn trigger(&mut self) {
        let c = CheckpointId(self.next_checkpoint);
        self.next_checkpoint += 1;
        self.valve.trigger(c).expect("growing ids are accepted");
        self.checkpoints.insert(c, Ck::Triggered);
    }

    fn try_regress(&mut self) {
        if self.next_checkpoint > 1 {
            let c = CheckpointId(self.rng.random_range(1..self.next_checkpoint));
            assert!(self.valve.trigger(c).is_err(), "regressing id {c} accepted");
        }
    }

    fn snapshot(&mut self) {
        // The coordinator snapshots checkpoints in trigger order.
        let Some(c) = self
            .checkpoints
            .iter()
            .find(|(_, st)| **st == Ck::Triggered)
            .map(|(c, _)| *c)
        else {
            return;
        };
        let readiness = self
            .valve
            .coordinator_checkpoint_taken(c)
            .expect("a triggered checkpoint is pending");
        self.snapshot.insert(c, self.sent_log.clone());
        self.checkpoints.insert(c, Ck::Closed);
        match readiness {
            Readiness::Ready => self.on_ready(c),
            Readiness::AwaitingAcks { events } => assert!(events > 0),
            Readiness::Failed => self.abort(c),
        }
    }

    fn abort(&mut self, c: CheckpointId) {
        if !self.checkpoints[&c].pending() {
            return;
        }
        self.checkpoints.insert(c, Ck::Aborted);
        self.stats.aborted += 1;
        let released = self.valve.checkpoint_aborted(c).expect("known checkpoint");
        self.release(released);
    }

    fn abort_random(&mut self) {
        let pending: Vec<CheckpointId> = self
            .checkpoints
            .iter()
            .filter(|(_, st)| st.pending())
            .map(|(c, _)| *c)
            .collect();
        if !pending.is_empty() {
            let c = pending[self.rng.random_range(0..pending.len())];
            self.abort(c);
        }
    }

    fn lose(&mut self) {
        let Some(target) = self.pick_network() else {
            return;
        };
        let Some((id, ev)) = self.network.get_mut(&target).and_then(VecDeque::pop_front) else {
            return;
        };
        self.set_fate(ev.seq, Fate::Failed);
        let failure = self.valve.delivery_failed(id);
        assert_eq!(
            failure.failover,
            Some(target),
            "a lost event to a running task must fail it over"
        );
        for c in failure.failed_checkpoints {
            self.abort(c);
        }
        self.failover(target.subtask);
    }

    fn abort_all_pending(&mut self) {
        let pending: Vec<CheckpointId> = self
            .checkpoints
            .iter()
            .filter(|(_, st)| st.pending())
            .map(|(c, _)| *c)
            .collect();
        for c in pending {
            self.abort(c);
        }
    }

    /// Kills the current attempt of `s`: its held events fail, in-flight ones are lost.
    fn kill(&mut self, s: usize) {
        let old = self.current(s);
        let failed = self.valve.attempt_failed(old);
        for (_, ev) in failed.dropped {
            self.set_fate(ev.seq, Fate::Failed);
        }
        for c in failed.failed_checkpoints {
            self.abort(c);
        }
        let in_flight = self.network.remove(&old).unwrap_or_default();
        for (id, ev) in in_flight {
            self.set_fate(ev.seq, Fate::Failed);
            let f = self.valve.delivery_failed(id);
            assert_eq!(f.failover, None, "a dead attempt is not failed over again");
            for c in f.failed_checkpoints {
                self.abort(c);
            }
        }
        self.barrier_queue.remove(&old);
        self.attempts[s] += 1;
    }

    fn failover(&mut self, s: usize) {
        self.stats.failovers += 1;
        self.kill(s);
        let new = self.current(s);
        // The job master aborts pending checkpoints on failover; the new attempt may become
        // ready before or after that. Sometimes pending checkpoints are left to run on (so a
        // new attempt meets a checkpoint in progress and may even take its barrier).
        match self.rng.random_range(0..4) {
            0 | 1 => {
                self.valve.attempt_ready(new);
                self.abort_all_pending();
            }
            2 => {
                self.abort_all_pending();
                self.valve.attempt_ready(new);
            }
            _ => self.valve.attempt_ready(new),
        }
    }

    fn global_reset(&mut self) {
        for s in 0..PARALLELISM {
            self.kill(s);
        }
        self.abort_all_pending();
        let released = self.valve.reset();
        assert!(
            released.is_empty(),
            "no attempt is ready during a global reset"
        );
        assert!(self.valve.pending_checkpoints().is_empty());
        for s in 0..PARALLELISM {
            self.valve.attempt_ready(self.current(s));
        }
    }

    /// Ends the run: abort what is pending, deliver everything, then check that every event
    /// has exactly one fate and nothing is left held or unacknowledged.
    fn drain(&mut self) {
        self.abort_all_pending();
        while let Some(target) = self.pick_network() {
            if let Some((id, ev)) = self.network.get_mut(&target).and_then(VecDeque::pop_front) {
                self.receive(target, id, ev);
            }
        }
        for s in 0..PARALLELISM {
            assert_eq!(self.valve.held_events(self.current(s)), 0);
        }
        assert_eq!(self.valve.unacked_events(), 0);
        assert_eq!(
            self.fates.len() as u64,
            self.next_seq,
            "an event has no fate"
        );
    }
}

#[test]
fn random_interleavings_keep_order_and_checkpoint_consistency() {
    let mut totals = Stats::default();
    for seed in 0..SEEDS {
        let mut sim = Sim::new(seed);
        for _ in 0..STEPS {
            sim.step();
        }
        sim.drain();
        totals.sent += sim.stats.sent;
        totals.completed += sim.stats.completed;
        totals.aborted += sim.stats.aborted;
        totals.held += sim.stats.held;
        totals.failovers += sim.stats.failovers;
    }
    println!(
        "sent {} held {} completed {} aborted {} failovers {}",
        totals.sent, totals.held, totals.completed, totals.aborted, totals.failovers
    );
    // The interleavings exercise every path, not just the easy ones.
    assert!(totals.completed > SEEDS, "completed {}", totals.completed);
    assert!(totals.aborted > SEEDS / 2, "aborted {}", totals.aborted);
    assert!(totals.held > SEEDS, "held {}", totals.held);
    assert!(totals.failovers > SEEDS, "failovers {}", totals.failovers);
    assert!(totals.sent > SEEDS * 50, "sent {}", totals.sent);
}
