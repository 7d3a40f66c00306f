//! The baselines of the async scenarios: bare `futures` stream buffering, as lean as it gets.
//!
//! `stream::iter(0..n).map(call).buffered(CAPACITY)` (or `buffer_unordered`), consumed by a
//! plain `while let` loop that digests each result: no engine, no timeout, no copy of the input,
//! no batches. `black_box` hides the record count so that nothing is precomputed.
//!
//! The futures are driven with `Runtime::block_on` on the bench's own tokio runtime (the one the
//! sluice jobs run on), so timers and wakers are the same for both sides. For the immediate
//! function the stream never returns `Pending`, so the executor plays no part at all.

use super::CAPACITY;
use super::workload::{
    CallResult, LatencySource, ORDERED_SEED, immediate, ordered_step, unordered_step,
};
use futures::{Stream, StreamExt, stream};
use std::future::Future;
use std::hint::black_box;
use tokio::runtime::Runtime;

/// Digests the results of `results` with `step`, failing on the first error.
async fn drain(
    results: impl Stream<Item = CallResult>,
    seed: u64,
    step: impl Fn(u64, u64) -> u64,
) -> anyhow::Result<u64> {
    let mut results = std::pin::pin!(results);
    let mut acc = seed;
    while let Some(r) = results.next().await {
        if let Some(x) = r.map_err(|e| anyhow::anyhow!(e))? {
            acc = step(acc, x);
        }
    }
    Ok(acc)
}

/// Calls `call` for `inputs` with at most [`CAPACITY`] in flight, results in input order
/// (`buffered`) or as they complete (`buffer_unordered`); returns their digest.
async fn buffer<F, Fut>(
    inputs: impl Iterator<Item = u64>,
    ordered: bool,
    call: F,
) -> anyhow::Result<u64>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = CallResult>,
{
    let calls = stream::iter(inputs).map(call);
    if ordered {
        drain(calls.buffered(CAPACITY), ORDERED_SEED, ordered_step).await
    } else {
        drain(calls.buffer_unordered(CAPACITY), 0, unordered_step).await
    }
}

/// `async-overhead`: the immediate function over `0..records`.
pub fn immediate_buffered(rt: &Runtime, records: u64, ordered: bool) -> anyhow::Result<u64> {
    let n = black_box(records);
    rt.block_on(buffer(0..n, ordered, immediate)).map(black_box)
}

/// `async-latency`: `parallelism` independent `buffer_unordered` streams, each a tokio task on
/// `rt` over its share of `0..records` (stride `parallelism`, like the generator's subtasks),
/// all calling `source`; returns the sum of all results.
pub fn latency_buffer_unordered(
    rt: &Runtime,
    records: u64,
    parallelism: usize,
    source: &LatencySource,
) -> anyhow::Result<u64> {
    let p = parallelism.max(1);
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for s in 0..p {
            let source = source.clone();
            tasks.spawn(async move {
                let share = (s as u64..records).step_by(p);
                buffer(share, false, move |x| source.call(x)).await
            });
        }
        let mut sum = 0u64;
        while let Some(done) = tasks.join_next().await {
            sum = sum.wrapping_add(done??);
        }
        Ok(sum)
    })
}
