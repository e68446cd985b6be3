//! Runs every golden case of `../shared/golden` on the CPU backend and
//! compares with its `"expected"` document (CONFORMANCE.md's rule).

use std::path::Path;

use sampler_host::conformance::case::run_case_str;
use sampler_host::conformance::compare::compare_results;
use sampler_host::BackendKind;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/golden");

#[test]
fn golden_cases_on_cpu() {
    let dir = Path::new(GOLDEN);
    if !dir.is_dir() {
        eprintln!("\n{0}\n!!! SKIPPED: golden cases not found at {GOLDEN}\n!!! (clone the shared/ directory beside the repository to run them)\n{0}\n", "!".repeat(78));
        return;
    }
    let files = sampler_host::conformance::case::golden_files(dir);
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

/// SAMPLER.md section 10: the three optional parameters set explicitly to
/// their defaults (`min_p` 0, `filter_order` "top_p_then_top_k",
/// `logprobs_mode` "processed") give every golden case's result document
/// bit for bit (every float as written) as with the fields absent.
#[test]
fn golden_cases_with_explicit_defaults_are_bitwise_unchanged() {
    let dir = Path::new(GOLDEN);
    if !dir.is_dir() {
        eprintln!("SKIPPED: golden cases not found at {GOLDEN}");
        return;
    }
    let defaults = [
        ("min_p", serde_json::json!(0.0)),
        ("filter_order", serde_json::json!("top_p_then_top_k")),
        ("logprobs_mode", serde_json::json!("processed")),
    ];
    let mut changed = 0usize;
    let files = sampler_host::conformance::case::golden_files(dir);
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        let Ok(mut case) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
        let Some(reqs) = case.get_mut("requests").and_then(|r| r.as_array_mut()) else { continue };
        let mut set = 0usize;
        for r in reqs.iter_mut().filter_map(|r| r.as_object_mut()) {
            for (k, v) in &defaults {
                if !r.contains_key(*k) {
                    r.insert((*k).to_string(), v.clone());
                    set += 1;
                }
            }
        }
        if set == 0 {
            continue;
        }
        changed += 1;
        let absent = run_case_str(&text, BackendKind::Cpu);
        let explicit = run_case_str(&case.to_string(), BackendKind::Cpu);
        match (absent, explicit) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}: explicit defaults change the result"),
            (a, b) => assert_eq!(a.is_err(), b.is_err(), "{name}: explicit defaults change whether the case runs"),
        }
    }
    assert!(changed >= 50, "only {changed} golden cases got explicit defaults");
}
