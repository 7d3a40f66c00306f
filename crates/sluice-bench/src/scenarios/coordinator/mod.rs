//! Scenario `coordinator` (issue 4): what an operator event costs on its way through the job
//! master, the coordinator thread and a task's mailbox.
//!
//! - `round-trip`: subtask -> coordinator -> subtask in a real job (see [`jobs::round_trip`]),
//!   p50 and p99 over every round trip of the timed runs, against the same ping-pong between a
//!   tokio task and a plain thread over bare bounded tokio channels (the ratio is
//!   baseline latency / sluice latency, so higher is better). Measured alongside and shown in
//!   `detail`: the same ping-pong through a relay task first (the same hops as the coordinator
//!   path: operator task -> job master task -> coordinator thread -> operator task), and one
//!   between two tokio tasks.
//! - `broadcast-p4`: the coordinator sends N events to each of 4 subtasks; events per second
//!   from its first send to the last receive, against a plain thread sending to 4 tokio tasks
//!   over bounded tokio channels.
//!
//! No targets: the issue asks for the figures beside the bare channel.

mod baselines;
mod jobs;
mod scripted;

use super::CommonArgs;
use crate::measure::{Run, Side, interleaved, machine, median, percentile, runtime};
use crate::report::{Report, Row};
use std::cell::RefCell;
use std::time::Duration;
use tokio::runtime::Runtime;

const SCENARIO: &str = "coordinator";

/// Subtasks of the broadcast case (issue 4: "broadcast events/s to 4 subtasks").
const BROADCAST_PARALLELISM: usize = 4;

/// Flags of `coordinator`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Round trips per timed run (default 50 000, 10 000 with --quick).
    #[arg(long)]
    rounds: Option<u64>,
    /// Events per subtask per broadcast run (default 250 000, 50 000 with --quick).
    #[arg(long)]
    events: Option<u64>,
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let rounds = args.rounds.unwrap_or(if quick { 10_000 } else { 50_000 });
    let events = args.events.unwrap_or(if quick { 50_000 } else { 250_000 });
    let reps = args.common.reps_or(5, 9);
    let rt = runtime()?;
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "{SCENARIO} on {}: {rounds} round trips and {events} events per subtask per run, \
         {reps} timed runs per side",
        machine()
    ));
    round_trip(&mut report, &rt, rounds, reps)?;
    broadcast(&mut report, &rt, events, reps)?;
    report.finish()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs a ping-pong side once, keeping its samples in `log`; the checksum is the count.
fn logged(
    log: &RefCell<Vec<Vec<Duration>>>,
    f: impl FnOnce() -> anyhow::Result<Vec<Duration>>,
) -> anyhow::Result<Run> {
    let samples = f()?;
    let run = Run {
        elapsed: samples.iter().sum(),
        checksum: samples.len() as u64,
    };
    log.borrow_mut().push(samples);
    Ok(run)
}

fn round_trip(report: &mut Report, rt: &Runtime, rounds: u64, reps: usize) -> anyhow::Result<()> {
    let baseline = "tokio mpsc, task <-> thread";
    report.progress(&format!(
        "round-trip: subtask -> coordinator -> subtask vs {baseline} (and relay, task <-> task)"
    ));
    let logs: [RefCell<Vec<Vec<Duration>>>; 4] = Default::default();
    let [thread_log, relay_log, tasks_log, sluice_log] = &logs;
    interleaved(
        reps,
        vec![
            Side::new(baseline, || {
                logged(thread_log, || baselines::round_trip_thread(rt, rounds))
            }),
            Side::new("tokio mpsc, task -> relay task -> thread -> task", || {
                logged(relay_log, || baselines::round_trip_relay(rt, rounds))
            }),
            Side::new("tokio mpsc, task <-> task", || {
                logged(tasks_log, || baselines::round_trip_tasks(rt, rounds))
            }),
        ],
        Side::new("sluice", || {
            logged(sluice_log, || rt.block_on(jobs::round_trip(rounds)))
        }),
    )?;
    // Skip each side's untimed warm-up run; pool the rest.
    let pooled = |log: &RefCell<Vec<Vec<Duration>>>| -> (Vec<Duration>, Vec<f64>) {
        let runs: Vec<Vec<Duration>> = log.borrow().iter().skip(1).cloned().collect();
        let p50s = runs.iter().map(|r| micros(percentile(r, 0.5))).collect();
        (runs.concat(), p50s)
    };
    let (sluice, sluice_p50s) = pooled(sluice_log);
    let (thread, thread_p50s) = pooled(thread_log);
    let (relay, _) = pooled(relay_log);
    let (tasks, _) = pooled(tasks_log);
    for (metric, q) in [("p50", 0.5), ("p99", 0.99)] {
        let (s, b, r, t) = (
            micros(percentile(&sluice, q)),
            micros(percentile(&thread, q)),
            micros(percentile(&relay, q)),
            micros(percentile(&tasks, q)),
        );
        let mut row = Row::new(SCENARIO, "round-trip", metric, "us", s)
            .against(baseline, b, b / s)
            .records(sluice.len() as u64)
            .parallelism(1);
        if metric == "p50" {
            row.values = sluice_p50s.clone();
            row.baseline_values = thread_p50s.clone();
        }
        row.detail = Some(serde_json::json!({
            "relay_us": r,
            "ratio_vs_relay": r / s,
            "task_to_task_us": t,
            "ratio_vs_task_to_task": t / s,
        }));
        report.add(row)?;
    }
    Ok(())
}

fn broadcast(report: &mut Report, rt: &Runtime, events: u64, reps: usize) -> anyhow::Result<()> {
    let p = BROADCAST_PARALLELISM;
    let baseline = "tokio mpsc, thread -> 4 tasks";
    report.progress(&format!(
        "broadcast-p{p}: coordinator -> {p} subtasks, {events} events each, vs {baseline}"
    ));
    let run = |(elapsed, checksum): (Duration, u64)| Run { elapsed, checksum };
    let t = interleaved(
        reps,
        vec![Side::new(baseline, || {
            baselines::broadcast(rt, p, events).map(run)
        })],
        Side::new("sluice", || {
            rt.block_on(jobs::broadcast(p, events)).map(run)
        }),
    )?;
    let total = events * p as u64;
    let rate = |d: Duration| total as f64 / d.as_secs_f64().max(f64::MIN_POSITIVE) / 1e6;
    let (s, b) = (rate(median(&t.sluice)), rate(median(&t.baselines[0])));
    let mut row = Row::new(
        SCENARIO,
        format!("broadcast-p{p}"),
        "throughput",
        "Mevents/s",
        s,
    )
    .against(baseline, b, s / b)
    .records(total)
    .parallelism(p);
    row.values = t.sluice.iter().map(|&d| rate(d)).collect();
    row.baseline_values = t.baselines[0].iter().map(|&d| rate(d)).collect();
    report.add(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both sides must deliver every event, in order, to every subtask.
    #[test]
    fn jobs_and_baselines_deliver_everything() {
        let rt = runtime().unwrap();
        assert_eq!(rt.block_on(jobs::round_trip(50)).unwrap().len(), 50);
        assert_eq!(baselines::round_trip_thread(&rt, 50).unwrap().len(), 50);
        assert_eq!(baselines::round_trip_relay(&rt, 50).unwrap().len(), 50);
        assert_eq!(baselines::round_trip_tasks(&rt, 50).unwrap().len(), 50);
        let expected = 3 * (0..1000u64).sum::<u64>();
        assert_eq!(rt.block_on(jobs::broadcast(3, 1000)).unwrap().1, expected);
        assert_eq!(baselines::broadcast(&rt, 3, 1000).unwrap().1, expected);
    }
}
