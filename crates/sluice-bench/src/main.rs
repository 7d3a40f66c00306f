//! Benchmarks of sluice against baselines run side by side (see BENCHMARKS.md).
fn main() {}
