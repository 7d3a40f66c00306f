//! Retries on tokio's paused clock: fixed and exponential delays, result and error predicates,
//! attempt limits, a timeout during backoff, and delayed retries fired at end of input.

mod common;

use common::{CALLS, Calls};
use sluice_async_io::{AsyncFunction, AsyncRetryStrategy, AsyncWait};
use sluice_runtime::prelude::*;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// What attempt `n` (1-based) of a record returns.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Empty,
    Value,
    Transient,
    Fatal,
}

/// A function scripted per attempt that logs when each call happened.
#[derive(Clone)]
struct Scripted {
    script: Arc<dyn Fn(u64, usize) -> Answer + Send + Sync>,
    calls: Arc<Mutex<BTreeMap<u64, Vec<Instant>>>>,
    timeouts: Arc<AtomicUsize>,
    latency: Duration,
}

impl Scripted {
    fn new(
        latency: Duration,
        script: impl Fn(u64, usize) -> Answer + Send + Sync + 'static,
    ) -> Self {
        Scripted {
            script: Arc::new(script),
            calls: Arc::default(),
            timeouts: Arc::default(),
            latency,
        }
    }

    fn calls_of(&self, x: u64) -> Vec<Instant> {
        self.calls
            .lock()
            .unwrap()
            .get(&x)
            .cloned()
            .unwrap_or_default()
    }

    /// The gaps between consecutive calls of `x`, rounded to milliseconds.
    fn gaps_ms(&self, x: u64) -> Vec<u128> {
        self.calls_of(x)
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect()
    }
}

impl AsyncFunction<u64> for Scripted {
    type Out = u64;
    type Results = Vec<u64>;

    fn invoke(&self, x: u64) -> impl Future<Output = Result<Vec<u64>, UserError>> + Send + use<> {
        let attempt = {
            let mut calls = self.calls.lock().unwrap();
            let c = calls.entry(x).or_default();
            c.push(Instant::now());
            c.len()
        };
        let answer = (self.script)(x, attempt);
        // Fillers (see `run`) take a second each and succeed.
        let (answer, latency) = if x >= FILLER {
            (Answer::Value, Duration::from_secs(1))
        } else {
            (answer, self.latency)
        };
        async move {
            tokio::time::sleep(latency).await;
            match answer {
                Answer::Empty => Ok(vec![]),
                Answer::Value => Ok(vec![x * 10 + attempt as u64]),
                Answer::Transient => Err(format!("transient failure of {x}").into()),
                Answer::Fatal => Err(format!("fatal failure of {x}").into()),
            }
        }
    }

    fn timeout(&self, x: &u64) -> Result<Vec<u64>, UserError> {
        self.timeouts.fetch_add(1, Ordering::SeqCst);
        Ok(vec![9_000 + x])
    }
}

fn retry_on_empty_or_transient(
    strategy: sluice_async_io::RetryStrategyBuilder<Vec<u64>>,
) -> AsyncRetryStrategy<Vec<u64>> {
    strategy
        .if_empty_result()
        .if_error(|e| e.to_string().contains("transient"))
        .build()
        .unwrap()
}

/// Inputs from here on are fillers.
const FILLER: u64 = 1_000;

/// Runs `inputs` followed by `fillers` slow records (one second each, one at a time: the
/// capacity leaves them a single slot), which keep the input open for `fillers` seconds so that
/// retries run before the end of input. Returns the sorted outputs of `inputs` and the retry
/// count.
async fn run_with(
    calls: Calls,
    f: &Scripted,
    inputs: Vec<u64>,
    fillers: u64,
    timeout: Duration,
    retry: AsyncRetryStrategy<Vec<u64>>,
) -> Result<(Vec<u64>, u64), JobError> {
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    let capacity = inputs.len() + 1;
    let all: Vec<u64> = inputs.into_iter().chain(FILLER..FILLER + fillers).collect();
    let (metrics, out) = async_wait!(calls, f.clone(), &env.from_iter(all), |w| w
        .timeout(timeout)
        .retry(retry)
        .capacity(capacity)
        .unordered());
    let out = out.unwrap().collect();
    env.execute("retry").await?;
    let mut got: Vec<u64> = out
        .take()
        .into_iter()
        .filter(|v| *v < FILLER * 10)
        .collect();
    got.sort();
    Ok((got, metrics.total().retries))
}

async fn run(
    calls: Calls,
    f: &Scripted,
    inputs: Vec<u64>,
    timeout: Duration,
    retry: AsyncRetryStrategy<Vec<u64>>,
) -> Result<(Vec<u64>, u64), JobError> {
    run_with(calls, f, inputs, 5, timeout, retry).await
}

#[tokio::test(start_paused = true)]
async fn fixed_delay_retries_until_a_predicate_stops_matching() {
    for calls in CALLS {
        // Record 1: empty twice, then a value. Record 2: transient error once, then a value.
        // Record 3: a value at once.
        let f = Scripted::new(Duration::from_millis(3), |x, attempt| match (x, attempt) {
            (1, 1 | 2) => Answer::Empty,
            (2, 1) => Answer::Transient,
            _ => Answer::Value,
        });
        let retry = retry_on_empty_or_transient(AsyncRetryStrategy::fixed_delay(
            5,
            Duration::from_millis(20),
        ));
        let (out, retries) = run(calls, &f, vec![1, 2, 3], Duration::from_secs(10), retry)
            .await
            .unwrap();
        assert_eq!(out, vec![13, 22, 31]);
        assert_eq!(retries, 3);
        // Each retry starts 20 ms after the previous attempt ended (3 ms of latency).
        assert_eq!(f.gaps_ms(1), vec![23, 23]);
        assert_eq!(f.gaps_ms(2), vec![23]);
        assert_eq!(f.calls_of(3).len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn exponential_backoff_grows_to_its_cap_and_max_attempts_three_means_three_retries() {
    for calls in CALLS {
        let f = Scripted::new(Duration::ZERO, |_, _| Answer::Empty);
        let retry = retry_on_empty_or_transient(AsyncRetryStrategy::exponential_backoff(
            3,
            Duration::from_millis(10),
            3.0,
            Duration::from_millis(50),
        ));
        let (out, retries) = run(calls, &f, vec![7], Duration::from_secs(10), retry)
            .await
            .unwrap();
        assert!(out.is_empty(), "the last empty result is final: {out:?}");
        assert_eq!(retries, 3);
        assert_eq!(f.calls_of(7).len(), 4, "first call plus 3 retries");
        assert_eq!(f.gaps_ms(7), vec![10, 30, 50]);
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_the_predicate_rejects_fails_at_once_naming_the_input() {
    for calls in CALLS {
        let f = Scripted::new(Duration::from_millis(1), |x, _| {
            if x == 4 { Answer::Fatal } else { Answer::Value }
        });
        let retry = retry_on_empty_or_transient(AsyncRetryStrategy::fixed_delay(
            3,
            Duration::from_millis(5),
        ));
        let err = run(calls, &f, vec![3, 4], Duration::from_secs(1), retry)
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("input 4 (attempt 1): fatal failure of 4"),
            "{msg}"
        );
        assert_eq!(f.calls_of(4).len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_still_failing_after_the_last_retry_fails_the_job() {
    for calls in CALLS {
        let f = Scripted::new(Duration::from_millis(1), |_, _| Answer::Transient);
        let retry = retry_on_empty_or_transient(AsyncRetryStrategy::fixed_delay(
            2,
            Duration::from_millis(5),
        ));
        let err = run(calls, &f, vec![8], Duration::from_secs(1), retry)
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("input 8 (attempt 3): transient failure of 8"),
            "{msg}"
        );
        assert_eq!(f.calls_of(8).len(), 3);
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_during_backoff_cancels_the_retry_and_calls_timeout_once() {
    for calls in CALLS {
        // Always empty; retries 400 ms apart; attempts at 0, 400 and 800 ms; the next retry would
        // be at 1200 ms, but the 1 s timeout (covering all attempts) comes first, during backoff.
        let f = Scripted::new(Duration::ZERO, |_, _| Answer::Empty);
        let retry = retry_on_empty_or_transient(AsyncRetryStrategy::fixed_delay(
            10,
            Duration::from_millis(400),
        ));
        let start = Instant::now();
        let (out, _) = run(calls, &f, vec![5], Duration::from_secs(1), retry)
            .await
            .unwrap();
        assert_eq!(out, vec![9_005], "the timeout handler's fallback");
        assert_eq!(f.timeouts.load(Ordering::SeqCst), 1);
        let calls: Vec<u128> = f
            .calls_of(5)
            .iter()
            .map(|t| (*t - start).as_millis())
            .collect();
        assert_eq!(calls, vec![0, 400, 800], "no retry after the timeout");
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_during_an_attempt_drops_it_and_calls_timeout_once() {
    for calls in CALLS {
        // Each attempt takes 300 ms and is empty; retries 100 ms apart: attempts at 0, 400, 800 ms;
        // the third is running when the 1 s timeout fires.
        let f = Scripted::new(Duration::from_millis(300), |_, _| Answer::Empty);
        let retry = retry_on_empty_or_transient(AsyncRetryStrategy::fixed_delay(
            10,
            Duration::from_millis(100),
        ));
        let (out, _) = run(calls, &f, vec![6], Duration::from_secs(1), retry)
            .await
            .unwrap();
        assert_eq!(out, vec![9_006]);
        assert_eq!(f.timeouts.load(Ordering::SeqCst), 1);
        assert_eq!(f.calls_of(6).len(), 3);
    }
}

#[tokio::test(start_paused = true)]
async fn end_of_input_fires_delayed_retries_at_once() {
    for calls in CALLS {
        // The first attempt is empty and would be retried in an hour; at end of input the retry
        // runs at once, and its result is final.
        let f = Scripted::new(Duration::ZERO, |_, attempt| {
            if attempt == 1 {
                Answer::Empty
            } else {
                Answer::Value
            }
        });
        let retry = retry_on_empty_or_transient(AsyncRetryStrategy::fixed_delay(
            3,
            Duration::from_secs(3_600),
        ));
        let start = Instant::now();
        let (out, retries) = run_with(calls, &f, vec![2], 0, Duration::from_secs(7_200), retry)
            .await
            .unwrap();
        assert_eq!(out, vec![22]);
        assert_eq!(retries, 1);
        let calls = f.calls_of(2);
        assert_eq!(calls.len(), 2);
        assert!(
            calls[1] - start < Duration::from_secs(1),
            "the retry waited {:?}",
            calls[1] - start
        );
    }
}

#[tokio::test(start_paused = true)]
async fn attempts_after_end_of_input_are_still_retried_without_delay() {
    for calls in CALLS {
        // Attempts take 10 ms and the input ends at once: every retry decision is taken after the
        // end of input. Retries still happen (unlike Flink), just without their 1 h delay.
        let f = Scripted::new(Duration::from_millis(10), |_, attempt| {
            if attempt < 3 {
                Answer::Transient
            } else {
                Answer::Value
            }
        });
        let retry = retry_on_empty_or_transient(AsyncRetryStrategy::fixed_delay(
            5,
            Duration::from_secs(3_600),
        ));
        let start = Instant::now();
        let (out, retries) = run_with(calls, &f, vec![4, 5], 0, Duration::from_secs(7_200), retry)
            .await
            .unwrap();
        assert_eq!(out, vec![43, 53]);
        assert_eq!(retries, 4);
        assert_eq!(
            f.gaps_ms(4),
            vec![10, 10],
            "retried as soon as each attempt ended"
        );
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}

#[tokio::test(start_paused = true)]
async fn retries_without_a_timeout_are_a_configuration_error() {
    let f = Scripted::new(Duration::ZERO, |_, _| Answer::Value);
    let retry =
        retry_on_empty_or_transient(AsyncRetryStrategy::fixed_delay(3, Duration::from_millis(5)));
    let env = StreamEnvironment::new();
    let err = AsyncWait::new(f)
        .retry(retry)
        .apply(&env.from_iter(vec![1u64]))
        .err()
        .unwrap();
    assert!(err.to_string().contains("needs a timeout"), "{err}");
}
