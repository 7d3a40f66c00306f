//! A state time-to-live under a millisecond is refused, as Flink refuses one that is not
//! positive: every value would expire as soon as it was written.

use sluice_runtime::prelude::*;
use sluice_runtime::process::{Context, KeyedCoProcessFunction, KeyedProcessFunction};
use sluice_runtime::state::StateTtlConfig;
use std::time::Duration;

/// Counts records per key, each count living `.0` after its last write.
#[derive(Clone)]
struct Count(Duration);

impl KeyedProcessFunction<u64, u64> for Count {
    type Out = u64;
    type State = u64;

    fn state_ttl(&self) -> Option<StateTtlConfig> {
        Some(StateTtlConfig::new(self.0))
    }

    fn process_element(
        &mut self,
        _: u64,
        ctx: &mut Context<'_, u64, u64, u64>,
    ) -> Result<(), UserError> {
        *ctx.state() += 1;
        let n = *ctx.state();
        ctx.collect(n);
        Ok(())
    }
}

impl KeyedCoProcessFunction<u64, u64, u64> for Count {
    type Out = u64;
    type State = u64;

    fn state_ttl(&self) -> Option<StateTtlConfig> {
        Some(StateTtlConfig::new(self.0))
    }

    fn process_element1(
        &mut self,
        v: u64,
        ctx: &mut Context<'_, u64, u64, u64>,
    ) -> Result<(), UserError> {
        KeyedProcessFunction::process_element(self, v, ctx)
    }

    fn process_element2(
        &mut self,
        v: u64,
        ctx: &mut Context<'_, u64, u64, u64>,
    ) -> Result<(), UserError> {
        KeyedProcessFunction::process_element(self, v, ctx)
    }
}

/// Runs `Count(ttl)` as a keyed process function and as a keyed co-process function, and
/// returns what each job ended with.
fn run(ttl: Duration) -> [Result<Vec<u64>, String>; 2] {
    let keyed = {
        let env = StreamEnvironment::new();
        env.set_parallelism(1);
        let out = env
            .from_iter(0..10u64)
            .key_by(|v| v % 2)
            .process_keyed(Count(ttl))
            .main()
            .collect();
        env.execute_blocking("keyed process")
            .map(|_| out.take())
            .map_err(|e| e.to_string())
    };
    let co = {
        let env = StreamEnvironment::new();
        env.set_parallelism(1);
        let a = env.from_iter(0..5u64).key_by(|v| v % 2);
        let b = env.from_iter(5..10u64).key_by(|v| v % 2);
        let out = a.connect(&b).process(Count(ttl)).main().collect();
        env.execute_blocking("keyed co-process")
            .map(|_| out.take())
            .map_err(|e| e.to_string())
    };
    [keyed, co]
}

#[test]
fn a_keyed_function_whose_time_to_live_is_under_a_millisecond_is_refused_at_submit() {
    for ttl in [Duration::ZERO, Duration::from_micros(999)] {
        for (ended, operator) in run(ttl)
            .into_iter()
            .zip(["Keyed Process", "Keyed Co-Process"])
        {
            let err = ended.expect_err("refused");
            assert!(
                err.contains(operator) && err.contains("at least 1 ms"),
                "{operator}, {ttl:?}: {err}"
            );
        }
    }
    for ended in run(Duration::from_millis(1)) {
        assert_eq!(
            ended.map(|out| out.len()),
            Ok(10),
            "a millisecond is allowed"
        );
    }
}
