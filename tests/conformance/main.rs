//! Conformance: the golden cases, malformed input, the f64 reference (property tests), extremes, request shapes, sections 10-11, statistics and determinism.
//! One test binary; each module is a former `tests/<name>.rs`.

#[path = "../common/mod.rs"]
mod common;

mod chi_square;
mod determinism;
mod extremes;
mod golden;
mod logits_file;
mod malformed;
mod proptest_vs_reference;
mod request_shapes;
mod section10;
mod tree;
