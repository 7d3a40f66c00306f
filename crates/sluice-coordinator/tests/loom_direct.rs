//! Loom model of [`DirectSlot`], the subtasks' direct path to their coordinator's thread: a
//! subtask offering events while the job master installs and then removes the handler (as it
//! does around a failover), over every interleaving.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p sluice-coordinator --test loom_direct
//! --release` (see `.ci/run`); without the cfg this file is empty.

#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;
use sluice_coordinator::{DirectEventHandler, DirectSlot};
use sluice_core::OperatorEvent;

/// Every event is either handled once or given back (for the master's path), the path is open
/// only between install and removal, and once `set(None)` returns the handler is never called
/// again.
#[test]
fn install_and_removal_race_with_offers() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = None;
    builder.check(|| {
        let slot = DirectSlot::default();
        let removed = Arc::new(AtomicBool::new(false));
        let handled = Arc::new(AtomicUsize::new(0));
        let handler: DirectEventHandler = {
            let (removed, handled) = (removed.clone(), handled.clone());
            std::sync::Arc::new(move |_, _, _| {
                assert!(
                    !removed.load(Ordering::SeqCst),
                    "handler called after removal"
                );
                handled.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        };

        let subtask = {
            let slot = slot.clone();
            thread::spawn(move || {
                (0..3u8)
                    .map(|n| slot.offer(0, 0, OperatorEvent::new(vec![n])))
                    .map(|r| match r {
                        Ok(queued) => {
                            queued.unwrap();
                            true
                        }
                        Err(given_back) => {
                            assert_eq!(given_back.payload().len(), 1);
                            false
                        }
                    })
                    .collect::<Vec<bool>>()
            })
        };
        slot.set(Some(handler));
        slot.set(None);
        removed.store(true, Ordering::SeqCst);

        let direct = subtask.join().unwrap();
        let taken = direct.iter().filter(|d| **d).count();
        assert_eq!(handled.load(Ordering::SeqCst), taken);
        // Closed, then open, then closed: never open again after it closed.
        let first = direct.iter().position(|d| *d).unwrap_or(direct.len());
        let last = direct.iter().rposition(|d| *d).map_or(first, |l| l + 1);
        assert!(direct[first..last].iter().all(|d| *d));
    });
}
