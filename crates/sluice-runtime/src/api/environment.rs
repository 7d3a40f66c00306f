//! [`StreamEnvironment`]: where a job is built, configured and executed.

use crate::api::source::{Generator, GeneratorReader, IterReader};
use crate::api::stream::DataStream;
use crate::error::JobError;
use crate::graph::erased::{TypedOutput, TypedSource};
use crate::graph::{NodeKind, StreamGraph};
use crate::job::deploy::deploy;
use crate::job::master::run_tasks;
use crate::job::plan::plan;
use crate::job::{JobConfig, JobHandle, JobResult};
use crate::operator::OperatorContext;
use crate::task::input::SourceReader;
use sluice_core::Data;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

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
}

impl StreamEnvironment {
    /// A new environment with the default [`JobConfig`].
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
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

    /// A bounded source over the items of `iter`, split into contiguous shares across subtasks.
    pub fn from_iter<T: Data + Sync, I: IntoIterator<Item = T>>(&self, iter: I) -> DataStream<T> {
        let data: Arc<Vec<T>> = Arc::new(iter.into_iter().collect());
        self.add_source("Source: Collection", move |ctx| {
            Box::new(IterReader::new(data.clone(), ctx))
        })
    }

    /// A source of records generated from their index; see [`Generator`].
    pub fn from_generator<T, F>(&self, generator: Generator<F>) -> DataStream<T>
    where
        T: Data,
        F: Fn(u64) -> T + Clone + Send + Sync + 'static,
    {
        self.add_source("Source: Generator", move |ctx| {
            Box::new(GeneratorReader::new(&generator, ctx))
        })
    }

    pub(crate) fn add_source<T: Data>(
        &self,
        name: &str,
        make: impl Fn(&OperatorContext) -> Box<dyn SourceReader<T>> + Send + Sync + 'static,
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
        let (graph, config) = {
            let mut inner = self.lock();
            (std::mem::take(&mut inner.graph), inner.config.clone())
        };
        let plan = plan(&graph, &config)?;
        let (tasks, metrics) = deploy(&graph, &plan, &config, 0)?;
        let metrics = Arc::new(metrics);
        let cancel = CancellationToken::new();
        let name = job_name.to_string();
        tracing::info!(job = %name, tasks = tasks.len(), "submitting job");
        let started = Instant::now();
        let join = {
            let (name, cancel, metrics) = (name.clone(), cancel.clone(), metrics.clone());
            runtime.spawn(async move {
                let result = run_tasks(tasks, cancel).await;
                let duration = started.elapsed();
                tracing::info!(job = %name, ?duration, ok = result.is_ok(), "job ended");
                result.map(|()| JobResult {
                    job_name: name,
                    duration,
                    metrics: metrics.snapshot(),
                })
            })
        };
        Ok(JobHandle::new(name, join, cancel, metrics))
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
