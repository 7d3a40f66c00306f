//! The [`Data`] bound: what a record type must be to travel through a job.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// A type that can flow through a sluice job as a record.
///
/// Records are moved between tasks in batches, cloned where a stream fans out (broadcast, or one
/// stream feeding several operators), and printed with `Debug` in error messages so that a failure
/// names the record that caused it. The trait is implemented for every type that meets the bounds.
///
/// ```
/// fn assert_data<T: sluice_core::Data>() {}
/// assert_data::<(String, u64)>();
/// ```
pub trait Data: Clone + Send + Debug + Serialize + DeserializeOwned + 'static {}

impl<T: Clone + Send + Debug + Serialize + DeserializeOwned + 'static> Data for T {}
