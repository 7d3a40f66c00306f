//! [`S3Storage`]: where a catalog's tables live when the warehouse is an `s3://` location (AWS S3
//! or any S3-compatible store: MinIO, Ceph, moto, ...), as the `s3.*` properties of Iceberg's
//! file IO (`s3.endpoint`, `s3.region`, `s3.access-key-id`, `s3.secret-access-key`,
//! `s3.session-token`, `s3.path-style-access`). iceberg-rust's OpenDAL storage reads them when
//! the catalog opens a table's files; [`S3Storage::props`] is a pure function of the settings.

use iceberg::io::{
    S3_ACCESS_KEY_ID, S3_DISABLE_CONFIG_LOAD, S3_DISABLE_EC2_METADATA, S3_ENDPOINT,
    S3_PATH_STYLE_ACCESS, S3_REGION, S3_SECRET_ACCESS_KEY, S3_SESSION_TOKEN,
};
use std::collections::HashMap;
use std::fmt;

/// Settings of an S3 (or S3-compatible) warehouse. Without credentials the usual AWS sources are
/// asked (environment, profile files, instance metadata); with [`credentials`](Self::credentials)
/// only those are used.
///
/// ```
/// use sluice_iceberg::S3Storage;
///
/// let minio = S3Storage::new("us-east-1")
///     .endpoint("http://127.0.0.1:9000")
///     .credentials("access key", "secret key")
///     .path_style_access(true);
/// assert_eq!(minio.props()["s3.path-style-access"], "true");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct S3Storage {
    region: String,
    endpoint: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    session_token: Option<String>,
    path_style_access: bool,
}

impl fmt::Debug for S3Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secrets.
        f.debug_struct("S3Storage")
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("access_key_id", &self.access_key_id)
            .field("path_style_access", &self.path_style_access)
            .finish_non_exhaustive()
    }
}

impl S3Storage {
    /// A bucket in `region`, reached at AWS's own endpoint with virtual-host-style addresses
    /// (Iceberg's default).
    pub fn new(region: &str) -> Self {
        S3Storage {
            region: region.to_string(),
            endpoint: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            path_style_access: false,
        }
    }

    /// The endpoint URL of an S3-compatible store (`http://127.0.0.1:9000`), `s3.endpoint`.
    pub fn endpoint(mut self, url: &str) -> Self {
        self.endpoint = Some(url.to_string());
        self
    }

    /// Static credentials (`s3.access-key-id`, `s3.secret-access-key`); no other source is asked.
    pub fn credentials(mut self, access_key_id: &str, secret_access_key: &str) -> Self {
        self.access_key_id = Some(access_key_id.to_string());
        self.secret_access_key = Some(secret_access_key.to_string());
        self
    }

    /// A session token that goes with temporary credentials (`s3.session-token`).
    pub fn session_token(mut self, token: &str) -> Self {
        self.session_token = Some(token.to_string());
        self
    }

    /// Path-style addresses (`http://host/bucket/key`, `s3.path-style-access`), which most
    /// self-hosted S3-compatible stores need; default off.
    pub fn path_style_access(mut self, on: bool) -> Self {
        self.path_style_access = on;
        self
    }

    /// The file IO properties of these settings.
    pub fn props(&self) -> HashMap<String, String> {
        let mut props = HashMap::from([
            (S3_REGION.to_string(), self.region.clone()),
            (
                S3_PATH_STYLE_ACCESS.to_string(),
                self.path_style_access.to_string(),
            ),
        ]);
        let optional = [
            (S3_ENDPOINT, &self.endpoint),
            (S3_ACCESS_KEY_ID, &self.access_key_id),
            (S3_SECRET_ACCESS_KEY, &self.secret_access_key),
            (S3_SESSION_TOKEN, &self.session_token),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                props.insert(key.to_string(), value.clone());
            }
        }
        if self.access_key_id.is_some() {
            // Static credentials: do not look for others (profile files, instance metadata).
            props.insert(S3_DISABLE_CONFIG_LOAD.to_string(), "true".to_string());
            props.insert(S3_DISABLE_EC2_METADATA.to_string(), "true".to_string());
        }
        props
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_become_iceberg_file_io_properties() {
        let s3 = S3Storage::new("eu-west-1")
            .endpoint("http://127.0.0.1:5000")
            .credentials("key", "secret")
            .session_token("token")
            .path_style_access(true);
        let props = s3.props();
        assert_eq!(props["s3.region"], "eu-west-1");
        assert_eq!(props["s3.endpoint"], "http://127.0.0.1:5000");
        assert_eq!(props["s3.access-key-id"], "key");
        assert_eq!(props["s3.secret-access-key"], "secret");
        assert_eq!(props["s3.session-token"], "token");
        assert_eq!(props["s3.path-style-access"], "true");
        assert_eq!(props["s3.disable-ec2-metadata"], "true");
    }

    #[test]
    fn aws_defaults_leave_endpoint_and_credentials_to_the_environment() {
        let props = S3Storage::new("us-east-1").props();
        assert_eq!(props["s3.path-style-access"], "false");
        assert!(!props.contains_key("s3.endpoint"));
        assert!(!props.contains_key("s3.access-key-id"));
        assert!(!props.contains_key("s3.disable-ec2-metadata"));
    }

    #[test]
    fn debug_output_hides_the_secrets() {
        let s3 = S3Storage::new("us-east-1")
            .credentials("key", "very-secret")
            .session_token("also-secret");
        let shown = format!("{s3:?}");
        assert!(!shown.contains("very-secret") && !shown.contains("also-secret"));
    }
}
