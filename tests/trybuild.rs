//! UI tests of the `#[kernel]` front end: every error the DSL reports, on
//! its span (`tests/ui/*.rs` + `.stderr`), and kernels that must compile
//! (`tests/ui/pass_*.rs`).
//!
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test --test trybuild`,
//! then read every changed `.stderr`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    let mut files: Vec<_> = std::fs::read_dir("tests/ui")
        .expect("tests/ui")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for p in &files {
        let name = p.file_name().unwrap().to_str().unwrap();
        if name.starts_with("pass_") {
            t.pass(p);
        } else {
            t.compile_fail(p);
        }
    }
}
