//! An on-disk keyed state backend for sluice on RocksDB (Flink's
//! `EmbeddedRocksDBStateBackend`), for keyed state larger than memory.
//!
//! Where to find things:
//! - [`RocksDbStateBackend`] (`backend.rs`): the backend a job sets with
//!   [`StreamEnvironment::set_state_backend`](sluice_runtime::StreamEnvironment::set_state_backend):
//!   the directory, the memory budget, the RocksDB options (the [`Compaction`] style among
//!   them), one store per keyed operator subtask;
//! - `store.rs`: the store, the runtime's [`KeyedStore`](sluice_runtime::state::KeyedStore) over one
//!   RocksDB instance (reads, batched writes without a write-ahead log, ordered scans, metrics);
//! - `budget.rs`: how the budget is split between the block cache, write buffers and the
//!   decoded-value caches, pure functions;
//! - `expiry.rs`: the compaction filter that drops the expired values of states with a
//!   time-to-live;
//! - `write_buffers.rs`: the write buffers all stores share, each store re-sizing its own as
//!   stores open and close.
//!
//! What a job gets: its keyed state (the per-key state of `process_keyed` functions, keyed
//! co-process and keyed broadcast functions, the buffers of interval joins) lives in RocksDB,
//! keys prefixed by key group; each state keeps a bounded cache of decoded values in front of
//! its store, so a working set that fits runs near heap speed. Checkpoints write the same keyed
//! entries as the heap backend, so a job can switch backends across a restore and rescale as
//! before; or, with incremental checkpoints on, the stores' files: each table file uploaded
//! once to the checkpoint storage's shared area, restores (also at another parallelism) opening
//! the stores from those files. Timers and window contents live in the store as well. The
//! guide is `docs/state-backends.md`.
//!
//! Building: the crate links the RocksDB C++ library. With `ROCKSDB_LIB_DIR` set (CI sets it to
//! Debian's `librocksdb-dev`, see `.ci/rocksdb`) the build takes seconds; without it the
//! `librocksdb-sys` crate compiles its bundled RocksDB (about 12 minutes on 2 cores). Both need
//! libclang (`libclang-dev`) for the bindings. Use the bundled build for production and for
//! measurements: Debian's library is compiled with RocksDB's assertions on, and the
//! large-state benchmark runs 15-30 % faster on the bundled one ([`LIBRARY`] says which one a
//! binary links; the workspace's `.cargo/config.toml` sets the flag the bundled build needs in
//! a virtual machine).

mod backend;
mod budget;
mod expiry;
mod store;
mod write_buffers;

pub use backend::{Compaction, DEFAULT_MEMORY_BUDGET, DEFAULT_READ_THREADS, RocksDbStateBackend};

/// Which RocksDB library this build links: `"system"` when it was built with
/// `ROCKSDB_LIB_DIR` (a library installed on the machine, such as Debian's), `"bundled"` when
/// `librocksdb-sys` compiled RocksDB from its sources.
///
/// ```
/// assert!(["system", "bundled"].contains(&sluice_rocksdb::LIBRARY));
/// ```
pub const LIBRARY: &str = match option_env!("ROCKSDB_LIB_DIR") {
    Some(_) => "system",
    None => "bundled",
};
