//! State time-to-live (Flink's `StateTtlConfig`): how long a keyed value lives after it was
//! last written (or read), what a read of an expired value sees, and the rules a store follows
//! to drop expired entries on its own.
//!
//! - [`StateTtlConfig`], [`TtlUpdate`], [`StateVisibility`]: what a user sets on a state
//!   ([`ValueState::with_ttl`](super::ValueState::with_ttl)).
//! - `Stamped`: a value with the processing time of its last access. It encodes as that time
//!   (an `i64`, in sluice's codec) followed by the value's own encoding, so a store can read
//!   the time without knowing the value's type and [`strip_stamp`] leaves the value's bytes.
//! - [`Expiry`] and [`ExpiryRules`]: which states of a store expire and the processing time its
//!   states last saw, shared with the store; a store that compacts (RocksDB) takes the rules
//!   once per compaction and drops the entries [`ExpiryRules::expired`] names.
//!
//! The decisions are the pure functions at the top: [`expired`] and `visible`.
//!
//! ```
//! use sluice_runtime::state::{StateTtlConfig, StateVisibility, TtlUpdate};
//! use std::time::Duration;
//!
//! let ttl = StateTtlConfig::new(Duration::from_secs(3600))
//!     .update_type(TtlUpdate::OnReadAndWrite)
//!     .state_visibility(StateVisibility::NeverReturnExpired)
//!     .cleanup_full_snapshot();
//! assert_eq!(ttl.ttl(), Duration::from_secs(3600));
//! ```

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use sluice_core::codec;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Whether a value last accessed at `at` (processing time, ms) is expired at `now` after a
/// time-to-live of `ttl_ms`: from `at + ttl_ms` on, as in Flink.
pub fn expired(at: i64, ttl_ms: i64, now: i64) -> bool {
    at.saturating_add(ttl_ms) <= now
}

/// Whether a value last accessed at `at` is returned to the user at `now`.
pub(crate) fn visible(config: &StateTtlConfig, at: i64, now: i64) -> bool {
    config.visibility == StateVisibility::ReturnExpiredIfNotCleanedUp
        || !expired(at, config.ttl_ms(), now)
}

/// Which accesses renew a value's time-to-live (Flink's `StateTtlConfig.UpdateType`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TtlUpdate {
    /// Writes renew it: creating or setting a value, and taking it mutably (the default).
    #[default]
    OnCreateAndWrite,
    /// Reads renew it too.
    OnReadAndWrite,
}

/// What a read of an expired value returns (Flink's `StateTtlConfig.StateVisibility`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateVisibility {
    /// Nothing: an expired value is removed when read (the default).
    #[default]
    NeverReturnExpired,
    /// The value, as long as no cleanup removed it yet.
    ReturnExpiredIfNotCleanedUp,
}

/// A keyed state's time-to-live (Flink's `StateTtlConfig`), in processing time: a value
/// expires `ttl` after it was last written (or, with [`TtlUpdate::OnReadAndWrite`], read).
///
/// Expired values are never returned (by default), and removed when read. Besides, unless
/// [`disable_cleanup_in_background`](Self::disable_cleanup_in_background) is called, they are
/// removed in the background: on the heap, by a sweep after as many accesses as the state has
/// keys (at least 1,024) and at every snapshot; in a store that compacts (RocksDB), by its
/// compactions (Flink's compaction filter). [`cleanup_full_snapshot`](Self::cleanup_full_snapshot)
/// leaves them out of full snapshots as well.
///
/// The times of last access are part of the state: a restored value keeps its time, so a
/// restore does not renew it. Adding or removing a time-to-live changes how a state is stored
/// (under its name with `#ttl` appended): a restore of the other choice fails with
/// [`StateError::TimeToLiveChanged`](super::StateError::TimeToLiveChanged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateTtlConfig {
    ttl: Duration,
    update: TtlUpdate,
    visibility: StateVisibility,
    full_snapshot: bool,
    background: bool,
}

impl StateTtlConfig {
    /// Values live `ttl` after their last write; expired ones are never returned and are
    /// cleaned up in the background.
    ///
    /// `ttl` must be at least a millisecond, as Flink wants it positive: a keyed function's
    /// shorter [`state_ttl`](crate::process::KeyedProcessFunction::state_ttl) refuses its job
    /// at submit, and [`OperatorContext::attach_keyed_state`](crate::OperatorContext::attach_keyed_state)
    /// refuses a shorter state with [`StateError::InvalidTimeToLive`](super::StateError::InvalidTimeToLive).
    pub fn new(ttl: Duration) -> Self {
        StateTtlConfig {
            ttl,
            update: TtlUpdate::default(),
            visibility: StateVisibility::default(),
            full_snapshot: false,
            background: true,
        }
    }

    /// Which accesses renew a value's time-to-live.
    pub fn update_type(mut self, update: TtlUpdate) -> Self {
        self.update = update;
        self
    }

    /// What a read of an expired value returns.
    pub fn state_visibility(mut self, visibility: StateVisibility) -> Self {
        self.visibility = visibility;
        self
    }

    /// Leaves expired values out of full snapshots (the heap's, and a store's without
    /// incremental checkpoints), as Flink's `cleanupFullSnapshot`.
    pub fn cleanup_full_snapshot(mut self) -> Self {
        self.full_snapshot = true;
        self
    }

    /// Removes expired values only when read (and from full snapshots, if set): no heap
    /// sweeps, no removal in a store's compactions.
    pub fn disable_cleanup_in_background(mut self) -> Self {
        self.background = false;
        self
    }

    /// The time-to-live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The time-to-live in milliseconds (saturating).
    pub(crate) fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    pub(crate) fn renews_on_read(&self) -> bool {
        self.update == TtlUpdate::OnReadAndWrite
    }

    /// Why a keyed function's `state_ttl()` is refused when its job is submitted, if it is: a
    /// time-to-live under a millisecond, as [`check`](Self::check) refuses it.
    pub(crate) fn refusal(config: Option<&StateTtlConfig>) -> Option<String> {
        let c = config?;
        (c.ttl_ms() < 1).then(|| {
            format!(
                "its state_ttl() is {:?}: a state time-to-live must be at least 1 ms (every \
                 value would expire as soon as written)",
                c.ttl
            )
        })
    }

    /// Refuses a time-to-live under a millisecond, as Flink refuses one that is not positive
    /// (every value would be expired as soon as written); `state` names the state in the error.
    pub(crate) fn check(&self, state: &str) -> Result<(), super::StateError> {
        if self.ttl_ms() < 1 {
            return Err(super::StateError::InvalidTimeToLive {
                state: state.to_string(),
                ttl: self.ttl,
            });
        }
        Ok(())
    }

    pub(crate) fn returns_expired(&self) -> bool {
        self.visibility == StateVisibility::ReturnExpiredIfNotCleanedUp
    }

    pub(crate) fn full_snapshot(&self) -> bool {
        self.full_snapshot
    }

    pub(crate) fn background(&self) -> bool {
        self.background
    }
}

/// A value with the processing time (ms) of its last access: encoded as the time, then the
/// value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stamped<V> {
    pub(crate) at: i64,
    pub(crate) value: V,
}

/// The time of last access at the start of a stamped value's bytes, and the value's own bytes
/// after it; `None` when the bytes do not start with one.
pub fn strip_stamp(bytes: &[u8]) -> Option<(i64, &[u8])> {
    codec::decode_first::<i64>(bytes).ok()
}

/// What the expiring states of one store share with it: their ids and time-to-live, and the
/// latest processing time they saw. States register here when they attach; the store takes
/// [`rules`](Self::rules) when it needs them (RocksDB: at the start of each compaction).
#[derive(Debug)]
pub struct Expiry {
    states: Mutex<Arc<FxHashMap<u32, i64>>>,
    now: AtomicI64,
}

impl Default for Expiry {
    fn default() -> Self {
        Expiry {
            states: Mutex::new(Arc::new(FxHashMap::default())),
            now: AtomicI64::new(i64::MIN),
        }
    }
}

impl Expiry {
    /// No expiring state yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The entries of state `state` expire `ttl_ms` after the time their value starts with.
    pub(crate) fn expire_after(&self, state: u32, ttl_ms: i64) {
        let mut states = sluice_core::sync::lock(&self.states);
        let mut next = FxHashMap::clone(&states);
        next.insert(state, ttl_ms);
        *states = Arc::new(next);
    }

    /// A state saw processing time `now`.
    pub(crate) fn observe(&self, now: i64) {
        self.now.fetch_max(now, Ordering::Relaxed);
    }

    /// The rules as they stand: which states expire, and the time to judge them at.
    pub fn rules(&self) -> ExpiryRules {
        ExpiryRules {
            states: sluice_core::sync::lock(&self.states).clone(),
            now: self.now.load(Ordering::Relaxed),
        }
    }
}

/// A still picture of an [`Expiry`], for one pass over a store's entries.
#[derive(Clone, Debug)]
pub struct ExpiryRules {
    states: Arc<FxHashMap<u32, i64>>,
    now: i64,
}

impl ExpiryRules {
    /// Whether no state of the store expires (nothing to judge).
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// Whether the store entry `key` → `value` is an expired value of an expiring state. A key
    /// is the key group (2 bytes), the state id (4 bytes, big-endian), then the user key; the
    /// value of an expiring state starts with its time of last access. Anything else is kept.
    pub fn expired(&self, key: &[u8], value: &[u8]) -> bool {
        let Some(id) = key.get(2..6) else {
            return false;
        };
        let id = u32::from_be_bytes([id[0], id[1], id[2], id[3]]);
        let Some(&ttl_ms) = self.states.get(&id) else {
            return false;
        };
        strip_stamp(value).is_some_and(|(at, _)| expired(at, ttl_ms, self.now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{key_prefix, state_id};

    fn stamped(at: i64, value: &str) -> Vec<u8> {
        codec::encode(&Stamped {
            at,
            value: value.to_string(),
        })
        .unwrap()
    }

    #[test]
    fn a_value_expires_exactly_ttl_after_its_last_access() {
        assert!(!expired(1_000, 500, 1_499));
        assert!(expired(1_000, 500, 1_500));
        assert!(!expired(i64::MAX - 1, 500, i64::MAX - 1), "no overflow");
    }

    #[test]
    fn the_stamp_is_read_without_the_values_type_and_leaves_its_bytes() {
        let bytes = stamped(-7, "seven");
        let (at, rest) = strip_stamp(&bytes).unwrap();
        assert_eq!(at, -7);
        assert_eq!(codec::decode::<String>(rest).unwrap(), "seven");
    }

    #[test]
    fn rules_judge_only_the_expiring_states_at_the_latest_time_seen() {
        let expiry = Expiry::new();
        let ttl = state_id("ttl");
        expiry.expire_after(ttl, 100);
        expiry.observe(1_000);
        expiry.observe(900); // an older reading does not move time back
        let rules = expiry.rules();
        let key = |id: u32| {
            let mut k = key_prefix(3, id).to_vec();
            k.extend_from_slice(b"user");
            k
        };
        assert!(rules.expired(&key(ttl), &stamped(900, "old")));
        assert!(!rules.expired(&key(ttl), &stamped(901, "young")));
        assert!(
            !rules.expired(&key(state_id("plain")), &stamped(0, "x")),
            "a state without a time-to-live keeps everything"
        );
        assert!(
            !rules.expired(&key(ttl)[..4], &stamped(0, "x")),
            "short key"
        );
        assert!(!rules.expired(&key(ttl), &[]), "empty value");
        // Registered after a picture was taken: only later pictures see it.
        expiry.expire_after(state_id("late"), 1);
        assert!(!rules.expired(&key(state_id("late")), &stamped(0, "x")));
        assert!(
            expiry
                .rules()
                .expired(&key(state_id("late")), &stamped(0, "x"))
        );
    }
}
