//! Exactly-once through the async operator: jobs with requests in flight at their checkpoints,
//! retried errors and injected failures commit exactly one result per input.
//!
//! `SLUICE_ASYNC_EXACTLY_ONCE_TRIALS=N` runs N trials instead of the CI default of 12.

mod common;

use common::{Calls, calls_of};
use sluice_async_io::{AsyncRetryStrategy, async_fn};
use sluice_connectors::file::{JsonLinesSink, read_committed};
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{FailureInjector, PassThrough, SplitMix64};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Returns (restarts, snapshots, snapshots with requests in flight).
async fn trial(seed: u64) -> (u32, u64, u64) {
    let mut rng = SplitMix64(seed);
    let p = rng.range(1, 3) as usize;
    let n = rng.range(1_000, 4_000);
    let capacity = rng.range(4, 32) as usize;
    let ordered = rng.next_u64().is_multiple_of(2);
    // Half the trials batch their calls.
    let way = if rng.next_u64().is_multiple_of(2) {
        Calls::PerRecord
    } else {
        calls_of(rng.range(1, 20) as usize, rng.range(0, 3))
    };
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();

    let env = StreamEnvironment::new();
    env.set_parallelism(p).set_batch_size(16);
    env.enable_checkpointing(Duration::from_millis(rng.range(2, 6)));
    env.set_checkpoint_storage(checkpoints.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(20, Duration::ZERO).unwrap());

    let in_flight = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    // One call in 20 fails, one batch in about 20 when batched (one failing call fails its batch).
    let fail_every = match way {
        Calls::PerRecord => 20,
        Calls::Batched { size, .. } => 20 * size as u64,
    };
    let func = {
        let (in_flight, calls) = (in_flight.clone(), calls.clone());
        async_fn(move |x: u64| {
            let in_flight = in_flight.clone();
            let call = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                in_flight.fetch_add(1, Ordering::SeqCst);
                // A few milliseconds of "I/O"; one call in 20 fails and is retried.
                tokio::time::sleep(Duration::from_micros(200 + (x * 7919 + call) % 2_000)).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                if (x + call).is_multiple_of(fail_every) {
                    return Err("transient lookup failure".into());
                }
                Ok(Some(x * 2))
            }
        })
    };
    let retry = AsyncRetryStrategy::fixed_delay(5, Duration::from_millis(1))
        .if_error(|_| true)
        .build()
        .unwrap();
    let (snapshots, with_in_flight) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let source = env
        .from_generator(Generator::new(|i| i).take(n).rate_limit(200_000.0))
        .process(FailureInjector::seeded(0.03, seed).times(2));
    let (_, enriched) = async_wait!(way, func, &source, |w| {
        let w = w
            .capacity(capacity)
            .timeout(Duration::from_secs(10))
            .retry(retry);
        if ordered { w.ordered() } else { w.unordered() }
    });
    enriched
        .unwrap()
        // Counts, at each snapshot of its chain, whether async requests were in flight.
        .process({
            let (in_flight, snapshots, with_in_flight) =
                (in_flight.clone(), snapshots.clone(), with_in_flight.clone());
            PassThrough::new().on_snapshot(move |_, _| {
                snapshots.fetch_add(1, Ordering::SeqCst);
                if in_flight.load(Ordering::SeqCst) > 0 {
                    with_in_flight.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .sink_to_exactly_once(JsonLinesSink::new(dir.path(), "enriched"));
    let context =
        format!("seed {seed}: p {p}, {n} records, capacity {capacity}, ordered {ordered}, {way:?}");
    let result = env
        .execute("async-exactly-once")
        .await
        .unwrap_or_else(|e| panic!("{context}: {e}"));
    let mut got: Vec<u64> = read_committed(dir.path()).unwrap();
    got.sort_unstable();
    let expected: Vec<u64> = (0..n).map(|x| x * 2).collect();
    assert_eq!(
        got.len(),
        expected.len(),
        "{context}: lost or doubled ({} restarts)",
        result.restarts
    );
    assert_eq!(got, expected, "{context}");
    (
        result.restarts,
        snapshots.load(Ordering::SeqCst),
        with_in_flight.load(Ordering::SeqCst),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_committed_exactly_once_with_requests_in_flight_at_checkpoints() {
    let trials: u64 = std::env::var("SLUICE_ASYNC_EXACTLY_ONCE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let (mut restarts, mut snapshots, mut with_in_flight) = (0, 0, 0);
    for t in 0..trials {
        let (r, s, w) = trial(0xa5c0_0000 + t).await;
        restarts += u64::from(r);
        snapshots += s;
        with_in_flight += w;
    }
    println!(
        "{trials} trials: {restarts} restarts, {with_in_flight} of {snapshots} snapshots had requests in flight"
    );
    assert!(
        restarts >= trials / 2,
        "only {restarts} restarts in {trials} trials"
    );
    assert!(
        snapshots > 0 && with_in_flight * 10 >= snapshots * 8,
        "{with_in_flight} of {snapshots} snapshots had requests in flight"
    );
}
