//! The Prometheus endpoint answers a scrape over HTTP with the expected metric families while a
//! job runs: per operator subtask records, times, coordinator events and the async operator's
//! in-flight gauge and latency histogram, the range shuffle's coordinator events; checkpoints,
//! restarts and the job's state.

mod common;

use common::{get, records_out, wait_for};
use sluice_async_io::{AsyncWait, async_fn};
use sluice_runtime::prelude::*;
use sluice_shuffle::{RangeShuffle, RangeShuffleConfig};
use std::time::Duration;

/// The values of the samples of `name` labelled with operator `operator`.
fn values<'a>(text: &'a str, name: &'a str, operator: &'a str) -> impl Iterator<Item = f64> + 'a {
    let label = format!("operator=\"{operator}\"");
    text.lines()
        .filter(move |l| l.starts_with(&format!("{name}{{")) && l.contains(&label))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prometheus_endpoint_answers_with_the_expected_metrics_while_a_job_runs() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    env.enable_checkpointing(Duration::from_millis(100));
    env.set_checkpoint_storage(dir.path());
    let numbers = env
        .from_generator(Generator::new(|i| i).rate_limit(20_000.0))
        .name("numbers");
    AsyncWait::new(async_fn(|x: u64| async move {
        tokio::time::sleep(Duration::from_micros(200)).await;
        Ok(Some(x))
    }))
    .timeout(Duration::from_secs(10))
    .capacity(16)
    .name("lookup")
    .unordered()
    .apply(&numbers.rebalance())
    .unwrap()
    .range_shuffle(
        |x: &u64| *x % 100,
        RangeShuffleConfig::default().name("shuffle"),
    )
    .discard();
    let job = env.submit("metrics-test").unwrap();
    let observer = job.observer();
    let metrics = sluice_web::serve_prometheus("127.0.0.1:0", observer.clone())
        .await
        .unwrap();
    let events = |s: &sluice_runtime::JobStatus, to: bool| {
        s.operator("shuffle").map_or(0, |o| {
            o.subtasks
                .iter()
                .map(|t| {
                    if to {
                        t.events_to_coordinator
                    } else {
                        t.events_from_coordinator
                    }
                })
                .sum::<u64>()
        })
    };
    // The shuffle sends its statistics at each checkpoint; its coordinator sends them back.
    let status = wait_for(&observer, "records, checkpoints, coordinator events", |s| {
        records_out(s, "lookup") > 0
            && s.checkpoints.counts.completed >= 1
            && events(s, true) > 0
            && events(s, false) > 0
    })
    .await;
    assert!(status.edges.iter().any(|e| e.ship_strategy == "RANGE"));

    let (status, text) = get(metrics.local_addr(), "/metrics").await;
    assert_eq!(status, 200);
    for family in [
        "sluice_operator_records_in_total",
        "sluice_operator_records_out_total",
        "sluice_operator_busy_seconds_total",
        "sluice_operator_backpressured_seconds_total",
        "sluice_operator_coordinator_events_sent_total",
        "sluice_operator_coordinator_events_received_total",
        "sluice_operator_async_in_flight",
        "sluice_operator_async_completed_total",
        "sluice_operator_async_timeouts_total",
        "sluice_operator_async_retries_total",
        "sluice_operator_async_latency_seconds",
        "sluice_job_state",
        "sluice_job_uptime_seconds",
        "sluice_job_restarts_total",
        "sluice_job_exceptions_total",
        "sluice_checkpoints_triggered_total",
        "sluice_checkpoints_completed_total",
        "sluice_checkpoints_failed_total",
        "sluice_checkpoints_in_progress",
        "sluice_checkpoint_duration_seconds",
        "sluice_checkpoint_size_bytes",
        "sluice_checkpoint_last_duration_seconds",
        "sluice_checkpoint_last_size_bytes",
    ] {
        assert!(
            text.contains(&format!("\n# TYPE {family} ")),
            "{family} missing:\n{text}"
        );
    }
    // Records counters of the running operators are above zero, on every subtask.
    let out: Vec<f64> = values(&text, "sluice_operator_records_out_total", "numbers").collect();
    assert_eq!(out.len(), 2, "{text}");
    assert!(out.iter().all(|v| *v > 0.0), "{out:?}");
    let into: Vec<f64> = values(&text, "sluice_operator_records_in_total", "lookup").collect();
    assert_eq!(into.len(), 2);
    assert!(into.iter().sum::<f64>() > 0.0, "{into:?}");
    let latency: f64 = values(
        &text,
        "sluice_operator_async_latency_seconds_count",
        "lookup",
    )
    .sum();
    assert!(latency > 0.0, "{text}");
    let sent: f64 = values(
        &text,
        "sluice_operator_coordinator_events_sent_total",
        "shuffle",
    )
    .sum();
    assert!(sent > 0.0, "{text}");
    let received: f64 = values(
        &text,
        "sluice_operator_coordinator_events_received_total",
        "shuffle",
    )
    .sum();
    assert!(received > 0.0, "{text}");
    assert!(text.contains("sluice_job_state{job=\"metrics-test\","));
    assert!(text.contains(",state=\"RUNNING\"} 1\n"));
    assert!(text.contains("sluice_checkpoint_duration_seconds_bucket{job=\"metrics-test\""));

    // This server serves /metrics alone.
    let (status, _) = get(metrics.local_addr(), "/jobs/overview").await;
    assert_eq!(status, 404);
    job.cancel();
    let _ = job.await;
    let (_, text) = get(metrics.local_addr(), "/metrics").await;
    assert!(text.contains(",state=\"CANCELED\"} 1\n"), "{text}");
    drop(metrics);
}
