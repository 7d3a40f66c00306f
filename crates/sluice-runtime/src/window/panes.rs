//! [`Panes`]: the contents of tumbling and sliding windows, grouped by window.
//!
//! Windows of a non-merging assigner are the same for every key, so their contents are kept as
//! one table per window (a *pane*), keyed by key only, and the panes are kept in window order.
//! A record probes the table of each of its windows by its key; firing takes whole panes from
//! the front, in order, instead of one (key, window) entry at a time; and a pane's emptied
//! tables are reused by the next pane instead of growing fresh ones.
//!
//! Each pane holds two tables: the windows whose trigger has not fired yet (`pending`: the
//! watermark is still before the window's `max_timestamp`, or a processing-time window before
//! its timer), and the windows that fired and are kept for late firings within the allowed
//! lateness (`fired`). In event time a record added after the watermark passed the window's
//! end goes to `fired` and fires at once; when the watermark passes a pane's `max_timestamp`,
//! its `pending` windows fire and move to `fired`, or are dropped when the watermark also
//! passed the cleanup time.

use super::assigner::TimeWindow;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::hash::Hash;

/// The windows of one window (start and end), one entry per key.
#[derive(Debug)]
pub(crate) struct Pane<K, A> {
    pub(crate) window: TimeWindow,
    /// Windows whose trigger has not fired.
    pub(crate) pending: FxHashMap<K, A>,
    /// Windows that fired, kept for late firings until their cleanup time.
    pub(crate) fired: FxHashMap<K, A>,
    /// With a store (the tables above stay empty): whether the store may hold windows of this
    /// pane that have not fired.
    pub(crate) stored_pending: bool,
}

impl<K, A> Pane<K, A> {
    /// Whether no key has a window here.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.fired.is_empty()
    }
}

/// How many emptied tables are kept for reuse.
const SPARE_TABLES: usize = 4;

/// The panes of one operator subtask, ordered by window start (for one assigner, by end too).
#[derive(Debug)]
pub(crate) struct Panes<K, A> {
    panes: VecDeque<Pane<K, A>>,
    /// Emptied tables of removed panes, to be reused by new ones.
    spare: Vec<FxHashMap<K, A>>,
}

impl<K, A> Default for Panes<K, A> {
    fn default() -> Self {
        Panes {
            panes: VecDeque::new(),
            spare: Vec::new(),
        }
    }
}

impl<K: Hash + Eq, A> Panes<K, A> {
    /// Where the pane of the window starting at `start` is (`Ok`), or would be inserted (`Err`).
    #[inline]
    pub(crate) fn position(&self, start: i64) -> Result<usize, usize> {
        self.panes.binary_search_by_key(&start, |p| p.window.start)
    }

    /// The index of `window`'s pane, and whether it was just created (empty). Creating a pane
    /// shifts the indices of the panes after it.
    pub(crate) fn ensure(&mut self, window: TimeWindow) -> (usize, bool) {
        match self.position(window.start) {
            Ok(i) => (i, false),
            Err(i) => {
                let pane = Pane {
                    window,
                    pending: self.spare.pop().unwrap_or_default(),
                    fired: FxHashMap::default(),
                    stored_pending: false,
                };
                self.panes.insert(i, pane);
                (i, true)
            }
        }
    }

    /// The pane at `index` (from [`position`](Self::position) or [`ensure`](Self::ensure)).
    #[inline]
    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut Pane<K, A>> {
        self.panes.get_mut(index)
    }

    /// The panes, in window order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Pane<K, A>> {
        self.panes.iter()
    }

    /// The panes, in window order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Pane<K, A>> {
        self.panes.iter_mut()
    }

    /// Removes the pane of the window starting at `start`.
    pub(crate) fn remove(&mut self, start: i64) -> Option<Pane<K, A>> {
        let i = self.position(start).ok()?;
        self.panes.remove(i)
    }

    /// Removes every pane `gone` says is gone (in event time: its cleanup time passed), keeping
    /// their emptied tables for reuse.
    pub(crate) fn remove_where(&mut self, mut gone: impl FnMut(&Pane<K, A>) -> bool) {
        let mut i = 0;
        while i < self.panes.len() {
            if gone(&self.panes[i]) {
                if let Some(pane) = self.panes.remove(i) {
                    self.recycle(pane);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Keeps the tables of a removed pane for reuse (dropping what they still hold).
    pub(crate) fn recycle(&mut self, pane: Pane<K, A>) {
        for mut table in [pane.pending, pane.fired] {
            if self.spare.len() < SPARE_TABLES && table.capacity() > 0 {
                table.clear();
                self.spare.push(table);
            }
        }
    }

    /// How many (key, window) windows the panes hold.
    #[cfg(test)]
    pub(crate) fn window_count(&self) -> usize {
        self.panes
            .iter()
            .map(|p| p.pending.len() + p.fired.len())
            .sum()
    }

    /// Whether no pane holds a window.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.panes.iter().all(Pane::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panes_stay_in_window_order_and_reuse_tables() {
        let mut p: Panes<u8, u32> = Panes::default();
        assert_eq!(p.ensure(TimeWindow::new(20, 30)), (0, true));
        assert_eq!(p.ensure(TimeWindow::new(0, 10)), (0, true));
        assert_eq!(p.ensure(TimeWindow::new(10, 20)), (1, true));
        assert_eq!(p.ensure(TimeWindow::new(20, 30)), (2, false));
        let starts: Vec<i64> = p.iter().map(|x| x.window.start).collect();
        assert_eq!(starts, vec![0, 10, 20]);
        for k in 0..100 {
            p.get_mut(0).unwrap().pending.insert(k, 1);
        }
        p.remove_where(|x| x.window.start < 10);
        assert_eq!(p.position(0), Err(0));
        let (i, _) = p.ensure(TimeWindow::new(30, 40));
        let reused = &p.get_mut(i).unwrap().pending;
        assert!(
            reused.is_empty() && reused.capacity() >= 100,
            "the emptied table is reused"
        );
        assert!(p.is_empty());
        assert!(p.remove(10).is_some() && p.remove(10).is_none());
    }
}
