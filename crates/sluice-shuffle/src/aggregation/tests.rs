use super::*;
use crate::sizing::COORDINATOR_SKETCH_SWITCH_THRESHOLD;
use crate::statistics::Reservoir;

fn settings(parallelism: usize, statistics_type: StatisticsType) -> TrackerSettings {
    TrackerSettings {
        parallelism,
        statistics_type,
        switch_threshold: COORDINATOR_SKETCH_SWITCH_THRESHOLD,
        sizing: ReservoirSizing::KeepAll,
    }
}

fn map(pairs: &[(u32, u64)]) -> LocalStatistics<u32> {
    LocalStatistics::Map(pairs.iter().copied().collect())
}

fn sketch(items: impl IntoIterator<Item = u32>, k: usize) -> LocalStatistics<u32> {
    let mut r = Reservoir::with_seed(k, 1);
    items.into_iter().for_each(|i| r.update(i));
    LocalStatistics::Sketch(r)
}

fn counts(u: Update<u32>) -> (u64, Vec<(u32, u64)>) {
    match u {
        Update::Complete(c) => match c.data {
            CompletedData::Map(mut m) => {
                m.sort();
                (c.checkpoint, m)
            }
            CompletedData::Sketch(_) => panic!("expected map statistics"),
        },
        other => panic!("expected a completion, got {other:?}"),
    }
}

#[test]
fn concurrent_checkpoints_aggregate_separately() {
    let mut t = StatisticsTracker::new(settings(2, StatisticsType::Map), None);
    assert_eq!(
        t.update(0, 1, 4, map(&[(1, 1)])),
        Update::Pending { reported: 1 }
    );
    assert_eq!(
        t.update(0, 2, 4, map(&[(1, 10)])),
        Update::Pending { reported: 1 }
    );
    assert_eq!(t.in_progress(), vec![1, 2]);
    assert_eq!(
        counts(t.update(1, 1, 4, map(&[(1, 2), (2, 3)]))),
        (1, vec![(1, 3), (2, 3)])
    );
    assert_eq!(t.in_progress(), vec![2]);
    assert_eq!(
        counts(t.update(1, 2, 4, map(&[(2, 20)]))),
        (2, vec![(1, 10), (2, 20)])
    );
    assert!(t.in_progress().is_empty());
}

#[test]
fn duplicates_and_stale_events_are_ignored() {
    let mut t = StatisticsTracker::new(settings(2, StatisticsType::Map), None);
    t.update(0, 5, 4, map(&[(1, 1)]));
    assert_eq!(t.update(0, 5, 4, map(&[(1, 100)])), Update::Duplicate);
    assert_eq!(t.update(7, 5, 4, map(&[(1, 100)])), Update::UnknownSubtask);
    assert_eq!(counts(t.update(1, 5, 4, map(&[(1, 1)]))), (5, vec![(1, 2)]));
    // Older than the completed checkpoint 5: stale.
    assert_eq!(
        t.update(1, 4, 4, map(&[(1, 1)])),
        Update::Stale { completed: 5 }
    );
    // The completed checkpoint itself is not stale (Iceberg's check is strictly older): it
    // starts an aggregation of its own, which a later completion drops.
    assert_eq!(
        t.update(0, 5, 4, map(&[(1, 1)])),
        Update::Pending { reported: 1 }
    );
    assert_eq!(t.in_progress(), vec![5]);
    t.update(0, 6, 4, map(&[(1, 1)]));
    counts(t.update(1, 6, 4, map(&[(1, 1)])));
    assert!(t.in_progress().is_empty());
}

#[test]
fn a_completion_drops_older_incomplete_aggregations() {
    let mut t = StatisticsTracker::new(settings(3, StatisticsType::Map), None);
    t.update(0, 1, 4, map(&[(1, 1)]));
    t.update(1, 1, 4, map(&[(1, 1)]));
    t.update(2, 3, 4, map(&[(9, 1)]));
    for s in 0..3 {
        let u = t.update(s, 2, 4, map(&[(2, 1)]));
        if s < 2 {
            assert_eq!(u, Update::Pending { reported: s + 1 });
        } else {
            assert_eq!(counts(u), (2, vec![(2, 3)]));
        }
    }
    // Checkpoint 1 never completes; 3 (newer) goes on.
    assert_eq!(t.in_progress(), vec![3]);
    assert_eq!(
        t.update(2, 1, 4, map(&[(1, 1)])),
        Update::Stale { completed: 2 }
    );
}

#[test]
fn auto_switches_map_to_sketch_beyond_the_coordinator_threshold() {
    // Exactly the threshold stays a map; one key more becomes a sketch.
    let half = COORDINATOR_SKETCH_SWITCH_THRESHOLD as u32 / 2;
    for (extra, expected) in [(0, StatisticsType::Map), (1, StatisticsType::Sketch)] {
        let mut t = StatisticsTracker::new(settings(2, StatisticsType::Auto), None).with_seed(3);
        let a: Vec<(u32, u64)> = (0..half).map(|k| (k, 2)).collect();
        let b: Vec<(u32, u64)> = (half..2 * half + extra).map(|k| (k, 1)).collect();
        t.update(0, 1, 8, map(&a));
        let Update::Complete(c) = t.update(1, 1, 8, map(&b)) else {
            panic!("expected a completion")
        };
        assert_eq!(c.kind(), expected, "extra {extra}");
        if expected == StatisticsType::Sketch {
            // Every counted key was replayed: 150,001 items into 100,080 samples.
            assert_eq!(c.len(), ReservoirSizing::KeepAll.coordinator(8));
        }
    }
}

#[test]
fn the_switch_follows_the_configured_threshold_and_only_in_auto() {
    let mut s = settings(2, StatisticsType::Auto);
    s.switch_threshold = 3;
    let mut t = StatisticsTracker::new(s, None);
    t.update(0, 1, 2, map(&[(1, 5), (2, 5)]));
    assert_eq!(t.type_of(1), Some(StatisticsType::Map));
    t.update(1, 1, 2, map(&[(3, 5), (4, 5)])); // 4 keys > 3
    // Completed as a sketch of all 20 counted items, and the next aggregation starts as one.
    t.update(0, 2, 2, map(&[(1, 1)]));
    assert_eq!(t.type_of(2), Some(StatisticsType::Sketch));

    let mut s = settings(2, StatisticsType::Map);
    s.switch_threshold = 3;
    let mut t = StatisticsTracker::new(s, None);
    t.update(0, 1, 2, map(&[(1, 5), (2, 5)]));
    let (_, m) = counts(t.update(1, 1, 2, map(&[(3, 5), (4, 5)])));
    assert_eq!(m.len(), 4);
}

#[test]
fn a_sketch_from_one_subtask_turns_the_aggregation_into_a_sketch() {
    let mut t = StatisticsTracker::new(settings(3, StatisticsType::Auto), None).with_seed(5);
    t.update(0, 1, 2, map(&[(1, 3), (2, 1)]));
    t.update(1, 1, 2, sketch(100..110, 50));
    assert_eq!(t.type_of(1), Some(StatisticsType::Sketch));
    // A map after that is replayed into the sketch.
    let Update::Complete(c) = t.update(2, 1, 2, map(&[(7, 2)])) else {
        panic!("expected a completion")
    };
    let CompletedData::Sketch(mut samples) = c.data else {
        panic!("expected a sketch")
    };
    samples.sort();
    let mut expected = vec![1, 1, 1, 2, 7, 7];
    expected.extend(100..110);
    expected.sort();
    assert_eq!(samples, expected);
}

#[test]
fn empty_sketches_are_skipped_and_an_empty_result_is_empty() {
    let mut t = StatisticsTracker::new(settings(2, StatisticsType::Sketch), None);
    t.update(0, 1, 2, sketch(std::iter::empty(), 10));
    let Update::Complete(c) = t.update(1, 1, 2, sketch(std::iter::empty(), 10)) else {
        panic!("expected a completion")
    };
    assert!(c.is_empty());
    assert_eq!(c.kind(), StatisticsType::Sketch);
}

#[test]
fn a_restored_tracker_rejects_older_checkpoints_and_keeps_the_restored_type() {
    let mut t = StatisticsTracker::new(
        settings(1, StatisticsType::Auto),
        Some((10, StatisticsType::Sketch)),
    );
    assert_eq!(
        t.update(0, 9, 2, map(&[(1, 1)])),
        Update::Stale { completed: 10 }
    );
    let Update::Complete(c) = t.update(0, 11, 2, map(&[(1, 1)])) else {
        panic!("expected a completion")
    };
    assert_eq!(c.kind(), StatisticsType::Sketch);
}

#[test]
fn merged_sketches_sample_every_subtask_in_proportion() {
    // Subtask 0 sees keys below 1,000 (10 % of the records), subtask 1 the rest: the merged
    // sample must hold about 10 % of keys below 1,000.
    let mut low = 0;
    let mut total = 0;
    for seed in 0..20 {
        let mut t = StatisticsTracker::new(
            TrackerSettings {
                sizing: ReservoirSizing::Iceberg,
                ..settings(2, StatisticsType::Sketch)
            },
            None,
        )
        .with_seed(seed);
        let k = ReservoirSizing::Iceberg.operator(2, 4);
        let mut a = Reservoir::with_seed(k, seed * 2);
        (0..20_000u32).for_each(|i| a.update(i % 1_000));
        let mut b = Reservoir::with_seed(k, seed * 2 + 1);
        (0..180_000u32).for_each(|i| b.update(1_000 + i));
        t.update(0, 1, 4, LocalStatistics::Sketch(a));
        let Update::Complete(c) = t.update(1, 1, 4, LocalStatistics::Sketch(b)) else {
            panic!("expected a completion")
        };
        let CompletedData::Sketch(s) = c.data else {
            panic!("expected a sketch")
        };
        assert_eq!(s.len(), ReservoirSizing::Iceberg.coordinator(4));
        low += s.iter().filter(|&&k| k < 1_000).count();
        total += s.len();
    }
    let share = low as f64 / total as f64;
    assert!((0.095..0.105).contains(&share), "{share}");
}
