//! [`IcebergCatalog`]: a catalog with the name the sink's errors use, made for the sink's I/O
//! runtime: the SQL catalog over SQLite (the embedded default: one file and a warehouse
//! directory, nothing to install), any SQL database `sqlx` reaches, the REST catalog (for
//! production), or any other [`iceberg::Catalog`]. Tables live on the local file system or, with
//! the `s3` feature (on by default), in an S3 or S3-compatible bucket (`S3Storage`, `s3.rs`),
//! through iceberg-rust's file IO. [`retry`] holds the backoff of catalog calls.

pub mod retry;
#[cfg(feature = "s3")]
mod s3;

#[cfg(feature = "s3")]
pub use s3::S3Storage;

use crate::error::IcebergSinkError;
use crate::io;
use iceberg::io::{LocalFsStorageFactory, StorageFactory};
use iceberg::{Catalog, CatalogBuilder};
use iceberg_catalog_rest::RestCatalogBuilder;
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalogBuilder};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A catalog for the sink: an [`iceberg::Catalog`] and its name (the name is what PyIceberg and
/// other SQL-catalog clients must use to see the same tables).
///
/// ```
/// use sluice_iceberg::IcebergCatalog;
///
/// let warehouse = tempfile::tempdir().unwrap();
/// let catalog = IcebergCatalog::sqlite("local", warehouse.path()).unwrap();
/// assert_eq!(catalog.name(), "local");
/// ```
#[derive(Clone)]
pub struct IcebergCatalog {
    name: String,
    inner: Arc<dyn Catalog>,
}

impl fmt::Debug for IcebergCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IcebergCatalog")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl IcebergCatalog {
    /// Wraps any catalog. It should have been built on a runtime that outlives the job (the
    /// constructors below build theirs on the sink's I/O runtime).
    pub fn new(name: impl Into<String>, catalog: Arc<dyn Catalog>) -> Self {
        IcebergCatalog {
            name: name.into(),
            inner: catalog,
        }
    }

    /// The embedded default: a SQL catalog in the SQLite file `catalog.db` inside `warehouse`,
    /// with tables under `warehouse` on the local file system. The directory is created if
    /// missing. PyIceberg reads the same tables with
    /// `SqlCatalog(name, uri="sqlite:///<warehouse>/catalog.db", warehouse="file://<warehouse>")`.
    pub fn sqlite(name: &str, warehouse: &Path) -> Result<Self, IcebergSinkError> {
        let warehouse = Self::local_dir(name, warehouse)?;
        let uri = format!("sqlite:{}?mode=rwc", warehouse.join("catalog.db").display());
        Self::sql(name, &uri, &format!("file://{}", warehouse.display()))
    }

    /// A SQL catalog at `uri` (a `sqlx` URL; this build has the SQLite driver) with tables under
    /// `warehouse` (a `file://` location).
    pub fn sql(name: &str, uri: &str, warehouse: &str) -> Result<Self, IcebergSinkError> {
        let props = HashMap::from([
            ("uri".to_string(), uri.to_string()),
            ("warehouse".to_string(), warehouse.to_string()),
            (
                "sql_bind_style".to_string(),
                SqlBindStyle::QMark.to_string(),
            ),
        ]);
        Self::load::<SqlCatalogBuilder>(
            name,
            props,
            Arc::new(LocalFsStorageFactory),
            format!("open SQL catalog at {uri}"),
        )
    }

    /// The SQL catalog over SQLite (the file `catalog.db` in the local directory `catalog_dir`,
    /// created if missing) with tables in an S3 or S3-compatible bucket: `warehouse` is an
    /// `s3://bucket/prefix` location, `s3` says how to reach it. PyIceberg reads the same
    /// tables with `SqlCatalog(name, uri="sqlite:///<catalog_dir>/catalog.db",
    /// warehouse=<warehouse>, **{"s3.endpoint": ..., ...})`.
    ///
    /// ```no_run
    /// use sluice_iceberg::{IcebergCatalog, S3Storage};
    ///
    /// let s3 = S3Storage::new("us-east-1")
    ///     .endpoint("http://127.0.0.1:9000")
    ///     .credentials("minio", "minio-secret")
    ///     .path_style_access(true);
    /// let catalog = IcebergCatalog::sqlite_s3(
    ///     "lake",
    ///     std::path::Path::new("/var/lib/sluice/catalog"),
    ///     "s3://warehouse/tables",
    ///     &s3,
    /// )
    /// .unwrap();
    /// ```
    #[cfg(feature = "s3")]
    pub fn sqlite_s3(
        name: &str,
        catalog_dir: &Path,
        warehouse: &str,
        s3: &S3Storage,
    ) -> Result<Self, IcebergSinkError> {
        let catalog_dir = Self::local_dir(name, catalog_dir)?;
        let uri = format!(
            "sqlite:{}?mode=rwc",
            catalog_dir.join("catalog.db").display()
        );
        Self::sql_s3(name, &uri, warehouse, s3)
    }

    /// A SQL catalog at `uri` (a `sqlx` URL) with tables in an S3 or S3-compatible bucket
    /// (`warehouse` is `s3://bucket/prefix`; see [`IcebergCatalog::sqlite_s3`]).
    #[cfg(feature = "s3")]
    pub fn sql_s3(
        name: &str,
        uri: &str,
        warehouse: &str,
        s3: &S3Storage,
    ) -> Result<Self, IcebergSinkError> {
        if !warehouse.starts_with("s3://") && !warehouse.starts_with("s3a://") {
            return Err(IcebergSinkError::Catalog {
                catalog: name.to_string(),
                table: String::new(),
                action: format!("open SQL catalog at {uri}"),
                message: format!("the warehouse `{warehouse}` is not an s3:// location"),
            });
        }
        let mut props = s3.props();
        props.insert("uri".to_string(), uri.to_string());
        props.insert("warehouse".to_string(), warehouse.to_string());
        props.insert(
            "sql_bind_style".to_string(),
            SqlBindStyle::QMark.to_string(),
        );
        Self::load::<SqlCatalogBuilder>(
            name,
            props,
            Arc::new(iceberg_storage_opendal::OpenDalStorageFactory::S3 {
                customized_credential_load: None,
            }),
            format!("open SQL catalog at {uri} with warehouse {warehouse}"),
        )
    }

    /// Creates `dir` if missing and makes it absolute. A file where the directory (or one of its
    /// parents) should be is named as such, rather than with the OS's "File exists".
    fn local_dir(name: &str, dir: &Path) -> Result<std::path::PathBuf, IcebergSinkError> {
        if let Some(file) = dir.ancestors().find(|p| p.exists() && !p.is_dir()) {
            return Err(IcebergSinkError::Catalog {
                catalog: name.to_string(),
                table: String::new(),
                action: format!("use catalog directory {}", dir.display()),
                message: format!(
                    "{} is not a directory (a file is in the way)",
                    file.display()
                ),
            });
        }
        std::fs::create_dir_all(dir).map_err(|e| IcebergSinkError::Catalog {
            catalog: name.to_string(),
            table: String::new(),
            action: format!("create catalog directory {}", dir.display()),
            message: e.to_string(),
        })?;
        std::path::absolute(dir).map_err(|e| IcebergSinkError::Catalog {
            catalog: name.to_string(),
            table: String::new(),
            action: format!("resolve catalog directory {}", dir.display()),
            message: e.to_string(),
        })
    }

    /// The REST catalog at `uri` (production). `props` are the REST catalog's properties
    /// (`warehouse`, `credential`, `token`, ...) and, for tables in S3, the file IO's `s3.*`
    /// properties (`S3Storage::props`) unless the server hands them out. Table files are read
    /// and written on the local file system (`file://` locations) or, with the `s3` feature, in
    /// S3 (`s3://` locations), whichever the table's location says.
    pub fn rest(
        name: &str,
        uri: &str,
        props: HashMap<String, String>,
    ) -> Result<Self, IcebergSinkError> {
        let mut props = props;
        props.insert("uri".to_string(), uri.to_string());
        #[cfg(feature = "s3")]
        let storage: Arc<dyn StorageFactory> =
            Arc::new(iceberg_storage_opendal::OpenDalResolvingStorageFactory::new());
        #[cfg(not(feature = "s3"))]
        let storage: Arc<dyn StorageFactory> = Arc::new(LocalFsStorageFactory);
        Self::load::<RestCatalogBuilder>(
            name,
            props,
            storage,
            format!("open REST catalog at {uri}"),
        )
    }

    /// Builds a catalog of builder `B` named `name` from `props`, with tables in `storage`;
    /// `action` says what failed in the error.
    fn load<B>(
        name: &str,
        props: HashMap<String, String>,
        storage: Arc<dyn StorageFactory>,
        action: String,
    ) -> Result<Self, IcebergSinkError>
    where
        B: CatalogBuilder + 'static,
        B::C: 'static,
    {
        let catalog_name = name.to_string();
        let built = io::run(async move {
            B::default()
                .with_storage_factory(storage)
                .load(catalog_name, props)
                .await
        })
        .map_err(IcebergSinkError::Io)?;
        let catalog = built.map_err(|e| IcebergSinkError::Catalog {
            catalog: name.to_string(),
            table: String::new(),
            action,
            message: e.to_string(),
        })?;
        Ok(Self::new(name, Arc::new(catalog)))
    }

    /// The catalog's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The catalog itself.
    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.inner
    }
}
