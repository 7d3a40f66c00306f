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
