//! The compaction filter that drops the expired values of states with a time-to-live (Flink's
//! `cleanupInRocksdbCompactFilter`). Every store installs its factory; RocksDB makes one filter
//! per compaction, which takes the store's [`Expiry`] rules as they stand then (the states that
//! expire, the latest processing time they saw) and removes the entries the rules name. RocksDB
//! turns a removal into a deletion marker where an older version of the key may lie below, so
//! no older value comes back. A store without expiring states keeps everything.

use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};
use sluice_runtime::state::{Expiry, ExpiryRules};
use std::ffi::CStr;
use std::sync::Arc;

const NAME: &CStr = c"sluice-state-ttl";

/// Makes a [`ExpiredValues`] filter per compaction.
pub(crate) struct ExpiredValuesFactory {
    pub(crate) expiry: Arc<Expiry>,
}

impl CompactionFilterFactory for ExpiredValuesFactory {
    type Filter = ExpiredValues;

    fn create(&mut self, _context: CompactionFilterContext) -> ExpiredValues {
        ExpiredValues {
            rules: self.expiry.rules(),
        }
    }

    fn name(&self) -> &CStr {
        NAME
    }
}

/// Removes what the rules taken at the compaction's start call expired.
pub(crate) struct ExpiredValues {
    rules: ExpiryRules,
}

impl CompactionFilter for ExpiredValues {
    fn filter(&mut self, _level: u32, key: &[u8], value: &[u8]) -> Decision {
        if !self.rules.is_empty() && self.rules.expired(key, value) {
            Decision::Remove
        } else {
            Decision::Keep
        }
    }

    fn name(&self) -> &CStr {
        NAME
    }
}

#[cfg(test)]
mod tests {
    use crate::RocksDbStateBackend;
    use sluice_core::NodeId;
    use sluice_runtime::OperatorState;
    use sluice_runtime::state::{
        AttachKeyedState, KeyedStore, MapState, StateTtlConfig, StateVisibility, StoreScope,
        ValueCaches, ValueState,
    };
    use std::sync::Arc;
    use std::time::Duration;

    const MINUTE: Duration = Duration::from_secs(60);

    /// Expired values stay readable until a cleanup removes them (`ReturnExpiredIfNotCleanedUp`):
    /// what a read returns after a compaction tells whether the compaction removed them.
    #[tokio::test(start_paused = true)]
    async fn compactions_drop_expired_values_of_expiring_states_only() {
        let dir = tempfile::tempdir().unwrap();
        let scope = StoreScope {
            node: NodeId(1),
            operator_name: "ttl".into(),
            subtask: 0,
            attempt: 0,
            max_parallelism: 16,
            parallelism: 1,
        };
        let backend = RocksDbStateBackend::new(dir.path()).value_cache_bytes(0);
        let store = Arc::new(
            backend
                .open_dir(&scope, backend.fresh_dir(&scope).unwrap())
                .unwrap(),
        );
        let shared: Arc<dyn KeyedStore> = store.clone();
        let config = StateTtlConfig::new(MINUTE)
            .state_visibility(StateVisibility::ReturnExpiredIfNotCleanedUp);
        let mut old: ValueState<u32, u32> = ValueState::with_ttl("old", config.clone());
        let mut young: ValueState<u32, u32> = ValueState::with_ttl("young", config.clone());
        let mut plain: ValueState<u32, u32> = ValueState::new("plain");
        // Each entry of a map is a stored value of its own, and expires on its own.
        let mut map: MapState<u32, u32, u32> = MapState::with_ttl("map", config.clone());
        for st in [&mut old, &mut young, &mut plain] {
            st.attach(shared.clone(), 16, 0, "ttl").unwrap();
        }
        map.attach_to(shared.clone(), 16, ValueCaches::per_state(0), "ttl")
            .unwrap();
        for k in 0..1_000 {
            old.update(k, k);
            plain.update(k, k);
            map.put(k, 0, k);
        }
        map.snapshot_into(16, &mut OperatorState::default())
            .unwrap();
        tokio::time::advance(MINUTE / 2).await;
        for k in 0..1_000 {
            map.put(k, 1, k);
        }
        map.snapshot_into(16, &mut OperatorState::default())
            .unwrap();
        advance_and_write_back(&mut [&mut old, &mut plain], MINUTE / 2).await;
        for k in 0..1_000 {
            young.update(k, k);
        }
        advance_and_write_back(&mut [&mut young], Duration::from_secs(1)).await;
        // Expired, not cleaned up yet: still there.
        assert_eq!(old.get(&500), Some(&500));
        assert_eq!(old.get(&501), Some(&501));
        assert_eq!(
            map.entries(&500).count(),
            2,
            "entry 0 expired, not cleaned up"
        );

        store.compact_all().unwrap();
        let gone = (0..1_000).filter(|k| old.get(k).is_none()).count();
        assert!(
            gone >= 1_000 - 16,
            "{gone} of 1,000 expired values removed (16 may be cached)"
        );
        // The expired entry of each map went, the entry still alive stayed.
        for k in 0..1_000 {
            let left: Vec<(u32, u32)> = map.entries(&k).map(|(u, v)| (*u, *v)).collect();
            assert_eq!(left, [(1, k)], "key {k}");
        }
        for k in 0..1_000 {
            assert_eq!(young.get(&k), Some(&k), "not expired");
            assert_eq!(plain.get(&k), Some(&k), "no time-to-live");
        }
        for st in [&mut old, &mut young, &mut plain] {
            assert!(st.take_error().is_none());
        }
        assert!(map.take_error().is_none());
    }

    /// Advances processing time by `by`, then writes every state's changed values to the store
    /// (a snapshot does).
    async fn advance_and_write_back(states: &mut [&mut ValueState<u32, u32>], by: Duration) {
        tokio::time::advance(by).await;
        for st in states {
            st.snapshot_into(16, &mut OperatorState::default()).unwrap();
        }
    }
}
