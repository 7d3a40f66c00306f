//! [`ProcessedStream`]: the output of an operator with side outputs (a keyed process function
//! or a window): its main output as a stream, and its side outputs on demand.

use crate::api::stream::DataStream;
use crate::process::{OutputTag, Tagged};
use sluice_core::Data;
use std::ops::Deref;

/// The main output of an operator that may also emit side outputs (Flink's
/// `SingleOutputStreamOperator`). It dereferences to the main output's [`DataStream`];
/// [`get_side_output`](Self::get_side_output) gives a side output as its own stream.
///
/// Inside, the operator emits [`Tagged`] records, and a chained stage after it keeps the main
/// ones; a side output adds another consumer of the operator, which then ends its chain in a
/// fan-out (every batch is cloned for the side output's reader), so side outputs cost only
/// when read.
pub struct ProcessedStream<T> {
    raw: DataStream<Tagged<T>>,
    main: DataStream<T>,
}

impl<T: Data> ProcessedStream<T> {
    pub(crate) fn new(raw: DataStream<Tagged<T>>, name: &str) -> Self {
        let main = raw
            .flat_map(Tagged::into_main)
            .name(&format!("{name} (main output)"));
        ProcessedStream { raw, main }
    }

    /// The main output.
    pub fn main(&self) -> DataStream<T> {
        self.main.clone()
    }

    /// The records emitted to side output `tag`, with their event times.
    pub fn get_side_output<X: Data>(&self, tag: &OutputTag<X>) -> DataStream<X> {
        let tag = tag.clone();
        let name = format!("side output {}", tag.id());
        self.raw
            .flat_map(move |t: Tagged<T>| t.into_side(&tag))
            .name(&name)
    }

    /// Names the operator.
    pub fn name(self, name: &str) -> Self {
        let main = self.main.name(&format!("{name} (main output)"));
        ProcessedStream {
            raw: self.raw.name(name),
            main,
        }
    }

    /// Sets the operator's parallelism.
    pub fn parallelism(self, parallelism: usize) -> Self {
        ProcessedStream {
            raw: self.raw.parallelism(parallelism),
            main: self.main.parallelism(parallelism),
        }
    }
}

impl<T> Deref for ProcessedStream<T> {
    type Target = DataStream<T>;
    fn deref(&self) -> &DataStream<T> {
        &self.main
    }
}
