//! The operator driven by hand, with a recording coordinator.

use super::*;
use crate::global::{CompletedData, CompletedStatistics, Routing};
use crate::sizing::OPERATOR_SKETCH_SWITCH_THRESHOLD;
use sluice_coordinator::encode_event;
use sluice_runtime::testing::OperatorTestHarness;

type KeyFn = fn(&u32) -> u32;

fn key(r: &u32) -> u32 {
    *r
}

fn operator(config: RangeShuffleConfig) -> (ShuffleOperator<u32, KeyFn>, Arc<RouteCells<u32>>) {
    let cells = Arc::new(RouteCells::default());
    (
        ShuffleOperator::new(key as KeyFn, config, cells.clone()),
        cells,
    )
}

fn harness(
    op: ShuffleOperator<u32, KeyFn>,
    subtask: usize,
    parallelism: usize,
) -> OperatorTestHarness<u32, ShuffleOperator<u32, KeyFn>> {
    OperatorTestHarness::for_subtask(op, subtask, parallelism).with_coordinator()
}

fn sent(h: &mut OperatorTestHarness<u32, ShuffleOperator<u32, KeyFn>>) -> Vec<ToCoordinator<u32>> {
    h.take_sent_events()
        .iter()
        .map(|e| decode_event(e).unwrap())
        .collect()
}

fn global(checkpoint: u64, data: CompletedData<u32>, n: usize) -> GlobalStatistics<u32> {
    let c = CompletedStatistics {
        checkpoint,
        downstream_parallelism: n,
        data,
    };
    GlobalStatistics::compute(&c, n, 0.0).unwrap()
}

fn event(statistics: &GlobalStatistics<u32>, apply_immediately: bool) -> OperatorEvent {
    encode_event(&ToOperator::Statistics {
        statistics: statistics.clone(),
        apply_immediately,
    })
    .unwrap()
}

#[test]
fn keys_are_counted_sent_at_each_checkpoint_and_counted_afresh() {
    let (op, _) = operator(RangeShuffleConfig::default());
    let mut h = harness(op, 0, 1);
    h.process_batch(vec![1, 1, 2]).unwrap();
    assert_eq!(h.records(), vec![1, 1, 2]);
    h.snapshot(1).unwrap();
    h.process_batch(vec![3]).unwrap();
    h.snapshot(2).unwrap();
    let events = sent(&mut h);
    assert_eq!(events.len(), 2);
    for (e, (cp, expected)) in events
        .into_iter()
        .zip([(1, vec![(1, 2), (2, 1)]), (2, vec![(3, 1)])])
    {
        let ToCoordinator::Statistics {
            checkpoint,
            downstream_parallelism,
            statistics: LocalStatistics::Map(m),
        } = e
        else {
            panic!("expected map statistics")
        };
        let mut m: Vec<(u32, u64)> = m.into_iter().collect();
        m.sort();
        assert_eq!((checkpoint, downstream_parallelism, m), (cp, 1, expected));
    }
}

#[test]
fn broadcast_statistics_apply_at_the_next_checkpoint_and_become_the_state() {
    let (op, cells) = operator(RangeShuffleConfig::default());
    let mut h = harness(op, 0, 1);
    h.process_batch(vec![1]).unwrap();
    let g = global(1, CompletedData::Map(vec![(1, 5)]), 2);
    h.handle_operator_event(event(&g, false)).unwrap();
    assert!(cells.cell(0, 0).current().is_none());
    assert!(!h.operator().is_applied());
    let state = h.snapshot(2).unwrap();
    assert_eq!(cells.cell(0, 0).current().unwrap().checkpoint(), 1);
    assert_eq!(state.entries().len(), 1);
    let back: GlobalStatistics<u32> = codec::decode(&state.entries()[0]).unwrap();
    assert_eq!(back, g);
    assert_eq!(h.context().metrics().gauge(GAUGE_CHECKPOINT), Some(1));
    assert_eq!(h.context().metrics().gauge(GAUGE_TYPE), Some(1));
}

#[test]
fn an_answer_to_a_request_applies_at_once() {
    let (op, cells) = operator(RangeShuffleConfig::default());
    let mut h = harness(op, 0, 1);
    h.process_batch(vec![1]).unwrap();
    let g = global(3, CompletedData::Sketch((0..100).collect()), 4);
    h.handle_operator_event(event(&g, true)).unwrap();
    assert_eq!(cells.cell(0, 0).current().unwrap().checkpoint(), 3);
    assert!(h.operator().is_applied());
}

#[test]
fn a_restored_subtask_routes_by_its_statistics_and_asks_with_their_signature() {
    let g = global(4, CompletedData::Map(vec![(1, 5), (2, 5)]), 2);
    let (op, _) = operator(RangeShuffleConfig::default());
    let mut before = harness(op, 0, 2);
    before.handle_operator_event(event(&g, true)).unwrap();
    let s0 = before.snapshot(5).unwrap();
    let s1 = s0.clone();

    // The same parallelism: each subtask gets its copy back.
    let (op, cells) = operator(RangeShuffleConfig::default());
    let mut h = harness(op, 1, 2)
        .restore(vec![s0.clone(), s1.clone()])
        .unwrap();
    h.process_batch(vec![1]).unwrap();
    assert_eq!(cells.cell(1, 0).current().unwrap().checkpoint(), 4);
    let events = sent(&mut h);
    assert!(matches!(
        events[..],
        [ToCoordinator::Request { signature: Some(s), downstream_parallelism: 1 }] if s == g.signature()
    ));
    // It collects what the restored statistics are (Map).
    assert_eq!(
        h.operator().local_statistics().unwrap().kind(),
        StatisticsType::Map
    );

    // A scale-up from 2 to 3: the third subtask gets no copy, routes round robin and asks
    // without a signature.
    let (op, cells) = operator(RangeShuffleConfig::default());
    let mut h = harness(op, 2, 3).restore(vec![s0, s1]).unwrap();
    h.process_batch(vec![1]).unwrap();
    assert!(cells.cell(2, 0).current().is_none());
    assert!(matches!(
        sent(&mut h)[..],
        [ToCoordinator::Request {
            signature: None,
            ..
        }]
    ));
    // A subtask that restored empty state (no statistics yet) asks too.
    let (op, _) = operator(RangeShuffleConfig::default());
    let mut h = harness(op, 0, 1)
        .restore(vec![OperatorState::default()])
        .unwrap();
    h.process_batch(vec![1]).unwrap();
    assert!(matches!(
        sent(&mut h)[..],
        [ToCoordinator::Request {
            signature: None,
            ..
        }]
    ));
    // A fresh start does not ask.
    let (op, _) = operator(RangeShuffleConfig::default());
    let mut h = harness(op, 0, 1);
    h.process_batch(vec![1]).unwrap();
    assert!(sent(&mut h).is_empty());
}

#[test]
fn auto_switches_to_a_sketch_beyond_the_operator_threshold() {
    for (keys, expected) in [
        (OPERATOR_SKETCH_SWITCH_THRESHOLD as u32, StatisticsType::Map),
        (
            OPERATOR_SKETCH_SWITCH_THRESHOLD as u32 + 1,
            StatisticsType::Sketch,
        ),
    ] {
        let config = RangeShuffleConfig::default();
        let metrics = config.metrics();
        let (op, _) = operator(config);
        let mut h = harness(op, 0, 1);
        h.process_batch((0..keys).collect()).unwrap();
        let local = h.operator().local_statistics().unwrap();
        assert_eq!(local.kind(), expected, "{keys} keys");
        assert_eq!(
            metrics.local_switches_to_sketch(),
            u64::from(expected == StatisticsType::Sketch)
        );
        if expected == StatisticsType::Sketch {
            // Every counted record was replayed into the sample.
            let LocalStatistics::Sketch(r) = local else {
                unreachable!()
            };
            assert_eq!(r.items_seen(), u64::from(keys));
        }
    }
    // Only in Auto.
    let (op, _) = operator(RangeShuffleConfig::default().statistics_type(StatisticsType::Map));
    let mut h = harness(op, 0, 1);
    h.process_batch((0..=OPERATOR_SKETCH_SWITCH_THRESHOLD as u32).collect())
        .unwrap();
    assert_eq!(
        h.operator().local_statistics().unwrap().kind(),
        StatisticsType::Map
    );
}

#[test]
fn auto_switches_to_a_sketch_when_the_global_statistics_are_one() {
    let (op, _) = operator(RangeShuffleConfig::default());
    let mut h = harness(op, 0, 1);
    h.process_batch(vec![1, 2, 2]).unwrap();
    let g = global(1, CompletedData::Sketch(vec![5, 6, 7]), 2);
    h.handle_operator_event(event(&g, false)).unwrap();
    let LocalStatistics::Sketch(r) = h.operator().local_statistics().unwrap() else {
        panic!("expected a sketch")
    };
    assert_eq!(r.items_seen(), 3);
    h.snapshot(2).unwrap();
    assert!(matches!(
        sent(&mut h)[..],
        [ToCoordinator::Statistics {
            statistics: LocalStatistics::Sketch(_),
            ..
        }]
    ));
}

#[test]
fn sketch_statistics_sample_only_the_keys_they_keep() {
    let config = RangeShuffleConfig::default().statistics_type(StatisticsType::Sketch);
    let (op, _) = operator(config);
    let mut h = harness(op, 0, 4);
    h.process_batch((0..200_000).collect()).unwrap();
    let LocalStatistics::Sketch(r) = h.operator().local_statistics().unwrap() else {
        panic!("expected a sketch")
    };
    // Iceberg's size for 4 operator subtasks and (chained, so) 1 downstream subtask.
    assert_eq!(r.k(), crate::sizing::operator_reservoir_size(4, 1));
    assert_eq!(r.items_seen(), 200_000);
    let g = global(1, CompletedData::Sketch((0..10).collect()), 2);
    assert!(matches!(g.routing, Routing::Sketch(ref b) if b.len() == 1));
}

#[test]
fn records_keep_their_event_times() {
    let (op, _) = operator(RangeShuffleConfig::default());
    let mut h = harness(op, 0, 1);
    h.process_timed_batch(vec![5, 6], vec![1_000, 2_000])
        .unwrap();
    assert_eq!(h.timed_records(), vec![(5, Some(1_000)), (6, Some(2_000))]);
}
