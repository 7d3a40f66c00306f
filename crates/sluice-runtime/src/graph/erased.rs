//! Type-erased factories: what a graph node can build once the job is planned.
//!
//! Each factory is created by the DataStream API while the record types are known and hides them
//! behind `Box<dyn Any>` ([`AnyBox`]). Downcasts happen once per subtask at deployment, never on
//! the record path; a failed downcast is a runtime defect and is reported as such.

use crate::cluster::wire::{ElementIn, ElementOut};
use crate::cluster::{OpenReceiver, OpenSender, TransportError};
use crate::error::{JobError, TaskError};
use crate::exchange::partitioner::Partitioner;
use crate::exchange::writer::{
    BroadcastRoute, CustomRoute, ForwardRoute, HashRoute, NetworkWriter, RebalanceRoute,
};
use crate::exchange::{ChannelReceiver, ChannelSender, channel, gate::InputGate};
use crate::graph::Partitioning;
use crate::operator::SourceHead;
use crate::operator::{Operator, OperatorContext};
use crate::state::OperatorState;
use crate::task::chain::{ChainStage, NullStage, OperatorStage, TeeStage, failure};
use crate::task::control::TaskMailbox;
use crate::task::input::{SourceHeadInput, SourceInput, SourceReader, TaskInput};
use crate::task::runner::Task;
use futures::future::BoxFuture;
use sluice_core::StreamElement;
use sluice_core::{Data, UserError};
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
    fn run(self: Box<Self>) -> BoxFuture<'static, Result<(), TaskError>>;
}

impl<T: Send + 'static> RunnableTask for Task<T> {
    fn run(self: Box<Self>) -> BoxFuture<'static, Result<(), TaskError>> {
        Box::pin((*self).run())
    }
}

/// Everything a task needs besides its input and its chain.
pub(crate) struct TaskParts {
    pub(crate) metrics: Vec<Arc<crate::metrics::OperatorMetrics>>,
    pub(crate) description: String,
    pub(crate) batch_size: usize,
    pub(crate) mailbox: TaskMailbox,
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
    Ok(Box::new(Task::new(
        input,
        chain,
        parts.metrics,
        parts.mailbox,
    )))
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
    fn build_task(
        &self,
        receivers: Vec<AnyBox>,
        head: AnyBox,
        parts: TaskParts,
    ) -> Result<Box<dyn RunnableTask>, JobError>;
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
        receivers: Vec<AnyBox>,
        head: AnyBox,
        parts: TaskParts,
    ) -> Result<Box<dyn RunnableTask>, JobError> {
        let head = downcast::<Stage<In>>(head, "a task to its first operator")?;
        let receivers = receivers
            .into_iter()
            .map(|r| downcast::<ChannelReceiver<In>>(r, "an input channel"))
            .collect::<Result<Vec<_>, _>>()?;
        let gate = InputGate::new(receivers, parts.description);
        Ok(Box::new(Task::new(
            Box::new(gate),
            head,
            parts.metrics,
            parts.mailbox,
        )))
    }
}

/// Typed helpers for a node's output type.
pub(crate) trait OutputOps: Send + Sync {
    /// One bounded channel: (sender, receiver).
    fn channel(&self, capacity: usize) -> (AnyBox, AnyBox);
    fn null_stage(&self) -> AnyBox;
    fn tee_stage(&self, nexts: Vec<AnyBox>) -> Result<AnyBox, JobError>;
    /// Carries what a channel's receiver `rx` gets to another process: encodes each element
    /// and sends it on the data-plane channel `out` opens, until the end of input.
    fn send_pump(&self, rx: AnyBox, out: OpenSender, what: String) -> Result<Pump, JobError>;
    /// Carries what arrives on the data-plane channel `input` opens into a channel's sender
    /// `tx`, decoding each element, until the end of input.
    fn receive_pump(&self, input: OpenReceiver, tx: AnyBox, what: String)
    -> Result<Pump, JobError>;
}

/// How many bytes of encoded elements a send pump gathers into one data-plane frame at most
/// (plus the last element's), when several are waiting or credit is short. A receiver's
/// window of W buffers holds at most W such frames per channel.
const REMOTE_FRAME_BYTES: usize = 32 * 1024;

/// A future that moves one channel's elements across processes; it fails the task it serves.
pub(crate) type Pump = BoxFuture<'static, Result<(), TaskError>>;

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
        let mut rx = downcast::<ChannelReceiver<T>>(rx, "an outgoing remote channel")?;
        Ok(Box::pin(async move {
            let broken = |e: TransportError| TaskError::PeerGone(format!("{what}: {e}"));
            let mut out = out.await.map_err(broken)?;
            // Each frame is encoded into a buffer sized from the last one, so that the encoder
            // never grows (and copies) it on the way.
            let mut size_hint = 256;
            let encode = |element: &StreamElement<T>, buf: &mut Vec<u8>| {
                sluice_core::codec::encode_into(&ElementOut::of(element), buf).map_err(|e| {
                    TaskError::Internal(format!("{what}: cannot encode a record: {e}"))
                })?;
                Ok::<_, TaskError>(matches!(element, StreamElement::EndOfInput))
            };
            while let Some(element) = rx.recv().await {
                let mut buf = Vec::with_capacity(size_hint);
                let mut end = encode(&element, &mut buf)?;
                // Elements already waiting join the frame, in order, up to a size; and without
                // credit the frame keeps gathering what arrives until credit comes or it is
                // full: under backpressure frames grow (one credit and one trip through the
                // connection for many batches, and the producer keeps running while the
                // receiver catches up); with credit and nothing waiting, it goes at once.
                let mut ready = out.ready();
                while !end && buf.len() < REMOTE_FRAME_BYTES {
                    tokio::select! {
                        biased;
                        next = rx.recv() => match next {
                            Some(next) => end = encode(&next, &mut buf)?,
                            // The producer stopped without ending its input; see below.
                            None => return Ok(()),
                        },
                        r = &mut ready => {
                            r.map_err(broken)?;
                            break;
                        }
                    }
                }
                drop(ready);
                size_hint = size_hint.max(buf.len() + buf.len() / 8 + 64);
                out.send(buf).await.map_err(broken)?;
                if end {
                    return out.close().await.map_err(broken);
                }
            }
            // The producer stopped without ending its input (it failed or was cancelled): the
            // consumer learns it from the job master, not from this channel.
            Ok(())
        }))
    }
    fn receive_pump(
        &self,
        input: OpenReceiver,
        tx: AnyBox,
        what: String,
    ) -> Result<Pump, JobError> {
        let tx = downcast::<ChannelSender<T>>(tx, "an incoming remote channel")?;
        Ok(Box::pin(async move {
            let broken = |e: TransportError| TaskError::PeerGone(format!("{what}: {e}"));
            let mut input = input.await.map_err(broken)?;
            loop {
                let Some(bytes) = input.recv().await.map_err(broken)? else {
                    return Err(TaskError::PeerGone(format!(
                        "{what}: the channel closed before the end of input"
                    )));
                };
                // A frame holds one element or more, one encoding after another.
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    let (element, after) = sluice_core::codec::decode_first::<ElementIn<T>>(rest)
                        .map_err(|e| e.to_string())
                        .and_then(|(e, after)| Ok((e.into_element()?, after)))
                        .map_err(|e| {
                            TaskError::Internal(format!("{what}: undecodable element: {e}"))
                        })?;
                    rest = after;
                    let end = matches!(element, StreamElement::EndOfInput);
                    if tx.send(element).await.is_err() || end {
                        // The consumer is gone (it ended or was stopped), or nothing follows.
                        return Ok(());
                    }
                }
            }
        }))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ByteReceiver, ByteSender};
    use sluice_core::Watermark;
    use std::sync::{Arc, Mutex};

    /// Records the frames a send pump writes, and replays them to a receive pump.
    #[derive(Clone, Default)]
    struct Frames(Arc<Mutex<Vec<Vec<u8>>>>);

    impl ByteSender for Frames {
        fn send(&mut self, bytes: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
            self.0.lock().unwrap().push(bytes);
            Box::pin(async { Ok(()) })
        }
        fn close(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
            Box::pin(async { Ok(()) })
        }
    }

    impl ByteReceiver for Frames {
        fn recv(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>, TransportError>> {
            let mut frames = self.0.lock().unwrap();
            let next = (!frames.is_empty()).then(|| frames.remove(0));
            Box::pin(async move { Ok(next) })
        }
    }

    /// A sender with real credit: `ready` and `send` wait for a permit of `credit`, and
    /// `waiting` is told each time `ready` starts to wait.
    struct Gated {
        frames: Frames,
        credit: Arc<tokio::sync::Semaphore>,
        waiting: Arc<tokio::sync::Notify>,
        held: bool,
    }

    impl ByteSender for Gated {
        fn ready(&mut self) -> BoxFuture<'_, Result<(), TransportError>> {
            Box::pin(async move {
                if !self.held {
                    self.waiting.notify_one();
                    self.credit.acquire().await.unwrap().forget();
                    self.held = true;
                }
                Ok(())
            })
        }
        fn send(&mut self, bytes: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
            Box::pin(async move {
                self.ready().await?;
                self.held = false;
                self.frames.0.lock().unwrap().push(bytes);
                Ok(())
            })
        }
        fn close(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
            Box::pin(async { Ok(()) })
        }
    }

    fn elements() -> Vec<StreamElement<u64>> {
        vec![
            StreamElement::records(vec![1, 2, 3]),
            StreamElement::Watermark(Watermark::new(10)),
            StreamElement::records(vec![4]),
            StreamElement::EndOfInput,
        ]
    }

    /// A send pump's opening of a [`Gated`] sender into `frames`, its credit, and the
    /// notification of its waits.
    fn gated(
        frames: &Frames,
    ) -> (
        OpenSender,
        Arc<tokio::sync::Semaphore>,
        Arc<tokio::sync::Notify>,
    ) {
        let credit = Arc::new(tokio::sync::Semaphore::new(0));
        let waiting = Arc::new(tokio::sync::Notify::new());
        let sender: Box<dyn ByteSender> = Box::new(Gated {
            frames: frames.clone(),
            credit: credit.clone(),
            waiting: waiting.clone(),
            held: false,
        });
        (Box::pin(async move { Ok(sender) }), credit, waiting)
    }

    /// What a receive pump makes of `frames`.
    async fn replay(frames: &Frames) -> Vec<StreamElement<u64>> {
        // Room for every element: each takes at least one byte of a frame.
        let bytes: usize = frames.0.lock().unwrap().iter().map(Vec::len).sum();
        let (tx, mut rx) = channel::<u64>(bytes + 1);
        let receiver: Box<dyn ByteReceiver> = Box::new(frames.clone());
        let open: OpenReceiver = Box::pin(async move { Ok(receiver) });
        TypedOutput::<u64>(PhantomData)
            .receive_pump(open, Box::new(tx), "test".into())
            .unwrap()
            .await
            .unwrap();
        let mut got = Vec::new();
        while let Ok(e) = rx.try_recv() {
            got.push(e);
        }
        got
    }

    #[tokio::test]
    async fn waiting_elements_share_a_frame_and_arrive_in_order() {
        let ops = TypedOutput::<u64>(PhantomData);
        let (tx, rx) = channel::<u64>(8);
        for e in elements() {
            tx.send(e).await.unwrap();
        }
        let frames = Frames::default();
        let sender: Box<dyn ByteSender> = Box::new(frames.clone());
        let open: OpenSender = Box::pin(async move { Ok(sender) });
        ops.send_pump(Box::new(rx), open, "test".into())
            .unwrap()
            .await
            .unwrap();
        // All four were waiting when the pump woke: one frame carries them.
        assert_eq!(frames.0.lock().unwrap().len(), 1);
        assert_eq!(replay(&frames).await, elements());
    }

    #[tokio::test]
    async fn a_frame_waiting_for_credit_gathers_what_arrives_meanwhile() {
        let ops = TypedOutput::<u64>(PhantomData);
        let (tx, rx) = channel::<u64>(8);
        let frames = Frames::default();
        let (open, credit, waiting) = gated(&frames);
        let pump = tokio::spawn(ops.send_pump(Box::new(rx), open, "test".into()).unwrap());
        let mut sent = elements().into_iter();
        tx.send(sent.next().unwrap()).await.unwrap();
        // The pump holds the first batch and waits for credit; the rest arrives meanwhile.
        waiting.notified().await;
        for e in sent {
            tx.send(e).await.unwrap();
        }
        // Let the pump take them all (it runs whenever this test yields; a pump that does not
        // gather while it waits never will), then grant credit.
        for _ in 0..1_000 {
            if tx.capacity() == tx.max_capacity() {
                break;
            }
            tokio::task::yield_now().await;
        }
        credit.add_permits(10);
        pump.await.unwrap().unwrap();
        assert_eq!(frames.0.lock().unwrap().len(), 1);
        assert_eq!(replay(&frames).await, elements());
    }

    /// What a test does next to a running send pump.
    #[derive(Clone, Debug)]
    enum Step {
        /// The producer sends a batch of this many records (or a watermark for 0).
        Produce(usize),
        /// The receiver grants this many credits.
        Grant(usize),
        /// Let the pump run.
        Yield,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0usize..3_000).prop_map(Step::Produce),
            2 => (1usize..4).prop_map(Step::Grant),
            2 => Just(Step::Yield),
        ]
    }

    proptest::proptest! {
        /// However the producer's elements and the receiver's credit interleave, the frames
        /// carry every element once, in order, each frame within its size bound, and never
        /// more frames than credits granted.
        #[test]
        fn frames_keep_every_element_in_order_under_any_credit(
            steps in proptest::collection::vec(step(), 1..60),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async move {
                let ops = TypedOutput::<u64>(PhantomData);
                let (tx, rx) = channel::<u64>(4);
                let frames = Frames::default();
                let (open, credit, _) = gated(&frames);
                let pump = tokio::spawn(ops.send_pump(Box::new(rx), open, "test".into()).unwrap());
                let mut sent = Vec::new();
                let mut next = 0u64;
                let mut granted = 0;
                for step in steps {
                    match step {
                        Step::Produce(n) => {
                            let e = if n == 0 {
                                StreamElement::Watermark(Watermark::new(next as i64))
                            } else {
                                next += n as u64;
                                StreamElement::records((next - n as u64..next).collect())
                            };
                            sent.push(e.clone());
                            // A full channel means the pump waits for credit: grant one.
                            while tx.try_send(e.clone()).is_err() {
                                credit.add_permits(1);
                                granted += 1;
                                tokio::task::yield_now().await;
                            }
                        }
                        Step::Grant(n) => {
                            credit.add_permits(n);
                            granted += n;
                        }
                        Step::Yield => tokio::task::yield_now().await,
                    }
                }
                sent.push(StreamElement::EndOfInput);
                while tx.try_send(StreamElement::EndOfInput).is_err() {
                    tokio::task::yield_now().await;
                }
                credit.add_permits(1_000);
                granted += 1_000;
                pump.await.unwrap().unwrap();

                let all = frames.0.lock().unwrap().clone();
                assert!(all.len() <= granted);
                // A batch of 3,000 records encodes to at most ~9 KiB.
                for f in &all {
                    assert!(f.len() <= REMOTE_FRAME_BYTES + 16 * 1024, "{}", f.len());
                }
                assert_eq!(replay(&frames).await, sent);
            });
        }
    }
}
