//! The built-in split sources: number sequences and generated data (`sequence.rs`,
//! `generator.rs`, sharing one enumerator and reader) and the files of a directory (`file/`).

pub(crate) mod file;
pub(crate) mod generator;
pub(crate) mod sequence;
