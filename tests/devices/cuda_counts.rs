//! The CUDA backend's two ways to take each row's bad / finite counts
//! (issue 12, 22): from the top-N kernels' own read of the logits
//! (`Caps::counts_in_topn`, the default since issue 22, no mask check launch
//! on steps without masks or raw rows) and from the mask check
//! (`SAMPLER_COUNTS_IN_TOPN=0`, `set_counts_in_topn(false)`): every golden
//! case bitwise equal to the CPU backend, through the public API and at the
//! backend level on both, on both paths and at several chunk counts
//! (`force_topn_counted` at one chunk, `topn_chunk_counted` + `topn_merge`
//! above). A test binary of its own: the variable is read when a backend is
//! created, so it is left unset here and no other test shares the process.
//!
//! Without a CUDA driver (CI) it skips, saying so.

use std::path::Path;

use sampler_host::conformance::case::{golden_files, parse_case, run_case_str};
use sampler_host::conformance::compare::compare_results;
use sampler_host::layout::build_plan;
use sampler_host::runtime::device::cpu::CpuBackend;
use sampler_host::runtime::device::cuda::{driver_present, CudaBackend};
use sampler_host::runtime::pipeline;
use sampler_host::BackendKind;

const GOLDEN_DEFAULT: &str = sampler_host::conformance::case::GOLDEN_DIR;

fn skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "\n{0}\n!!! SKIPPED: {msg}\n{0}", "!".repeat(78));
}

#[test]
fn golden_cases_with_counts_in_top_n_equal_cpu() {
    // Read once, at creation: the default must be on.
    std::env::remove_var("SAMPLER_COUNTS_IN_TOPN");
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: the counted top-N on CUDA is not run (scripts/gpu/round.sh counts runs it on the H200)");
        return;
    }
    let g = std::env::var("SAMPLER_GOLDEN_DIR").unwrap_or_else(|_| GOLDEN_DEFAULT.to_string());
    let files = golden_files(Path::new(&g));
    assert!(files.len() >= 50, "golden cases not found at {g} ({} files)", files.len());
    let mut be = CudaBackend::new().unwrap();
    assert!(be.counts_in_topn(), "the counted top-N must be on by default on CUDA");
    let mut fails = Vec::new();
    let (mut runs, mut counted) = (0, 0);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        // The public API (a fresh Sampler: the variable again).
        let cpu = run_case_str(&text, BackendKind::Cpu).expect("cpu");
        let cuda = run_case_str(&text, BackendKind::Cuda).expect("cuda");
        let d = compare_results(&cpu, &cuda);
        if !d.is_empty() {
            fails.push(format!("{} (public API): {}", f.display(), d.join("; ")));
        }
        // The backend level: both paths, one chunk (force_topn_counted) and several (topn_chunk_counted).
        let case = parse_case(&text).unwrap();
        let (reqs, logits) = case.well_formed();
        let Ok((p, _)) = build_plan(case.vocab_size, case.width(), case.nextn, &logits[..], &reqs) else { continue };
        for (full_row, counts) in [(false, true), (true, true), (false, false), (true, false)] {
            let want = if full_row { CpuBackend::full_row() } else { CpuBackend::default() }.run(&p).unwrap();
            be.set_counts_in_topn(counts);
            for chunks in [None, Some(1), Some(2), Some(4)] {
                be.set_full_row(full_row);
                be.set_chunks_override(chunks);
                let names = pipeline::build_for(be.device(), &p, pipeline::PrefixPolicy::eager(full_row).width(&p))
                    .unwrap()
                    .kernel_names();
                counted += names.iter().any(|n| n.ends_with("_counted")) as usize;
                let got = be.run(&p).unwrap();
                if format!("{got:?}") != format!("{want:?}") {
                    fails.push(format!(
                        "{} (full_row {full_row}, counts {counts}, chunks {chunks:?}, {names:?}): differs from the CPU",
                        f.display()
                    ));
                }
                runs += 1;
            }
        }
    }
    eprintln!(
        "counts on CUDA: {} golden cases, {runs} backend runs ({counted} with a counted top-N), {} failures",
        files.len(),
        fails.len()
    );
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    assert!(counted > files.len(), "the counted kernels ran: {counted}");
}
