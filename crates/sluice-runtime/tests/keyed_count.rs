//! A keyed count over a million generated records gives exactly the sequential answer, whatever
//! the parallelism: every record is counted once, and every key is counted by one subtask only.

use sluice_runtime::key_groups::{key_group, subtask_for_key_group};
use sluice_runtime::prelude::*;
use std::collections::HashMap;

const RECORDS: u64 = 1_000_000;

/// The key of record `i`: one hot key for a third of the records, the rest spread over 5000 keys.
fn key_of(i: u64) -> u64 {
    if i.is_multiple_of(3) {
        7
    } else {
        (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % 5_000
    }
}

/// Counts records per key and emits `(subtask, key, count)` for every key at end of input.
#[derive(Clone, Default)]
struct CountPerKey {
    subtask: usize,
    counts: HashMap<u64, u64>,
}

impl Operator<u64> for CountPerKey {
    type Out = (usize, u64, u64);

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.subtask = ctx.subtask_index();
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        _out: &mut Collector<(usize, u64, u64)>,
    ) -> Result<(), UserError> {
        for key in batch {
            *self.counts.entry(key).or_insert(0) += 1;
        }
        Ok(())
    }

    fn end_input(&mut self, out: &mut Collector<(usize, u64, u64)>) -> Result<(), UserError> {
        for (&key, &n) in &self.counts {
            out.collect((self.subtask, key, n));
        }
        Ok(())
    }
}

fn sequential_counts() -> HashMap<u64, u64> {
    let mut counts = HashMap::new();
    for i in 0..RECORDS {
        *counts.entry(key_of(i)).or_insert(0) += 1;
    }
    counts
}

async fn keyed_count_at(parallelism: usize) -> Vec<(usize, u64, u64)> {
    let env = StreamEnvironment::new();
    env.set_parallelism(parallelism);
    let out = env
        .from_generator(Generator::new(key_of).take(RECORDS))
        .key_by(|k: &u64| *k)
        .process(CountPerKey::default())
        .name("count per key")
        .collect();
    let result = env.execute("keyed count").await.unwrap();
    let totals = result.metrics.operator("count per key");
    assert_eq!(totals.records_in, RECORDS);
    assert_eq!(totals.subtasks, parallelism);
    out.take()
}

fn check(parallelism: usize, got: Vec<(usize, u64, u64)>, expected: &HashMap<u64, u64>) {
    let mut counts = HashMap::new();
    for (subtask, key, n) in got {
        assert!(subtask < parallelism);
        // A key counted on two subtasks would appear twice with partial counts.
        assert!(
            counts.insert(key, n).is_none(),
            "key {key} was counted by more than one subtask at parallelism {parallelism}"
        );
        let owner = subtask_for_key_group(key_group(&key, 128), 128, parallelism);
        assert_eq!(
            subtask, owner,
            "key {key} was counted by subtask {subtask}, its key group belongs to {owner}"
        );
    }
    assert_eq!(
        &counts, expected,
        "counts differ at parallelism {parallelism}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_count_matches_the_sequential_answer_at_parallelism_1_2_and_4() {
    let expected = sequential_counts();
    assert_eq!(expected.values().sum::<u64>(), RECORDS);
    for parallelism in [1, 2, 4] {
        let got = keyed_count_at(parallelism).await;
        check(parallelism, got, &expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_count_is_exact_when_source_and_counter_parallelism_differ() {
    let expected = sequential_counts();
    let env = StreamEnvironment::new();
    env.set_parallelism(4).set_batch_size(100);
    let out = env
        .from_generator(Generator::new(key_of).take(RECORDS))
        .parallelism(3)
        .key_by(|k: &u64| *k)
        .process(CountPerKey::default())
        .parallelism(2)
        .collect();
    env.execute("keyed count 3 -> 2").await.unwrap();
    check(2, out.take(), &expected);
}

mod store_calls {
    //! A keyed task that waits in its store's calls (RocksDB reading a block from disk, a
    //! write stalled behind a flush) does not hold up the other tasks of its worker.

    use sluice_runtime::prelude::*;
    use sluice_runtime::state::{
        KeyedStateBackend, KeyedStore, MemoryStateBackend, StoreError, StoreScope, StoreWrite,
        ValueCaches,
    };
    use std::sync::mpsc::{Receiver, RecvTimeoutError};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio::sync::Notify;

    /// The first read of any store it opens blocks its thread until `release` is received,
    /// after waking `waiting`; the stores are in memory otherwise. Each store it opens sends
    /// on `dropped`, if set, when it is dropped.
    #[derive(Debug)]
    struct FirstReadWaits {
        inner: MemoryStateBackend,
        gate: Arc<Gate>,
        dropped: Option<Mutex<std::sync::mpsc::Sender<()>>>,
    }

    #[derive(Debug)]
    struct Gate {
        waiting: Arc<Notify>,
        release: Mutex<Option<Receiver<()>>>,
        /// The names of the threads the store was called on.
        threads: Mutex<Vec<String>>,
    }

    impl Gate {
        /// A gate whose first read waits for `release` (none: it passes at once).
        fn new(release: Option<Receiver<()>>) -> Arc<Gate> {
            Arc::new(Gate {
                waiting: Arc::new(Notify::new()),
                release: Mutex::new(release),
                threads: Mutex::default(),
            })
        }

        /// The store was called on the keyed task's own thread only.
        fn assert_called_on_the_keyed_thread(&self) {
            assert_eq!(
                *self.threads.lock().unwrap(),
                vec!["sluice-keyed".to_string()]
            );
        }

        fn pass(&self) -> Result<(), StoreError> {
            if let Ok(mut threads) = self.threads.lock() {
                let name = std::thread::current().name().unwrap_or("").to_string();
                if !threads.contains(&name) {
                    threads.push(name);
                }
            }
            let Some(release) = self.release.lock().ok().and_then(|mut r| r.take()) else {
                return Ok(());
            };
            self.waiting.notify_one();
            release
                .recv_timeout(Duration::from_secs(20))
                .map_err(|e: RecvTimeoutError| StoreError::Io {
                    backend: "waiting".into(),
                    operator: "the test's".into(),
                    action: "read",
                    message: format!("nothing released the read: {e}"),
                })
        }
    }

    #[derive(Debug)]
    struct Waiting {
        inner: Arc<dyn KeyedStore>,
        gate: Arc<Gate>,
        dropped: Option<std::sync::mpsc::Sender<()>>,
    }

    impl Drop for Waiting {
        fn drop(&mut self) {
            if let Some(dropped) = &self.dropped {
                let _ = dropped.send(());
            }
        }
    }

    impl KeyedStateBackend for FirstReadWaits {
        fn name(&self) -> &str {
            "first-read-waits"
        }

        fn open(&self, scope: &StoreScope) -> Result<Arc<dyn KeyedStore>, StoreError> {
            let dropped = match &self.dropped {
                Some(d) => Some(d.lock().map(|d| d.clone()).map_err(|_| StoreError::Io {
                    backend: "first-read-waits".into(),
                    operator: scope.describe(),
                    action: "open",
                    message: "poisoned".into(),
                })?),
                None => None,
            };
            Ok(Arc::new(Waiting {
                inner: self.inner.open(scope)?,
                gate: self.gate.clone(),
                dropped,
            }))
        }

        fn value_caches(&self) -> ValueCaches {
            self.inner.value_caches()
        }
    }

    impl KeyedStore for Waiting {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            self.gate.pass()?;
            self.inner.get(key)
        }

        fn get_many(
            &self,
            keys: &[Vec<u8>],
            f: &mut dyn FnMut(usize, Option<&[u8]>),
        ) -> Result<(), StoreError> {
            self.gate.pass()?;
            self.inner.get_many(keys, f)
        }

        fn write(&self, batch: Vec<StoreWrite>) -> Result<(), StoreError> {
            self.inner.write(batch)
        }

        fn scan(
            &self,
            start: &[u8],
            end: &[u8],
            f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
        ) -> Result<(), StoreError> {
            self.gate.pass()?;
            self.inner.scan(start, end, f)
        }
    }

    /// A job environment at parallelism 1 whose keyed state goes through `gate` to a memory
    /// store; `dropped` hears when the store is dropped.
    fn through(
        gate: &Arc<Gate>,
        dropped: Option<std::sync::mpsc::Sender<()>>,
    ) -> StreamEnvironment {
        let env = StreamEnvironment::new();
        env.set_parallelism(1).set_state_backend(FirstReadWaits {
            inner: MemoryStateBackend::new(0),
            gate: gate.clone(),
            dropped: dropped.map(Mutex::new),
        });
        env
    }

    /// One worker thread: while the keyed task waits in its store, the only thing that lets it
    /// go on is a task on that same worker. Run on the worker, the store's wait would hold it
    /// and the read would fail after 20 s; run off it, the worker runs the other task at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_keyed_task_waiting_in_its_store_does_not_hold_up_its_worker() {
        let (release_tx, release) = std::sync::mpsc::sync_channel(1);
        let gate = Gate::new(Some(release));
        let waiting = gate.waiting.clone();
        let releaser = tokio::spawn(async move {
            waiting.notified().await;
            release_tx.send(()).is_ok()
        });
        let env = through(&gate, None);
        let out = env
            .from_iter((0..40u64).collect::<Vec<_>>())
            .key_by(|v: &u64| v % 4)
            .count_window(5)
            .reduce(|a, b| a + b)
            .collect();
        env.execute("a store that waits").await.unwrap();
        assert!(releaser.await.unwrap(), "the read waited for the releaser");
        let mut sums = out.take();
        sums.sort_unstable();
        // Key k: k, k+4, ..., k+36 in two windows of five.
        let mut expected: Vec<u64> = (0..4)
            .flat_map(|k| {
                [
                    (0..5).map(|i| k + 4 * i).sum(),
                    (5..10).map(|i| k + 4 * i).sum(),
                ]
            })
            .collect();
        expected.sort_unstable();
        assert_eq!(sums, expected);
        // As Flink runs each task on a thread, the keyed task has one of its own.
        gate.assert_called_on_the_keyed_thread();
    }

    /// A panic in user code in a keyed task on a thread of its own fails the job with its
    /// message, as on a worker.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_in_user_code_on_a_keyed_tasks_thread_fails_the_job_with_its_message() {
        let gate = Gate::new(None);
        let env = through(&gate, None);
        let _out = env
            .from_iter((0..40u64).collect::<Vec<_>>())
            .key_by(|v: &u64| v % 4)
            .count_window(5)
            .reduce(|a, b| {
                assert!(a + b < 100, "a sum reached 100");
                a + b
            })
            .collect();
        let err = env.execute("a reduce that panics").await.unwrap_err();
        let failure = err
            .task_failure()
            .unwrap_or_else(|| panic!("not a task failure: {err}"));
        assert!(failure.message.contains("a sum reached 100"), "{err}");
        gate.assert_called_on_the_keyed_thread();
    }

    /// A keyed task on a thread of its own stops when the job is cancelled, however long its
    /// input (at parallelism 1 the endless source is in the keyed task's chain, so nothing but
    /// the cancel ends it), and the job ends only once the thread has dropped its operators and
    /// store: a second job may open the same store at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_job_ends_after_its_keyed_task_dropped_its_store_on_its_thread() {
        let (dropped_tx, dropped) = std::sync::mpsc::channel();
        let gate = Gate::new(None);
        let env = through(&gate, Some(dropped_tx));
        let seen = Arc::new(Notify::new());
        let first = seen.clone();
        env.from_generator(Generator::new(|i| i))
            .key_by(|v: &u64| v % 16)
            .count_window(3)
            .reduce(|a, b| a + b)
            .map(move |v| {
                first.notify_one();
                v
            })
            .discard();
        let job = env.submit("endless keyed").unwrap();
        seen.notified().await;
        gate.assert_called_on_the_keyed_thread();
        job.cancel();
        let _ = job.await;
        assert_eq!(
            dropped.try_recv(),
            Ok(()),
            "the job ended before its keyed task dropped its store"
        );
    }
}
