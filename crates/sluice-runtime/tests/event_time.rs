//! Records carry their event time end to end: the timestamp assigner stamps each record, and the
//! stamp follows the record through `map`, `filter` and `flat_map` in a chain, through hash and
//! rebalance exchanges between parallel tasks, and reaches a user operator's collector. Without
//! an assigner, records carry none.

use sluice_runtime::prelude::*;
use std::time::Duration;

/// Emits each record beside the event time it arrived with.
#[derive(Clone)]
struct ReadTimestamps;

impl<T: Data> Operator<T> for ReadTimestamps {
    type Out = (T, Option<i64>);
    fn process_batch(
        &mut self,
        batch: Vec<T>,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        let ts = out.input_timestamps().map(<[i64]>::to_vec);
        for (i, r) in batch.into_iter().enumerate() {
            out.collect((r, ts.as_ref().map(|ts| ts[i])));
        }
        Ok(())
    }
}

#[test]
fn timestamps_follow_records_through_chains_and_exchanges() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(7);
    // A record (key, t) has event time t * 10.
    let records: Vec<(u64, i64)> = (0..500).map(|i| (i % 13, i as i64)).collect();
    let out = env
        .from_iter(records)
        .assign_timestamps_and_watermarks(WatermarkStrategy::for_bounded_out_of_orderness(
            Duration::from_millis(5),
            |r: &(u64, i64)| r.1 * 10,
        ))
        .map(|(k, t)| (k, t, 0u8))
        .filter(|r| r.1 % 3 != 0)
        .flat_map(|r| [r, (r.0 + 100, r.1, 1)])
        .key_by(|r| r.0)
        .map(|r| r)
        .rebalance()
        .process(ReadTimestamps)
        .parallelism(3)
        .collect();
    env.execute_blocking("event time").unwrap();
    let got = out.take();
    assert_eq!(got.len(), 2 * (500 - 167));
    for ((_, t, _), ts) in got {
        assert_eq!(ts, Some(t * 10), "record at {t} lost its event time");
    }
}

#[test]
fn without_an_assigner_records_carry_no_event_time() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let out = env
        .from_iter(0..100u64)
        .map(|x| x + 1)
        .key_by(|x| *x)
        .process(ReadTimestamps)
        .collect();
    env.execute_blocking("no event time").unwrap();
    assert!(out.take().iter().all(|(_, ts)| ts.is_none()));
}
