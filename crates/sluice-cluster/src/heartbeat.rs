//! Heartbeat timeouts, as pure state over observed times: each side records when it last heard
//! from each peer (a heartbeat, or any message), and asks which peers have been silent for
//! longer than the timeout. The caller owns the clock (tokio's, paused in tests) and the
//! timer: [`HeartbeatMonitor::next_deadline`] says when to look again.
//!
//! ```
//! use sluice_cluster::heartbeat::HeartbeatMonitor;
//! use std::time::{Duration, Instant};
//!
//! let t0 = Instant::now();
//! let mut monitor = HeartbeatMonitor::new(Duration::from_secs(10));
//! monitor.heard("tm-1", t0);
//! monitor.heard("tm-2", t0 + Duration::from_secs(4));
//! assert_eq!(monitor.next_deadline(), Some(t0 + Duration::from_secs(10)));
//! assert!(monitor.expired(t0 + Duration::from_secs(9)).is_empty());
//! assert_eq!(monitor.expired(t0 + Duration::from_secs(11)), vec!["tm-1"]);
//! ```

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// When each peer was last heard from.
#[derive(Clone, Debug)]
pub struct HeartbeatMonitor<P> {
    timeout: Duration,
    last: HashMap<P, Instant>,
}

impl<P: Clone + Eq + Hash + Ord> HeartbeatMonitor<P> {
    /// A monitor that declares a peer lost after `timeout` of silence.
    pub fn new(timeout: Duration) -> Self {
        HeartbeatMonitor {
            timeout,
            last: HashMap::new(),
        }
    }

    /// `peer` was heard from at `at` (a later time than any before; an earlier one is
    /// ignored).
    pub fn heard(&mut self, peer: P, at: Instant) {
        let last = self.last.entry(peer).or_insert(at);
        *last = (*last).max(at);
    }

    /// Stops watching `peer` (it left, or was declared lost and handled).
    pub fn remove(&mut self, peer: &P) {
        self.last.remove(peer);
    }

    /// The peers silent for longer than the timeout at `now`, in order.
    pub fn expired(&self, now: Instant) -> Vec<P> {
        let mut lost: Vec<P> = self
            .last
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) > self.timeout)
            .map(|(p, _)| p.clone())
            .collect();
        lost.sort();
        lost
    }

    /// When the first watched peer will have been silent for the timeout, if any is watched.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.last.values().min().map(|at| *at + self.timeout)
    }

    /// How many peers are watched.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether no peer is watched.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_heartbeat_keeps_a_peer_and_an_old_one_does_not_move_it_back() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut m = HeartbeatMonitor::new(s(5));
        m.heard(1, t0);
        m.heard(1, t0 + s(4));
        m.heard(1, t0 + s(2));
        assert!(m.expired(t0 + s(8)).is_empty());
        assert_eq!(m.expired(t0 + s(10)), vec![1]);
        m.remove(&1);
        assert!(m.is_empty());
        assert_eq!(m.next_deadline(), None);
    }
}
