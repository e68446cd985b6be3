//! Runs every golden case of `../shared/golden` on the CPU backend and
//! compares with its `"expected"` document (CONFORMANCE.md's rule).

use std::path::Path;

use sampler_host::case::run_case_str;
use sampler_host::compare::compare_results;
use sampler_host::BackendKind;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/golden");

#[test]
fn golden_cases_on_cpu() {
    let dir = Path::new(GOLDEN);
    if !dir.is_dir() {
        eprintln!("\n{0}\n!!! SKIPPED: golden cases not found at {GOLDEN}\n!!! (clone the shared/ directory beside the repository to run them)\n{0}\n", "!".repeat(78));
        return;
    }
    let files = sampler_host::case::golden_files(dir);
    let mut run = 0usize;
    let mut failures = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{name}: {e}"));
        let case: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{name}: not JSON: {e}"));
                continue;
            }
        };
        let Some(expected) = case.get("expected") else {
            failures.push(format!("{name}: no \"expected\""));
            continue;
        };
        run += 1;
        match run_case_str(&text, BackendKind::Cpu) {
            Err(e) => failures.push(format!("{name}: case error: {e}")),
            Ok(actual) => {
                let diffs = compare_results(expected, &actual);
                if !diffs.is_empty() {
                    let n = diffs.len();
                    let shown: Vec<_> = diffs.into_iter().take(12).collect();
                    failures.push(format!("{name}: {n} difference(s):\n    {}", shown.join("\n    ")));
                }
            }
        }
    }
    eprintln!("golden: {} files, {} run, {} failing", files.len(), run, failures.len());
    assert!(failures.is_empty(), "{} of {} golden cases fail:\n{}", failures.len(), files.len(), failures.join("\n"));
    assert_eq!(run, files.len(), "every golden file must be run");
    assert!(run >= 50, "expected at least 50 golden cases, found {run}");
}
