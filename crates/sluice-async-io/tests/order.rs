//! Output order through real jobs: ordered, unordered and key-ordered modes, with watermarks
//! between batches and random request latencies (on tokio's paused clock), one call per record
//! or in batches of random size and delay.

mod common;

use common::{Calls, Recorder, Seen, calls_of, latency, paused_runtime};
use proptest::prelude::*;
use sluice_async_io::{AsyncWait, async_fn};
use sluice_runtime::prelude::*;
use std::time::Duration;

#[derive(Clone, Copy, Debug)]
enum Mode {
    Ordered,
    Unordered,
    KeyOrdered,
}

/// Runs 0..n through an async wait with random latencies, watermarks after every source batch,
/// and returns what the operator emitted (records and watermarks, in order).
async fn run(
    calls: Calls,
    mode: Mode,
    n: u64,
    batch: usize,
    capacity: usize,
    seed: u64,
) -> Vec<Seen<u64>> {
    let env = StreamEnvironment::new();
    env.set_parallelism(1).set_batch_size(batch);
    let input = env.from_iter(0..n).assign_timestamps_and_watermarks(
        WatermarkStrategy::for_monotonous_timestamps(|x: &u64| *x as i64),
    );
    let func = async_fn(move |x: u64| async move {
        tokio::time::sleep(latency(x, seed, 50)).await;
        Ok(Some(x))
    });
    let (_, stream) = async_wait!(calls, func, &input, |w| {
        let w = w.timeout(Duration::from_secs(10)).capacity(capacity);
        match mode {
            Mode::Ordered => w.ordered(),
            Mode::Unordered => w.unordered(),
            Mode::KeyOrdered => w.key_ordered(|x: &u64| x % 3),
        }
    });
    let recorder = Recorder::new();
    stream.unwrap().process(recorder.clone()).discard();
    env.execute("order").await.unwrap();
    recorder.seen()
}

/// Every record leaves exactly once, no record crosses a watermark, watermarks keep their order.
fn check_common(seen: &[Seen<u64>], n: u64) {
    let mut records: Vec<u64> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Record(r) => Some(*r),
            Seen::Watermark(_) => None,
        })
        .collect();
    records.sort();
    assert_eq!(
        records,
        (0..n).collect::<Vec<_>>(),
        "lost or doubled records"
    );
    let mut last_wm = i64::MIN;
    for (i, s) in seen.iter().enumerate() {
        if let Seen::Watermark(w) = *s {
            assert!(w > last_wm, "watermark {w} after {last_wm}");
            last_wm = w;
            // A monotonous watermark w follows the batch whose highest record is w + 1.
            for (j, other) in seen.iter().enumerate() {
                if let Seen::Record(r) = *other {
                    let before_in_input = w == i64::MAX || (r as i64) <= w.saturating_add(1);
                    assert_eq!(
                        j < i,
                        before_in_input,
                        "record {r} crossed watermark {w}: {seen:?}"
                    );
                }
            }
        }
    }
    assert_eq!(last_wm, i64::MAX, "the final watermark is missing");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn ordered_output_equals_input_order(n in 1u64..300, batch in 1usize..40, capacity in 1usize..40, seed in any::<u64>(), size in 0usize..6, delay in 0u64..4) {
        let seen = paused_runtime().block_on(run(calls_of(size, delay), Mode::Ordered, n, batch, capacity, seed));
        check_common(&seen, n);
        let records: Vec<u64> = seen.iter().filter_map(|s| match s { Seen::Record(r) => Some(*r), _ => None }).collect();
        prop_assert_eq!(records, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn unordered_output_respects_watermarks(n in 1u64..300, batch in 1usize..40, capacity in 1usize..40, seed in any::<u64>(), size in 0usize..6, delay in 0u64..4) {
        let seen = paused_runtime().block_on(run(calls_of(size, delay), Mode::Unordered, n, batch, capacity, seed));
        check_common(&seen, n);
    }

    #[test]
    fn keyed_output_keeps_order_per_key(n in 1u64..300, batch in 1usize..40, capacity in 1usize..40, seed in any::<u64>(), size in 0usize..6, delay in 0u64..4) {
        let seen = paused_runtime().block_on(run(calls_of(size, delay), Mode::KeyOrdered, n, batch, capacity, seed));
        check_common(&seen, n);
        for k in 0..3 {
            let of_k: Vec<u64> = seen.iter().filter_map(|s| match s { Seen::Record(r) if r % 3 == k => Some(*r), _ => None }).collect();
            let want: Vec<u64> = (0..n).filter(|x| x % 3 == k).collect();
            prop_assert_eq!(of_k, want);
        }
    }
}

/// Unordered mode really lets fast records overtake slow ones (within a watermark segment), and
/// key-ordered mode lets other keys overtake.
#[tokio::test(start_paused = true)]
async fn unordered_and_keyed_modes_let_fast_results_overtake() {
    for keyed in [false, true] {
        let env = StreamEnvironment::new();
        env.set_parallelism(1);
        let wait = AsyncWait::new(async_fn(|x: u64| async move {
            // Record 0 is slow; the others are fast.
            let ms = if x == 0 { 100 } else { 1 };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(Some(x))
        }))
        .capacity(10);
        let wait = if keyed {
            wait.key_ordered(|x: &u64| *x == 0 || *x == 2)
        } else {
            wait.unordered()
        };
        let out = wait.apply(&env.from_iter(0u64..4)).unwrap().collect();
        env.execute("overtake").await.unwrap();
        let got = out.take();
        if keyed {
            // Key `true` = {0, 2} stays in order; 1 and 3 overtake.
            assert_eq!(got, vec![1, 3, 0, 2]);
        } else {
            assert_eq!(got, vec![1, 2, 3, 0]);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn parallel_subtasks_each_keep_their_order() {
    let env = StreamEnvironment::new();
    env.set_parallelism(3).set_batch_size(16);
    let recorder = Recorder::new();
    let out = AsyncWait::new(async_fn(|x: u64| async move {
        tokio::time::sleep(latency(x, 3, 20)).await;
        Ok(Some(x))
    }))
    .capacity(5)
    .apply(&env.from_iter(0u64..600))
    .unwrap()
    .process(recorder.clone())
    .parallelism(3)
    .collect();
    env.execute("parallel").await.unwrap();
    assert_eq!(out.len(), 600);
    // from_iter gives subtask s the contiguous share [200 s, 200 (s + 1)); ordered mode keeps it.
    let seen = recorder.records();
    for s in 0..3u64 {
        let share: Vec<u64> = seen.iter().copied().filter(|x| x / 200 == s).collect();
        assert_eq!(share, (200 * s..200 * (s + 1)).collect::<Vec<_>>());
    }
}
