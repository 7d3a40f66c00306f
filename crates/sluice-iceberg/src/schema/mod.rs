//! Schemas: the record type's Arrow schema → an Iceberg schema for a new table, the check that
//! an existing table can take the records ([`check_compatible`], a pure function run before
//! submit), and [`RecordEncoder`], which turns a batch of serde records into an Arrow record batch
//! carrying the table's field ids. [`key`] extracts partition and sort keys from records for the
//! hash and range distributions.

pub mod key;
#[cfg(feature = "serde-schema")]
pub mod serde_type;

#[cfg(feature = "serde-schema")]
pub use serde_type::arrow_schema_for;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef as ArrowSchemaRef;
use iceberg::spec::{Schema, Type};
use serde::Serialize;

/// Converts the record type's Arrow schema into an Iceberg schema, assigning field ids in order.
pub fn iceberg_schema_from_arrow(arrow: &arrow_schema::Schema) -> Result<Schema, String> {
    iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(arrow).map_err(|e| e.to_string())
}

/// Whether a table with schema `table` can take records of schema `records` (both Iceberg
/// schemas; field ids are ignored, fields are matched by name). Every record field must exist in
/// the table with the same type; a table field the records lack must be optional; a required
/// table field must be required in the records. The error names the first field that does not
/// fit.
pub fn check_compatible(table: &Schema, records: &Schema) -> Result<(), String> {
    for field in records.as_struct().fields() {
        let Some(target) = table.field_by_name(&field.name) else {
            return Err(format!(
                "field `{}` of the records is not in the table",
                field.name
            ));
        };
        if !same_type(&target.field_type, &field.field_type) {
            return Err(format!(
                "field `{}` is {} in the table but {} in the records",
                field.name, target.field_type, field.field_type
            ));
        }
        if target.required && !field.required {
            return Err(format!(
                "field `{}` is required in the table but optional in the records",
                field.name
            ));
        }
    }
    for target in table.as_struct().fields() {
        if target.required && records.field_by_name(&target.name).is_none() {
            return Err(format!(
                "required field `{}` of the table is missing from the records",
                target.name
            ));
        }
    }
    Ok(())
}

/// Types equal up to field ids (nested fields compared by name, type and requiredness).
fn same_type(a: &Type, b: &Type) -> bool {
    match (a, b) {
        (Type::Primitive(x), Type::Primitive(y)) => x == y,
        (Type::Struct(x), Type::Struct(y)) => {
            x.fields().len() == y.fields().len()
                && x.fields().iter().zip(y.fields()).all(|(f, g)| {
                    f.name == g.name
                        && f.required == g.required
                        && same_type(&f.field_type, &g.field_type)
                })
        }
        (Type::List(x), Type::List(y)) => {
            x.element_field.required == y.element_field.required
                && same_type(&x.element_field.field_type, &y.element_field.field_type)
        }
        (Type::Map(x), Type::Map(y)) => {
            same_type(&x.key_field.field_type, &y.key_field.field_type)
                && x.value_field.required == y.value_field.required
                && same_type(&x.value_field.field_type, &y.value_field.field_type)
        }
        _ => false,
    }
}

/// Turns batches of serde records into Arrow record batches of the table's schema (with its
/// field ids, which the Parquet writer needs). Fields are matched by name; a record with a field
/// the table lacks, a value of the wrong type, or a missing value in a required field is an error
/// naming the field.
pub struct RecordEncoder {
    decoder: arrow_json::reader::Decoder,
}

impl RecordEncoder {
    /// An encoder for `schema` (the table's schema as Arrow, from
    /// `iceberg::arrow::schema_to_arrow_schema`).
    pub fn new(schema: ArrowSchemaRef) -> Result<Self, String> {
        let decoder = arrow_json::ReaderBuilder::new(schema)
            .with_strict_mode(true)
            .build_decoder()
            .map_err(|e| e.to_string())?;
        Ok(RecordEncoder { decoder })
    }

    /// Encodes `records` as one record batch (`None` when empty).
    pub fn encode<T: Serialize>(&mut self, records: &[T]) -> Result<Option<RecordBatch>, String> {
        let encoded = self
            .decoder
            .serialize(records)
            .and_then(|()| self.decoder.flush());
        match encoded {
            Ok(batch) => Ok(batch),
            Err(e) => {
                // Leave the decoder empty for the next call.
                let _ = self.decoder.flush();
                Err(e.to_string())
            }
        }
    }
}
