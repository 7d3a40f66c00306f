//! Credit-based flow control of one channel, as pure state: the receiving end owns a window of
//! `capacity` credits, each standing for [`CREDIT_BYTES`] bytes of buffer, and grants them to
//! the sender; a data frame costs [`credits_for`] its length (at least one, at most
//! [`MAX_FRAME_CREDITS`]) and the sender never sends without them. So the frames of a channel
//! queued at the receiver never cost more than `capacity` credits, however slow its consumer,
//! and a slow consumer holds back only its own channel's sender, not the connection.
//!
//! Counting bytes rather than frames keeps a window's slack in time the same whatever the frame
//! sizes: a channel of small frames (one batch of small records each) may have many in flight,
//! one of large frames few. What a window holds is at most `capacity × CREDIT_BYTES` bytes of
//! frames up to `MAX_FRAME_CREDITS × CREDIT_BYTES`, and at most `capacity / MAX_FRAME_CREDITS`
//! frames of any larger size. A window is never smaller than `MAX_FRAME_CREDITS`, so any frame
//! can be sent once the receiver has drained its queue.
//!
//! Credits go back in batches: a consumed frame's credits become credit to announce, and credit
//! is announced once at least [`ReceiverWindow::announce_at`] of it gathered (half the window,
//! less in small windows), so a busy channel sends one credit frame per half window, not per
//! frame. This cannot stall a channel: once the consumer has emptied the queue, the credit
//! still unannounced is below the threshold, which leaves the sender at least
//! `MAX_FRAME_CREDITS`, the most any frame costs.
//!
//! ```
//! use sluice_net::credit::{CREDIT_BYTES, MAX_FRAME_CREDITS, ReceiverWindow, SenderCredit, credits_for};
//!
//! assert_eq!(credits_for(10), 1);
//! assert_eq!(credits_for(CREDIT_BYTES + 1), 2);
//! assert_eq!(credits_for(100 << 20), MAX_FRAME_CREDITS);
//! // A window of 16 credits: the receiver grants all 16 when the channel opens.
//! let (mut window, initial) = ReceiverWindow::new(16);
//! let mut sender = SenderCredit::default();
//! sender.grant(initial);
//! // The sender sends two frames of 8 credits each, then has to wait.
//! let big = 8 * CREDIT_BYTES;
//! for _ in 0..2 {
//!     assert!(sender.try_take(big));
//!     window.on_data(big).unwrap();
//! }
//! assert!(!sender.try_take(10));
//! // The consumer takes one: 8 credits, half the window, worth a credit frame.
//! assert_eq!(window.on_consumed(big), Some(8));
//! sender.grant(8);
//! assert!(sender.try_take(10));
//! window.on_data(10).unwrap();
//! // A sender that ignores its credit is caught.
//! assert!(window.on_data(big).is_err());
//! ```

/// Bytes of buffer one credit stands for.
pub const CREDIT_BYTES: usize = 4096;

/// The most credits one frame costs, however long; a window holds at least this many.
pub const MAX_FRAME_CREDITS: u32 = 16;

/// What a frame of `len` bytes costs: one credit per [`CREDIT_BYTES`] begun, at least one and
/// at most [`MAX_FRAME_CREDITS`].
pub fn credits_for(len: usize) -> u32 {
    let credits = len
        .div_ceil(CREDIT_BYTES)
        .clamp(1, MAX_FRAME_CREDITS as usize);
    credits as u32
}

/// Data arrived beyond the credit granted: the peer does not follow the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "a data frame costing {cost} credits arrived without them: {queued} of {capacity} credits already queued"
)]
pub struct CreditViolation {
    /// What the frame costs.
    pub cost: u32,
    /// Credits queued when it arrived.
    pub queued: u32,
    /// The window.
    pub capacity: u32,
}

/// The receiving end of a channel: the credits its queued frames hold and the credit it owes
/// the sender.
#[derive(Clone, Debug)]
pub struct ReceiverWindow {
    capacity: u32,
    queued: u32,
    unannounced: u32,
    max_queued: u32,
}

impl ReceiverWindow {
    /// A window of `capacity` credits (at least [`MAX_FRAME_CREDITS`]), and the credit to grant
    /// when the channel opens (all of it).
    pub fn new(capacity: u32) -> (Self, u32) {
        let capacity = capacity.max(MAX_FRAME_CREDITS);
        let window = ReceiverWindow {
            capacity,
            queued: 0,
            unannounced: 0,
            max_queued: 0,
        };
        (window, capacity)
    }

    /// How much gathered credit is worth a credit frame: half the window, or less in a window
    /// under twice [`MAX_FRAME_CREDITS`], so that what stays unannounced never keeps the
    /// sender from the most a frame costs.
    pub fn announce_at(&self) -> u32 {
        (self.capacity / 2)
            .min(self.capacity + 1 - MAX_FRAME_CREDITS)
            .max(1)
    }

    /// A data frame of `len` bytes arrived and takes its credits; an error if the sender did
    /// not have them.
    pub fn on_data(&mut self, len: usize) -> Result<(), CreditViolation> {
        let cost = credits_for(len);
        if self.queued + self.unannounced + cost > self.capacity {
            return Err(CreditViolation {
                cost,
                queued: self.queued,
                capacity: self.capacity,
            });
        }
        self.queued += cost;
        self.max_queued = self.max_queued.max(self.queued);
        Ok(())
    }

    /// The consumer took a frame of `len` bytes: the credit to announce now, if enough
    /// gathered.
    pub fn on_consumed(&mut self, len: usize) -> Option<u32> {
        let freed = credits_for(len).min(self.queued);
        if freed == 0 {
            return None;
        }
        self.queued -= freed;
        self.unannounced += freed;
        (self.unannounced >= self.announce_at()).then(|| std::mem::take(&mut self.unannounced))
    }

    /// Credits the queued frames hold now.
    pub fn queued(&self) -> u32 {
        self.queued
    }

    /// The most credits ever queued at once (never above the capacity).
    pub fn max_queued(&self) -> u32 {
        self.max_queued
    }

    /// The window, in credits.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

/// The sending end of a channel: the credit it holds.
#[derive(Clone, Debug, Default)]
pub struct SenderCredit {
    available: u64,
}

impl SenderCredit {
    /// `credits` more arrived.
    pub fn grant(&mut self, credits: u32) {
        self.available += u64::from(credits);
    }

    /// Spends what a frame of `len` bytes costs, if the sender holds that much.
    pub fn try_take(&mut self, len: usize) -> bool {
        let cost = u64::from(credits_for(len));
        let has = self.available >= cost;
        if has {
            self.available -= cost;
        }
        has
    }

    /// Credit held now.
    pub fn available(&self) -> u64 {
        self.available
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A step of a run: send a frame of this many bytes (`Some`), or consume the oldest.
    fn step() -> impl Strategy<Value = Option<usize>> {
        prop_oneof![
            Just(None),
            (0usize..3 * CREDIT_BYTES).prop_map(Some),
            (0usize..(MAX_FRAME_CREDITS as usize + 4) * CREDIT_BYTES).prop_map(Some),
        ]
    }

    proptest! {
        /// Under any interleaving of sends of any size and consumption, a sender that follows
        /// its credit is never refused, the queue never holds more than the window, and once
        /// the consumer drains the queue the sender can send any frame again (no stall).
        #[test]
        fn credit_bounds_the_queue_and_never_stalls(
            capacity in 1u32..128,
            steps in proptest::collection::vec(step(), 1..2_000),
        ) {
            let (mut window, initial) = ReceiverWindow::new(capacity);
            let capacity = window.capacity();
            let mut sender = SenderCredit::default();
            sender.grant(initial);
            let mut queue = std::collections::VecDeque::new();
            for step in steps {
                match step {
                    Some(len) => {
                        if sender.try_take(len) {
                            prop_assert!(window.on_data(len).is_ok());
                            queue.push_back(len);
                        }
                    }
                    None => {
                        if let Some(len) = queue.pop_front()
                            && let Some(n) = window.on_consumed(len)
                        {
                            sender.grant(n);
                        }
                    }
                }
                prop_assert!(window.queued() <= capacity);
                // Credit held + queued + owed is the whole window.
                prop_assert_eq!(
                    sender.available() + u64::from(window.queued()) + u64::from(window.unannounced),
                    u64::from(capacity)
                );
            }
            while let Some(len) = queue.pop_front() {
                if let Some(n) = window.on_consumed(len) {
                    sender.grant(n);
                }
            }
            prop_assert!(sender.available() >= u64::from(window.announce_at()));
            prop_assert!(sender.available() >= u64::from(MAX_FRAME_CREDITS));
            prop_assert!(sender.try_take(usize::MAX / 2));
            prop_assert!(window.max_queued() <= capacity);
        }
    }
}
