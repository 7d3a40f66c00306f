//! Partition and sort keys of records, for the hash and range distributions: [`PartitionField`]
//! (identity, day and hour transforms, as in the table's partition spec), [`RecordKey`] (an
//! ordered, hashable key the shuffle can route by) and [`KeyExtractor`], which computes it
//! from a serde record by applying the transforms the table applies.

use iceberg::spec::{PrimitiveType, Schema, Transform, Type};
use serde::{Deserialize, Serialize};

/// One field of the sink's partition spec: a source column and a transform.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PartitionField {
    /// The column's value (Iceberg `identity`).
    Identity(String),
    /// Days since the epoch of a timestamp or date column (Iceberg `day`).
    Day(String),
    /// Hours since the epoch of a timestamp column (Iceberg `hour`).
    Hour(String),
}

impl PartitionField {
    /// `identity(column)`.
    pub fn identity(column: &str) -> Self {
        PartitionField::Identity(column.to_string())
    }
    /// `day(column)`.
    pub fn day(column: &str) -> Self {
        PartitionField::Day(column.to_string())
    }
    /// `hour(column)`.
    pub fn hour(column: &str) -> Self {
        PartitionField::Hour(column.to_string())
    }
    /// The source column.
    pub fn source(&self) -> &str {
        match self {
            PartitionField::Identity(c) | PartitionField::Day(c) | PartitionField::Hour(c) => c,
        }
    }
    /// The Iceberg transform.
    pub fn transform(&self) -> Transform {
        match self {
            PartitionField::Identity(_) => Transform::Identity,
            PartitionField::Day(_) => Transform::Day,
            PartitionField::Hour(_) => Transform::Hour,
        }
    }
    /// The partition field's name in the spec (`col`, `col_day`, `col_hour`, as Iceberg names
    /// them).
    pub fn name(&self) -> String {
        match self {
            PartitionField::Identity(c) => c.clone(),
            PartitionField::Day(c) => format!("{c}_day"),
            PartitionField::Hour(c) => format!("{c}_hour"),
        }
    }
}

/// One value of a key. Floats are kept as totally ordered integers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum KeyValue {
    /// No value.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer (also a transformed timestamp: days or hours since the epoch).
    Int(i64),
    /// A float, as an integer with the same order.
    Float(i64),
    /// A string.
    Str(String),
}

/// A record's key: its partition values, then its sort values, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RecordKey(pub Vec<KeyValue>);

/// What is applied to a column's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Apply {
    Identity,
    /// Integer division (floor) by this many units.
    Divide(i64),
}

/// Computes [`RecordKey`]s from serde records.
#[derive(Clone, Debug)]
pub struct KeyExtractor {
    columns: Vec<(String, Apply)>,
}

const MICROS_PER_HOUR: i64 = 3_600_000_000;
const MICROS_PER_DAY: i64 = 24 * MICROS_PER_HOUR;

impl KeyExtractor {
    /// The key of `partition` (transformed as the table transforms it) followed by `sort`
    /// columns (their values), checked against `schema`: an unknown column or a transform the
    /// column's type cannot take is an error naming the column.
    pub fn new(
        schema: &Schema,
        partition: &[PartitionField],
        sort: &[String],
    ) -> Result<Self, String> {
        let mut columns = Vec::new();
        for p in partition {
            let ty = column_type(schema, p.source())?;
            let apply = match (p, &ty) {
                (PartitionField::Identity(_), _) => Apply::Identity,
                (PartitionField::Day(_), PrimitiveType::Date) => Apply::Identity,
                (PartitionField::Day(_), PrimitiveType::Timestamp | PrimitiveType::Timestamptz) => {
                    Apply::Divide(MICROS_PER_DAY)
                }
                (
                    PartitionField::Day(_),
                    PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs,
                ) => Apply::Divide(MICROS_PER_DAY * 1000),
                (
                    PartitionField::Hour(_),
                    PrimitiveType::Timestamp | PrimitiveType::Timestamptz,
                ) => Apply::Divide(MICROS_PER_HOUR),
                (
                    PartitionField::Hour(_),
                    PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs,
                ) => Apply::Divide(MICROS_PER_HOUR * 1000),
                (other, ty) => {
                    return Err(format!(
                        "partition field `{}`: the {:?} transform does not apply to column `{}` of type {ty}",
                        other.name(),
                        other.transform(),
                        other.source()
                    ));
                }
            };
            columns.push((p.source().to_string(), apply));
        }
        for s in sort {
            column_type(schema, s)?;
            columns.push((s.clone(), Apply::Identity));
        }
        Ok(KeyExtractor { columns })
    }

    /// Whether the key has no column (an unpartitioned table without sort order).
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// The key of `record`. A record that cannot be read as an object gets the empty key (the
    /// writer then reports it, naming the field, when it encodes it).
    pub fn key_of<T: Serialize>(&self, record: &T) -> RecordKey {
        let Ok(serde_json::Value::Object(map)) = serde_json::to_value(record) else {
            return RecordKey::default();
        };
        RecordKey(
            self.columns
                .iter()
                .map(|(name, apply)| key_value(map.get(name), *apply))
                .collect(),
        )
    }
}

fn column_type(schema: &Schema, column: &str) -> Result<PrimitiveType, String> {
    match schema.field_by_name(column) {
        None => Err(format!("column `{column}` is not in the table schema")),
        Some(f) => match &*f.field_type {
            Type::Primitive(p) => Ok(p.clone()),
            other => Err(format!(
                "column `{column}` has type {other}; only primitive columns can be partition or sort keys"
            )),
        },
    }
}

fn key_value(value: Option<&serde_json::Value>, apply: Apply) -> KeyValue {
    use serde_json::Value;
    match value {
        None | Some(Value::Null) => KeyValue::Null,
        Some(Value::Bool(b)) => KeyValue::Bool(*b),
        Some(Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                match apply {
                    Apply::Identity => KeyValue::Int(i),
                    Apply::Divide(d) => KeyValue::Int(i.div_euclid(d)),
                }
            } else if let Some(u) = n.as_u64() {
                KeyValue::Int(i64::try_from(u).unwrap_or(i64::MAX))
            } else {
                KeyValue::Float(ordered_bits(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        Some(Value::String(s)) => KeyValue::Str(s.clone()),
        Some(other) => KeyValue::Str(other.to_string()),
    }
}

/// Maps a float to an integer with the same total order.
fn ordered_bits(f: f64) -> i64 {
    let bits = f.to_bits() as i64;
    if bits < 0 { bits ^ i64::MAX } else { bits }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{NestedField, Schema};
    use std::sync::Arc;

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    1,
                    "ts",
                    Type::Primitive(PrimitiveType::Timestamp),
                )),
                Arc::new(NestedField::required(
                    2,
                    "region",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::optional(
                    3,
                    "v",
                    Type::Primitive(PrimitiveType::Double),
                )),
            ])
            .build()
            .unwrap()
    }

    #[derive(Serialize)]
    struct Row {
        ts: i64,
        region: &'static str,
        v: Option<f64>,
    }

    #[test]
    fn day_and_hour_floor_like_the_table_transforms() {
        let e = KeyExtractor::new(
            &schema(),
            &[
                PartitionField::day("ts"),
                PartitionField::hour("ts"),
                PartitionField::identity("region"),
            ],
            &["v".to_string()],
        )
        .unwrap();
        let k = e.key_of(&Row {
            ts: -1,
            region: "eu",
            v: None,
        });
        assert_eq!(
            k.0,
            vec![
                KeyValue::Int(-1),
                KeyValue::Int(-1),
                KeyValue::Str("eu".into()),
                KeyValue::Null
            ]
        );
        let k = e.key_of(&Row {
            ts: MICROS_PER_DAY + 2 * MICROS_PER_HOUR,
            region: "us",
            v: Some(1.5),
        });
        assert_eq!(k.0[0], KeyValue::Int(1));
        assert_eq!(k.0[1], KeyValue::Int(26));
    }

    #[test]
    fn bad_columns_are_named() {
        let err = KeyExtractor::new(&schema(), &[PartitionField::day("region")], &[]).unwrap_err();
        assert!(err.contains("`region`"), "{err}");
        let err =
            KeyExtractor::new(&schema(), &[PartitionField::identity("nope")], &[]).unwrap_err();
        assert!(err.contains("`nope`"), "{err}");
    }

    #[test]
    fn float_order_is_kept() {
        let xs = [-3.5, -0.0, 0.0, 1e-9, 2.0, 1e300];
        let keys: Vec<_> = xs.iter().map(|x| ordered_bits(*x)).collect();
        assert!(keys.windows(2).all(|w| w[0] <= w[1]), "{keys:?}");
    }
}
