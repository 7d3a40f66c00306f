//! The sluice side of the coordinator scenario: real jobs whose operator talks to its
//! coordinator.
//!
//! - [`round_trip`]: one subtask sends event `i` to the coordinator, which sends it back; on the
//!   reply (`handle_operator_event`) the subtask times the round trip with `Instant` and sends
//!   `i + 1`. The source is empty, so the subtask's input ends at once; the operator reports
//!   pending work until the last reply, which keeps the task alive and answering events.
//! - [`broadcast`]: every subtask announces itself; once all have, the coordinator sends events
//!   `0..n` to each of them, round robin, from its thread. Each subtask checks the order, counts,
//!   and notes when its last event arrived.

use super::scripted::{Handler, provider};
use sluice::coordinator::{decode_event, encode_event};
use sluice::core::OperatorEvent;
use sluice::core::sync::lock;
use sluice::prelude::*;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn environment(parallelism: usize) -> StreamEnvironment {
    let env = StreamEnvironment::new();
    env.set_parallelism(parallelism);
    env
}

/// The operator of [`round_trip`].
#[derive(Clone)]
struct PingPong {
    rounds: u64,
    done: u64,
    sent_at: Option<Instant>,
    samples: Vec<Duration>,
    ctx: Option<OperatorContext>,
    out: Arc<Mutex<Vec<Duration>>>,
}

impl PingPong {
    fn ping(&mut self) -> Result<(), UserError> {
        let ctx = self.ctx.as_ref().ok_or("ping before open")?;
        self.sent_at = Some(Instant::now());
        ctx.send_to_coordinator(&self.done)
    }
}

impl Operator<u64> for PingPong {
    type Out = u64;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.ctx = Some(ctx.clone());
        self.samples = Vec::with_capacity(usize::try_from(self.rounds).unwrap_or(0));
        if self.rounds > 0 {
            self.ping()?;
        }
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        out.emit_batch(batch);
        Ok(())
    }

    fn handle_operator_event(
        &mut self,
        event: OperatorEvent,
        _out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        let now = Instant::now();
        let echoed: u64 = decode_event(&event)?;
        let sent = self.sent_at.take().ok_or("a reply without a ping")?;
        if echoed != self.done {
            return Err(format!("expected reply {}, got {echoed}", self.done).into());
        }
        self.samples.push(now - sent);
        self.done += 1;
        if self.done < self.rounds {
            self.ping()?;
        }
        Ok(())
    }

    fn has_pending(&self) -> bool {
        self.done < self.rounds
    }

    fn close(&mut self) -> Result<(), UserError> {
        *lock(&self.out) = std::mem::take(&mut self.samples);
        Ok(())
    }
}

/// `rounds` round trips subtask -> coordinator -> subtask in one job at parallelism 1; returns
/// each round trip's time, in order.
pub async fn round_trip(rounds: u64) -> anyhow::Result<Vec<Duration>> {
    let env = environment(1);
    let out = Arc::new(Mutex::new(Vec::new()));
    // The coordinator sends every event straight back to the subtask it came from.
    let echo: Handler = Arc::new(|base, subtask, event| {
        drop(base.send_event_to_operator(subtask, event));
        Ok(())
    });
    env.from_generator(Generator::new(|i| i).take(0))
        .transform_with_coordinator(
            "PingPong",
            PingPong {
                rounds,
                done: 0,
                sent_at: None,
                samples: Vec::new(),
                ctx: None,
                out: out.clone(),
            },
            provider(echo),
        )
        .discard();
    env.execute("coordinator-round-trip").await?;
    let samples = std::mem::take(&mut *lock(&out));
    anyhow::ensure!(
        samples.len() as u64 == rounds,
        "{} round trips measured, expected {rounds}",
        samples.len()
    );
    Ok(samples)
}

/// The operator of [`broadcast`].
#[derive(Clone)]
struct Counter {
    expected: u64,
    received: u64,
    sum: u64,
    shared: Arc<BroadcastShared>,
}

/// What the broadcast job's coordinator and subtasks share with the driver.
#[derive(Default)]
struct BroadcastShared {
    /// Subtasks that announced themselves.
    announced: AtomicUsize,
    /// When the coordinator sent its first event.
    first_send: Mutex<Option<Instant>>,
    /// When each subtask received its last event.
    last_receive: Mutex<Vec<Instant>>,
    /// The sum of every received event's index.
    sum: AtomicU64,
}

impl Operator<u64> for Counter {
    type Out = u64;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        if self.expected == 0 {
            lock(&self.shared.last_receive).push(Instant::now());
        }
        ctx.send_to_coordinator(&())
    }

    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        out.emit_batch(batch);
        Ok(())
    }

    fn handle_operator_event(
        &mut self,
        event: OperatorEvent,
        _out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        let i: u64 = decode_event(&event)?;
        if i != self.received {
            return Err(format!("expected event {}, got {i}", self.received).into());
        }
        self.received += 1;
        self.sum = self.sum.wrapping_add(i);
        if self.received == self.expected {
            lock(&self.shared.last_receive).push(Instant::now());
            self.shared.sum.fetch_add(self.sum, Ordering::Relaxed);
        }
        Ok(())
    }

    fn has_pending(&self) -> bool {
        self.received < self.expected
    }
}

/// The coordinator sends `per_subtask` events to each of `parallelism` subtasks; returns the time
/// from its first send to the last receive, and the sum of all received indices.
pub async fn broadcast(parallelism: usize, per_subtask: u64) -> anyhow::Result<(Duration, u64)> {
    let env = environment(parallelism);
    let shared = Arc::new(BroadcastShared::default());
    let s = shared.clone();
    let send_all: Handler = Arc::new(move |base, _subtask, _hello| {
        let p = base.parallelism();
        if s.announced.fetch_add(1, Ordering::Relaxed) + 1 < p {
            return Ok(());
        }
        *lock(&s.first_send) = Some(Instant::now());
        for i in 0..per_subtask {
            let event = encode_event(&i)?;
            for subtask in 0..p {
                drop(base.send_event_to_operator(subtask, event.clone()));
            }
        }
        Ok(())
    });
    env.from_generator(Generator::new(|i| i).take(0))
        .transform_with_coordinator(
            "Counter",
            Counter {
                expected: per_subtask,
                received: 0,
                sum: 0,
                shared: shared.clone(),
            },
            provider(send_all),
        )
        .discard();
    env.execute("coordinator-broadcast").await?;
    let first = lock(&shared.first_send).ok_or_else(|| anyhow::anyhow!("nothing was sent"))?;
    let receives = lock(&shared.last_receive).clone();
    anyhow::ensure!(
        receives.len() == parallelism,
        "{} of {parallelism} subtasks received everything",
        receives.len()
    );
    let last = receives.into_iter().max().unwrap_or(first);
    Ok((
        last.saturating_duration_since(first),
        shared.sum.load(Ordering::Relaxed),
    ))
}
