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
//! The streaming top-N (`Caps::stream_select`, `force_topn_stream`, issue
//! 22; off by default) likewise: every golden case, and adversarial rows at
//! V = 129280 and N = 1, 50, 1024, 4096 (each row's N candidates checked
//! against the CPU's exact selection, and how often the exact fallback ran).
//!
//! Without a CUDA driver (CI) it skips, saying so.

use std::path::Path;

use sampler_host::conformance::case::{golden_files, parse_case, run_case_str};
use sampler_host::conformance::compare::compare_results;
use sampler_host::layout::build_plan;
use sampler_host::runtime::device::cpu::CpuBackend;
use sampler_host::runtime::device::cuda::{driver_present, CudaBackend};
use sampler_host::runtime::pipeline::{self, Buf, Device, HostSliceMut};
use sampler_host::runtime::plan::StepPlan;
use sampler_host::{BackendKind, Request, SamplingParams};
use sampler_kernels::rt::host_algo::top_keys_counted;
use sampler_kernels::rt::math::order_key;

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

/// Whether the last step on `be` ran `force_topn_stream`, and then each
/// row's fallback code (0 streamed, 2 overflow, 3 too few survivors).
fn stream_fallbacks(be: &mut CudaBackend, p: &StepPlan, full_row: bool) -> Option<Vec<u32>> {
    let names =
        pipeline::build_for(be.device(), p, pipeline::PrefixPolicy::eager(full_row).width(p)).unwrap().kernel_names();
    if !names.contains(&"force_topn_stream") {
        return None;
    }
    let mut fb = vec![0u32; p.rows as usize];
    let d = be.device();
    d.download(Buf::SelFallback, 0, HostSliceMut::U32(&mut fb)).unwrap();
    d.finish().unwrap();
    Some(fb)
}

#[test]
fn golden_cases_with_stream_select_equal_cpu() {
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: the streaming top-N on CUDA is not run (see docs/GPU_NOTES.md for the GPU round)");
        return;
    }
    let g = std::env::var("SAMPLER_GOLDEN_DIR").unwrap_or_else(|_| GOLDEN_DEFAULT.to_string());
    let files = golden_files(Path::new(&g));
    assert!(!files.is_empty(), "golden cases not found at {g}");
    let mut be = CudaBackend::new().unwrap();
    let env = match std::env::var("SAMPLER_STREAM_SELECT").as_deref().map(str::trim) {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    };
    assert_eq!(be.stream_select(), env, "the streaming top-N is forced only by SAMPLER_STREAM_SELECT=1 / 0");
    be.set_stream_select(Some(true));
    // The streaming paths themselves, not the cluster top-N that small batches take by default.
    be.set_cluster(Some(0));
    // One block a row (force_topn_stream); several: the chunks test below.
    be.set_stream_chunks(Some(0));
    let (mut runs, mut streamed, mut rows, mut fell) = (0, 0, 0, 0);
    let mut fails = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let case = parse_case(&text).unwrap();
        let (reqs, logits) = case.well_formed();
        let Ok((p, _)) = build_plan(case.vocab_size, case.width(), case.nextn, &logits[..], &reqs) else { continue };
        for full_row in [false, true] {
            let want = if full_row { CpuBackend::full_row() } else { CpuBackend::default() }.run(&p).unwrap();
            be.set_full_row(full_row);
            be.set_chunks_override(None);
            let got = be.run(&p).unwrap();
            if format!("{got:?}") != format!("{want:?}") {
                fails.push(format!("{} (full_row {full_row}, stream select): differs from the CPU", f.display()));
            }
            runs += 1;
            if let Some(fb) = stream_fallbacks(&mut be, &p, full_row) {
                streamed += 1;
                rows += fb.len();
                fell += fb.iter().filter(|&&x| x != 0).count();
            }
        }
    }
    eprintln!(
        "stream select on CUDA: {} golden cases, {runs} runs ({streamed} through force_topn_stream, {rows} rows, {fell} fell back), {} failures",
        files.len(),
        fails.len()
    );
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    assert!(streamed > 0, "force_topn_stream ran");
}

/// Rows that stress the streaming top-N's sampled threshold, survivor
/// buffer and fallback (name, logits of length `v`).
fn stream_rows(v: usize) -> Vec<(&'static str, Vec<f32>)> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut unit = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    // The benchmark's logits: 3 sqrt(3) (sum of 4 uniforms - 2).
    let mut normal = move || 5.196_152 * (unit() + unit() + unit() + unit() - 2.0);
    let mut rows: Vec<(&'static str, Vec<f32>)> = Vec::new();
    rows.push(("normal", (0..v).map(|_| normal()).collect()));
    rows.push(("all equal", vec![1.5; v]));
    rows.push(("ascending", (0..v).map(|i| i as f32 * 1e-3).collect()));
    rows.push(("descending", (0..v).map(|i| -(i as f32) * 1e-3).collect()));
    rows.push(("quantized", (0..v).map(|_| (normal() * 2.0).round() / 2.0).collect()));
    // The top 2048 values in one 8 KB region, the sample sees few of them.
    rows.push((
        "top in one region",
        (0..v).map(|i| if (60_000..62_048).contains(&i) { 8.0 + normal() * 0.01 } else { normal().min(4.9) }).collect(),
    ));
    rows.push(("id-periodic", (0..v).map(|i| (i % 97) as f32 * 0.125).collect()));
    let mut nan = (0..v).map(|_| normal()).collect::<Vec<f32>>();
    nan[777] = f32::NAN;
    nan[99_999] = f32::from_bits(0xffc0_0001);
    rows.push(("NaN", nan));
    let mut pinf = (0..v).map(|_| normal()).collect::<Vec<f32>>();
    pinf[12_345] = f32::INFINITY;
    rows.push(("+inf", pinf));
    rows.push(("all -inf", vec![f32::NEG_INFINITY; v]));
    let mut few = vec![f32::NEG_INFINITY; v];
    for i in 0..10 {
        few[i * 9001 + 3] = normal();
    }
    rows.push(("10 finite", few));
    let mut mixed = (0..v).map(|i| if i % 3 == 0 { f32::NEG_INFINITY } else { normal() }).collect::<Vec<f32>>();
    mixed[5] = -0.0;
    mixed[6] = 0.0;
    rows.push(("-inf thirds, signed zeros", mixed));
    rows
}

/// The rows (by name) whose N candidates after the last step on `be`
/// (`Buf::Cand`, `Buf::CandIds`) are not the CPU's exact top N, bitwise.
fn rows_off_cpu_top_n(
    be: &mut CudaBackend,
    rows: &[(&'static str, Vec<f32>)],
    n: u32,
    sorted: usize,
) -> Vec<&'static str> {
    let rn = rows.len() * n as usize;
    let (mut cand, mut ids) = (vec![0f32; rn], vec![0i32; rn]);
    let d = be.device();
    d.download(Buf::Cand, 0, HostSliceMut::F32(&mut cand)).unwrap();
    d.download(Buf::CandIds, 0, HostSliceMut::I32(&mut ids)).unwrap();
    d.finish().unwrap();
    let mut off = Vec::new();
    for (r, (name, x)) in rows.iter().enumerate() {
        let (keys, _) = top_keys_counted(x, n as usize);
        let at = r * n as usize..(r + 1) * n as usize;
        // The first `sorted` in order; the rest of the N as a set (Caps::prefix_order).
        let mut got: Vec<u64> = cand[at.clone()].iter().zip(&ids[at]).map(|(&c, &i)| order_key(c, i as u32)).collect();
        got[sorted.min(n as usize)..].sort_unstable_by(|a, b| b.cmp(a));
        if keys.len() != n as usize || keys != got {
            off.push(*name);
        }
    }
    off
}

/// The `sorted` argument the step's streaming top-N got (`pipeline::sorted_prefix`).
fn sorted_of(be: &mut CudaBackend, p: &StepPlan, n: u32) -> usize {
    let caps = be.device().caps(p.vocab, n, p.rows);
    pipeline::sorted_prefix(p, n, false, &caps) as usize
}

#[test]
fn adversarial_rows_through_stream_select_equal_cpu() {
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: the streaming top-N's adversarial rows are not run");
        return;
    }
    let v = 129_280u32;
    let rows = stream_rows(v as usize);
    let logits: Vec<f32> = rows.iter().flat_map(|(_, r)| r.iter().copied()).collect();
    let mut be = CudaBackend::new().unwrap();
    be.set_stream_select(Some(true));
    // The streaming paths themselves, not the cluster top-N that small batches take by default.
    be.set_cluster(Some(0));
    be.set_prefix_order(Some(true));
    be.set_stream_chunks(Some(0));
    be.set_full_row(true);
    let mut fails = Vec::new();
    // top-k off: all N in order; 50: only the first 64 (Caps::prefix_order).
    for (top_k, n) in [-1i64, 50].into_iter().flat_map(|k| [1u32, 50, 1024, 4096].map(|n| (k, n))) {
        let reqs = stream_requests(rows.len(), top_k);
        let (p, _) = build_plan(v, n, u32::MAX, &logits, &reqs).unwrap();
        let want = CpuBackend::full_row().run(&p).unwrap();
        let got = be.run(&p).unwrap();
        if format!("{got:?}") != format!("{want:?}") {
            fails.push(format!("N={n}, top_k {top_k}: step results differ from the CPU"));
        }
        let fb = stream_fallbacks(&mut be, &p, true).expect("force_topn_stream ran");
        // Every row's N candidates, against the CPU's exact selection.
        let sorted = sorted_of(&mut be, &p, n);
        assert_eq!(sorted < n as usize, top_k > 0 && n > 64, "sorted {sorted} at N={n}, top_k {top_k}");
        for name in rows_off_cpu_top_n(&mut be, &rows, n, sorted) {
            fails.push(format!("N={n}, top_k {top_k}, row {name:?}: candidates differ from the CPU's top-N"));
        }
        let report: Vec<String> = rows.iter().zip(&fb).map(|((name, _), f)| format!("{name}: {f}")).collect();
        eprintln!(
            "stream select N={n}: fallback codes per row (0 streamed, 2 overflow, 3 too few): {}",
            report.join(", ")
        );
        // A typical row streams: the sample's threshold must be calibrated.
        if fb[0] != 0 {
            fails.push(format!("N={n}: the normal row fell back (code {})", fb[0]));
        }
    }
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

/// Every golden case of `files` on both paths, at each setting of
/// `configs` (`set(be, c)` first): a line in `fails` for each step whose
/// results differ from the CPU backend's, and `after(be, plan, full_row, c,
/// fails)` after each run for the caller's own checks. Returns the runs.
fn golden_runs(
    be: &mut CudaBackend,
    files: &[std::path::PathBuf],
    configs: &[u32],
    what: &str,
    set: impl Fn(&mut CudaBackend, u32),
    mut after: impl FnMut(&mut CudaBackend, &StepPlan, bool, u32, &mut Vec<String>),
    fails: &mut Vec<String>,
) -> usize {
    let mut runs = 0;
    for &c in configs {
        set(be, c);
        for f in files {
            let case = parse_case(&std::fs::read_to_string(f).unwrap()).unwrap();
            let (reqs, logits) = case.well_formed();
            let Ok((p, _)) = build_plan(case.vocab_size, case.width(), case.nextn, &logits[..], &reqs) else {
                continue;
            };
            for full_row in [false, true] {
                let want = if full_row { CpuBackend::full_row() } else { CpuBackend::default() }.run(&p).unwrap();
                be.set_full_row(full_row);
                let got = be.run(&p).unwrap();
                if format!("{got:?}") != format!("{want:?}") {
                    fails.push(format!("{} (full_row {full_row}, {what} {c}): differs from the CPU", f.display()));
                }
                runs += 1;
                let mut mine = Vec::new();
                after(be, &p, full_row, c, &mut mine);
                fails.extend(mine.into_iter().map(|m| format!("{}: {m}", f.display())));
            }
        }
    }
    runs
}

/// The rows of [`stream_rows`] at V = 129280 (full-row path, only the kept
/// prefix ordered), top-k off and 50, N = 1, 50, 1024, 4096, at each setting
/// of `configs` (`set(be, c)` first): a line in `fails` for each step whose
/// results differ from the CPU's and for each row whose N candidates are not
/// the CPU's exact top N, and `after(be, plan, n, c, fails)` after each run.
fn adversarial_runs(
    be: &mut CudaBackend,
    configs: &[u32],
    what: &str,
    set: impl Fn(&mut CudaBackend, u32),
    mut after: impl FnMut(&mut CudaBackend, &StepPlan, u32, u32, &mut Vec<String>),
    fails: &mut Vec<String>,
) {
    let v = 129_280u32;
    let rows = stream_rows(v as usize);
    let logits: Vec<f32> = rows.iter().flat_map(|(_, r)| r.iter().copied()).collect();
    be.set_full_row(true);
    be.set_prefix_order(Some(true));
    for (c, top_k) in configs.iter().flat_map(|&c| [(c, -1i64), (c, 50)]) {
        set(be, c);
        let reqs = stream_requests(rows.len(), top_k);
        for n in [1u32, 50, 1024, 4096] {
            let (p, _) = build_plan(v, n, u32::MAX, &logits, &reqs).unwrap();
            let want = CpuBackend::full_row().run(&p).unwrap();
            let got = be.run(&p).unwrap();
            if format!("{got:?}") != format!("{want:?}") {
                fails.push(format!("N={n}, {what} {c}, top_k {top_k}: step results differ from the CPU"));
            }
            after(be, &p, n, c, fails);
            let sorted = sorted_of(be, &p, n);
            for name in rows_off_cpu_top_n(be, &rows, n, sorted) {
                fails.push(format!(
                    "N={n}, {what} {c}, top_k {top_k}, row {name:?}: candidates differ from the CPU's top-N"
                ));
            }
        }
    }
}

/// The streaming top-N over several blocks a row (`topn_chunk_stream` +
/// `topn_merge_stream`, `CudaBackend::set_stream_chunks`): every golden case
/// (both paths) and the adversarial rows of [`stream_rows`] at N = 1, 50,
/// 1024, 4096, at 2, 8 and 16 chunks, bitwise against the CPU (step results
/// and each row's N candidates).
#[test]
fn golden_and_adversarial_rows_through_stream_chunks_equal_cpu() {
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: the streaming top-N over several blocks a row is not run");
        return;
    }
    let g = std::env::var("SAMPLER_GOLDEN_DIR").unwrap_or_else(|_| GOLDEN_DEFAULT.to_string());
    let files = golden_files(Path::new(&g));
    assert!(!files.is_empty(), "golden cases not found at {g}");
    let mut be = CudaBackend::new().unwrap();
    be.set_stream_select(Some(true));
    // The streaming paths themselves, not the cluster top-N that small batches take by default.
    be.set_cluster(Some(0));
    let chunked = |be: &mut CudaBackend, p: &StepPlan, full_row: bool| {
        pipeline::build_for(be.device(), p, pipeline::PrefixPolicy::eager(full_row).width(p))
            .unwrap()
            .kernel_names()
            .contains(&"topn_chunk_stream")
    };
    let mut fails = Vec::new();
    let mut through = 0;
    let runs = golden_runs(
        &mut be,
        &files,
        &[2, 8, 16],
        "chunks",
        |be, c| be.set_stream_chunks(Some(c)),
        |be, p, full_row, _, _| through += chunked(be, p, full_row) as usize,
        &mut fails,
    );
    adversarial_runs(
        &mut be,
        &[2, 8, 16],
        "chunks",
        |be, c| be.set_stream_chunks(Some(c)),
        |be, p, n, c, _| assert!(chunked(be, p, true), "topn_chunk_stream ran at N={n}, {c} chunks"),
        &mut fails,
    );
    eprintln!(
        "stream chunks on CUDA: {runs} golden runs ({through} through topn_chunk_stream), adversarial rows at 3 chunk counts x 4 widths, {} failures",
        fails.len()
    );
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    assert!(through > 0, "topn_chunk_stream ran on golden cases");
}

/// The top-N over the CTAs of a thread-block cluster (`topn_cluster`,
/// `CudaBackend::set_cluster`): every golden case (both paths) and the
/// adversarial rows of [`stream_rows`] (ties split across the CTAs' slices:
/// all equal, quantized, id-periodic) at N = 1, 50, 1024, 4096, over 2, 4,
/// 8 and 16 CTAs a row, bitwise against the CPU (step results and each
/// row's N candidates); bf16 and f16 device logits are `gpu_suite`'s.
#[test]
fn golden_and_adversarial_rows_through_clusters_equal_cpu() {
    if !driver_present() || CudaBackend::new().is_err() {
        skip("no CUDA GPU: the top-N over thread-block clusters is not run");
        return;
    }
    let g = std::env::var("SAMPLER_GOLDEN_DIR").unwrap_or_else(|_| GOLDEN_DEFAULT.to_string());
    let files = golden_files(Path::new(&g));
    assert!(!files.is_empty(), "golden cases not found at {g}");
    let mut be = CudaBackend::new().unwrap();
    // An H100 / H200 schedules clusters of 16 CTAs of the widest variant (a partitioned device may not).
    assert_eq!(be.cluster_max(), 16, "the largest cluster size on this device");
    let clustered = |be: &mut CudaBackend, p: &StepPlan, full_row: bool| {
        pipeline::build_for(be.device(), p, pipeline::PrefixPolicy::eager(full_row).width(p))
            .unwrap()
            .kernel_names()
            .iter()
            .any(|k| k.starts_with("topn_cluster"))
    };
    // Each row's CTAs of the cluster top-N (`Buf::SelFallback`): every row must have had `c`.
    let ctas_of = |be: &mut CudaBackend, p: &StepPlan| {
        let mut x = vec![0u32; p.rows as usize];
        let d = be.device();
        d.download(Buf::SelFallback, 0, HostSliceMut::U32(&mut x)).unwrap();
        d.finish().unwrap();
        x
    };
    let mut fails = Vec::new();
    let mut through = 0;
    let runs = golden_runs(
        &mut be,
        &files,
        &[2, 3, 4, 6, 7, 8, 12, 16],
        "cluster",
        |be, c| be.set_cluster(Some(c)),
        |be, p, full_row, c, fails| {
            if clustered(be, p, full_row) {
                through += 1;
                let got = ctas_of(be, p);
                if got.iter().any(|&x| x != c) {
                    fails.push(format!("cluster {c}: rows selected by {got:?} CTAs"));
                }
            }
        },
        &mut fails,
    );
    adversarial_runs(
        &mut be,
        &[4, 6, 7, 8, 16],
        "cluster",
        |be, c| be.set_cluster(Some(c)),
        |be, p, n, c, fails| {
            let fits = sampler_host::runtime::device::cuda::cluster_fits(p.vocab, n, c);
            assert_eq!(clustered(be, p, true), fits, "topn_cluster(_draw_finish) at N={n}, cluster {c}");
            if fits && ctas_of(be, p).iter().any(|&x| x != c) {
                fails.push(format!("N={n}, cluster {c}: rows selected by {:?} CTAs", ctas_of(be, p)));
            }
        },
        &mut fails,
    );
    eprintln!(
        "clusters on CUDA: {runs} golden runs ({through} through topn_cluster), adversarial rows at 5 cluster sizes x 4 widths, {} failures",
        fails.len()
    );
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    assert!(through > 0, "topn_cluster ran on golden cases");
}

/// One request a row of [`stream_rows`]: temperature 1, top-p 1, top-k
/// `top_k` (-1 off), 5 top logprobs.
fn stream_requests(rows: usize, top_k: i64) -> Vec<Request> {
    (0..rows as u64)
        .map(|i| {
            let p = SamplingParams {
                temperature: 1.0,
                top_p: 1.0,
                top_k,
                top_logprobs: 5,
                seq_seed: Some(77 + i),
                ..Default::default()
            };
            Request::prefill(p, 3 + i)
        })
        .collect()
}
