//! The sluice side of the async scenarios: generator -> async wait -> digest sink, built with
//! the public `AsyncWait` builder, capacity [`CAPACITY`], a timeout on every request.

use super::CAPACITY;
use super::workload::{
    CallResult, LatencySource, ORDERED_SEED, immediate, ordered_step, unordered_step,
};
use sluice::prelude::*;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The per-request timeout of both scenarios (issue 5: "timeouts on (60 s)").
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Digests the records it receives; at the end hands its digest to the shared slot (ordered:
/// there is one subtask; unordered: the subtasks' sums are added).
#[derive(Clone)]
struct DigestSink {
    ordered: bool,
    acc: u64,
    total: Arc<AtomicU64>,
}

impl Sink<u64> for DigestSink {
    fn write_batch(&mut self, batch: Vec<u64>) -> Result<(), UserError> {
        self.acc = if self.ordered {
            batch.iter().fold(self.acc, |a, &x| ordered_step(a, x))
        } else {
            batch.iter().fold(self.acc, |a, &x| unordered_step(a, x))
        };
        Ok(())
    }

    fn finish(&mut self) -> Result<(), UserError> {
        if self.ordered {
            self.total.store(self.acc, Ordering::Relaxed);
        } else {
            self.total.fetch_add(self.acc, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Runs generator(0..records) -> async wait of `call` -> digest sink at `parallelism`; returns
/// the digest (order-sensitive when `ordered`, which needs parallelism 1).
async fn run<F, Fut>(
    records: u64,
    parallelism: usize,
    ordered: bool,
    call: F,
) -> anyhow::Result<u64>
where
    F: Fn(u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = CallResult> + Send + 'static,
{
    anyhow::ensure!(
        !ordered || parallelism == 1,
        "the ordered digest needs parallelism 1"
    );
    let env = StreamEnvironment::new();
    env.set_parallelism(parallelism);
    let wait = AsyncWait::new(async_fn(call))
        .capacity(CAPACITY)
        .timeout(TIMEOUT);
    let wait = if ordered { wait } else { wait.unordered() };
    let total = Arc::new(AtomicU64::new(0));
    wait.apply(&env.from_generator(Generator::new(|i| i).take(records)))?
        .sink_to(DigestSink {
            ordered,
            acc: if ordered { ORDERED_SEED } else { 0 },
            total: total.clone(),
        })
        .name("Sink: Digest");
    env.execute("async-bench").await?;
    Ok(total.load(Ordering::Relaxed))
}

/// `async-overhead`: every call completes at once; parallelism 1.
pub async fn immediate_job(records: u64, ordered: bool) -> anyhow::Result<u64> {
    run(records, 1, ordered, immediate).await
}

/// `async-latency`: every call goes through `source` (unordered).
pub async fn latency_job(
    records: u64,
    parallelism: usize,
    source: LatencySource,
) -> anyhow::Result<u64> {
    run(records, parallelism, false, move |x| source.call(x)).await
}
