//! The deployment plan on a small job: `src` (a source) → `key_by` → `sum` → `sink`, the last two
//! chained, every operator at parallelism 2. Tasks 0 and 1 run `src`, tasks 2 and 3 `sum -> sink`.

use super::*;
use crate::graph::Partitioning;
use crate::graph::erased::{
    AnyBox, BuiltinWriter, OperatorFactory, RunnableTask, SourceFactory, TaskParts, TypedOutput,
};
use crate::job::plan::plan;
use crate::operator::OperatorContext;
use std::marker::PhantomData;
use std::sync::Arc;

/// A factory the plan never calls.
struct Unbuilt;

impl SourceFactory for Unbuilt {
    fn build_task(
        &self,
        _: OperatorContext,
        _: AnyBox,
        _: TaskParts,
        _: Option<OperatorState>,
    ) -> Result<Box<dyn RunnableTask>, JobError> {
        Err(JobError::Internal("not built in these tests".into()))
    }
}

impl OperatorFactory for Unbuilt {
    fn build_stage(
        &self,
        _: OperatorContext,
        _: AnyBox,
        _: Option<OperatorState>,
    ) -> Result<AnyBox, JobError> {
        Err(JobError::Internal("not built in these tests".into()))
    }
    fn build_task(
        &self,
        _: Vec<(usize, AnyBox)>,
        _: AnyBox,
        _: TaskParts,
    ) -> Result<Box<dyn RunnableTask>, JobError> {
        Err(JobError::Internal("not built in these tests".into()))
    }
}

const SRC: NodeId = NodeId(0);
const SUM: NodeId = NodeId(1);
const SINK: NodeId = NodeId(2);

fn job() -> (StreamGraph, Plan, JobConfig) {
    let mut g = StreamGraph::default();
    let out = || Arc::new(TypedOutput::<u64>(PhantomData));
    let writer = |p| Arc::new(BuiltinWriter::<u64>::new(p));
    g.add_node(
        "src".into(),
        NodeKind::Source(Arc::new(Unbuilt)),
        out(),
        false,
    );
    g.add_node(
        "sum".into(),
        NodeKind::Operator(Arc::new(Unbuilt)),
        out(),
        false,
    );
    g.add_node(
        "sink".into(),
        NodeKind::Operator(Arc::new(Unbuilt)),
        out(),
        true,
    );
    g.add_edge(SRC, SUM, Partitioning::Hash, writer(Partitioning::Hash));
    g.add_edge(
        SUM,
        SINK,
        Partitioning::Forward,
        writer(Partitioning::Forward),
    );
    let config = JobConfig {
        parallelism: 2,
        ..JobConfig::default()
    };
    let p = plan(&g, &config).unwrap();
    assert_eq!(p.chains, vec![vec![SRC], vec![SUM, SINK]]);
    (g, p, config)
}

fn tasks(t: &[usize]) -> BTreeSet<usize> {
    t.iter().copied().collect()
}

fn kinds(d: &DeploymentPlan) -> Vec<(usize, usize, ChannelKind)> {
    d.channels
        .iter()
        .map(|c| (c.producer_task, c.consumer_task, c.kind))
        .collect()
}

fn checkpoint(operators: BTreeMap<NodeId, Vec<OperatorState>>) -> CompletedCheckpoint {
    CompletedCheckpoint {
        id: CheckpointId(7),
        timestamp_ms: 0,
        operators: Arc::new(operators),
        coordinators: Arc::default(),
        location: None,
    }
}

fn list(entries: &[&[u8]]) -> OperatorState {
    OperatorState::from_entries(entries.iter().map(|e| e.to_vec()).collect())
}

#[test]
fn a_whole_attempt_has_every_task_and_only_local_channels() {
    let (g, p, c) = job();
    let d = DeploymentPlan::new(
        &g,
        &p,
        &c,
        &tasks(&[0, 1, 2, 3]),
        3,
        Shares::Checkpoint(None),
    )
    .unwrap();
    let indices: Vec<usize> = d.tasks.iter().map(|t| t.index).collect();
    assert_eq!(indices, [0, 1, 2, 3]);
    assert_eq!(d.tasks[3].description, "task 'sum -> sink', subtask 1 of 2");
    assert!(d.tasks[0].source && !d.tasks[2].source);
    // key_by: every source subtask to every sum subtask, producer by producer.
    use ChannelKind::Local;
    assert_eq!(
        kinds(&d),
        [(0, 2, Local), (0, 3, Local), (1, 2, Local), (1, 3, Local)]
    );
    assert_eq!(d.mailboxes[&(SINK, 1)], 3);
    assert_eq!(d.mailboxes[&(SUM, 1)], 3);
    assert!(d.states.is_empty() && d.restored_from.is_none());
}

/// Two task managers of one slot each: slot 0 runs tasks 0 and 2, slot 1 tasks 1 and 3. Each
/// sees its own channels, and the channels between them from its own side.
#[test]
fn a_task_manager_sees_its_channels_to_the_other_as_outgoing_and_incoming() {
    let (g, p, c) = job();
    use ChannelKind::{Incoming, Local, Outgoing};
    let a = DeploymentPlan::new(&g, &p, &c, &tasks(&[0, 2]), 0, Shares::Given(Vec::new())).unwrap();
    assert_eq!(
        kinds(&a),
        [(0, 2, Local), (0, 3, Outgoing), (1, 2, Incoming)]
    );
    let b = DeploymentPlan::new(&g, &p, &c, &tasks(&[1, 3]), 0, Shares::Given(Vec::new())).unwrap();
    assert_eq!(
        kinds(&b),
        [(0, 3, Incoming), (1, 2, Outgoing), (1, 3, Local)]
    );
    let here: Vec<usize> = b.tasks.iter().map(|t| t.index).collect();
    assert_eq!(here, [1, 3]);
    assert!(!b.mailboxes.contains_key(&(SUM, 0)));
}

/// `sum` was checkpointed at parallelism 1; at parallelism 2 its list entries are cut into two
/// shares, and each deployment holds only the shares of its own subtasks.
#[test]
fn restored_state_is_dealt_out_at_the_new_parallelism() {
    let (g, p, c) = job();
    let old = checkpoint(BTreeMap::from([(SUM, vec![list(&[b"a", b"b", b"c"])])]));
    let all = DeploymentPlan::new(
        &g,
        &p,
        &c,
        &tasks(&[0, 1, 2, 3]),
        1,
        Shares::Checkpoint(Some(&old)),
    )
    .unwrap();
    assert_eq!(all.restored_from, Some(CheckpointId(7)));
    assert_eq!(all.states[&(SUM, 0)], list(&[b"a", b"b"]));
    assert_eq!(all.states[&(SUM, 1)], list(&[b"c"]));
    let mut second =
        DeploymentPlan::new(&g, &p, &c, &tasks(&[3]), 1, Shares::Checkpoint(Some(&old))).unwrap();
    assert_eq!(second.states.len(), 1);
    assert_eq!(second.take_state(SUM, 1), Some(list(&[b"c"])));
    assert_eq!(second.take_state(SUM, 1), None);
}

#[test]
fn a_source_that_cannot_rescale_is_refused_at_another_parallelism() {
    let (g, p, c) = job();
    let old = checkpoint(BTreeMap::from([(SRC, vec![list(&[b"offset"])])]));
    let err = DeploymentPlan::new(
        &g,
        &p,
        &c,
        &tasks(&[0, 1]),
        1,
        Shares::Checkpoint(Some(&old)),
    )
    .unwrap_err();
    assert!(err.to_string().contains("source 'src'"), "{err}");
    let unknown = checkpoint(BTreeMap::from([(NodeId(9), vec![list(&[])])]));
    let err = DeploymentPlan::new(
        &g,
        &p,
        &c,
        &tasks(&[0]),
        1,
        Shares::Checkpoint(Some(&unknown)),
    )
    .unwrap_err();
    assert!(err.to_string().contains("operator #9"), "{err}");
}

#[test]
fn given_shares_outside_the_job_are_refused() {
    let (g, p, c) = job();
    let given = vec![(SUM, 2, list(&[]))];
    let err = DeploymentPlan::new(&g, &p, &c, &tasks(&[2]), 0, Shares::Given(given)).unwrap_err();
    assert!(err.to_string().contains("subtask 2 of operator"), "{err}");
}
