//! [`StreamEnvironment`]: where a job is built, configured and executed.

use crate::api::source::{Generator, GeneratorReader, IterReader};
use crate::api::stream::DataStream;
use crate::checkpoint::CheckpointSettings;
use crate::error::JobError;
use crate::failover::{ExponentialBackoff, RestartStrategy};
use crate::graph::erased::{TypedOutput, TypedSource};
use crate::graph::{NodeKind, StreamGraph};
use crate::job::checkpointing::{CheckpointRun, StoragePersistence, default_dir, fingerprint};
use crate::job::master::{JobSpec, SharedMetrics, run_job};
use crate::job::plan::plan;
use crate::job::{JobConfig, JobHandle, JobResult};
use crate::operator::OperatorContext;
use crate::state::OperatorState;
use crate::storage::{CheckpointStorage, LocalCheckpointStorage, validate_directory};
use crate::task::input::SourceReader;
use sluice_core::{Data, UserError};
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Flink's default with checkpointing (since 1.19): exponential backoff from 1 s to 1 min.
fn default_restart_with_checkpoints() -> Result<RestartStrategy, JobError> {
    RestartStrategy::exponential_backoff(ExponentialBackoff::new(
        Duration::from_secs(1),
        Duration::from_secs(60),
        1.5,
    ))
    .map_err(|e| JobError::Internal(format!("the default restart strategy is invalid: {e}")))
}

/// The entry point of a job: create streams from sources, transform them, then
/// [`execute`](StreamEnvironment::execute).
///
/// The environment is a cheap handle; streams keep a clone. Executing takes the graph built so
/// far, so the same environment can build and run another job afterwards.
///
/// ```
/// use sluice_runtime::prelude::*;
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// let out = env.from_iter(1..=4u64).map(|x| x * x).filter(|x| x % 2 == 0).collect();
/// env.execute_blocking("squares").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec![4, 16]);
/// ```
#[derive(Clone, Default)]
pub struct StreamEnvironment {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    config: JobConfig,
    graph: StreamGraph,
    checkpoints: Option<CheckpointSettings>,
    restart: Option<RestartStrategy>,
    storage_dir: Option<PathBuf>,
    restore_from: Option<PathBuf>,
}

impl StreamEnvironment {
    /// A new environment with the default [`JobConfig`].
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        sluice_core::sync::lock(&self.inner)
    }

    pub(crate) fn with_graph<R>(&self, f: impl FnOnce(&mut StreamGraph) -> R) -> R {
        f(&mut self.lock().graph)
    }

    /// The default parallelism of operators that do not set their own.
    pub fn set_parallelism(&self, parallelism: usize) -> &Self {
        self.lock().config.parallelism = parallelism;
        self
    }

    /// The number of key groups (upper bound of any parallelism). Default 128.
    pub fn set_max_parallelism(&self, max_parallelism: usize) -> &Self {
        self.lock().config.max_parallelism = max_parallelism;
        self
    }

    /// Records per batch. Default 1024.
    pub fn set_batch_size(&self, batch_size: usize) -> &Self {
        self.lock().config.batch_size = batch_size;
        self
    }

    /// Batches one channel buffers before its producer waits. Default 4.
    pub fn set_channel_capacity(&self, batches: usize) -> &Self {
        self.lock().config.channel_capacity = batches;
        self
    }

    /// The current configuration.
    pub fn config(&self) -> JobConfig {
        self.lock().config.clone()
    }

    /// Takes a checkpoint every `interval`, with default settings otherwise (see
    /// [`CheckpointSettings::every`]); refine them with
    /// [`set_checkpoint_settings`](Self::set_checkpoint_settings).
    ///
    /// With checkpointing, a failed job restarts from its last completed checkpoint according to
    /// its restart strategy (by default exponential backoff from 1 s to 1 min, as Flink), and a
    /// bounded job ends with a final checkpoint, so that sinks commit everything exactly once.
    pub fn enable_checkpointing(&self, interval: Duration) -> &Self {
        self.lock().checkpoints = Some(CheckpointSettings::every(interval));
        self
    }

    /// Sets every checkpoint setting at once (and enables checkpointing).
    pub fn set_checkpoint_settings(&self, settings: CheckpointSettings) -> &Self {
        self.lock().checkpoints = Some(settings);
        self
    }

    /// Where checkpoints are written. Default: `./sluice-checkpoints/<job name>`.
    pub fn set_checkpoint_storage(&self, dir: impl Into<PathBuf>) -> &Self {
        self.lock().storage_dir = Some(dir.into());
        self
    }

    /// Starts the next job from a retained checkpoint: either a `chk-N` directory (exactly that
    /// checkpoint) or a checkpoint storage directory (its newest valid checkpoint). The job graph
    /// must be the same as the one checkpointed; operators after the sources may change their
    /// parallelism (keyed state moves with its key groups).
    pub fn restore_from(&self, path: impl Into<PathBuf>) -> &Self {
        self.lock().restore_from = Some(path.into());
        self
    }

    /// What a failure leads to. Default: [`RestartStrategy::none`] without checkpointing,
    /// exponential backoff with it.
    pub fn set_restart_strategy(&self, strategy: RestartStrategy) -> &Self {
        self.lock().restart = Some(strategy);
        self
    }

    /// A bounded source over the items of `iter`, split into contiguous shares across subtasks.
    pub fn from_iter<T: Data + Sync, I: IntoIterator<Item = T>>(&self, iter: I) -> DataStream<T> {
        let data: Arc<Vec<T>> = Arc::new(iter.into_iter().collect());
        self.add_source("Source: Collection", move |ctx, restored| {
            Ok(Box::new(IterReader::new(data.clone(), ctx, restored)?))
        })
    }

    /// A source of records generated from their index; see [`Generator`].
    pub fn from_generator<T, F>(&self, generator: Generator<F>) -> DataStream<T>
    where
        T: Data,
        F: Fn(u64) -> T + Clone + Send + Sync + 'static,
    {
        self.add_source("Source: Generator", move |ctx, restored| {
            Ok(Box::new(GeneratorReader::new(&generator, ctx, restored)?))
        })
    }

    pub(crate) fn add_source<T: Data>(
        &self,
        name: &str,
        make: impl Fn(
            &OperatorContext,
            Option<OperatorState>,
        ) -> Result<Box<dyn SourceReader<T>>, UserError>
        + Send
        + Sync
        + 'static,
    ) -> DataStream<T> {
        let factory = Arc::new(TypedSource {
            make,
            _t: PhantomData,
        });
        let id = self.with_graph(|g| {
            g.add_node(
                name.to_string(),
                NodeKind::Source(factory),
                Arc::new(TypedOutput::<T>(PhantomData)),
                false,
            )
        });
        DataStream::new(self.clone(), id)
    }

    /// Validates and starts the job built so far, returning at once with a [`JobHandle`].
    ///
    /// Must be called inside a tokio runtime (the tasks are spawned on it). Invalid configuration
    /// is reported here, before anything runs.
    pub fn submit(&self, job_name: &str) -> Result<JobHandle, JobError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            JobError::InvalidJob(
                "submit/execute must be called inside a tokio runtime; use execute_blocking from \
                 synchronous code"
                    .into(),
            )
        })?;
        // Validate against the graph in place, so that a refused job can be fixed and submitted
        // again; take the graph only once it is accepted.
        let mut inner = self.lock();
        let plan = plan(&inner.graph, &inner.config)?;
        let checkpoint_dir = match &inner.checkpoints {
            Some(c) => {
                c.validate().map_err(JobError::InvalidJob)?;
                let dir = inner
                    .storage_dir
                    .clone()
                    .unwrap_or_else(|| default_dir(job_name));
                validate_directory(&dir).map_err(|e| {
                    JobError::InvalidJob(format!("checkpoint storage {}: {e}", dir.display()))
                })?;
                Some(dir)
            }
            None => None,
        };
        let (graph, config, checkpoints, restart, restore_path) = (
            std::mem::take(&mut inner.graph),
            inner.config.clone(),
            inner.checkpoints.clone(),
            inner.restart,
            inner.restore_from.take(),
        );
        drop(inner);
        let restart = match (restart, &checkpoints) {
            (Some(r), _) => r,
            (None, None) => RestartStrategy::none(),
            (None, Some(_)) => default_restart_with_checkpoints()?,
        };
        let checkpointing = match (checkpoints, checkpoint_dir) {
            (Some(settings), Some(dir)) => {
                let retained = NonZeroUsize::new(settings.retained).ok_or_else(|| {
                    JobError::InvalidJob("at least one checkpoint must be retained".into())
                })?;
                let storage: Arc<dyn CheckpointStorage> =
                    Arc::new(LocalCheckpointStorage::new(dir, retained));
                let persistence = Arc::new(StoragePersistence {
                    storage: storage.clone(),
                    fingerprint: fingerprint(&graph),
                    max_parallelism: config.max_parallelism,
                });
                Some(CheckpointRun {
                    settings,
                    persistence,
                    storage,
                })
            }
            _ => None,
        };
        let spec = JobSpec {
            graph,
            plan,
            config,
            checkpointing,
            restart,
            restore: None,
            restore_path,
        };
        let metrics = Arc::new(SharedMetrics::default());
        let cancel = CancellationToken::new();
        let (trigger_tx, trigger_rx) = mpsc::channel(1);
        let name = job_name.to_string();
        tracing::info!(job = %name, "submitting job");
        let started = Instant::now();
        let join = {
            let (name, cancel, metrics) = (name.clone(), cancel.clone(), metrics.clone());
            runtime.spawn(async move {
                let result = run_job(spec, cancel, trigger_rx, metrics.clone()).await;
                let duration = started.elapsed();
                tracing::info!(job = %name, ?duration, ok = result.is_ok(), "job ended");
                result.map(|summary| JobResult {
                    job_name: name,
                    duration,
                    metrics: metrics.current().snapshot(),
                    restarts: summary.restarts,
                    completed_checkpoints: summary.completed_checkpoints,
                    last_checkpoint: summary.last_checkpoint,
                    restored_from: summary.restored_from,
                })
            })
        };
        Ok(JobHandle::new(name, join, cancel, metrics, trigger_tx))
    }

    /// Runs the job built so far to completion.
    pub async fn execute(&self, job_name: &str) -> Result<JobResult, JobError> {
        self.submit(job_name)?.await
    }

    /// Runs the job built so far to completion on a new multi-threaded tokio runtime, for plain
    /// synchronous `main` functions. Fails if called from inside a tokio runtime.
    pub fn execute_blocking(&self, job_name: &str) -> Result<JobResult, JobError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(JobError::InvalidJob(
                "execute_blocking was called inside a tokio runtime; use execute(..).await".into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("sluice-worker")
            .build()
            .map_err(|e| JobError::Internal(format!("cannot start the tokio runtime: {e}")))?;
        runtime.block_on(self.execute(job_name))
    }
}
