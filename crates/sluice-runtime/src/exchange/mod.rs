//! Exchanges: how records leave one task and reach the subtasks of the next.
//!
//! Between two tasks every (producer subtask, consumer subtask) pair has its own bounded channel
//! carrying [`StreamElement`]s: batches of records and control
//! elements. A producer's `writer` routes records into one buffer per target with the edge's
//! partitioner and sends a buffer when it is full or when the producer has nothing more ready. A
//! full channel makes the writer wait, which stops its task from reading input: backpressure
//! travels upstream channel by channel until it reaches the source. The consumer's `gate` reads
//! all its channels fairly and merges their watermarks. In cluster mode, a channel between
//! processes is a local channel on each side and a pump between them (`remote`).

pub(crate) mod gate;
pub(crate) mod partitioner;
pub(crate) mod remote;
pub(crate) mod writer;

use sluice_core::StreamElement;
use tokio::sync::mpsc;

/// The sending end of one channel.
pub(crate) type ChannelSender<T> = mpsc::Sender<StreamElement<T>>;
/// The receiving end of one channel.
pub(crate) type ChannelReceiver<T> = mpsc::Receiver<StreamElement<T>>;

/// A bounded channel holding at most `capacity` elements (batches or control elements).
pub(crate) fn channel<T: Send>(capacity: usize) -> (ChannelSender<T>, ChannelReceiver<T>) {
    mpsc::channel(capacity.max(1))
}
