//! [`InputGate`]: a pass-through that stops taking input after a number of records per subtask,
//! to hold a job mid-way (its sources backpressured, checkpoints still flowing) until a test
//! takes a savepoint or cancels it.

use crate::operator::{Collector, Operator};
use sluice_core::{Data, UserError};
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;

/// Passes records on until its subtask has seen `limit`, then reads no more input
/// (`is_input_blocked`), so the job stops mid-way while barriers and checkpoints go on.
/// [`all_closed`](Self::all_closed) is notified once every one of `parallelism` subtasks closed.
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::testing::InputGate;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1);
/// let gate = InputGate::<u64>::new(100, 1);
/// let closed = gate.all_closed();
/// let _out = env.from_iter(0u64..10_000).process(gate).collect();
/// let job = env.submit("held").unwrap();
/// closed.notified().await; // the job now holds, mid-way
/// job.cancel();
/// assert!(job.await.is_err());
/// # });
/// ```
pub struct InputGate<T> {
    limit: u64,
    seen: u64,
    closed: bool,
    parallelism: usize,
    count: Arc<AtomicUsize>,
    all_closed: Arc<Notify>,
    _t: PhantomData<fn(T)>,
}

impl<T> Clone for InputGate<T> {
    fn clone(&self) -> Self {
        InputGate {
            limit: self.limit,
            seen: 0,
            closed: false,
            parallelism: self.parallelism,
            count: self.count.clone(),
            all_closed: self.all_closed.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> InputGate<T> {
    /// A gate closing after `limit` records in each of `parallelism` subtasks (`u64::MAX`: never).
    pub fn new(limit: u64, parallelism: usize) -> Self {
        InputGate {
            limit,
            seen: 0,
            closed: false,
            parallelism,
            count: Arc::default(),
            all_closed: Arc::default(),
            _t: PhantomData,
        }
    }

    /// Notified once every subtask's gate closed.
    pub fn all_closed(&self) -> Arc<Notify> {
        self.all_closed.clone()
    }
}

impl<T: Data> Operator<T> for InputGate<T> {
    type Out = T;

    fn process_batch(&mut self, batch: Vec<T>, out: &mut Collector<T>) -> Result<(), UserError> {
        self.seen += batch.len() as u64;
        out.forward_batch(batch);
        if self.seen >= self.limit && !self.closed {
            self.closed = true;
            if self.count.fetch_add(1, Ordering::SeqCst) + 1 == self.parallelism {
                self.all_closed.notify_one();
            }
        }
        Ok(())
    }

    fn is_input_blocked(&self) -> bool {
        self.closed
    }
}
