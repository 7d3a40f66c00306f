//! [`WatermarkValve`]: a task's watermark from the watermarks and idleness of its input channels.

use sluice_core::{Watermark, WatermarkStatus};

#[derive(Clone, Copy, Debug)]
struct Channel {
    watermark: Watermark,
    idle: bool,
    ended: bool,
}

/// Merges the watermarks of several input channels into the task's watermark.
///
/// The rules (Flink's `StatusWatermarkValve`):
/// - each channel's watermark only grows;
/// - the output is the minimum over the channels that are active (not idle) and have not ended,
///   and it is emitted only when it grows;
/// - a channel that became active again after being idle counts only once its watermark has caught
///   up with the output (it cannot pull event time back);
/// - when every live channel is idle, the task reports itself idle; when one becomes active, it
///   reports active again;
/// - an ended channel no longer counts (sources send the maximum watermark before ending).
///
/// It is a pure state machine: no clocks, no I/O. The worked example of the module
/// documentation is the unit test `worked_example_minimum_over_two_channels`.
#[derive(Clone, Debug)]
pub(crate) struct WatermarkValve {
    channels: Vec<Channel>,
    last: Watermark,
    idle: bool,
}

/// What the task should emit after a valve update.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ValveOutput {
    /// A status change to emit first, if any.
    pub status: Option<WatermarkStatus>,
    /// A new, higher watermark to emit, if any.
    pub watermark: Option<Watermark>,
}

impl WatermarkValve {
    /// A valve over `channels` input channels, all active at the minimum watermark.
    pub(crate) fn new(channels: usize) -> Self {
        WatermarkValve {
            channels: vec![
                Channel {
                    watermark: Watermark::MIN,
                    idle: false,
                    ended: false,
                };
                channels
            ],
            last: Watermark::MIN,
            idle: false,
        }
    }

    /// The last watermark emitted.
    #[cfg(test)]
    pub(crate) fn current(&self) -> Watermark {
        self.last
    }

    /// Channel `ch` delivered watermark `w` (a watermark also marks the channel active).
    pub(crate) fn on_watermark(&mut self, ch: usize, w: Watermark) -> ValveOutput {
        let c = &mut self.channels[ch];
        if w > c.watermark {
            c.watermark = w;
        }
        c.idle = false;
        self.recompute()
    }

    /// Channel `ch` became idle or active.
    pub(crate) fn on_status(&mut self, ch: usize, status: WatermarkStatus) -> ValveOutput {
        self.channels[ch].idle = status == WatermarkStatus::Idle;
        self.recompute()
    }

    /// Channel `ch` ended.
    pub(crate) fn on_end(&mut self, ch: usize) -> ValveOutput {
        self.channels[ch].ended = true;
        self.recompute()
    }

    fn recompute(&mut self) -> ValveOutput {
        let mut out = ValveOutput::default();
        let live = self.channels.iter().filter(|c| !c.ended).count();
        let active = self.channels.iter().filter(|c| !c.ended && !c.idle).count();
        if live > 0 && active == 0 {
            if !self.idle {
                self.idle = true;
                out.status = Some(WatermarkStatus::Idle);
            }
            return out;
        }
        if self.idle && active > 0 {
            self.idle = false;
            out.status = Some(WatermarkStatus::Active);
        }
        let min = self
            .channels
            .iter()
            .filter(|c| !c.ended && !c.idle && c.watermark >= self.last)
            .map(|c| c.watermark)
            .min();
        if let Some(m) = min
            && m > self.last
        {
            self.last = m;
            out.watermark = Some(m);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn wm(t: i64) -> Watermark {
        Watermark::new(t)
    }

    #[test]
    fn worked_example_minimum_over_two_channels() {
        let mut v = WatermarkValve::new(2);
        assert_eq!(v.on_watermark(0, wm(10)).watermark, None); // channel 1 still at MIN
        assert_eq!(v.on_watermark(1, wm(7)).watermark, Some(wm(7)));
        assert_eq!(v.on_watermark(1, wm(20)).watermark, Some(wm(10)));
    }

    #[test]
    fn min_over_channels() {
        let mut v = WatermarkValve::new(3);
        assert_eq!(v.on_watermark(0, wm(5)).watermark, None);
        assert_eq!(v.on_watermark(1, wm(3)).watermark, None);
        assert_eq!(v.on_watermark(2, wm(4)).watermark, Some(wm(3)));
        assert_eq!(v.on_watermark(1, wm(9)).watermark, Some(wm(4)));
    }

    #[test]
    fn idle_channel_does_not_hold_back_and_rejoins_only_when_caught_up() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, wm(100));
        assert_eq!(v.on_watermark(1, wm(50)).watermark, Some(wm(50)));
        let out = v.on_status(1, WatermarkStatus::Idle);
        assert_eq!(out.watermark, Some(wm(100)));
        assert_eq!(out.status, None);
        // channel 1 comes back behind: it must not pull the watermark back nor hold it
        assert_eq!(v.on_watermark(1, wm(60)).watermark, None);
        assert_eq!(v.on_watermark(0, wm(200)).watermark, Some(wm(200)));
        // once caught up it counts again
        assert_eq!(v.on_watermark(1, wm(250)).watermark, None);
        assert_eq!(v.on_watermark(0, wm(300)).watermark, Some(wm(250)));
    }

    #[test]
    fn all_idle_reports_idle_then_active() {
        let mut v = WatermarkValve::new(2);
        assert_eq!(v.on_status(0, WatermarkStatus::Idle).status, None);
        assert_eq!(
            v.on_status(1, WatermarkStatus::Idle).status,
            Some(WatermarkStatus::Idle)
        );
        let out = v.on_watermark(1, wm(5));
        assert_eq!(out.status, Some(WatermarkStatus::Active));
        assert_eq!(out.watermark, Some(wm(5)));
    }

    #[test]
    fn ended_channels_do_not_count() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, wm(10));
        assert_eq!(v.on_end(1).watermark, Some(wm(10)));
        assert_eq!(
            v.on_watermark(0, Watermark::MAX).watermark,
            Some(Watermark::MAX)
        );
    }

    proptest! {
        /// Whatever the channels do, the output never goes back and never passes the minimum
        /// of the active channels that count.
        #[test]
        fn output_is_monotone_and_bounded(ops in proptest::collection::vec((0usize..3, 0u8..3, 0i64..100), 0..200)) {
            let mut v = WatermarkValve::new(3);
            let mut last = Watermark::MIN;
            let mut per = [Watermark::MIN; 3];
            for (ch, kind, t) in ops {
                let out = match kind {
                    0 => { per[ch] = per[ch].max(wm(t)); v.on_watermark(ch, wm(t)) }
                    1 => v.on_status(ch, WatermarkStatus::Idle),
                    _ => v.on_status(ch, WatermarkStatus::Active),
                };
                if let Some(w) = out.watermark {
                    prop_assert!(w > last);
                    prop_assert!(per.contains(&w));
                    last = w;
                }
                prop_assert_eq!(v.current(), last);
            }
        }
    }
}
