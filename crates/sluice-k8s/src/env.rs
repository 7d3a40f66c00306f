//! The high-availability settings of the cluster contract, read from the environment as a
//! pure function of a variable lookup: `SLUICE_HA=kubernetes` turns the standby on,
//! `SLUICE_LEASE_NAME` names the Lease (default `sluice-jobmanager`), `POD_NAME` is this
//! candidate's identity and `POD_NAMESPACE` the Lease's namespace (default: the client
//! configuration's), both from the downward API.

use sluice_cluster::lease::{LeaseConfig, LeaseConfigError};

/// The Lease's name when `SLUICE_LEASE_NAME` is not set.
pub const DEFAULT_LEASE_NAME: &str = "sluice-jobmanager";

/// Why leader election could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// `SLUICE_HA` names a kind of high availability this crate does not provide.
    #[error("SLUICE_HA={0:?} is not supported (use `kubernetes`, or leave it unset)")]
    UnknownHa(String),
    /// A variable the election needs is not set, or empty.
    #[error(
        "{0} must be set for SLUICE_HA=kubernetes (from the downward API: metadata.name / metadata.namespace)"
    )]
    Missing(&'static str),
    /// The lease configuration is incoherent.
    #[error("lease configuration: {0}")]
    Lease(#[from] LeaseConfigError),
    /// No Kubernetes client configuration was found (neither a kubeconfig nor a pod's
    /// service account).
    #[error("no Kubernetes client configuration: {0}")]
    KubeConfig(String),
    /// The Kubernetes client could not be built from its configuration.
    #[error("building the Kubernetes client: {0}")]
    KubeClient(String),
}

/// Who competes for which Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HaSettings {
    /// The Lease's name.
    pub lease_name: String,
    /// The Lease's namespace; `None` for the client configuration's default.
    pub namespace: Option<String>,
    /// The timing and this candidate's identity (the pod's name).
    pub lease: LeaseConfig,
}

impl HaSettings {
    /// The settings from `lookup` (a variable's value, or `None`): `Ok(None)` when
    /// `SLUICE_HA` is unset or empty (no standby), an error when it names something other
    /// than `kubernetes` or when `POD_NAME` is missing.
    ///
    /// ```
    /// use sluice_k8s::HaSettings;
    ///
    /// let vars = [("SLUICE_HA", "kubernetes"), ("POD_NAME", "jm-0"), ("POD_NAMESPACE", "stream")];
    /// let lookup = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
    /// let settings = HaSettings::from_lookup(lookup).unwrap().unwrap();
    /// assert_eq!(settings.lease_name, "sluice-jobmanager");
    /// assert_eq!(settings.lease.identity, "jm-0");
    /// assert_eq!(HaSettings::from_lookup(|_| None).unwrap(), None);
    /// ```
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, SetupError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        match get("SLUICE_HA") {
            None => return Ok(None),
            Some(ha) if ha.trim().eq_ignore_ascii_case("kubernetes") => {}
            Some(other) => return Err(SetupError::UnknownHa(other)),
        }
        let identity = get("POD_NAME").ok_or(SetupError::Missing("POD_NAME"))?;
        Ok(Some(HaSettings {
            lease_name: get("SLUICE_LEASE_NAME").unwrap_or_else(|| DEFAULT_LEASE_NAME.into()),
            namespace: get("POD_NAMESPACE"),
            lease: LeaseConfig::new(identity)?,
        }))
    }

    /// [`from_lookup`](Self::from_lookup) over this process's environment.
    pub fn from_env() -> Result<Option<Self>, SetupError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn unset_or_empty_ha_means_no_standby() {
        assert_eq!(HaSettings::from_lookup(lookup(&[])).unwrap(), None);
        assert_eq!(
            HaSettings::from_lookup(lookup(&[("SLUICE_HA", " ")])).unwrap(),
            None
        );
    }

    #[test]
    fn kubernetes_ha_reads_the_lease_name_namespace_and_pod_name() {
        let settings = HaSettings::from_lookup(lookup(&[
            ("SLUICE_HA", "Kubernetes"),
            ("SLUICE_LEASE_NAME", "clicks-leader"),
            ("POD_NAMESPACE", "stream"),
            ("POD_NAME", "sluice-jobmanager-7d9f-x2"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(settings.lease_name, "clicks-leader");
        assert_eq!(settings.namespace.as_deref(), Some("stream"));
        assert_eq!(settings.lease.identity, "sluice-jobmanager-7d9f-x2");
        assert_eq!(
            settings.lease,
            LeaseConfig::new("sluice-jobmanager-7d9f-x2").unwrap()
        );
    }

    #[test]
    fn a_missing_pod_name_or_unknown_ha_is_an_error_naming_it() {
        let missing = HaSettings::from_lookup(lookup(&[("SLUICE_HA", "kubernetes")])).unwrap_err();
        assert!(
            matches!(missing, SetupError::Missing("POD_NAME")),
            "{missing}"
        );
        assert!(missing.to_string().contains("POD_NAME"));
        let unknown = HaSettings::from_lookup(lookup(&[("SLUICE_HA", "zookeeper")])).unwrap_err();
        assert!(unknown.to_string().contains("zookeeper"), "{unknown}");
    }
}
