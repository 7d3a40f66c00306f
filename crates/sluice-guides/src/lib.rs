//! The guides under `docs/`, compiled and run as doc tests.
//!
//! This crate has no code of its own. Each guide is included below as the documentation of an
//! item compiled only under `cfg(doctest)`, so `cargo test -p sluice-guides --doc` (and
//! `cargo test --workspace --doc`) builds every Rust block of every guide and runs those not
//! marked `no_run` (they need a server, such as Redis or an S3 endpoint). A guide whose example
//! no longer matches the API fails the build here.
//!
//! The guides' index is `docs/README.md`.

/// The guides, one item per file.
#[cfg(doctest)]
mod guides {
    #[doc = include_str!("../../../README.md")]
    struct ProjectReadme;
    #[doc = include_str!("../../../docs/README.md")]
    struct Index;
    #[doc = include_str!("../../../docs/concepts.md")]
    struct Concepts;
    #[doc = include_str!("../../../docs/async-io.md")]
    struct AsyncIo;
    #[doc = include_str!("../../../docs/coordinators.md")]
    struct Coordinators;
    #[doc = include_str!("../../../docs/sources.md")]
    struct Sources;
    #[doc = include_str!("../../../docs/windows-and-timers.md")]
    struct WindowsAndTimers;
    #[doc = include_str!("../../../docs/two-inputs.md")]
    struct TwoInputs;
    #[doc = include_str!("../../../docs/state-backends.md")]
    struct StateBackends;
    #[doc = include_str!("../../../docs/range-shuffle.md")]
    struct RangeShuffle;
    #[doc = include_str!("../../../docs/iceberg.md")]
    struct Iceberg;
    #[doc = include_str!("../../../docs/kafka.md")]
    struct Kafka;
    #[doc = include_str!("../../../docs/nexmark.md")]
    struct Nexmark;
    #[doc = include_str!("../../../docs/kubernetes.md")]
    struct Kubernetes;
    #[doc = include_str!("../../../docs/flink-names.md")]
    struct FlinkNames;
}
