//! Helpers shared by the integration tests: a job-failure hook that records failures and lets
//! a test wait for them.

#![allow(dead_code)]

use sluice_coordinator::{CoordinatorContext, CoordinatorContextBase, JobFailureHook};
use sluice_core::NodeId;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// Records job failures; tests wait on it instead of sleeping.
#[derive(Default)]
pub struct Failures {
    messages: Mutex<Vec<String>>,
    changed: Notify,
}

impl Failures {
    pub fn new() -> Arc<Self> {
        Arc::new(Failures::default())
    }

    pub fn hook(self: &Arc<Self>) -> JobFailureHook {
        let me = self.clone();
        JobFailureHook::new(move |f| {
            me.messages.lock().unwrap().push(f.to_string());
            me.changed.notify_waiters();
        })
    }

    pub fn messages(&self) -> Vec<String> {
        self.messages.lock().unwrap().clone()
    }

    /// Waits until at least `n` failures were reported.
    pub async fn wait_for(&self, n: usize) -> Vec<String> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = self.messages();
            if now.len() >= n {
                return now;
            }
            notified.await;
        }
    }
}

/// A context and a base for operator `name` with `parallelism` subtasks.
pub fn base(name: &str, parallelism: usize) -> (CoordinatorContextBase, Arc<Failures>) {
    let failures = Failures::new();
    let context = CoordinatorContext::new(name, NodeId(7), parallelism, failures.hook());
    (CoordinatorContextBase::new(context).unwrap(), failures)
}
