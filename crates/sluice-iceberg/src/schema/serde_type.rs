//! A table schema derived from a serde record type: [`arrow_schema_for`] traces the type through
//! its `Deserialize` impl (serde_arrow's `from_type`, no sample values needed) and maps what it
//! finds onto the Arrow types that Iceberg's types come from. The mapping itself
//! ([`iceberg_arrow_field`]) is a pure function over the traced Arrow fields.
//!
//! | Rust (serde) | Iceberg |
//! | --- | --- |
//! | `bool` | `boolean` |
//! | `i8`, `i16`, `i32`, `u8`, `u16` | `int` |
//! | `i64`, `u32` | `long` |
//! | `f32` / `f64` | `float` / `double` |
//! | `String`, enums without data | `string` |
//! | `Option<T>` | `T`, optional (every other field is required) |
//! | a struct | `struct` |
//! | `Vec<T>`, arrays, sets | `list<T>` |
//! | `HashMap<K, V>`, `BTreeMap<K, V>` | `map<K, V>` |
//!
//! Anything else (`u64`, `u128`, `i128`, enums carrying data, `()`, ...) has no Iceberg type
//! that the records' serde form fits; the error names the field's path. A `char` field is traced
//! as a `u32` and becomes a `long`, which its serde form (a string) does not fit: use `String`. Timestamps, dates and
//! decimals are not visible in a serde type (a timestamp serializes as a number or a string):
//! give an Arrow schema for those (`create_if_missing`).

use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use serde::Deserialize;
use serde_arrow::schema::{SchemaLike, TracingOptions};
use std::sync::Arc;

/// The Arrow schema (of Iceberg-compatible types) of records of type `T`, traced from `T`'s
/// `Deserialize` impl. The error names the field that has no Iceberg type, or says why serde
/// could not trace the type.
///
/// ```
/// use arrow_schema::DataType;
///
/// #[derive(serde::Deserialize)]
/// struct Click { user: String, n: i64, score: Option<f64> }
///
/// let schema = sluice_iceberg::schema::arrow_schema_for::<Click>().unwrap();
/// assert_eq!(schema.field(0).data_type(), &DataType::Utf8);
/// assert!(!schema.field(1).is_nullable());
/// assert!(schema.field(2).is_nullable());
/// ```
pub fn arrow_schema_for<'de, T: Deserialize<'de>>() -> Result<SchemaRef, String> {
    let options = TracingOptions::default()
        .map_as_struct(false)
        .sequence_as_large_list(false)
        .strings_as_large_utf8(false)
        .bytes_as_large_binary(false)
        .enums_without_data_as_strings(true);
    let traced = Vec::<FieldRef>::from_type::<T>(options).map_err(|e| {
        format!(
            "cannot derive a schema from type `{}`: {e}",
            std::any::type_name::<T>()
        )
    })?;
    let fields = traced
        .iter()
        .map(|f| iceberg_arrow_field(f, ""))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

/// Maps one traced field (at `parent`, a dotted path, empty at the top) onto an Arrow field of
/// a type Iceberg has, keeping its name and nullability; errors name the field's path.
pub fn iceberg_arrow_field(field: &Field, parent: &str) -> Result<Field, String> {
    let path = if parent.is_empty() {
        field.name().clone()
    } else {
        format!("{parent}.{}", field.name())
    };
    let unsupported = |what: &str| Err(format!("field `{path}`: {what} has no Iceberg type"));
    let data_type = match field.data_type() {
        DataType::Boolean => DataType::Boolean,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            DataType::Int32
        }
        DataType::Int64 | DataType::UInt32 => DataType::Int64,
        DataType::UInt64 => {
            return unsupported("u64 (Iceberg's long is signed: use i64)");
        }
        DataType::Float32 => DataType::Float32,
        DataType::Float64 => DataType::Float64,
        DataType::Utf8 | DataType::LargeUtf8 => DataType::Utf8,
        DataType::Dictionary(_, value)
            if matches!(value.as_ref(), DataType::Utf8 | DataType::LargeUtf8) =>
        {
            DataType::Utf8
        }
        DataType::Struct(children) => DataType::Struct(
            children
                .iter()
                .map(|c| iceberg_arrow_field(c, &path).map(Arc::new))
                .collect::<Result<Vec<_>, _>>()?
                .into(),
        ),
        DataType::List(element) | DataType::LargeList(element) => {
            DataType::List(Arc::new(iceberg_arrow_field(element, &path)?))
        }
        DataType::Map(entries, sorted) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return unsupported("a map without key and value");
            };
            let kv = kv
                .iter()
                .map(|c| iceberg_arrow_field(c, &path).map(Arc::new))
                .collect::<Result<Vec<_>, _>>()?;
            DataType::Map(
                Arc::new(Field::new(
                    entries.name(),
                    DataType::Struct(kv.into()),
                    false,
                )),
                *sorted,
            )
        }
        DataType::Null => return unsupported("a unit (`()`) or always-null value"),
        DataType::Union(..) => return unsupported("an enum with data"),
        other => return unsupported(&format!("Arrow type {other}")),
    };
    Ok(Field::new(field.name(), data_type, field.is_nullable()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::{BTreeMap, HashMap};

    #[allow(dead_code)]
    #[derive(Deserialize)]
    enum Colour {
        Red,
        Green,
    }

    #[allow(dead_code)]
    #[derive(Deserialize)]
    struct Address {
        city: String,
        zip: Option<u16>,
    }

    #[allow(dead_code)]
    #[derive(Deserialize)]
    struct Everything {
        flag: bool,
        small: i8,
        medium: i16,
        int: i32,
        byte: u8,
        word: u16,
        long: i64,
        unsigned: u32,
        real: f32,
        double: f64,
        name: String,
        colour: Colour,
        maybe: Option<i64>,
        address: Address,
        tags: Vec<String>,
        counts: HashMap<String, i64>,
        sorted: BTreeMap<String, Option<f64>>,
        nested: Vec<Option<Address>>,
    }

    fn field<'a>(schema: &'a Schema, name: &str) -> &'a Field {
        schema.field_with_name(name).unwrap()
    }

    #[test]
    fn every_supported_rust_type_maps_to_its_iceberg_type() {
        let schema = arrow_schema_for::<Everything>().unwrap();
        let expect = [
            ("flag", DataType::Boolean),
            ("small", DataType::Int32),
            ("medium", DataType::Int32),
            ("int", DataType::Int32),
            ("byte", DataType::Int32),
            ("word", DataType::Int32),
            ("long", DataType::Int64),
            ("unsigned", DataType::Int64),
            ("real", DataType::Float32),
            ("double", DataType::Float64),
            ("name", DataType::Utf8),
            ("colour", DataType::Utf8),
            ("maybe", DataType::Int64),
        ];
        for (name, ty) in expect {
            assert_eq!(field(&schema, name).data_type(), &ty, "{name}");
        }
        assert!(field(&schema, "maybe").is_nullable());
        assert!(!field(&schema, "long").is_nullable());
        let DataType::Struct(address) = field(&schema, "address").data_type() else {
            panic!("address is not a struct");
        };
        assert_eq!(address[1].data_type(), &DataType::Int32);
        assert!(address[1].is_nullable());
        assert!(
            matches!(field(&schema, "tags").data_type(), DataType::List(e) if e.data_type() == &DataType::Utf8)
        );
        assert!(matches!(
            field(&schema, "counts").data_type(),
            DataType::Map(..)
        ));
        assert!(
            matches!(field(&schema, "nested").data_type(), DataType::List(e) if e.is_nullable())
        );
        // Iceberg takes the whole schema.
        crate::schema::iceberg_schema_from_arrow(&schema).unwrap();
    }

    #[allow(dead_code)]
    #[derive(Deserialize)]
    struct Inner {
        count: u64,
    }

    #[allow(dead_code)]
    #[derive(Deserialize)]
    struct Outer {
        id: i64,
        inner: Inner,
    }

    #[test]
    fn an_unsupported_type_is_named_by_its_field_path() {
        let err = arrow_schema_for::<Outer>().unwrap_err();
        assert!(err.contains("`inner.count`"), "{err}");
        assert!(err.contains("u64"), "{err}");
    }

    #[allow(dead_code)]
    #[derive(Deserialize)]
    enum Shape {
        Circle(f64),
        Square { side: f64 },
    }

    #[allow(dead_code)]
    #[derive(Deserialize)]
    struct WithShape {
        shape: Shape,
    }

    #[test]
    fn an_enum_with_data_is_refused_naming_the_field() {
        let err = arrow_schema_for::<WithShape>().unwrap_err();
        assert!(err.contains("`shape`") && err.contains("enum"), "{err}");
    }

    #[test]
    fn a_type_that_is_not_a_struct_is_refused_naming_the_type() {
        let err = arrow_schema_for::<i64>().unwrap_err();
        assert!(err.contains("i64"), "{err}");
    }
}
