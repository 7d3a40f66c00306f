//! Map statistics → a key assignment: greedy bin packing over the keys in sort order, with the
//! per-key base weight ("close file cost"), exactly as the Iceberg Flink sink computes it
//! (`MapAssignment.fromKeyFrequency` and `KeyAssignment`).
//!
//! With `W` the total weight and `n` the downstream parallelism:
//!
//! 1. every key's weight must be positive;
//! 2. the target per subtask is `W / n` (a real number);
//! 3. the base weight is `ceil(target × percent / 100)`;
//! 4. a key of weight `w` weighs `w + base × ceil(w / target)` (one base weight per subtask it
//!    is expected to span);
//! 5. the keys are taken in sort order, and the target with base weights is
//!    `ceil(W' / n)` for their new total `W'`;
//! 6. each subtask is filled up to that target; a key that does not fit spills into the next
//!    subtask. When a subtask is filled by a share no larger than the base weight, the share
//!    is padded by up to one base weight; a residue no larger than the base weight is dropped;
//! 7. routing weights exclude the base weight, so every assigned share must exceed it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why statistics could not be turned into an assignment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentError {
    /// A key has weight 0 (statistics only hold keys that were seen).
    #[error("invalid statistics: weight is 0 for key {0}")]
    ZeroWeight(String),
    /// The subtasks ran out with keys left (cannot happen with the ceiling targets).
    #[error(
        "internal algorithm error: exhausted {partitions} subtasks with unassigned keys left \
         (target weight per subtask {target}, base weight {base})"
    )]
    Exhausted {
        /// Downstream parallelism.
        partitions: usize,
        /// Target weight per subtask, base weights included.
        target: u64,
        /// The base weight.
        base: u64,
    },
    /// A share is not larger than the base weight, or the lists are empty or of unequal length.
    #[error("invalid key assignment: {0}")]
    Invalid(String),
    /// No downstream subtask.
    #[error("the downstream parallelism must be at least 1")]
    NoPartitions,
}

/// The subtasks one key goes to, with the weight of each share.
///
/// ```
/// use sluice_shuffle::KeyAssignment;
///
/// // A key of weight 27 over three subtasks of target 10, base weight 0.
/// let a = KeyAssignment::new(vec![0, 1, 2], vec![10, 10, 7], 0).unwrap();
/// assert_eq!(a.routing_weights(), vec![10, 10, 7]);
/// assert_eq!(a.key_weight(), 27);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyAssignment {
    subtasks: Vec<usize>,
    weights: Vec<u64>,
    base_weight: u64,
}

impl KeyAssignment {
    /// An assignment to `subtasks` with `weights_with_base` (base weight included) each.
    pub fn new(
        subtasks: Vec<usize>,
        weights_with_base: Vec<u64>,
        base_weight: u64,
    ) -> Result<Self, AssignmentError> {
        if subtasks.is_empty() || weights_with_base.is_empty() {
            return Err(AssignmentError::Invalid(
                "no subtask or no weight assigned".into(),
            ));
        }
        if subtasks.len() != weights_with_base.len() {
            return Err(AssignmentError::Invalid(format!(
                "{} subtasks but {} weights",
                subtasks.len(),
                weights_with_base.len()
            )));
        }
        if let Some(w) = weights_with_base.iter().find(|&&w| w <= base_weight) {
            return Err(AssignmentError::Invalid(format!(
                "a weight must be larger than the base weight: weight {w}, base weight {base_weight}"
            )));
        }
        Ok(KeyAssignment {
            subtasks,
            weights: weights_with_base,
            base_weight,
        })
    }

    /// The subtasks, in assignment order.
    pub fn subtasks(&self) -> &[usize] {
        &self.subtasks
    }

    /// The weight of each share, base weight included.
    pub fn weights_with_base(&self) -> &[u64] {
        &self.weights
    }

    /// The base weight included in each share.
    pub fn base_weight(&self) -> u64 {
        self.base_weight
    }

    /// The weight of each share without the base weight: what routing uses.
    pub fn routing_weights(&self) -> Vec<u64> {
        self.weights.iter().map(|w| w - self.base_weight).collect()
    }

    /// The key's routing weight: the sum of [`routing_weights`](Self::routing_weights).
    pub fn key_weight(&self) -> u64 {
        self.weights.iter().map(|w| w - self.base_weight).sum()
    }

    /// Iceberg's choice among the subtasks: a uniform draw in `0..key_weight`, then the share it
    /// falls into. sluice's router uses a low-discrepancy sequence instead (see
    /// [`RangeRouter`](crate::RangeRouter)); this one is kept to compare them.
    pub fn select_random(&self, rng: &mut impl FnMut(u64) -> u64) -> usize {
        if self.subtasks.len() == 1 {
            return self.subtasks[0];
        }
        let x = rng(self.key_weight());
        let mut cumulative = 0;
        for (s, w) in self.subtasks.iter().zip(self.routing_weights()) {
            cumulative += w;
            if x < cumulative {
                return *s;
            }
        }
        self.subtasks[self.subtasks.len() - 1]
    }
}

/// Per downstream subtask: the routing weight assigned to it and how many keys it got
/// (Iceberg's `assignmentInfo`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskShare {
    /// Routing weight assigned (base weights excluded).
    pub weight: u64,
    /// Keys (or shares of keys) assigned.
    pub keys: usize,
}

/// Every key's assignment, for `num_partitions` downstream subtasks, keys in sort order.
///
/// ```
/// use sluice_shuffle::MapAssignment;
///
/// // Weights 60, 30, 10 over 2 subtasks (target 50): "a" fills subtask 0 and spills 10 into 1.
/// let m = MapAssignment::from_key_frequency(2, vec![("a", 60), ("b", 30), ("c", 10)], 0.0).unwrap();
/// assert_eq!(m.get(&"a").unwrap().subtasks(), &[0, 1]);
/// assert_eq!(m.get(&"a").unwrap().weights_with_base(), &[50, 10]);
/// assert_eq!(m.get(&"c").unwrap().subtasks(), &[1]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapAssignment<K> {
    num_partitions: usize,
    base_weight: u64,
    keys: Vec<(K, KeyAssignment)>,
}

impl<K: Ord + fmt::Debug> MapAssignment<K> {
    /// The assignment of `frequencies` (key, count) over `num_partitions` subtasks, with a base
    /// weight of `base_weight_percent` % of the target weight per subtask.
    pub fn from_key_frequency(
        num_partitions: usize,
        frequencies: impl IntoIterator<Item = (K, u64)>,
        base_weight_percent: f64,
    ) -> Result<Self, AssignmentError> {
        if num_partitions == 0 {
            return Err(AssignmentError::NoPartitions);
        }
        let mut sorted: Vec<(K, u64)> = frequencies.into_iter().collect();
        if let Some((k, _)) = sorted.iter().find(|(_, w)| *w == 0) {
            return Err(AssignmentError::ZeroWeight(format!("{k:?}")));
        }
        sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let total: u64 = sorted.iter().map(|(_, w)| w).sum();
        let n = num_partitions as f64;
        let target = total as f64 / n;
        let base = (target * base_weight_percent / 100.0).ceil() as u64;
        let mut total_with_base = 0u64;
        for (_, w) in sorted.iter_mut() {
            let splits = (*w as f64 / target).ceil() as u64;
            *w += base * splits;
            total_with_base += *w;
        }
        let target_with_base = (total_with_base as f64 / n).ceil() as u64;
        let keys = build(num_partitions, sorted, target_with_base, base)?;
        Ok(MapAssignment {
            num_partitions,
            base_weight: base,
            keys,
        })
    }

    /// The assignment of `key`, if it was in the statistics.
    pub fn get(&self, key: &K) -> Option<&KeyAssignment> {
        self.keys
            .binary_search_by(|(k, _)| k.cmp(key))
            .ok()
            .map(|i| &self.keys[i].1)
    }
}

impl<K> MapAssignment<K> {
    /// The downstream parallelism it was computed for.
    pub fn num_partitions(&self) -> usize {
        self.num_partitions
    }

    /// The base weight per share.
    pub fn base_weight(&self) -> u64 {
        self.base_weight
    }

    /// Every key's assignment, keys in sort order.
    pub fn keys(&self) -> &[(K, KeyAssignment)] {
        &self.keys
    }

    /// Per subtask `0..num_partitions`: the routing weight and number of keys assigned.
    pub fn assignment_info(&self) -> Vec<SubtaskShare> {
        let mut info = vec![SubtaskShare::default(); self.num_partitions];
        for (_, a) in &self.keys {
            for (s, w) in a.subtasks.iter().zip(a.routing_weights()) {
                if let Some(share) = info.get_mut(*s) {
                    share.weight += w;
                    share.keys += 1;
                }
            }
        }
        info
    }
}

/// The greedy fill (Iceberg's `buildAssignment`).
fn build<K: fmt::Debug>(
    num_partitions: usize,
    sorted: Vec<(K, u64)>,
    target: u64,
    base: u64,
) -> Result<Vec<(K, KeyAssignment)>, AssignmentError> {
    let mut out = Vec::with_capacity(sorted.len());
    let mut subtask = 0usize;
    let mut subtask_left = target;
    for (key, weight) in sorted {
        let mut key_left = weight;
        let mut subtasks = Vec::new();
        let mut weights = Vec::new();
        while key_left > 0 {
            if subtask >= num_partitions {
                return Err(AssignmentError::Exhausted {
                    partitions: num_partitions,
                    target,
                    base,
                });
            }
            subtasks.push(subtask);
            if key_left < subtask_left {
                weights.push(key_left);
                subtask_left -= key_left;
                key_left = 0;
            } else {
                // The key fills the subtask.
                let mut assigned = subtask_left;
                key_left -= subtask_left;
                if assigned <= base {
                    // Too small a share to be worth a file of its own: pad it.
                    let padding = key_left.min(base);
                    key_left -= padding;
                    assigned += padding;
                }
                weights.push(assigned);
                subtask += 1;
                subtask_left = target;
            }
            if key_left > 0 && key_left <= base {
                // A residue no larger than the base weight is not worth another subtask.
                key_left = 0;
            }
        }
        out.push((key, KeyAssignment::new(subtasks, weights, base)?));
    }
    Ok(out)
}

/// Draws `0..bound` uniformly from `rng` (for [`KeyAssignment::select_random`]).
#[cfg(test)]
pub(crate) fn uniform(rng: &mut crate::rng::Rng) -> impl FnMut(u64) -> u64 + '_ {
    move |bound| rng.below(bound)
}

#[cfg(test)]
mod tests;
