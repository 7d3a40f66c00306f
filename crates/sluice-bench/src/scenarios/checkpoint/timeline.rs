//! Per-checkpoint instants recorded from outside the runtime: the bench's own operators note when
//! they snapshot and when they hear that a checkpoint completed, and the driver notes when it
//! asked for a checkpoint. The runtime has no public per-checkpoint timing, so these marks are
//! what the `checkpoint` scenario's durations are made of.

use crate::measure::percentile;
use sluice::core::sync::lock;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The instants of one checkpoint. Over several subtasks, "earliest" marks keep the first
/// subtask's instant and "latest" marks the last one's.
#[derive(Clone, Copy, Debug, Default)]
pub struct Marks {
    /// When the driver called `JobHandle::trigger_checkpoint` (driven checkpoints only).
    pub trigger: Option<Instant>,
    /// Earliest `snapshot_state` of the pass-through operator chained right after the source: the
    /// source task took the barrier (the source itself snapshots just before it).
    pub source: Option<Instant>,
    /// Earliest start of the stateful operator's `snapshot_state`.
    pub snapshot_start: Option<Instant>,
    /// Latest end of the stateful operator's `snapshot_state`.
    pub snapshot_end: Option<Instant>,
    /// Earliest `notify_checkpoint_complete` at the stateful operator.
    pub complete: Option<Instant>,
    /// Bytes of state the stateful operator's subtasks returned (sum of entry lengths).
    pub state_bytes: u64,
}

impl Marks {
    /// The checkpoint's duration: trigger (or, without one, the source task's barrier) to
    /// completion, when both are known.
    pub fn duration(&self) -> Option<Duration> {
        let start = self.trigger.or(self.source)?;
        Some(self.complete?.saturating_duration_since(start))
    }
}

/// The marks of every checkpoint of one job, shared by its operators and the driver.
pub struct Timeline {
    marks: Mutex<BTreeMap<u64, Marks>>,
    completed: watch::Sender<u64>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            marks: Mutex::new(BTreeMap::new()),
            completed: watch::Sender::new(0),
        }
    }
}

fn earliest(slot: &mut Option<Instant>, t: Instant) {
    *slot = Some(slot.map_or(t, |s| s.min(t)));
}

fn latest(slot: &mut Option<Instant>, t: Instant) {
    *slot = Some(slot.map_or(t, |s| s.max(t)));
}

impl Timeline {
    fn update(&self, id: u64, f: impl FnOnce(&mut Marks)) {
        let mut marks = lock(&self.marks);
        f(marks.entry(id).or_default());
    }

    /// The driver asked for the checkpoint that got `id` at `at`.
    pub fn mark_trigger(&self, id: u64, at: Instant) {
        self.update(id, |m| m.trigger = Some(at));
    }

    /// The source task took the barrier of `id` now.
    pub fn mark_source(&self, id: u64) {
        let now = Instant::now();
        self.update(id, |m| earliest(&mut m.source, now));
    }

    /// The stateful operator snapshotted `bytes` of state for `id` between `start` and `end`.
    pub fn mark_snapshot(&self, id: u64, start: Instant, end: Instant, bytes: u64) {
        self.update(id, |m| {
            earliest(&mut m.snapshot_start, start);
            latest(&mut m.snapshot_end, end);
            m.state_bytes += bytes;
        });
    }

    /// The stateful operator heard now that `id` completed.
    pub fn mark_complete(&self, id: u64) {
        let now = Instant::now();
        self.update(id, |m| earliest(&mut m.complete, now));
        self.completed.send_if_modified(|c| {
            let newer = id > *c;
            if newer {
                *c = id;
            }
            newer
        });
    }

    /// The highest completed checkpoint id so far, as a watch (0 before the first).
    pub fn completed(&self) -> watch::Receiver<u64> {
        self.completed.subscribe()
    }

    /// The marks of every checkpoint that completed and has a known start.
    pub fn completed_marks(&self) -> Vec<(u64, Marks)> {
        let marks = lock(&self.marks);
        marks
            .iter()
            .filter(|(_, m)| m.duration().is_some())
            .map(|(id, m)| (*id, *m))
            .collect()
    }
}

/// Percentiles of the durations of a set of checkpoints, and where the time went.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DurationStats {
    /// How many checkpoints the figures cover.
    pub checkpoints: usize,
    /// Median duration, ms.
    pub p50_ms: f64,
    /// 99th percentile (nearest rank: the maximum below 100 checkpoints), ms.
    pub p99_ms: f64,
    /// Longest, ms.
    pub max_ms: f64,
    /// Median bytes of state the stateful operator returned per checkpoint.
    pub state_bytes: u64,
    /// Medians of the phases, ms: trigger to the source task's barrier (driven checkpoints only),
    /// barrier to the stateful operator's snapshot, the snapshot itself, and snapshot end to the
    /// completion notification (acknowledgement, writing to storage, notification).
    pub phases_p50_ms: Phases,
    /// The same phases at the 99th percentile (each phase on its own).
    pub phases_p99_ms: Phases,
}

/// Durations of the phases of a checkpoint, ms.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Phases {
    /// Trigger request to the source task's barrier.
    pub trigger_to_barrier: Option<f64>,
    /// Source task's barrier to the start of the stateful operator's snapshot.
    pub barrier_to_snapshot: f64,
    /// The stateful operator's `snapshot_state` (earliest start to latest end).
    pub snapshot: f64,
    /// End of the snapshot to the completion notification.
    pub snapshot_to_complete: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn between(from: Option<Instant>, to: Option<Instant>) -> Option<Duration> {
    Some(to?.saturating_duration_since(from?))
}

impl DurationStats {
    /// Statistics over `marks` (each with a known duration); `None` when empty.
    pub fn of(marks: &[Marks]) -> Option<DurationStats> {
        let durations: Vec<Duration> = marks.iter().filter_map(Marks::duration).collect();
        if durations.is_empty() {
            return None;
        }
        let phase = |f: &dyn Fn(&Marks) -> Option<Duration>| -> Vec<Duration> {
            marks.iter().filter_map(f).collect()
        };
        let trigger = phase(&|m| between(m.trigger, m.source));
        let barrier = phase(&|m| between(m.source, m.snapshot_start));
        let snapshot = phase(&|m| between(m.snapshot_start, m.snapshot_end));
        let after = phase(&|m| between(m.snapshot_end, m.complete));
        let at = |q: f64| Phases {
            trigger_to_barrier: (!trigger.is_empty()).then(|| ms(percentile(&trigger, q))),
            barrier_to_snapshot: ms(percentile(&barrier, q)),
            snapshot: ms(percentile(&snapshot, q)),
            snapshot_to_complete: ms(percentile(&after, q)),
        };
        let mut bytes: Vec<u64> = marks.iter().map(|m| m.state_bytes).collect();
        bytes.sort_unstable();
        Some(DurationStats {
            checkpoints: durations.len(),
            p50_ms: ms(percentile(&durations, 0.5)),
            p99_ms: ms(percentile(&durations, 0.99)),
            max_ms: ms(percentile(&durations, 1.0)),
            state_bytes: bytes[bytes.len() / 2],
            phases_p50_ms: at(0.5),
            phases_p99_ms: at(0.99),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_keep_the_earliest_start_and_latest_end_over_subtasks() {
        let t = Timeline::default();
        let t0 = Instant::now();
        let later = |ms: u64| t0 + Duration::from_millis(ms);
        t.mark_trigger(1, t0);
        t.mark_snapshot(1, later(5), later(6), 10);
        t.mark_snapshot(1, later(3), later(9), 20);
        assert!(t.completed_marks().is_empty(), "not complete yet");
        t.mark_complete(1);
        let done = t.completed_marks();
        assert_eq!(done.len(), 1);
        let m = done[0].1;
        assert_eq!(
            (m.snapshot_start, m.snapshot_end),
            (Some(later(3)), Some(later(9)))
        );
        assert_eq!(m.state_bytes, 30);
        assert!(m.duration().is_some_and(|d| d >= Duration::ZERO));
        assert_eq!(*t.completed().borrow(), 1);
        // An older id does not move the watch back.
        t.mark_complete(0);
        assert_eq!(*t.completed().borrow(), 1);
    }

    #[test]
    fn stats_take_percentiles_of_durations_and_phases() {
        let t0 = Instant::now();
        let at = |ms: u64| Some(t0 + Duration::from_millis(ms));
        let marks: Vec<Marks> = [10u64, 20, 30]
            .iter()
            .map(|&d| Marks {
                trigger: at(0),
                source: at(1),
                snapshot_start: at(2),
                snapshot_end: at(4),
                complete: at(d),
                state_bytes: d,
            })
            .collect();
        let s = DurationStats::of(&marks).unwrap();
        assert_eq!(s.checkpoints, 3);
        assert_eq!((s.p50_ms, s.p99_ms, s.max_ms), (20.0, 30.0, 30.0));
        assert_eq!(s.phases_p50_ms.trigger_to_barrier, Some(1.0));
        assert_eq!(s.phases_p50_ms.snapshot, 2.0);
        assert_eq!(s.phases_p50_ms.snapshot_to_complete, 16.0);
        assert_eq!(s.state_bytes, 20);
        assert!(DurationStats::of(&[]).is_none());
    }
}
