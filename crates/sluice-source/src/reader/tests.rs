//! The source operator with a scripted reader: watermarks per split combined per subtask, an
//! idle split left behind, splits restored from a checkpoint and checkpointed again, assigned
//! splits and the end after "no more splits".

use super::SourceOperator;
use crate::Boundedness;
use crate::api::{
    ReaderContext, ReaderPoll, Source, SourceReader, SourceSplit, SplitEnumerator, SplitId,
};
use crate::coordinator::SplitEnumeratorContext;
use crate::event::EnumeratorEvent;
use serde::{Deserialize, Serialize};
use sluice_coordinator::encode_event;
use sluice_core::{CheckpointId, SubtaskIndex, UserError};
use sluice_runtime::{
    OperatorContext, OperatorState, SourceHead, SourceHeadPoll, WatermarkStrategy,
};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Split(String);

impl SourceSplit for Split {
    fn split_id(&self) -> SplitId {
        SplitId::from(self.0.as_str())
    }
}

type Script = Arc<Mutex<VecDeque<Poll<ReaderPoll<i64>>>>>;

/// Plays a script of polls; records the splits it was given and the checkpoints it was told
/// of.
struct ScriptedReader {
    script: Script,
    splits: Arc<Mutex<Vec<Split>>>,
    completed: Arc<Mutex<Vec<CheckpointId>>>,
}

impl SourceReader for ScriptedReader {
    type Out = i64;
    type Split = Split;
    fn poll_next(
        &mut self,
        _: &mut Context<'_>,
        _: usize,
    ) -> Poll<Result<ReaderPoll<i64>, UserError>> {
        match self.script.lock().unwrap().pop_front() {
            Some(Poll::Ready(p)) => Poll::Ready(Ok(p)),
            Some(Poll::Pending) => Poll::Pending,
            None => Poll::Ready(Ok(ReaderPoll::NeedsSplits)),
        }
    }
    fn add_splits(&mut self, splits: Vec<Split>) -> Result<(), UserError> {
        self.splits.lock().unwrap().extend(splits);
        Ok(())
    }
    fn snapshot_state(&mut self, _: CheckpointId) -> Result<Vec<Split>, UserError> {
        Ok(self.splits.lock().unwrap().clone())
    }
    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        self.completed.lock().unwrap().push(checkpoint);
        Ok(())
    }
}

struct NoEnumerator;

impl SplitEnumerator for NoEnumerator {
    type Split = Split;
    type Checkpoint = ();
    fn handle_split_request(
        &mut self,
        _: &SplitEnumeratorContext<Self>,
        _: SubtaskIndex,
    ) -> Result<(), UserError> {
        Ok(())
    }
    fn add_splits_back(
        &mut self,
        _: &SplitEnumeratorContext<Self>,
        _: Vec<Split>,
        _: SubtaskIndex,
    ) -> Result<(), UserError> {
        Ok(())
    }
    fn add_reader(
        &mut self,
        _: &SplitEnumeratorContext<Self>,
        _: SubtaskIndex,
    ) -> Result<(), UserError> {
        Ok(())
    }
    fn snapshot_state(&mut self, _: CheckpointId) -> Result<(), UserError> {
        Ok(())
    }
}

#[derive(Default)]
struct ScriptedSource {
    script: Script,
    splits: Arc<Mutex<Vec<Split>>>,
    completed: Arc<Mutex<Vec<CheckpointId>>>,
}

impl Source for ScriptedSource {
    type Out = i64;
    type Split = Split;
    type Enumerator = NoEnumerator;
    type Reader = ScriptedReader;
    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }
    fn create_enumerator(
        &self,
        _: &SplitEnumeratorContext<NoEnumerator>,
    ) -> Result<NoEnumerator, UserError> {
        Ok(NoEnumerator)
    }
    fn restore_enumerator(
        &self,
        _: &SplitEnumeratorContext<NoEnumerator>,
        _: (),
    ) -> Result<NoEnumerator, UserError> {
        Ok(NoEnumerator)
    }
    fn create_reader(&self, _: ReaderContext) -> Result<ScriptedReader, UserError> {
        Ok(ScriptedReader {
            script: self.script.clone(),
            splits: self.splits.clone(),
            completed: self.completed.clone(),
        })
    }
}

fn records(split: &str, ts: &[i64]) -> Poll<ReaderPoll<i64>> {
    Poll::Ready(ReaderPoll::Records {
        split: SplitId::from(split),
        records: ts.to_vec(),
    })
}

fn finished(split: &str) -> Poll<ReaderPoll<i64>> {
    Poll::Ready(ReaderPoll::SplitFinished(SplitId::from(split)))
}

/// What the operator yields until it has nothing ready.
fn drain(op: &mut SourceOperator<ScriptedSource>) -> Vec<String> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    loop {
        match op.poll_next(&mut cx, 100) {
            Poll::Ready(Ok(SourceHeadPoll::Records(r))) => {
                out.push(format!("records {:?}", r.records()))
            }
            Poll::Ready(Ok(SourceHeadPoll::Watermark(w))) => {
                out.push(format!("watermark {}", w.timestamp()))
            }
            Poll::Ready(Ok(SourceHeadPoll::Status(s))) => out.push(format!("{s:?}")),
            Poll::Ready(Ok(SourceHeadPoll::End)) => {
                out.push("end".into());
                return out;
            }
            Poll::Ready(Err(e)) => panic!("{e}"),
            Poll::Pending => return out,
        }
    }
}

fn assign(op: &mut SourceOperator<ScriptedSource>, event: EnumeratorEvent<Split>) {
    op.handle_operator_event(encode_event(&event).unwrap())
        .unwrap();
}

fn strategy() -> WatermarkStrategy<i64> {
    WatermarkStrategy::for_monotonous_timestamps(|t: &i64| *t)
}

#[tokio::test(start_paused = true)]
async fn watermarks_are_made_per_split_and_combined_by_minimum() {
    let source = ScriptedSource::default();
    let ctx = OperatorContext::for_test("files", 0, 1);
    let mut op = SourceOperator::create(&source, &ctx, None, Some(strategy())).unwrap();
    assign(
        &mut op,
        EnumeratorEvent::AddSplits(vec![Split("a".into()), Split("b".into())]),
    );
    source.script.lock().unwrap().extend([
        records("a", &[100]),
        records("b", &[10, 20]),
        records("a", &[300]),
        finished("b"),
        Poll::Pending,
    ]);
    assert_eq!(
        drain(&mut op),
        vec![
            "records [100]", // b has not reported: no watermark yet
            "records [10, 20]",
            "watermark 19",
            "records [300]", // b still holds it at 19
            "watermark 299", // b finished: a alone counts
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_split_does_not_hold_the_subtask_watermark_back() {
    let source = ScriptedSource::default();
    let ctx = OperatorContext::for_test("files", 0, 1);
    let idle = strategy().with_idleness(Duration::from_secs(1));
    let mut op = SourceOperator::create(&source, &ctx, None, Some(idle)).unwrap();
    assign(
        &mut op,
        EnumeratorEvent::AddSplits(vec![Split("busy".into()), Split("quiet".into())]),
    );
    source.script.lock().unwrap().extend([
        records("quiet", &[5]),
        records("busy", &[50]),
        Poll::Pending,
    ]);
    assert_eq!(
        drain(&mut op),
        vec!["records [5]", "records [50]", "watermark 4"]
    );
    // Half a second later only "busy" speaks; after the timeout "quiet" no longer counts.
    tokio::time::advance(Duration::from_millis(600)).await;
    source
        .script
        .lock()
        .unwrap()
        .extend([records("busy", &[80]), Poll::Pending]);
    assert_eq!(drain(&mut op), vec!["records [80]"]);
    tokio::time::advance(Duration::from_millis(500)).await;
    source
        .script
        .lock()
        .unwrap()
        .extend([records("busy", &[90]), Poll::Pending]);
    // The timeout passed: "quiet" turns idle and the watermark jumps to what "busy" had read.
    assert_eq!(
        drain(&mut op),
        vec!["watermark 79", "records [90]", "watermark 89"]
    );
    // Both silent past the timeout: the subtask is idle; its next record makes it active first.
    tokio::time::advance(Duration::from_secs(2)).await;
    source.script.lock().unwrap().push_back(Poll::Pending);
    assert_eq!(drain(&mut op), vec!["Idle"]);
    source
        .script
        .lock()
        .unwrap()
        .extend([records("busy", &[120]), Poll::Pending]);
    assert_eq!(
        drain(&mut op),
        vec!["Active", "records [120]", "watermark 119"]
    );
}

#[tokio::test]
async fn restored_splits_go_back_to_the_reader_and_into_the_next_checkpoint() {
    let source = ScriptedSource::default();
    let ctx = OperatorContext::for_test("files", 1, 3);
    let restored = OperatorState::from_entries(vec![
        sluice_core::codec::encode(&Split("x@10".into())).unwrap(),
    ]);
    let mut op = SourceOperator::create(&source, &ctx, Some(restored), None).unwrap();
    assign(
        &mut op,
        EnumeratorEvent::AddSplits(vec![Split("y@0".into())]),
    );
    let state = op.snapshot_state(CheckpointId(4)).unwrap();
    let splits: Vec<Split> = state
        .entries()
        .iter()
        .map(|e| sluice_core::codec::decode(e).unwrap())
        .collect();
    assert_eq!(splits, vec![Split("x@10".into()), Split("y@0".into())]);
}

#[tokio::test]
async fn it_ends_only_without_splits_after_no_more_splits() {
    let source = ScriptedSource::default();
    let ctx = OperatorContext::for_test("files", 0, 1);
    let mut op = SourceOperator::create(&source, &ctx, None, None).unwrap();
    assign(&mut op, EnumeratorEvent::AddSplits(vec![Split("a".into())]));
    source
        .script
        .lock()
        .unwrap()
        .extend([records("a", &[1]), finished("a")]);
    assign(&mut op, EnumeratorEvent::NoMoreSplits);
    assert_eq!(drain(&mut op), vec!["records [1]", "end"]);
}

#[tokio::test]
async fn a_completed_checkpoint_reaches_the_reader() {
    let source = ScriptedSource::default();
    let ctx = OperatorContext::for_test("kafka", 0, 1);
    let mut op = SourceOperator::create(&source, &ctx, None, None).unwrap();
    SourceHead::notify_checkpoint_complete(&mut op, CheckpointId(7)).unwrap();
    SourceHead::notify_checkpoint_complete(&mut op, CheckpointId(8)).unwrap();
    assert_eq!(
        *source.completed.lock().unwrap(),
        vec![CheckpointId(7), CheckpointId(8)]
    );
}
