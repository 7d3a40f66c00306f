//! The per-user click count, kept in keyed state so that it survives failures and restores, and
//! the record it writes for every click.

use crate::lookup::EnrichedClick;
use serde::{Deserialize, Serialize};
use sluice::core::CheckpointId;
use sluice::prelude::*;
use sluice::state::ValueState;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One line of the output: a click with its user's profile and the user's running count.
///
/// Exactly-once output means every `(user, clicks)` pair appears once, and a user's pairs run
/// from 1 to that user's number of clicks without a gap.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CountedClick {
    /// Who clicked.
    pub user: u64,
    /// How many clicks this user has made so far, this one included.
    pub clicks: u64,
    /// The user's country, from the profile lookup.
    pub country: String,
    /// The user's subscription tier, from the profile lookup.
    pub tier: String,
    /// Event time, in milliseconds since the Unix epoch.
    pub time_ms: i64,
}

/// Counts clicks per user (after `key_by(user)`) and emits every click with its running count.
#[derive(Clone)]
pub struct CountPerUser {
    counts: ValueState<u64, u64>,
    max_parallelism: usize,
    last_checkpoint: Arc<AtomicU64>,
}

impl CountPerUser {
    /// A counter that records the id of each completed checkpoint in `last_checkpoint`, for the
    /// progress line.
    pub fn new(last_checkpoint: Arc<AtomicU64>) -> Self {
        CountPerUser {
            counts: ValueState::new("clicks per user"),
            max_parallelism: sluice::DEFAULT_MAX_PARALLELISM,
            last_checkpoint,
        }
    }
}

impl Operator<EnrichedClick> for CountPerUser {
    type Out = CountedClick;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.max_parallelism = ctx.max_parallelism();
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<EnrichedClick>,
        out: &mut Collector<CountedClick>,
    ) -> Result<(), UserError> {
        for EnrichedClick { click, profile } in batch {
            let clicks = self.counts.get_or_default(click.user);
            *clicks += 1;
            out.collect(CountedClick {
                user: click.user,
                clicks: *clicks,
                country: profile.country,
                tier: profile.tier,
                time_ms: click.timestamp_ms,
            });
        }
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        _out: &mut Collector<CountedClick>,
    ) -> Result<OperatorState, UserError> {
        let mut state = OperatorState::default();
        self.counts
            .snapshot_into(self.max_parallelism, &mut state)?;
        Ok(state)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.counts.restore_from(&state)?;
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        self.last_checkpoint
            .fetch_max(checkpoint.0, Ordering::Relaxed);
        Ok(())
    }
}

/// One line of the per-minute output: a user's clicks in one minute of event time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClicksPerMinute {
    /// Who clicked.
    pub user: u64,
    /// The minute's first millisecond, since the Unix epoch.
    pub minute_ms: i64,
    /// The user's clicks in that minute.
    pub clicks: u64,
}

/// Counts the clicks of a window: an accumulator per (user, minute), never the clicks.
#[derive(Clone)]
pub struct CountClicks;

impl sluice::window::AggregateFunction<EnrichedClick> for CountClicks {
    type Acc = u64;
    type Out = u64;
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _click: EnrichedClick, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}
