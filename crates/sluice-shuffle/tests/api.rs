//! The `range_shuffle` API: bad settings are refused at submit time naming the operator, and
//! the shuffle operator runs at its input's parallelism (so that it chains).

use sluice_runtime::JobError;
use sluice_runtime::prelude::*;
use sluice_shuffle::{RangeShuffle, RangeShuffleConfig};

fn refused(config: RangeShuffleConfig, downstream: usize) -> String {
    let env = StreamEnvironment::new();
    env.from_iter(vec![1u64, 2, 3])
        .range_shuffle(|k: &u64| *k, config)
        .map(|k| k)
        .parallelism(downstream)
        .discard();
    match env.submit("refused") {
        Err(JobError::InvalidJob(m)) => m,
        Err(other) => panic!("expected an invalid job, got {other}"),
        Ok(_) => panic!("the job was accepted"),
    }
}

#[test]
fn a_base_weight_outside_0_to_100_percent_is_refused_at_submit() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    for bad in [-1.0, 100.5, f64::NAN] {
        let m = refused(
            RangeShuffleConfig::default()
                .base_weight_percent(bad)
                .name("Shuffle by user"),
            2,
        );
        assert!(m.contains("'Shuffle by user'"), "{m}");
        assert!(m.contains("base weight"), "{m}");
    }
    let m = refused(RangeShuffleConfig::default(), 0);
    assert!(m.contains("parallelism must be at least 1, got 0"), "{m}");
}

#[test]
fn the_shuffle_runs_at_its_inputs_parallelism_and_keeps_every_record() {
    let env = StreamEnvironment::new();
    env.set_parallelism(4);
    let out = env
        .from_iter(0u64..1_000)
        .parallelism(3)
        .range_shuffle(
            |k: &u64| k % 7,
            RangeShuffleConfig::default().base_weight_percent(100.0),
        )
        .map(|k| k)
        .parallelism(2)
        .collect();
    let result = env.execute_blocking("parallelism").unwrap();
    assert_eq!(result.metrics.subtasks_of("Range Shuffle").count(), 3);
    let mut got = out.take();
    got.sort();
    assert_eq!(got, (0..1_000).collect::<Vec<_>>());
}
