//! [`TimeWindow`] and [`WindowAssigner`]: which windows a record belongs to.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A window of time `[start, end)` in milliseconds.
///
/// ```
/// use sluice_runtime::window::TimeWindow;
/// let w = TimeWindow::new(0, 60_000);
/// assert_eq!(w.max_timestamp(), 59_999);
/// assert!(w.intersects(&TimeWindow::new(60_000, 70_000)), "touching windows merge, as in Flink");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimeWindow {
    /// The first millisecond in the window.
    pub start: i64,
    /// The first millisecond after the window.
    pub end: i64,
}

impl TimeWindow {
    /// The one window of [`GlobalWindows`], covering all of time (Flink has a separate
    /// `GlobalWindow` type; here every window is a `TimeWindow`). It is never cleaned up, and
    /// its results carry `max_timestamp`, `i64::MAX - 1`.
    pub const GLOBAL: TimeWindow = TimeWindow::new(i64::MIN, i64::MAX);

    /// The window `[start, end)`.
    pub const fn new(start: i64, end: i64) -> Self {
        TimeWindow { start, end }
    }

    /// The last millisecond in the window, `end - 1`: the window fires when the watermark
    /// reaches it, and results carry it as their event time.
    pub const fn max_timestamp(&self) -> i64 {
        self.end - 1
    }

    /// Whether the two windows overlap or touch (Flink's `TimeWindow.intersects`).
    pub fn intersects(&self, other: &TimeWindow) -> bool {
        self.start <= other.end && self.end >= other.start
    }

    /// The smallest window covering both.
    pub fn cover(&self, other: &TimeWindow) -> TimeWindow {
        TimeWindow::new(self.start.min(other.start), self.end.max(other.end))
    }

    /// The start of the window of `size` (shifted by `offset`) that holds `timestamp` (Flink's
    /// `TimeWindow.getWindowStartWithOffset`). Near the ends of the `i64` range, where Flink's
    /// arithmetic wraps around, the start is computed exactly and clamped to `i64::MIN`.
    #[inline]
    pub fn start_with_offset(timestamp: i64, offset: i64, size: i64) -> i64 {
        clamp(exact_start(timestamp, offset, size))
    }
}

/// What a record whose own session window is `w` looks up among its key's `sessions`: the
/// sessions it touches, then the one it lands in (its own window, the session holding it, or
/// the cover of those it merges), each handed to `f`. Both window operators read these ahead
/// of a batch (Flink's `MergingWindowSet.addWindow` decides the same).
pub(super) fn session_lookups(
    sessions: Option<&Vec<TimeWindow>>,
    w: TimeWindow,
    mut f: impl FnMut(TimeWindow),
) {
    let mut actual = w;
    for &x in sessions.into_iter().flatten().filter(|x| x.intersects(&w)) {
        actual = actual.cover(&x);
        f(x);
    }
    f(actual);
}

/// The start of the window of `size` (shifted by `offset`) holding `timestamp`, exactly (it may
/// lie below `i64::MIN`).
#[inline]
fn exact_start(timestamp: i64, offset: i64, size: i64) -> i128 {
    let t = i128::from(timestamp);
    t - (t - i128::from(offset)).rem_euclid(i128::from(size))
}

/// `x` clamped into the `i64` range.
#[inline]
fn clamp(x: i128) -> i64 {
    i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX })
}

/// Which clock places records into windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WindowTime {
    Event,
    Processing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WindowKind {
    Tumbling {
        size: i64,
        offset: i64,
    },
    Sliding {
        size: i64,
        slide: i64,
        offset: i64,
    },
    Session {
        gap: i64,
    },
    /// One window per key holding every record: [`GlobalWindows`].
    Global,
}

/// Assigns records to windows: tumbling, sliding or session, in event or processing time, or
/// one global window per key. Made with Flink's names: [`TumblingEventTimeWindows::of`],
/// [`SlidingEventTimeWindows::of`], [`EventTimeSessionWindows::with_gap`], their
/// processing-time twins, and [`GlobalWindows::create`].
///
/// ```
/// use sluice_runtime::window::{SlidingEventTimeWindows, TimeWindow};
/// use std::time::Duration;
///
/// let sliding = SlidingEventTimeWindows::of(Duration::from_secs(60), Duration::from_secs(20));
/// let mut windows = Vec::new();
/// sliding.assign(65_000, &mut windows);
/// assert_eq!(windows, vec![
///     TimeWindow::new(60_000, 120_000),
///     TimeWindow::new(40_000, 100_000),
///     TimeWindow::new(20_000, 80_000),
/// ]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowAssigner {
    pub(crate) kind: WindowKind,
    pub(crate) time: WindowTime,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl WindowAssigner {
    /// With an offset (Flink's `of(size, offset)`), e.g. to align daily windows to a time zone.
    /// Session windows have no offset.
    pub fn with_offset(mut self, offset: Duration) -> Self {
        let o = millis(offset);
        match &mut self.kind {
            WindowKind::Tumbling { offset, .. } | WindowKind::Sliding { offset, .. } => *offset = o,
            WindowKind::Session { .. } | WindowKind::Global => {}
        }
        self
    }

    /// Whether windows follow event time (watermarks) rather than processing time.
    pub fn is_event_time(&self) -> bool {
        self.time == WindowTime::Event
    }

    /// Whether windows merge (sessions).
    pub fn is_merging(&self) -> bool {
        matches!(self.kind, WindowKind::Session { .. })
    }

    /// Whether this is [`GlobalWindows`]: one window per key that never ends.
    pub fn is_global(&self) -> bool {
        matches!(self.kind, WindowKind::Global)
    }

    /// Checks the sizes: every size, slide and gap above zero, an offset below the size.
    pub(crate) fn validate(&self) -> Result<(), String> {
        match self.kind {
            WindowKind::Tumbling { size, offset } if size <= 0 || offset.abs() >= size => {
                Err(format!(
                    "a tumbling window needs a size above 0 and |offset| below it (size {size} ms, offset {offset} ms)"
                ))
            }
            WindowKind::Sliding {
                size,
                slide,
                offset,
            } if size <= 0 || slide <= 0 || offset.abs() >= slide => Err(format!(
                "a sliding window needs a size and slide above 0 and |offset| below the slide (size {size} ms, slide {slide} ms, offset {offset} ms)"
            )),
            WindowKind::Session { gap } if gap <= 0 => Err(format!(
                "a session window needs a gap above 0 (gap {gap} ms)"
            )),
            _ => Ok(()),
        }
    }

    /// Like [`assign`](Self::assign), and returns a range of timestamps `[lo, hi)` that all get
    /// exactly the windows appended, so that a caller placing many records of nearby times
    /// computes the windows once per range instead of once per record. The range may be empty
    /// or miss `timestamp` at the edges of the time line (then the caller just assigns again);
    /// it never holds a timestamp with other windows.
    #[inline]
    pub(crate) fn assign_with_range(
        &self,
        timestamp: i64,
        out: &mut Vec<TimeWindow>,
    ) -> (i64, i64) {
        let first = out.len();
        self.assign(timestamp, out);
        let appended = &out[first..];
        match (self.kind, appended.first(), appended.last()) {
            // One window, the same for every timestamp in it.
            (WindowKind::Tumbling { .. }, Some(w), _) => (w.start, w.end),
            // Windows start every `slide`: the set holds the starts in `(t - size, t]`. It stays
            // the same until the next start (`newest + slide`) or the end of the oldest window,
            // and back to the newest start or until the window before the oldest would be in.
            (WindowKind::Sliding { size, slide, .. }, Some(newest), Some(oldest)) => {
                let lo = newest
                    .start
                    .max(oldest.start.saturating_sub(slide).saturating_add(size));
                let hi = newest.start.saturating_add(slide).min(oldest.end);
                (lo, hi)
            }
            _ => (timestamp, timestamp),
        }
    }

    /// Appends the windows holding an element at `timestamp` to `out` (for sessions, the
    /// element's own window `[timestamp, timestamp + gap)`, before merging).
    #[inline]
    pub fn assign(&self, timestamp: i64, out: &mut Vec<TimeWindow>) {
        match self.kind {
            // Bounds are computed exactly and clamped into the i64 range only when stored, so
            // that windows at the ends of the time line keep their true ends.
            WindowKind::Tumbling { size, offset } => {
                let start = exact_start(timestamp, offset, size);
                out.push(TimeWindow::new(
                    clamp(start),
                    clamp(start + i128::from(size)),
                ));
            }
            WindowKind::Sliding {
                size,
                slide,
                offset,
            } => {
                let mut start = exact_start(timestamp, offset, slide);
                let before = i128::from(timestamp) - i128::from(size);
                while start > before {
                    out.push(TimeWindow::new(
                        clamp(start),
                        clamp(start + i128::from(size)),
                    ));
                    start -= i128::from(slide);
                }
            }
            WindowKind::Session { gap } => {
                out.push(TimeWindow::new(timestamp, timestamp.saturating_add(gap)))
            }
            WindowKind::Global => out.push(TimeWindow::GLOBAL),
        }
    }
}

macro_rules! assigner {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name;
    };
}

assigner!(
    /// Tumbling windows of a fixed size in event time.
    TumblingEventTimeWindows
);
assigner!(
    /// Tumbling windows of a fixed size in processing time.
    TumblingProcessingTimeWindows
);
assigner!(
    /// Sliding windows (a size and a slide) in event time.
    SlidingEventTimeWindows
);
assigner!(
    /// Sliding windows (a size and a slide) in processing time.
    SlidingProcessingTimeWindows
);
assigner!(
    /// Session windows in event time: a key's records closer than the gap share a window.
    EventTimeSessionWindows
);
assigner!(
    /// Session windows in processing time.
    ProcessingTimeSessionWindows
);

/// One window per key holding all its records, [`TimeWindow::GLOBAL`] (Flink's
/// `GlobalWindows`). Its default trigger, [`NeverTrigger`](super::NeverTrigger), never fires:
/// give it a trigger with `WindowedStream::trigger` (`KeyedStream::count_window` does). Like
/// Flink's, it is not an event-time assigner, so no record is ever late.
#[derive(Debug)]
pub struct GlobalWindows;

impl GlobalWindows {
    /// The assigner (Flink's `GlobalWindows.create()`).
    pub fn create() -> WindowAssigner {
        WindowAssigner {
            kind: WindowKind::Global,
            time: WindowTime::Processing,
        }
    }
}

fn tumbling(size: Duration, time: WindowTime) -> WindowAssigner {
    WindowAssigner {
        kind: WindowKind::Tumbling {
            size: millis(size),
            offset: 0,
        },
        time,
    }
}

fn sliding(size: Duration, slide: Duration, time: WindowTime) -> WindowAssigner {
    WindowAssigner {
        kind: WindowKind::Sliding {
            size: millis(size),
            slide: millis(slide),
            offset: 0,
        },
        time,
    }
}

fn session(gap: Duration, time: WindowTime) -> WindowAssigner {
    WindowAssigner {
        kind: WindowKind::Session { gap: millis(gap) },
        time,
    }
}

impl TumblingEventTimeWindows {
    /// Windows of `size`, aligned to the epoch.
    pub fn of(size: Duration) -> WindowAssigner {
        tumbling(size, WindowTime::Event)
    }
}

impl TumblingProcessingTimeWindows {
    /// Windows of `size`, aligned to the epoch.
    pub fn of(size: Duration) -> WindowAssigner {
        tumbling(size, WindowTime::Processing)
    }
}

impl SlidingEventTimeWindows {
    /// Windows of `size` starting every `slide`.
    pub fn of(size: Duration, slide: Duration) -> WindowAssigner {
        sliding(size, slide, WindowTime::Event)
    }
}

impl SlidingProcessingTimeWindows {
    /// Windows of `size` starting every `slide`.
    pub fn of(size: Duration, slide: Duration) -> WindowAssigner {
        sliding(size, slide, WindowTime::Processing)
    }
}

impl EventTimeSessionWindows {
    /// Sessions that end after `gap` without a record.
    pub fn with_gap(gap: Duration) -> WindowAssigner {
        session(gap, WindowTime::Event)
    }
}

impl ProcessingTimeSessionWindows {
    /// Sessions that end after `gap` without a record.
    pub fn with_gap(gap: Duration) -> WindowAssigner {
        session(gap, WindowTime::Processing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_record_looks_up_what_it_touches_then_where_it_lands() {
        let w = |s, e| TimeWindow::new(s, e);
        let lookups = |sessions: Option<&Vec<TimeWindow>>, own| {
            let mut seen = Vec::new();
            session_lookups(sessions, own, |x| seen.push(x));
            seen
        };
        // no session yet: its own window
        assert_eq!(lookups(None, w(5, 15)), vec![w(5, 15)]);
        // inside a session: that session, twice (touched, and where it lands)
        let one = vec![w(0, 20)];
        assert_eq!(lookups(Some(&one), w(5, 15)), vec![w(0, 20), w(0, 20)]);
        // between two sessions it touches: both, then their cover
        let two = vec![w(0, 10), w(15, 25), w(40, 50)];
        assert_eq!(
            lookups(Some(&two), w(8, 18)),
            vec![w(0, 10), w(15, 25), w(0, 25)]
        );
    }

    #[test]
    fn window_starts_match_flink_for_negative_timestamps_and_offsets() {
        assert_eq!(TimeWindow::start_with_offset(-1, 0, 10), -10);
        assert_eq!(TimeWindow::start_with_offset(-10, 0, 10), -10);
        assert_eq!(TimeWindow::start_with_offset(7, 3, 10), 3);
        assert_eq!(TimeWindow::start_with_offset(2, 3, 10), -7);
    }

    #[test]
    fn timestamps_at_the_ends_of_the_range_neither_overflow_nor_wrap() {
        let min = i64::MIN;
        // i64::MIN = -9223372036854775808 lies 2 past a multiple of 10 (…810).
        assert_eq!(TimeWindow::start_with_offset(min + 9, 0, 10), min + 8);
        assert_eq!(
            TimeWindow::start_with_offset(min + 1, 0, 10),
            min,
            "clamped, not wrapped"
        );
        assert_eq!(
            TimeWindow::start_with_offset(min, 3, 10),
            min,
            "clamped, not wrapped"
        );
        assert_eq!(TimeWindow::start_with_offset(i64::MAX, 0, 10), i64::MAX - 7);
        assert_eq!(
            TimeWindow::start_with_offset(i64::MAX, -5, 10),
            i64::MAX - 2
        );
        // The window holding MIN + 1 starts 2 below MIN: stored from MIN, it keeps its true end,
        // so it does not overlap the next one.
        let mut out = Vec::new();
        TumblingEventTimeWindows::of(Duration::from_millis(10)).assign(min + 1, &mut out);
        assert_eq!(out, [TimeWindow::new(min, min + 8)]);
        out.clear();
        SlidingEventTimeWindows::of(Duration::from_millis(30), Duration::from_millis(10))
            .assign(min + 1, &mut out);
        assert_eq!(
            out,
            [
                TimeWindow::new(min, min + 28),
                TimeWindow::new(min, min + 18),
                TimeWindow::new(min, min + 8),
            ]
        );
        out.clear();
        TumblingEventTimeWindows::of(Duration::from_millis(10)).assign(i64::MAX, &mut out);
        assert_eq!(out, [TimeWindow::new(i64::MAX - 7, i64::MAX)]);
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert!(
            TumblingEventTimeWindows::of(Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(
            SlidingEventTimeWindows::of(Duration::from_secs(1), Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(
            EventTimeSessionWindows::with_gap(Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(
            TumblingEventTimeWindows::of(Duration::from_secs(1))
                .validate()
                .is_ok()
        );
    }

    proptest::proptest! {
        /// Every timestamp in the range `assign_with_range` returns gets the same windows as the
        /// timestamp it was asked about, for tumbling and sliding windows of any sizes, offsets
        /// and timestamps (also near the ends of the time line).
        #[test]
        fn a_range_holds_only_timestamps_with_the_same_windows(
            size in 1i64..200,
            slide in 1i64..200,
            offset_seed in proptest::prelude::any::<i64>(),
            t in proptest::prop_oneof![
                -1_000i64..1_000,
                (i64::MAX - 1_000)..(i64::MAX - 500),
                (i64::MIN + 500)..(i64::MIN + 1_000),
            ],
            probes in proptest::collection::vec(0u16..1000, 1..20),
        ) {
            let assigners = [
                WindowAssigner { kind: WindowKind::Tumbling { size, offset: offset_seed % size }, time: WindowTime::Event },
                WindowAssigner { kind: WindowKind::Sliding { size, slide, offset: offset_seed % slide }, time: WindowTime::Event },
            ];
            for a in assigners {
                let mut want = Vec::new();
                let (lo, hi) = a.assign_with_range(t, &mut want);
                let mut plain = Vec::new();
                a.assign(t, &mut plain);
                proptest::prop_assert_eq!(&want, &plain);
                if lo >= hi {
                    continue;
                }
                let width = (hi as i128 - lo as i128) as u128;
                for p in &probes {
                    let probe = (lo as i128 + (u128::from(*p) * width / 1000) as i128) as i64;
                    let mut got = Vec::new();
                    a.assign(probe, &mut got);
                    proptest::prop_assert_eq!(&got, &want, "{:?} at {} in [{}, {}) from {}", a, probe, lo, hi, t);
                }
                let mut got = Vec::new();
                a.assign(hi - 1, &mut got);
                proptest::prop_assert_eq!(&got, &want, "{:?} at hi - 1 = {}", a, hi - 1);
            }
        }
    }
}
