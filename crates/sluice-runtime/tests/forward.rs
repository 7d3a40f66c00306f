//! Forward edges pair producer subtask `i` with consumer subtask `i`, also when they are not
//! chained because the producer fans out: deployment gives each such edge one channel per
//! subtask pair, so no channel ties two pipelined regions together.

use sluice_runtime::prelude::*;

/// Tags each record with the subtask that saw it.
#[derive(Clone, Default)]
struct Tag(usize);

impl Operator<u64> for Tag {
    type Out = (usize, u64);
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.0 = ctx.subtask_index();
        Ok(())
    }
    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<(usize, u64)>,
    ) -> Result<(), UserError> {
        for x in batch {
            out.collect((self.0, x));
        }
        Ok(())
    }
}

/// Adds the subtask that received each tagged record.
#[derive(Clone, Default)]
struct Receive(usize);

impl Operator<(usize, u64)> for Receive {
    type Out = (usize, usize, u64);
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.0 = ctx.subtask_index();
        Ok(())
    }
    fn process_batch(
        &mut self,
        batch: Vec<(usize, u64)>,
        out: &mut Collector<(usize, usize, u64)>,
    ) -> Result<(), UserError> {
        for (from, x) in batch {
            out.collect((from, self.0, x));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchained_forward_edges_keep_each_record_in_its_subtask() {
    let env = StreamEnvironment::new();
    env.set_parallelism(3).set_batch_size(16);
    let tagged = env.from_iter(0..3_000u64).transform("tag", Tag::default());
    // Two outputs: neither edge can be chained, both are forward.
    let left = tagged
        .forward()
        .transform("left", Receive::default())
        .collect();
    let right = tagged
        .forward()
        .transform("right", Receive::default())
        .collect();
    env.execute("fan-out forward").await.unwrap();
    for (side, out) in [("left", left.take()), ("right", right.take())] {
        assert_eq!(out.len(), 3_000, "{side}");
        let mut values: Vec<u64> = out.iter().map(|r| r.2).collect();
        values.sort_unstable();
        assert_eq!(values, (0..3_000).collect::<Vec<_>>(), "{side}");
        let crossed: Vec<_> = out.iter().filter(|(from, to, _)| from != to).collect();
        assert!(
            crossed.is_empty(),
            "{side}: records changed subtask: {:?}",
            &crossed[..crossed.len().min(5)]
        );
        // Every subtask had records, so the pairing was exercised on all three.
        for s in 0..3 {
            assert!(
                out.iter().any(|r| r.1 == s),
                "{side}: subtask {s} got nothing"
            );
        }
    }
}
