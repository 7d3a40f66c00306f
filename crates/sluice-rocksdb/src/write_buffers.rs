//! [`WriteBuffers`]: the write buffers (memtables) of all stores of one backend, one share of
//! the budget ([`budget::write_buffer`] sizes each store's). Each store holds a
//! [`WriteBufferShare`] and, before its next write, re-sizes its own memtables when a store
//! opened or closed since (RocksDB's `write_buffer_size` is a mutable option), so no store
//! ever touches another's instance.

use crate::budget::{self, Split};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The stores open and the budget's split.
#[derive(Debug)]
pub(crate) struct WriteBuffers {
    split: Split,
    stores: AtomicUsize,
    /// Bumped when a store opens or closes.
    epoch: AtomicU64,
}

impl WriteBuffers {
    pub(crate) fn new(split: Split) -> Arc<Self> {
        Arc::new(WriteBuffers {
            split,
            stores: AtomicUsize::new(0),
            epoch: AtomicU64::new(0),
        })
    }

    /// Counts one more store in, until the returned share drops.
    pub(crate) fn join(self: &Arc<Self>) -> WriteBufferShare {
        self.stores.fetch_add(1, Ordering::Relaxed);
        self.epoch.fetch_add(1, Ordering::Release);
        WriteBufferShare {
            pool: self.clone(),
            seen: AtomicU64::new(self.epoch.load(Ordering::Acquire)),
        }
    }

    /// Stores open now.
    #[cfg(test)]
    pub(crate) fn stores(&self) -> usize {
        self.stores.load(Ordering::Relaxed)
    }
}

/// One store's place in [`WriteBuffers`].
#[derive(Debug)]
pub(crate) struct WriteBufferShare {
    pool: Arc<WriteBuffers>,
    /// The pool's epoch when the store last sized its write buffers.
    seen: AtomicU64,
}

impl WriteBufferShare {
    /// Bytes of each of this store's write buffers now.
    pub(crate) fn bytes(&self) -> usize {
        let p = &self.pool;
        budget::write_buffer(&p.split, p.stores.load(Ordering::Relaxed))
    }

    /// Whether a batched read of a store whose table files take `store_files` bytes fills the
    /// block cache ([`budget::fill_block_cache`], with the stores open now).
    pub(crate) fn fill_block_cache(&self, store_files: u64) -> bool {
        let p = &self.pool;
        budget::fill_block_cache(
            store_files,
            p.stores.load(Ordering::Relaxed),
            p.split.block_cache,
        )
    }

    /// The new size of each write buffer when a store opened or closed since the last call
    /// (one atomic load when none did).
    pub(crate) fn changed(&self) -> Option<usize> {
        let now = self.pool.epoch.load(Ordering::Acquire);
        (self.seen.swap(now, Ordering::AcqRel) != now).then(|| self.bytes())
    }
}

impl Drop for WriteBufferShare {
    fn drop(&mut self) {
        self.pool.stores.fetch_sub(1, Ordering::Relaxed);
        self.pool.epoch.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_the_stores_open() {
        let pool = WriteBuffers::new(budget::split(256 << 20));
        let a = pool.join();
        assert_eq!(a.changed(), None);
        assert_eq!(a.bytes(), 16 << 20);
        let (b, c, d) = (pool.join(), pool.join(), pool.join());
        assert_eq!(pool.stores(), 4);
        assert_eq!(a.changed(), Some(8 << 20));
        assert_eq!(a.changed(), None);
        drop((b, c, d));
        assert_eq!(a.changed(), Some(16 << 20));
    }
}
