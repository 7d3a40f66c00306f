//! FLIP-27 split sources for sluice: a source's work is cut into splits that an enumerator on
//! the operator coordinator hands out to readers in the subtasks, on request, and takes back
//! when a subtask is reset; readers store their splits with positions in every checkpoint, so a
//! job resumes mid-split and may change the source's parallelism on restore.
//!
//! Where to find things:
//! - [`api`]: [`Source`], [`SplitEnumerator`], [`SourceReader`], [`SourceSplit`],
//!   [`Boundedness`], [`ReaderPoll`], [`ReaderContext`];
//! - [`coordinator`]: [`SourceLogic`] (the coordinator, run by the coordinator crate's
//!   `BaseCoordinator`), [`SourceCoordinatorContext`] (the enumerator's context, composed on
//!   `CoordinatorContextBase`), [`SplitAssignmentTracker`];
//! - `reader` (private): the source operator in each subtask, a runtime `SourceHead`, and its
//!   per-split watermarks;
//! - [`FromSource`]: `env.from_source(source, watermarks, name)`;
//! - built-in sources: [`NumberSequenceSource`], [`DataGeneratorSource`] and [`FileSource`]
//!   (JSON lines or CSV files of a directory, bounded or continuous);
//! - [`SourceError`].
//!
//! ```
//! use sluice_runtime::prelude::*;
//! use sluice_source::{DataGeneratorSource, FromSource};
//!
//! let env = StreamEnvironment::new();
//! env.set_parallelism(3);
//! let squares = Generator::new(|i| i * i).take(10);
//! let squares = env
//!     .from_source(DataGeneratorSource::from_generator(squares), None, "squares")
//!     .collect();
//! env.execute_blocking("squares").unwrap();
//! let mut v = squares.take();
//! v.sort();
//! assert_eq!(v, vec![0, 1, 4, 9, 16, 25, 36, 49, 64, 81]);
//! ```

pub mod api;
mod builtin;
pub mod coordinator;
mod env;
mod error;
mod event;
mod reader;

pub use api::{
    Boundedness, ReaderContext, ReaderPoll, Source, SourceReader, SourceSplit, SplitEnumerator,
    SplitId,
};
pub use builtin::file::{FileFormat, FileSource, FileSourceMetrics, FileSplit, MalformedLines};
pub use builtin::generator::DataGeneratorSource;
pub use builtin::sequence::{
    NumberSequenceSource, SequenceEnumerator, SequenceReader, SequenceSource, SequenceSplit,
};
pub use coordinator::{
    ReaderInfo, SourceCoordinator, SourceCoordinatorContext, SourceLogic, SplitAssignmentTracker,
    SplitEnumeratorContext, source_coordinator_provider,
};
pub use env::FromSource;
pub use error::SourceError;
