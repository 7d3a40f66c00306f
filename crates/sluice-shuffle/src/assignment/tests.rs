//! Hand-computed assignments. Each table is worked out in the comments from the rules at the
//! top of `assignment.rs` (Iceberg's), then checked against the code.

use super::*;

/// a..g weigh 500, 200, 150, 90, 30, 20, 10: 1,000 in all.
fn table() -> Vec<(&'static str, u64)> {
    vec![
        ("d", 90),
        ("a", 500),
        ("g", 10),
        ("c", 150),
        ("e", 30),
        ("b", 200),
        ("f", 20),
    ]
}

/// The assignment as (key, subtasks, weights with base), keys in sort order.
fn rows(m: &MapAssignment<&'static str>) -> Vec<(&'static str, Vec<usize>, Vec<u64>)> {
    m.keys()
        .iter()
        .map(|(k, a)| (*k, a.subtasks().to_vec(), a.weights_with_base().to_vec()))
        .collect()
}

fn info(m: &MapAssignment<&'static str>) -> Vec<(u64, usize)> {
    m.assignment_info()
        .iter()
        .map(|s| (s.weight, s.keys))
        .collect()
}

#[test]
fn evenly_divisible_without_base_weight() {
    // target = 1000 / 4 = 250, base = 0, target with base = 250.
    // a 500: fills 0 (250) and 1 (250).  b 200: 2 (200), 50 left on 2.
    // c 150: fills 2 (50), 100 on 3, 150 left.  d 90, e 30, f 20 on 3: 10 left.
    // g 10: 10 < 10 is false, so it fills 3 exactly.
    let m = MapAssignment::from_key_frequency(4, table(), 0.0).unwrap();
    assert_eq!(m.base_weight(), 0);
    assert_eq!(
        rows(&m),
        vec![
            ("a", vec![0, 1], vec![250, 250]),
            ("b", vec![2], vec![200]),
            ("c", vec![2, 3], vec![50, 100]),
            ("d", vec![3], vec![90]),
            ("e", vec![3], vec![30]),
            ("f", vec![3], vec![20]),
            ("g", vec![3], vec![10]),
        ]
    );
    assert_eq!(info(&m), vec![(250, 1), (250, 1), (250, 2), (250, 5)]);
}

#[test]
fn evenly_divisible_with_base_weight() {
    // target = 250, base = ceil(250 × 4 / 100) = 10.
    // splits: a ceil(500/250) = 2, every other key 1.
    // with base: a 520, b 210, c 160, d 100, e 40, f 30, g 20: 1,080; target = ceil(1080/4) = 270.
    // a 520: fills 0 (270), 250 on 1 (20 left).  b 210: fills 1 (20), 190 on 2 (80 left).
    // c 160: fills 2 (80), 80 on 3 (190 left).  d 100 (90), e 40 (50), f 30 (20),
    // g 20: fills 3 exactly.
    let m = MapAssignment::from_key_frequency(4, table(), 4.0).unwrap();
    assert_eq!(m.base_weight(), 10);
    assert_eq!(
        rows(&m),
        vec![
            ("a", vec![0, 1], vec![270, 250]),
            ("b", vec![1, 2], vec![20, 190]),
            ("c", vec![2, 3], vec![80, 80]),
            ("d", vec![3], vec![100]),
            ("e", vec![3], vec![40]),
            ("f", vec![3], vec![30]),
            ("g", vec![3], vec![20]),
        ]
    );
    // Routing weights drop the base weight of every share: a 260 + 240, b 10 + 180, ...
    assert_eq!(m.get(&"b").unwrap().routing_weights(), vec![10, 180]);
    assert_eq!(info(&m), vec![(260, 1), (250, 2), (250, 2), (220, 5)]);
}

#[test]
fn unevenly_divisible_without_base_weight() {
    // target = 1000 / 3 = 333.3.., base 0, target with base = ceil(1000/3) = 334.
    // a 500: fills 0 (334), 166 on 1 (168 left).  b 200: fills 1 (168), 32 on 2 (302 left).
    // c 150, d 90, e 30, f 20, g 10 on 2: 2 left.
    let m = MapAssignment::from_key_frequency(3, table(), 0.0).unwrap();
    assert_eq!(
        rows(&m),
        vec![
            ("a", vec![0, 1], vec![334, 166]),
            ("b", vec![1, 2], vec![168, 32]),
            ("c", vec![2], vec![150]),
            ("d", vec![2], vec![90]),
            ("e", vec![2], vec![30]),
            ("f", vec![2], vec![20]),
            ("g", vec![2], vec![10]),
        ]
    );
    assert_eq!(info(&m), vec![(334, 1), (334, 2), (332, 6)]);
}

#[test]
fn unevenly_divisible_with_base_weight_pads_a_small_share() {
    // target = 333.3.., base = ceil(333.3.. × 5 / 100) = ceil(16.67) = 17.
    // splits: a ceil(1.5) = 2, others 1. With base: a 534, b 217, c 167, d 107, e 47, f 37,
    // g 27: 1,136; target = ceil(1136/3) = 379.
    // a 534: fills 0 (379), 155 on 1 (224 left).  b 217 on 1 (7 left).
    // c 167: fills 1 with 7 <= 17, so the share is padded by min(160, 17) = 17 to 24;
    //        143 on 2 (236 left).  d 107 (129), e 47 (82), f 37 (45), g 27 (18) on 2.
    let m = MapAssignment::from_key_frequency(3, table(), 5.0).unwrap();
    assert_eq!(m.base_weight(), 17);
    assert_eq!(
        rows(&m),
        vec![
            ("a", vec![0, 1], vec![379, 155]),
            ("b", vec![1], vec![217]),
            ("c", vec![1, 2], vec![24, 143]),
            ("d", vec![2], vec![107]),
            ("e", vec![2], vec![47]),
            ("f", vec![2], vec![37]),
            ("g", vec![2], vec![27]),
        ]
    );
    // Routing: a 362 + 138, b 200, c 7 + 126, d 90, e 30, f 20, g 10.
    assert_eq!(info(&m), vec![(362, 1), (345, 3), (276, 5)]);
}

#[test]
fn a_residue_no_larger_than_the_base_weight_is_dropped() {
    // x 52, y 48 over 2: target 50, base = ceil(50 × 10 / 100) = 5.
    // x: ceil(52/50) = 2 splits → 62; y: 1 split → 53; total 115, target = ceil(57.5) = 58.
    // x 62: fills 0 (58); the residue 4 <= 5 is dropped, so x stays on 0 alone.
    // y 53 on 1.
    let m = MapAssignment::from_key_frequency(2, vec![("x", 52), ("y", 48)], 10.0).unwrap();
    let rows: Vec<_> = m
        .keys()
        .iter()
        .map(|(k, a)| (*k, a.subtasks().to_vec(), a.weights_with_base().to_vec()))
        .collect();
    assert_eq!(
        rows,
        vec![("x", vec![0], vec![58]), ("y", vec![1], vec![53])]
    );
    assert_eq!(m.get(&"x").unwrap().routing_weights(), vec![53]);
}

#[test]
fn icebergs_published_nine_partition_case_with_five_percent() {
    // The weights of Iceberg's TestMapRangePartitioner (800 in all) at 9 subtasks and 5 %:
    // target 88.9, base ceil(4.44) = 5; with base 370, 245, 130, 45, 15 × 6: 880; target 98.
    let weights = [350, 230, 120, 40, 10, 10, 10, 10, 10, 10];
    let freq = weights.iter().enumerate().map(|(i, w)| (i, *w as u64));
    let m = MapAssignment::from_key_frequency(9, freq, 5.0).unwrap();
    let got: Vec<(Vec<usize>, Vec<u64>)> = m
        .keys()
        .iter()
        .map(|(_, a)| (a.subtasks().to_vec(), a.weights_with_base().to_vec()))
        .collect();
    assert_eq!(got[0], (vec![0, 1, 2, 3], vec![98, 98, 98, 76]));
    assert_eq!(got[1], (vec![3, 4, 5, 6], vec![22, 98, 98, 27]));
    assert_eq!(got[2], (vec![6, 7], vec![71, 59]));
    assert_eq!(got[3], (vec![7, 8], vec![39, 6]));
    for g in &got[4..] {
        assert_eq!(g, &(vec![8], vec![15]));
    }
    let info: Vec<(u64, usize)> = m
        .assignment_info()
        .iter()
        .map(|s| (s.weight, s.keys))
        .collect();
    assert_eq!(
        info,
        vec![
            (93, 1),
            (93, 1),
            (93, 1),
            (88, 2),
            (93, 1),
            (93, 1),
            (88, 2),
            (88, 2),
            (61, 7)
        ]
    );
}

#[test]
fn an_absent_key_sorts_first() {
    // None 10, Some(1) 10, Some(2) 20 over 2: target 20.
    // None on 0 (10 left); Some(1) fills 0 exactly; Some(2) fills 1 exactly.
    let m =
        MapAssignment::from_key_frequency(2, vec![(Some(2), 20), (None, 10), (Some(1), 10)], 0.0)
            .unwrap();
    let order: Vec<_> = m
        .keys()
        .iter()
        .map(|(k, a)| (*k, a.subtasks().to_vec()))
        .collect();
    assert_eq!(
        order,
        vec![(None, vec![0]), (Some(1), vec![0]), (Some(2), vec![1])]
    );
}

#[test]
fn bad_statistics_are_errors() {
    assert!(matches!(
        MapAssignment::from_key_frequency(2, vec![("a", 0)], 0.0),
        Err(AssignmentError::ZeroWeight(k)) if k == "\"a\""
    ));
    assert_eq!(
        MapAssignment::from_key_frequency(0, vec![("a", 1)], 0.0).unwrap_err(),
        AssignmentError::NoPartitions
    );
    assert!(KeyAssignment::new(vec![0], vec![5], 5).is_err());
    assert!(KeyAssignment::new(vec![0, 1], vec![6], 5).is_err());
    assert!(KeyAssignment::new(vec![], vec![], 0).is_err());
}

#[test]
fn the_random_choice_falls_into_the_share_of_the_draw() {
    let a = KeyAssignment::new(vec![3, 4, 5], vec![15, 25, 6], 5).unwrap();
    // Routing weights 10, 20, 1 → cumulative 10, 30, 31: 0..10 → 3, 10..30 → 4, 30 → 5.
    for (draw, subtask) in [(0, 3), (9, 3), (10, 4), (29, 4), (30, 5)] {
        assert_eq!(a.select_random(&mut |_| draw), subtask);
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Every key is assigned, subtasks are in range and non-decreasing in key order, and
        /// with no base weight every unit of weight is routed and no subtask exceeds the target.
        #[test]
        fn assignments_cover_every_key_in_order(
            weights in prop::collection::vec(1u64..10_000, 1..60),
            n in 1usize..40,
            percent in prop_oneof![Just(0.0), 0.0f64..100.0],
        ) {
            let freq: Vec<(usize, u64)> = weights.iter().copied().enumerate().collect();
            let m = MapAssignment::from_key_frequency(n, freq.clone(), percent).unwrap();
            prop_assert_eq!(m.keys().len(), weights.len());
            let mut last = 0;
            for (_, a) in m.keys() {
                for &s in a.subtasks() {
                    prop_assert!(s < n);
                    prop_assert!(s >= last);
                    last = s;
                }
            }
            if percent == 0.0 {
                let total: u64 = weights.iter().sum();
                let target = total.div_ceil(n as u64);
                for (k, a) in m.keys() {
                    prop_assert_eq!(a.key_weight(), weights[*k]);
                }
                for share in m.assignment_info() {
                    prop_assert!(share.weight <= target);
                }
            }
        }
    }
}
