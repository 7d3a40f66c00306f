//! The REST API answers for a running job with checkpointing: the job, every operator in its
//! vertices, per-subtask metrics, checkpoints with durations and sizes, and its failure.

mod common;

use common::{OPERATORS, get, get_json, records_out, running_job, wait_for};
use sluice_runtime::job::JobState;
use std::collections::BTreeSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_api_shows_the_running_job_its_vertices_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let job = running_job(dir.path());
    let observer = job.observer();
    let ui = sluice_web::serve_dashboard("127.0.0.1:0", observer.clone())
        .await
        .unwrap();
    let addr = ui.local_addr();
    // The injected failure happened, the region restarted, and checkpoints completed since.
    wait_for(&observer, "a restart and two completed checkpoints", |s| {
        s.restarts >= 1
            && s.state == JobState::Running
            && s.checkpoints.counts.completed >= 2
            && s.checkpoints
                .latest_completed
                .as_ref()
                .is_some_and(|c| c.size_bytes.is_some_and(|b| b > 0))
            && records_out(s, "numbers") > 0
    })
    .await;
    let id = observer.job_id().to_string();

    let overview = get_json(addr, "/overview").await;
    assert_eq!(overview["jobs-running"], 1);
    let jobs = get_json(addr, "/jobs/overview").await;
    assert_eq!(jobs["jobs"][0]["jid"], id.as_str());
    assert_eq!(jobs["jobs"][0]["name"], "web-test");
    assert_eq!(jobs["jobs"][0]["state"], "RUNNING");
    assert_eq!(jobs["jobs"][0]["tasks"]["total"], 7);

    let detail = get_json(addr, &format!("/jobs/{id}")).await;
    assert_eq!(detail["jid"], id.as_str());
    assert_eq!(detail["state"], "RUNNING");
    let vertices = detail["vertices"].as_array().unwrap();
    assert_eq!(vertices.len(), 4, "{detail:#}");
    let operators: BTreeSet<&str> = vertices
        .iter()
        .flat_map(|v| v["operators"].as_array().unwrap())
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(operators, OPERATORS.into_iter().collect(), "{detail:#}");
    assert_eq!(vertices[0]["name"], "Source: numbers");
    assert_eq!(vertices[1]["name"], "double -> fail once");
    assert_eq!(vertices[3]["parallelism"], 1);
    assert!(vertices[0]["metrics"]["write-records"].as_u64().unwrap() > 0);
    let strategies: Vec<&str> = detail["plan"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["inputs"].as_array().unwrap())
        .map(|i| i["ship_strategy"].as_str().unwrap())
        .collect();
    assert_eq!(strategies, ["REBALANCE", "HASH", "REBALANCE"]);

    for v in vertices {
        let vid = v["id"].as_str().unwrap();
        let vertex = get_json(addr, &format!("/jobs/{id}/vertices/{vid}")).await;
        assert_eq!(vertex["id"], vid);
        let p = v["parallelism"].as_u64().unwrap() as usize;
        assert_eq!(vertex["subtasks"].as_array().unwrap().len(), p);
        for op in vertex["operators"].as_array().unwrap() {
            assert_eq!(op["subtasks"].as_array().unwrap().len(), p);
        }
    }
    let source = vertices[0]["id"].as_str().unwrap();
    let source = get_json(addr, &format!("/jobs/{id}/vertices/{source}")).await;
    let out: u64 = source["operators"][0]["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["records-out"].as_u64().unwrap())
        .sum();
    assert!(out > 0, "{source:#}");

    let checkpoints = get_json(addr, &format!("/jobs/{id}/checkpoints")).await;
    assert_eq!(checkpoints["enabled"], true);
    assert!(checkpoints["counts"]["completed"].as_u64().unwrap() >= 2);
    let history = checkpoints["history"].as_array().unwrap();
    let completed = history.iter().find(|c| c["status"] == "COMPLETED").unwrap();
    assert!(completed["checkpointed_size"].as_u64().unwrap() > 0);
    assert!(completed["end_to_end_duration"].as_i64().unwrap() >= 0);
    assert!(completed["trigger_timestamp"].as_u64().unwrap() > 0);
    assert!(checkpoints["latest"]["completed"]["id"].as_u64().is_some());

    let exceptions = get_json(addr, &format!("/jobs/{id}/exceptions")).await;
    let entries = exceptions["exceptionHistory"]["entries"]
        .as_array()
        .unwrap();
    assert_eq!(entries.len(), 1, "{exceptions:#}");
    assert_eq!(entries[0]["exceptionName"], "TaskFailure");
    assert!(
        entries[0]["taskName"]
            .as_str()
            .unwrap()
            .contains("'fail once'")
    );
    assert!(
        exceptions["root-exception"]
            .as_str()
            .unwrap()
            .contains("fail once")
    );

    let (status, _) = get(addr, "/jobs/00000000000000000000000000000000").await;
    assert_eq!(status, 404);
    let (status, _) = get(addr, &format!("/jobs/{id}/vertices/nope")).await;
    assert_eq!(status, 404);

    job.cancel();
    let _ = job.await;
    let jobs = get_json(addr, "/jobs/overview").await;
    assert_eq!(jobs["jobs"][0]["state"], "CANCELED");
    assert!(jobs["jobs"][0]["end-time"].as_u64().is_some());
    ui.shutdown().await;
}
