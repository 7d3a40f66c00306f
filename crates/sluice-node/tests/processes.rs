//! Cluster mode with every role in its own OS process, on loopback: the demo job
//! (`sluice-cluster-demo`: generated records counted per key, with checkpointed state) on one
//! job master and three task managers gives the local run's output; a task manager killed
//! with SIGKILL mid-run is replaced and the output stays exact; a peer without the secret is
//! refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const SECRET: &str = "the cluster's shared test secret";
const DEMO: &str = env!("CARGO_BIN_EXE_sluice-cluster-demo");

/// A free port on 127.0.0.1 (bound and released; nothing else on this machine races for it
/// between the release and the job master's bind in practice).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port on 127.0.0.1")
}

struct Job {
    out: PathBuf,
    checkpoints: PathBuf,
    records: u64,
    keys: u64,
    parallelism: usize,
    rate: f64,
    /// More variables for every process (object-store credentials).
    extra: Vec<(String, String)>,
}

impl Job {
    fn command(&self, vars: &[(&str, String)]) -> Command {
        let mut c = Command::new(DEMO);
        c.env("SLUICE_DEMO_OUT", &self.out)
            .env("SLUICE_DEMO_CHECKPOINTS", &self.checkpoints)
            .env("SLUICE_DEMO_RECORDS", self.records.to_string())
            .env("SLUICE_DEMO_KEYS", self.keys.to_string())
            .env("SLUICE_DEMO_PARALLELISM", self.parallelism.to_string())
            .env("SLUICE_DEMO_RATE", self.rate.to_string())
            // Completed checkpoints are logged at debug level: the tests wait for them.
            .env("RUST_LOG", "info,sluice_runtime::job::driver=debug")
            .env_remove("SLUICE_MODE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in self
            .extra
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .chain(vars.iter().map(|(k, v)| (*k, v)))
        {
            c.env(k, v);
        }
        c
    }

    fn job_master(&self, port: u16) -> Child {
        self.command(&[
            ("SLUICE_MODE", "jobmanager".into()),
            ("SLUICE_SECRET", SECRET.into()),
            ("SLUICE_RPC_ADDR", format!("127.0.0.1:{port}")),
            ("SLUICE_HEARTBEAT_TIMEOUT_MS", "2000".into()),
            ("SLUICE_HEARTBEAT_INTERVAL_MS", "200".into()),
        ])
        .spawn()
        .expect("cannot start the job master")
    }

    fn task_manager(&self, port: u16, name: &str) -> Child {
        self.command(&[
            ("SLUICE_MODE", "taskmanager".into()),
            ("SLUICE_SECRET", SECRET.into()),
            ("SLUICE_JOBMANAGER", format!("127.0.0.1:{port}")),
            ("SLUICE_TASK_MANAGER_ID", name.into()),
            ("SLUICE_SLOTS", "1".into()),
            ("SLUICE_HEARTBEAT_INTERVAL_MS", "200".into()),
        ])
        .spawn()
        .expect("cannot start a task manager")
    }
}

/// Every key's total over every part file.
fn read_totals(out: &Path) -> BTreeMap<u64, u64> {
    let mut totals = BTreeMap::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            let mut parts = line.split(' ');
            let k: u64 = parts.next().unwrap().parse().unwrap();
            let n: u64 = parts.next().unwrap().parse().unwrap();
            assert!(totals.insert(k, n).is_none(), "key {k} written twice");
        }
    }
    totals
}

/// Waits for a process to exit successfully, showing its output when it did not.
async fn succeeds(child: Child, what: &str) -> String {
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// Reads a process's log until a line contains `needle`; returns the reader for more.
async fn wait_for_line(child: &mut Child, needle: &str) -> Vec<String> {
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        let hit = line.contains(needle);
        seen.push(line);
        if hit {
            // Keep draining in the background so the process never blocks on a full pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return seen;
        }
    }
    panic!(
        "the process ended before logging {needle:?}:\n{}",
        seen.join("\n")
    );
}

/// `log` without ANSI colour sequences (`ESC [ ... m`).
fn without_colours(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn expected(records: u64, keys: u64) -> BTreeMap<u64, u64> {
    (0..keys.min(records))
        .map(|k| (k, records / keys + u64::from(k < records % keys)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_job_master_and_three_task_managers_give_the_local_output() {
    let dir = tempfile::tempdir().unwrap();
    let job = |name: &str| Job {
        out: dir.path().join(name),
        checkpoints: dir.path().join(format!("{name}-checkpoints")),
        records: 300_000,
        keys: 997,
        parallelism: 3,
        rate: 0.0,
        extra: Vec::new(),
    };
    let local = job("local");
    succeeds(local.command(&[]).spawn().unwrap(), "the local run").await;
    let local_totals = read_totals(&local.out);
    assert_eq!(local_totals, expected(300_000, 997));

    let cluster = job("cluster");
    let port = free_port();
    let jm = cluster.job_master(port);
    let tms: Vec<Child> = (0..3)
        .map(|i| cluster.task_manager(port, &format!("tm-{i}")))
        .collect();
    let jm_log = succeeds(jm, "the job master").await;
    assert!(
        jm_log.contains("tasks deployed to task managers"),
        "{jm_log}"
    );
    for (i, tm) in tms.into_iter().enumerate() {
        succeeds(tm, &format!("task manager {i}")).await;
    }
    assert_eq!(read_totals(&cluster.out), local_totals);
    // Three part files: each task manager ran one subtask of the totals.
    assert_eq!(std::fs::read_dir(&cluster.out).unwrap().count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_manager_killed_mid_run_is_replaced_and_the_output_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    task_manager_killed(dir.path(), Vec::new()).await;
}

/// The same with the totals in RocksDB (incremental checkpoints): the task managers upload
/// their store files and the replacement restores its key groups from them.
#[cfg(feature = "rocksdb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_manager_killed_mid_run_with_state_in_rocksdb_is_replaced_and_the_output_stays_exact()
 {
    let dir = tempfile::tempdir().unwrap();
    task_manager_killed(dir.path(), rocksdb(dir.path())).await;
    assert_store_files_were_checkpointed(&dir.path().join("checkpoints"));
}

/// The demo's variables for keyed state in RocksDB under `dir`.
#[cfg(feature = "rocksdb")]
fn rocksdb(dir: &Path) -> Vec<(String, String)> {
    vec![
        ("SLUICE_DEMO_STATE_BACKEND".into(), "rocksdb".into()),
        (
            "SLUICE_DEMO_STATE_DIR".into(),
            dir.join("state").display().to_string(),
        ),
    ]
}

/// The checkpoints in `dir` refer to RocksDB table files (so the state was in the store).
#[cfg(feature = "rocksdb")]
fn assert_store_files_were_checkpointed(dir: &Path) {
    let shared = std::fs::read_dir(dir.join("shared"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(shared > 0, "no shared store files under {}", dir.display());
}

/// Kills one of two task managers with SIGKILL once a checkpoint completed, starts a third:
/// the job fails over and its output is exact.
async fn task_manager_killed(dir: &Path, extra: Vec<(String, String)>) {
    let job = Job {
        out: dir.join("out"),
        checkpoints: dir.join("checkpoints"),
        records: 400_000,
        keys: 101,
        parallelism: 2,
        // About four seconds: the kill lands mid-run.
        rate: 100_000.0,
        extra,
    };
    let port = free_port();
    let mut jm = job.job_master(port);
    let tm0 = job.task_manager(port, "tm-0");
    let mut tm1 = job.task_manager(port, "tm-1");
    // Kill tm-1 once the job runs on both task managers.
    let stdout = jm.stdout.take().expect("stdout is piped");
    let summary = tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        let mut all = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            all.push(line);
        }
        all.join("\n")
    });
    // Kill tm-1 once a checkpoint completed: the job is mid-run.
    wait_for_line(&mut jm, "checkpoint completed").await;
    tm1.start_kill().unwrap();
    tm1.wait().await.unwrap();
    let tm2 = job.task_manager(port, "tm-2");
    let jm_out = jm.wait_with_output().await.unwrap();
    assert!(
        jm_out.status.success(),
        "the job master failed: {}",
        jm_out.status
    );
    // The loss was seen and the job failed over (the summary names its restarts).
    let summary = summary.await.unwrap();
    let restarts: u32 = summary
        .split("job finished: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary from the job master: {summary}"));
    assert!(restarts >= 1, "{summary}");
    succeeds(tm0, "task manager 0").await;
    succeeds(tm2, "task manager 2").await;
    assert_eq!(read_totals(&job.out), expected(400_000, 101));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_the_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let job = Job {
        out: dir.path().join("out"),
        checkpoints: dir.path().join("checkpoints"),
        records: 10,
        keys: 3,
        parallelism: 1,
        rate: 0.0,
        extra: Vec::new(),
    };
    let port = free_port();
    let mut jm = job.job_master(port);
    wait_for_line(&mut jm, "job master listening").await;
    // A task manager with another secret cannot register...
    let wrong = sluice_net::auth::Secret::new(b"not the cluster's secret at all".to_vec()).unwrap();
    let mut client =
        sluice_control::JobMasterClient::new(&format!("http://127.0.0.1:{port}"), &wrong).unwrap();
    let refused = client
        .register(sluice_control::messages::RegisterTaskManager {
            task_manager: "intruder".into(),
            slots: 8,
            data_address: "127.0.0.1:1".into(),
            control_address: "127.0.0.1:1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused}");
    // ...and the job still runs on a task manager that has it.
    let tm = job.task_manager(port, "tm-0");
    let out = jm.wait_with_output().await.unwrap();
    assert!(out.status.success());
    succeeds(tm, "the task manager").await;
    assert_eq!(read_totals(&job.out), expected(10, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_master_killed_and_started_again_resumes_from_the_latest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    job_master_restart(dir.path(), dir.path().join("checkpoints"), &[]).await;
}

#[cfg(feature = "rocksdb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_master_killed_and_started_again_resumes_its_rocksdb_state_from_the_latest_checkpoint()
 {
    let dir = tempfile::tempdir().unwrap();
    let vars = rocksdb(dir.path());
    let vars: Vec<(&str, String)> = vars.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    job_master_restart(dir.path(), dir.path().join("checkpoints"), &vars).await;
    assert_store_files_were_checkpointed(&dir.path().join("checkpoints"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_stopped_at_parallelism_2_resumes_at_3_with_its_state_sent_as_handles() {
    let dir = tempfile::tempdir().unwrap();
    rescale_by_handle(dir.path(), Vec::new(), Start::Resume).await;
}

#[cfg(feature = "rocksdb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_rocksdb_state_stopped_at_parallelism_2_resumes_at_3_from_handles() {
    let dir = tempfile::tempdir().unwrap();
    rescale_by_handle(dir.path(), rocksdb(dir.path()), Start::Resume).await;
    assert_store_files_were_checkpointed(&dir.path().join("checkpoints"));
}

/// A new job started from another's checkpoint directory (a restore path, its own checkpoints
/// elsewhere) reads it as handles too: the task managers read the files at that path.
#[cfg(feature = "rocksdb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_restored_from_a_path_at_another_parallelism_reads_it_as_handles() {
    let dir = tempfile::tempdir().unwrap();
    rescale_by_handle(dir.path(), rocksdb(dir.path()), Start::RestorePath).await;
    assert_store_files_were_checkpointed(&dir.path().join("checkpoints-2"));
}

/// How the second job master of `rescale_by_handle` starts.
enum Start {
    /// From the latest checkpoint of its own storage.
    Resume,
    /// From the first job's checkpoint storage as a restore path, with storage of its own.
    RestorePath,
}

/// Runs the demo at parallelism 2 until a checkpoint completed, kills every process, and
/// starts it again at parallelism 3 on three new task managers: the job master reads only the
/// checkpoint's metadata into handles, each task manager reads the state files and takes its
/// share, and the output is exact.
async fn rescale_by_handle(dir: &Path, extra: Vec<(String, String)>, start: Start) {
    let mut job = Job {
        out: dir.join("out"),
        checkpoints: dir.join("checkpoints"),
        records: 400_000,
        keys: 101,
        parallelism: 2,
        rate: 100_000.0,
        extra,
    };
    let port = free_port();
    let mut first = job.job_master(port);
    let mut old_tms = [
        job.task_manager(port, "tm-0"),
        job.task_manager(port, "tm-1"),
    ];
    wait_for_line(&mut first, "checkpoint completed").await;
    for p in old_tms.iter_mut().chain(std::iter::once(&mut first)) {
        p.start_kill().unwrap();
        p.wait().await.unwrap();
    }
    job.parallelism = 3;
    let port = free_port();
    let how = match start {
        Start::Resume => ("SLUICE_DEMO_RESUME", "true".to_string()),
        Start::RestorePath => {
            let path = job.checkpoints.display().to_string();
            job.checkpoints = dir.join("checkpoints-2");
            ("SLUICE_DEMO_RESTORE_FROM", path)
        }
    };
    let second = job
        .command(&[
            ("SLUICE_MODE", "jobmanager".into()),
            ("SLUICE_SECRET", SECRET.into()),
            ("SLUICE_RPC_ADDR", format!("127.0.0.1:{port}")),
            ("SLUICE_HEARTBEAT_TIMEOUT_MS", "2000".into()),
            ("SLUICE_HEARTBEAT_INTERVAL_MS", "200".into()),
            how,
        ])
        .spawn()
        .unwrap();
    let tms: Vec<Child> = (0..3)
        .map(|i| job.task_manager(port, &format!("tm-new-{i}")))
        .collect();
    let log = succeeds(second, "the job master at parallelism 3").await;
    let started = match start {
        Start::Resume => "resuming from the latest checkpoint",
        Start::RestorePath => "restoring",
    };
    assert!(log.contains(started), "{log}");
    // Its first deployment carried the restored state as handles, not entries.
    let handles: usize = without_colours(&log)
        .lines()
        .find(|l| l.contains("tasks deployed to task managers"))
        .and_then(|l| l.split("state_handles=").nth(1))
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no deployment logged:\n{log}"));
    assert!(handles > 0, "{log}");
    for (i, tm) in tms.into_iter().enumerate() {
        succeeds(tm, &format!("task manager {i}")).await;
    }
    assert_eq!(read_totals(&job.out), expected(400_000, 101));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_job_master_finds_the_latest_checkpoint_in_s3() {
    let Some(endpoint) =
        sluice_runtime::testing::required_env("SLUICE_S3_ENDPOINT", "source .ci/s3")
    else {
        return;
    };
    let bucket = format!("cluster-{}", std::process::id());
    let created = endpoint.clone();
    let b = bucket.clone();
    tokio::task::spawn_blocking(move || sluice_runtime::testing::create_s3_bucket(&created, &b))
        .await
        .unwrap()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s3 = [
        ("AWS_ENDPOINT", endpoint),
        ("AWS_ALLOW_HTTP", "true".to_string()),
        ("AWS_ACCESS_KEY_ID", "test".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
    ];
    job_master_restart(
        dir.path(),
        PathBuf::from(format!("s3://{bucket}/demo")),
        &s3,
    )
    .await;
}

/// Kills the job master once a checkpoint completed and starts it again on the same address
/// with `SLUICE_DEMO_RESUME`: it resumes from the checkpoint store and the output is exact.
async fn job_master_restart(dir: &Path, checkpoints: PathBuf, extra: &[(&str, String)]) {
    let job = Job {
        out: dir.join("out"),
        checkpoints,
        records: 400_000,
        keys: 101,
        parallelism: 2,
        rate: 100_000.0,
        extra: extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    };
    let port = free_port();
    let resume = [("SLUICE_DEMO_RESUME", "true".to_string())];
    let mut first = job.job_master(port);
    let tm0 = job.task_manager(port, "tm-0");
    let tm1 = job.task_manager(port, "tm-1");
    // Kill the job master once a checkpoint completed.
    wait_for_line(&mut first, "checkpoint completed").await;
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let mut second = job.command(&[
        ("SLUICE_MODE", "jobmanager".into()),
        ("SLUICE_SECRET", SECRET.into()),
        ("SLUICE_RPC_ADDR", format!("127.0.0.1:{port}")),
        ("SLUICE_HEARTBEAT_TIMEOUT_MS", "2000".into()),
        ("SLUICE_HEARTBEAT_INTERVAL_MS", "200".into()),
        resume[0].clone(),
    ]);
    let second = second.spawn().unwrap();
    let log = succeeds(second, "the second job master").await;
    assert!(log.contains("resuming from the latest checkpoint"), "{log}");
    succeeds(tm0, "task manager 0").await;
    succeeds(tm1, "task manager 1").await;
    assert_eq!(read_totals(&job.out), expected(400_000, 101));
}
