//! Opening RocksDB stores from the files of a checkpoint (restore by handle): at the same
//! parallelism the files are taken as they are; at another, each new subtask takes the old
//! store that holds most of its key groups, drops what lies outside them, and copies in the
//! rest of its key groups from the other old stores. Each new store then holds exactly the
//! entries of its key groups as they were at the checkpoint.

use sluice_core::NodeId;
use sluice_rocksdb::RocksDbStateBackend;
use sluice_runtime::key_groups::subtask_for_key_group;
use sluice_runtime::state::{KeyedStateBackend, KeyedStore, StoreFiles, StoreScope};
use std::collections::BTreeMap;
use std::sync::Arc;

const MAXP: usize = 128;

fn scope(subtask: usize, parallelism: usize, attempt: u32) -> StoreScope {
    StoreScope {
        node: NodeId(3),
        operator_name: "count".into(),
        subtask,
        attempt,
        max_parallelism: MAXP,
        parallelism,
    }
}

/// A store key in key group `group`, as the runtime lays them out.
fn key(group: usize, i: u32) -> Vec<u8> {
    let mut k = (group as u16).to_be_bytes().to_vec();
    k.extend_from_slice(&7u32.to_be_bytes());
    k.extend_from_slice(&i.to_be_bytes());
    k
}

fn contents(store: &Arc<dyn KeyedStore>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut all = BTreeMap::new();
    store
        .scan(&[], &[0xFF; 8], &mut |k, v| {
            all.insert(k.to_vec(), v.to_vec());
            true
        })
        .unwrap();
    all
}

/// Stores of `p` subtasks, each filled with 20 entries per key group it owns, checkpointed into
/// `checkpoints`; returns their files and every entry.
fn checkpointed(
    backend: &RocksDbStateBackend,
    p: usize,
    checkpoints: &std::path::Path,
) -> (Vec<StoreFiles>, BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut files = Vec::new();
    let mut expected = BTreeMap::new();
    for s in 0..p {
        let store = backend.open(&scope(s, p, 0)).unwrap();
        let mut batch = Vec::new();
        for g in (0..MAXP).filter(|&g| subtask_for_key_group(g, MAXP, p) == s) {
            for i in 0..20 {
                let v = format!("g{g}-i{i}").into_bytes();
                expected.insert(key(g, i), v.clone());
                batch.push((key(g, i), Some(v)));
            }
        }
        store.write(batch).unwrap();
        let dir = checkpoints.join(format!("s{s}"));
        files.push(
            store
                .checkpoint_files(&dir)
                .unwrap()
                .expect("RocksDB has files"),
        );
        // Written after the checkpoint: must not come back.
        store
            .write(vec![(key(s, 999), Some(b"late".to_vec()))])
            .unwrap();
    }
    (files, expected)
}

fn restore_at(old_p: usize, new_p: usize) {
    let root = tempfile::tempdir().unwrap();
    let backend = RocksDbStateBackend::new(root.path().join("stores")).memory_budget(16 << 20);
    let (files, expected) = checkpointed(&backend, old_p, &root.path().join("chk"));
    let mut seen = BTreeMap::new();
    for s in 0..new_p {
        let store = backend.open_restored(&scope(s, new_p, 1), &files).unwrap();
        for (k, v) in contents(&store) {
            let group = u16::from_be_bytes([k[0], k[1]]) as usize;
            assert_eq!(
                subtask_for_key_group(group, MAXP, new_p),
                s,
                "{old_p} -> {new_p}: subtask {s} holds an entry of key group {group}"
            );
            assert!(seen.insert(k, v).is_none(), "an entry in two stores");
        }
    }
    assert_eq!(
        seen, expected,
        "{old_p} -> {new_p}: exactly the entries at the checkpoint"
    );
}

#[test]
fn a_store_reopens_from_its_own_files_at_the_same_parallelism() {
    restore_at(1, 1);
    restore_at(2, 2);
}

#[test]
fn stores_restore_from_2_to_3_subtasks() {
    restore_at(2, 3);
}

#[test]
fn stores_restore_from_3_to_1_subtask() {
    restore_at(3, 1);
}

#[test]
fn checkpoint_files_are_listed_with_their_lengths_and_table_files_are_links() {
    let root = tempfile::tempdir().unwrap();
    let backend = RocksDbStateBackend::new(root.path().join("stores"));
    let store = backend.open(&scope(0, 1, 0)).unwrap();
    store.write(vec![(key(5, 1), Some(vec![1; 1000]))]).unwrap();
    let dir = root.path().join("chk-1");
    let files = store.checkpoint_files(&dir).unwrap().unwrap();
    assert_eq!(files.key_groups, 0..MAXP);
    assert!(
        files.files.iter().any(|(n, _)| n.ends_with(".sst")),
        "{files:?}"
    );
    assert!(files.files.iter().any(|(n, _)| n == "CURRENT"), "{files:?}");
    for (name, len) in &files.files {
        assert_eq!(
            std::fs::metadata(dir.join(name)).unwrap().len(),
            *len,
            "{name}"
        );
    }
}

/// The values of option `name` in the OPTIONS files RocksDB wrote below `dir`, deduplicated.
fn option_values(dir: &std::path::Path, name: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    let prefix = format!("{name}=");
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("OPTIONS-")
            {
                let text = std::fs::read_to_string(&p).unwrap();
                found.extend(
                    text.lines()
                        .filter_map(|l| l.trim().strip_prefix(prefix.as_str()))
                        .map(str::to_string),
                );
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn stores_compact_universally_unless_told_to_level() {
    let dir = tempfile::tempdir().unwrap();
    let universal = RocksDbStateBackend::new(dir.path().join("u"));
    let _store = universal.open(&scope(0, 1, 0)).unwrap();
    let u = dir.path().join("u");
    assert_eq!(
        option_values(&u, "compaction_style"),
        ["kCompactionStyleUniversal"]
    );
    // Merges wait for eight sorted runs and take at least four.
    assert_eq!(
        option_values(&u, "level0_file_num_compaction_trigger"),
        ["8"]
    );
    let universal_options = option_values(&u, "compaction_options_universal");
    assert!(
        universal_options.len() == 1 && universal_options[0].contains("min_merge_width=4;"),
        "{universal_options:?}"
    );
    let leveled = RocksDbStateBackend::new(dir.path().join("l"))
        .compaction(sluice_rocksdb::Compaction::Leveled);
    let _store = leveled.open(&scope(0, 1, 0)).unwrap();
    assert_eq!(
        option_values(&dir.path().join("l"), "compaction_style"),
        ["kCompactionStyleLevel"]
    );
}

/// The first store a backend opens removes the directories that processes which are gone left
/// below its directory, and nothing else.
#[test]
fn the_first_store_removes_what_processes_that_are_gone_left() {
    let dir = tempfile::tempdir().unwrap();
    // Beyond Linux's largest pid (2^22), so no process has it; pid 1 always runs.
    let gone = dir.path().join("p99999999").join("op3-s0-a0-0");
    let running = dir.path().join("p1").join("op3-s0-a0-0");
    let other = dir.path().join("notes");
    for d in [&gone, &running, &other] {
        std::fs::create_dir_all(d).unwrap();
    }
    let backend = RocksDbStateBackend::new(dir.path());
    let _store = backend.open(&scope(0, 1, 0)).unwrap();
    assert!(!dir.path().join("p99999999").exists());
    assert!(running.exists() && other.exists());
}

/// A cancelled job has let go of its stores when it ends: a second job in the same process, on
/// the same directory, opens the store at the same place (RocksDB locks a directory per
/// process, so a store still open would fail the second job's open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_has_closed_its_stores_when_it_ends() {
    use sluice_runtime::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let first = StreamEnvironment::new();
    first
        .set_parallelism(1)
        .set_state_backend(RocksDbStateBackend::new(dir.path()));
    let seen = Arc::new(tokio::sync::Notify::new());
    let tell = seen.clone();
    first
        .from_generator(Generator::new(|i| i))
        .key_by(|v: &u64| v % 16)
        .count_window(3)
        .reduce(|a, b| a + b)
        .map(move |v| {
            tell.notify_one();
            v
        })
        .discard();
    let job = first.submit("endless").unwrap();
    seen.notified().await;
    job.cancel();
    let _ = job.await;

    let second = StreamEnvironment::new();
    second
        .set_parallelism(1)
        .set_state_backend(RocksDbStateBackend::new(dir.path()));
    let out = second
        .from_iter((0..6u64).collect::<Vec<_>>())
        .key_by(|v: &u64| v % 2)
        .count_window(3)
        .reduce(|a, b| a + b)
        .collect();
    second.execute("after the cancel").await.unwrap();
    let mut sums = out.take();
    sums.sort_unstable();
    assert_eq!(sums, vec![6, 9]);
}

/// A state directory the backend cannot create (a file lies where it should be) fails the job
/// at once with an error that names the backend, the operator subtask and the path, instead
/// of a hang or a retry without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_directory_that_cannot_be_made_fails_the_job_naming_operator_and_path() {
    use sluice_runtime::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let blocked = dir.path().join("state");
    std::fs::write(&blocked, b"not a directory").unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(1)
        .set_state_backend(RocksDbStateBackend::new(&blocked));
    let _out = env
        .from_iter((0..6u64).collect::<Vec<_>>())
        .key_by(|v: &u64| v % 2)
        .count_window(3)
        .reduce(|a, b| a + b)
        .collect();
    let err = env
        .execute("on a blocked directory")
        .await
        .expect_err("the job cannot keep its state");
    let message = format!("{err:#}");
    assert!(
        message.contains("cannot open the rocksdb state store"),
        "{message}"
    );
    assert!(
        message.contains(&blocked.display().to_string()),
        "{message}"
    );
    assert!(message.contains("Window Reduce (subtask 0)"), "{message}");
}
