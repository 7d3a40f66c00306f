//! [`ValueCaches`]: the bytes of decoded values that the keyed states in front of one state
//! backend's stores may cache, shared among them, so that a memory budget holds however many
//! operators, subtasks and states a process runs.
//!
//! The rule (pure, [`share`]): each state attached to a store may cache
//! `min(per_state, total / states)` bytes, where `states` counts the states attached now. One
//! state alone gets `per_state`; as more attach, each share shrinks so that their sum stays
//! within `total`; as they go, the shares grow back. A state re-reads its share before it
//! loads a key it does not hold and, when the share shrank below what it holds, writes back
//! and drops values first; a state that loads nothing keeps what it holds until it next does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes one of `states` attached states may cache, out of `total` shared, at most
/// `per_state` each.
pub(crate) fn share(total: usize, per_state: usize, states: usize) -> usize {
    per_state.min(total / states.max(1))
}

/// The caches of decoded values of the keyed states of one backend: `total` bytes shared, at
/// most `per_state` bytes each (see the module's rule).
///
/// ```
/// use sluice_runtime::state::ValueCaches;
///
/// // Up to 64 MiB per state, 128 MiB for all of them.
/// let caches = ValueCaches::shared(128 << 20, 64 << 20);
/// assert_eq!(caches.share(), 64 << 20);
/// // A fixed share per state, however many there are (what a plain byte count means).
/// let fixed = ValueCaches::from(1 << 20);
/// assert_eq!(fixed.share(), 1 << 20);
/// ```
#[derive(Clone, Debug)]
pub struct ValueCaches {
    pool: Arc<Pool>,
}

#[derive(Debug)]
struct Pool {
    total: usize,
    per_state: usize,
    /// States attached now.
    states: AtomicUsize,
    /// Bumped when a state attaches or goes, so that the others re-read their share.
    epoch: AtomicU64,
}

impl ValueCaches {
    /// `total` bytes shared by all states, at most `per_state` each.
    pub fn shared(total: usize, per_state: usize) -> Self {
        ValueCaches {
            pool: Arc::new(Pool {
                total,
                per_state,
                states: AtomicUsize::new(0),
                epoch: AtomicU64::new(0),
            }),
        }
    }

    /// `per_state` bytes for each state, however many there are.
    pub fn per_state(per_state: usize) -> Self {
        Self::shared(usize::MAX, per_state)
    }

    /// Bytes one more state would get now.
    pub fn share(&self) -> usize {
        let p = &self.pool;
        share(
            p.total,
            p.per_state,
            p.states.load(Ordering::Relaxed).saturating_add(1),
        )
    }

    /// States attached now.
    pub fn states(&self) -> usize {
        self.pool.states.load(Ordering::Relaxed)
    }

    /// Counts one more state in; its share is counted out when the returned handle drops.
    pub(crate) fn join(&self) -> CacheShare {
        let p = &self.pool;
        p.states.fetch_add(1, Ordering::Relaxed);
        p.epoch.fetch_add(1, Ordering::Release);
        CacheShare {
            pool: self.pool.clone(),
            seen: p.epoch.load(Ordering::Acquire),
        }
    }
}

impl From<usize> for ValueCaches {
    /// A fixed share of `per_state` bytes for each state.
    fn from(per_state: usize) -> Self {
        Self::per_state(per_state)
    }
}

/// One state's place in [`ValueCaches`].
#[derive(Debug)]
pub(crate) struct CacheShare {
    pool: Arc<Pool>,
    /// The pool's epoch when the share was last read.
    seen: u64,
}

impl CacheShare {
    /// Bytes this state may cache now.
    pub(crate) fn bytes(&self) -> usize {
        let p = &self.pool;
        share(p.total, p.per_state, p.states.load(Ordering::Relaxed))
    }

    /// Whether a state attached or went since the last call (one atomic load when not).
    pub(crate) fn changed(&mut self) -> bool {
        let now = self.pool.epoch.load(Ordering::Acquire);
        if now == self.seen {
            return false;
        }
        self.seen = now;
        true
    }
}

impl Drop for CacheShare {
    fn drop(&mut self) {
        self.pool.states.fetch_sub(1, Ordering::Relaxed);
        self.pool.epoch.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_state_gets_its_most_and_many_split_the_total() {
        assert_eq!(share(128, 64, 1), 64);
        assert_eq!(share(128, 64, 2), 64);
        assert_eq!(share(128, 64, 4), 32);
        assert_eq!(share(128, 64, 0), 64);
        assert_eq!(share(usize::MAX, 64, 1000), 64);
    }

    #[test]
    fn shares_shrink_as_states_attach_and_grow_back_as_they_go() {
        let caches = ValueCaches::shared(100, 80);
        let mut a = caches.join();
        assert_eq!(a.bytes(), 80);
        assert!(!a.changed());
        let b = caches.join();
        assert!(a.changed());
        assert!(!a.changed());
        assert_eq!((a.bytes(), b.bytes()), (50, 50));
        let c = caches.join();
        assert_eq!(c.bytes(), 33);
        assert_eq!(caches.states(), 3);
        drop(b);
        drop(c);
        assert!(a.changed());
        assert_eq!(a.bytes(), 80);
        assert_eq!(caches.states(), 1);
    }
}
