//! Runs every golden case of the in-tree copy `conformance/golden` on the
//! CPU backend and compares with its `"expected"` document (CONFORMANCE.md's
//! rule); checks that copy against `../shared/golden` where both exist.

use std::path::{Path, PathBuf};

use sampler_host::conformance::case::run_case_str;
use sampler_host::conformance::compare::compare_results;
use sampler_host::BackendKind;

const GOLDEN: &str = sampler_host::conformance::case::GOLDEN_DIR;

/// The golden files of the in-tree copy; panics (the test fails) when there
/// are none, so a tree without its cases cannot pass.
fn golden_files() -> Vec<PathBuf> {
    let files = sampler_host::conformance::case::golden_files(Path::new(GOLDEN));
    assert!(files.len() >= 50, "expected the golden cases in {GOLDEN} (scripts/sync-golden.sh), found {}", files.len());
    files
}

#[test]
fn golden_cases_on_cpu() {
    let files = golden_files();
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
    let defaults = [
        ("min_p", serde_json::json!(0.0)),
        ("filter_order", serde_json::json!("top_p_then_top_k")),
        ("logprobs_mode", serde_json::json!("processed")),
    ];
    let mut changed = 0usize;
    let files = golden_files();
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

/// The in-tree copy (`conformance/golden`, `next/` included) equals the
/// shared cases (`../shared/golden` beside the repository, or
/// `SAMPLER_SHARED_GOLDEN`) byte for byte for every file present in both;
/// `scripts/sync-golden.sh` refreshes it. Skipped, with a message, only when
/// the shared directory is absent (a clone on its own).
#[test]
fn golden_copy_matches_shared() {
    let shared = std::env::var_os("SAMPLER_SHARED_GOLDEN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/golden"));
    if !shared.is_dir() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\n!!! SKIPPED golden_copy_matches_shared: no shared golden cases at {} (set SAMPLER_SHARED_GOLDEN)",
            shared.display()
        );
        return;
    }
    let json_in = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| n.ends_with(".json")).collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let (mut both, mut differ, mut only_shared, mut only_here) = (0usize, Vec::new(), Vec::new(), Vec::new());
    for sub in ["", "next"] {
        let (a, b) = (shared.join(sub), Path::new(GOLDEN).join(sub));
        let (sa, sb) = (json_in(&a), json_in(&b));
        for n in &sa {
            if !sb.contains(n) {
                only_shared.push(Path::new(sub).join(n).display().to_string());
                continue;
            }
            both += 1;
            if std::fs::read(a.join(n)).unwrap() != std::fs::read(b.join(n)).unwrap() {
                differ.push(Path::new(sub).join(n).display().to_string());
            }
        }
        only_here.extend(sb.iter().filter(|n| !sa.contains(n)).map(|n| Path::new(sub).join(n).display().to_string()));
    }
    eprintln!(
        "golden copy: {both} files in both trees; only in {}: {only_shared:?}; only in the copy: {only_here:?}",
        shared.display()
    );
    assert!(both >= 50, "only {both} files in both {} and {GOLDEN}", shared.display());
    assert!(differ.is_empty(), "{GOLDEN} differs from {} (run scripts/sync-golden.sh): {differ:?}", shared.display());
}
