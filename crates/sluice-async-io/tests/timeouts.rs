//! Timeouts on tokio's paused clock: the default handler fails the job naming the operator,
//! subtask and input; an overriding handler emits a fallback or nothing.

mod common;

use common::CALLS;
use sluice_async_io::{AsyncFunction, async_fn};
use sluice_runtime::prelude::*;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Takes `x` milliseconds.
async fn takes_x_ms(x: u64) -> Result<Option<u64>, UserError> {
    tokio::time::sleep(Duration::from_millis(x)).await;
    Ok(Some(x))
}

#[tokio::test(start_paused = true)]
async fn the_default_timeout_fails_the_job_naming_operator_subtask_and_input() {
    for calls in CALLS {
        let env = StreamEnvironment::new();
        env.set_parallelism(1);
        let input = env.from_iter(vec![10u64, 20, 700, 30]);
        let (_, out) = async_wait!(calls, async_fn(takes_x_ms), &input, |w| w
            .timeout(Duration::from_millis(500))
            .name("profile lookup"));
        out.unwrap().collect();
        let err = env.execute("timeout").await.unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("'profile lookup'"), "{msg}");
        assert!(msg.contains("subtask 0 of 1"), "{msg}");
        assert!(msg.contains("input 700"), "{msg}");
        assert!(msg.contains("timed out after 500ms"), "{msg}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_handler_emits_a_fallback_or_nothing() {
    for (drop_late, way) in [false, true]
        .into_iter()
        .flat_map(|d| CALLS.map(|c| (d, c)))
    {
        let env = StreamEnvironment::new();
        env.set_parallelism(1);
        let calls = Arc::new(AtomicUsize::new(0));
        let handler_calls = calls.clone();
        let func = async_fn(takes_x_ms).on_timeout(move |x: &u64| {
            handler_calls.fetch_add(1, Ordering::SeqCst);
            Ok(if drop_late { None } else { Some(1_000 + x) })
        });
        // 99 ms is on time, 101 ms is late; ordered output keeps fallbacks in place.
        let input = env.from_iter(vec![5u64, 150, 99, 101, 3]);
        let (metrics, out) =
            async_wait!(way, func, &input, |w| w.timeout(Duration::from_millis(100)));
        let out = out.unwrap().collect();
        env.execute("fallback").await.unwrap();
        let want = if drop_late {
            vec![5, 99, 3]
        } else {
            vec![5, 1_150, 99, 1_101, 3]
        };
        assert_eq!(out.take(), want);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "timeout called once per late record"
        );
        let m = metrics.total();
        assert_eq!((m.timeouts, m.failures, m.completed), (2, 0, 5));
    }
}

/// A function whose timeout handler is a method; its late calls are dropped (not polled) once
/// the timeout fired.
#[derive(Clone, Default)]
struct CountsDrops {
    dropped: Arc<AtomicUsize>,
}

struct DropCounter(Arc<AtomicUsize>, bool);

impl Drop for DropCounter {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl AsyncFunction<u64> for CountsDrops {
    type Out = String;
    type Results = Vec<String>;

    fn invoke(
        &self,
        x: u64,
    ) -> impl Future<Output = Result<Vec<String>, UserError>> + Send + use<> {
        let guard = DropCounter(self.dropped.clone(), false);
        async move {
            let mut guard = guard;
            tokio::time::sleep(Duration::from_secs(x)).await;
            guard.1 = true;
            drop(guard);
            Ok(vec![format!("{x}s")])
        }
    }

    fn timeout(&self, x: &u64) -> Result<Vec<String>, UserError> {
        Ok(vec![format!("{x}s timed out")])
    }
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_is_dropped_and_late_results_are_ignored() {
    for calls in CALLS {
        let env = StreamEnvironment::new();
        env.set_parallelism(1);
        let f = CountsDrops::default();
        let dropped = f.dropped.clone();
        let start = tokio::time::Instant::now();
        let input = env.from_iter(vec![1u64, 60, 2]);
        let (_, out) = async_wait!(calls, f, &input, |w| w
            .timeout(Duration::from_secs(5))
            .unordered());
        let out = out.unwrap().collect();
        env.execute("drop").await.unwrap();
        assert_eq!(out.take(), vec!["1s", "2s", "60s timed out"]);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the late call was dropped"
        );
        // The job ended at the timeout, not when the 60 s call would have finished.
        assert!(
            start.elapsed() < Duration::from_secs(6),
            "{:?}",
            start.elapsed()
        );
    }
}
