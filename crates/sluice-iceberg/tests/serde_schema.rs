//! A table created from a serde record type (`create_if_missing_for`): the derived schema takes
//! the type's records (nested structs, lists, maps, optional fields, unit enums) and a scan reads
//! them back; a type with a field that has no Iceberg type fails the submission naming the field.

#![cfg(feature = "serde-schema")]

mod common;

use arrow_array::{
    Array, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray, MapArray, StringArray,
    StructArray,
};
use common::*;
use iceberg::spec::{PrimitiveType, Type};
use serde::{Deserialize, Serialize};
use sluice_iceberg::{IcebergCatalog, IcebergSink, PartitionField};
use sluice_runtime::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Serialize, Deserialize)]
enum Kind {
    View,
    Buy,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Device {
    os: String,
    version: Option<i32>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Visit {
    id: i64,
    user: String,
    kind: Kind,
    premium: bool,
    amount: Option<f64>,
    clicks: u16,
    device: Device,
    tags: Vec<String>,
    counters: BTreeMap<String, i64>,
}

fn visit(i: i64) -> Visit {
    Visit {
        id: i,
        user: format!("u{}", i % 5),
        kind: if i % 3 == 0 { Kind::Buy } else { Kind::View },
        premium: i % 2 == 0,
        amount: (i % 4 != 0).then_some(i as f64 / 2.0),
        clicks: (i % 100) as u16,
        device: Device {
            os: ["linux", "ios"][i as usize % 2].to_string(),
            version: (i % 5 != 0).then_some(i as i32),
        },
        tags: (0..i % 3).map(|t| format!("t{t}")).collect(),
        counters: BTreeMap::from([("a".to_string(), i), ("b".to_string(), -i)]),
    }
}

/// Every row as text, sorted by id.
fn read_visits(catalog: &IcebergCatalog, table: &str) -> (iceberg::spec::SchemaRef, Vec<String>) {
    let (schema, batches) = scan(catalog, table, None);
    let mut rows = Vec::new();
    for b in batches {
        let col = |name: &str| b.column_by_name(name).unwrap().clone();
        let id = col("id");
        let id = id.as_any().downcast_ref::<Int64Array>().unwrap();
        let user = col("user");
        let user = user.as_any().downcast_ref::<StringArray>().unwrap();
        let kind = col("kind");
        let kind = kind.as_any().downcast_ref::<StringArray>().unwrap();
        let premium = col("premium");
        let premium = premium.as_any().downcast_ref::<BooleanArray>().unwrap();
        let amount = col("amount");
        let amount = amount.as_any().downcast_ref::<Float64Array>().unwrap();
        let clicks = col("clicks");
        let clicks = clicks.as_any().downcast_ref::<Int32Array>().unwrap();
        let device = col("device");
        let device = device.as_any().downcast_ref::<StructArray>().unwrap();
        let os = device
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let version = device
            .column(1)
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap();
        let tags = col("tags");
        let tags = tags.as_any().downcast_ref::<ListArray>().unwrap();
        let counters = col("counters");
        let counters = counters.as_any().downcast_ref::<MapArray>().unwrap();
        for i in 0..b.num_rows() {
            let tag_values = tags.value(i);
            let tag_values = tag_values.as_any().downcast_ref::<StringArray>().unwrap();
            let tag_text: Vec<&str> = (0..tag_values.len()).map(|t| tag_values.value(t)).collect();
            let entries = counters.value(i);
            let keys = entries
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            let values = entries
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            let map_text: Vec<String> = (0..keys.len())
                .map(|e| format!("{}={}", keys.value(e), values.value(e)))
                .collect();
            rows.push((
                id.value(i),
                format!(
                    "{} {} {} {} {:?} {} {} {:?} {:?} {:?}",
                    id.value(i),
                    user.value(i),
                    kind.value(i),
                    premium.value(i),
                    (!amount.is_null(i)).then(|| amount.value(i)),
                    clicks.value(i),
                    os.value(i),
                    (!version.is_null(i)).then(|| version.value(i)),
                    tag_text,
                    map_text,
                ),
            ));
        }
    }
    rows.sort();
    (schema, rows.into_iter().map(|(_, r)| r).collect())
}

fn expected_row(v: &Visit) -> String {
    format!(
        "{} {} {:?} {} {:?} {} {} {:?} {:?} {:?}",
        v.id,
        v.user,
        v.kind,
        v.premium,
        v.amount,
        v.clicks,
        v.device.os,
        v.device.version,
        v.tags,
        v.counters
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect::<Vec<_>>(),
    )
}

#[test]
fn a_table_created_from_a_serde_type_reads_back_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let n = 500i64;
    let stream = env.from_iter((0..n).map(visit));
    IcebergSink::builder(catalog.clone(), "db.visits")
        .create_if_missing_for::<Visit>()
        .partition_by(PartitionField::identity("user"))
        .sink(&stream);
    env.execute_blocking("serde schema").unwrap();

    let (schema, rows) = read_visits(&catalog, "db.visits");
    let expected: Vec<String> = (0..n).map(|i| expected_row(&visit(i))).collect();
    assert_eq!(rows.len(), expected.len());
    assert_eq!(rows, expected);
    // The derived schema: required unless optional, Iceberg types for Rust's.
    let id = schema.field_by_name("id").unwrap();
    assert!(id.required);
    assert_eq!(*id.field_type, Type::Primitive(PrimitiveType::Long));
    let amount = schema.field_by_name("amount").unwrap();
    assert!(!amount.required);
    let clicks = schema.field_by_name("clicks").unwrap();
    assert_eq!(*clicks.field_type, Type::Primitive(PrimitiveType::Int));
    assert!(matches!(
        *schema.field_by_name("device").unwrap().field_type,
        Type::Struct(_)
    ));
    assert!(matches!(
        *schema.field_by_name("tags").unwrap().field_type,
        Type::List(_)
    ));
    assert!(matches!(
        *schema.field_by_name("counters").unwrap().field_type,
        Type::Map(_)
    ));
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Counter {
    total: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct WithCounter {
    id: i64,
    counter: Counter,
}

#[test]
fn a_type_without_an_iceberg_schema_fails_the_submission_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let env = StreamEnvironment::new();
    let stream = env.from_iter((0..10).map(|i| WithCounter {
        id: i,
        counter: Counter { total: i as u64 },
    }));
    IcebergSink::builder(catalog, "db.counters")
        .create_if_missing_for::<WithCounter>()
        .sink(&stream);
    let err = env
        .execute_blocking("unsupported type")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("db.counters") && err.contains("counter.total") && err.contains("u64"),
        "{err}"
    );
}

#[test]
fn an_existing_table_must_fit_the_derived_schema() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    // The table of the common tests: `id`, `key`, `ts`.
    let env = StreamEnvironment::new();
    let s = env.from_iter((0..10u64).map(|i| event(i, 2)));
    IcebergSink::builder(catalog.clone(), "db.t")
        .create_if_missing(schema())
        .sink(&s);
    env.execute_blocking("create").unwrap();

    let env = StreamEnvironment::new();
    let stream = env.from_iter((0..10).map(visit));
    IcebergSink::builder(catalog, "db.t")
        .create_if_missing_for::<Visit>()
        .sink(&stream);
    let err = env
        .execute_blocking("incompatible")
        .unwrap_err()
        .to_string();
    assert!(err.contains("db.t") && err.contains("user"), "{err}");
}
