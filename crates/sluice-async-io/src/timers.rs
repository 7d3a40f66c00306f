//! [`TimerSet`]: the one structure holding every request's deadline (or retry time), checked by
//! the task loop instead of one timer per request.
//!
//! Setting and clearing a slot's time is O(1). The set keeps a lower bound of the earliest time,
//! which the operator arms a single tokio timer with; when that timer fires, one scan over the
//! slots with the current time (read once) collects what expired and recomputes the bound. A
//! bound that became too early because its request completed costs one extra scan, at most once
//! per timeout period. The set is generic over the time type and reads no clock, so it is tested
//! with plain integers.

/// Per-slot times with a cheap lower bound of the earliest one.
#[derive(Debug, Clone)]
pub(crate) struct TimerSet<T> {
    at: Vec<Option<T>>,
    live: usize,
    /// Never later than the earliest live time; `None` when nothing is live.
    earliest: Option<T>,
}

impl<T> Default for TimerSet<T> {
    fn default() -> Self {
        TimerSet {
            at: Vec::new(),
            live: 0,
            earliest: None,
        }
    }
}

impl<T: Ord + Copy> TimerSet<T> {
    /// Sets (or replaces) the time of `slot`.
    #[inline]
    pub(crate) fn set(&mut self, slot: usize, time: T) {
        if slot >= self.at.len() {
            self.at.resize(slot + 1, None);
        }
        if self.at[slot].replace(time).is_none() {
            self.live += 1;
        }
        if self.earliest.is_none_or(|e| time < e) {
            self.earliest = Some(time);
        }
    }

    /// Clears the time of `slot`; returns whether it had one.
    #[inline]
    pub(crate) fn clear(&mut self, slot: usize) -> bool {
        match self.at.get_mut(slot).and_then(Option::take) {
            Some(_) => {
                self.live -= 1;
                if self.live == 0 {
                    self.earliest = None;
                }
                true
            }
            None => false,
        }
    }

    /// The time of `slot`, if set.
    #[cfg(test)]
    pub(crate) fn get(&self, slot: usize) -> Option<T> {
        self.at.get(slot).copied().flatten()
    }

    /// When to check next: no later than the earliest live time. `None` when nothing is set.
    #[inline]
    pub(crate) fn next_check(&self) -> Option<T> {
        self.earliest
    }

    /// Whether no time is set.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Moves every slot whose time is at or before `now` into `expired` (in slot order), clears
    /// them, and tightens the bound to the exact earliest remaining time.
    pub(crate) fn expire(&mut self, now: T, expired: &mut Vec<usize>) {
        if self.earliest.is_none_or(|e| e > now) {
            return;
        }
        let mut earliest = None;
        for (slot, at) in self.at.iter_mut().enumerate() {
            match *at {
                Some(t) if t <= now => {
                    *at = None;
                    self.live -= 1;
                    expired.push(slot);
                }
                Some(t) if earliest.is_none_or(|e| t < e) => earliest = Some(t),
                Some(_) | None => {}
            }
        }
        self.earliest = earliest;
    }

    /// Clears every slot, appending the slots that had a time to `out` (in slot order).
    pub(crate) fn take_all(&mut self, out: &mut Vec<usize>) {
        for (slot, at) in self.at.iter_mut().enumerate() {
            if at.take().is_some() {
                out.push(slot);
            }
        }
        self.live = 0;
        self.earliest = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn expire_collects_due_slots_and_tightens_the_bound() {
        let mut t = TimerSet::default();
        t.set(0, 10u64);
        t.set(1, 5);
        t.set(2, 20);
        assert_eq!(t.next_check(), Some(5));
        t.clear(1);
        assert_eq!(t.next_check(), Some(5), "a stale bound is allowed");
        let mut out = Vec::new();
        t.expire(7, &mut out);
        assert!(out.is_empty());
        assert_eq!(t.next_check(), Some(10), "the scan tightened the bound");
        t.expire(10, &mut out);
        assert_eq!(out, vec![0]);
        assert_eq!(t.next_check(), Some(20));
        t.clear(2);
        assert!(t.is_empty());
        assert_eq!(t.next_check(), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(usize, u32),
        Clear(usize),
        Expire(u32),
    }

    proptest! {
        /// Against a map model: the same slots expire, and the bound never passes a live time.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec(prop_oneof![
            (0usize..16, 0u32..100).prop_map(|(s, t)| Op::Set(s, t)),
            (0usize..16).prop_map(Op::Clear),
            (0u32..100).prop_map(Op::Expire),
        ], 0..100)) {
            let mut t = TimerSet::default();
            let mut model: BTreeMap<usize, u32> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(s, at) => { t.set(s, at); model.insert(s, at); }
                    Op::Clear(s) => prop_assert_eq!(t.clear(s), model.remove(&s).is_some()),
                    Op::Expire(now) => {
                        let mut got = Vec::new();
                        t.expire(now, &mut got);
                        let want: Vec<usize> = model.iter().filter(|(_, at)| **at <= now).map(|(s, _)| *s).collect();
                        model.retain(|_, at| *at > now);
                        prop_assert_eq!(got, want);
                    }
                }
                let min = model.values().min().copied();
                match (t.next_check(), min) {
                    (None, None) => {}
                    (Some(b), Some(m)) => prop_assert!(b <= m),
                    (b, m) => prop_assert!(false, "bound {:?} but earliest {:?}", b, m),
                }
                prop_assert_eq!(t.is_empty(), model.is_empty());
                for s in 0..16 {
                    prop_assert_eq!(t.get(s), model.get(&s).copied());
                }
            }
        }
    }
}
