//! How a memory budget is split between RocksDB's block cache, the stores' write buffers and
//! the decoded values each state caches in front of its store: pure functions, the rules at
//! the top.
//!
//! Rules (for a budget `B`, shared by every store of one backend in one process, however many
//! keyed operators, subtasks and states it runs):
//! - the block cache, shared by all stores and holding data, index and filter blocks, gets
//!   `B / 4`;
//! - the write buffers (memtables) of all stores get `B / 4`: each of `n` stores open has two
//!   of `min(B / 16, B / (8 n))`, between 1 MiB and 64 MiB, re-sized as stores open and close
//!   ([`write_buffer`]);
//! - the caches of decoded values of all states get `B / 2`: each of `m` states attached has
//!   `min(B / 4, B / (2 m))` (the rule of `sluice_runtime::state::ValueCaches`), at least 16
//!   values whatever the bytes. A hit there costs what a heap access costs, a block cache hit
//!   a RocksDB read and a decode, so decoded values get the largest share.
//!
//! So one store with one state (a keyed operator at parallelism 1) uses `5B/8`, two use all of
//! `B`, and more share it; only the floors (1 MiB per write buffer, 16 values per state) can
//! take more, with very many stores on a small budget.
//!
//! And one rule for what the block cache keeps ([`fill_block_cache`]): the blocks a
//! batched read brings in (mostly data blocks: a table file's index and filter partitions are
//! loaded when it opens) go into the cache only while the stores' files (counted as this
//! store's times the stores open) are under [`FILL_LIMIT`] times the cache. Beyond that a
//! random key's block is in the cache less than one time in four, the value caches in front
//! already keep the hot keys, and inserting every block read (a lock, a hash insert, an
//! eviction, a free) cost more than the hits gave back: at 22 M keys, 428 MB of files and a
//! 64 MiB cache, 7.5 % of data blocks were hits, and reads without filling served 36 % more
//! updates per second (BENCHMARKS.md, "Reads that do not fill the block cache").

/// The parts of a memory budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Split {
    /// Bytes of the block cache shared by all stores.
    pub(crate) block_cache: usize,
    /// Bytes of the write buffers of all stores.
    pub(crate) write_buffers_total: usize,
    /// Bytes of one write buffer (memtable) of a store alone.
    pub(crate) write_buffer: usize,
    /// Write buffers per store.
    pub(crate) write_buffers: i32,
    /// Bytes of decoded values all states cache.
    pub(crate) value_caches_total: usize,
    /// Bytes of decoded values one state caches at most.
    pub(crate) value_cache: usize,
}

const MIB: usize = 1 << 20;

/// Splits `budget` bytes by the rules above.
pub(crate) fn split(budget: usize) -> Split {
    Split {
        block_cache: budget / 4,
        write_buffers_total: budget / 4,
        write_buffer: (budget / 16).clamp(MIB, 64 * MIB),
        write_buffers: 2,
        value_caches_total: budget / 2,
        value_cache: (budget / 4).max(64 << 10),
    }
}

/// How many times the block cache the stores' files may be while batched reads still fill it.
pub(crate) const FILL_LIMIT: u64 = 4;

/// Whether a batched read of a store whose table files take `store_files` bytes, one of
/// `stores` open stores sharing a block cache of `block_cache` bytes, puts the blocks it reads
/// into the cache.
pub(crate) fn fill_block_cache(store_files: u64, stores: usize, block_cache: usize) -> bool {
    store_files.saturating_mul(stores.max(1) as u64) < FILL_LIMIT.saturating_mul(block_cache as u64)
}

/// Bytes of one write buffer of each of `stores` open stores.
pub(crate) fn write_buffer(split: &Split, stores: usize) -> usize {
    let per_store = split.write_buffers_total / stores.max(1);
    (per_store / split.write_buffers.max(1) as usize)
        .min(split.write_buffer)
        .clamp(MIB, 64 * MIB)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_256_mib_budget() {
        let s = split(256 * MIB);
        assert_eq!(s.block_cache, 64 * MIB);
        assert_eq!(s.write_buffer, 16 * MIB);
        assert_eq!(s.value_cache, 64 * MIB);
        // two subtasks with one state each: block cache + 2 × (write buffers + value cache)
        let two = s.block_cache + 2 * (2 * write_buffer(&s, 2) + s.value_cache);
        assert_eq!(two, 256 * MIB);
    }

    #[test]
    fn write_buffers_shrink_as_stores_open_and_stay_within_their_share() {
        let s = split(256 * MIB);
        assert_eq!(write_buffer(&s, 0), 16 * MIB);
        assert_eq!(write_buffer(&s, 1), 16 * MIB);
        assert_eq!(write_buffer(&s, 2), 16 * MIB);
        assert_eq!(write_buffer(&s, 4), 8 * MIB);
        for n in 1..=32 {
            assert!(n * 2 * write_buffer(&s, n) <= s.write_buffers_total, "{n}");
        }
        // the floor: 1 MiB
        assert_eq!(write_buffer(&s, 1000), MIB);
    }

    #[test]
    fn batched_reads_fill_the_block_cache_only_while_the_files_are_under_four_times_it() {
        let cache = 64 * MIB;
        // The large-state benchmark's store: 428 MB of files.
        assert!(!fill_block_cache(428_000_000, 1, cache));
        // A state that fits: a few times less than the cache.
        assert!(fill_block_cache(20_000_000, 1, cache));
        assert!(fill_block_cache(255 * MIB as u64, 1, cache));
        assert!(!fill_block_cache(256 * MIB as u64, 1, cache));
        // Four stores of 108 MB share the cache: 432 MB in all.
        assert!(!fill_block_cache(108_000_000, 4, cache));
        assert!(fill_block_cache(60_000_000, 4, cache));
        // No cache at all, or an empty store.
        assert!(!fill_block_cache(1, 1, 0));
        assert!(fill_block_cache(0, 1, cache));
    }

    #[test]
    fn tiny_and_huge_budgets_are_clamped() {
        assert_eq!(split(0).write_buffer, MIB);
        assert_eq!(write_buffer(&split(0), 1), MIB);
        assert_eq!(split(0).value_cache, 64 << 10);
        assert_eq!(split(64 << 30).write_buffer, 64 * MIB);
        assert_eq!(write_buffer(&split(64 << 30), 1), 64 * MIB);
    }
}
