//! [`OutputTag`] and [`Tagged`]: side outputs beside an operator's main output.

use sluice_core::Data;
use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// Names a side output of type `X` (Flink's `OutputTag`). Two tags with the same id name the same
/// side output.
///
/// ```
/// use sluice_runtime::process::{OutputTag, Tagged};
///
/// let late: OutputTag<u64> = OutputTag::new("late");
/// let t: Tagged<String> = Tagged::side(&late, 7);
/// assert_eq!(t.into_side(&late), Some(7));
/// ```
pub struct OutputTag<X> {
    id: Arc<str>,
    _x: PhantomData<fn() -> X>,
}

impl<X> Clone for OutputTag<X> {
    fn clone(&self) -> Self {
        OutputTag {
            id: self.id.clone(),
            _x: PhantomData,
        }
    }
}

impl<X> fmt::Debug for OutputTag<X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OutputTag({})", self.id)
    }
}

impl<X> OutputTag<X> {
    /// A tag named `id`.
    pub fn new(id: &str) -> Self {
        OutputTag {
            id: Arc::from(id),
            _x: PhantomData,
        }
    }

    /// The tag's name.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// A side output's value with its type erased (it travels inside [`Tagged`]).
trait SideValue: Send + fmt::Debug {
    fn clone_box(&self) -> Box<dyn SideValue>;
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl<T: Data> SideValue for T {
    fn clone_box(&self) -> Box<dyn SideValue> {
        Box::new(self.clone())
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// One record of a side output: its tag and its value.
#[derive(Debug)]
pub struct SideRecord {
    tag: Arc<str>,
    value: Box<dyn SideValue>,
}

impl Clone for SideRecord {
    fn clone(&self) -> Self {
        SideRecord {
            tag: self.tag.clone(),
            value: self.value.clone_box(),
        }
    }
}

/// What an operator with side outputs emits: a main-output record or a side-output record.
/// The stream API splits them (`ProcessedStream` is the main output, `get_side_output` a side
/// one), so users rarely see this type.
#[derive(Clone, Debug)]
pub enum Tagged<T> {
    /// A record of the main output.
    Main(T),
    /// A record of a side output.
    Side(SideRecord),
}

/// A main-output record crosses a process boundary as itself. A side-output record never needs
/// to: the stage that splits the outputs is chained to the operator that tagged them, so an
/// attempt to encode one (chaining disabled by a future setting) fails with a message naming
/// its tag rather than losing it.
impl<T: serde::Serialize> serde::Serialize for Tagged<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Tagged::Main(t) => t.serialize(serializer),
            Tagged::Side(side) => Err(serde::ser::Error::custom(format!(
                "a record of side output '{}' cannot leave the task of the operator that \
                 emitted it",
                side.tag
            ))),
        }
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Tagged<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Tagged::Main)
    }
}

impl<T> Tagged<T> {
    /// A side-output record for `tag`.
    pub fn side<X: Data>(tag: &OutputTag<X>, value: X) -> Self {
        Tagged::Side(SideRecord {
            tag: tag.id.clone(),
            value: Box::new(value),
        })
    }

    /// The main-output record, if this is one.
    #[inline]
    pub fn into_main(self) -> Option<T> {
        match self {
            Tagged::Main(t) => Some(t),
            Tagged::Side(_) => None,
        }
    }

    /// The record of side output `tag`, if this is one.
    pub fn into_side<X: Data>(self, tag: &OutputTag<X>) -> Option<X> {
        match self {
            Tagged::Side(s) if s.tag == tag.id => {
                s.value.into_any().downcast::<X>().ok().map(|b| *b)
            }
            _ => None,
        }
    }
}

/// The methods every function context with a record's `timestamp`, the operator's
/// `watermark`, a processing `clock` and a tagged output `out` offers: the event time, the
/// watermark, processing time, the main output and side outputs. Used inside an
/// `impl<Out: Data> ...Context<'_, .., Out>` block.
macro_rules! output_methods {
    () => {
        /// The event time of the record being processed, if it has one.
        pub fn timestamp(&self) -> Option<i64> {
            self.timestamp
        }

        /// The operator's current watermark (`i64::MIN` before the first).
        pub fn current_watermark(&self) -> i64 {
            self.watermark
        }

        /// Processing time now, in epoch milliseconds.
        pub fn current_processing_time(&self) -> i64 {
            self.clock.now_ms()
        }

        /// Emits `value` on the main output with the record's event time.
        pub fn collect(&mut self, value: Out) {
            self.out
                .collect_timed($crate::process::Tagged::Main(value), self.timestamp);
        }

        /// Emits `value` on the main output with event time `timestamp`.
        pub fn collect_at(&mut self, value: Out, timestamp: i64) {
            self.out
                .collect_at($crate::process::Tagged::Main(value), timestamp);
        }

        /// Emits `value` on side output `tag` with the record's event time.
        pub fn output<X: sluice_core::Data>(
            &mut self,
            tag: &$crate::process::OutputTag<X>,
            value: X,
        ) {
            self.out
                .collect_timed($crate::process::Tagged::side(tag, value), self.timestamp);
        }
    };
}

pub(crate) use output_methods;
