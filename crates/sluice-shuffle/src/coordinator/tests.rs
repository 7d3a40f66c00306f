//! The coordinator driven as the job master drives it, with in-memory gateways.

use super::*;
use crate::event::ToOperator;
use crate::global::Routing;
use crate::statistics::{LocalStatistics, StatisticsType};
use sluice_coordinator::gateway::memory::{InMemoryTransport, SubtaskInbox};
use sluice_coordinator::{
    CheckpointResult, CoordinatorContext, JobFailureHook, OperatorCoordinator, encode_event,
};
use sluice_core::NodeId;
use std::sync::{Arc, Mutex};

struct Harness {
    coordinator: Box<dyn OperatorCoordinator>,
    transport: Arc<InMemoryTransport>,
    inboxes: Vec<SubtaskInbox>,
    failures: Arc<Mutex<Vec<String>>>,
}

impl Harness {
    async fn start(
        parallelism: usize,
        config: RangeShuffleConfig,
        restore: Option<Vec<u8>>,
    ) -> Harness {
        let failures = Arc::new(Mutex::new(Vec::new()));
        let sink = failures.clone();
        let hook = JobFailureHook::new(move |f| sink.lock().unwrap().push(f.to_string()));
        let context = CoordinatorContext::new("shuffle", NodeId(1), parallelism, hook);
        let mut coordinator = ShuffleCoordinator::<u32>::provider(config)
            .create(context)
            .unwrap();
        if let Some(state) = restore {
            coordinator
                .reset_to_checkpoint(CheckpointId(5), Some(state))
                .await
                .unwrap();
        }
        coordinator.start().await.unwrap();
        let transport = InMemoryTransport::new(64);
        let mut inboxes = Vec::new();
        for s in 0..parallelism {
            inboxes.push(transport.start_attempt(s, 0));
            coordinator
                .execution_attempt_ready(s, 0, transport.gateway(s, 0))
                .await
                .unwrap();
        }
        Harness {
            coordinator,
            transport,
            inboxes,
            failures,
        }
    }

    async fn send(&mut self, subtask: usize, event: ToCoordinator<u32>) {
        self.coordinator
            .handle_event_from_operator(subtask, 0, encode_event(&event).unwrap())
            .await
            .unwrap();
        self.coordinator.flush().await.unwrap();
    }

    async fn statistics(&mut self, subtask: usize, checkpoint: u64, counts: &[(u32, u64)]) {
        let statistics = LocalStatistics::Map(counts.iter().copied().collect());
        self.send(
            subtask,
            ToCoordinator::Statistics {
                checkpoint,
                downstream_parallelism: 2,
                statistics,
            },
        )
        .await;
    }

    async fn request(&mut self, subtask: usize, signature: Option<u64>, downstream: usize) {
        self.send(
            subtask,
            ToCoordinator::Request {
                signature,
                downstream_parallelism: downstream,
            },
        )
        .await;
    }

    /// What subtask `s` received since the last call: (statistics, apply immediately).
    fn received(&mut self, s: usize) -> Vec<(GlobalStatistics<u32>, bool)> {
        let mut out = Vec::new();
        while let Some(d) = self.inboxes[s].try_recv() {
            let ToOperator::Statistics {
                statistics,
                apply_immediately,
            } = decode_event(&d.ack()).unwrap();
            out.push((statistics, apply_immediately));
        }
        out
    }

    async fn checkpoint(&mut self, id: u64) -> Vec<u8> {
        let (result, state) = CheckpointResult::new(CheckpointId(id));
        self.coordinator
            .checkpoint_coordinator(CheckpointId(id), result)
            .await
            .unwrap();
        state.await.unwrap()
    }

    async fn close(mut self) {
        assert!(
            self.failures.lock().unwrap().is_empty(),
            "{:?}",
            self.failures
        );
        self.coordinator.close().await.unwrap();
    }
}

fn assignment(g: &GlobalStatistics<u32>) -> Vec<(u32, Vec<usize>)> {
    let Routing::Map(m) = &g.routing else {
        panic!("expected map statistics")
    };
    m.keys()
        .iter()
        .map(|(k, a)| (*k, a.subtasks().to_vec()))
        .collect()
}

#[tokio::test]
async fn a_completed_aggregation_goes_to_every_subtask_for_its_next_checkpoint() {
    let config = RangeShuffleConfig::default().statistics_type(StatisticsType::Map);
    let metrics = config.metrics();
    let mut h = Harness::start(2, config, None).await;
    h.statistics(0, 1, &[(1, 60), (2, 10)]).await;
    assert!(h.received(0).is_empty());
    h.statistics(1, 1, &[(2, 20), (3, 10)]).await;
    for s in 0..2 {
        let got = h.received(s);
        assert_eq!(got.len(), 1);
        let (g, immediately) = &got[0];
        assert!(!immediately);
        assert_eq!((g.checkpoint, g.downstream_parallelism), (1, 2));
        // 1: 60, 2: 30, 3: 10 over 2 (target 50): 1 fills 0 and spills 10 into 1.
        assert_eq!(
            assignment(g),
            vec![(1, vec![0, 1]), (2, vec![1]), (3, vec![1])]
        );
    }
    let report = metrics.latest().unwrap();
    assert_eq!(report.cause, ReportCause::Aggregated);
    assert_eq!(report.route_of("1").unwrap().weights, vec![50, 10]);
    h.close().await;
}

#[tokio::test]
async fn concurrent_checkpoints_stale_and_duplicate_statistics() {
    let mut h = Harness::start(2, RangeShuffleConfig::default(), None).await;
    h.statistics(0, 1, &[(1, 1)]).await;
    h.statistics(0, 2, &[(2, 1)]).await;
    h.statistics(0, 2, &[(9, 100)]).await; // duplicate: ignored
    h.statistics(1, 2, &[(3, 1)]).await; // completes 2, drops 1
    let got = h.received(0);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.checkpoint, 2);
    assert_eq!(assignment(&got[0].0), vec![(2, vec![0]), (3, vec![1])]);
    h.statistics(1, 1, &[(1, 1)]).await; // stale
    assert!(h.received(0).is_empty());
    assert_eq!(
        h.coordinator_state().await.unwrap().checkpoint,
        2,
        "the completed statistics are checkpoint 2's"
    );
    h.close().await;
}

impl Harness {
    async fn coordinator_state(&mut self) -> Option<CompletedStatistics<u32>> {
        let bytes = self.checkpoint(99).await;
        (!bytes.is_empty()).then(|| sluice_core::codec::decode(&bytes).unwrap())
    }
}

#[tokio::test]
async fn checkpoint_restore_and_the_request_after_a_restore() {
    let config = RangeShuffleConfig::default();
    let metrics = config.metrics();
    let mut h = Harness::start(2, config.clone(), None).await;
    // Nothing completed: an empty checkpoint, and a request is ignored.
    assert!(h.checkpoint(1).await.is_empty());
    h.request(0, None, 2).await;
    assert!(h.received(0).is_empty());
    h.statistics(0, 2, &[(1, 5), (2, 5)]).await;
    h.statistics(1, 2, &[(3, 5), (4, 5)]).await;
    let (sent, _) = h.received(0).remove(0);
    let state = h.checkpoint(3).await;
    h.close().await;

    // A new coordinator restored from that state recomputes the same statistics.
    let mut h = Harness::start(2, config, Some(state)).await;
    assert_eq!(metrics.latest().unwrap().cause, ReportCause::Restored);
    // A subtask that restored the same statistics is not answered.
    h.request(0, Some(sent.signature()), 2).await;
    assert!(h.received(0).is_empty());
    // One that restored nothing (or other statistics) gets them, to apply at once.
    h.request(1, None, 2).await;
    let got = h.received(1);
    assert_eq!(got, vec![(sent.clone(), true)]);
    h.request(1, Some(sent.signature() ^ 1), 2).await;
    assert_eq!(h.received(1).len(), 1);
    // A request from a rescaled job (4 downstream subtasks) recomputes for 4.
    h.request(0, Some(sent.signature()), 4).await;
    let got = h.received(0);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.downstream_parallelism, 4);
    assert_eq!(
        assignment(&got[0].0),
        vec![(1, vec![0]), (2, vec![1]), (3, vec![2]), (4, vec![3])]
    );
    assert_eq!(metrics.latest().unwrap().cause, ReportCause::Rescaled);
    assert_eq!(metrics.reports(), 3);
    h.close().await;
}

#[tokio::test]
async fn events_from_an_attempt_that_failed_are_ignored() {
    let mut h = Harness::start(1, RangeShuffleConfig::default(), None).await;
    // Attempt 0 fails; attempt 1 becomes ready.
    h.coordinator
        .execution_attempt_failed(0, 0, None)
        .await
        .unwrap();
    h.transport.stop_attempt(0, 0);
    let mut inbox = h.transport.start_attempt(0, 1);
    h.coordinator
        .execution_attempt_ready(0, 1, h.transport.gateway(0, 1))
        .await
        .unwrap();
    let direct = h.coordinator.direct_event_handler().unwrap();
    let stats = |k: u32| ToCoordinator::Statistics {
        checkpoint: 1,
        downstream_parallelism: 2,
        statistics: LocalStatistics::Map([(k, 1u64)].into_iter().collect()),
    };
    // The old attempt's statistics would complete the aggregation: they are dropped.
    direct(0, 0, encode_event(&stats(7)).unwrap()).unwrap();
    h.coordinator.flush().await.unwrap();
    assert!(inbox.try_recv().is_none());
    direct(0, 1, encode_event(&stats(8)).unwrap()).unwrap();
    h.coordinator.flush().await.unwrap();
    let ToOperator::Statistics { statistics, .. } =
        decode_event::<ToOperator<u32>>(&inbox.try_recv().unwrap().ack()).unwrap();
    assert_eq!(assignment(&statistics), vec![(8, vec![0])]);
    h.close().await;
}

#[tokio::test]
async fn auto_statistics_become_range_bounds_beyond_the_coordinator_threshold() {
    let config = RangeShuffleConfig::default().switch_thresholds(10_000, 3);
    let mut h = Harness::start(2, config, None).await;
    h.statistics(0, 1, &[(10, 1), (20, 1)]).await;
    h.statistics(1, 1, &[(30, 1), (40, 1)]).await; // 4 keys > 3
    let (g, _) = h.received(0).remove(0);
    // 4 samples over 2 subtasks: step 2, one bound at the second sample.
    assert_eq!(g.routing, Routing::Sketch(vec![20]));
    // The next aggregation is a sketch from the start, even of maps.
    h.statistics(0, 2, &[(1, 1)]).await;
    h.statistics(1, 2, &[(2, 1)]).await;
    assert_eq!(
        h.received(1).pop().unwrap().0.kind(),
        StatisticsType::Sketch
    );
    h.close().await;
}

#[tokio::test]
async fn a_subtask_that_is_not_ready_misses_the_broadcast_without_failing_the_job() {
    let mut h = Harness::start(2, RangeShuffleConfig::default(), None).await;
    h.statistics(0, 1, &[(1, 1)]).await;
    h.coordinator
        .execution_attempt_failed(1, 0, None)
        .await
        .unwrap();
    // Subtask 1's statistics arrived before it failed (the master would drop later ones).
    h.statistics(1, 1, &[(2, 1)]).await;
    assert_eq!(h.received(0).len(), 1);
    assert!(h.received(1).is_empty());
    h.close().await;
}
