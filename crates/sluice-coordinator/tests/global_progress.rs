//! A small real user of the API: a "global progress" coordinator. Every subtask reports its
//! processed count at each checkpoint; once all have reported, the coordinator broadcasts the
//! total. The test plays the job master (with the [`LiveAttempts`] filter) and the subtasks,
//! failing random subtasks, and checks that the total never counts a report twice.

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use sluice_coordinator::gateway::memory::{InMemoryTransport, SubtaskInbox};
use sluice_coordinator::*;
use sluice_core::{AttemptNumber, CheckpointId, NodeId, OperatorEvent, SubtaskIndex};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Progress {
    /// Subtask → coordinator: processed so far, as of checkpoint `checkpoint`.
    Report { checkpoint: u64, processed: u64 },
    /// Coordinator → subtasks: the job-wide total as of `checkpoint`.
    Total { checkpoint: u64, total: u64 },
}

// ----- the coordinator: the API in about 50 lines ------------------------------------------

#[derive(Default)]
struct Tally {
    reports: BTreeMap<u64, BTreeMap<SubtaskIndex, u64>>,
    total: u64,
    as_of: u64,
}

struct GlobalProgress {
    base: CoordinatorContextBase,
    tally: Arc<Mutex<Tally>>, // touched only on the coordinator thread
}

impl GlobalProgress {
    /// Runs on the coordinator thread: record a report (a repeated one replaces the earlier
    /// one, so a restarted subtask is never counted twice), broadcast when complete. A report
    /// for a round already complete comes from a restarted subtask: it gets the total again.
    fn on_report(
        base: &CoordinatorContextBase,
        tally: &Mutex<Tally>,
        s: SubtaskIndex,
        e: OperatorEvent,
    ) -> Result<(), sluice_core::UserError> {
        let Progress::Report {
            checkpoint,
            processed,
        } = decode_event(&e)?
        else {
            return Err("unexpected event".into());
        };
        let mut t = tally.lock().map_err(|_| "poisoned")?;
        if checkpoint <= t.as_of {
            let again = Progress::Total {
                checkpoint: t.as_of,
                total: t.total,
            };
            let _ack = base.send_event_to_operator(s, encode_event(&again)?);
            return Ok(());
        }
        let round = t.reports.entry(checkpoint).or_default();
        round.insert(s, processed);
        if round.len() == base.parallelism() {
            let total = round.values().sum();
            (t.total, t.as_of) = (total, checkpoint);
            t.reports.retain(|c, _| *c > checkpoint);
            let msg = encode_event(&Progress::Total { checkpoint, total })?;
            for s in (0..base.parallelism()).filter(|s| base.is_subtask_ready(*s)) {
                let _ack = base.send_event_to_operator(s, msg.clone()); // inline on this thread
            }
        }
        Ok(())
    }

    /// Gateway changes go through the event loop too, so they stay ordered with the events.
    fn in_loop(
        &self,
        name: &'static str,
        f: impl FnOnce(&CoordinatorContextBase) -> Result<(), sluice_core::UserError> + Send + 'static,
    ) -> CoordinatorFuture<'_> {
        let base = self.base.clone();
        Box::pin(self.base.run_in_event_loop_async(move || f(&base), name))
    }
}

impl OperatorCoordinator for GlobalProgress {
    fn start(&mut self) -> CoordinatorFuture<'_> {
        self.base.mark_started();
        done(Ok(()))
    }
    fn close(&mut self) -> CoordinatorFuture<'_> {
        self.base.close();
        Box::pin(async move {
            self.base.terminated().await;
            Ok(())
        })
    }
    fn handle_event_from_operator(
        &mut self,
        s: SubtaskIndex,
        _a: AttemptNumber,
        e: OperatorEvent,
    ) -> CoordinatorFuture<'_> {
        let (base, tally) = (self.base.clone(), self.tally.clone());
        Box::pin(self.base.run_in_event_loop_async(
            move || Self::on_report(&base, &tally, s, e),
            "handle a progress report",
        ))
    }
    fn checkpoint_coordinator(
        &mut self,
        _id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_> {
        let tally = self.tally.clone();
        let snapshot = move || {
            let total = tally.lock().map_err(|_| "poisoned")?.total;
            result.complete(sluice_core::codec::encode(&total)?);
            Ok(())
        };
        Box::pin(
            self.base
                .run_in_event_loop_async(snapshot, "checkpoint the total"),
        )
    }
    fn notify_checkpoint_complete(&mut self, _id: CheckpointId) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }
    fn reset_to_checkpoint(
        &mut self,
        _id: CheckpointId,
        state: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_> {
        let total = state
            .map(|b| sluice_core::codec::decode::<u64>(&b))
            .transpose();
        done(total.map_err(CoordinatorError::user).map(|t| {
            *self.tally.lock().unwrap() = Tally {
                total: t.unwrap_or(0),
                ..Tally::default()
            }
        }))
    }
    fn subtask_reset(&mut self, s: SubtaskIndex, _id: CheckpointId) -> CoordinatorFuture<'_> {
        self.in_loop("subtask reset", move |b| {
            b.subtask_not_ready(s);
            Ok(())
        })
    }
    fn execution_attempt_failed(
        &mut self,
        s: SubtaskIndex,
        a: AttemptNumber,
        _r: Option<String>,
    ) -> CoordinatorFuture<'_> {
        self.in_loop("attempt failed", move |b| {
            b.attempt_not_ready(s, a);
            Ok(())
        })
    }
    fn execution_attempt_ready(
        &mut self,
        _s: SubtaskIndex,
        _a: AttemptNumber,
        g: SubtaskGateway,
    ) -> CoordinatorFuture<'_> {
        self.in_loop("attempt ready", move |b| Ok(b.subtask_ready(g)?))
    }
}

// ----- the test: job master and subtasks -------------------------------------------------

const PARALLELISM: usize = 3;

struct Subtask {
    attempt: AttemptNumber,
    inbox: SubtaskInbox,
}

async fn next_total(inbox: &mut SubtaskInbox) -> (u64, u64) {
    let event = inbox.recv().await.expect("the subtask is running").ack();
    match decode_event(&event).unwrap() {
        Progress::Total { checkpoint, total } => (checkpoint, total),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_never_double_counts_under_random_subtask_failures() {
    let failures = common::Failures::new();
    let context = CoordinatorContext::new("progress", NodeId(1), PARALLELISM, failures.hook());
    let provider =
        |ctx: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
            Ok(Box::new(GlobalProgress {
                base: CoordinatorContextBase::new(ctx)?,
                tally: Default::default(),
            }))
        };
    let mut coordinator = provider.create(context).unwrap();
    let transport = InMemoryTransport::new(64);
    let mut live = LiveAttempts::new(PARALLELISM);
    let mut rng = StdRng::seed_from_u64(7);

    coordinator.start().await.unwrap();
    let mut subtasks = Vec::new();
    for s in 0..PARALLELISM {
        let inbox = transport.start_attempt(s, 0);
        live.attempt_ready(s, 0);
        coordinator
            .execution_attempt_ready(s, 0, transport.gateway(s, 0))
            .await
            .unwrap();
        subtasks.push(Subtask { attempt: 0, inbox });
    }

    for checkpoint in 1..=40u64 {
        // Subtask s has processed `checkpoint * 10 + s` records so far.
        let processed = |s: usize| checkpoint * 10 + s as u64;
        for (s, subtask) in subtasks.iter_mut().enumerate() {
            let report = encode_event(&Progress::Report {
                checkpoint,
                processed: processed(s),
            })
            .unwrap();
            let attempt = subtask.attempt;
            if live.admit(s, attempt) {
                coordinator
                    .handle_event_from_operator(s, attempt, report.clone())
                    .await
                    .unwrap();
            }
            if rng.random_bool(0.2) {
                // The attempt fails after reporting; its late duplicate report is dropped by
                // the job master, and the restarted attempt reports again.
                transport.stop_attempt(s, attempt);
                live.attempt_failed(s, attempt);
                coordinator
                    .execution_attempt_failed(s, attempt, Some("injected".into()))
                    .await
                    .unwrap();
                coordinator
                    .subtask_reset(s, CheckpointId(checkpoint - 1))
                    .await
                    .unwrap();
                assert!(
                    !live.admit(s, attempt),
                    "a late report of the failed attempt is dropped"
                );
                let next = attempt + 1;
                *subtask = Subtask {
                    attempt: next,
                    inbox: transport.start_attempt(s, next),
                };
                live.attempt_ready(s, next);
                coordinator
                    .execution_attempt_ready(s, next, transport.gateway(s, next))
                    .await
                    .unwrap();
                coordinator
                    .handle_event_from_operator(s, next, report)
                    .await
                    .unwrap();
            }
        }
        let expected: u64 = (0..PARALLELISM).map(processed).sum();
        for sub in &mut subtasks {
            assert_eq!(next_total(&mut sub.inbox).await, (checkpoint, expected));
        }
    }

    let (result, state) = CheckpointResult::new(CheckpointId(41));
    coordinator
        .checkpoint_coordinator(CheckpointId(41), result)
        .await
        .unwrap();
    let total: u64 = sluice_core::codec::decode(&state.await.unwrap()).unwrap();
    assert_eq!(total, 40 * 10 * PARALLELISM as u64 + 3);
    assert!(failures.messages().is_empty(), "{:?}", failures.messages());
    coordinator.close().await.unwrap();
}
