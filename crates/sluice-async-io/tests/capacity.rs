//! Backpressure: at most `capacity` requests in flight per subtask while the source is held back,
//! and user futures keep being driven while the operator's output channel is full.

mod common;

use common::{CALLS, Concurrency, SlowLookup, calls_of, latency};
use sluice_async_io::{AsyncWait, async_fn};
use sluice_runtime::prelude::*;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn in_flight_never_exceeds_capacity_while_the_source_is_backpressured() {
    let all_calls = [CALLS[0], CALLS[1], calls_of(4, 2)];
    for ((parallelism, capacity, batch), calls) in
        [(1usize, 7usize, 1024usize), (2, 3, 5), (1, 1, 64)]
            .into_iter()
            .flat_map(|case| all_calls.map(|calls| (case, calls)))
    {
        let env = StreamEnvironment::new();
        env.set_parallelism(parallelism).set_batch_size(batch);
        let concurrency = Concurrency::default();
        let n = 2_000u64;
        let lookup = SlowLookup {
            concurrency: concurrency.clone(),
            // from_iter gives subtask 0 the first half when parallelism is 2.
            split: if parallelism == 2 { n / 2 } else { u64::MAX },
            max_ms: 30,
        };
        let (metrics, stream) = async_wait!(calls, lookup, &env.from_iter(0..n), |w| w
            .capacity(capacity)
            .timeout(Duration::from_secs(60))
            .unordered());
        let out = stream.unwrap().collect();
        env.execute("capacity").await.unwrap();
        assert_eq!(out.len(), n as usize);
        for group in 0..parallelism {
            let max = concurrency.max(group);
            assert!(
                max <= capacity,
                "{calls:?}, subtask {group}: {max} calls in flight > {capacity}"
            );
            // The source outpaces the requests, so the operator must have been full: that is
            // what held the source back.
            assert_eq!(max, capacity, "subtask {group} never filled its capacity");
        }
        let total = metrics.total();
        assert_eq!(total.subtasks, parallelism);
        assert_eq!(total.in_flight, 0);
        assert_eq!(total.completed, n);
    }
}

/// The trap of `futures::StreamExt::buffered`: a stream that is not polled while its consumer
/// waits does not drive its futures, so they time out. Here the operator's output channel stays
/// full behind a slow downstream operator for far longer than the upstream timeout; the
/// upstream requests must still complete within it.
#[tokio::test(start_paused = true)]
async fn futures_are_driven_while_the_output_channel_is_full() {
    for calls in CALLS {
        let env = StreamEnvironment::new();
        env.set_parallelism(1)
            .set_batch_size(1)
            .set_channel_capacity(1);
        let fast = async_fn(|x: u64| async move {
            // Ten steps: a future that is not polled does not advance (like a real request, which
            // must be polled to send and receive).
            for _ in 0..10 {
                tokio::time::sleep(latency(x, 1, 3) + Duration::from_millis(1)).await;
            }
            Ok(Some(x))
        });
        let (_, fast) = async_wait!(calls, fast, &env.from_iter(0u64..200), |w| w
            .capacity(20)
            .timeout(Duration::from_millis(100)) // default timeout handling fails the job
            .unordered()
            .name("fast lookup"));
        let fast = fast.unwrap();
        // A parallelism of 2 downstream puts a network channel between the two operators.
        let slow = AsyncWait::new(async_fn(|x: u64| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(Some(x))
        }))
        .capacity(1)
        .name("slow lookup")
        .apply(&fast.rebalance())
        .unwrap()
        .parallelism(2);
        let out = slow.collect();
        env.execute("slow downstream").await.unwrap();
        let mut got = out.take();
        got.sort();
        assert_eq!(got, (0u64..200).collect::<Vec<_>>());
    }
}

/// An async operator at its capacity is what holds its chain back, and its metrics say so as a
/// Flink user reads them: the time the task waits on it is busy time for it (and for the task:
/// Flink counts a task blocked on a full async queue as busy), backpressured time for the
/// source before it in the chain, and the vertex (the chain) reads busy, not backpressured.
/// The paused clock makes every request take exactly its sleep.
#[tokio::test(start_paused = true)]
async fn the_wait_on_a_full_async_operator_is_its_busy_time_and_its_upstreams_backpressure() {
    const N: u64 = 20;
    let env = StreamEnvironment::new();
    env.set_parallelism(1).set_batch_size(4);
    let slow = async_fn(|x: u64| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(Some(x))
    });
    let out = AsyncWait::new(slow)
        .capacity(2)
        .timeout(Duration::from_secs(60))
        .unordered()
        .name("slow lookup")
        .apply(&env.from_iter(0..N).name("numbers"))
        .unwrap()
        .collect();
    let job = env.submit("full capacity").unwrap();
    let observer = job.observer();
    let result = job.await.unwrap();
    assert_eq!(out.len(), N as usize);

    let one = |name: &str| {
        let all: Vec<_> = result.metrics.subtasks_of(name).collect();
        assert_eq!(all.len(), 1, "{name}: {:?}", result.metrics);
        all[0].clone()
    };
    let (source, lookup) = (one("numbers"), one("slow lookup"));
    // Two requests of 1 s at a time: the input waited on the operator for most of the 10 s.
    let waited = Duration::from_secs(N / 2 - 2);
    assert!(lookup.busy >= waited, "{lookup:?}");
    assert!(source.backpressured >= waited, "{source:?}");
    assert!(source.busy < Duration::from_secs(1), "{source:?}");
    assert!(lookup.backpressured < Duration::from_secs(1), "{lookup:?}");

    // The vertex (numbers -> slow lookup -> the collecting sink, one chain) shows its task busy,
    // not backpressured: the dashboard's and the REST API's figures.
    let status = observer.snapshot();
    let vertex = status
        .vertices
        .iter()
        .find(|v| v.operators.iter().any(|o| o.name == "slow lookup"))
        .unwrap();
    assert_eq!(vertex.operators.len(), 3, "{vertex:?}");
    let task = &vertex.subtasks[0];
    assert!(task.busy_ms >= waited.as_millis() as u64, "{task:?}");
    assert!(task.backpressured_ms < 1_000, "{task:?}");
    let per_operator: Vec<(&str, u64, u64)> = vertex
        .operators
        .iter()
        .map(|o| {
            (
                o.name.as_str(),
                o.subtasks[0].busy_ms,
                o.subtasks[0].backpressured_ms,
            )
        })
        .collect();
    // Per operator (the REST API's vertex detail, Prometheus): the source reads backpressured,
    // the lookup busy.
    let at_least = waited.as_millis() as u64;
    let (first, second) = (per_operator[0], per_operator[1]);
    assert_eq!(first.0, "numbers");
    assert!(first.2 >= at_least && first.1 < 1_000, "{per_operator:?}");
    assert_eq!(second.0, "slow lookup");
    assert!(second.1 >= at_least && second.2 < 1_000, "{per_operator:?}");
}
