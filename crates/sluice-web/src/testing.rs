//! A job status made by hand for the unit tests of the pure parts.

use sluice_runtime::job::{
    CheckpointCounts, CheckpointHistory, CheckpointRecord, CheckpointStatus, EdgeStatus,
    ExceptionRecord, JobState, JobStatus, OperatorStatus, OperatorSubtask, TaskState, VertexStatus,
    VertexSubtask,
};
use sluice_runtime::metrics::{HistogramSnapshot, MetricsReport};

fn subtasks(n: usize) -> Vec<VertexSubtask> {
    (0..n)
        .map(|subtask| VertexSubtask {
            subtask,
            state: TaskState::Running,
            records_in: 0,
            records_out: 0,
            busy_ms: 0,
            backpressured_ms: 0,
        })
        .collect()
}

fn operator(id: usize, name: &str, records: u64, reported: MetricsReport) -> OperatorStatus {
    OperatorStatus {
        id,
        name: name.to_string(),
        subtasks: (0..2)
            .map(|subtask| OperatorSubtask {
                subtask,
                records_in: records,
                records_out: records,
                busy_ms: 1500,
                backpressured_ms: 250,
                events_to_coordinator: 3,
                events_from_coordinator: 1,
                reported: reported.clone(),
            })
            .collect(),
    }
}

/// A running job "clicks": vertex "source" (operators `numbers` and `parse`), vertex "sink"
/// (`enrich "async"` with async metrics, and `sink`), a hash edge between them, two
/// checkpoints (one completed, one failed) and one exception.
pub(crate) fn status() -> JobStatus {
    let mut reported = MetricsReport::default();
    reported.gauge("async_in_flight", 7);
    reported.counter("async_completed", 42);
    let mut h = HistogramSnapshot::new(vec![0.001, 0.01]);
    h.observe(0.0005);
    h.observe(0.005);
    h.observe(0.5);
    reported.histogram("async_latency_seconds", &h);
    let mut durations = HistogramSnapshot::new(vec![0.1, 1.0]);
    durations.observe(0.012);
    let mut sizes = HistogramSnapshot::new(vec![1e3, 1e4]);
    sizes.observe(2048.0);
    let completed = CheckpointRecord {
        id: 1,
        status: CheckpointStatus::Completed,
        trigger_time_ms: 1_700_000_000_000,
        end_time_ms: Some(1_700_000_000_012),
        duration_ms: Some(12),
        acknowledged_ms: Some(9),
        size_bytes: Some(2048),
        failure: None,
    };
    let failed = CheckpointRecord {
        id: 2,
        status: CheckpointStatus::Failed,
        trigger_time_ms: 1_700_000_001_000,
        end_time_ms: Some(1_700_000_011_000),
        duration_ms: Some(10_000),
        acknowledged_ms: None,
        size_bytes: None,
        failure: Some("expired after 10s before every task acknowledged it".into()),
    };
    JobStatus {
        job_id: "0123456789abcdef0123456789abcdef".into(),
        name: "clicks".into(),
        state: JobState::Running,
        start_time_ms: 1_699_999_990_000,
        end_time_ms: None,
        duration_ms: 10_000,
        now_ms: 1_700_000_000_000,
        vertices: vec![
            VertexStatus {
                id: "source".into(),
                name: "Source: numbers -> parse".into(),
                parallelism: 2,
                operators: vec![
                    operator(0, "numbers", 100, MetricsReport::default()),
                    operator(1, "parse", 100, MetricsReport::default()),
                ],
                subtasks: subtasks(2),
            },
            VertexStatus {
                id: "sink".into(),
                name: "enrich \"async\" -> sink".into(),
                parallelism: 2,
                operators: vec![
                    operator(2, "enrich \"async\"", 50, reported),
                    operator(3, "sink", 50, MetricsReport::default()),
                ],
                subtasks: subtasks(2),
            },
        ],
        edges: vec![EdgeStatus {
            source: "source".into(),
            target: "sink".into(),
            ship_strategy: "HASH".into(),
        }],
        checkpoints: CheckpointHistory {
            enabled: true,
            counts: CheckpointCounts {
                triggered: 2,
                in_progress: 0,
                completed: 1,
                failed: 1,
            },
            history: vec![failed.clone(), completed.clone()],
            latest_completed: Some(completed),
            latest_failed: Some(failed),
            restored_from: None,
            duration_seconds: durations,
            size_bytes: sizes,
        },
        restarts: 1,
        exceptions: vec![ExceptionRecord {
            timestamp_ms: 1_699_999_995_000,
            message: "operator 'parse' (#1), subtask 1 of 2 failed: bad line".into(),
            task: Some("operator 'parse' (#1), subtask 1 of 2".into()),
            operator: Some("parse".into()),
            subtask: Some(1),
        }],
        exceptions_total: 1,
    }
}
