//! Failover: the restart strategies that decide whether, and after how long, a failed job is
//! restarted from its latest completed checkpoint.
//!
//! A [`RestartStrategy`] is a validated configuration (`none`, `fixed_delay`,
//! `exponential_backoff`). The decision is pure: the job master records each failure with the
//! time it happened in a [`FailureHistory`] through [`RestartStrategy::on_failure`], and gets back
//! a [`RestartDecision`]. Nothing here reads a clock, sleeps or spawns, so every rule is a plain
//! unit test. When the strategy gives up, the job fails with [`RestartsExhausted`].
//!
//! Sluice restarts globally: on any task failure every task is stopped and every task is restored
//! from the same checkpoint. Flink's region failover (restarting only the pipelined region of the
//! failed task) is a later step; the strategies here would apply to it unchanged.
//!
//! ```
//! use sluice_runtime::failover::{FailureHistory, RestartDecision, RestartStrategy};
//! use std::time::Duration;
//!
//! let strategy = RestartStrategy::fixed_delay(2, Duration::from_secs(1)).unwrap();
//! let mut history = FailureHistory::new();
//! let after = RestartDecision::Restart { after: Duration::from_secs(1) };
//! assert_eq!(strategy.on_failure(&mut history, Duration::from_secs(10)), after);
//! assert_eq!(strategy.on_failure(&mut history, Duration::from_secs(20)), after);
//! assert_eq!(
//!     strategy.on_failure(&mut history, Duration::from_secs(30)),
//!     RestartDecision::GiveUp { attempts: 2 }
//! );
//! ```

mod error;
mod strategy;

pub use error::{RestartStrategyError, RestartsExhausted};
pub use strategy::{ExponentialBackoff, FailureHistory, RestartDecision, RestartStrategy};
