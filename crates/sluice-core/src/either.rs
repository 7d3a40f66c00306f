//! [`Either`]: a record from one of an operator's two inputs.

use serde::{Deserialize, Serialize};

/// A record of a two-input operator, tagged with the input it came from.
///
/// A two-input operator (`DataStream::connect`, joins) is an operator over `Either<A, B>`:
/// records of the first input arrive as [`Either::Left`], those of the second as
/// [`Either::Right`]. Users of `CoProcessFunction` and the joins never see it; it matters to
/// whoever writes a two-input operator by hand.
///
/// ```
/// use sluice_core::Either;
/// let records: Vec<Either<u32, &str>> = vec![Either::Left(1), Either::Right("a")];
/// let lefts: Vec<u32> = records.iter().filter_map(|r| r.left().copied()).collect();
/// assert_eq!(lefts, vec![1]);
/// assert!(records[1].is_right());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Either<A, B> {
    /// A record of the first input.
    Left(A),
    /// A record of the second input.
    Right(B),
}

impl<A, B> Either<A, B> {
    /// Whether the record came from the first input.
    pub fn is_left(&self) -> bool {
        matches!(self, Either::Left(_))
    }

    /// Whether the record came from the second input.
    pub fn is_right(&self) -> bool {
        matches!(self, Either::Right(_))
    }

    /// The first input's record, if it is one.
    pub fn left(&self) -> Option<&A> {
        match self {
            Either::Left(a) => Some(a),
            Either::Right(_) => None,
        }
    }

    /// The second input's record, if it is one.
    pub fn right(&self) -> Option<&B> {
        match self {
            Either::Left(_) => None,
            Either::Right(b) => Some(b),
        }
    }
}
