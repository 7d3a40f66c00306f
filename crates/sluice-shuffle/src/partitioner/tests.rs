use super::*;
use crate::global::{CompletedData, CompletedStatistics, GlobalStatistics};

fn table(data: CompletedData<u32>, n: usize) -> Arc<RouteTable<u32>> {
    let c = CompletedStatistics {
        checkpoint: 3,
        downstream_parallelism: n,
        data,
    };
    Arc::new(RouteTable::new(
        &GlobalStatistics::compute(&c, n, 0.0).unwrap(),
    ))
}

type KeyFn = fn(&u32) -> u32;

fn identity(k: &u32) -> u32 {
    *k
}

fn opened(
    cells: &Arc<RouteCells<u32>>,
    subtask: usize,
    n: usize,
    seed: u64,
) -> RangePartitioner<u32, KeyFn> {
    let mut p = RangePartitioner::new(identity as KeyFn, cells.clone(), ShuffleMetrics::default())
        .with_seed(seed);
    Partitioner::<u32>::open(&mut p, &OperatorContext::for_test("shuffle", subtask, 4), n);
    p
}

#[test]
fn before_statistics_records_go_round_robin_from_a_random_start() {
    let mut starts = [0usize; 4];
    for seed in 0..200 {
        let cells = Arc::new(RouteCells::default());
        let mut p = opened(&cells, (seed % 4) as usize, 4, seed);
        let got: Vec<usize> = (0..8u32).map(|r| p.partition(&r, 4)).collect();
        let start = got[0];
        let expected: Vec<usize> = (0..8).map(|i| (start + i) % 4).collect();
        assert_eq!(got, expected, "seed {seed}");
        starts[start] += 1;
        assert!(!p.has_statistics());
    }
    // Every start occurs, so producer subtasks do not move in step.
    assert!(starts.iter().all(|&c| c > 20), "{starts:?}");
}

#[test]
fn published_statistics_apply_from_the_next_record() {
    let cells = Arc::new(RouteCells::default());
    let mut p = opened(&cells, 1, 3, 7);
    p.partition(&5, 3);
    let cell = cells.cell(1, 0);
    assert_eq!(cell.downstream_parallelism(), 3);
    // Keys 0, 1, 2 of weight 10 each over 3 subtasks: one key per subtask.
    cell.publish(table(
        CompletedData::Map(vec![(0, 10), (1, 10), (2, 10)]),
        3,
    ));
    let got: Vec<usize> = [2u32, 0, 1, 2].iter().map(|k| p.partition(k, 3)).collect();
    assert_eq!(got, vec![2, 0, 1, 2]);
    assert!(p.has_statistics());
    // Another subtask's partitioner is not affected.
    let mut other = opened(&cells, 2, 3, 7);
    other.partition(&0, 3);
    assert!(!other.has_statistics());
}

#[test]
fn a_split_key_is_chosen_by_weight_over_many_draws() {
    // Key 0 weighs 700 of 1,000 over 4 subtasks (target 250): 250, 250, 200 on 0, 1, 2.
    let cells = Arc::new(RouteCells::default());
    let mut p = opened(&cells, 0, 4, 11);
    cells
        .cell(0, 0)
        .publish(table(CompletedData::Map(vec![(0, 700), (1, 300)]), 4));
    let mut counts = [0u64; 4];
    let draws = 140_000;
    for _ in 0..draws {
        counts[p.partition(&0, 4)] += 1;
    }
    for (s, share) in [(0, 250.0), (1, 250.0), (2, 200.0)] {
        let expected = draws as f64 * share / 700.0;
        assert!(
            (counts[s] as f64 - expected).abs() < expected * 0.005,
            "{counts:?}"
        );
    }
    assert_eq!(counts[3], 0);
    // Iceberg's random choice gets the same proportions, only with more noise.
    let c = CompletedStatistics {
        checkpoint: 1,
        downstream_parallelism: 4,
        data: CompletedData::Map(vec![(0u32, 700), (1, 300)]),
    };
    let g = GlobalStatistics::compute(&c, 4, 0.0).unwrap();
    let crate::Routing::Map(m) = &g.routing else {
        panic!("expected a map")
    };
    let mut rng = Rng::new(5);
    let mut random = [0u64; 4];
    for _ in 0..draws {
        random[m
            .get(&0)
            .unwrap()
            .select_random(&mut crate::assignment::uniform(&mut rng))] += 1;
    }
    for (s, share) in [(0, 250.0), (1, 250.0), (2, 200.0)] {
        let expected = draws as f64 * share / 700.0;
        assert!(
            (random[s] as f64 - expected).abs() < expected * 0.02,
            "{random:?}"
        );
    }
}

#[test]
fn sketch_bounds_route_by_binary_search() {
    let cells = Arc::new(RouteCells::default());
    let mut p = opened(&cells, 0, 4, 1);
    // 0..400 sampled: bounds 99, 199, 299.
    cells
        .cell(0, 0)
        .publish(table(CompletedData::Sketch((0..400).collect()), 4));
    let got: Vec<usize> = [0u32, 99, 100, 250, 399]
        .iter()
        .map(|k| p.partition(k, 4))
        .collect();
    assert_eq!(got, vec![0, 0, 1, 2, 3]);
}

#[test]
fn sketch_keys_outside_the_samples_are_spread_by_hash() {
    let cells = Arc::new(RouteCells::default());
    let mut p = opened(&cells, 0, 4, 1);
    // 1000..1400 sampled; then the keys move on to 5000.. (a newer time bucket): Iceberg's
    // rule sends them all to the last range, sluice spreads them by hash, each key to one
    // subtask.
    cells
        .cell(0, 0)
        .publish(table(CompletedData::Sketch((1_000..1_400).collect()), 4));
    let mut counts = [0u64; 4];
    for k in 5_000u32..9_000 {
        let s = p.partition(&k, 4);
        assert_eq!(p.partition(&k, 4), s, "a key keeps its subtask");
        counts[s] += 1;
    }
    for c in counts {
        assert!((900..=1_100).contains(&c), "{counts:?}");
    }
    // Below the lowest sample, too; within the samples, the bounds.
    let low: std::collections::BTreeSet<usize> = (0..400u32).map(|k| p.partition(&k, 4)).collect();
    assert_eq!(low.len(), 4, "{low:?}");
    assert_eq!(p.partition(&1_000, 4), 0);
    assert_eq!(p.partition(&1_399, 4), 3);
}

#[test]
fn statistics_for_n_subtasks_route_among_more_or_fewer() {
    let four = table(CompletedData::Map((0..8).map(|k| (k, 10)).collect()), 4);
    let cells = Arc::new(RouteCells::default());
    // Scale up to 6: keys keep their subtasks 0..4, subtasks 4 and 5 get nothing until new
    // statistics arrive.
    let mut up = opened(&cells, 0, 6, 1);
    cells.cell(0, 0).publish(four.clone());
    let at6: Vec<usize> = (0..8u32).map(|k| up.partition(&k, 6)).collect();
    assert_eq!(at6, vec![0, 0, 1, 1, 2, 2, 3, 3]);
    // Scale down to 3: subtask 3's keys fold onto 0.
    let mut down = opened(&cells, 1, 3, 1);
    cells.cell(1, 0).publish(four);
    let at3: Vec<usize> = (0..8u32).map(|k| down.partition(&k, 3)).collect();
    assert_eq!(at3, vec![0, 0, 1, 1, 2, 2, 0, 0]);
    // Sketch bounds too: 3 bounds for 4 ranges, routed among 2.
    let mut sketch = opened(&cells, 2, 2, 1);
    cells
        .cell(2, 0)
        .publish(table(CompletedData::Sketch((0..400).collect()), 4));
    let at2: Vec<usize> = [0u32, 150, 250, 350]
        .iter()
        .map(|k| sketch.partition(k, 2))
        .collect();
    assert_eq!(at2, vec![0, 1, 0, 1]);
}

#[test]
fn a_new_attempt_starts_from_a_fresh_cell() {
    let cells: RouteCells<u32> = RouteCells::default();
    let first = cells.cell(0, 0);
    first.publish(table(CompletedData::Map(vec![(1, 1)]), 2));
    assert!(Arc::ptr_eq(&first, &cells.cell(0, 0)));
    let second = cells.cell(0, 1);
    assert!(second.current().is_none());
    // A late call of the old attempt does not take the new attempt's cell.
    assert!(!Arc::ptr_eq(&cells.cell(0, 0), &second));
    assert!(Arc::ptr_eq(&cells.cell(0, 1), &second));
}

#[test]
fn routing_counters_add_up() {
    let metrics = ShuffleMetrics::default();
    let cells = Arc::new(RouteCells::default());
    {
        let mut p = RangePartitioner::new(identity as KeyFn, cells.clone(), metrics.clone());
        Partitioner::<u32>::open(&mut p, &OperatorContext::for_test("s", 0, 1), 2);
        for r in 0..10_000u32 {
            p.partition(&r, 2);
        }
        cells
            .cell(0, 0)
            .publish(table(CompletedData::Map(vec![(0, 5), (1, 5)]), 2));
        for r in 0..5_000u32 {
            p.partition(&(r % 4), 2); // keys 2 and 3 are unknown
        }
    }
    assert_eq!(metrics.routed_round_robin(), 10_000);
    assert_eq!(metrics.routed_by_statistics(), 5_000);
    assert_eq!(metrics.unknown_keys(), 2_500);
}

#[test]
fn a_batch_is_routed_as_its_records_would_be_one_by_one() {
    // Round robin before statistics, Map with split, single and unknown keys, Sketch; at the
    // statistics' parallelism and folded onto fewer subtasks.
    let records: Vec<u32> = (0..5_000u32).map(|i| (i * 7919) % 13).collect();
    let tables = [
        None,
        Some(table(
            CompletedData::Map(vec![(0, 700), (1, 300), (2, 50), (3, 20), (4, 5)]),
            4,
        )),
        Some(table(CompletedData::Sketch((0..12).collect()), 4)),
    ];
    for (case, t) in tables.iter().enumerate() {
        for n in [4usize, 3] {
            let (one_cells, batch_cells) = (
                Arc::new(RouteCells::default()),
                Arc::new(RouteCells::default()),
            );
            let mut one = opened(&one_cells, 1, n, 99);
            let mut batched = opened(&batch_cells, 1, n, 99);
            if let Some(t) = t {
                one_cells.cell(1, 0).publish(t.clone());
                batch_cells.cell(1, 0).publish(t.clone());
            }
            let expected: Vec<usize> = records.iter().map(|r| one.partition(r, n)).collect();
            let mut got = Vec::new();
            for chunk in records.chunks(333) {
                batched.partition_batch(chunk, n, &mut got);
            }
            assert_eq!(got, expected, "case {case}, {n} subtasks");
        }
    }
}
