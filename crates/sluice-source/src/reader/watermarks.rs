//! [`SplitWatermarks`]: a subtask's watermark from the watermarks of its splits (Flink's
//! per-split watermark multiplexing). A pure structure: the operator tells it what happened and
//! emits what it answers; time comes in as a value.
//!
//! The rules follow the task-level watermark valve of the runtime: each split's watermark only
//! grows; the subtask's watermark is the minimum over the splits that are not idle, emitted only
//! when it grows; a finished split no longer counts; when every split left is idle the subtask
//! is idle, and active again at the next record. With an idleness timeout, a subtask that has
//! had no split for that long is idle too (Flink's reader output turns idle the same way).

use crate::api::SplitId;
use sluice_core::{Watermark, WatermarkStatus};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
struct Split {
    watermark: Watermark,
    last_record: Instant,
    idle: bool,
}

/// What to emit after an update: a status change first, then a watermark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Emit {
    pub(crate) status: Option<WatermarkStatus>,
    pub(crate) watermark: Option<Watermark>,
}

/// The per-split watermarks of one subtask.
#[derive(Debug)]
pub(crate) struct SplitWatermarks {
    splits: HashMap<SplitId, Split>,
    idleness: Option<Duration>,
    emitted: Watermark,
    idle: bool,
    /// When a split last read a record (or the reader started): a subtask without splits turns
    /// idle after the timeout from here, as Flink's reader output does.
    last_record: Instant,
}

impl SplitWatermarks {
    pub(crate) fn new(idleness: Option<Duration>, now: Instant) -> Self {
        SplitWatermarks {
            splits: HashMap::new(),
            idleness,
            emitted: Watermark::MIN,
            idle: false,
            last_record: now,
        }
    }

    /// A split was added at `now`: it holds the watermark back until it reports.
    pub(crate) fn add_split(&mut self, split: SplitId, now: Instant) {
        self.splits.entry(split).or_insert(Split {
            watermark: Watermark::MIN,
            last_record: now,
            idle: false,
        });
    }

    /// Split `split` read records up to watermark `watermark` at `now`.
    pub(crate) fn on_records(
        &mut self,
        split: &SplitId,
        watermark: Watermark,
        now: Instant,
    ) -> Emit {
        let s = self.splits.entry(split.clone()).or_insert(Split {
            watermark: Watermark::MIN,
            last_record: now,
            idle: false,
        });
        s.watermark = s.watermark.max(watermark);
        s.last_record = now;
        s.idle = false;
        self.last_record = now;
        self.recompute()
    }

    /// Split `split` is finished.
    pub(crate) fn on_finished(&mut self, split: &SplitId) -> Emit {
        self.splits.remove(split);
        self.recompute()
    }

    /// Marks idle every split silent for the idleness timeout at `now`, and the subtask when it
    /// has had no split for that long.
    pub(crate) fn on_time(&mut self, now: Instant) -> Emit {
        let Some(timeout) = self.idleness else {
            return Emit::default();
        };
        if self.splits.is_empty() && !self.idle && now >= self.last_record + timeout {
            self.idle = true;
            return Emit {
                status: Some(WatermarkStatus::Idle),
                watermark: None,
            };
        }
        let mut changed = false;
        for s in self.splits.values_mut() {
            if !s.idle && now >= s.last_record + timeout {
                s.idle = true;
                changed = true;
            }
        }
        if changed {
            self.recompute()
        } else {
            Emit::default()
        }
    }

    /// When the next split may turn idle, if one can.
    pub(crate) fn next_idle_deadline(&self) -> Option<Instant> {
        let timeout = self.idleness?;
        if self.splits.is_empty() {
            return (!self.idle).then_some(self.last_record + timeout);
        }
        self.splits
            .values()
            .filter(|s| !s.idle)
            .map(|s| s.last_record + timeout)
            .min()
    }

    fn recompute(&mut self) -> Emit {
        let mut out = Emit::default();
        let active = self.splits.values().filter(|s| !s.idle);
        let min = active.map(|s| s.watermark).min();
        match min {
            None if !self.splits.is_empty() && !self.idle => {
                self.idle = true;
                out.status = Some(WatermarkStatus::Idle);
            }
            None => {}
            Some(m) => {
                if self.idle {
                    self.idle = false;
                    out.status = Some(WatermarkStatus::Active);
                }
                if m > self.emitted {
                    self.emitted = m;
                    out.watermark = Some(m);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> SplitId {
        SplitId::from(s)
    }

    fn wm(t: i64) -> Watermark {
        Watermark::new(t)
    }

    #[tokio::test(start_paused = true)]
    async fn the_minimum_over_splits_and_a_new_split_holds_it_back_until_it_reports() {
        let now = Instant::now();
        let mut w = SplitWatermarks::new(None, now);
        w.add_split(id("a"), now);
        w.add_split(id("b"), now);
        assert_eq!(w.on_records(&id("a"), wm(10), now).watermark, None);
        assert_eq!(w.on_records(&id("b"), wm(7), now).watermark, Some(wm(7)));
        assert_eq!(w.on_records(&id("b"), wm(20), now).watermark, Some(wm(10)));
        w.add_split(id("c"), now);
        assert_eq!(w.on_records(&id("a"), wm(30), now).watermark, None);
        assert_eq!(w.on_finished(&id("c")).watermark, Some(wm(20)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_split_does_not_hold_the_watermark_back() {
        let start = Instant::now();
        let mut w = SplitWatermarks::new(Some(Duration::from_secs(5)), start);
        w.add_split(id("busy"), start);
        w.add_split(id("quiet"), start);
        w.on_records(&id("quiet"), wm(1), start);
        assert_eq!(
            w.on_records(&id("busy"), wm(100), start).watermark,
            Some(wm(1))
        );
        let later = start + Duration::from_secs(6);
        // Both silent for 6 s: both idle, the subtask too.
        assert_eq!(w.on_time(later).status, Some(WatermarkStatus::Idle));
        let emit = w.on_records(&id("busy"), wm(200), later);
        assert_eq!(
            emit,
            Emit {
                status: Some(WatermarkStatus::Active),
                watermark: Some(wm(200))
            }
        );
        assert_eq!(w.next_idle_deadline(), Some(later + Duration::from_secs(5)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_subtask_without_splits_turns_idle_after_the_timeout() {
        let start = Instant::now();
        let mut w = SplitWatermarks::new(Some(Duration::from_secs(5)), start);
        assert_eq!(w.next_idle_deadline(), Some(start + Duration::from_secs(5)));
        assert_eq!(w.on_time(start + Duration::from_secs(4)), Emit::default());
        let idle = w.on_time(start + Duration::from_secs(5));
        assert_eq!(idle.status, Some(WatermarkStatus::Idle));
        assert_eq!(
            w.next_idle_deadline(),
            None,
            "no timer while idle without splits"
        );
        // A split arrives and reads: active again, its watermark counts.
        let later = start + Duration::from_secs(9);
        w.add_split(id("late"), later);
        let emit = w.on_records(&id("late"), wm(42), later);
        assert_eq!(
            emit,
            Emit {
                status: Some(WatermarkStatus::Active),
                watermark: Some(wm(42))
            }
        );
    }
}
