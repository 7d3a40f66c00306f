//! [`RetryPolicy`]: how often and how long a failed catalog call (unreachable catalog, commit
//! conflict) is tried again before the job fails with the catalog's message; [`delay`] is the
//! pure backoff schedule.

use std::time::Duration;

/// Retries of catalog calls: exponential backoff from `initial` doubling up to `max`, at most
/// `attempts` tries in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all (at least 1).
    pub attempts: u32,
    /// The delay after the first failure.
    pub initial: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for RetryPolicy {
    /// 5 tries, 100 ms doubling up to 2 s.
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        }
    }
}

/// The delay before try `next` (2 for the first retry), or `None` when no try is left.
pub fn delay(policy: &RetryPolicy, next: u32) -> Option<Duration> {
    if next < 2 || next > policy.attempts.max(1) {
        return None;
    }
    let doublings = (next - 2).min(31);
    Some(
        policy
            .initial
            .saturating_mul(1 << doublings)
            .min(policy.max),
    )
}

/// Runs `call` until it succeeds or the policy gives up; returns the last error then.
pub(crate) async fn with_retries<T, E, F, Fut>(policy: &RetryPolicy, mut call: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                attempt += 1;
                match delay(policy, attempt) {
                    Some(d) => {
                        tracing::warn!(attempt, error = %e, "Iceberg catalog call failed; retrying in {d:?}");
                        tokio::time::sleep(d).await;
                    }
                    None => return Err(e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_max_and_stops_after_attempts() {
        let p = RetryPolicy {
            attempts: 5,
            initial: Duration::from_millis(100),
            max: Duration::from_millis(300),
        };
        let ds: Vec<_> = (1..8).map(|n| delay(&p, n)).collect();
        assert_eq!(
            ds,
            vec![
                None,
                Some(Duration::from_millis(100)),
                Some(Duration::from_millis(200)),
                Some(Duration::from_millis(300)),
                Some(Duration::from_millis(300)),
                None,
                None
            ]
        );
    }
}
