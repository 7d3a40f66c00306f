//! The REST API's answers, in Flink's resource names and field names where they fit: pure
//! functions from job snapshots (and their rates) to JSON.
//!
//! | resource | function | holds |
//! | --- | --- | --- |
//! | `/overview` | [`overview`] | how many jobs run, finished, were cancelled, failed |
//! | `/jobs/overview` | [`jobs_overview`] | each job: id, name, state, times, task counts |
//! | `/jobs/:jobid` | [`job`] | the job, its vertices with metrics, rates and backpressure, their operators with busy and backpressured shares and the one that holds its chain back, its plan (vertices and their inputs) |
//! | `/jobs/:jobid/vertices/:vertexid` | [`vertex`] | one vertex: per-subtask metrics, and per operator per subtask (gauges, counters, histograms) |
//! | `/jobs/:jobid/checkpoints` | [`checkpoints`] | counts, summary, latest, history |
//! | `/jobs/:jobid/exceptions` | [`exceptions`] | the root exception and the exception history |
//!
//! Times are milliseconds since the Unix epoch, durations milliseconds, sizes bytes; a time that
//! has not come is `-1`, as in Flink.
//!
//! ```
//! use sluice_runtime::prelude::*;
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! let env = StreamEnvironment::new();
//! env.from_iter(0u64..100).map(|x| x + 1).name("inc").discard();
//! let job = env.submit("numbers").unwrap();
//! let observer = job.observer();
//! job.await.unwrap();
//! let json = sluice_web::rest::job(&observer.snapshot(), None);
//! assert_eq!(json["state"], "FINISHED");
//! assert_eq!(json["vertices"][0]["name"], "Source: Collection -> inc -> Sink: Discard");
//! # }
//! ```

use crate::rates::Rates;
use serde_json::{Value, json};
use sluice_runtime::job::{
    CheckpointRecord, CheckpointStatus, JobState, JobStatus, TaskState, VertexStatus,
};
use std::collections::BTreeMap;

/// `-1` for a time that has not come, as Flink shows it.
fn time(t: Option<u64>) -> Value {
    t.map_or(json!(-1), |t| json!(t))
}

/// The sluice version serving the API.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `/overview`: counts of jobs by state.
pub fn overview(jobs: &[JobStatus]) -> Value {
    let count = |s: JobState| jobs.iter().filter(|j| j.state == s).count();
    json!({
        "sluice-version": VERSION,
        "jobs-running": count(JobState::Running) + count(JobState::Restarting),
        "jobs-finished": count(JobState::Finished),
        "jobs-cancelled": count(JobState::Canceled),
        "jobs-failed": count(JobState::Failed),
    })
}

/// Task counts of a job by state (Flink's `tasks`).
fn task_counts(job: &JobStatus) -> Value {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut total = 0;
    for v in &job.vertices {
        for s in &v.subtasks {
            *counts.entry(s.state.as_str()).or_default() += 1;
            total += 1;
        }
    }
    let n = |s: TaskState| counts.get(s.as_str()).copied().unwrap_or(0);
    json!({
        "total": total,
        "running": n(TaskState::Running),
        "finished": n(TaskState::Finished),
        "canceled": n(TaskState::Canceled),
        "failed": n(TaskState::Failed),
    })
}

/// `/jobs/overview`: one entry per job.
pub fn jobs_overview(jobs: &[JobStatus]) -> Value {
    let jobs: Vec<Value> = jobs
        .iter()
        .map(|j| {
            json!({
                "jid": j.job_id,
                "name": j.name,
                "state": j.state,
                "start-time": j.start_time_ms,
                "end-time": time(j.end_time_ms),
                "duration": j.duration_ms,
                "last-modification": j.end_time_ms.unwrap_or(j.now_ms),
                "tasks": task_counts(j),
            })
        })
        .collect();
    json!({ "jobs": jobs })
}

fn vertex_tasks(v: &VertexStatus) -> Value {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &v.subtasks {
        *counts.entry(s.state.as_str()).or_default() += 1;
    }
    json!(counts)
}

/// A vertex's metrics in Flink's names, with its rates when known.
fn vertex_metrics(v: &VertexStatus, rates: Option<&Rates>) -> (Value, Value) {
    let r = rates.and_then(|r| r.vertices.get(&v.id));
    let busy: u64 = v.subtasks.iter().map(|s| s.busy_ms).sum();
    let backpressured: u64 = v.subtasks.iter().map(|s| s.backpressured_ms).sum();
    let metrics = json!({
        "read-records": v.records_in(),
        "write-records": v.records_out(),
        "accumulated-busy-time": busy,
        "accumulated-backpressured-time": backpressured,
        "read-records-per-second": r.map(|r| r.records_in_per_second),
        "write-records-per-second": r.map(|r| r.records_out_per_second),
        "records-per-second": r.map(|r| r.records_per_second),
        "backpressure-ratio": r.map(|r| r.backpressure_ratio),
        "busy-ratio": r.map(|r| r.busy_ratio),
    });
    let level = r.map_or(Value::Null, |r| json!(r.level().as_str()));
    (metrics, level)
}

/// An operator of a vertex with its busy and backpressured shares when known, and whether it
/// holds the operators before it in its chain back (see [`crate::rates::holding_back`]).
fn operator_summary(id: usize, name: &str, rates: Option<&Rates>) -> Value {
    let r = rates.and_then(|r| r.operators.get(&id));
    json!({
        "id": id,
        "name": name,
        "metrics": {
            "busy-ratio": r.map(|r| r.busy_ratio),
            "backpressure-ratio": r.map(|r| r.backpressure_ratio),
        },
        "holds-back-chain": r.is_some_and(|r| r.holds_back_chain),
    })
}

/// `/jobs/:jobid`: the job with its vertices (metrics, rates, backpressure level, operators)
/// and its plan (each vertex with its inputs and their ship strategies).
pub fn job(job: &JobStatus, rates: Option<&Rates>) -> Value {
    let vertices: Vec<Value> = job
        .vertices
        .iter()
        .map(|v| {
            let (metrics, level) = vertex_metrics(v, rates);
            let operators: Vec<Value> = v
                .operators
                .iter()
                .map(|o| operator_summary(o.id, &o.name, rates))
                .collect();
            json!({
                "id": v.id,
                "name": v.name,
                "parallelism": v.parallelism,
                "status": v.state().as_str(),
                "tasks": vertex_tasks(v),
                "operators": operators,
                "metrics": metrics,
                "backpressure-level": level,
            })
        })
        .collect();
    let nodes: Vec<Value> = job
        .vertices
        .iter()
        .map(|v| {
            let inputs: Vec<Value> = job
                .edges
                .iter()
                .filter(|e| e.target == v.id)
                .enumerate()
                .map(|(num, e)| {
                    json!({
                        "num": num,
                        "id": e.source,
                        "ship_strategy": e.ship_strategy,
                        "exchange": "pipelined_bounded",
                    })
                })
                .collect();
            json!({
                "id": v.id,
                "parallelism": v.parallelism,
                "description": v.name,
                "inputs": inputs,
            })
        })
        .collect();
    let mut status_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in &job.vertices {
        *status_counts.entry(v.state().as_str()).or_default() += 1;
    }
    json!({
        "jid": job.job_id,
        "name": job.name,
        "state": job.state,
        "start-time": job.start_time_ms,
        "end-time": time(job.end_time_ms),
        "duration": job.duration_ms,
        "now": job.now_ms,
        "restarts": job.restarts,
        "vertices": vertices,
        "status-counts": status_counts,
        "plan": {
            "jid": job.job_id,
            "name": job.name,
            "type": "STREAMING",
            "nodes": nodes,
        },
        "rates": rates.map(|r| json!({
            "sampled-at": r.sampled_at_ms,
            "window": r.window_ms,
        })),
    })
}

/// `/jobs/:jobid/vertices/:vertexid`: one vertex's subtasks and its operators' metrics per
/// subtask (`None` when the job has no such vertex).
pub fn vertex(job: &JobStatus, vertex_id: &str, rates: Option<&Rates>) -> Option<Value> {
    let v = job.vertex(vertex_id)?;
    let (metrics, level) = vertex_metrics(v, rates);
    let subtasks: Vec<Value> = v
        .subtasks
        .iter()
        .map(|s| {
            json!({
                "subtask": s.subtask,
                "status": s.state.as_str(),
                "metrics": {
                    "read-records": s.records_in,
                    "write-records": s.records_out,
                    "accumulated-busy-time": s.busy_ms,
                    "accumulated-backpressured-time": s.backpressured_ms,
                },
            })
        })
        .collect();
    let operators: Vec<Value> = v
        .operators
        .iter()
        .map(|o| {
            let subtasks: Vec<Value> = o
                .subtasks
                .iter()
                .map(|s| {
                    json!({
                        "subtask": s.subtask,
                        "records-in": s.records_in,
                        "records-out": s.records_out,
                        "busy-time": s.busy_ms,
                        "backpressured-time": s.backpressured_ms,
                        "coordinator-events-sent": s.events_to_coordinator,
                        "coordinator-events-received": s.events_from_coordinator,
                        "gauges": s.reported.gauges,
                        "counters": s.reported.counters,
                        "histograms": s.reported.histograms,
                    })
                })
                .collect();
            json!({ "id": o.id, "name": o.name, "subtasks": subtasks })
        })
        .collect();
    Some(json!({
        "id": v.id,
        "name": v.name,
        "parallelism": v.parallelism,
        "status": v.state().as_str(),
        "now": job.now_ms,
        "metrics": metrics,
        "backpressure-level": level,
        "subtasks": subtasks,
        "operators": operators,
    }))
}

fn checkpoint(c: &CheckpointRecord) -> Value {
    let class = match c.status {
        CheckpointStatus::InProgress => "in_progress",
        CheckpointStatus::Completed => "completed",
        CheckpointStatus::Failed => "failed",
    };
    let mut v = json!({
        "className": class,
        "id": c.id,
        "status": c.status,
        "is_savepoint": false,
        "trigger_timestamp": c.trigger_time_ms,
        "latest_ack_timestamp": time(
            c.acknowledged_ms
                .map(|a| c.trigger_time_ms + a)
                .or(c.end_time_ms)
        ),
        "end_to_end_duration": c.duration_ms.map_or(json!(-1), |d| json!(d)),
        "checkpointed_size": c.size_bytes,
        "state_size": c.size_bytes,
    });
    if c.status == CheckpointStatus::Failed {
        v["failure_timestamp"] = time(c.end_time_ms);
        v["failure_message"] = json!(c.failure);
    }
    v
}

/// Minimum, maximum and average of `values` (zeros when there are none).
fn summary(values: impl Iterator<Item = u64>) -> Value {
    let values: Vec<u64> = values.collect();
    if values.is_empty() {
        return json!({ "min": 0, "max": 0, "avg": 0 });
    }
    let sum: u64 = values.iter().sum();
    json!({
        "min": values.iter().min(),
        "max": values.iter().max(),
        "avg": sum / values.len() as u64,
    })
}

/// `/jobs/:jobid/checkpoints`: counts, a summary of the completed checkpoints kept, the latest
/// completed and failed, and the history (newest first).
pub fn checkpoints(job: &JobStatus) -> Value {
    let c = &job.checkpoints;
    let completed = || {
        c.history
            .iter()
            .filter(|x| x.status == CheckpointStatus::Completed)
    };
    let history: Vec<Value> = c.history.iter().map(checkpoint).collect();
    json!({
        "enabled": c.enabled,
        "counts": {
            "restored": u64::from(c.restored_from.is_some()),
            "total": c.counts.triggered,
            "in_progress": c.counts.in_progress,
            "completed": c.counts.completed,
            "failed": c.counts.failed,
        },
        "summary": {
            "checkpointed_size": summary(completed().filter_map(|x| x.size_bytes)),
            "state_size": summary(completed().filter_map(|x| x.size_bytes)),
            "end_to_end_duration": summary(completed().filter_map(|x| x.duration_ms)),
        },
        "latest": {
            "completed": c.latest_completed.as_ref().map(checkpoint),
            "savepoint": null,
            "failed": c.latest_failed.as_ref().map(checkpoint),
            "restored": c.restored_from.map(|id| json!({ "id": id })),
        },
        "history": history,
    })
}

/// `/jobs/:jobid/exceptions`: the newest failure as the root exception, and the history
/// (newest first), in Flink's `exceptionHistory` shape.
pub fn exceptions(job: &JobStatus) -> Value {
    let entries: Vec<Value> = job
        .exceptions
        .iter()
        .map(|e| {
            let name = if e.subtask.is_some() {
                "TaskFailure"
            } else if e.operator.is_some() {
                "CoordinatorFailure"
            } else {
                "JobFailure"
            };
            json!({
                "exceptionName": name,
                "stacktrace": e.message,
                "timestamp": e.timestamp_ms,
                "taskName": e.task,
                "operator": e.operator,
                "subtask": e.subtask,
            })
        })
        .collect();
    let truncated = job.exceptions_total > job.exceptions.len() as u64;
    let newest = job.exceptions.first();
    json!({
        "root-exception": newest.map(|e| e.message.clone()),
        "timestamp": newest.map(|e| e.timestamp_ms),
        "all-exceptions": [],
        "truncated": truncated,
        "total": job.exceptions_total,
        "exceptionHistory": { "entries": entries, "truncated": truncated },
    })
}

/// An error answer: `{"errors": [message]}`, as Flink's REST API answers.
pub fn error(message: &str) -> Value {
    json!({ "errors": [message] })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rates::RateWindow;
    use crate::testing::status;
    use std::time::Duration;

    #[test]
    fn overviews_count_and_list_jobs() {
        let mut done = status();
        done.state = JobState::Finished;
        done.end_time_ms = Some(done.now_ms);
        let jobs = [status(), done];
        let o = overview(&jobs);
        assert_eq!(o["jobs-running"], 1);
        assert_eq!(o["jobs-finished"], 1);
        assert_eq!(o["jobs-failed"], 0);
        let list = jobs_overview(&jobs);
        assert_eq!(list["jobs"][0]["jid"], "0123456789abcdef0123456789abcdef");
        assert_eq!(list["jobs"][0]["state"], "RUNNING");
        assert_eq!(list["jobs"][0]["end-time"], -1);
        assert_eq!(list["jobs"][0]["tasks"]["total"], 4);
        assert_eq!(list["jobs"][0]["tasks"]["running"], 4);
        assert_eq!(list["jobs"][1]["state"], "FINISHED");
    }

    #[test]
    fn the_job_has_its_vertices_plan_and_rates() {
        let mut s = status();
        let mut w = RateWindow::new(Duration::from_secs(1));
        w.push(Duration::from_secs(1), &s);
        let before = job(&s, w.rates().as_ref());
        assert_eq!(
            before["vertices"][0]["metrics"]["records-per-second"],
            Value::Null
        );
        assert_eq!(before["vertices"][0]["backpressure-level"], Value::Null);
        assert_eq!(before["rates"], Value::Null);
        s.vertices[0].subtasks[0].records_out += 2000;
        s.vertices[1].subtasks[1].backpressured_ms += 300;
        // In the sink's chain, `enrich "async"` refused input 1 s of the 2 s: its input (the
        // exchange) read backpressured, it and the sink after it busy.
        s.vertices[1].operators[0].subtasks[0].busy_ms += 1000;
        s.vertices[1].operators[1].subtasks[0].busy_ms += 1000;
        s.vertices[0].operators[0].subtasks[0].backpressured_ms += 1000;
        s.vertices[0].operators[0].subtasks[0].busy_ms += 1000;
        s.vertices[0].operators[1].subtasks[0].busy_ms += 1000;
        s.now_ms += 2000;
        w.push(Duration::from_secs(3), &s);
        let j = job(&s, w.rates().as_ref());
        assert_eq!(j["jid"], s.job_id);
        assert_eq!(j["name"], "clicks");
        assert_eq!(j["state"], "RUNNING");
        assert_eq!(j["restarts"], 1);
        let v = &j["vertices"];
        assert_eq!(v.as_array().unwrap().len(), 2);
        assert_eq!(v[0]["name"], "Source: numbers -> parse");
        assert_eq!(v[0]["status"], "RUNNING");
        assert_eq!(v[0]["tasks"]["RUNNING"], 2);
        assert_eq!(v[0]["operators"][1]["name"], "parse");
        assert_eq!(v[0]["metrics"]["write-records"], 2000);
        assert_eq!(v[0]["metrics"]["records-per-second"], 1000.0);
        assert_eq!(v[0]["backpressure-level"], "ok");
        assert_eq!(v[1]["metrics"]["backpressure-ratio"], 0.15);
        assert_eq!(v[1]["backpressure-level"], "low");
        let numbers = &v[0]["operators"][0];
        assert_eq!(numbers["metrics"]["backpressure-ratio"], 0.5);
        assert_eq!(numbers["holds-back-chain"], false);
        let parse = &v[0]["operators"][1];
        assert_eq!(parse["metrics"]["busy-ratio"], 0.5);
        assert_eq!(parse["metrics"]["backpressure-ratio"], 0.0);
        assert_eq!(parse["holds-back-chain"], true, "numbers waits on parse");
        assert_eq!(v[1]["operators"][0]["holds-back-chain"], false);
        assert_eq!(
            before["vertices"][0]["operators"][1]["holds-back-chain"],
            false
        );
        assert_eq!(
            before["vertices"][0]["operators"][1]["metrics"]["busy-ratio"],
            Value::Null
        );
        let plan = &j["plan"]["nodes"];
        assert_eq!(plan[0]["inputs"].as_array().unwrap().len(), 0);
        assert_eq!(plan[1]["inputs"][0]["id"], "source");
        assert_eq!(plan[1]["inputs"][0]["ship_strategy"], "HASH");
        assert_eq!(j["rates"]["window"], 2000);
        assert_eq!(j["rates"]["sampled-at"], s.now_ms);
    }

    #[test]
    fn a_vertex_has_its_subtasks_and_operator_metrics() {
        let s = status();
        assert!(vertex(&s, "nope", None).is_none());
        let v = vertex(&s, "sink", None).unwrap();
        assert_eq!(v["parallelism"], 2);
        assert_eq!(v["subtasks"].as_array().unwrap().len(), 2);
        assert_eq!(v["subtasks"][1]["status"], "RUNNING");
        let enrich = &v["operators"][0];
        assert_eq!(enrich["name"], "enrich \"async\"");
        assert_eq!(enrich["subtasks"][0]["records-in"], 50);
        assert_eq!(enrich["subtasks"][0]["gauges"]["async_in_flight"], 7);
        assert_eq!(enrich["subtasks"][0]["counters"]["async_completed"], 42);
        let h = &enrich["subtasks"][0]["histograms"]["async_latency_seconds"];
        assert_eq!(h["counts"], json!([1, 1, 1]));
        assert_eq!(h["bounds"], json!([0.001, 0.01]));
        assert_eq!(enrich["subtasks"][1]["coordinator-events-sent"], 3);
    }

    #[test]
    fn checkpoints_have_counts_summary_latest_and_history() {
        let c = checkpoints(&status());
        assert_eq!(c["counts"]["total"], 2);
        assert_eq!(c["counts"]["completed"], 1);
        assert_eq!(c["counts"]["failed"], 1);
        assert_eq!(c["summary"]["end_to_end_duration"]["max"], 12);
        assert_eq!(c["summary"]["checkpointed_size"]["avg"], 2048);
        assert_eq!(c["latest"]["completed"]["id"], 1);
        assert_eq!(c["latest"]["failed"]["id"], 2);
        assert_eq!(c["latest"]["restored"], Value::Null);
        let h = c["history"].as_array().unwrap();
        assert_eq!(h[0]["id"], 2, "newest first");
        assert_eq!(h[0]["status"], "FAILED");
        assert_eq!(h[0]["className"], "failed");
        assert!(
            h[0]["failure_message"]
                .as_str()
                .unwrap()
                .contains("expired")
        );
        assert_eq!(h[1]["status"], "COMPLETED");
        assert_eq!(h[1]["end_to_end_duration"], 12);
        assert_eq!(h[1]["checkpointed_size"], 2048);
        assert!(h[1].get("failure_message").is_none());
    }

    #[test]
    fn exceptions_have_the_root_and_the_history() {
        let e = exceptions(&status());
        assert!(e["root-exception"].as_str().unwrap().contains("bad line"));
        assert_eq!(e["truncated"], false);
        let entries = e["exceptionHistory"]["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["exceptionName"], "TaskFailure");
        assert_eq!(
            entries[0]["taskName"],
            "operator 'parse' (#1), subtask 1 of 2"
        );
        let mut none = status();
        none.exceptions.clear();
        none.exceptions_total = 0;
        let e = exceptions(&none);
        assert_eq!(e["root-exception"], Value::Null);
        assert_eq!(e["exceptionHistory"]["entries"], json!([]));
    }
}
