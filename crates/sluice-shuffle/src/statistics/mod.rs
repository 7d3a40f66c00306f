//! Key statistics: what a subtask counts between two checkpoints ([`LocalStatistics`]: exact
//! counts per key, or a reservoir sample of the keys), the statistics types, and the sampling
//! machinery ([`Reservoir`], [`ReservoirUnion`]).

mod reservoir;

pub use reservoir::{Reservoir, ReservoirUnion, Slot};

use rustc_hash::FxHashMap;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::hash::Hash;

/// What a range-shuffle key must be: ordered (ranges are ranges of keys), hashable (exact
/// statistics count per key), encodable (statistics travel to the coordinator and into
/// checkpoints) and printable (the assignment is reported).
///
/// An absent key is fine: use `Option<K>`, and `None` sorts first.
pub trait ShuffleKey:
    Ord + Hash + Clone + Debug + Send + Sync + Serialize + DeserializeOwned + 'static
{
}

impl<K> ShuffleKey for K where
    K: Ord + Hash + Clone + Debug + Send + Sync + Serialize + DeserializeOwned + 'static
{
}

/// Which statistics the shuffle collects (Iceberg's `range-distribution-statistics-type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StatisticsType {
    /// Exact counts per key: for low-cardinality keys. The coordinator assigns each key to one
    /// or more subtasks, splitting heavy keys.
    Map,
    /// A reservoir sample of the keys: for high-cardinality keys. The coordinator computes range
    /// bounds from the merged sample.
    Sketch,
    /// Map, switching to Sketch when a subtask sees more than
    /// [`OPERATOR_SKETCH_SWITCH_THRESHOLD`](crate::sizing::OPERATOR_SKETCH_SWITCH_THRESHOLD)
    /// distinct keys or an aggregation holds more than
    /// [`COORDINATOR_SKETCH_SWITCH_THRESHOLD`](crate::sizing::COORDINATOR_SKETCH_SWITCH_THRESHOLD).
    #[default]
    Auto,
}

impl StatisticsType {
    /// The type to start collecting with: Sketch when configured so, else Map.
    pub(crate) fn initial(self) -> StatisticsType {
        match self {
            StatisticsType::Sketch => StatisticsType::Sketch,
            _ => StatisticsType::Map,
        }
    }

    /// A short lower-case name for logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            StatisticsType::Map => "map",
            StatisticsType::Sketch => "sketch",
            StatisticsType::Auto => "auto",
        }
    }
}

/// What one subtask counted between two checkpoints.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(bound(
    serialize = "K: Serialize + Eq + Hash",
    deserialize = "K: DeserializeOwned + Eq + Hash"
))]
pub enum LocalStatistics<K> {
    /// Exact counts per key.
    Map(FxHashMap<K, u64>),
    /// A uniform sample of the keys.
    Sketch(Reservoir<K>),
}

impl<K: ShuffleKey> LocalStatistics<K> {
    /// Empty statistics of `kind` (Map or Sketch); a sketch holds `reservoir` samples.
    pub fn new(kind: StatisticsType, reservoir: usize) -> Self {
        match kind {
            StatisticsType::Sketch => LocalStatistics::Sketch(Reservoir::new(reservoir)),
            _ => LocalStatistics::Map(FxHashMap::default()),
        }
    }

    /// Which kind these are (Map or Sketch).
    pub fn kind(&self) -> StatisticsType {
        match self {
            LocalStatistics::Map(_) => StatisticsType::Map,
            LocalStatistics::Sketch(_) => StatisticsType::Sketch,
        }
    }

    /// Counts one key.
    #[inline]
    pub fn add(&mut self, key: K) {
        match self {
            LocalStatistics::Map(m) => *m.entry(key).or_insert(0) += 1,
            LocalStatistics::Sketch(r) => r.update(key),
        }
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        match self {
            LocalStatistics::Map(m) => m.is_empty(),
            LocalStatistics::Sketch(r) => r.is_empty(),
        }
    }

    /// Distinct keys (Map) or samples (Sketch).
    pub fn len(&self) -> usize {
        match self {
            LocalStatistics::Map(m) => m.len(),
            LocalStatistics::Sketch(r) => r.samples().len(),
        }
    }

    /// These statistics as a sketch of `reservoir` samples: a Map replays each key as often as
    /// it was counted.
    pub fn into_sketch(self, reservoir: usize) -> Reservoir<K> {
        match self {
            LocalStatistics::Sketch(r) => r,
            LocalStatistics::Map(m) => map_to_sketch(m, reservoir),
        }
    }
}

/// Replays exact counts into a reservoir of `reservoir` samples (each key as often as it was
/// counted; Iceberg's `convertMapToSketch`).
pub(crate) fn map_to_sketch<K: Clone>(
    counts: impl IntoIterator<Item = (K, u64)>,
    reservoir: usize,
) -> Reservoir<K> {
    let mut r = Reservoir::new(reservoir);
    for (k, c) in counts {
        r.update_repeated(&k, c);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_statistics_count_exactly_and_sketches_replay_them() {
        let mut s = LocalStatistics::new(StatisticsType::Auto, 100);
        assert_eq!(s.kind(), StatisticsType::Map);
        for k in [3u32, 1, 3, 3, 2] {
            s.add(k);
        }
        let LocalStatistics::Map(m) = &s else {
            panic!("expected a map")
        };
        assert_eq!((m[&1], m[&2], m[&3]), (1, 1, 3));
        let sketch = s.into_sketch(100);
        assert_eq!(sketch.items_seen(), 5);
        let mut samples = sketch.into_samples();
        samples.sort();
        assert_eq!(samples, vec![1, 2, 3, 3, 3]);
    }

    #[test]
    fn statistics_survive_the_codec() {
        let mut s = LocalStatistics::new(StatisticsType::Map, 0);
        s.add(Some("b".to_string()));
        s.add(None);
        let back: LocalStatistics<Option<String>> =
            sluice_core::codec::decode(&sluice_core::codec::encode(&s).unwrap()).unwrap();
        assert_eq!(back.len(), 2);
        let mut sk = LocalStatistics::new(StatisticsType::Sketch, 4);
        (0..10u8).for_each(|i| sk.add(i));
        let back: LocalStatistics<u8> =
            sluice_core::codec::decode(&sluice_core::codec::encode(&sk).unwrap()).unwrap();
        assert_eq!(back.kind(), StatisticsType::Sketch);
        assert_eq!(back.len(), 4);
    }
}
