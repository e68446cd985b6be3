//! The committed PTX (`sampler-host/ptx/sampler_kernels.ptx`) is what the
//! kernels' DSL source builds to for nvptx64 today.
//!
//! - `committed_ptx_is_well_formed` (always): every registered entry point is
//!   there with its `.maxntid`, and no `.extern .func` (a panic or libm path).
//! - `committed_ptx_is_fresh`: rebuilds the PTX with nightly (examples/regenerate.rs)
//!   and compares byte for byte. Skips, loudly, only when nightly with rust-src
//!   is not available (or the committed file was built by another nightly,
//!   whose LLVM output cannot be compared byte for byte).

use crate::regenerate;

use regenerate::{ptx, Fail, Outcome};

/// Says so on the real stderr (the test harness captures `eprintln!` of passing tests).
fn skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "\n{0}\n!!! SKIPPED: {msg}\n{0}", "!".repeat(78));
}

#[test]
fn committed_ptx_is_well_formed() {
    let path = ptx::committed_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if let Err(e) = ptx::check_ptx(&text) {
        panic!("committed PTX {} fails its checks:\n{e}", path.display());
    }
    assert!(text.contains(".target sm_90"), "PTX must target sm_90");
    assert_eq!(text, sampler_host::runtime::device::cuda::PTX, "the CUDA backend must embed the committed PTX");
}

#[test]
fn committed_ptx_is_fresh() {
    match ptx::run(true) {
        Ok(Outcome::Unchanged) => {}
        Ok(Outcome::Written(s)) => panic!("--check must not write: {s}"),
        Ok(Outcome::Stale(s)) => panic!("{s}\nrun `cargo run --example regenerate` and commit sampler-host/ptx/"),
        Err(Fail::Toolchain(m)) => skip(&format!("PTX freshness not checked: {m}")),
        Err(Fail::Other(m)) => panic!("regenerating the PTX failed: {m}"),
    }
}
