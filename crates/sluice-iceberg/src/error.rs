//! [`IcebergSinkError`]: what can go wrong in the sink, each naming the catalog, table, field or
//! checkpoint involved.

use thiserror::Error;

/// An error of the Iceberg sink.
#[derive(Debug, Error)]
pub enum IcebergSinkError {
    /// The catalog failed (after retries, where the call is retried), with its message.
    #[error("Iceberg catalog `{catalog}`, table `{table}`: {action} failed: {message}")]
    Catalog {
        /// The catalog's name.
        catalog: String,
        /// The table, as `namespace.name`.
        table: String,
        /// What the sink was doing ("load table", "commit checkpoint 7", ...).
        action: String,
        /// The catalog's message.
        message: String,
    },
    /// The table's schema cannot take the sink's records.
    #[error("Iceberg table `{table}`: schema does not fit the records: {reason}")]
    IncompatibleSchema {
        /// The table, as `namespace.name`.
        table: String,
        /// Which field and why.
        reason: String,
    },
    /// A record does not fit the table's schema.
    #[error("Iceberg table `{table}`: a record does not fit the schema: {reason}")]
    BadRecord {
        /// The table, as `namespace.name`.
        table: String,
        /// The decoder's message, which names the field.
        reason: String,
    },
    /// The sink's settings are invalid (partition field, sort field, distribution mode, ...).
    #[error("Iceberg sink for table `{table}`: {reason}")]
    Config {
        /// The table, as `namespace.name`.
        table: String,
        /// What is wrong.
        reason: String,
    },
    /// Writing a data file failed.
    #[error("Iceberg table `{table}`: writing data files failed: {message}")]
    Write {
        /// The table, as `namespace.name`.
        table: String,
        /// iceberg-rust's message.
        message: String,
    },
    /// The sink's I/O runtime failed.
    #[error("Iceberg sink I/O: {0}")]
    Io(String),
}
