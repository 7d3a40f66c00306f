//! The shared vocabulary of sluice.
//!
//! Everything in this crate is plain data: identifiers, the elements that travel between tasks
//! ([`StreamElement`], whose records travel as a [`Batch`] with an optional column of event times), event time ([`Watermark`]), the [`Data`] bound every record type meets,
//! and the error type user code returns ([`UserError`]), plus [`sync::lock`], the one
//! poison-tolerant lock helper of the workspace. It has no runtime and no I/O, so every other
//! crate of the workspace can depend on it.
//!
//! ```
//! use sluice_core::{StreamElement, Watermark};
//!
//! let batch: StreamElement<u64> = StreamElement::records(vec![1, 2, 3]);
//! assert!(matches!(batch, StreamElement::Records(ref b) if b.len() == 3));
//! assert!(Watermark::MIN < Watermark::new(0));
//! assert!(Watermark::new(0) < Watermark::MAX);
//! ```

pub mod codec;
mod data;
mod either;
mod element;
mod error;
mod event;
mod ids;
pub mod sync;
mod watermark;

pub use data::Data;
pub use either::Either;
pub use element::{Batch, CheckpointBarrier, NO_TIMESTAMP, StreamElement};
pub use error::{UserError, panic_message};
pub use event::OperatorEvent;
pub use ids::{AttemptNumber, CheckpointId, NodeId, SubtaskIndex};
pub use watermark::{Watermark, WatermarkStatus};
