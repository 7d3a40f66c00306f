//! Clicks per user per minute: the aggregate a 1-minute tumbling event-time window keeps per
//! (user, minute), and the row it becomes in the Iceberg table.

use crate::lookup::{EnrichedClick, Profile};
use serde::{Deserialize, Serialize};

/// One row of the table: a user's clicks in one minute of event time, with the user's profile.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ClicksPerMinute {
    /// Who clicked (Iceberg `long`).
    pub user: i64,
    /// The minute's first instant, in microseconds since the Unix epoch (Iceberg `timestamp`).
    pub minute: i64,
    /// The user's clicks in that minute.
    pub clicks: i64,
    /// The user's country, from the profile lookup ("??" when every lookup of the minute timed
    /// out).
    pub country: String,
    /// The user's subscription tier, from the profile lookup ("unknown" likewise).
    pub tier: String,
}

/// What a window keeps: the count, and the user's profile (a known one wins over "unknown").
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Acc {
    clicks: u64,
    profile: Option<Profile>,
}

/// Counts the clicks of a window: an accumulator per (user, minute), never the clicks.
#[derive(Clone)]
pub struct CountClicks;

impl sluice::window::AggregateFunction<EnrichedClick> for CountClicks {
    type Acc = Acc;
    type Out = (u64, Profile);

    fn create_accumulator(&self) -> Acc {
        Acc::default()
    }

    fn add(&self, click: EnrichedClick, acc: &mut Acc) {
        acc.clicks += 1;
        let unknown = acc.profile.as_ref().is_none_or(Profile::is_unknown);
        if unknown {
            acc.profile = Some(click.profile);
        }
    }

    fn get_result(&self, acc: &Acc) -> (u64, Profile) {
        (
            acc.clicks,
            acc.profile.clone().unwrap_or_else(Profile::unknown),
        )
    }

    fn merge(&self, a: Acc, b: Acc) -> Acc {
        let profile = match (a.profile, b.profile) {
            (Some(p), other) if !p.is_unknown() => Some(p).or(other),
            (p, other) => other.or(p),
        };
        Acc {
            clicks: a.clicks + b.clicks,
            profile,
        }
    }
}
