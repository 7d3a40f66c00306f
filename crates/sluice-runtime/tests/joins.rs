//! Joins in jobs at parallelism 2, through `StreamEnvironment`: an interval join against a
//! nested loop over its inputs, a window join and a co-group against the same per window,
//! and the errors a join can meet: bounds the wrong way round are refused at submit; a record
//! without an event time fails the job saying so.

use sluice_runtime::prelude::*;
use sluice_runtime::process::{JoinContext, ProcessJoinFunction};
use sluice_runtime::window::TumblingEventTimeWindows;
use std::collections::BTreeMap;
use std::time::Duration;

/// (key, event time, id)
type Rec = (u32, i64, u32);

fn by_time() -> WatermarkStrategy<Rec> {
    WatermarkStrategy::for_monotonous_timestamps(|r: &Rec| r.1)
}

/// Records in event-time order (none is late), keys 0..7.
fn records(n: u32, step: i64, seed: u32) -> Vec<Rec> {
    (0..n)
        .map(|i| ((i * 3 + seed) % 7, i64::from(i) * step, i))
        .collect()
}

#[derive(Clone)]
struct Ids;
impl ProcessJoinFunction<Rec, Rec> for Ids {
    type Out = (u32, u32, i64);
    fn process_element(
        &mut self,
        left: Rec,
        right: Rec,
        ctx: &mut JoinContext<'_, Self::Out>,
    ) -> Result<(), UserError> {
        ctx.collect((left.2, right.2, ctx.timestamp()));
        Ok(())
    }
}

#[test]
fn an_interval_join_at_parallelism_2_finds_every_pair_within_its_bounds() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(16);
    let lefts = records(400, 5, 0);
    let rights = records(300, 7, 3);
    let l = env
        .from_iter(lefts.clone())
        .parallelism(1)
        .assign_timestamps_and_watermarks(by_time())
        .key_by(|r: &Rec| r.0);
    let r = env
        .from_iter(rights.clone())
        .parallelism(1)
        .assign_timestamps_and_watermarks(by_time())
        .key_by(|r: &Rec| r.0);
    let out = l
        .interval_join(&r)
        .between_millis(-20, 30)
        .upper_bound_exclusive()
        .process(Ids)
        .collect();
    env.execute_blocking("interval join").unwrap();
    let mut got = out.take();
    got.sort();
    let mut want = Vec::new();
    for a in &lefts {
        for b in &rights {
            if a.0 == b.0 && a.1 - 20 <= b.1 && b.1 < a.1 + 30 {
                want.push((a.2, b.2, a.1.max(b.1)));
            }
        }
    }
    want.sort();
    assert!(!want.is_empty());
    assert_eq!(got, want);
}

#[test]
fn a_window_join_and_a_co_group_at_parallelism_2_see_each_window_of_each_key() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(16);
    let lefts = records(300, 3, 1);
    let rights = records(200, 4, 5);
    let l = env
        .from_iter(lefts.clone())
        .parallelism(1)
        .assign_timestamps_and_watermarks(by_time());
    let r = env
        .from_iter(rights.clone())
        .parallelism(1)
        .assign_timestamps_and_watermarks(by_time());
    let window = || TumblingEventTimeWindows::of(Duration::from_millis(50));
    let pairs = l
        .join(&r)
        .where_(|a: &Rec| a.0)
        .equal_to(|b: &Rec| b.0)
        .window(window())
        .apply(|a: Rec, b: Rec| (a.2, b.2))
        .collect();
    let groups = l
        .co_group(&r)
        .where_(|a: &Rec| a.0)
        .equal_to(|b: &Rec| b.0)
        .window(window())
        .apply(|k: &u32, a: Vec<Rec>, b: Vec<Rec>| [(*k, a.len(), b.len())])
        .collect();
    env.execute_blocking("window join").unwrap();

    let mut windows: BTreeMap<(u32, i64), (Vec<u32>, Vec<u32>)> = BTreeMap::new();
    for a in &lefts {
        windows.entry((a.0, a.1 / 50)).or_default().0.push(a.2);
    }
    for b in &rights {
        windows.entry((b.0, b.1 / 50)).or_default().1.push(b.2);
    }
    let mut want_pairs = Vec::new();
    let mut want_groups = Vec::new();
    for ((k, _), (a, b)) in &windows {
        for x in a {
            for y in b {
                want_pairs.push((*x, *y));
            }
        }
        want_groups.push((*k, a.len(), b.len()));
    }
    want_pairs.sort();
    want_groups.sort();
    let mut got_pairs = pairs.take();
    got_pairs.sort();
    let mut got_groups = groups.take();
    got_groups.sort();
    assert!(!want_pairs.is_empty());
    assert_eq!(got_pairs, want_pairs);
    assert_eq!(got_groups, want_groups);
}

#[test]
fn an_interval_join_with_its_bounds_the_wrong_way_round_is_refused_at_submit() {
    let env = StreamEnvironment::new();
    let l = env.from_iter(records(3, 1, 0)).key_by(|r: &Rec| r.0);
    let r = env.from_iter(records(3, 1, 0)).key_by(|r: &Rec| r.0);
    let _out = l
        .interval_join(&r)
        .between_millis(5, -5)
        .process(Ids)
        .collect();
    match env.execute_blocking("bad bounds") {
        Err(JobError::InvalidJob(m)) => {
            assert!(
                m.contains("lower bound (5 ms) is above its upper bound (-5 ms)"),
                "{m}"
            );
        }
        other => panic!("expected InvalidJob, got {other:?}"),
    }
}

#[test]
fn an_interval_join_of_records_without_event_times_fails_the_job_saying_so() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let l = env.from_iter(records(10, 1, 0)).key_by(|r: &Rec| r.0);
    let r = env.from_iter(records(10, 1, 0)).key_by(|r: &Rec| r.0);
    let _out = l
        .interval_join(&r)
        .between_millis(0, 5)
        .process(Ids)
        .collect();
    let err = env.execute_blocking("no timestamps").unwrap_err();
    let message = format!("{err}");
    assert!(message.contains("has no event time"), "{message}");
}
