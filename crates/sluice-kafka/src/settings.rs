//! [`KafkaSettings`]: the bootstrap servers and the librdkafka properties a source or a sink
//! passes through to its clients (security settings included), checked before the job runs.

use crate::error::KafkaError;
use rdkafka::ClientConfig;
use std::collections::BTreeMap;
use std::fmt;

/// Properties whose values are never printed (passwords and keys).
fn secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.contains("password")
        || name.contains("secret")
        || name.ends_with(".key.pem")
        || name.contains("sasl.oauthbearer.config")
        || name.contains("jaas")
}

/// The client settings of a Kafka source or sink: bootstrap servers and librdkafka properties
/// (see librdkafka's `CONFIGURATION.md`), passed to every client it makes. Secret values
/// (passwords, keys) are never shown in `Debug` or errors.
///
/// ```
/// use sluice_kafka::KafkaSettings;
/// let s = KafkaSettings::new("127.0.0.1:9092")
///     .set("security.protocol", "sasl_ssl")
///     .set("sasl.password", "hunter2");
/// assert_eq!(s.bootstrap_servers(), "127.0.0.1:9092");
/// assert!(!format!("{s:?}").contains("hunter2"));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaSettings {
    properties: BTreeMap<String, String>,
}

impl fmt::Debug for KafkaSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in &self.properties {
            if secret(k) {
                m.entry(k, &"<redacted>");
            } else {
                m.entry(k, v);
            }
        }
        m.finish()
    }
}

impl KafkaSettings {
    /// Settings for the brokers at `bootstrap_servers` (`host:port[,host:port...]`).
    pub fn new(bootstrap_servers: impl Into<String>) -> Self {
        KafkaSettings::default().set("bootstrap.servers", bootstrap_servers)
    }

    /// Sets a librdkafka property.
    pub fn set(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(name.into(), value.into());
        self
    }

    /// A property's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.properties.get(name).map(String::as_str)
    }

    /// The bootstrap servers.
    pub fn bootstrap_servers(&self) -> &str {
        self.get("bootstrap.servers").unwrap_or("")
    }

    /// The settings with `name` set unless the user set it.
    pub(crate) fn with_default(mut self, name: &str, value: &str) -> Self {
        self.properties
            .entry(name.to_string())
            .or_insert_with(|| value.to_string());
        self
    }

    /// A librdkafka configuration with every property.
    pub(crate) fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }

    /// Checks the settings for `role` ("source clicks"): bootstrap servers present, none of
    /// `reserved` set by the user (the connector sets those itself), and librdkafka accepts every
    /// property name and value (it refuses unknown ones).
    pub(crate) fn check(&self, role: &str, reserved: &[&str]) -> Result<(), KafkaError> {
        let bad = |message: String| KafkaError::Settings {
            role: role.to_string(),
            message,
        };
        if self.bootstrap_servers().trim().is_empty() {
            return Err(bad("bootstrap.servers is not set".into()));
        }
        for r in reserved {
            if let Some(v) = self.get(r) {
                let v = if secret(r) { "<redacted>" } else { v };
                return Err(bad(format!(
                    "{r} = {v} may not be set: the connector sets it itself"
                )));
            }
        }
        // librdkafka checks each property as it is set; a native config shows the first refusal.
        let mut native = ClientConfig::new();
        for (k, v) in &self.properties {
            native.set(k, v);
            if let Err(e) = native.create_native_config() {
                let v = if secret(k) { "<redacted>" } else { v.as_str() };
                return Err(bad(format!("{k} = {v} is refused: {e}")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_property_is_named() {
        let e = KafkaSettings::new("127.0.0.1:9092")
            .set("no.such.property", "1")
            .check("source clicks", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("source clicks") && e.contains("no.such.property = 1"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_value_is_named_and_a_secret_is_not_shown() {
        let e = KafkaSettings::new("127.0.0.1:9092")
            .set("linger.ms", "soon")
            .check("sink counts", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("linger.ms = soon"), "{e}");
        let e = KafkaSettings::new("h:1")
            .set("sasl.password", "hunter2")
            .check("sink counts", &["sasl.password"])
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn missing_bootstrap_servers_and_reserved_settings_are_refused() {
        let e = KafkaSettings::default()
            .check("source s", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("bootstrap.servers is not set"), "{e}");
        let e = KafkaSettings::new("h:1")
            .set("enable.auto.commit", "true")
            .check("source s", &["enable.auto.commit"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("enable.auto.commit = true may not be set"),
            "{e}"
        );
    }
}
