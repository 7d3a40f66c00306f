//! Exchanges that cross processes: the data plane's seams and the pumps that carry one channel
//! over them.
//!
//! In cluster mode a channel between two tasks on different task managers is a local bounded
//! channel on each side plus a *pump*: on the producer's side, [`send_pump`] encodes what the
//! channel's receiver gets and sends it as frames on a [`ByteSender`]; on the consumer's side,
//! [`receive_pump`] decodes the frames a [`ByteReceiver`] gets into the channel's sender. A task
//! runs with its pumps as one future ([`run_with_pumps`]). The transport behind the seams
//! ([`DataPlane`], opened per channel by its [`ChannelKey`]) is the caller's: `sluice-node`
//! carries it over `sluice-net`, tests in memory.
//!
//! Framing: a frame holds one encoded element or several, one after another. A send pump gathers
//! the elements already waiting, and while it has no credit whatever arrives meanwhile, into one
//! frame of up to [`REMOTE_FRAME_BYTES`] (plus the last element's).

use crate::error::TaskError;
use crate::exchange::{ChannelReceiver, ChannelSender};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};
use sluice_core::{
    AttemptNumber, Batch, CheckpointBarrier, Data, StreamElement, Watermark, WatermarkStatus,
};

/// A transport failure: the peer is gone or the connection broke.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

/// The sending end of one data-plane channel. A sender never sends without credit: `send`
/// waits until the receiver granted room.
pub trait ByteSender: Send {
    /// Completes once a frame may be sent without waiting (the sender holds a credit for it).
    /// Must be cancel-safe. The default is always ready: `send` does all the waiting.
    fn ready(&mut self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async { Ok(()) })
    }
    /// Sends one frame: one encoded element or several, one after another.
    fn send(&mut self, bytes: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>>;
    /// Closes the channel after its last element.
    fn close(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>>;
}

/// The receiving end of one data-plane channel.
pub trait ByteReceiver: Send {
    /// The next frame, or `None` once the sender closed the channel.
    fn recv(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>, TransportError>>;
}

/// Opening a channel's sending end.
pub type OpenSender = BoxFuture<'static, Result<Box<dyn ByteSender>, TransportError>>;
/// Opening a channel's receiving end.
pub type OpenReceiver = BoxFuture<'static, Result<Box<dyn ByteReceiver>, TransportError>>;

/// Byte channels between this task manager and the others.
pub trait DataPlane: Send + Sync + 'static {
    /// The sending end of `channel` to task manager `peer` (data address `addr`).
    fn sender(&self, peer: &str, addr: &str, channel: u64) -> OpenSender;
    /// The receiving end of `channel` from task manager `peer` (data address `addr`).
    fn receiver(&self, peer: &str, addr: &str, channel: u64) -> OpenReceiver;
}

/// Names one channel of an exchange across the cluster: unique per job-master epoch, attempt,
/// edge and (producer, consumer) subtask pair, so that a channel of a stopped attempt never
/// meets one of its successor on the same connection.
///
/// ```
/// use sluice_runtime::cluster::wire::ChannelKey;
///
/// let a = ChannelKey { epoch: 1, attempt: 0, edge: 2, producer: 0, consumer: 1 };
/// let b = ChannelKey { attempt: 1, ..a };
/// assert_ne!(a.id(), b.id());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChannelKey {
    /// The job master's epoch.
    pub epoch: u64,
    /// The attempt of the tasks at both ends.
    pub attempt: AttemptNumber,
    /// The edge of the job graph.
    pub edge: u32,
    /// The producing subtask.
    pub producer: u32,
    /// The consuming subtask.
    pub consumer: u32,
}

impl ChannelKey {
    /// The 64-bit channel id the data plane multiplexes by: a hash of every field (FxHash
    /// finalised by SplitMix64), so that any two keys of one connection's life differ with
    /// overwhelming probability.
    pub fn id(&self) -> u64 {
        let mut h: u64 = 0x243f_6a88_85a3_08d3;
        for v in [
            self.epoch,
            u64::from(self.attempt),
            u64::from(self.edge),
            u64::from(self.producer),
            u64::from(self.consumer),
        ] {
            h = (h.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
        h ^= h >> 30;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 27;
        h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^ (h >> 31)
    }
}

/// One channel element on its way out (borrowing the batch).
#[derive(Serialize)]
enum ElementOut<'a, T> {
    Records(&'a [T], Option<&'a [i64]>),
    Watermark(Watermark),
    Status(WatermarkStatus),
    Barrier(CheckpointBarrier),
    EndOfInput,
}

/// One channel element as it arrives (the same encoding, owned).
#[derive(Deserialize)]
enum ElementIn<T> {
    Records(Vec<T>, Option<Vec<i64>>),
    Watermark(Watermark),
    Status(WatermarkStatus),
    Barrier(CheckpointBarrier),
    EndOfInput,
}

impl<'a, T> ElementOut<'a, T> {
    fn of(e: &'a StreamElement<T>) -> Self {
        match e {
            StreamElement::Records(b) => ElementOut::Records(b.records(), b.timestamps()),
            StreamElement::Watermark(w) => ElementOut::Watermark(*w),
            StreamElement::Status(s) => ElementOut::Status(*s),
            StreamElement::Barrier(b) => ElementOut::Barrier(*b),
            StreamElement::EndOfInput => ElementOut::EndOfInput,
        }
    }
}

impl<T> ElementIn<T> {
    /// The element, or why its batch is malformed.
    fn into_element(self) -> Result<StreamElement<T>, String> {
        Ok(match self {
            ElementIn::Records(records, ts) => {
                if ts.as_ref().is_some_and(|t| t.len() != records.len()) {
                    return Err(format!(
                        "a batch of {} records arrived with a different number of timestamps",
                        records.len()
                    ));
                }
                StreamElement::Records(Batch::from_parts(records, ts))
            }
            ElementIn::Watermark(w) => StreamElement::Watermark(w),
            ElementIn::Status(s) => StreamElement::Status(s),
            ElementIn::Barrier(b) => StreamElement::Barrier(b),
            ElementIn::EndOfInput => StreamElement::EndOfInput,
        })
    }
}

/// How many bytes of encoded elements a send pump gathers into one data-plane frame at most
/// (plus the last element's), when several are waiting or credit is short. A receiver's
/// window of W buffers holds at most W such frames per channel.
pub(crate) const REMOTE_FRAME_BYTES: usize = 32 * 1024;

/// A future that moves one channel's elements across processes; it fails the task it serves.
pub(crate) type Pump = BoxFuture<'static, Result<(), TaskError>>;

/// Carries what a channel's receiver `rx` gets to another process: encodes each element and
/// sends it on the data-plane channel `out` opens, until the end of input. `what` names the
/// channel in errors.
pub(crate) fn send_pump<T: Data>(
    mut rx: ChannelReceiver<T>,
    out: OpenSender,
    what: String,
) -> Pump {
    Box::pin(async move {
        let broken = |e: TransportError| TaskError::PeerGone(format!("{what}: {e}"));
        let mut out = out.await.map_err(broken)?;
        // Each frame is encoded into a buffer sized from the last one, so that the encoder
        // never grows (and copies) it on the way.
        let mut size_hint = 256;
        let encode = |element: &StreamElement<T>, buf: &mut Vec<u8>| {
            sluice_core::codec::encode_into(&ElementOut::of(element), buf)
                .map_err(|e| TaskError::Internal(format!("{what}: cannot encode a record: {e}")))?;
            Ok::<_, TaskError>(matches!(element, StreamElement::EndOfInput))
        };
        while let Some(element) = rx.recv().await {
            let mut buf = Vec::with_capacity(size_hint);
            let mut end = encode(&element, &mut buf)?;
            // Elements already waiting join the frame, in order, up to a size; and without
            // credit the frame keeps gathering what arrives until credit comes or it is full:
            // under backpressure frames grow (one credit and one trip through the connection
            // for many batches, and the producer keeps running while the receiver catches up);
            // with credit and nothing waiting, it goes at once.
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
    })
}

/// Carries what arrives on the data-plane channel `input` opens into a channel's sender `tx`,
/// decoding each element, until the end of input. `what` names the channel in errors.
pub(crate) fn receive_pump<T: Data>(
    input: OpenReceiver,
    tx: ChannelSender<T>,
    what: String,
) -> Pump {
    Box::pin(async move {
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
    })
}

/// Runs a task with its pumps: a pump's failure fails the task; a task that ended successfully
/// is done once its outgoing pumps (`sends`) delivered everything, end of input included.
pub(crate) async fn run_with_pumps(
    mut task: BoxFuture<'static, Result<(), TaskError>>,
    sends: Vec<Pump>,
    receives: Vec<Pump>,
) -> Result<(), TaskError> {
    let mut sends: FuturesUnordered<_> = sends.into_iter().collect();
    let mut receives: FuturesUnordered<_> = receives.into_iter().collect();
    loop {
        tokio::select! {
            r = &mut task => {
                r?;
                break;
            }
            Some(r) = sends.next(), if !sends.is_empty() => r?,
            Some(r) = receives.next(), if !receives.is_empty() => r?,
        }
    }
    while let Some(r) = sends.next().await {
        r?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
