//! Failover: the restart strategies that decide whether, and after how long, a failed job is
//! restarted from its latest completed checkpoint.
//!
//! A [`RestartStrategy`] is a validated configuration (`none`, `fixed_delay`,
//! `exponential_backoff`). The decision is pure and crate-private: the job master records each
//! failure with the time it happened in a failure history through the strategy, and gets back a
//! decision (restart after a delay, or give up). Nothing here reads a clock, sleeps or spawns, so
//! every rule is a plain unit test. When the strategy gives up, the job fails with
//! [`RestartsExhausted`].
//!
//! What a failure restarts is the [`FailoverStrategy`] (`scope.rs`): by default only the failed
//! task's pipelined region (`regions.rs` computes the regions, the groups of tasks that must
//! restart together), or every task. The restart strategy decides the same way for both: a
//! region restart counts as one restart.
//!
//! For example, `RestartStrategy::fixed_delay(2, 1 s)` decides (unit test
//! `worked_example_fixed_delay`):
//!
//! ```text
//! failure at 10 s -> restart after 1 s
//! failure at 20 s -> restart after 1 s
//! failure at 30 s -> give up after 2 restarts
//! ```
//!
//! ```
//! use sluice_runtime::failover::RestartStrategy;
//! use std::time::Duration;
//!
//! let strategy = RestartStrategy::fixed_delay(2, Duration::from_secs(1)).unwrap();
//! assert_eq!(strategy.to_string(), "fixed-delay(2 attempts, 1s)");
//! ```

mod error;
mod regions;
mod scope;
mod strategy;

pub use error::{RestartStrategyError, RestartsExhausted};
pub(crate) use regions::{Connection, Exchange, Regions};
pub use scope::FailoverStrategy;
pub(crate) use scope::RestartScope;
pub use strategy::{ExponentialBackoff, RestartStrategy};
pub(crate) use strategy::{FailureHistory, RestartDecision};
