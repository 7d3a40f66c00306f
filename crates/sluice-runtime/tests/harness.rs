//! The operator test harness: keyed state snapshot and restore at other parallelisms,
//! watermarks in the output, checkpoint notifications and end of input.

use sluice_core::{CheckpointId, StreamElement, Watermark};
use sluice_runtime::prelude::*;
use sluice_runtime::state::ListState;
use sluice_runtime::testing::{KeyedCounter, OperatorTestHarness};
use std::collections::BTreeMap;

/// Feeds `keys` to the harnesses, each key to the subtask that owns it.
fn feed(harnesses: &mut [OperatorTestHarness<u64, KeyedCounter>], keys: &[u64]) {
    for h in harnesses.iter_mut() {
        let mine: Vec<u64> = keys.iter().copied().filter(|k| h.owns_key(k)).collect();
        h.process_batch(mine).unwrap();
    }
}

fn subtasks(parallelism: usize) -> Vec<OperatorTestHarness<u64, KeyedCounter>> {
    (0..parallelism)
        .map(|s| OperatorTestHarness::for_subtask(KeyedCounter::new(), s, parallelism))
        .collect()
}

#[test]
fn keyed_state_snapshotted_at_two_subtasks_restores_at_three_and_at_one() {
    let keys: Vec<u64> = (0..500).map(|i| i % 37).collect();
    let mut before = subtasks(2);
    feed(&mut before, &keys);
    let snapshots: Vec<OperatorState> = before.iter_mut().map(|h| h.snapshot(7).unwrap()).collect();
    assert!(snapshots.iter().all(|s| !s.keyed_entries().is_empty()));

    for parallelism in [3, 1] {
        let mut after: Vec<_> = (0..parallelism)
            .map(|s| {
                OperatorTestHarness::for_subtask(KeyedCounter::new(), s, parallelism)
                    .restore(snapshots.clone())
                    .unwrap()
            })
            .collect();
        feed(&mut after, &keys);
        let mut counts = BTreeMap::new();
        for h in &mut after {
            h.end_input().unwrap();
            h.close().unwrap();
            for (k, n) in h.records() {
                assert!(
                    h.owns_key(&k),
                    "key {k} emitted by a subtask that does not own it"
                );
                assert!(
                    counts.insert(k, n).is_none(),
                    "key {k} counted on two subtasks"
                );
            }
        }
        let expected: BTreeMap<u64, u64> = (0..37)
            .map(|k| (k, 2 * keys.iter().filter(|&&x| x == k).count() as u64))
            .collect();
        assert_eq!(counts, expected, "restored at parallelism {parallelism}");
    }
}

/// Holds records until a watermark passes their timestamp (the record), then emits them sorted,
/// before the watermark. Keeps what it holds in list state.
#[derive(Clone, Default)]
struct SortUntilWatermark {
    held: Vec<u64>,
}

impl Operator<u64> for SortUntilWatermark {
    type Out = u64;
    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        _out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        self.held.extend(batch);
        Ok(())
    }
    fn process_watermark(
        &mut self,
        w: Watermark,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        self.held.sort_unstable();
        let ready = self.held.partition_point(|&t| t as i64 <= w.timestamp());
        out.emit_batch(self.held.drain(..ready).collect());
        out.emit_watermark(w);
        Ok(())
    }
    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        _out: &mut Collector<u64>,
    ) -> Result<OperatorState, UserError> {
        let mut state = OperatorState::default();
        let mut list = ListState::default();
        for &t in &self.held {
            list.push(t);
        }
        list.snapshot_into(&mut state)?;
        Ok(state)
    }
    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.held = ListState::<u64>::restore_from(&state)?.items().to_vec();
        Ok(())
    }
}

#[test]
fn watermarks_come_out_in_order_with_the_records_they_release() {
    let mut h = OperatorTestHarness::new(SortUntilWatermark::default());
    h.process_batch(vec![30, 10, 20]).unwrap();
    h.process_record(5).unwrap();
    assert!(
        h.output().is_empty(),
        "nothing is released before a watermark"
    );
    h.process_watermark(Watermark::new(20)).unwrap();
    h.process_watermark(Watermark::new(25)).unwrap();
    assert_eq!(
        h.take_output(),
        vec![
            StreamElement::records(vec![5, 10, 20]),
            StreamElement::Watermark(Watermark::new(20)),
            StreamElement::Watermark(Watermark::new(25)),
        ]
    );

    // What is still held survives a snapshot and restore; released after the restore only.
    h.process_record(27).unwrap();
    let snapshot = h.snapshot(1).unwrap();
    let mut restored = OperatorTestHarness::new(SortUntilWatermark::default())
        .restore(vec![snapshot])
        .unwrap();
    restored.process_watermark(Watermark::new(40)).unwrap();
    assert_eq!(restored.records(), vec![27, 30]);
    assert_eq!(restored.watermarks(), vec![Watermark::new(40)]);
}

/// Stages records per checkpoint and "commits" them when that checkpoint completes.
#[derive(Clone, Default)]
struct CommitOnCheckpoint {
    staged: Vec<u64>,
    pending: Vec<(CheckpointId, Vec<u64>)>,
    committed: Vec<u64>,
    aborted: Vec<CheckpointId>,
    ended: bool,
}

impl Operator<u64> for CommitOnCheckpoint {
    type Out = u64;
    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        _out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        self.staged.extend(batch);
        Ok(())
    }
    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        _out: &mut Collector<u64>,
    ) -> Result<OperatorState, UserError> {
        self.pending
            .push((checkpoint, std::mem::take(&mut self.staged)));
        Ok(OperatorState::default())
    }
    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        let (done, later): (Vec<_>, Vec<_>) = self
            .pending
            .drain(..)
            .partition(|(id, _)| *id <= checkpoint);
        self.pending = later;
        self.committed.extend(done.into_iter().flat_map(|(_, r)| r));
        Ok(())
    }
    fn notify_checkpoint_aborted(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        self.aborted.push(checkpoint);
        Ok(())
    }
    fn end_input(&mut self, _out: &mut Collector<u64>) -> Result<(), UserError> {
        self.ended = true;
        Ok(())
    }
}

#[test]
fn checkpoint_notifications_and_end_of_input_reach_the_operator() {
    let mut h = OperatorTestHarness::new(CommitOnCheckpoint::default());
    h.process_batch(vec![1, 2]).unwrap();
    h.snapshot(1).unwrap();
    h.process_batch(vec![3]).unwrap();
    h.snapshot(2).unwrap();
    h.notify_checkpoint_aborted(2).unwrap();
    assert!(
        h.operator().committed.is_empty(),
        "nothing commits before a notification"
    );
    h.notify_checkpoint_complete(1).unwrap();
    assert_eq!(h.operator().committed, vec![1, 2]);
    assert_eq!(h.operator().aborted, vec![CheckpointId(2)]);
    assert!(!h.operator().ended);
    h.end_input().unwrap();
    assert!(h.operator().ended);
    h.close().unwrap();
    assert!(
        h.process_record(4).is_err(),
        "a closed operator takes no more input"
    );
}

#[test]
fn restoring_after_open_is_refused() {
    let mut h = OperatorTestHarness::new(KeyedCounter::new());
    h.open().unwrap();
    let err = h.restore(Vec::new()).unwrap_err();
    assert!(err.to_string().contains("before"), "{err}");
}
