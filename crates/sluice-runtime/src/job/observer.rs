//! The live view of a running job: [`JobObserver`], and the recording behind it.
//!
//! The job master already sees every event worth showing: attempts deployed, tasks ending,
//! failures, restarts, checkpoints triggered, written, completed and aborted. It records each
//! as it happens into one shared structure (a short lock, a few fields written; never on the
//! record path), through a `JobRecorder`. A [`JobObserver`] reads it: [`JobObserver::snapshot`]
//! copies the record, reads the live metrics counters, and lays both over the job graph as
//! planned into a [`JobStatus`]. Everything kept is bounded: the last [`CHECKPOINT_HISTORY`]
//! checkpoints and [`EXCEPTION_HISTORY`] exceptions, plus counts of all.
//!
//! The observer is cheap to clone, read-only, and outlives the [`JobHandle`](crate::JobHandle):
//! after the job ended it keeps showing the final state. Exporters (the `sluice-web` crate's
//! REST API, dashboard and Prometheus endpoint) take one; the runtime depends on none of them.

use crate::error::JobError;
use crate::graph::{NodeKind, Partitioning, StreamGraph};
use crate::job::handle::SharedMetrics;
use crate::job::plan::Plan;
use crate::job::status::{
    CHECKPOINT_DURATION_BOUNDS, CHECKPOINT_HISTORY, CHECKPOINT_SIZE_BOUNDS, CheckpointCounts,
    CheckpointHistory, CheckpointRecord, CheckpointStatus, EXCEPTION_HISTORY, EdgeStatus,
    ExceptionRecord, JobState, JobStatus, OperatorStatus, OperatorSubtask, TaskState, VertexStatus,
    VertexSubtask,
};
use crate::metrics::{HistogramSnapshot, JobMetrics, SubtaskMetrics};
use sluice_core::sync::lock;
use sluice_core::{CheckpointId, NodeId};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A read-only, cloneable live view of one job: its state, graph, metrics, checkpoints,
/// restarts and failures. Get one from [`JobHandle::observer`](crate::JobHandle::observer).
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::job::JobState;
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// let env = StreamEnvironment::new();
/// env.from_iter(0u64..1000).map(|x| x + 1).name("inc").discard();
/// let job = env.submit("observed").unwrap();
/// let observer = job.observer();
/// job.await.unwrap();
/// let status = observer.snapshot();
/// assert_eq!(status.state, JobState::Finished);
/// assert_eq!(status.operator("inc").unwrap().records_in(), 1000);
/// assert_eq!(serde_json::to_value(&status).unwrap()["state"], "FINISHED");
/// # }
/// ```
#[derive(Clone)]
pub struct JobObserver {
    live: Arc<Live>,
}

impl std::fmt::Debug for JobObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobObserver")
            .field("job_id", &self.live.job_id)
            .field("name", &self.live.name)
            .field("state", &self.state())
            .finish()
    }
}

impl JobObserver {
    /// The job's id (32 hexadecimal digits, random per submission).
    pub fn job_id(&self) -> &str {
        &self.live.job_id
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.live.name
    }

    /// The job's state now.
    pub fn state(&self) -> JobState {
        lock(&self.live.record).state
    }

    /// A copy of everything the view holds, as of now. Takes the record's lock only to copy
    /// it; the metrics counters are read without stopping any task.
    pub fn snapshot(&self) -> JobStatus {
        let metrics = self.live.metrics.job();
        let record = lock(&self.live.record).clone();
        build_status(&self.live, &record, &metrics, epoch_ms())
    }
}

/// What never changes while a job runs: its ids, its graph as planned.
struct Live {
    job_id: String,
    name: String,
    start_time_ms: u64,
    started: Instant,
    checkpointing: bool,
    layout: GraphLayout,
    metrics: Arc<SharedMetrics>,
    record: Mutex<Record>,
}

/// The job graph as planned: vertices (chains) and the exchanges between them.
struct GraphLayout {
    vertices: Vec<VertexLayout>,
    edges: Vec<EdgeStatus>,
    tasks: usize,
}

struct VertexLayout {
    id: String,
    name: String,
    parallelism: usize,
    operators: Vec<(NodeId, String)>,
    /// The index of its subtask 0's task (tasks are numbered chain by chain, subtask by
    /// subtask).
    first_task: usize,
}

impl GraphLayout {
    fn new(graph: &StreamGraph, plan: &Plan) -> Self {
        let fingerprint = graph.fingerprint();
        let mut chain_of = vec![0; graph.nodes.len()];
        let mut vertices = Vec::with_capacity(plan.chains.len());
        let mut first_task = 0;
        for (c, chain) in plan.chains.iter().enumerate() {
            let operators: Vec<(NodeId, String)> = chain
                .iter()
                .map(|id| {
                    chain_of[id.0] = c;
                    (*id, graph.nodes[id.0].name.clone())
                })
                .collect();
            let parallelism = chain.first().map_or(0, |h| plan.parallelism[h.0]);
            let is_source = chain
                .first()
                .is_some_and(|h| matches!(graph.nodes[h.0].kind, NodeKind::Source(_)));
            let names: Vec<&str> = operators.iter().map(|(_, n)| n.as_str()).collect();
            // A source's chain starts with "Source: " (unless its name says so already), as
            // Flink names it.
            let name = if is_source && !names.first().is_some_and(|n| n.starts_with("Source")) {
                format!("Source: {}", names.join(" -> "))
            } else {
                names.join(" -> ")
            };
            vertices.push(VertexLayout {
                id: vertex_id(&fingerprint, chain.first().copied().unwrap_or(NodeId(c))),
                name,
                parallelism,
                operators,
                first_task,
            });
            first_task += parallelism;
        }
        let edges = graph
            .edges
            .iter()
            .zip(&plan.chained)
            .filter(|(_, chained)| !**chained)
            .map(|(e, _)| {
                let (pf, pt) = (plan.parallelism[e.from.0], plan.parallelism[e.to.0]);
                let ship_strategy = match e.partitioning {
                    Partitioning::Default if pf == pt => "FORWARD",
                    Partitioning::Default | Partitioning::Rebalance => "REBALANCE",
                    Partitioning::Forward => "FORWARD",
                    Partitioning::Hash => "HASH",
                    Partitioning::Broadcast => "BROADCAST",
                    Partitioning::Custom => e.writer.ship_strategy().unwrap_or("CUSTOM"),
                };
                EdgeStatus {
                    source: vertices[chain_of[e.from.0]].id.clone(),
                    target: vertices[chain_of[e.to.0]].id.clone(),
                    ship_strategy: ship_strategy.to_string(),
                }
            })
            .collect();
        GraphLayout {
            vertices,
            edges,
            tasks: first_task,
        }
    }
}

/// What the job master records as it happens.
#[derive(Clone)]
struct Record {
    state: JobState,
    /// When the job ended: wall-clock time and duration.
    end: Option<(u64, Duration)>,
    tasks: Vec<TaskState>,
    /// The most recent checkpoints, oldest first.
    checkpoints: VecDeque<Checkpoint>,
    triggered: u64,
    completed: u64,
    failed: u64,
    latest_completed: Option<CheckpointRecord>,
    latest_failed: Option<CheckpointRecord>,
    restored_from: Option<u64>,
    durations: HistogramSnapshot,
    sizes: HistogramSnapshot,
    restarts: u32,
    /// The most recent failures, oldest first.
    exceptions: VecDeque<ExceptionRecord>,
    exceptions_total: u64,
}

#[derive(Clone)]
struct Checkpoint {
    record: CheckpointRecord,
    triggered: Instant,
}

/// The job master's side of the live view: records events as they happen. Cheap to clone.
#[derive(Clone)]
pub(crate) struct JobRecorder {
    live: Arc<Live>,
}

impl JobRecorder {
    /// A recorder for job `name`, planned as `plan` from `graph`, reading `metrics`.
    pub(crate) fn new(
        name: &str,
        graph: &StreamGraph,
        plan: &Plan,
        checkpointing: bool,
        metrics: Arc<SharedMetrics>,
    ) -> Self {
        let layout = GraphLayout::new(graph, plan);
        let record = Record {
            state: JobState::Running,
            end: None,
            tasks: vec![TaskState::Running; layout.tasks],
            checkpoints: VecDeque::new(),
            triggered: 0,
            completed: 0,
            failed: 0,
            latest_completed: None,
            latest_failed: None,
            restored_from: None,
            durations: HistogramSnapshot::new(CHECKPOINT_DURATION_BOUNDS.to_vec()),
            sizes: HistogramSnapshot::new(CHECKPOINT_SIZE_BOUNDS.to_vec()),
            restarts: 0,
            exceptions: VecDeque::new(),
            exceptions_total: 0,
        };
        JobRecorder {
            live: Arc::new(Live {
                job_id: random_job_id(),
                name: name.to_string(),
                start_time_ms: epoch_ms(),
                started: Instant::now(),
                checkpointing,
                layout,
                metrics,
                record: Mutex::new(record),
            }),
        }
    }

    /// The read-only view.
    pub(crate) fn observer(&self) -> JobObserver {
        JobObserver {
            live: self.live.clone(),
        }
    }

    fn with(&self, f: impl FnOnce(&mut Record)) {
        f(&mut lock(&self.live.record));
    }

    /// A whole attempt was deployed: the job and every task run.
    pub(crate) fn attempt_running(&self) {
        self.with(|r| {
            if !r.state.is_terminal() {
                r.state = JobState::Running;
            }
            r.tasks.fill(TaskState::Running);
        });
    }

    /// Task `task` is now in `state`.
    pub(crate) fn task_state(&self, task: usize, state: TaskState) {
        self.tasks_state(&[task], state);
    }

    /// Tasks `tasks` are now in `state`.
    pub(crate) fn tasks_state(&self, tasks: &[usize], state: TaskState) {
        self.with(|r| {
            for &t in tasks {
                if let Some(s) = r.tasks.get_mut(t) {
                    *s = state;
                }
            }
        });
    }

    /// The job failed with `err` (whatever comes next: a restart or the end).
    pub(crate) fn failure(&self, err: &JobError) {
        let record = exception_record(err, epoch_ms());
        self.with(|r| push_exception(r, record));
    }

    /// The job restarts (`restarts` so far); with `whole_job`, every task stopped and the job
    /// waits for the restart delay.
    pub(crate) fn restarting(&self, restarts: u32, whole_job: bool) {
        self.with(|r| {
            r.restarts = restarts;
            if whole_job && !r.state.is_terminal() {
                r.state = JobState::Restarting;
                for t in r.tasks.iter_mut() {
                    if *t == TaskState::Running {
                        *t = TaskState::Canceled;
                    }
                }
            }
        });
    }

    /// The job was started from checkpoint `id`.
    pub(crate) fn restored_from(&self, id: CheckpointId) {
        self.with(|r| r.restored_from = Some(id.0));
    }

    /// Checkpoint `id` was triggered (the first call for an id counts; later ones are ignored).
    pub(crate) fn checkpoint_triggered(&self, id: CheckpointId) {
        let now = (epoch_ms(), Instant::now());
        self.with(|r| {
            if r.checkpoints.iter().any(|c| c.record.id == id.0) {
                return;
            }
            r.triggered += 1;
            if r.checkpoints.len() == CHECKPOINT_HISTORY {
                r.checkpoints.pop_front();
            }
            r.checkpoints.push_back(Checkpoint {
                record: CheckpointRecord {
                    id: id.0,
                    status: CheckpointStatus::InProgress,
                    trigger_time_ms: now.0,
                    end_time_ms: None,
                    duration_ms: None,
                    acknowledged_ms: None,
                    size_bytes: None,
                    failure: None,
                },
                triggered: now.1,
            });
        });
    }

    /// Every task acknowledged checkpoint `id`; it is being written.
    pub(crate) fn checkpoint_acknowledged(&self, id: CheckpointId) {
        let now = Instant::now();
        self.with(|r| {
            if let Some(c) = find(r, id) {
                c.record.acknowledged_ms =
                    Some(now.saturating_duration_since(c.triggered).as_millis() as u64);
            }
        });
    }

    /// Checkpoint `id` was written: `bytes` in checkpoint storage.
    pub(crate) fn checkpoint_written(&self, id: CheckpointId, bytes: u64) {
        self.with(|r| {
            if let Some(c) = find(r, id) {
                c.record.size_bytes = Some(bytes);
            }
        });
    }

    /// Checkpoint `id` completed.
    pub(crate) fn checkpoint_completed(&self, id: CheckpointId) {
        self.end_checkpoint(id, CheckpointStatus::Completed, None);
    }

    /// Checkpoint `id` failed because of `reason`.
    pub(crate) fn checkpoint_failed(&self, id: CheckpointId, reason: &str) {
        self.end_checkpoint(id, CheckpointStatus::Failed, Some(reason.to_string()));
    }

    fn end_checkpoint(&self, id: CheckpointId, status: CheckpointStatus, failure: Option<String>) {
        let now = (epoch_ms(), Instant::now());
        self.with(|r| {
            let ended = find(r, id).and_then(|c| {
                if c.record.status != CheckpointStatus::InProgress {
                    return None;
                }
                c.record.status = status;
                c.record.end_time_ms = Some(now.0);
                c.record.duration_ms = Some(millis(now.1.saturating_duration_since(c.triggered)));
                c.record.failure = failure;
                Some(c.record.clone())
            });
            let Some(ended) = ended else {
                return;
            };
            match status {
                CheckpointStatus::Completed => {
                    r.completed += 1;
                    if let Some(ms) = ended.duration_ms {
                        r.durations.observe(ms as f64 / 1000.0);
                    }
                    if let Some(bytes) = ended.size_bytes {
                        r.sizes.observe(bytes as f64);
                    }
                    r.latest_completed = Some(ended);
                }
                _ => {
                    r.failed += 1;
                    r.latest_failed = Some(ended);
                }
            }
        });
    }

    /// The job ended with `result`.
    pub(crate) fn ended<T>(&self, result: &Result<T, JobError>) {
        let now = epoch_ms();
        let duration = self.live.started.elapsed();
        let (state, task_end) = match result {
            Ok(_) => (JobState::Finished, TaskState::Finished),
            Err(JobError::Cancelled) => (JobState::Canceled, TaskState::Canceled),
            Err(_) => (JobState::Failed, TaskState::Canceled),
        };
        if let Err(e) = result
            && !matches!(e, JobError::Cancelled)
        {
            // A failure that never reached the restart strategy (restoring, starting the
            // coordinators) is recorded here; one that did is recorded already.
            let root = match e {
                JobError::RestartsExhausted { last, .. } => last.as_ref(),
                e => e,
            };
            let message = root.to_string();
            let known = lock(&self.live.record)
                .exceptions
                .back()
                .is_some_and(|x| x.message == message);
            if !known {
                self.failure(root);
            }
        }
        let in_progress: Vec<CheckpointId> = lock(&self.live.record)
            .checkpoints
            .iter()
            .filter(|c| c.record.status == CheckpointStatus::InProgress)
            .map(|c| CheckpointId(c.record.id))
            .collect();
        for id in in_progress {
            self.checkpoint_failed(id, "the job ended before it completed");
        }
        self.with(|r| {
            r.state = state;
            r.end = Some((now, duration));
            for t in r.tasks.iter_mut() {
                if *t == TaskState::Running {
                    *t = task_end;
                }
            }
        });
    }
}

fn find(r: &mut Record, id: CheckpointId) -> Option<&mut Checkpoint> {
    r.checkpoints.iter_mut().rev().find(|c| c.record.id == id.0)
}

fn push_exception(r: &mut Record, e: ExceptionRecord) {
    r.exceptions_total += 1;
    if r.exceptions.len() == EXCEPTION_HISTORY {
        r.exceptions.pop_front();
    }
    r.exceptions.push_back(e);
}

/// How a failure is shown: its message, and the failing task when one failed.
fn exception_record(err: &JobError, timestamp_ms: u64) -> ExceptionRecord {
    let (task, operator, subtask) = if let Some(t) = err.task_failure() {
        (
            Some(format!(
                "operator '{}' ({}), subtask {} of {}",
                t.operator_name, t.operator_id, t.subtask, t.parallelism
            )),
            Some(t.operator_name.clone()),
            Some(t.subtask),
        )
    } else if let Some(c) = err.coordinator_failure() {
        (
            Some(format!(
                "the coordinator of operator '{}' ({})",
                c.operator_name, c.operator_id
            )),
            Some(c.operator_name.clone()),
            None,
        )
    } else {
        (None, None, None)
    };
    ExceptionRecord {
        timestamp_ms,
        message: err.to_string(),
        task,
        operator,
        subtask,
    }
}

/// Lays the record and the metrics over the graph: a pure function of its inputs.
fn build_status(live: &Live, r: &Record, metrics: &JobMetrics, now_ms: u64) -> JobStatus {
    let by_subtask: HashMap<(usize, usize), &SubtaskMetrics> = metrics
        .subtasks
        .iter()
        .map(|s| ((s.operator_id.0, s.subtask), s))
        .collect();
    let metric = |node: NodeId, subtask: usize| by_subtask.get(&(node.0, subtask)).copied();
    let vertices = live
        .layout
        .vertices
        .iter()
        .map(|v| {
            let operators = v
                .operators
                .iter()
                .map(|(id, name)| OperatorStatus {
                    id: id.0,
                    name: name.clone(),
                    subtasks: (0..v.parallelism)
                        .map(|s| operator_subtask(s, metric(*id, s)))
                        .collect(),
                })
                .collect();
            let head = v.operators.first().map(|(id, _)| *id);
            let tail = v.operators.last().map(|(id, _)| *id);
            let subtasks = (0..v.parallelism)
                .map(|s| {
                    let h = head.and_then(|id| metric(id, s));
                    let t = tail.and_then(|id| metric(id, s));
                    VertexSubtask {
                        subtask: s,
                        state: r
                            .tasks
                            .get(v.first_task + s)
                            .copied()
                            .unwrap_or(TaskState::Running),
                        records_in: h.map_or(0, |m| m.records_in),
                        records_out: t.map_or(0, |m| m.records_out),
                        // The task's times are its tail's: the head counts as backpressured
                        // what its chain's blocking operator made it wait (metrics module).
                        busy_ms: t.map_or(0, |m| millis(m.busy)),
                        backpressured_ms: t.map_or(0, |m| millis(m.backpressured)),
                    }
                })
                .collect();
            VertexStatus {
                id: v.id.clone(),
                name: v.name.clone(),
                parallelism: v.parallelism,
                operators,
                subtasks,
            }
        })
        .collect();
    let history: Vec<CheckpointRecord> = r
        .checkpoints
        .iter()
        .rev()
        .map(|c| c.record.clone())
        .collect();
    let in_progress = history
        .iter()
        .filter(|c| c.status == CheckpointStatus::InProgress)
        .count() as u64;
    let (end_time_ms, duration) = match r.end {
        Some((t, d)) => (Some(t), d),
        None => (None, live.started.elapsed()),
    };
    JobStatus {
        job_id: live.job_id.clone(),
        name: live.name.clone(),
        state: r.state,
        start_time_ms: live.start_time_ms,
        end_time_ms,
        duration_ms: millis(duration),
        now_ms,
        vertices,
        edges: live.layout.edges.clone(),
        checkpoints: CheckpointHistory {
            enabled: live.checkpointing,
            counts: CheckpointCounts {
                triggered: r.triggered,
                in_progress,
                completed: r.completed,
                failed: r.failed,
            },
            history,
            latest_completed: r.latest_completed.clone(),
            latest_failed: r.latest_failed.clone(),
            restored_from: r.restored_from,
            duration_seconds: r.durations.clone(),
            size_bytes: r.sizes.clone(),
        },
        restarts: r.restarts,
        exceptions: r.exceptions.iter().rev().cloned().collect(),
        exceptions_total: r.exceptions_total,
    }
}

fn operator_subtask(subtask: usize, m: Option<&SubtaskMetrics>) -> OperatorSubtask {
    let Some(m) = m else {
        return OperatorSubtask {
            subtask,
            ..OperatorSubtask::default()
        };
    };
    OperatorSubtask {
        subtask,
        records_in: m.records_in,
        records_out: m.records_out,
        busy_ms: millis(m.busy),
        backpressured_ms: millis(m.backpressured),
        events_to_coordinator: m.events_to_coordinator,
        events_from_coordinator: m.events_from_coordinator,
        reported: crate::metrics::MetricsReport {
            gauges: m.gauges.clone(),
            counters: m.counters.clone(),
            histograms: m.histograms.clone(),
        },
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// FNV-1a over `bytes`, from `seed`.
fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(seed, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A vertex's id: 32 hexadecimal digits from the graph's fingerprint and its head operator, so
/// the same job graph gets the same ids in every run (as Flink derives its vertex ids).
fn vertex_id(fingerprint: &str, head: NodeId) -> String {
    let key = format!("{fingerprint}/{}", head.0);
    let a = fnv(0xcbf2_9ce4_8422_2325, key.as_bytes());
    let b = fnv(0x8422_2325_cbf2_9ce4, key.as_bytes());
    format!("{a:016x}{b:016x}")
}

/// A random job id: 32 hexadecimal digits (std's randomly keyed hasher, over the time and a
/// process-wide counter).
fn random_job_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let half = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u64(n);
        h.write_u64(salt);
        h.finish()
    };
    format!("{:016x}{:016x}", half(1), half(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vertex_ids_are_stable_and_distinct() {
        assert_eq!(vertex_id("g", NodeId(1)), vertex_id("g", NodeId(1)));
        assert_ne!(vertex_id("g", NodeId(1)), vertex_id("g", NodeId(2)));
        assert_eq!(vertex_id("g", NodeId(1)).len(), 32);
        assert_ne!(random_job_id(), random_job_id());
    }

    fn recorder() -> JobRecorder {
        let graph = StreamGraph::default();
        let plan = Plan {
            parallelism: Vec::new(),
            chained: Vec::new(),
            chains: Vec::new(),
        };
        JobRecorder::new("t", &graph, &plan, true, Arc::new(SharedMetrics::default()))
    }

    #[test]
    fn checkpoints_are_recorded_bounded_and_counted() {
        let r = recorder();
        for i in 1..=(CHECKPOINT_HISTORY as u64 + 10) {
            let id = CheckpointId(i);
            r.checkpoint_triggered(id);
            r.checkpoint_triggered(id); // counted once
            r.checkpoint_written(id, 100 * i);
            if i % 2 == 0 {
                r.checkpoint_completed(id);
            } else {
                r.checkpoint_failed(id, "expired");
            }
        }
        r.checkpoint_triggered(CheckpointId(1000));
        let s = r.observer().snapshot();
        let c = &s.checkpoints;
        assert_eq!(c.history.len(), CHECKPOINT_HISTORY);
        assert_eq!(c.history[0].id, 1000, "newest first");
        assert_eq!(c.history[0].status, CheckpointStatus::InProgress);
        assert_eq!(c.counts.triggered, CHECKPOINT_HISTORY as u64 + 11);
        assert_eq!(c.counts.completed, 30);
        assert_eq!(c.counts.failed, 30);
        assert_eq!(c.counts.in_progress, 1);
        let last = c.latest_completed.as_ref().unwrap();
        assert_eq!((last.id, last.size_bytes), (60, Some(6000)));
        assert!(last.duration_ms.is_some());
        assert_eq!(c.duration_seconds.count(), 30);
        assert_eq!(c.size_bytes.count(), 30);
        assert_eq!(
            c.size_bytes.sum,
            (1..=30).map(|i| 200.0 * i as f64).sum::<f64>()
        );
        let failed = c.latest_failed.as_ref().unwrap();
        assert_eq!(failed.failure.as_deref(), Some("expired"));
        r.ended::<()>(&Err(JobError::Cancelled));
        let s = r.observer().snapshot();
        assert_eq!(s.state, JobState::Canceled);
        assert_eq!(s.checkpoints.counts.in_progress, 0);
        assert!(s.end_time_ms.is_some());
    }

    #[test]
    fn failures_are_recorded_once_and_bounded() {
        let r = recorder();
        for i in 0..(EXCEPTION_HISTORY + 5) {
            r.failure(&JobError::Internal(format!("boom {i}")));
            r.restarting(i as u32 + 1, true);
            assert_eq!(r.observer().state(), JobState::Restarting);
            r.attempt_running();
        }
        let last = JobError::Internal(format!("boom {}", EXCEPTION_HISTORY + 4));
        r.ended::<()>(&Err(JobError::RestartsExhausted {
            attempts: 3,
            last: Box::new(last),
        }));
        let s = r.observer().snapshot();
        assert_eq!(s.state, JobState::Failed);
        assert_eq!(s.exceptions.len(), EXCEPTION_HISTORY);
        assert_eq!(s.exceptions_total, EXCEPTION_HISTORY as u64 + 5);
        assert!(
            s.exceptions[0].message.ends_with("boom 54"),
            "{:?}",
            s.exceptions[0]
        );
        assert_eq!(s.restarts, EXCEPTION_HISTORY as u32 + 5);
    }
}
