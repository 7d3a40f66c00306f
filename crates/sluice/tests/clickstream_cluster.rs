//! The main example's pipeline on one job master and three task managers, each its own OS
//! process on loopback (`SLUICE_MODE`): the table it commits holds exactly what a local run's
//! does, and the example's own check of it passes.

mod clickstream_common;

use clickstream_common::example_binary;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

const SECRET: &str = "the clickstream cluster's secret";

fn command(dir: &Path, role: &[(&str, String)]) -> Command {
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let mut c = Command::new(example_binary());
    c.args([
        "--events",
        "20000",
        "--files",
        "4",
        "--parallelism",
        "3",
        "--lookup-latency-ms",
        "1",
        "--checkpoint-interval-ms",
        "200",
    ])
    .args(["--data-dir", &path("data")])
    .args(["--warehouse", &path("warehouse")])
    .args(["--checkpoint-dir", &path("checkpoints")])
    .current_dir(dir)
    .env_remove("SLUICE_MODE")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in role {
        c.env(k, v);
    }
    c
}

/// Collects a child's stdout lines, telling `found` once a line contains `needle`.
fn collect_stdout(
    child: &mut Child,
    needle: &'static str,
    found: mpsc::Sender<()>,
) -> std::thread::JoinHandle<String> {
    let stdout = child.stdout.take().expect("stdout is piped");
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains(needle) {
                let _ = found.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    })
}

/// The summary's line about what was committed.
fn committed_line(stdout: &str) -> String {
    stdout
        .lines()
        .find(|l| l.trim_start().starts_with("committed"))
        .unwrap_or_else(|| panic!("no 'committed' line in:\n{stdout}"))
        .trim()
        .to_string()
}

/// The summary's figures about the lookups: (completed, latency p50 in ms).
fn lookups(stdout: &str) -> (u64, f64) {
    let line = stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("lookups"))
        .unwrap_or_else(|| panic!("no 'lookups' line in:\n{stdout}"));
    let number = |after: &str| -> String {
        let at = line
            .find(after)
            .unwrap_or_else(|| panic!("no '{after}' in {line:?}"));
        line[at + after.len()..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
            .filter(|c| *c != ',')
            .collect()
    };
    let parse = |s: String| {
        s.parse::<f64>()
            .unwrap_or_else(|e| panic!("{s:?} in {line:?}: {e}"))
    };
    (
        parse(number("lookups")) as u64,
        parse(number("latency p50")),
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port on 127.0.0.1")
}

#[test]
fn the_example_on_a_job_master_and_three_task_managers_commits_what_a_local_run_does() {
    let local_dir = tempfile::tempdir().unwrap();
    let local = command(local_dir.path(), &[]).output().unwrap();
    let local_out = String::from_utf8_lossy(&local.stdout).into_owned();
    assert!(
        local.status.success(),
        "{local_out}\n{}",
        String::from_utf8_lossy(&local.stderr)
    );
    assert!(local_out.contains("output check: PASSED"), "{local_out}");

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut jm = command(
        dir.path(),
        &[
            ("SLUICE_MODE", "jobmanager".into()),
            ("SLUICE_SECRET", SECRET.into()),
            ("SLUICE_RPC_ADDR", format!("127.0.0.1:{port}")),
        ],
    )
    .spawn()
    .unwrap();
    let (found, listening) = mpsc::channel();
    let jm_stdout = collect_stdout(&mut jm, "job master listening", found);
    // The click files exist once the job master listens: the task managers read them.
    listening
        .recv()
        .expect("the job master ended before it listened");
    let tms: Vec<Child> = (0..3)
        .map(|i| {
            command(
                dir.path(),
                &[
                    ("SLUICE_MODE", "taskmanager".into()),
                    ("SLUICE_SECRET", SECRET.into()),
                    ("SLUICE_JOBMANAGER", format!("127.0.0.1:{port}")),
                    ("SLUICE_TASK_MANAGER_ID", format!("tm-{i}")),
                ],
            )
            .spawn()
            .unwrap()
        })
        .collect();
    let status = jm.wait().unwrap();
    let mut stderr = String::new();
    if let Some(mut e) = jm.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut stderr).unwrap();
    }
    let cluster_out = jm_stdout.join().unwrap();
    assert!(
        status.success(),
        "the job master failed:\n{cluster_out}\n{stderr}"
    );
    for (i, tm) in tms.into_iter().enumerate() {
        let out = tm.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "task manager {i} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        cluster_out.contains("output check: PASSED"),
        "{cluster_out}"
    );
    // The lookups ran on the task managers; the job master's summary counts them all, as the
    // local run's does (each click that passed the filters was looked up once: no restarts).
    let (local_completed, _) = lookups(&local_out);
    let (completed, p50) = lookups(&cluster_out);
    assert!(local_completed > 0, "{local_out}");
    assert_eq!(completed, local_completed, "{cluster_out}");
    assert!(p50 > 0.0, "{cluster_out}");
    // The same rows, users, minutes as the local run (the data files may differ in number:
    // the range distribution's statistics depend on timing).
    let rows = |line: String| line.split(" in ").next().unwrap_or_default().to_string();
    assert_eq!(
        rows(committed_line(&cluster_out)),
        rows(committed_line(&local_out))
    );
}
