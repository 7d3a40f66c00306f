//! Helpers shared by the integration tests: a permit-gated operator, a live-instance counter and
//! a watermark recorder.
//!
//! Each test binary uses a different subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use sluice_runtime::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::PollSemaphore;

/// What a [`Gate`] holds back, in arrival order.
#[derive(Clone, Debug)]
enum Held<T> {
    Record(T),
    Watermark(Watermark),
}

/// Passes one record per permit of a shared semaphore, in order, and never blocks a thread.
///
/// While a record waits for its permit the gate reports its input blocked, so its task stops
/// reading: a gate with no permits is a sink that consumes nothing. Watermarks keep their place
/// behind the records held before them. Every record let through is counted in `passed` and
/// published on `progress` (so a test can wait for a count instead of sleeping).
#[derive(Clone)]
pub struct Gate<T> {
    permits: PollSemaphore,
    queue: VecDeque<Held<T>>,
    passed: Arc<AtomicU64>,
    progress: Arc<watch::Sender<u64>>,
}

/// The test's side of a [`Gate`]: grant permits, read and await the count of records let through.
#[derive(Clone)]
pub struct GateControl {
    semaphore: Arc<Semaphore>,
    passed: Arc<AtomicU64>,
    progress: watch::Receiver<u64>,
}

impl<T> Gate<T> {
    /// A gate with no permit yet, and its control.
    pub fn new() -> (Self, GateControl) {
        let semaphore = Arc::new(Semaphore::new(0));
        let passed = Arc::new(AtomicU64::new(0));
        let (tx, rx) = watch::channel(0);
        let gate = Gate {
            permits: PollSemaphore::new(semaphore.clone()),
            queue: VecDeque::new(),
            passed: passed.clone(),
            progress: Arc::new(tx),
        };
        let control = GateControl {
            semaphore,
            passed,
            progress: rx,
        };
        (gate, control)
    }
}

impl GateControl {
    /// Lets `n` more records through.
    pub fn release(&self, n: usize) {
        self.semaphore.add_permits(n);
    }

    /// Records let through so far (over every subtask of the gate).
    pub fn passed(&self) -> u64 {
        self.passed.load(Ordering::SeqCst)
    }

    /// The shared counter behind [`passed`](GateControl::passed).
    pub fn passed_counter(&self) -> Arc<AtomicU64> {
        self.passed.clone()
    }

    /// Waits until at least `n` records were let through.
    pub async fn wait_passed(&mut self, n: u64) {
        self.progress
            .wait_for(|p| *p >= n)
            .await
            .expect("the gate was dropped before letting enough records through");
    }
}

impl<T: Data> Operator<T> for Gate<T> {
    type Out = T;

    fn process_batch(&mut self, batch: Vec<T>, _out: &mut Collector<T>) -> Result<(), UserError> {
        self.queue.extend(batch.into_iter().map(Held::Record));
        Ok(())
    }

    fn process_watermark(
        &mut self,
        w: Watermark,
        _out: &mut Collector<T>,
    ) -> Result<(), UserError> {
        self.queue.push_back(Held::Watermark(w));
        Ok(())
    }

    fn poll_pending(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Collector<T>,
    ) -> Poll<Result<(), UserError>> {
        let mut passed = 0;
        loop {
            match self.queue.front() {
                None => break,
                Some(Held::Watermark(_)) => {
                    if let Some(Held::Watermark(w)) = self.queue.pop_front() {
                        out.emit_watermark(w);
                    }
                }
                Some(Held::Record(_)) => match self.permits.poll_acquire(cx) {
                    Poll::Ready(Some(permit)) => {
                        permit.forget();
                        if let Some(Held::Record(r)) = self.queue.pop_front() {
                            out.collect(r);
                            passed += 1;
                        }
                    }
                    Poll::Ready(None) => return Poll::Ready(Err("the gate was closed".into())),
                    Poll::Pending => break,
                },
            }
        }
        if passed > 0 {
            self.passed.fetch_add(passed, Ordering::SeqCst);
            self.progress.send_modify(|p| *p += passed);
        }
        if out.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    }

    fn has_pending(&self) -> bool {
        !self.queue.is_empty()
    }

    fn is_input_blocked(&self) -> bool {
        !self.queue.is_empty()
    }
}

/// Counts live instances of whatever holds one of its guards (operators, generator closures),
/// and the most that were ever alive at once.
#[derive(Clone, Default)]
pub struct LiveCounter {
    live: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl LiveCounter {
    /// A new counter with nothing alive.
    pub fn new() -> Self {
        Self::default()
    }

    /// A guard counted as alive until dropped; each clone counts once more.
    pub fn guard(&self) -> LiveGuard {
        LiveGuard::new(self.clone())
    }

    /// Guards alive now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// The most guards alive at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// One live instance, see [`LiveCounter`].
pub struct LiveGuard {
    counter: LiveCounter,
}

impl LiveGuard {
    fn new(counter: LiveCounter) -> Self {
        let now = counter.live.fetch_add(1, Ordering::SeqCst) + 1;
        counter.peak.fetch_max(now, Ordering::SeqCst);
        LiveGuard { counter }
    }
}

impl Clone for LiveGuard {
    fn clone(&self) -> Self {
        LiveGuard::new(self.counter.clone())
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.counter.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An operator that passes everything through and keeps a [`LiveGuard`] per instance.
pub struct Guarded<T> {
    _guard: LiveGuard,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> Guarded<T> {
    /// A pass-through operator counted by `counter`.
    pub fn new(counter: &LiveCounter) -> Self {
        Guarded {
            _guard: counter.guard(),
            _t: std::marker::PhantomData,
        }
    }
}

impl<T> Clone for Guarded<T> {
    fn clone(&self) -> Self {
        Guarded {
            _guard: self._guard.clone(),
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: Data> Operator<T> for Guarded<T> {
    type Out = T;
    fn process_batch(&mut self, batch: Vec<T>, out: &mut Collector<T>) -> Result<(), UserError> {
        out.emit_batch(batch);
        Ok(())
    }
}

/// What a [`WatermarkRecorder`] saw: one entry per watermark, in order, per subtask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenWatermark {
    /// The recording subtask.
    pub subtask: usize,
    /// The watermark.
    pub watermark: Watermark,
    /// Records this subtask had seen before the watermark.
    pub records_before: u64,
    /// When it arrived (tokio's clock, so virtual under a paused clock).
    pub at: tokio::time::Instant,
}

/// Passes records through and logs every watermark it is given into a shared log and, when
/// configured, into a bounded channel a test can await.
#[derive(Clone)]
pub struct WatermarkRecorder<T> {
    subtask: usize,
    records: u64,
    log: Arc<Mutex<Vec<SeenWatermark>>>,
    end_counts: Arc<Mutex<Vec<(usize, u64)>>>,
    notify: Option<mpsc::Sender<SeenWatermark>>,
    _t: std::marker::PhantomData<fn() -> T>,
}

/// The test's side of a [`WatermarkRecorder`].
#[derive(Clone)]
pub struct WatermarkLog {
    log: Arc<Mutex<Vec<SeenWatermark>>>,
    end_counts: Arc<Mutex<Vec<(usize, u64)>>>,
}

impl WatermarkLog {
    /// Everything recorded, in order of arrival over all subtasks.
    pub fn seen(&self) -> Vec<SeenWatermark> {
        self.log.lock().unwrap().clone()
    }

    /// The watermarks subtask `s` saw, in order.
    pub fn of_subtask(&self, s: usize) -> Vec<Watermark> {
        self.seen()
            .into_iter()
            .filter(|w| w.subtask == s)
            .map(|w| w.watermark)
            .collect()
    }

    /// (subtask, records seen in total) for every subtask that reached end of input.
    pub fn end_counts(&self) -> Vec<(usize, u64)> {
        let mut v = self.end_counts.lock().unwrap().clone();
        v.sort();
        v
    }
}

impl<T> WatermarkRecorder<T> {
    /// A recorder and its log.
    pub fn new() -> (Self, WatermarkLog) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let end_counts = Arc::new(Mutex::new(Vec::new()));
        let rec = WatermarkRecorder {
            subtask: 0,
            records: 0,
            log: log.clone(),
            end_counts: end_counts.clone(),
            notify: None,
            _t: std::marker::PhantomData,
        };
        (rec, WatermarkLog { log, end_counts })
    }

    /// Also sends every watermark into a bounded channel (capacity `capacity`); a full channel
    /// fails the job rather than block.
    pub fn with_channel(mut self, capacity: usize) -> (Self, mpsc::Receiver<SeenWatermark>) {
        let (tx, rx) = mpsc::channel(capacity);
        self.notify = Some(tx);
        (self, rx)
    }
}

impl<T: Data> Operator<T> for WatermarkRecorder<T> {
    type Out = T;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.subtask = ctx.subtask_index();
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<T>, out: &mut Collector<T>) -> Result<(), UserError> {
        self.records += batch.len() as u64;
        out.emit_batch(batch);
        Ok(())
    }

    fn process_watermark(&mut self, w: Watermark, out: &mut Collector<T>) -> Result<(), UserError> {
        let seen = SeenWatermark {
            subtask: self.subtask,
            watermark: w,
            records_before: self.records,
            at: tokio::time::Instant::now(),
        };
        self.log
            .lock()
            .map_err(|_| "watermark log poisoned")?
            .push(seen.clone());
        if let Some(tx) = &self.notify {
            tx.try_send(seen)
                .map_err(|e| format!("the test stopped reading watermarks: {e}"))?;
        }
        out.emit_watermark(w);
        Ok(())
    }

    fn end_input(&mut self, _out: &mut Collector<T>) -> Result<(), UserError> {
        self.end_counts
            .lock()
            .map_err(|_| "end count log poisoned")?
            .push((self.subtask, self.records));
        Ok(())
    }
}
