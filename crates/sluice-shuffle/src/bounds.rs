//! Sketch statistics → range bounds, and the partition of a key among the ranges (Iceberg's
//! `SketchUtil.rangeBounds` and `SketchUtil.partition`).
//!
//! With `n` downstream subtasks and `len` sorted samples, `step = ceil(len / n)` and the bounds
//! are the samples at `step - 1`, `2 step - 1`, ...: at most `n - 1` of them. A candidate equal
//! to the previous bound is skipped by moving one sample further (so there may be fewer bounds,
//! and fewer samples than subtasks give fewer bounds too). Range `i` holds the keys
//! `bounds[i - 1] < key <= bounds[i]`: a key equal to a bound goes to the lower range.

/// Range bounds for `num_partitions` subtasks from `samples` (sorted in place).
///
/// ```
/// use sluice_shuffle::bounds::range_bounds;
/// // Ages, 4 subtasks: ranges <= 15, (15, 32], (32, 60], > 60.
/// let mut ages = vec![60, 10, 32, 70, 15, 20, 40, 80];
/// assert_eq!(range_bounds(4, &mut ages), vec![15, 32, 60]);
/// ```
pub fn range_bounds<K: Ord + Clone>(num_partitions: usize, samples: &mut [K]) -> Vec<K> {
    samples.sort_unstable();
    let candidates = num_partitions.saturating_sub(1);
    if samples.is_empty() || candidates == 0 {
        return Vec::new();
    }
    let step = samples.len().div_ceil(num_partitions);
    let mut bounds: Vec<K> = Vec::with_capacity(candidates);
    let mut position = step - 1;
    while position < samples.len() && bounds.len() < candidates {
        let candidate = &samples[position];
        if bounds.last() == Some(candidate) {
            // A duplicate of the previous bound: probe the next sample.
            position += 1;
        } else {
            bounds.push(candidate.clone());
            position += step;
        }
    }
    bounds
}

/// The range of `key` among `bounds` (binary search; a key equal to a bound goes to the lower
/// range), adjusted to `num_partitions` current subtasks (see [`adjust_for_rescale`]).
///
/// ```
/// use sluice_shuffle::bounds::partition;
/// let bounds = [15, 32, 60];
/// assert_eq!(partition(&15, &bounds, 4), 0);
/// assert_eq!(partition(&16, &bounds, 4), 1);
/// assert_eq!(partition(&61, &bounds, 4), 3);
/// // The same bounds with only 2 subtasks now: ranges 2 and 3 fold onto 0 and 1.
/// assert_eq!(partition(&61, &bounds, 2), 1);
/// ```
#[inline]
pub fn partition<K: Ord>(key: &K, bounds: &[K], num_partitions: usize) -> usize {
    let range = partition_point(bounds, |b| b < key);
    adjust_for_rescale(range, bounds.len() + 1, num_partitions)
}

/// `slice.partition_point(pred)` without a data-dependent branch: the halving loop's length
/// depends only on the slice's, and each step moves to the upper half by adding a mask, so
/// routing a random key costs no branch mispredictions (`slice::partition_point` branches on
/// each comparison of a 16-byte key).
#[inline]
pub(crate) fn partition_point<T>(slice: &[T], pred: impl Fn(&T) -> bool) -> usize {
    let mut size = slice.len();
    if size == 0 {
        return 0;
    }
    let mut base = 0usize;
    while size > 1 {
        let half = size / 2;
        let mid = base + half;
        // `base + half` when the predicate holds, by a mask rather than a select: the compiler
        // turns a select over a 16-byte comparison back into a branch.
        base += half & usize::from(pred(&slice[mid])).wrapping_neg();
        size -= half;
    }
    base + usize::from(pred(&slice[base]))
}

/// The ranges of `L` keys among `bounds` (as [`partition`] finds them, before the rescale
/// adjustment), searched side by side: each halving step is taken for every key before the
/// next, so the `L` searches' dependent loads overlap instead of running one after another.
#[inline]
pub(crate) fn ranges_of<K: Ord, const L: usize>(bounds: &[K], keys: &[K; L]) -> [usize; L] {
    let mut base = [0usize; L];
    let mut size = bounds.len();
    if size == 0 {
        return base;
    }
    while size > 1 {
        let half = size / 2;
        for (b, key) in base.iter_mut().zip(keys) {
            *b += half & usize::from(bounds[*b + half] < *key).wrapping_neg();
        }
        size -= half;
    }
    for (b, key) in base.iter_mut().zip(keys) {
        *b += usize::from(bounds[*b] < *key);
    }
    base
}

/// A subtask computed by statistics for `computed_for` subtasks, routed among `num_partitions`
/// (Iceberg's `adjustPartitionWithRescale`): unchanged when there are as many or more subtasks
/// now (subtasks added by a scale-up stay idle until new statistics arrive), folded with `%`
/// when there are fewer.
///
/// ```
/// use sluice_shuffle::bounds::adjust_for_rescale;
/// assert_eq!(adjust_for_rescale(5, 8, 12), 5);
/// assert_eq!(adjust_for_rescale(5, 8, 3), 2);
/// ```
#[inline]
pub fn adjust_for_rescale(partition: usize, computed_for: usize, num_partitions: usize) -> usize {
    if computed_for <= num_partitions {
        partition
    } else {
        partition % num_partitions.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisible() {
        // 12 samples, 4 subtasks: step 3, bounds at 2, 5, 8.
        let mut s: Vec<u32> = (0..12).rev().collect();
        assert_eq!(range_bounds(4, &mut s), vec![2, 5, 8]);
    }

    #[test]
    fn not_divisible() {
        // 10 samples, 4 subtasks: step ceil(2.5) = 3, bounds at 2, 5, 8; the last range holds
        // only sample 9.
        let mut s: Vec<u32> = (0..10).collect();
        assert_eq!(range_bounds(4, &mut s), vec![2, 5, 8]);
        // 10 samples, 3 subtasks: step 4, bounds at 3, 7.
        assert_eq!(range_bounds(3, &mut s), vec![3, 7]);
    }

    #[test]
    fn duplicates_are_skipped_by_probing_the_next_sample() {
        // Sorted: 1 1 1 1 1 1 2 3 4 5 6 7, 4 subtasks, step 3.
        // position 2: 1 (chosen); 5: 1 = previous, probe 6: 2 (chosen); 9: 5 (chosen).
        let mut s = vec![1, 1, 1, 1, 1, 1, 2, 3, 4, 5, 6, 7];
        assert_eq!(range_bounds(4, &mut s), vec![1, 2, 5]);
        // All equal: one bound only, so two ranges.
        let mut same = vec![9u8; 20];
        assert_eq!(range_bounds(5, &mut same), vec![9]);
    }

    #[test]
    fn fewer_samples_than_partitions() {
        // 3 samples, 8 subtasks: step 1, every sample is a bound: 4 ranges, subtasks 4..8 idle.
        let mut s = vec![30, 10, 20];
        let bounds = range_bounds(8, &mut s);
        assert_eq!(bounds, vec![10, 20, 30]);
        assert_eq!(partition(&35, &bounds, 8), 3);
        let mut none: Vec<u8> = Vec::new();
        assert!(range_bounds(8, &mut none).is_empty());
        assert_eq!(partition(&1, &[], 8), 0);
    }

    #[test]
    fn one_partition() {
        let mut s = vec![3, 1, 2];
        assert!(range_bounds(1, &mut s).is_empty());
        assert_eq!(partition(&7, &[], 1), 0);
    }

    #[test]
    fn keys_equal_to_a_bound_go_to_the_lower_range() {
        let bounds = [10, 20, 30];
        let got: Vec<usize> = [5, 10, 11, 20, 21, 30, 31]
            .iter()
            .map(|k| partition(k, &bounds, 4))
            .collect();
        assert_eq!(got, vec![0, 0, 1, 1, 2, 2, 3]);
    }

    #[test]
    fn an_absent_key_sorts_first() {
        let mut s = vec![Some(5), None, Some(1), None, Some(9), Some(7)];
        let bounds = range_bounds(3, &mut s);
        assert_eq!(bounds, vec![None, Some(5)]);
        assert_eq!(partition(&None, &bounds, 3), 0);
        assert_eq!(partition(&Some(0), &bounds, 3), 1);
    }

    #[test]
    fn the_branchless_partition_point_is_the_slices() {
        for len in 0..40usize {
            let v: Vec<u32> = (0..len as u32).map(|x| x * 2).collect();
            for key in 0..(2 * len as u32 + 2) {
                assert_eq!(
                    partition_point(&v, |b| *b < key),
                    v.partition_point(|b| *b < key),
                    "len {len}, key {key}"
                );
                assert_eq!(
                    partition_point(&v, |b| *b <= key),
                    v.partition_point(|b| *b <= key)
                );
            }
        }
    }

    #[test]
    fn ranges_searched_side_by_side_are_the_ranges_searched_alone() {
        for len in 0..40usize {
            let v: Vec<u32> = (0..len as u32).map(|x| x * 2).collect();
            let keys: Vec<u32> = (0..(2 * len as u32 + 2)).collect();
            for chunk in keys.chunks_exact(4) {
                let lanes: [u32; 4] = [chunk[0], chunk[1], chunk[2], chunk[3]];
                let expected = lanes.map(|k| v.partition_point(|b| *b < k));
                assert_eq!(ranges_of(&v, &lanes), expected, "len {len}");
            }
        }
    }

    #[test]
    fn rescaling_folds_only_when_shrinking() {
        let bounds = [10, 20, 30]; // computed for 4
        assert_eq!(partition(&31, &bounds, 6), 3); // 4 and 5 stay idle
        assert_eq!(partition(&31, &bounds, 3), 0); // 3 % 3
        assert_eq!(partition(&25, &bounds, 2), 0); // 2 % 2
    }
}
