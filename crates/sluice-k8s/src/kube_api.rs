//! [`KubeLeaseApi`]: the lease as a `coordination.k8s.io/v1` Lease object read and written
//! through kube-rs, and the pure mapping between the elector's [`LeaseRecord`] and the
//! Lease's spec (`holderIdentity`, `leaseDurationSeconds`, `acquireTime`, `renewTime`,
//! `leaseTransitions`) with `metadata.resourceVersion` as the version. The API server
//! refuses a replace naming an old `resourceVersion`, and a create of a lease that exists,
//! with 409 Conflict: that is a lost race, reported as a [`WriteFailed`].

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use sluice_cluster::lease::{LeaseRecord, Observation, Versioned, WriteFailed};

use crate::api::LeaseApi;
use crate::env::SetupError;

/// The Kubernetes Lease `name` in `namespace`, through a kube-rs client.
///
/// The service account needs `get`, `create` and `update` on `leases` in the namespace
/// (`deploy/kubernetes/rbac.yaml`).
///
/// ```no_run
/// use sluice_cluster::lease::{LeaseConfig, Observation};
/// use sluice_k8s::{KubeLeaseApi, LeaseApi, LeaderElection};
///
/// # async fn doc() -> Result<(), sluice_k8s::SetupError> {
/// // In a pod: the service account's credentials; elsewhere: the local kubeconfig.
/// let api = KubeLeaseApi::connect(Some("streaming"), "sluice-jobmanager").await?;
/// if let Observation::Found((record, version)) = api.get().await {
///     println!("held by {:?} at version {version}", record.holder);
/// }
/// let election = LeaderElection::new(api, LeaseConfig::new("jm-0")?);
/// let _leadership = election.acquire().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct KubeLeaseApi {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl std::fmt::Debug for KubeLeaseApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLeaseApi")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl KubeLeaseApi {
    /// The Lease `name` in `namespace`, through `client`.
    pub fn new(client: Client, namespace: &str, name: impl Into<String>) -> Self {
        KubeLeaseApi {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.into(),
        }
    }

    /// The Lease `name` through a client configured as kube-rs infers it: the local
    /// kubeconfig if there is one, else the pod's service account (in a cluster). Without
    /// `namespace`, the configuration's default namespace.
    pub async fn connect(
        namespace: Option<&str>,
        name: impl Into<String>,
    ) -> Result<Self, SetupError> {
        let config = Config::infer()
            .await
            .map_err(|e| SetupError::KubeConfig(e.to_string()))?;
        let namespace = namespace
            .map(str::to_string)
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).map_err(|e| SetupError::KubeClient(e.to_string()))?;
        Ok(KubeLeaseApi::new(client, &namespace, name))
    }

    /// The namespace of the Lease.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The name of the Lease.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn write_failed(&self, what: &str, error: kube::Error) -> WriteFailed {
        match &error {
            kube::Error::Api(status) if status.code == 409 => WriteFailed(format!(
                "{what} lease {}/{} lost a race (409 Conflict: {})",
                self.namespace, self.name, status.message
            )),
            _ => WriteFailed(format!(
                "{what} lease {}/{}: {error}",
                self.namespace, self.name
            )),
        }
    }

    fn answer(&self, lease: &Lease) -> Result<Versioned, WriteFailed> {
        versioned_from_lease(lease).map_err(WriteFailed)
    }
}

impl LeaseApi for KubeLeaseApi {
    async fn get(&self) -> Observation {
        match self.api.get_opt(&self.name).await {
            Ok(None) => Observation::Missing,
            Ok(Some(lease)) => match versioned_from_lease(&lease) {
                Ok(versioned) => Observation::Found(versioned),
                Err(why) => Observation::Failed(why),
            },
            Err(error) => Observation::Failed(format!(
                "reading lease {}/{}: {error}",
                self.namespace, self.name
            )),
        }
    }

    async fn create(&self, record: &LeaseRecord) -> Result<Versioned, WriteFailed> {
        let lease = lease_from_record(&self.name, None, record);
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(created) => self.answer(&created),
            Err(error) => Err(self.write_failed("creating", error)),
        }
    }

    async fn replace(&self, version: &str, record: &LeaseRecord) -> Result<Versioned, WriteFailed> {
        let lease = lease_from_record(&self.name, Some(version), record);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(replaced) => self.answer(&replaced),
            Err(error) => Err(self.write_failed("replacing", error)),
        }
    }
}

/// The elector's view of a Lease object: its spec as a record, its `resourceVersion` as the
/// version. A Lease without a `resourceVersion` cannot be replaced safely and is refused.
pub fn versioned_from_lease(lease: &Lease) -> Result<Versioned, String> {
    let name = lease.metadata.name.as_deref().unwrap_or("<unnamed>");
    let version = lease
        .metadata
        .resource_version
        .clone()
        .ok_or_else(|| format!("lease {name} has no metadata.resourceVersion"))?;
    let spec = lease.spec.clone().unwrap_or_default();
    Ok((record_from_spec(&spec), version))
}

/// A Lease spec as the elector's record. Absent fields read as nobody, zero and the epoch;
/// a negative duration or count as zero.
pub fn record_from_spec(spec: &LeaseSpec) -> LeaseRecord {
    let millis = |t: &Option<MicroTime>| t.as_ref().map_or(0, |t| t.0.as_millisecond());
    LeaseRecord {
        holder: spec.holder_identity.clone().filter(|h| !h.is_empty()),
        lease_duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        ),
        acquire_time_ms: millis(&spec.acquire_time),
        renew_time_ms: millis(&spec.renew_time),
        transitions: u32::try_from(spec.lease_transitions.unwrap_or(0)).unwrap_or(0),
    }
}

/// The elector's record as a Lease spec. The duration is rounded up to whole seconds (the
/// field's unit), so others never wait less than the holder meant; times out of range are
/// clamped.
pub fn spec_from_record(record: &LeaseRecord) -> LeaseSpec {
    let whole_seconds = record
        .lease_duration
        .as_secs()
        .saturating_add(u64::from(record.lease_duration.subsec_nanos() > 0));
    let time = |ms: i64| {
        let clamped = ms.clamp(
            Timestamp::MIN.as_millisecond(),
            Timestamp::MAX.as_millisecond(),
        );
        MicroTime(Timestamp::from_millisecond(clamped).unwrap_or(Timestamp::UNIX_EPOCH))
    };
    LeaseSpec {
        holder_identity: record.holder.clone(),
        lease_duration_seconds: Some(i32::try_from(whole_seconds).unwrap_or(i32::MAX)),
        acquire_time: Some(time(record.acquire_time_ms)),
        renew_time: Some(time(record.renew_time_ms)),
        lease_transitions: Some(i32::try_from(record.transitions).unwrap_or(i32::MAX)),
        ..LeaseSpec::default()
    }
}

/// The Lease object `name` holding `record`, naming the `version` it replaces (none for a
/// create).
pub fn lease_from_record(name: &str, version: Option<&str>, record: &LeaseRecord) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            resource_version: version.map(str::to_string),
            ..ObjectMeta::default()
        },
        spec: Some(spec_from_record(record)),
    }
}

#[cfg(test)]
mod tests;
