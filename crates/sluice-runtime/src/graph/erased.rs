//! Type-erased factories: what a graph node can build once the job is planned.
//!
//! Each factory is created by the DataStream API while the record types are known and hides them
//! behind `Box<dyn Any>` ([`AnyBox`]). Downcasts happen once per subtask at deployment, never on
//! the record path; a failed downcast is a runtime defect and is reported as such.

use crate::checkpoint::CheckpointSettings;
use crate::error::JobError;
use crate::exchange::gate::{GateChannel, InputGate};
use crate::exchange::partitioner::Partitioner;
use crate::exchange::remote::{self, OpenReceiver, OpenSender, Pump};
use crate::exchange::writer::{
    BroadcastRoute, CustomRoute, ForwardRoute, HashRoute, NetworkWriter, RebalanceRoute,
};
use crate::exchange::{ChannelReceiver, ChannelSender, channel};
use crate::graph::Partitioning;
use crate::operator::SourceHead;
use crate::operator::{Operator, OperatorContext};
use crate::state::OperatorState;
use crate::task::chain::{ChainStage, NullStage, OperatorStage, TeeStage, failure};
use crate::task::control::TaskMailbox;
use crate::task::input::{SourceHeadInput, SourceInput, SourceReader, TaskInput};
use crate::task::runner::Task;
use crate::task::thread::{Started, on_a_thread_of_its_own};
use sluice_core::{Data, Either, UserError};
use std::any::Any;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

/// A typed value behind `dyn Any`.
pub(crate) type AnyBox = Box<dyn Any + Send>;

/// A typed chain stage, erased.
type Stage<T> = Box<dyn ChainStage<T>>;

pub(crate) fn downcast<T: 'static>(b: AnyBox, what: &str) -> Result<T, JobError> {
    b.downcast::<T>()
        .map(|b| *b)
        .map_err(|_| JobError::Internal(format!("type mismatch while wiring {what}")))
}

/// A task ready to run.
pub(crate) trait RunnableTask: Send {
    /// Starts the task: a task whose chain calls a keyed store on a thread of its own
    /// ([`crate::task::thread`]), any other on the workers that poll its future.
    fn run(self: Box<Self>) -> Started;
}

impl<T: Send + 'static> RunnableTask for Task<T> {
    fn run(self: Box<Self>) -> Started {
        if self.calls_a_store() {
            on_a_thread_of_its_own(Box::pin((*self).run()))
        } else {
            Started::on_the_workers(Box::pin((*self).run()))
        }
    }
}

/// Everything a task needs besides its input and its chain.
pub(crate) struct TaskParts {
    pub(crate) metrics: Vec<Arc<crate::metrics::OperatorMetrics>>,
    pub(crate) description: String,
    pub(crate) batch_size: usize,
    pub(crate) mailbox: TaskMailbox,
    /// The chain's operators call a keyed store, whose calls may wait on disk: the task runs
    /// its batches, watermarks and checkpoints off the runtime's workers ([`crate::task`]).
    pub(crate) store_calls: bool,
}

/// Builds the reader of a source node, per subtask.
pub(crate) trait SourceFactory: Send + Sync {
    fn build_task(
        &self,
        ctx: OperatorContext,
        next: AnyBox,
        parts: TaskParts,
        restored: Option<OperatorState>,
    ) -> Result<Box<dyn RunnableTask>, JobError>;

    /// Whether the source's state may be dealt out at another parallelism (split sources).
    fn rescalable(&self) -> bool {
        false
    }

    /// Checks the source's configuration at submit time.
    fn validate(&self) -> Result<(), UserError> {
        Ok(())
    }
}

/// The task of a source subtask: its input and the chain behind it.
fn source_task<T: Data>(
    input: Box<dyn TaskInput<T>>,
    next: AnyBox,
    parts: TaskParts,
) -> Result<Box<dyn RunnableTask>, JobError> {
    let chain = downcast::<Stage<T>>(next, "a source to its chain")?;
    Ok(Box::new(
        Task::new(input, chain, parts.metrics, parts.mailbox).with_store_calls(parts.store_calls),
    ))
}

/// Makes a fresh source reader for one subtask.
pub(crate) struct TypedSource<T, F> {
    pub(crate) make: F,
    pub(crate) _t: PhantomData<fn() -> T>,
}

impl<T, F> SourceFactory for TypedSource<T, F>
where
    T: Data,
    F: Fn(&OperatorContext, Option<OperatorState>) -> Result<Box<dyn SourceReader<T>>, UserError>
        + Send
        + Sync,
{
    fn build_task(
        &self,
        ctx: OperatorContext,
        next: AnyBox,
        parts: TaskParts,
        restored: Option<OperatorState>,
    ) -> Result<Box<dyn RunnableTask>, JobError> {
        let reader = (self.make)(&ctx, restored).map_err(|e| {
            failure(&ctx, format!("creating the source reader failed: {e}")).into_job_error()
        })?;
        let input = SourceInput::new(reader, ctx, parts.batch_size);
        source_task(Box::new(input), next, parts)
    }

    /// The built-in collection and generator sources store one state entry per split.
    fn rescalable(&self) -> bool {
        true
    }
}

/// Makes a fresh [`SourceHead`] for one subtask; its state is rescalable.
pub(crate) struct TypedSourceHead<T, F, V> {
    pub(crate) make: F,
    pub(crate) validate: V,
    pub(crate) _t: PhantomData<fn() -> T>,
}

impl<T, F, V> SourceFactory for TypedSourceHead<T, F, V>
where
    T: Data,
    F: Fn(&OperatorContext, Option<OperatorState>) -> Result<Box<dyn SourceHead<T>>, UserError>
        + Send
        + Sync,
    V: Fn() -> Result<(), UserError> + Send + Sync,
{
    fn build_task(
        &self,
        ctx: OperatorContext,
        next: AnyBox,
        parts: TaskParts,
        restored: Option<OperatorState>,
    ) -> Result<Box<dyn RunnableTask>, JobError> {
        let head = (self.make)(&ctx, restored).map_err(|e| {
            failure(&ctx, format!("creating the source failed: {e}")).into_job_error()
        })?;
        let input = SourceHeadInput::new(head, ctx, parts.batch_size);
        source_task(Box::new(input), next, parts)
    }

    fn rescalable(&self) -> bool {
        true
    }

    fn validate(&self) -> Result<(), UserError> {
        (self.validate)()
    }
}

/// Builds the stage of an operator node, and the task when the node heads a chain.
pub(crate) trait OperatorFactory: Send + Sync {
    fn build_stage(
        &self,
        ctx: OperatorContext,
        next: AnyBox,
        restored: Option<OperatorState>,
    ) -> Result<AnyBox, JobError>;
    /// The task headed by this operator: its input gate over `receivers` (each with the
    /// position of its edge among the operator's inputs) and its chain `head`.
    fn build_task(
        &self,
        receivers: Vec<(usize, AnyBox)>,
        head: AnyBox,
        parts: TaskParts,
    ) -> Result<Box<dyn RunnableTask>, JobError>;
    /// Checks the operator's configuration at submit time.
    fn validate(&self, checkpoints: Option<&CheckpointSettings>) -> Result<(), UserError> {
        let _ = checkpoints;
        Ok(())
    }
}

/// An [`Operator`] prototype, cloned once per subtask.
pub(crate) struct TypedOperator<In, Op> {
    op: Mutex<Op>,
    _in: PhantomData<fn(In)>,
}

impl<In, Op> TypedOperator<In, Op> {
    pub(crate) fn new(op: Op) -> Self {
        TypedOperator {
            op: Mutex::new(op),
            _in: PhantomData,
        }
    }
}

/// Clones a prototype kept behind a mutex (so that it need not be `Sync`).
/// The ship strategy a custom partitioner names.
fn ship_strategy_of<T, P: Partitioner<T>>(m: &Mutex<P>) -> &'static str {
    sluice_core::sync::lock(m).ship_strategy()
}

fn clone_locked<X: Clone>(m: &Mutex<X>) -> X {
    sluice_core::sync::lock(m).clone()
}

impl<In: Data, Op: Operator<In> + Clone> OperatorFactory for TypedOperator<In, Op> {
    fn validate(&self, checkpoints: Option<&CheckpointSettings>) -> Result<(), UserError> {
        sluice_core::sync::lock(&self.op).validate(checkpoints)
    }

    fn build_stage(
        &self,
        ctx: OperatorContext,
        next: AnyBox,
        restored: Option<OperatorState>,
    ) -> Result<AnyBox, JobError> {
        let next = downcast::<Stage<Op::Out>>(next, "an operator to its successor")?;
        let op = clone_locked(&self.op);
        let stage: Stage<In> = Box::new(OperatorStage::new(op, ctx, next, restored));
        Ok(Box::new(stage))
    }

    fn build_task(
        &self,
        receivers: Vec<(usize, AnyBox)>,
        head: AnyBox,
        parts: TaskParts,
    ) -> Result<Box<dyn RunnableTask>, JobError> {
        let head = downcast::<Stage<In>>(head, "a task to its first operator")?;
        let receivers = receivers
            .into_iter()
            .map(|(_, r)| downcast::<ChannelReceiver<In>>(r, "an input channel"))
            .collect::<Result<Vec<_>, _>>()?;
        let gate = InputGate::new(receivers, parts.description);
        Ok(Box::new(
            Task::new(Box::new(gate), head, parts.metrics, parts.mailbox)
                .with_store_calls(parts.store_calls),
        ))
    }
}

/// A two-input operator: an [`Operator`] over [`Either`] whose first input's channels carry
/// `A` and second input's carry `B`; its task's gate reads both ([`GateChannel::converted`]).
pub(crate) struct TwoInputOperator<A, B, Op> {
    inner: TypedOperator<Either<A, B>, Op>,
}

impl<A, B, Op> TwoInputOperator<A, B, Op> {
    pub(crate) fn new(op: Op) -> Self {
        TwoInputOperator {
            inner: TypedOperator::new(op),
        }
    }
}

impl<A: Data, B: Data, Op: Operator<Either<A, B>> + Clone> OperatorFactory
    for TwoInputOperator<A, B, Op>
{
    fn validate(&self, checkpoints: Option<&CheckpointSettings>) -> Result<(), UserError> {
        self.inner.validate(checkpoints)
    }

    fn build_stage(
        &self,
        ctx: OperatorContext,
        next: AnyBox,
        restored: Option<OperatorState>,
    ) -> Result<AnyBox, JobError> {
        self.inner.build_stage(ctx, next, restored)
    }

    fn build_task(
        &self,
        receivers: Vec<(usize, AnyBox)>,
        head: AnyBox,
        parts: TaskParts,
    ) -> Result<Box<dyn RunnableTask>, JobError> {
        let head = downcast::<Stage<Either<A, B>>>(head, "a task to its first operator")?;
        let channels = receivers
            .into_iter()
            .map(|(input, r)| match input {
                0 => downcast::<ChannelReceiver<A>>(r, "a first input's channel")
                    .map(|rx| GateChannel::converted(rx, Either::Left)),
                1 => downcast::<ChannelReceiver<B>>(r, "a second input's channel")
                    .map(|rx| GateChannel::converted(rx, Either::Right)),
                n => Err(JobError::Internal(format!(
                    "a two-input operator got a channel of input {n}"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let gate = InputGate::from_channels(channels, parts.description);
        Ok(Box::new(
            Task::new(Box::new(gate), head, parts.metrics, parts.mailbox)
                .with_store_calls(parts.store_calls),
        ))
    }
}

/// Typed helpers for a node's output type.
pub(crate) trait OutputOps: Send + Sync {
    /// One bounded channel: (sender, receiver).
    fn channel(&self, capacity: usize) -> (AnyBox, AnyBox);
    fn null_stage(&self) -> AnyBox;
    fn tee_stage(&self, nexts: Vec<AnyBox>) -> Result<AnyBox, JobError>;
    /// Carries what a channel's receiver `rx` gets to another process
    /// ([`remote::send_pump`]).
    fn send_pump(&self, rx: AnyBox, out: OpenSender, what: String) -> Result<Pump, JobError>;
    /// Carries what arrives from another process into a channel's sender `tx`
    /// ([`remote::receive_pump`]).
    fn receive_pump(&self, input: OpenReceiver, tx: AnyBox, what: String)
    -> Result<Pump, JobError>;
}

pub(crate) struct TypedOutput<T>(pub(crate) PhantomData<fn() -> T>);

impl<T: Data> OutputOps for TypedOutput<T> {
    fn channel(&self, capacity: usize) -> (AnyBox, AnyBox) {
        let (tx, rx) = channel::<T>(capacity);
        (Box::new(tx), Box::new(rx))
    }
    fn null_stage(&self) -> AnyBox {
        let s: Stage<T> = Box::new(NullStage);
        Box::new(s)
    }
    fn tee_stage(&self, nexts: Vec<AnyBox>) -> Result<AnyBox, JobError> {
        let nexts = nexts
            .into_iter()
            .map(|n| downcast::<Stage<T>>(n, "a fan-out"))
            .collect::<Result<Vec<_>, _>>()?;
        let s: Stage<T> = Box::new(TeeStage::new(nexts));
        Ok(Box::new(s))
    }
    fn send_pump(&self, rx: AnyBox, out: OpenSender, what: String) -> Result<Pump, JobError> {
        let rx = downcast::<ChannelReceiver<T>>(rx, "an outgoing remote channel")?;
        Ok(remote::send_pump(rx, out, what))
    }
    fn receive_pump(
        &self,
        input: OpenReceiver,
        tx: AnyBox,
        what: String,
    ) -> Result<Pump, JobError> {
        let tx = downcast::<ChannelSender<T>>(tx, "an incoming remote channel")?;
        Ok(remote::receive_pump(input, tx, what))
    }
}

/// Builds the network writer of one edge for one producer subtask.
pub(crate) trait WriterFactory: Send + Sync {
    fn build_writer(
        &self,
        senders: Vec<AnyBox>,
        producer: OperatorContext,
        batch_size: usize,
        max_parallelism: usize,
    ) -> Result<AnyBox, JobError>;

    /// How the edge is shown (Flink's ship strategy), when the writer knows better than its
    /// [`Partitioning`]: a custom partitioner's own name.
    fn ship_strategy(&self) -> Option<&'static str> {
        None
    }
}

/// The writer factory for the built-in partitionings that need no user code.
pub(crate) struct BuiltinWriter<T> {
    pub(crate) partitioning: Partitioning,
    pub(crate) _t: PhantomData<fn() -> T>,
}

impl<T> BuiltinWriter<T> {
    pub(crate) fn new(partitioning: Partitioning) -> Self {
        BuiltinWriter {
            partitioning,
            _t: PhantomData,
        }
    }
}

fn senders<T: Data>(senders: Vec<AnyBox>) -> Result<Vec<ChannelSender<T>>, JobError> {
    senders
        .into_iter()
        .map(|s| downcast::<ChannelSender<T>>(s, "an output channel"))
        .collect()
}

impl<T: Data> WriterFactory for BuiltinWriter<T> {
    fn build_writer(
        &self,
        tx: Vec<AnyBox>,
        producer: OperatorContext,
        batch_size: usize,
        _max_parallelism: usize,
    ) -> Result<AnyBox, JobError> {
        let tx = senders::<T>(tx)?;
        let n = tx.len();
        let me = producer.subtask_index();
        // A pointwise edge (forward, or the default between equal parallelisms) gets one
        // channel per producer subtask, to its own consumer subtask (see deployment); the
        // default edge into a single consumer has one channel too.
        let forward = matches!(self.partitioning, Partitioning::Forward)
            || (matches!(self.partitioning, Partitioning::Default) && n == 1);
        let stage: Stage<T> = if forward {
            Box::new(NetworkWriter::new(
                ForwardRoute { target: 0 },
                tx,
                batch_size,
                producer,
            ))
        } else if matches!(self.partitioning, Partitioning::Broadcast) {
            Box::new(NetworkWriter::new(BroadcastRoute, tx, batch_size, producer))
        } else {
            let next = me % n.max(1);
            Box::new(NetworkWriter::new(
                RebalanceRoute { next },
                tx,
                batch_size,
                producer,
            ))
        };
        Ok(Box::new(stage))
    }
}

/// The writer factory for `key_by`.
pub(crate) struct HashWriter<T, K, F> {
    key_fn: Mutex<F>,
    _t: PhantomData<fn(&T) -> K>,
}

impl<T, K, F> HashWriter<T, K, F> {
    pub(crate) fn new(key_fn: F) -> Self {
        HashWriter {
            key_fn: Mutex::new(key_fn),
            _t: PhantomData,
        }
    }
}

impl<T, K, F> WriterFactory for HashWriter<T, K, F>
where
    T: Data,
    K: Hash + 'static,
    F: Fn(&T) -> K + Clone + Send + 'static,
{
    fn build_writer(
        &self,
        tx: Vec<AnyBox>,
        producer: OperatorContext,
        batch_size: usize,
        max_parallelism: usize,
    ) -> Result<AnyBox, JobError> {
        let tx = senders::<T>(tx)?;
        let route = HashRoute {
            key_fn: clone_locked(&self.key_fn),
            max_parallelism,
        };
        let stage: Stage<T> = Box::new(NetworkWriter::new(route, tx, batch_size, producer));
        Ok(Box::new(stage))
    }
}

/// The writer factory for `partition_custom`.
pub(crate) struct CustomWriter<T, P> {
    partitioner: Mutex<P>,
    _t: PhantomData<fn(&T)>,
}

impl<T, P> CustomWriter<T, P> {
    pub(crate) fn new(partitioner: P) -> Self {
        CustomWriter {
            partitioner: Mutex::new(partitioner),
            _t: PhantomData,
        }
    }
}

impl<T: Data, P: Partitioner<T> + Clone> WriterFactory for CustomWriter<T, P> {
    fn build_writer(
        &self,
        tx: Vec<AnyBox>,
        producer: OperatorContext,
        batch_size: usize,
        _max_parallelism: usize,
    ) -> Result<AnyBox, JobError> {
        let tx = senders::<T>(tx)?;
        let mut partitioner = clone_locked(&self.partitioner);
        partitioner.open(&producer, tx.len());
        let route = CustomRoute(partitioner);
        let stage: Stage<T> = Box::new(NetworkWriter::new(route, tx, batch_size, producer));
        Ok(Box::new(stage))
    }
    fn ship_strategy(&self) -> Option<&'static str> {
        Some(ship_strategy_of::<T, P>(&self.partitioner))
    }
}
