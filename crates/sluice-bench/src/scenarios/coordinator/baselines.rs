//! The baselines of the coordinator scenario: bare bounded tokio channels between the same kinds
//! of threads the coordinator path uses, and nothing else (no job master hop, no gateway, no
//! valve, no encoding).
//!
//! - round trip: a tokio task on the bench runtime sends `i` to a plain thread (the stand-in for
//!   the coordinator thread), which sends it back; for comparison, the same through a relay task
//!   first (the hops of a coordinator event), and a ping-pong between two tokio tasks;
//! - broadcast: a plain thread sends `0..n` to each of `p` tokio tasks, round robin, over one
//!   channel each with the capacity of a sluice task's mailbox.

use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

/// The capacity of a sluice task's mailbox (`CONTROL_CAPACITY` in the runtime's deploy step).
const MAILBOX_CAPACITY: usize = 16;

/// Sends from a plain thread as a sluice coordinator thread does: `try_send`, and only when the
/// channel is full, a blocking send.
fn send_from_thread(tx: &mpsc::Sender<u64>, value: u64) -> Result<(), ()> {
    match tx.try_send(value) {
        Ok(()) => Ok(()),
        Err(mpsc::error::TrySendError::Full(v)) => tx.blocking_send(v).map_err(drop),
        Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
    }
}

/// Times `rounds` round trips from a task on `rt` through `echo` (which owns the other ends).
fn ping_pong(
    rt: &Runtime,
    rounds: u64,
    to_echo: mpsc::Sender<u64>,
    mut replies: mpsc::Receiver<u64>,
) -> anyhow::Result<Vec<Duration>> {
    rt.block_on(rt.spawn(async move {
        let mut samples = Vec::with_capacity(usize::try_from(rounds).unwrap_or(0));
        for i in 0..rounds {
            let sent = Instant::now();
            to_echo.send(i).await?;
            let echoed = replies.recv().await;
            samples.push(sent.elapsed());
            anyhow::ensure!(echoed == Some(i), "expected {i}, got {echoed:?}");
        }
        Ok(samples)
    }))?
}

/// Round trips between a tokio task and a plain thread.
pub fn round_trip_thread(rt: &Runtime, rounds: u64) -> anyhow::Result<Vec<Duration>> {
    let (to_echo, mut requests) = mpsc::channel::<u64>(MAILBOX_CAPACITY);
    let (to_task, replies) = mpsc::channel::<u64>(MAILBOX_CAPACITY);
    let echo = std::thread::Builder::new()
        .name("bench-echo".into())
        .spawn(move || {
            while let Some(i) = requests.blocking_recv() {
                if send_from_thread(&to_task, i).is_err() {
                    break;
                }
            }
        })?;
    let samples = ping_pong(rt, rounds, to_echo, replies);
    echo.join()
        .map_err(|_| anyhow::anyhow!("the echo thread panicked"))?;
    samples
}

/// Round trips through the same hops as a coordinator event (operator task -> job master task ->
/// coordinator thread -> operator task): a relay task forwards each value to a plain thread,
/// which answers the first task directly.
pub fn round_trip_relay(rt: &Runtime, rounds: u64) -> anyhow::Result<Vec<Duration>> {
    let (to_relay, mut relay_in) = mpsc::channel::<u64>(MAILBOX_CAPACITY);
    let (to_thread, mut requests) = mpsc::channel::<u64>(MAILBOX_CAPACITY);
    let (to_task, replies) = mpsc::channel::<u64>(MAILBOX_CAPACITY);
    let relay = rt.spawn(async move {
        while let Some(i) = relay_in.recv().await {
            if to_thread.send(i).await.is_err() {
                break;
            }
        }
    });
    let echo = std::thread::Builder::new()
        .name("bench-echo".into())
        .spawn(move || {
            while let Some(i) = requests.blocking_recv() {
                if send_from_thread(&to_task, i).is_err() {
                    break;
                }
            }
        })?;
    let samples = ping_pong(rt, rounds, to_relay, replies);
    rt.block_on(relay)?;
    echo.join()
        .map_err(|_| anyhow::anyhow!("the echo thread panicked"))?;
    samples
}

/// Round trips between two tokio tasks on `rt`.
pub fn round_trip_tasks(rt: &Runtime, rounds: u64) -> anyhow::Result<Vec<Duration>> {
    let (to_echo, mut requests) = mpsc::channel::<u64>(MAILBOX_CAPACITY);
    let (to_task, replies) = mpsc::channel::<u64>(MAILBOX_CAPACITY);
    let echo = rt.spawn(async move {
        while let Some(i) = requests.recv().await {
            if to_task.send(i).await.is_err() {
                break;
            }
        }
    });
    let samples = ping_pong(rt, rounds, to_echo, replies);
    rt.block_on(echo)?;
    samples
}

/// A plain thread sends `per_subtask` values to each of `parallelism` tasks on `rt`; returns the
/// time from the first send to the last receive, and the sum of all received values.
pub fn broadcast(
    rt: &Runtime,
    parallelism: usize,
    per_subtask: u64,
) -> anyhow::Result<(Duration, u64)> {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..parallelism)
        .map(|_| mpsc::channel::<u64>(MAILBOX_CAPACITY))
        .unzip();
    let counters: Vec<_> = receivers
        .into_iter()
        .map(|mut rx| {
            rt.spawn(async move {
                let (mut received, mut sum) = (0u64, 0u64);
                while received < per_subtask {
                    let i = rx.recv().await;
                    anyhow::ensure!(i == Some(received), "expected {received}, got {i:?}");
                    received += 1;
                    sum = sum.wrapping_add(received - 1);
                }
                Ok((Instant::now(), sum))
            })
        })
        .collect();
    let sender = std::thread::Builder::new()
        .name("bench-broadcast".into())
        .spawn(move || {
            let first = Instant::now();
            for i in 0..per_subtask {
                for tx in &senders {
                    if send_from_thread(tx, i).is_err() {
                        return first;
                    }
                }
            }
            first
        })?;
    let mut last = None::<Instant>;
    let mut total = 0u64;
    for c in counters {
        let (at, sum) = rt.block_on(c)??;
        last = Some(last.map_or(at, |l| l.max(at)));
        total = total.wrapping_add(sum);
    }
    let first = sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sending thread panicked"))?;
    let last = last.unwrap_or(first);
    Ok((last.saturating_duration_since(first), total))
}
