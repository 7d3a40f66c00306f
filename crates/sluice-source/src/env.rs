//! [`FromSource`]: `env.from_source(source, watermarks, name)`, the extension of the
//! runtime's `StreamEnvironment` that adds a split source (Flink's `fromSource`).

use crate::api::Source;
use crate::coordinator::source_coordinator_provider;
use crate::reader::SourceOperator;
use sluice_runtime::{DataStream, SourceHead, StreamEnvironment, WatermarkStrategy};
use std::sync::Arc;

/// Adds split sources to a [`StreamEnvironment`].
pub trait FromSource {
    /// A stream read from `source` under `name`: its enumerator runs on a coordinator, its
    /// readers in the subtasks. With a `watermarks` strategy, watermarks are generated per split
    /// and combined per subtask (an idle split does not hold them back); `None` emits none
    /// (Flink's `WatermarkStrategy.noWatermarks()`). The source's
    /// [`validate`](Source::validate) runs at submit time.
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_source::{FromSource, NumberSequenceSource};
    ///
    /// let env = StreamEnvironment::new();
    /// env.set_parallelism(2);
    /// let out = env.from_source(NumberSequenceSource::new(1, 100), None, "numbers").collect();
    /// env.execute_blocking("sum").unwrap();
    /// assert_eq!(out.take().iter().sum::<u64>(), 5050);
    /// ```
    // Flink's name (`fromSource`), like the runtime's `from_iter`: it builds from the
    // environment, it does not convert it.
    #[allow(clippy::wrong_self_convention)]
    fn from_source<Src: Source>(
        &self,
        source: Src,
        watermarks: Option<WatermarkStrategy<Src::Out>>,
        name: &str,
    ) -> DataStream<Src::Out>;
}

impl FromSource for StreamEnvironment {
    fn from_source<Src: Source>(
        &self,
        source: Src,
        watermarks: Option<WatermarkStrategy<Src::Out>>,
        name: &str,
    ) -> DataStream<Src::Out> {
        let source = Arc::new(source);
        let (readers, validated) = (source.clone(), source.clone());
        self.add_source_head(
            name,
            move |ctx, restored| {
                let op = SourceOperator::create(&*readers, ctx, restored, watermarks.clone())?;
                let head: Box<dyn SourceHead<Src::Out>> = Box::new(op);
                Ok(head)
            },
            move || validated.validate(),
            source_coordinator_provider(source),
        )
    }
}
