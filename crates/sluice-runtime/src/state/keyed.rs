//! Keyed state: [`ValueState`] (one value per key) and [`MapState`] (a map per key), stored by
//! key group so that a restore at another parallelism moves each key with its key group.

use super::{KeyGroupEntry, OperatorState};
use crate::key_groups::key_group;
use rustc_hash::FxHashMap;
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::codec::{self, CodecError};
use std::collections::BTreeMap;
use std::hash::Hash;

/// One value per key, for operators after `key_by`.
///
/// The operator owns it as a field, updates it per record, writes it in `snapshot_state` and reads
/// it back in `initialize_state`. Only the keys of this subtask's key groups come back.
///
/// ```
/// use sluice_runtime::state::ValueState;
/// use sluice_runtime::OperatorState;
///
/// let mut counts: ValueState<String, u64> = ValueState::new("counts");
/// *counts.get_or_default("alice".into()) += 2;
/// let mut snapshot = OperatorState::default();
/// counts.snapshot_into(128, &mut snapshot).unwrap();
///
/// let mut restored: ValueState<String, u64> = ValueState::new("counts");
/// restored.restore_from(&snapshot).unwrap();
/// assert_eq!(restored.get(&"alice".to_string()), Some(&2));
/// ```
#[derive(Clone, Debug)]
pub struct ValueState<K, V> {
    name: String,
    values: FxHashMap<K, V>,
}

impl<K, V> ValueState<K, V>
where
    K: Hash + Eq + Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    /// An empty state named `name` (unique within its operator).
    pub fn new(name: &str) -> Self {
        ValueState {
            name: name.to_string(),
            values: FxHashMap::default(),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.values.get(key)
    }

    /// The value of `key`, mutably.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.values.get_mut(key)
    }

    /// The value of `key`, inserting the default first if absent.
    pub fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        self.values.entry(key).or_default()
    }

    /// Sets the value of `key`.
    pub fn update(&mut self, key: K, value: V) -> Option<V> {
        self.values.insert(key, value)
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.values.remove(key)
    }

    /// Every key and value.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.values.iter()
    }

    /// Every key and its value, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.values.iter_mut()
    }

    /// Keeps only the keys for which `keep` returns true.
    pub fn retain(&mut self, keep: impl FnMut(&K, &mut V) -> bool) {
        self.values.retain(keep);
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Writes one keyed entry per non-empty key group.
    pub fn snapshot_into(
        &self,
        max_parallelism: usize,
        state: &mut OperatorState,
    ) -> Result<(), CodecError> {
        // One pass over the map: each pair is encoded straight into its key group's buffer. An
        // entry is the encoding of the group's `Vec<(K, V)>` (its length as a varint, then the
        // pairs), so the count is put in front at the end.
        let mut groups: Vec<(u64, Vec<u8>)> =
            (0..max_parallelism).map(|_| (0, Vec::new())).collect();
        for (k, v) in &self.values {
            let (n, buf) = &mut groups[key_group(k, max_parallelism)];
            codec::encode_into(&(k, v), buf)?;
            *n += 1;
        }
        for (g, (n, pairs)) in groups.into_iter().enumerate() {
            if n == 0 {
                continue;
            }
            let mut data = Vec::with_capacity(pairs.len() + 10);
            codec::encode_into(&n, &mut data)?;
            data.extend_from_slice(&pairs);
            state.push_keyed(KeyGroupEntry {
                state: self.name.clone(),
                key_group: g as u32,
                data,
            });
        }
        Ok(())
    }

    /// Adds every key of this state's entries in `state` (other states' entries are skipped).
    pub fn restore_from(&mut self, state: &OperatorState) -> Result<(), CodecError> {
        for e in state
            .keyed_entries()
            .iter()
            .filter(|e| e.state == self.name)
        {
            let pairs: Vec<(K, V)> = codec::decode(&e.data)?;
            self.values.extend(pairs);
        }
        Ok(())
    }
}

/// A map per key (Flink's `MapState`): for each key, user keys to user values.
///
/// ```
/// use sluice_runtime::state::MapState;
/// let mut visits: MapState<u64, String, u32> = MapState::new("visits");
/// visits.put(1, "/home".into(), 3);
/// assert_eq!(visits.get(&1, &"/home".to_string()), Some(&3));
/// ```
#[derive(Clone, Debug)]
pub struct MapState<K, UK, UV> {
    inner: ValueState<K, BTreeMap<UK, UV>>,
}

impl<K, UK, UV> MapState<K, UK, UV>
where
    K: Hash + Eq + Serialize + DeserializeOwned,
    UK: Ord + Serialize + DeserializeOwned,
    UV: Serialize + DeserializeOwned,
{
    /// An empty state named `name`.
    pub fn new(name: &str) -> Self {
        MapState {
            inner: ValueState::new(name),
        }
    }

    /// The value of `user_key` under `key`.
    pub fn get(&self, key: &K, user_key: &UK) -> Option<&UV> {
        self.inner.get(key).and_then(|m| m.get(user_key))
    }

    /// Sets the value of `user_key` under `key`.
    pub fn put(&mut self, key: K, user_key: UK, value: UV) -> Option<UV> {
        self.inner.get_or_default(key).insert(user_key, value)
    }

    /// Removes `user_key` under `key`.
    pub fn remove(&mut self, key: &K, user_key: &UK) -> Option<UV> {
        self.inner.get_mut(key).and_then(|m| m.remove(user_key))
    }

    /// The map of `key`.
    pub fn entries(&self, key: &K) -> Option<&BTreeMap<UK, UV>> {
        self.inner.get(key)
    }

    /// Writes one keyed entry per non-empty key group.
    pub fn snapshot_into(
        &self,
        max_parallelism: usize,
        state: &mut OperatorState,
    ) -> Result<(), CodecError> {
        self.inner.snapshot_into(max_parallelism, state)
    }

    /// Adds every key of this state's entries in `state`.
    pub fn restore_from(&mut self, state: &OperatorState) -> Result<(), CodecError> {
        self.inner.restore_from(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::redistribute;

    #[test]
    fn keyed_state_follows_its_keys_when_rescaled_from_2_to_3() {
        let maxp = 128;
        let keys: Vec<u64> = (0..1000).collect();
        // two old subtasks each hold the keys they own at parallelism 2
        let mut old = Vec::new();
        for s in 0..2 {
            let mut st: ValueState<u64, u64> = ValueState::new("c");
            for &k in &keys {
                let g = key_group(&k, maxp);
                if crate::key_groups::subtask_for_key_group(g, maxp, 2) == s {
                    st.update(k, k * 10);
                }
            }
            let mut snap = OperatorState::default();
            st.snapshot_into(maxp, &mut snap).unwrap();
            old.push(snap);
        }
        let new = redistribute(old, 3, maxp);
        let mut seen = 0;
        for (s, snap) in new.iter().enumerate() {
            let mut st: ValueState<u64, u64> = ValueState::new("c");
            st.restore_from(snap).unwrap();
            for (k, v) in st.iter() {
                assert_eq!(*v, k * 10);
                let g = key_group(k, maxp);
                assert_eq!(crate::key_groups::subtask_for_key_group(g, maxp, 3), s);
                seen += 1;
            }
        }
        assert_eq!(seen, keys.len());
    }

    #[test]
    fn a_key_group_entry_is_the_encoding_of_its_pairs() {
        let mut st: ValueState<u64, String> = ValueState::new("s");
        for k in 0..500u64 {
            st.update(k, format!("v{k}"));
        }
        let mut snap = OperatorState::default();
        st.snapshot_into(8, &mut snap).unwrap();
        for e in snap.keyed_entries() {
            let pairs: Vec<(u64, String)> = codec::decode(&e.data).unwrap();
            let again: Vec<(&u64, &String)> = pairs.iter().map(|(k, v)| (k, v)).collect();
            assert_eq!(codec::encode(&again).unwrap(), e.data);
            assert!(
                pairs
                    .iter()
                    .all(|(k, _)| key_group(k, 8) as u32 == e.key_group)
            );
        }
    }

    #[test]
    fn states_with_other_names_are_skipped() {
        let mut a: ValueState<u8, u8> = ValueState::new("a");
        a.update(1, 1);
        let mut snap = OperatorState::default();
        a.snapshot_into(128, &mut snap).unwrap();
        let mut b: ValueState<u8, u8> = ValueState::new("b");
        b.restore_from(&snap).unwrap();
        assert!(b.is_empty());
    }
}
