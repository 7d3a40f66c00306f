//! How many samples the sketches keep, and when `Auto` switches from exact counts to sketches.
//!
//! The constants and [`iceberg_coordinator_reservoir_size`] / [`operator_reservoir_size`] are the
//! Iceberg Flink sink's (`SketchUtil`), including its arithmetic quirks, so that a size computed
//! by hand from Iceberg's rules is what sluice computes. [`ReservoirSizing`] chooses how large the
//! coordinator's merged sample is: Iceberg's size, or (the default) everything the operators send.

use serde::{Deserialize, Serialize};

/// The smallest coordinator reservoir (Iceberg's `COORDINATOR_MIN_RESERVOIR_SIZE`).
pub const COORDINATOR_MIN_RESERVOIR_SIZE: usize = 10_000;
/// The largest coordinator reservoir (Iceberg's `COORDINATOR_MAX_RESERVOIR_SIZE`).
pub const COORDINATOR_MAX_RESERVOIR_SIZE: usize = 1_000_000;
/// Coordinator samples per downstream subtask before the bounds above apply.
pub const COORDINATOR_TARGET_PARTITIONS_MULTIPLIER: usize = 100;
/// How many times more samples the operators collect in total than the coordinator keeps.
pub const OPERATOR_OVER_SAMPLE_RATIO: usize = 10;
/// `Auto` statistics: a subtask switches from exact counts to a sample beyond this many distinct
/// keys.
pub const OPERATOR_SKETCH_SWITCH_THRESHOLD: usize = 10_000;
/// `Auto` statistics: the coordinator switches an aggregation from exact counts to a sample
/// beyond this many distinct keys.
pub const COORDINATOR_SKETCH_SWITCH_THRESHOLD: usize = 100_000;

/// Iceberg's coordinator reservoir for `num_partitions` downstream subtasks: 100 samples per
/// subtask, raised to at least 10,000 and lowered to at most 1,000,000, keeping the size
/// divisible by `num_partitions`.
///
/// The raise keeps Iceberg's quirk: when `num_partitions` divides 10,000 it still adds
/// `num_partitions` (2 gives 10,002, not 10,000).
///
/// ```
/// use sluice_shuffle::sizing::iceberg_coordinator_reservoir_size as size;
/// assert_eq!(size(3), 10_002);
/// assert_eq!(size(2), 10_002);
/// assert_eq!(size(123), 12_300);
/// assert_eq!(size(10_123), 992_054);
/// ```
pub fn iceberg_coordinator_reservoir_size(num_partitions: usize) -> usize {
    let n = num_partitions.max(1);
    let size = n.saturating_mul(COORDINATOR_TARGET_PARTITIONS_MULTIPLIER);
    if size < COORDINATOR_MIN_RESERVOIR_SIZE {
        COORDINATOR_MIN_RESERVOIR_SIZE + (n - COORDINATOR_MIN_RESERVOIR_SIZE % n)
    } else if size > COORDINATOR_MAX_RESERVOIR_SIZE {
        COORDINATOR_MAX_RESERVOIR_SIZE - COORDINATOR_MAX_RESERVOIR_SIZE % n
    } else {
        size
    }
}

/// Iceberg's reservoir of one operator subtask: the coordinator reservoir times the
/// over-sampling ratio (10), shared among the `operator_parallelism` subtasks, rounded up.
///
/// ```
/// use sluice_shuffle::sizing::operator_reservoir_size as size;
/// assert_eq!(size(5, 3), 20_004);
/// assert_eq!(size(2, 2), 50_010);
/// ```
pub fn operator_reservoir_size(operator_parallelism: usize, num_partitions: usize) -> usize {
    let total = iceberg_coordinator_reservoir_size(num_partitions) * OPERATOR_OVER_SAMPLE_RATIO;
    total.div_ceil(operator_parallelism.max(1))
}

/// How large the coordinator's merged sample is. The operators' reservoirs are Iceberg's in
/// both cases ([`operator_reservoir_size`]).
///
/// Iceberg merges the operators' samples, ten times more than it keeps, into
/// [`iceberg_coordinator_reservoir_size`] samples: at 8 or 32 downstream subtasks about 10,000,
/// so each range is estimated from about 1,250 or 310 samples, and the heaviest subtask gets
/// 4.0 % or 11.7 % more than the mean on uniform keys (`sluice-bench shuffle-skew`). Keeping
/// everything the operators sent costs no extra collection or traffic, only memory on the
/// coordinator, and brings that to 1.3 % and 4.1 %.
///
/// ```
/// use sluice_shuffle::ReservoirSizing;
/// assert_eq!(ReservoirSizing::Iceberg.coordinator(8), 10_008);
/// assert_eq!(ReservoirSizing::KeepAll.coordinator(8), 100_080);
/// assert_eq!(ReservoirSizing::default(), ReservoirSizing::KeepAll);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReservoirSizing {
    /// Iceberg's: [`iceberg_coordinator_reservoir_size`] samples.
    Iceberg,
    /// Everything the operators send: [`OPERATOR_OVER_SAMPLE_RATIO`] times Iceberg's size.
    #[default]
    KeepAll,
}

impl ReservoirSizing {
    /// The coordinator's merged sample for `num_partitions` downstream subtasks.
    pub fn coordinator(self, num_partitions: usize) -> usize {
        let iceberg = iceberg_coordinator_reservoir_size(num_partitions);
        match self {
            ReservoirSizing::Iceberg => iceberg,
            ReservoirSizing::KeepAll => iceberg * OPERATOR_OVER_SAMPLE_RATIO,
        }
    }

    /// One operator subtask's reservoir (the same for both sizings).
    pub fn operator(self, operator_parallelism: usize, num_partitions: usize) -> usize {
        operator_reservoir_size(operator_parallelism, num_partitions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinator_sizes_follow_icebergs_rules() {
        // Below the minimum: 10,000 + (n - 10,000 % n), even when n divides 10,000.
        assert_eq!(iceberg_coordinator_reservoir_size(1), 10_001);
        assert_eq!(iceberg_coordinator_reservoir_size(3), 10_002);
        assert_eq!(iceberg_coordinator_reservoir_size(8), 10_008);
        assert_eq!(iceberg_coordinator_reservoir_size(32), 10_016);
        assert_eq!(iceberg_coordinator_reservoir_size(99), 10_098);
        // 100 per subtask in between (100 gives exactly the minimum, which is not below it).
        assert_eq!(iceberg_coordinator_reservoir_size(100), 10_000);
        assert_eq!(iceberg_coordinator_reservoir_size(123), 12_300);
        assert_eq!(iceberg_coordinator_reservoir_size(10_000), 1_000_000);
        // Above the maximum: 1,000,000 - 1,000,000 % n.
        assert_eq!(iceberg_coordinator_reservoir_size(10_123), 992_054);
        for n in 1..300 {
            assert_eq!(iceberg_coordinator_reservoir_size(n) % n, 0, "n = {n}");
        }
    }

    #[test]
    fn operator_sizes_share_ten_times_the_coordinator_reservoir() {
        assert_eq!(operator_reservoir_size(5, 3), 20_004); // ceil(100,020 / 5)
        assert_eq!(operator_reservoir_size(2, 2), 50_010);
        assert_eq!(operator_reservoir_size(3, 8), 33_360); // 100,080 / 3
        assert_eq!(operator_reservoir_size(7, 8), 14_298); // ceil(100,080 / 7) = 14,297.1..
        assert_eq!(ReservoirSizing::Iceberg.operator(7, 8), 14_298);
    }
}
