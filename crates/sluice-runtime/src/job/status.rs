//! [`JobStatus`]: what a [`JobObserver`](super::JobObserver) snapshot holds: the job, its
//! graph as planned (vertices and edges, Flink's job graph), per-subtask metrics, checkpoint
//! history, restarts and exceptions. Plain serde data, in the units a REST API and a dashboard
//! show (milliseconds since the Unix epoch for times, milliseconds for durations, bytes).

use crate::metrics::{HistogramSnapshot, MetricsReport};
use serde::{Deserialize, Serialize};
use std::fmt;

/// How many checkpoints a job's live view keeps (the most recent; counts cover all).
pub const CHECKPOINT_HISTORY: usize = 50;

/// How many exceptions a job's live view keeps (the most recent; a count covers all).
pub const EXCEPTION_HISTORY: usize = 50;

/// The bounds (seconds) of [`CheckpointHistory::duration_seconds`].
pub const CHECKPOINT_DURATION_BOUNDS: [f64; 15] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// The bounds (bytes) of [`CheckpointHistory::size_bytes`]: powers of ten from 1 kB to 100 GB.
pub const CHECKPOINT_SIZE_BOUNDS: [f64; 9] = [1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11];

/// The state of a job, in Flink's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Its tasks run (also while one pipelined region restarts, as in Flink).
    Running,
    /// Every task stopped after a failure; the restart strategy's delay runs before the whole
    /// job is deployed again.
    Restarting,
    /// It ended: every source ended and every task finished, or it stopped with a savepoint.
    Finished,
    /// It failed and will not restart.
    Failed,
    /// It was cancelled.
    Canceled,
}

impl JobState {
    /// Flink's name: `RUNNING`, `RESTARTING`, `FINISHED`, `FAILED` or `CANCELED`.
    ///
    /// ```
    /// use sluice_runtime::job::JobState;
    /// assert_eq!(JobState::Canceled.as_str(), "CANCELED");
    /// assert!(JobState::Failed.is_terminal());
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "RUNNING",
            JobState::Restarting => "RESTARTING",
            JobState::Finished => "FINISHED",
            JobState::Failed => "FAILED",
            JobState::Canceled => "CANCELED",
        }
    }

    /// Whether the job has ended (finished, failed or canceled).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Finished | JobState::Failed | JobState::Canceled
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of one task (one subtask of a vertex), in Flink's execution state names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    /// Deployed and running.
    Running,
    /// Ended without error.
    Finished,
    /// Failed (its region, or the job, restarts or fails).
    Failed,
    /// Stopped by the job master (a cancel, or a failover of its region or of the job).
    Canceled,
}

impl TaskState {
    /// Flink's name: `RUNNING`, `FINISHED`, `FAILED` or `CANCELED`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Running => "RUNNING",
            TaskState::Finished => "FINISHED",
            TaskState::Failed => "FAILED",
            TaskState::Canceled => "CANCELED",
        }
    }
}

/// A point-in-time view of a job: see [`JobObserver::snapshot`](super::JobObserver::snapshot).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    /// The job's id: 32 hexadecimal digits, random per submission (Flink's `JobID`).
    pub job_id: String,
    /// The name given to `submit` / `execute`.
    pub name: String,
    /// The job's state.
    pub state: JobState,
    /// When the job was submitted (milliseconds since the Unix epoch).
    pub start_time_ms: u64,
    /// When it ended, once it did.
    pub end_time_ms: Option<u64>,
    /// From submission to the end, or to now while it runs.
    pub duration_ms: u64,
    /// When this snapshot was taken (milliseconds since the Unix epoch).
    pub now_ms: u64,
    /// The job's vertices, one per chain of operators (Flink's job vertices), in plan order:
    /// every source's chain before its consumers'.
    pub vertices: Vec<VertexStatus>,
    /// The exchanges between vertices (edges inside a chain are not listed).
    pub edges: Vec<EdgeStatus>,
    /// Checkpoint counts and the most recent checkpoints.
    pub checkpoints: CheckpointHistory,
    /// How many times the job, or one of its pipelined regions, restarted.
    pub restarts: u32,
    /// The most recent failures, newest first (at most [`EXCEPTION_HISTORY`]).
    pub exceptions: Vec<ExceptionRecord>,
    /// How many failures happened in all.
    pub exceptions_total: u64,
}

impl JobStatus {
    /// The vertex with id `id`.
    pub fn vertex(&self, id: &str) -> Option<&VertexStatus> {
        self.vertices.iter().find(|v| v.id == id)
    }

    /// Every operator of the job, vertex by vertex, in chain order.
    pub fn operators(&self) -> impl Iterator<Item = &OperatorStatus> {
        self.vertices.iter().flat_map(|v| v.operators.iter())
    }

    /// The operator named `name`.
    pub fn operator(&self, name: &str) -> Option<&OperatorStatus> {
        self.operators().find(|o| o.name == name)
    }
}

/// One job vertex: a chain of operators that runs as one task per subtask.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VertexStatus {
    /// Its id: 32 hexadecimal digits, the same in every run of the same job graph.
    pub id: String,
    /// Its operators' names joined by `" -> "`, as Flink names a chain.
    pub name: String,
    /// How many subtasks (tasks) it runs.
    pub parallelism: usize,
    /// Its operators, head first.
    pub operators: Vec<OperatorStatus>,
    /// Its subtasks: the head's records in, the tail's records out, the task's times.
    pub subtasks: Vec<VertexSubtask>,
}

impl VertexStatus {
    /// Records into the vertex (its head operator), over every subtask.
    pub fn records_in(&self) -> u64 {
        self.subtasks.iter().map(|s| s.records_in).sum()
    }

    /// Records out of the vertex (its tail operator), over every subtask.
    pub fn records_out(&self) -> u64 {
        self.subtasks.iter().map(|s| s.records_out).sum()
    }

    /// The vertex's state: running while any subtask runs; otherwise failed, canceled or
    /// finished, in that order of precedence.
    pub fn state(&self) -> TaskState {
        let any = |s: TaskState| self.subtasks.iter().any(|t| t.state == s);
        if any(TaskState::Running) {
            TaskState::Running
        } else if any(TaskState::Failed) {
            TaskState::Failed
        } else if any(TaskState::Canceled) {
            TaskState::Canceled
        } else {
            TaskState::Finished
        }
    }
}

/// One subtask of a vertex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VertexSubtask {
    /// The subtask index.
    pub subtask: usize,
    /// Its task's state.
    pub state: TaskState,
    /// Records into its head operator.
    pub records_in: u64,
    /// Records out of its tail operator.
    pub records_out: u64,
    /// Time its task spent working, milliseconds (as Flink counts it, including the time its
    /// input waited on an operator of the chain refusing more).
    pub busy_ms: u64,
    /// Time its task waited for room in a full output channel, milliseconds.
    pub backpressured_ms: u64,
}

/// One operator of a vertex, with its metrics per subtask.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperatorStatus {
    /// The operator's id in the job graph (`NodeId`'s number).
    pub id: usize,
    /// Its name, as set with `.name(..)`.
    pub name: String,
    /// Its metrics per subtask.
    pub subtasks: Vec<OperatorSubtask>,
}

impl OperatorStatus {
    /// Records in over every subtask.
    pub fn records_in(&self) -> u64 {
        self.subtasks.iter().map(|s| s.records_in).sum()
    }

    /// Records out over every subtask.
    pub fn records_out(&self) -> u64 {
        self.subtasks.iter().map(|s| s.records_out).sum()
    }
}

/// The metrics of one operator subtask, summed over every attempt (counters never go down).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OperatorSubtask {
    /// The subtask index.
    pub subtask: usize,
    /// Records in.
    pub records_in: u64,
    /// Records out.
    pub records_out: u64,
    /// Its task's busy time, milliseconds, including the time the task's input waited on this
    /// operator or one before it in the chain refusing more.
    pub busy_ms: u64,
    /// Its task's backpressured time, milliseconds, including the time the task's input waited
    /// on an operator after this one in the chain refusing more (that operator held it back).
    pub backpressured_ms: u64,
    /// Events sent to the operator's coordinator.
    pub events_to_coordinator: u64,
    /// Events received from the operator's coordinator.
    pub events_from_coordinator: u64,
    /// What the operator publishes itself: gauges, counters, histograms (for example the
    /// async wait operator's `async_in_flight` and `async_latency_seconds`).
    pub reported: MetricsReport,
}

/// An exchange between two vertices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeStatus {
    /// The producing vertex's id.
    pub source: String,
    /// The consuming vertex's id.
    pub target: String,
    /// How records cross it, in Flink's names: `FORWARD`, `REBALANCE`, `HASH`, `BROADCAST`,
    /// `CUSTOM`, or a custom partitioner's own name (the range shuffle's `RANGE`).
    pub ship_strategy: String,
}

/// The outcome of a checkpoint, in Flink's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CheckpointStatus {
    /// Triggered, not complete yet.
    InProgress,
    /// Durable and confirmed to every task.
    Completed,
    /// Aborted (expired, declined, could not be written, or the job failed meanwhile).
    Failed,
}

/// One checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// Its id.
    pub id: u64,
    /// Its outcome so far.
    pub status: CheckpointStatus,
    /// When it was triggered (milliseconds since the Unix epoch).
    pub trigger_time_ms: u64,
    /// When it completed or failed.
    pub end_time_ms: Option<u64>,
    /// From trigger to completion or failure, milliseconds (end to end, Flink's
    /// `end_to_end_duration`).
    pub duration_ms: Option<u64>,
    /// From trigger until every task acknowledged, milliseconds: the barriers through every
    /// channel and every snapshot taken (Flink's start delay, alignment and synchronous
    /// parts); the rest of `duration_ms` is writing the checkpoint.
    #[serde(default)]
    pub acknowledged_ms: Option<u64>,
    /// Bytes this checkpoint wrote to checkpoint storage, once written: state files,
    /// coordinator states and the table files of incremental keyed stores it uploaded (not
    /// those uploaded ahead of it, nor, in cluster mode, those the task managers uploaded).
    pub size_bytes: Option<u64>,
    /// Why it failed.
    pub failure: Option<String>,
}

/// Checkpoint counts over the whole job (every attempt).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointCounts {
    /// Triggered.
    pub triggered: u64,
    /// Not complete yet.
    pub in_progress: u64,
    /// Completed.
    pub completed: u64,
    /// Failed for any reason (Flink's count; more than those counted against
    /// `tolerable_failed_checkpoints`).
    pub failed: u64,
}

/// Checkpoint statistics of a job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointHistory {
    /// Whether the job checkpoints.
    pub enabled: bool,
    /// Counts over the whole job.
    pub counts: CheckpointCounts,
    /// The most recent checkpoints, newest first (at most [`CHECKPOINT_HISTORY`]).
    pub history: Vec<CheckpointRecord>,
    /// The last completed checkpoint.
    pub latest_completed: Option<CheckpointRecord>,
    /// The last failed checkpoint.
    pub latest_failed: Option<CheckpointRecord>,
    /// The checkpoint the job was started from (`restore_from`), if any.
    pub restored_from: Option<u64>,
    /// The durations of every completed checkpoint (over [`CHECKPOINT_DURATION_BOUNDS`]).
    pub duration_seconds: HistogramSnapshot,
    /// The sizes of every completed checkpoint (over [`CHECKPOINT_SIZE_BOUNDS`]).
    pub size_bytes: HistogramSnapshot,
}

/// One failure of the job: a task, a coordinator, too many failed checkpoints, ...
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExceptionRecord {
    /// When it was seen (milliseconds since the Unix epoch).
    pub timestamp_ms: u64,
    /// The error, as `JobError` displays it.
    pub message: String,
    /// The failing task ("operator 'parse' (#1), subtask 0 of 2") when a task or a coordinator
    /// failed.
    pub task: Option<String>,
    /// The failing operator's name, when known.
    pub operator: Option<String>,
    /// The failing subtask, when a subtask failed.
    pub subtask: Option<usize>,
}
