//! [`IcebergCatalog`]: a catalog with the name the sink's errors use, made for the sink's I/O
//! runtime: the SQL catalog over SQLite (the embedded default: one file and a warehouse
//! directory, nothing to install), any SQL database `sqlx` reaches, the REST catalog (for
//! production), or any other [`iceberg::Catalog`]. [`retry`] holds the backoff of catalog calls.

pub mod retry;

use crate::error::IcebergSinkError;
use crate::io;
use iceberg::io::LocalFsStorageFactory;
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
        std::fs::create_dir_all(warehouse).map_err(|e| IcebergSinkError::Catalog {
            catalog: name.to_string(),
            table: String::new(),
            action: format!("create warehouse directory {}", warehouse.display()),
            message: e.to_string(),
        })?;
        let warehouse = std::path::absolute(warehouse).map_err(|e| IcebergSinkError::Catalog {
            catalog: name.to_string(),
            table: String::new(),
            action: format!("resolve warehouse directory {}", warehouse.display()),
            message: e.to_string(),
        })?;
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
        Self::load::<SqlCatalogBuilder>(name, props, format!("open SQL catalog at {uri}"))
    }

    /// The REST catalog at `uri` (production). `props` are the REST catalog's properties
    /// (`warehouse`, `credential`, `token`, ...). Table files are read and written through the
    /// local file system storage of this build; an object store needs a catalog built with its
    /// storage factory, passed to [`IcebergCatalog::new`].
    pub fn rest(
        name: &str,
        uri: &str,
        props: HashMap<String, String>,
    ) -> Result<Self, IcebergSinkError> {
        let mut props = props;
        props.insert("uri".to_string(), uri.to_string());
        Self::load::<RestCatalogBuilder>(name, props, format!("open REST catalog at {uri}"))
    }

    /// Builds a catalog of builder `B` named `name` from `props`, with tables on the local file
    /// system; `action` says what failed in the error.
    fn load<B>(
        name: &str,
        props: HashMap<String, String>,
        action: String,
    ) -> Result<Self, IcebergSinkError>
    where
        B: CatalogBuilder + 'static,
        B::C: 'static,
    {
        let catalog_name = name.to_string();
        let built = io::run(async move {
            B::default()
                .with_storage_factory(Arc::new(LocalFsStorageFactory))
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
