//! The async wait operator driven through `testing::OperatorTestHarness` on tokio's paused
//! clock: results leave as their calls complete but never across a watermark, and requests in
//! flight at a snapshot are issued again by the restored operator.

use sluice_async_io::{AsyncWait, async_fn};
use sluice_core::{StreamElement, Watermark};
use sluice_runtime::prelude::*;
use sluice_runtime::testing::OperatorTestHarness;
use std::time::Duration;

/// Takes `x` milliseconds, then returns `x`.
async fn takes_x_ms(x: u64) -> Result<[u64; 1], UserError> {
    tokio::time::sleep(Duration::from_millis(x)).await;
    Ok([x])
}

fn unordered() -> impl Operator<u64, Out = u64> + Clone {
    AsyncWait::new(async_fn(takes_x_ms))
        .unordered()
        .capacity(8)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn unordered_results_leave_as_they_complete_but_not_across_a_watermark() {
    let mut h = OperatorTestHarness::new(unordered());
    h.process_batch(vec![30, 10, 20]).unwrap();
    h.process_watermark(Watermark::new(100)).unwrap();
    h.process_record(5).unwrap();
    assert!(
        !h.poll_pending().unwrap(),
        "nothing completes before time passes"
    );
    assert!(h.output().is_empty());
    h.end_input().unwrap();
    h.wait_pending().await.unwrap();
    h.close().unwrap();
    assert_eq!(
        h.take_output(),
        vec![
            StreamElement::records(vec![10]),
            StreamElement::records(vec![20]),
            StreamElement::records(vec![30]),
            StreamElement::Watermark(Watermark::new(100)),
            StreamElement::records(vec![5]),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn requests_in_flight_at_a_snapshot_are_issued_again_after_a_restore() {
    let mut h = OperatorTestHarness::new(unordered());
    h.process_batch(vec![10, 30, 50]).unwrap();
    h.poll_pending().unwrap();
    tokio::time::advance(Duration::from_millis(15)).await;
    h.poll_pending().unwrap();
    assert_eq!(h.records(), vec![10]);
    assert!(h.has_pending());

    let snapshot = h.snapshot(1).unwrap();
    assert_eq!(snapshot.entries().len(), 2, "30 and 50 are in flight");
    drop(h);

    let mut restored = OperatorTestHarness::new(unordered())
        .restore(vec![snapshot])
        .unwrap();
    restored.end_input().unwrap();
    let started = tokio::time::Instant::now();
    restored.wait_pending().await.unwrap();
    assert_eq!(restored.records(), vec![30, 50]);
    // Issued again from the start: 50 ms for the slowest, not 50 - 15.
    assert_eq!(started.elapsed(), Duration::from_millis(50));
}

#[tokio::test(start_paused = true)]
async fn each_result_keeps_its_inputs_event_time_through_a_snapshot_and_a_backlog() {
    // Capacity 2: the third record waits in the backlog, so all three places a record can be
    // (a slot, a completed slot, the backlog) are snapshotted.
    let op = || {
        AsyncWait::new(async_fn(takes_x_ms))
            .unordered()
            .capacity(2)
            .build()
            .unwrap()
    };
    let mut h = OperatorTestHarness::new(op());
    h.process_timed_batch(vec![10, 30, 50], vec![1_000, 3_000, 5_000])
        .unwrap();
    tokio::time::advance(Duration::from_millis(15)).await;
    h.poll_pending().unwrap();
    assert_eq!(h.timed_records(), vec![(10, Some(1_000))]);

    let snapshot = h.snapshot(1).unwrap();
    drop(h);
    let mut restored = OperatorTestHarness::new(op())
        .restore(vec![snapshot])
        .unwrap();
    restored.process_record(7).unwrap();
    restored.end_input().unwrap();
    restored.wait_pending().await.unwrap();
    let mut got = restored.timed_records();
    got.sort();
    assert_eq!(
        got,
        vec![(7, None), (30, Some(3_000)), (50, Some(5_000))],
        "restored records keep their event times; a record without one gets none"
    );
}
