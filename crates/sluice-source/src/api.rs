//! The FLIP-27 source API: [`Source`] (a factory of enumerators and readers),
//! [`SplitEnumerator`] (on the coordinator: discovers splits and assigns them), and
//! [`SourceReader`] (in each subtask: reads the splits it was given, without blocking the task).
//!
//! Splits and the enumerator's checkpoint are plain serde types: they travel in operator events
//! and are stored in checkpoints with sluice's one codec.
//!
//! A whole source, from scratch: the lines of a few in-memory "pages", one page per split.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use sluice_core::{CheckpointId, SubtaskIndex, UserError};
//! use sluice_runtime::prelude::*;
//! use sluice_source::*;
//! use std::task::{Context, Poll};
//!
//! /// A page and how many of its lines were read.
//! #[derive(Clone, Debug, Serialize, Deserialize)]
//! struct Page { index: usize, read: usize }
//!
//! impl SourceSplit for Page {
//!     fn split_id(&self) -> SplitId { SplitId::from(self.index.to_string()) }
//! }
//!
//! const PAGES: [&[&str]; 3] = [&["a", "b"], &["c"], &["d", "e", "f"]];
//!
//! struct Pages;
//!
//! /// Hands out the pages not yet assigned, one per request.
//! struct PageEnumerator(Vec<Page>);
//!
//! impl SplitEnumerator for PageEnumerator {
//!     type Split = Page;
//!     type Checkpoint = Vec<Page>;
//!     fn handle_split_request(&mut self, ctx: &SplitEnumeratorContext<Self>, subtask: SubtaskIndex) -> Result<(), UserError> {
//!         match self.0.pop() {
//!             Some(page) => ctx.assign_split(subtask, vec![page])?,
//!             None => ctx.signal_no_more_splits(subtask)?,
//!         }
//!         Ok(())
//!     }
//!     fn add_splits_back(&mut self, _: &SplitEnumeratorContext<Self>, pages: Vec<Page>, _: SubtaskIndex) -> Result<(), UserError> {
//!         self.0.extend(pages);
//!         Ok(())
//!     }
//!     fn add_reader(&mut self, _: &SplitEnumeratorContext<Self>, _: SubtaskIndex) -> Result<(), UserError> { Ok(()) }
//!     fn snapshot_state(&mut self, _: CheckpointId) -> Result<Vec<Page>, UserError> { Ok(self.0.clone()) }
//! }
//!
//! /// Reads its pages a line at a time.
//! struct PageReader(Vec<Page>);
//!
//! impl SourceReader for PageReader {
//!     type Out = String;
//!     type Split = Page;
//!     fn poll_next(&mut self, _: &mut Context<'_>, _max: usize) -> Poll<Result<ReaderPoll<String>, UserError>> {
//!         let Some(page) = self.0.last_mut() else { return Poll::Ready(Ok(ReaderPoll::NeedsSplits)) };
//!         let id = page.split_id();
//!         match PAGES[page.index].get(page.read) {
//!             Some(line) => {
//!                 page.read += 1;
//!                 Poll::Ready(Ok(ReaderPoll::Records { split: id, records: vec![line.to_string()] }))
//!             }
//!             None => {
//!                 self.0.pop();
//!                 Poll::Ready(Ok(ReaderPoll::SplitFinished(id)))
//!             }
//!         }
//!     }
//!     fn add_splits(&mut self, pages: Vec<Page>) -> Result<(), UserError> {
//!         self.0.extend(pages);
//!         Ok(())
//!     }
//!     fn snapshot_state(&mut self, _: CheckpointId) -> Result<Vec<Page>, UserError> { Ok(self.0.clone()) }
//! }
//!
//! impl Source for Pages {
//!     type Out = String;
//!     type Split = Page;
//!     type Enumerator = PageEnumerator;
//!     type Reader = PageReader;
//!     fn boundedness(&self) -> Boundedness { Boundedness::Bounded }
//!     fn create_enumerator(&self, _: &SplitEnumeratorContext<PageEnumerator>) -> Result<PageEnumerator, UserError> {
//!         Ok(PageEnumerator((0..PAGES.len()).map(|index| Page { index, read: 0 }).collect()))
//!     }
//!     fn restore_enumerator(&self, _: &SplitEnumeratorContext<PageEnumerator>, pages: Vec<Page>) -> Result<PageEnumerator, UserError> {
//!         Ok(PageEnumerator(pages))
//!     }
//!     fn create_reader(&self, _: ReaderContext) -> Result<PageReader, UserError> { Ok(PageReader(Vec::new())) }
//! }
//!
//! let env = StreamEnvironment::new();
//! env.set_parallelism(2);
//! let lines = env.from_source(Pages, None, "pages").collect();
//! env.execute_blocking("pages").unwrap();
//! let mut lines = lines.take();
//! lines.sort();
//! assert_eq!(lines, ["a", "b", "c", "d", "e", "f"]);
//! ```

use crate::coordinator::SplitEnumeratorContext;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_core::{CheckpointId, Data, SubtaskIndex, UserError};
use sluice_runtime::OperatorContext;
use std::fmt::Debug;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Whether a source ends (Flink's `Boundedness`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundedness {
    /// The source ends once every split is read.
    Bounded,
    /// The source may produce records forever (new splits may appear).
    ContinuousUnbounded,
}

/// The id of a split, cheap to clone (readers tag each batch with it).
pub type SplitId = Arc<str>;

/// A unit of work of a source: a file, a range of numbers, a partition. It carries its own
/// position, so a reader's checkpoint is just its splits.
pub trait SourceSplit: Serialize + DeserializeOwned + Clone + Debug + Send + 'static {
    /// A stable id, unique within the source.
    fn split_id(&self) -> SplitId;
}

/// A split source (Flink's `Source`): makes the enumerator that runs on the coordinator and the
/// readers that run in the subtasks. Add one to a job with
/// [`FromSource::from_source`](crate::FromSource::from_source).
pub trait Source: Send + Sync + 'static {
    /// The records the source produces.
    type Out: Data;
    /// The source's split.
    type Split: SourceSplit;
    /// The enumerator (one per job, on the coordinator thread).
    type Enumerator: SplitEnumerator<Split = Self::Split>;
    /// The reader (one per subtask).
    type Reader: SourceReader<Out = Self::Out, Split = Self::Split>;

    /// Whether the source ends.
    fn boundedness(&self) -> Boundedness;

    /// A fresh enumerator (no checkpoint to restore).
    fn create_enumerator(
        &self,
        context: &SplitEnumeratorContext<Self::Enumerator>,
    ) -> Result<Self::Enumerator, UserError>;

    /// An enumerator restored from its checkpoint.
    fn restore_enumerator(
        &self,
        context: &SplitEnumeratorContext<Self::Enumerator>,
        checkpoint: <Self::Enumerator as SplitEnumerator>::Checkpoint,
    ) -> Result<Self::Enumerator, UserError>;

    /// A reader for one subtask (its restored splits are added afterwards).
    fn create_reader(&self, context: ReaderContext) -> Result<Self::Reader, UserError>;

    /// Checks the configuration at submit time (a missing directory, a bad range): an error
    /// refuses the job before it runs, naming the source.
    fn validate(&self) -> Result<(), UserError> {
        Ok(())
    }
}

/// Discovers splits and assigns them to readers (Flink's `SplitEnumerator`). Every method runs
/// on the coordinator thread, one at a time; an error or a panic fails the job.
pub trait SplitEnumerator: Sized + Send + 'static {
    /// The split type.
    type Split: SourceSplit;
    /// The enumerator's checkpoint: the splits not yet assigned, discovery progress.
    type Checkpoint: Serialize + DeserializeOwned + Send + 'static;

    /// Starts the enumerator (schedule periodic discovery here).
    fn start(&mut self, context: &SplitEnumeratorContext<Self>) -> Result<(), UserError> {
        let _ = context;
        Ok(())
    }

    /// The reader of `subtask` asks for a split.
    fn handle_split_request(
        &mut self,
        context: &SplitEnumeratorContext<Self>,
        subtask: SubtaskIndex,
    ) -> Result<(), UserError>;

    /// Splits assigned to `subtask` after the checkpoint it was reset to come back (partial
    /// failover): they must be assigned again.
    fn add_splits_back(
        &mut self,
        context: &SplitEnumeratorContext<Self>,
        splits: Vec<Self::Split>,
        subtask: SubtaskIndex,
    ) -> Result<(), UserError>;

    /// The reader of `subtask` registered.
    fn add_reader(
        &mut self,
        context: &SplitEnumeratorContext<Self>,
        subtask: SubtaskIndex,
    ) -> Result<(), UserError>;

    /// The enumerator's state for checkpoint `checkpoint`. Assignments made before belong to
    /// the checkpoint (the readers store those splits); registered readers are not part of it.
    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<Self::Checkpoint, UserError>;

    /// A custom event from the reader of `subtask`.
    fn handle_source_event(
        &mut self,
        context: &SplitEnumeratorContext<Self>,
        subtask: SubtaskIndex,
        event: Vec<u8>,
    ) -> Result<(), UserError> {
        let _ = (context, event);
        Err(format!("the enumerator does not handle source events (from subtask {subtask})").into())
    }

    /// Checkpoint `checkpoint` completed.
    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        let _ = checkpoint;
        Ok(())
    }

    /// The coordinator closes.
    fn close(&mut self) -> Result<(), UserError> {
        Ok(())
    }
}

/// What a [`SourceReader`] has ready.
#[derive(Debug)]
pub enum ReaderPoll<T> {
    /// Records of split `split` (non-empty).
    Records {
        /// The split they were read from (watermarks are generated per split).
        split: SplitId,
        /// The records.
        records: Vec<T>,
    },
    /// Split `split` is read to its end; the reader no longer holds it.
    SplitFinished(SplitId),
    /// The reader holds no unfinished split: the operator asks the enumerator for one, or ends
    /// when it was told no more will come.
    NeedsSplits,
}

/// Reads the splits of one subtask (Flink's `SourceReader`). Called from the subtask's task
/// only, never concurrently; no method may block (read files on the blocking pool).
pub trait SourceReader: Send + 'static {
    /// The records it produces.
    type Out: Data;
    /// The split type.
    type Split: SourceSplit;

    /// Called once before the first poll.
    fn start(&mut self) -> Result<(), UserError> {
        Ok(())
    }

    /// The next batch of at most `max` records of one split, a finished split, or the need for
    /// splits. `Poll::Pending` when data is not ready yet, after arranging a wake-up.
    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<ReaderPoll<Self::Out>, UserError>>;

    /// Splits assigned to this reader (or restored from a checkpoint).
    fn add_splits(&mut self, splits: Vec<Self::Split>) -> Result<(), UserError>;

    /// No more splits will be assigned.
    fn notify_no_more_splits(&mut self) -> Result<(), UserError> {
        Ok(())
    }

    /// The reader's unfinished splits, each with the position up to which records have been
    /// returned by `poll_next`, for checkpoint `checkpoint`.
    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<Vec<Self::Split>, UserError>;

    /// Checkpoint `checkpoint` completed (Flink's `notifyCheckpointComplete`), told by the
    /// subtask's task between two polls. A notification may be skipped when a later one
    /// covers it (use it for what may be skipped, such as committing offsets for monitoring);
    /// an error fails the subtask.
    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        let _ = checkpoint;
        Ok(())
    }

    /// A custom event from the enumerator.
    fn handle_source_event(&mut self, event: Vec<u8>) -> Result<(), UserError> {
        Err(format!(
            "the reader does not handle source events ({} bytes)",
            event.len()
        )
        .into())
    }
}

/// What a reader knows about where it runs, and its way to send events to the enumerator.
#[derive(Clone, Debug)]
pub struct ReaderContext {
    operator: OperatorContext,
}

impl ReaderContext {
    pub(crate) fn new(operator: OperatorContext) -> Self {
        ReaderContext { operator }
    }

    /// This subtask's index.
    pub fn subtask_index(&self) -> SubtaskIndex {
        self.operator.subtask_index()
    }

    /// The source's parallelism.
    pub fn parallelism(&self) -> usize {
        self.operator.parallelism()
    }

    /// The subtask's operator context (name, metrics).
    pub fn operator(&self) -> &OperatorContext {
        &self.operator
    }

    /// Sends a custom event to the enumerator's
    /// [`handle_source_event`](SplitEnumerator::handle_source_event).
    pub fn send_source_event(&self, event: Vec<u8>) -> Result<(), UserError> {
        self.operator
            .send_to_coordinator(&crate::event::ReaderEvent::Source(event))
    }
}
