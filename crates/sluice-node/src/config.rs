//! The process's role and addresses, read from its environment (pure: [`NodeConfig::from_lookup`]
//! takes any lookup function, so tests need no process environment).
//!
//! ```
//! use sluice_node::{NodeConfig, Role};
//!
//! let env = |k: &str| match k {
//!     "SLUICE_MODE" => Some("taskmanager".to_string()),
//!     "SLUICE_SECRET" => Some("a secret of at least sixteen bytes".to_string()),
//!     "SLUICE_JOBMANAGER" => Some("127.0.0.1:6123".to_string()),
//!     "SLUICE_SLOTS" => Some("2".to_string()),
//!     _ => None,
//! };
//! let config = NodeConfig::from_lookup(env).unwrap();
//! assert_eq!(config.role, Role::TaskManager);
//! assert_eq!(config.slots, 2);
//! ```

use sluice_net::auth::Secret;
use std::net::SocketAddr;
use std::time::Duration;

/// What this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The whole job in this process (the default).
    Local,
    /// The job master: plans the job, hosts coordinators and checkpoints, deploys tasks.
    JobManager,
    /// A task manager: offers slots and runs the tasks deployed to it.
    TaskManager,
}

/// A configuration value that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A variable holds a value that does not parse.
    #[error("{variable}={value:?}: {reason}")]
    Invalid {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A variable the role needs is not set.
    #[error("{variable} must be set for a {role}: {hint}")]
    Missing {
        /// The variable.
        variable: &'static str,
        /// The role that needs it.
        role: &'static str,
        /// What to put there.
        hint: &'static str,
    },
}

/// A process's cluster settings (see the crate's documentation for the variables).
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The role.
    pub role: Role,
    /// The shared secret (cluster roles only).
    pub secret: Option<Secret>,
    /// Where the control service binds.
    pub rpc_addr: SocketAddr,
    /// Where a task manager's data plane binds.
    pub data_addr: SocketAddr,
    /// The host other processes use to reach this one.
    pub advertised_host: Option<String>,
    /// The job master's control address (task managers).
    pub job_manager: Option<String>,
    /// Slots a task manager offers.
    pub slots: u32,
    /// A task manager's name.
    pub task_manager_id: String,
    /// Where `/healthz` and `/readyz` are served, if anywhere.
    pub health_addr: Option<SocketAddr>,
    /// How often task managers send heartbeats.
    pub heartbeat_interval: Duration,
    /// After how long without a heartbeat a peer counts as lost.
    pub heartbeat_timeout: Duration,
    /// How long the job master waits for enough slots before failing a deployment.
    pub slot_wait: Duration,
    /// KiB of buffer a task manager's receiver grants each incoming data channel: the most of
    /// one channel's frames in flight or queued at once (Flink's buffers per channel).
    pub data_window_kib: u32,
}

/// KiB per incoming data channel unless `SLUICE_DATA_WINDOW_KIB` says otherwise.
pub const DEFAULT_DATA_WINDOW_KIB: u32 = 1024;

/// The smallest window: what the largest frame may cost (see `sluice_net::credit`).
pub const MIN_DATA_WINDOW_KIB: u32 = 64;

/// The largest window accepted.
pub const MAX_DATA_WINDOW_KIB: u32 = 256 * 1024;

impl NodeConfig {
    /// The data window in credits of `sluice_net::credit::CREDIT_BYTES`.
    pub(crate) fn data_window_credits(&self) -> u32 {
        let bytes = u64::from(self.data_window_kib) * 1024;
        u32::try_from(bytes / sluice_net::credit::CREDIT_BYTES as u64).unwrap_or(u32::MAX)
    }

    /// How this process's data-plane connections are made: the shared `secret` and the window.
    pub(crate) fn net_config(&self, secret: Secret) -> sluice_net::NetConfig {
        let mut net = sluice_net::NetConfig::new(secret);
        net.window = self.data_window_credits();
        net
    }
}

fn parse<T: std::str::FromStr>(variable: &'static str, value: String) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value
        .trim()
        .parse()
        .map_err(|e: T::Err| ConfigError::Invalid {
            variable,
            value,
            reason: e.to_string(),
        })
}

fn millis(variable: &'static str, value: String) -> Result<Duration, ConfigError> {
    let ms: u64 = parse(variable, value.clone())?;
    if ms == 0 {
        return Err(ConfigError::Invalid {
            variable,
            value,
            reason: "must be at least 1 (milliseconds)".into(),
        });
    }
    Ok(Duration::from_millis(ms))
}

impl NodeConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the settings through `lookup` (a variable's value, if set).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let role = match lookup("SLUICE_MODE").as_deref().map(str::trim) {
            None | Some("") | Some("local") => Role::Local,
            Some("jobmanager") | Some("job-manager") | Some("jobmaster") => Role::JobManager,
            Some("taskmanager") | Some("task-manager") => Role::TaskManager,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    variable: "SLUICE_MODE",
                    value: other.to_string(),
                    reason: "expected local, jobmanager or taskmanager".into(),
                });
            }
        };
        let role_name = match role {
            Role::JobManager => "job manager",
            _ => "task manager",
        };
        let secret = match (lookup("SLUICE_SECRET"), lookup("SLUICE_SECRET_FILE")) {
            (Some(s), _) => Some(s.into_bytes()),
            (None, Some(path)) => Some(std::fs::read(&path).map_err(|e| ConfigError::Invalid {
                variable: "SLUICE_SECRET_FILE",
                value: path.clone(),
                reason: e.to_string(),
            })?),
            (None, None) => None,
        };
        let secret = match secret {
            Some(mut bytes) => {
                while bytes.last().is_some_and(|b| b.is_ascii_whitespace()) {
                    bytes.pop();
                }
                Some(Secret::new(bytes).map_err(|e| ConfigError::Invalid {
                    variable: "SLUICE_SECRET",
                    value: "<hidden>".into(),
                    reason: e.to_string(),
                })?)
            }
            None if role != Role::Local => {
                return Err(ConfigError::Missing {
                    variable: "SLUICE_SECRET",
                    role: role_name,
                    hint: "the secret every process of the cluster shares (or SLUICE_SECRET_FILE)",
                });
            }
            None => None,
        };
        let default_rpc = if role == Role::JobManager {
            "127.0.0.1:6123"
        } else {
            "127.0.0.1:0"
        };
        let addr = |variable: &'static str, default: &str| -> Result<SocketAddr, ConfigError> {
            parse(
                variable,
                lookup(variable).unwrap_or_else(|| default.to_string()),
            )
        };
        let job_manager = lookup("SLUICE_JOBMANAGER");
        if role == Role::TaskManager && job_manager.is_none() {
            return Err(ConfigError::Missing {
                variable: "SLUICE_JOBMANAGER",
                role: role_name,
                hint: "the job master's host:port, e.g. 127.0.0.1:6123",
            });
        }
        let slots: u32 = match lookup("SLUICE_SLOTS") {
            Some(v) => parse("SLUICE_SLOTS", v)?,
            None => 1,
        };
        if slots == 0 {
            return Err(ConfigError::Invalid {
                variable: "SLUICE_SLOTS",
                value: "0".into(),
                reason: "a task manager offers at least one slot".into(),
            });
        }
        let health_addr = match lookup("SLUICE_HEALTH_ADDR") {
            Some(v) => Some(parse("SLUICE_HEALTH_ADDR", v)?),
            None => None,
        };
        let heartbeat_interval = match lookup("SLUICE_HEARTBEAT_INTERVAL_MS") {
            Some(v) => millis("SLUICE_HEARTBEAT_INTERVAL_MS", v)?,
            None => Duration::from_millis(500),
        };
        let heartbeat_timeout = match lookup("SLUICE_HEARTBEAT_TIMEOUT_MS") {
            Some(v) => millis("SLUICE_HEARTBEAT_TIMEOUT_MS", v)?,
            None => Duration::from_secs(5),
        };
        if heartbeat_timeout <= heartbeat_interval {
            return Err(ConfigError::Invalid {
                variable: "SLUICE_HEARTBEAT_TIMEOUT_MS",
                value: heartbeat_timeout.as_millis().to_string(),
                reason: format!(
                    "must exceed the heartbeat interval ({} ms)",
                    heartbeat_interval.as_millis()
                ),
            });
        }
        let slot_wait = match lookup("SLUICE_SLOT_WAIT_MS") {
            Some(v) => millis("SLUICE_SLOT_WAIT_MS", v)?,
            None => Duration::from_secs(120),
        };
        let data_window_kib: u32 = match lookup("SLUICE_DATA_WINDOW_KIB") {
            Some(v) => parse("SLUICE_DATA_WINDOW_KIB", v)?,
            None => DEFAULT_DATA_WINDOW_KIB,
        };
        if !(MIN_DATA_WINDOW_KIB..=MAX_DATA_WINDOW_KIB).contains(&data_window_kib) {
            return Err(ConfigError::Invalid {
                variable: "SLUICE_DATA_WINDOW_KIB",
                value: data_window_kib.to_string(),
                reason: format!(
                    "KiB per channel must be between {MIN_DATA_WINDOW_KIB} and {MAX_DATA_WINDOW_KIB}"
                ),
            });
        }
        let task_manager_id = lookup("SLUICE_TASK_MANAGER_ID").unwrap_or_else(|| {
            let host = lookup("HOSTNAME").unwrap_or_else(|| "tm".into());
            format!("{host}-{}", std::process::id())
        });
        Ok(NodeConfig {
            role,
            secret,
            rpc_addr: addr("SLUICE_RPC_ADDR", default_rpc)?,
            data_addr: addr("SLUICE_DATA_ADDR", "127.0.0.1:0")?,
            advertised_host: lookup("SLUICE_ADVERTISED_HOST"),
            job_manager,
            slots,
            task_manager_id,
            health_addr,
            heartbeat_interval,
            heartbeat_timeout,
            slot_wait,
            data_window_kib,
        })
    }

    /// `host:port` for a bound address, with the advertised host if one is set.
    pub(crate) fn advertise(&self, bound: SocketAddr) -> String {
        match &self.advertised_host {
            Some(host) => format!("{host}:{}", bound.port()),
            None => bound.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn local_is_the_default_and_needs_nothing() {
        let c = NodeConfig::from_lookup(lookup(&[])).unwrap();
        assert_eq!(c.role, Role::Local);
        assert!(c.secret.is_none());
    }

    #[test]
    fn cluster_roles_bind_to_loopback_unless_told_and_need_a_secret() {
        let c = NodeConfig::from_lookup(lookup(&[
            ("SLUICE_MODE", "jobmanager"),
            ("SLUICE_SECRET", "0123456789abcdef0123"),
        ]))
        .unwrap();
        assert_eq!(c.rpc_addr, "127.0.0.1:6123".parse().unwrap());
        let e = NodeConfig::from_lookup(lookup(&[("SLUICE_MODE", "jobmanager")])).unwrap_err();
        assert!(e.to_string().contains("SLUICE_SECRET"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = NodeConfig::from_lookup(lookup(&[("SLUICE_MODE", "leader")])).unwrap_err();
        assert!(e.to_string().contains("SLUICE_MODE=\"leader\""), "{e}");
        let e = NodeConfig::from_lookup(lookup(&[
            ("SLUICE_MODE", "taskmanager"),
            ("SLUICE_SECRET", "0123456789abcdef0123"),
            ("SLUICE_JOBMANAGER", "127.0.0.1:6123"),
            ("SLUICE_SLOTS", "zero"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("SLUICE_SLOTS"), "{e}");
        let e = NodeConfig::from_lookup(lookup(&[
            ("SLUICE_MODE", "taskmanager"),
            ("SLUICE_SECRET", "0123456789abcdef0123"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("SLUICE_JOBMANAGER"), "{e}");
    }

    #[test]
    fn the_data_window_is_read_and_bounded() {
        let tm = |window: Option<&'static str>| {
            let mut pairs = vec![
                ("SLUICE_MODE", "taskmanager"),
                ("SLUICE_SECRET", "0123456789abcdef0123"),
                ("SLUICE_JOBMANAGER", "127.0.0.1:6123"),
            ];
            pairs.extend(window.map(|w| ("SLUICE_DATA_WINDOW_KIB", w)));
            NodeConfig::from_lookup(lookup(&pairs))
        };
        let default = tm(None).unwrap();
        assert_eq!(default.data_window_kib, DEFAULT_DATA_WINDOW_KIB);
        assert_eq!(default.data_window_credits(), 256);
        assert_eq!(tm(Some("64")).unwrap().data_window_credits(), 16);
        for bad in ["0", "63", "262145", "many"] {
            let e = tm(Some(bad)).unwrap_err();
            assert!(e.to_string().contains("SLUICE_DATA_WINDOW_KIB"), "{e}");
        }
    }
}
