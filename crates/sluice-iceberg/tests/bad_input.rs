//! Bad input: a record that does not fit the table fails the job naming the field; an existing
//! table with an incompatible schema fails the submission; catalog failures on commit are retried
//! with backoff, and when they persist the job fails with the catalog's message; a warehouse path
//! that is a file is refused, naming it; so is `max_continuous_empty_commits(0)`.

mod common;

use arrow_schema::{DataType, Field, Schema};
use async_trait::async_trait;
use common::*;
use iceberg::{
    Catalog, Namespace, NamespaceIdent, Result as IcebergResult, TableCommit, TableCreation,
    TableIdent, table::Table,
};
use sluice_iceberg::{IcebergCatalog, IcebergSink, RetryPolicy};
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Wrong {
    id: String,
    key: String,
    ts: i64,
}

#[test]
fn a_record_that_does_not_fit_fails_the_job_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let env = StreamEnvironment::new();
    // The table exists with the right schema; the records carry `id` as a string.
    let ok = env.from_iter((0..10u64).map(|i| event(i, 2)));
    IcebergSink::builder(catalog.clone(), "db.t")
        .create_if_missing(schema())
        .sink(&ok);
    let env = StreamEnvironment::new();
    let wrong = env.from_iter((0..10).map(|i| Wrong {
        id: format!("x{i}"),
        key: "k".into(),
        ts: 0,
    }));
    IcebergSink::builder(catalog, "db.t").sink(&wrong);
    let err = env
        .execute_blocking("wrong records")
        .unwrap_err()
        .to_string();
    assert!(err.contains("db.t") && err.contains("id"), "{err}");
}

#[test]
fn an_incompatible_existing_table_fails_the_submission() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let env = StreamEnvironment::new();
    let s = env.from_iter((0..10u64).map(|i| event(i, 2)));
    IcebergSink::builder(catalog.clone(), "db.t")
        .create_if_missing(schema())
        .sink(&s);
    env.execute_blocking("create").unwrap();

    let other = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("key", DataType::Utf8, false),
    ]));
    let env = StreamEnvironment::new();
    let s = env.from_iter((0..10u64).map(|i| event(i, 2)));
    IcebergSink::builder(catalog.clone(), "db.t")
        .create_if_missing(other)
        .sink(&s);
    let err = env.execute_blocking("incompatible").unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, JobError::InvalidJob(_)), "{text}");
    assert!(text.contains("db.t") && text.contains("`id`"), "{text}");
    // Nothing was written by the refused job.
    assert_eq!(read_rows(&catalog, "db.t").len(), 10);
}

#[test]
fn a_missing_table_without_create_fails_the_submission_naming_catalog_and_table() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let env = StreamEnvironment::new();
    let s = env.from_iter((0..10u64).map(|i| event(i, 2)));
    IcebergSink::builder(catalog, "db.missing").sink(&s);
    let text = env.execute_blocking("missing").unwrap_err().to_string();
    assert!(
        text.contains("`test`") && text.contains("db.missing"),
        "{text}"
    );
}

/// A catalog whose commits fail the first `failures` times with a message.
#[derive(Debug)]
struct Flaky {
    inner: Arc<dyn Catalog>,
    failures: u32,
    calls: AtomicU32,
}

#[async_trait]
impl Catalog for Flaky {
    async fn list_namespaces(
        &self,
        p: Option<&NamespaceIdent>,
    ) -> IcebergResult<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(p).await
    }
    async fn create_namespace(
        &self,
        n: &NamespaceIdent,
        p: HashMap<String, String>,
    ) -> IcebergResult<Namespace> {
        self.inner.create_namespace(n, p).await
    }
    async fn get_namespace(&self, n: &NamespaceIdent) -> IcebergResult<Namespace> {
        self.inner.get_namespace(n).await
    }
    async fn namespace_exists(&self, n: &NamespaceIdent) -> IcebergResult<bool> {
        self.inner.namespace_exists(n).await
    }
    async fn update_namespace(
        &self,
        n: &NamespaceIdent,
        p: HashMap<String, String>,
    ) -> IcebergResult<()> {
        self.inner.update_namespace(n, p).await
    }
    async fn drop_namespace(&self, n: &NamespaceIdent) -> IcebergResult<()> {
        self.inner.drop_namespace(n).await
    }
    async fn list_tables(&self, n: &NamespaceIdent) -> IcebergResult<Vec<TableIdent>> {
        self.inner.list_tables(n).await
    }
    async fn create_table(&self, n: &NamespaceIdent, c: TableCreation) -> IcebergResult<Table> {
        self.inner.create_table(n, c).await
    }
    async fn load_table(&self, t: &TableIdent) -> IcebergResult<Table> {
        self.inner.load_table(t).await
    }
    async fn drop_table(&self, t: &TableIdent) -> IcebergResult<()> {
        self.inner.drop_table(t).await
    }
    async fn purge_table(&self, t: &TableIdent) -> IcebergResult<()> {
        self.inner.purge_table(t).await
    }
    async fn table_exists(&self, t: &TableIdent) -> IcebergResult<bool> {
        self.inner.table_exists(t).await
    }
    async fn rename_table(&self, s: &TableIdent, d: &TableIdent) -> IcebergResult<()> {
        self.inner.rename_table(s, d).await
    }
    async fn register_table(&self, t: &TableIdent, l: String) -> IcebergResult<Table> {
        self.inner.register_table(t, l).await
    }
    async fn update_table(&self, c: TableCommit) -> IcebergResult<Table> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.failures {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::CatalogCommitConflicts,
                "injected: the catalog is unreachable",
            ));
        }
        self.inner.update_table(c).await
    }
}

/// Runs a job over a catalog whose commits fail `failures` times: its result, the commit calls
/// and the rows in the table afterwards.
fn flaky_job(failures: u32) -> (Result<JobResult, JobError>, u32, usize) {
    let dir = tempfile::tempdir().unwrap();
    let real = catalog(dir.path());
    let flaky = Arc::new(Flaky {
        inner: real.catalog().clone(),
        failures,
        calls: AtomicU32::new(0),
    });
    let catalog = IcebergCatalog::new("flaky", flaky.clone());
    let checkpoints = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.enable_checkpointing(Duration::from_millis(50));
    env.set_checkpoint_storage(checkpoints.path());
    env.set_restart_strategy(RestartStrategy::none());
    let s = env.from_iter((0..100u64).map(|i| event(i, 2)));
    IcebergSink::builder(catalog, "db.t")
        .create_if_missing(schema())
        .retry(RetryPolicy {
            attempts: 3,
            initial: Duration::from_millis(1),
            max: Duration::from_millis(4),
        })
        .sink(&s);
    let result = env.execute_blocking("flaky");
    let calls = flaky.calls.load(Ordering::SeqCst);
    let rows = read_rows(&real, "db.t").len();
    (result, calls, rows)
}

#[test]
fn commit_failures_are_retried_with_backoff() {
    let (result, calls, rows) = flaky_job(2);
    result.unwrap();
    assert_eq!(rows, 100);
    assert_eq!(calls, 3, "two failures, then the commit");
}

#[test]
fn persistent_commit_failures_fail_the_job_with_the_catalogs_message() {
    let (result, calls, rows) = flaky_job(u32::MAX);
    assert_eq!(rows, 0);
    let text = result.unwrap_err().to_string();
    assert!(text.contains("`flaky`") && text.contains("db.t"), "{text}");
    assert!(
        text.contains("injected: the catalog is unreachable"),
        "{text}"
    );
    assert_eq!(calls, 3, "three tries");
}

#[test]
fn a_warehouse_path_that_is_a_file_is_refused_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("warehouse");
    std::fs::write(&file, b"not a directory").unwrap();
    for path in [file.clone(), file.join("below")] {
        let err = IcebergCatalog::sqlite("local", &path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&file.display().to_string()) && err.contains("is not a directory"),
            "{err}"
        );
        assert!(!err.contains("File exists"), "{err}");
    }
}

#[test]
fn max_continuous_empty_commits_of_zero_fails_the_submission() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    let s = env.from_iter((0..10u64).map(|i| event(i, 2)));
    IcebergSink::builder(catalog(dir.path()), "db.t")
        .create_if_missing(schema())
        .max_continuous_empty_commits(0)
        .sink(&s);
    let text = env.execute_blocking("zero").unwrap_err().to_string();
    assert!(
        text.contains("max_continuous_empty_commits") && text.contains("got 0"),
        "{text}"
    );
}
