//! How a memory budget is split between RocksDB's block cache, each store's write buffers and
//! the decoded values each state caches in front of its store: one pure function, the rules at
//! the top.
//!
//! Rules (for a budget `B`, shared by every store of one backend in one process):
//! - the block cache, shared by all stores and holding data, index and filter blocks, gets
//!   `B / 4`;
//! - each store's write buffers (memtables) get `B / 8`: two of `B / 16`, each between 1 MiB and
//!   64 MiB;
//! - each state's cache of decoded values gets `B / 4`, at least 64 KiB: a hit there costs what
//!   a heap access costs, a block cache hit a RocksDB read and a decode, so the decoded values
//!   get the larger share.
//!
//! So two keyed operator subtasks with one state each use at most
//! `B/4 + 2 × (B/8 + B/4) = B`; more subtasks or states per process need a larger budget (the
//! guide, `docs/state-backends.md`, says how to size it).

/// The parts of a memory budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Split {
    /// Bytes of the block cache shared by all stores.
    pub(crate) block_cache: usize,
    /// Bytes of one write buffer (memtable).
    pub(crate) write_buffer: usize,
    /// Write buffers per store.
    pub(crate) write_buffers: i32,
    /// Bytes of decoded values one state caches.
    pub(crate) value_cache: usize,
}

const MIB: usize = 1 << 20;

/// Splits `budget` bytes by the rules above.
pub(crate) fn split(budget: usize) -> Split {
    Split {
        block_cache: budget / 4,
        write_buffer: (budget / 16).clamp(MIB, 64 * MIB),
        write_buffers: 2,
        value_cache: (budget / 4).max(64 << 10),
    }
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
        // two subtasks: block cache + 2 × (write buffers + value cache) stays within the budget
        let two = s.block_cache + 2 * (2 * s.write_buffer + s.value_cache);
        assert!(two <= 256 * MIB, "{two}");
    }

    #[test]
    fn tiny_and_huge_budgets_are_clamped() {
        assert_eq!(split(0).write_buffer, MIB);
        assert_eq!(split(0).value_cache, 64 << 10);
        assert_eq!(split(64 << 30).write_buffer, 64 * MIB);
    }
}
