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
    /// `TimeWindow.getWindowStartWithOffset`).
    pub fn start_with_offset(timestamp: i64, offset: i64, size: i64) -> i64 {
        timestamp - (timestamp - offset).rem_euclid(size)
    }
}

/// Which clock places records into windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WindowTime {
    Event,
    Processing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WindowKind {
    Tumbling { size: i64, offset: i64 },
    Sliding { size: i64, slide: i64, offset: i64 },
    Session { gap: i64 },
}

/// Assigns records to windows: tumbling, sliding or session, in event or processing time.
/// Made with Flink's names: [`TumblingEventTimeWindows::of`],
/// [`SlidingEventTimeWindows::of`], [`EventTimeSessionWindows::with_gap`] and their
/// processing-time twins.
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
            WindowKind::Session { .. } => {}
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

    /// Appends the windows holding an element at `timestamp` to `out` (for sessions, the
    /// element's own window `[timestamp, timestamp + gap)`, before merging).
    #[inline]
    pub fn assign(&self, timestamp: i64, out: &mut Vec<TimeWindow>) {
        match self.kind {
            WindowKind::Tumbling { size, offset } => {
                let start = TimeWindow::start_with_offset(timestamp, offset, size);
                out.push(TimeWindow::new(start, start.saturating_add(size)));
            }
            WindowKind::Sliding {
                size,
                slide,
                offset,
            } => {
                let last = TimeWindow::start_with_offset(timestamp, offset, slide);
                let mut start = last;
                while start > timestamp.saturating_sub(size) {
                    out.push(TimeWindow::new(start, start.saturating_add(size)));
                    start -= slide;
                }
            }
            WindowKind::Session { gap } => {
                out.push(TimeWindow::new(timestamp, timestamp.saturating_add(gap)))
            }
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
    fn window_starts_match_flink_for_negative_timestamps_and_offsets() {
        assert_eq!(TimeWindow::start_with_offset(-1, 0, 10), -10);
        assert_eq!(TimeWindow::start_with_offset(-10, 0, 10), -10);
        assert_eq!(TimeWindow::start_with_offset(7, 3, 10), 3);
        assert_eq!(TimeWindow::start_with_offset(2, 3, 10), -7);
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
}
