//! The generated AscendC kernels, compiled with g++ against our x86
//! emulation of the AscendC subset (sampler-host/ascendc/emu), run kernel by
//! kernel on inputs prepared from the golden cases, and compared with the
//! CPU kernel programs on the same input buffers: ids and statuses
//! identical, floats within |a - b| <= 1e-4 + 1e-5 |b|. Besides the CPU
//! backend's sequence, the kernels only the CUDA backend launches are run
//! too: the fused `process_draw` / `process_prefix_draw` / `token_info_top`
//! and their one-tail-node forms (`process_draw_finish`, `prefix_draw_finish`),
//! `row_mass`, and the multi-block `topn_chunk` + `topn_merge`. Every
//! golden case runs through the shared launch list ([`pipeline`]) in the
//! CPU order with exact numerics, and in the Ascend order
//! ([`ascend_caps`]) and the CUDA order in the strict numerics mode
//! (`ASCENDC_EMU_NUMERICS=perturb`), each launch on 1-3 emulated cores;
//! planted bugs in generated kernels and the hardware probes are checked
//! here as well (docs/ASCEND.md).
//!
//! Skips (passing) only when g++ is absent.

use std::path::{Path, PathBuf};
use std::process::Command;

use sampler_host::error::BackendError;
use sampler_host::runtime::device::ascend::{ascend_caps, probe};
use sampler_host::runtime::device::cpu::{CpuBackend, CpuDevice};
use sampler_host::runtime::pipeline::{self, Buf, Caps, Device, HostSlice, HostSliceMut, Launch};
use sampler_kernels::registry;
use sampler_kernels::spec::{KernelSpec, LaunchArg, ParamKind, Prim};

use crate::common;

use common::ascendc_emu::*;

/// The AscendC emulator as a pipeline [`Device`]: each launch of the shared
/// launch list runs twice on the same input buffers, as the kernel's CPU
/// program and as its generated AscendC under emulation; the written
/// buffers must agree (ids and statuses identical, floats within
/// |a - b| <= 1e-4 + 1e-5 |b|, on rows whose status is ok), and the CPU's
/// outputs carry on to the next launch, so one divergence is reported where
/// it happens rather than as drift downstream.
struct EmuDevice {
    bufs: Vec<Val>,
    caps: Caps,
    numerics: Numerics,
    rows: usize,
    row_ok: Vec<bool>,
    launched: Vec<&'static str>,
    err: Option<String>,
}

impl EmuDevice {
    fn new(caps: Caps, numerics: Numerics, rows: usize) -> EmuDevice {
        let bufs = Buf::ALL
            .iter()
            .map(|b| match b.prim() {
                Prim::F32 => Val::F32(Vec::new()),
                Prim::I32 => Val::I32(Vec::new()),
                Prim::U64 => Val::U64(Vec::new()),
                _ => Val::U32(Vec::new()),
            })
            .collect();
        EmuDevice { bufs, caps, numerics, rows, row_ok: vec![true; rows], launched: Vec::new(), err: None }
    }

    /// Compares output `i` of kernel `name` (`c` CPU, `e` emulated).
    fn compare(&self, name: &str, param: &str, c: &Val, e: &Val, programs: u32) -> Result<(), String> {
        let diff = |row: usize, what: String| Err(format!("{name}.{param} differs at row {row}: {what}"));
        if param == "col_of" || param == "dpos" {
            return Ok(()); // scratch
        }
        if name == "finalize" || name == "tree_walk" {
            // Per group: every output identical.
            return if format!("{c:?}") == format!("{e:?}") { Ok(()) } else { diff(0, format!("cpu {c:?} emu {e:?}")) };
        }
        // A cluster top-N's rest past the sorted head is in no fixed order
        // (the CPU reverses it): its candidates are compared as sets, their
        // order by what the tail computes from them.
        let set = name.starts_with("topn_cluster") && (param == "cand" || param == "cand_ids");
        let r = self.rows.max(1);
        let len = match c {
            Val::F32(v) => v.len(),
            Val::I32(v) => v.len(),
            Val::U32(v) => v.len(),
            Val::U64(v) => v.len(),
            _ => 0,
        };
        let w = len / r;
        let chunks = (programs as usize / r).max(1);
        for row in (0..r).filter(|&i| self.row_ok[i]) {
            let s = row * w..(row + 1) * w;
            match (c, e) {
                (Val::F32(a), Val::F32(b)) if name.starts_with("topn_chunk") || set => {
                    // The chunk stage's order is each runtime's own: compare each chunk as a set.
                    let per = w / chunks;
                    for ch in 0..chunks {
                        let cs = s.start + ch * per..s.start + (ch + 1) * per;
                        // -0.0 as +0.0: the CPU's keys give +0.0 (SAMPLER.md 3.6), the device may keep the sign.
                        let bits = |f: &f32| if *f == 0.0 { 0 } else { f.to_bits() };
                        let mut x: Vec<u32> = a[cs.clone()].iter().map(bits).collect();
                        let mut y: Vec<u32> = b[cs].iter().map(bits).collect();
                        x.sort_unstable();
                        y.sort_unstable();
                        if x != y {
                            return diff(row, format!("chunk {ch} logits differ as sets"));
                        }
                    }
                }
                (Val::I32(a), Val::I32(b)) if name.starts_with("topn_chunk") || set => {
                    let per = w / chunks;
                    for ch in 0..chunks {
                        let cs = s.start + ch * per..s.start + (ch + 1) * per;
                        let mut x = a[cs.clone()].to_vec();
                        let mut y = b[cs].to_vec();
                        x.sort_unstable();
                        y.sort_unstable();
                        if x != y {
                            return diff(row, format!("chunk {ch} ids differ as sets"));
                        }
                    }
                }
                (Val::F32(a), Val::F32(b)) if param == "masked" => {
                    if a[s.clone()].iter().map(|x| x.to_bits()).ne(b[s].iter().map(|x| x.to_bits())) {
                        return diff(row, "masked logits".into());
                    }
                }
                (Val::F32(a), Val::F32(b)) => {
                    if let Some(j) = s.clone().find(|&j| !close(b[j], a[j]) && (a[j] != 0.0 || b[j] != 0.0)) {
                        return diff(row, format!("col {}: cpu {} emu {}", j - s.start, a[j], b[j]));
                    }
                }
                (Val::U64(a), Val::U64(b)) => {
                    // row_mass: AscendC's vector Exp is not the CPU's polynomial bit for bit
                    // (docs/ASCEND.md): the fixed-point sums agree to a relative 1e-5.
                    for j in s {
                        let (x, y) = (a[j] as f64, b[j] as f64);
                        if (x - y).abs() > 1e-5 * x + 16.0 {
                            return diff(row, format!("cpu {} emu {}", a[j], b[j]));
                        }
                    }
                }
                (Val::I32(a), Val::I32(b)) => {
                    if a[s.clone()] != b[s.clone()] {
                        return diff(
                            row,
                            format!(
                                "cpu {:?} emu {:?}",
                                &a[s.clone()].iter().take(8).collect::<Vec<_>>(),
                                &b[s].iter().take(8).collect::<Vec<_>>()
                            ),
                        );
                    }
                }
                (Val::U32(a), Val::U32(b)) => {
                    if a[s.clone()] != b[s.clone()] {
                        return diff(row, format!("cpu {:?} emu {:?}", &a[s.clone()], &b[s]));
                    }
                }
                _ => return Err(format!("{name}.{param}: element types differ")),
            }
        }
        Ok(())
    }
}

fn be(msg: String) -> BackendError {
    BackendError::Device { backend: "ascendc-emu", msg }
}

impl Device for EmuDevice {
    fn name(&self) -> &'static str {
        "ascendc-emu"
    }
    fn caps(&self, _v: u32, _n: u32, _rows: u32) -> Caps {
        self.caps
    }
    fn alloc(&mut self, buf: Buf, len: usize) -> Result<(), BackendError> {
        // Exact lengths: the comparison splits buffers into rows by length.
        match &mut self.bufs[buf as usize] {
            Val::F32(v) => v.resize(len, 0.0),
            Val::I32(v) => v.resize(len, 0),
            Val::U32(v) => v.resize(len, 0),
            Val::U64(v) => v.resize(len, 0),
            _ => {}
        }
        Ok(())
    }
    fn upload(&mut self, buf: Buf, data: HostSlice<'_>) -> Result<(), BackendError> {
        self.bufs[buf as usize] = match data {
            HostSlice::F32(d) => Val::F32(d.to_vec()),
            HostSlice::I32(d) => Val::I32(d.to_vec()),
            HostSlice::U32(d) => Val::U32(d.to_vec()),
            HostSlice::U64(d) => Val::U64(d.to_vec()),
        };
        Ok(())
    }
    fn fill(&mut self, buf: Buf, len: usize, value: LaunchArg<()>) -> Result<(), BackendError> {
        self.bufs[buf as usize] = match value {
            LaunchArg::F32(x) => Val::F32(vec![x; len]),
            LaunchArg::I32(x) => Val::I32(vec![x; len]),
            LaunchArg::U32(x) => Val::U32(vec![x; len]),
            LaunchArg::U64(x) => Val::U64(vec![x; len]),
            other => return Err(be(format!("fill with {other:?}"))),
        };
        Ok(())
    }
    fn launch(&mut self, l: &Launch) -> Result<(), BackendError> {
        self.launched.push(l.spec.name);
        let args: Vec<Val> = l
            .args
            .iter()
            .map(|a| match *a {
                LaunchArg::Buf(b) => self.bufs[b as usize].clone(),
                LaunchArg::U32(x) => Val::SU32(x),
                LaunchArg::I32(x) => Val::SI32(x),
                other => panic!("scalar {other:?} not used by the kernels"),
            })
            .collect();
        let (c, e) = run_both_in(self.numerics, l.spec.name, l.variant.tile, l.grid, &args).map_err(be)?;
        // A kernel that writes the row status (topn_merge merges it too) says
        // which of its own rows are compared.
        for (i, (a, p)) in l.args.iter().zip(l.spec.params).enumerate() {
            if let (LaunchArg::Buf(Buf::RowStatus), ParamKind::GmMut(_)) = (a, p.kind) {
                self.row_ok = c[i].i32s().iter().map(|&s| s == 0).collect();
            }
        }
        for (i, (a, p)) in l.args.iter().zip(l.spec.params).enumerate() {
            let (LaunchArg::Buf(b), ParamKind::GmMut(_)) = (a, p.kind) else { continue };
            if self.err.is_none() {
                if let Err(m) = self.compare(l.spec.name, p.name, &c[i], &e[i], l.grid) {
                    self.err = Some(m);
                }
            }
            self.bufs[*b as usize] = c[i].clone();
            if *b == Buf::RowStatus {
                self.row_ok = c[i].i32s().iter().map(|&s| s == 0).collect();
            }
        }
        Ok(())
    }
    fn download(&mut self, buf: Buf, offset: usize, out: HostSliceMut<'_>) -> Result<(), BackendError> {
        match (&self.bufs[buf as usize], out) {
            (Val::F32(v), HostSliceMut::F32(o)) => o.copy_from_slice(&v[offset..offset + o.len()]),
            (Val::I32(v), HostSliceMut::I32(o)) => o.copy_from_slice(&v[offset..offset + o.len()]),
            (Val::U32(v), HostSliceMut::U32(o)) => o.copy_from_slice(&v[offset..offset + o.len()]),
            (Val::U64(v), HostSliceMut::U64(o)) => o.copy_from_slice(&v[offset..offset + o.len()]),
            _ => return Err(be(format!("download of {buf:?}"))),
        }
        Ok(())
    }
}

/// Runs one golden case through the shared pipeline on the emulator, with
/// the CPU backend's launch list (exact numerics), the Ascend backend's
/// ([`ascend_caps`]: one program per row for the mask check and top-N,
/// fused kernels, the counted top-N on steps without masks or raw rows;
/// and with the mask check there too) and the CUDA backend's (multi-block
/// mask check and top-N, fused kernels; and with `topn_chunk_counted` in
/// place of the mask check), in the perturbed numerics mode, the prefix
/// path where the plan takes it; every launch's outputs must agree with
/// the CPU program's and the final results equal the CPU backend's.
fn run_case(path: &Path) -> Result<Option<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let case = sampler_host::conformance::case::parse_case(&text).map_err(|e| e.to_string())?;
    let (v, n) = (case.vocab_size, case.width());
    if n > sampler_kernels::codes::MAX_N_ASCEND {
        return Ok(None);
    }
    let (reqs, logits) = case.well_formed();
    let (p, _) = sampler_host::layout::build_plan(v, n, case.nextn, &logits, &reqs).map_err(|e| e.to_string())?;
    run_plan(&path.file_name().unwrap().to_string_lossy(), &p).map(Some)
}

/// [`run_case`] on a step plan: every launch order and numerics mode on the
/// emulator equals the CPU backend's results; a one-line summary.
fn run_plan(name: &str, p: &sampler_host::runtime::plan::StepPlan<'_>) -> Result<String, String> {
    let (v, n) = (p.vocab, p.n);
    let want = CpuBackend::default().run(p).map_err(|e| e.to_string())?;
    // Two chunks per row when each holds n candidates (as the CUDA top-N split).
    let topn_chunks = if v - v.div_ceil(2) >= n { 2 } else { 1 };
    let cuda = Caps {
        mask_chunk: Some(4096),
        topn_chunks,
        fused_max: u32::MAX,
        counts_in_topn: false,
        stream_select: false,
        stream_chunks: 0,
        prefix_order: false, // buffers compared launch by launch: all N in order
        kept_head: true,
        fold_finalize: true,
        fold_tail: false, // the draw and finalize_info_top apart (Ascend's own caps fold them)
        head_tile: 1024,
        cluster: 0,
        cluster_tail: false,
        pdl: false,
        pdl_max_ctas: 0,
    };
    let configs = [
        (
            "cpu order",
            Caps {
                mask_chunk: None,
                topn_chunks: 1,
                fused_max: 0,
                counts_in_topn: false,
                stream_select: false,
                stream_chunks: 0,
                prefix_order: false, // buffers compared launch by launch: all N in order
                kept_head: true,
                fold_finalize: true,
                fold_tail: true, // no effect: fused_max 0 runs no fused kernel
                head_tile: 1024,
                cluster: 0,
                cluster_tail: false,
                pdl: false,
                pdl_max_ctas: 0,
            },
            Numerics::Exact,
        ),
        // Ascend's own caps count in the top-N (force_topn_counted) on steps without masks
        // or raw rows; the mask check's order too, for those steps.
        ("ascend order, perturbed", ascend_caps(), Numerics::Perturb),
        ("ascend order, mask check, perturbed", Caps { counts_in_topn: false, ..ascend_caps() }, Numerics::Perturb),
        ("cuda order, perturbed", cuda, Numerics::Perturb),
        // topn_chunk_counted's counts in place of the mask check (CUDA's SAMPLER_COUNTS_IN_TOPN=1).
        ("cuda order, counts in top-N, perturbed", Caps { counts_in_topn: true, ..cuda }, Numerics::Perturb),
        // force_topn_stream (CUDA's SAMPLER_STREAM_SELECT=1): its AscendC lowering is the counted top-N's.
        ("cuda order, stream select, perturbed", Caps { stream_select: true, ..cuda }, Numerics::Perturb),
        // topn_cluster (CUDA's SAMPLER_CLUSTER=8): on Ascend a program is a whole row (no cluster).
        ("cuda order, cluster top-N, perturbed", Caps { stream_select: true, cluster: 8, ..cuda }, Numerics::Perturb),
        // topn_cluster_draw_finish: the cluster's leader draws and finishes its row (one node a step).
        (
            "cuda order, cluster top-N with the tail, perturbed",
            Caps { stream_select: true, cluster: 8, cluster_tail: true, prefix_order: true, fold_tail: true, ..cuda },
            Numerics::Perturb,
        ),
    ];
    let mut kernels = Vec::new();
    for (what, caps, numerics) in configs {
        let mut emu = EmuDevice::new(caps, numerics, p.rows as usize);
        let got = pipeline::run_step(&mut emu, p, false).map_err(|e| format!("{name} ({what}): {e}"))?;
        if let Some(e) = emu.err {
            return Err(format!("{name} ({what}): {e} (launches {:?})", emu.launched));
        }
        if format!("{got:?}") != format!("{want:?}") {
            return Err(format!("{name} ({what}): the emulated pipeline's results differ from the CPU backend's"));
        }
        kernels.extend(emu.launched);
    }
    kernels.sort_unstable();
    kernels.dedup();
    Ok(format!(
        "{name}: V={v} N={n} R={} verify={} kernels={kernels:?} tokens={:?} -> identical",
        p.rows,
        p.any_verify,
        &want.tokens[..want.tokens.len().min(8)]
    ))
}

/// Issue 24 item 3 (SAMPLER.md 10.1): random min-p steps with tokens on and
/// next to the boundary `x == L` (tests/common/gen.rs), full-row path,
/// force top-k and the prefix path, give the CPU backend's results under
/// emulation in every launch order (the CPU's kept set is checked against
/// `x < f32(ln min_p)` by tests/proptest_vs_reference.rs).
#[test]
fn min_p_boundary_steps_match_cpu_under_emulation() {
    if gxx().is_none() {
        eprintln!("skipping: g++ not found");
        return;
    }
    let mut failures = Vec::new();
    let mut kernels = std::collections::BTreeSet::new();
    for (seed, (vocab, force, far)) in
        [(40, 0, false), (300, 64, false), (200, 0, false), (3000, 0, true), (64, 16, true)].into_iter().enumerate()
    {
        let mut rng = common::gen::Rng::new(2400 + seed as u64);
        let step = common::gen::min_p_boundary_step(&mut rng, vocab, force, 4, far);
        let n = if force == 0 { vocab as u32 } else { force as u32 };
        let (p, _) = sampler_host::layout::build_plan(vocab as u32, n, 5, &step.logits, &step.requests).unwrap();
        match run_plan(&format!("min-p seed {seed}"), &p) {
            Ok(line) => {
                eprintln!("ok   {line}");
                kernels.extend(
                    ["process_prefix_draw", "process_draw", "process", "prefix_draw_finish"]
                        .into_iter()
                        .filter(|k| line.contains(&format!("\"{k}\""))),
                );
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(kernels.len() == 4, "min-p kernels run: {kernels:?}");
}

/// `topn_cluster_draw_finish` (the cluster top-N with the draw's tail, one
/// node a step): decode-like steps of single fresh rows with top-k on (a
/// kept head below N), V = 6000 and N = 256, 1024, in every launch order
/// and numerics mode, equal the CPU backend's results under emulation.
#[test]
fn cluster_tail_steps_match_cpu_under_emulation() {
    if gxx().is_none() {
        eprintln!("skipping: g++ not found");
        return;
    }
    let v = 6000u32;
    let mut fused = 0;
    for (case, n) in [(0u64, 256u32), (1, 1024), (2, 1024)] {
        let mut rng = common::gen::Rng::new(900 + case);
        let reqs: Vec<sampler_host::Request> = (0..3u64)
            .map(|r| {
                let p = sampler_host::SamplingParams {
                    temperature: [0.7, 1.0, 1.3][r as usize],
                    top_p: [0.9, 1.0, 0.5][r as usize],
                    top_k: [50, 5, 64][r as usize],
                    top_logprobs: 5,
                    seq_seed: Some(rng.next_u64()),
                    ..Default::default()
                };
                sampler_host::Request::prefill(p, 4 + r)
            })
            .collect();
        let logits: Vec<f32> =
            (0..3 * v as usize).map(|_| ((rng.next_u64() % 4000) as f32 * 0.001).round() * 0.5).collect();
        let (p, _) = sampler_host::layout::build_plan(v, n, 5, &logits, &reqs).unwrap();
        match run_plan(&format!("cluster tail case {case}"), &p) {
            Ok(line) => {
                eprintln!("ok   {line}");
                fused += line.contains("\"topn_cluster_draw_finish\"") as usize;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(fused, 3, "topn_cluster_draw_finish ran under emulation in every case");
}

#[test]
fn every_kernel_has_committed_ascendc_source() {
    let dir = Path::new(ROOT).join("sampler-host/ascendc");
    for spec in registry::all() {
        let name = spec.name;
        let Some(src) = spec.ascendc else {
            // Honoured opt-out; anything else is a kernel silently missing a target.
            assert!(
                spec.ascend_opt_out,
                "kernel `{name}` has no AscendC source: {}; lower it or opt out with `#[kernel(ascend = false)]`",
                spec.ascendc_skipped.unwrap_or("?")
            );
            eprintln!("skip {name}: {}", spec.ascendc_skipped.unwrap_or("opted out"));
            continue;
        };
        let file = dir.join(format!("{name}.cpp"));
        let committed = std::fs::read_to_string(&file).unwrap_or_else(|_| {
            panic!("kernel `{name}`: missing {}: run `cargo run --example regenerate -- --ascendc`", file.display())
        });
        assert!(
            committed == src,
            "kernel `{name}`: {} is stale: run `cargo run --example regenerate -- --ascendc`",
            file.display()
        );
    }
}

#[test]
fn golden_cases_match_cpu_under_emulation() {
    if gxx().is_none() {
        eprintln!("skipping: g++ not found");
        return;
    }
    let paths: Vec<PathBuf> =
        sampler_host::conformance::case::golden_files(Path::new(sampler_host::conformance::case::GOLDEN_DIR));
    assert!(paths.len() >= 50, "golden cases not found at {}", sampler_host::conformance::case::GOLDEN_DIR);
    let only = std::env::var("ASCENDC_EMU_CASE").ok();
    let mut ran = 0;
    let mut failures = Vec::new();
    let mut covered = std::collections::BTreeSet::new();
    for p in &paths {
        if only.as_ref().is_some_and(|o| !p.to_string_lossy().contains(o.as_str())) {
            continue;
        }
        match run_case(p) {
            Ok(Some(line)) => {
                ran += 1;
                for k in [
                    "raw_logprobs",
                    "tree_walk",
                    "mask_check",
                    "mask_check_chunk",
                    "force_topn_counted",
                    "topn_chunk_counted",
                    "process_draw_finish",
                    "prefix_draw_finish",
                    "topn_cluster",
                ] {
                    if line.contains(&format!("\"{k}\"")) {
                        covered.insert(k);
                    }
                }
                eprintln!("ok   {line}");
            }
            Ok(None) => {
                eprintln!("skip {} (N > 4096: not an Ascend configuration)", p.file_name().unwrap().to_string_lossy())
            }
            Err(e) => {
                eprintln!("FAIL {e}");
                failures.push(e);
            }
        }
    }
    eprintln!("{ran} golden cases ran under emulation, {} failed", failures.len());
    assert!(failures.is_empty(), "{} cases differ:\n{}", failures.len(), failures.join("\n"));
    assert!(ran > 0);
    // The section 10-11 kernels run on the golden cases (raw logprobs, trees), not only the seed's.
    if only.is_none() {
        assert_eq!(covered.len(), 9, "kernels run under emulation: {covered:?}");
    }
}

/// The CPU device with the Ascend launch order ([`ascend_caps`]).
struct CpuInAscendOrder(CpuDevice);

impl Device for CpuInAscendOrder {
    fn name(&self) -> &'static str {
        "cpu-as-ascend"
    }
    fn caps(&self, _v: u32, _n: u32, _rows: u32) -> Caps {
        ascend_caps()
    }
    fn alloc(&mut self, buf: Buf, len: usize) -> Result<(), BackendError> {
        self.0.alloc(buf, len)
    }
    fn upload(&mut self, buf: Buf, data: HostSlice<'_>) -> Result<(), BackendError> {
        self.0.upload(buf, data)
    }
    fn fill(&mut self, buf: Buf, len: usize, value: LaunchArg<()>) -> Result<(), BackendError> {
        self.0.fill(buf, len, value)
    }
    fn launch(&mut self, l: &Launch) -> Result<(), BackendError> {
        self.0.launch(l)
    }
    fn download(&mut self, buf: Buf, offset: usize, out: HostSliceMut<'_>) -> Result<(), BackendError> {
        self.0.download(buf, offset, out)
    }
}

/// The shared launch list in the Ascend order (one program per row for
/// the mask check and top-N, fused kernels up to 4096), run by the
/// kernels' CPU programs, gives the CPU backend's result on every golden
/// case with N <= 4096 (prefix path and fallback included).
#[test]
fn the_ascend_launch_order_reproduces_the_cpu_backend_on_golden_cases() {
    let dir = Path::new(sampler_host::conformance::case::GOLDEN_DIR);
    let files = sampler_host::conformance::case::golden_files(dir);
    assert!(files.len() >= 50, "golden cases not found at {}", dir.display());
    let mut ran = 0;
    for f in files {
        let case = sampler_host::conformance::case::parse_case(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let (v, n) = (case.vocab_size, case.width());
        let (reqs, logits) = case.well_formed();
        let Ok((p, _)) = sampler_host::layout::build_plan(v, n, case.nextn, &logits, &reqs) else { continue };
        if p.n > sampler_kernels::codes::MAX_N_ASCEND {
            continue;
        }
        let want = CpuBackend::default().run(&p).unwrap();
        let mut dev = CpuInAscendOrder(CpuDevice::default());
        let got = pipeline::run_step(&mut dev, &p, false).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        // Debug text: exact (shortest round-trip floats) and NaN equals NaN.
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{}", f.display());
        ran += 1;
    }
    assert!(ran > 40, "{ran} golden cases ran");
}

/// The Sort32/MrgSort order of NaN, -0.0/+0.0 and ties across lists, end to
/// end through `force_topn` (the same probe `hardware_sort_ties_nan_and_signed_zero`
/// runs on a 910B).
#[test]
fn force_topn_orders_nan_and_signed_zero_as_stated() {
    if gxx().is_none() {
        eprintln!("skipping: g++ not found");
        return;
    }
    let t = probe::sort_ties();
    let n = t.n as usize;
    let args =
        [Val::F32(t.logits.clone()), Val::SU32(t.v), Val::SU32(t.n), Val::F32(vec![0.0; n]), Val::I32(vec![-1; n])];
    let (_, emu) = run_both_in(Numerics::Perturb, "force_topn", t.tile, 1, &args).unwrap();
    assert_eq!(emu[4].i32s(), t.want.as_slice());
}

/// The hardware Exp/Div probe compiles against the emulation header, runs
/// on 3 emulated cores without a hazard, and in the numerics mode stays
/// within 3 ulp of `rt::math::exp_f32` (libm's `expf` within 1, plus the
/// mode's 2) and 2 of IEEE division.
#[test]
fn exp_div_probe_runs_under_emulation() {
    let Some(cxx) = gxx() else {
        eprintln!("skipping: g++ not found");
        return;
    };
    let dir = work_dir().join("probe");
    std::fs::create_dir_all(&dir).unwrap();
    let main = dir.join("probe.cpp");
    let n = 5000usize;
    std::fs::write(
        &main,
        format!(
            r#"#include <cstdio>
#include "{}"
int main(int argc, char **argv) {{
  static float x[{n}], y[{n}], e[{n}], d[{n}];
  FILE *f = std::fopen(argv[1], "rb");
  if (!f || std::fread(x, 4, {n}, f) != {n} || std::fread(y, 4, {n}, f) != {n}) return 2;
  std::fclose(f);
  const uint32_t programs = ({n} + 2047) / 2048;
  for (int b = 0; b < 3; ++b) {{
    AscendC::emu::begin_block(b, 3);
    exp_div_probe((GM_ADDR)x, (GM_ADDR)y, (GM_ADDR)e, (GM_ADDR)d, {n}, programs);
    AscendC::emu::end_block();
  }}
  f = std::fopen(argv[2], "wb");
  std::fwrite(e, 4, {n}, f);
  std::fwrite(d, 4, {n}, f);
  std::fclose(f);
  return 0;
}}
"#,
            Path::new(ROOT).join("sampler-host/ascendc/probes/exp_div_probe.cpp").display()
        ),
    )
    .unwrap();
    let bin = dir.join("probe");
    compile(&cxx, &main, &bin, false).unwrap();
    let (x, y) = probe::exp_div_inputs(n);
    let mut input: Vec<u8> = x.iter().chain(&y).flat_map(|v| v.to_le_bytes()).collect();
    let fin = dir.join("in.bin");
    std::fs::write(&fin, std::mem::take(&mut input)).unwrap();
    let fout = dir.join("out.bin");
    let o = Command::new(&bin).arg(&fin).arg(&fout).env("ASCENDC_EMU_NUMERICS", "perturb").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: Vec<f32> =
        std::fs::read(&fout).unwrap().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let (he, hd, worst) = probe::ulp_histogram(&x, &y, &out[..n], &out[n..]);
    eprintln!("emulated Exp {he:?}, Div {hd:?}, worst {worst} ulp");
    assert!(worst <= 3 && hd[3] == 0, "Exp {he:?}, Div {hd:?}, worst {worst}");
    assert!(
        he[4] > 0 && hd[1] + hd[2] > 0,
        "the numerics mode moves results and flushes subnormals: Exp {he:?}, Div {hd:?}"
    );
}

/// The two first-run probes under the emulator (3 cores): `scalar_probe`
/// matches the CPU bit for bit (x86 IEEE with `-ffp-contract=off`, as the
/// 910B's scalar unit is expected to), and `abi_probe` echoes its arguments
/// (the emulator calls the entry directly: this checks the probe, the
/// layout itself only hardware can).
#[test]
fn scalar_and_abi_probes_run_under_emulation() {
    let Some(cxx) = gxx() else {
        eprintln!("skipping: g++ not found");
        return;
    };
    let dir = work_dir().join("probe2");
    std::fs::create_dir_all(&dir).unwrap();
    let main = dir.join("probe2.cpp");
    let n = 3000usize;
    let probes = Path::new(ROOT).join("sampler-host/ascendc/probes");
    std::fs::write(
        &main,
        format!(
            r#"#include <cstdio>
#include "{}"
#include "{}"
int main(int argc, char **argv) {{
  static float x[{n}], y[{n}];
  static uint64_t u[{n}], q[2 * {n}];
  static uint32_t f[8 * {n}], echo[8];
  FILE *fi = std::fopen(argv[1], "rb");
  if (!fi || std::fread(x, 4, {n}, fi) != {n} || std::fread(y, 4, {n}, fi) != {n} || std::fread(u, 8, {n}, fi) != {n}) return 2;
  std::fclose(fi);
  const uint32_t programs = ({n} + {c} - 1) / {c};
  for (int b = 0; b < 3; ++b) {{
    AscendC::emu::begin_block(b, 3);
    scalar_probe((GM_ADDR)x, (GM_ADDR)y, (GM_ADDR)u, (GM_ADDR)f, (GM_ADDR)q, {n}, programs);
    AscendC::emu::end_block();
  }}
  AscendC::emu::begin_block(0, 1);
  abi_probe((GM_ADDR)echo, {a}u, {b}u, {cc}ull, {d}u, {e:?}f, {p}u);
  AscendC::emu::end_block();
  FILE *fo = std::fopen(argv[2], "wb");
  std::fwrite(f, 4, 8 * {n}, fo);
  std::fwrite(q, 8, 2 * {n}, fo);
  std::fwrite(echo, 4, 8, fo);
  std::fclose(fo);
  return 0;
}}
"#,
            probes.join("scalar_probe.cpp").display(),
            probes.join("abi_probe.cpp").display(),
            c = probe::SCALAR_CHUNK,
            a = probe::ABI_ARGS.0,
            b = probe::ABI_ARGS.1,
            cc = probe::ABI_ARGS.2,
            d = probe::ABI_ARGS.3,
            e = probe::ABI_ARGS.4,
            p = probe::ABI_ARGS.5,
        ),
    )
    .unwrap();
    let bin = dir.join("probe2");
    compile(&cxx, &main, &bin, false).unwrap();
    let (x, y, u) = probe::scalar_inputs(n);
    let input: Vec<u8> = x
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .chain(y.iter().flat_map(|v| v.to_le_bytes()))
        .chain(u.iter().flat_map(|v| v.to_le_bytes()))
        .collect();
    let (fin, fout) = (dir.join("in.bin"), dir.join("out.bin"));
    std::fs::write(&fin, input).unwrap();
    let o = Command::new(&bin).arg(&fin).arg(&fout).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = std::fs::read(&fout).unwrap();
    let w32 = |b: &[u8]| b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<u32>>();
    let f = w32(&out[..32 * n]);
    let q: Vec<u64> = out[32 * n..48 * n].chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    let bad = probe::scalar_mismatches(&x, &y, &u, &f, &q);
    assert!(bad.is_empty(), "emulated scalar numerics differ from the CPU: {bad:?}");
    assert_eq!(w32(&out[48 * n..]), probe::abi_expected());
}

/// Removes the first `qin.EnQue(t); t = qin.DeQue<T>();` of a kernel body:
/// the tile is still staged through the queue's buffer, but nothing orders
/// the MTE2 copy before the vector pipe's read.
fn drop_enque(src: &str) -> Option<String> {
    drop_line(src, "qin.EnQue(")
}

/// Removes the first line holding `needle`.
fn drop_line(src: &str, needle: &str) -> Option<String> {
    let at = src.find(needle)?;
    let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = at + src[at..].find('\n')?;
    Some(format!("{}{}", &src[..line_start], &src[line_end + 1..]))
}

/// The old lowering of `store_scalar`: the token written into GM by the
/// scalar unit (`GlobalTensor::SetValue`) instead of the staged DMA.
fn scalar_token_store(src: &str) -> Option<String> {
    let at = src.find("AscendC::DataCopyPad(g_token[")?;
    let line_end = at + src[at..].find('\n')?;
    let line = &src[at..line_end];
    let off = line.split("g_token[").nth(1)?.split(']').next()?;
    let ub = line.split(", ").nth(1)?;
    Some(format!("{}g_token.SetValue({off}, {ub}.GetValue(0));{}", &src[..at], &src[line_end..]))
}

/// Bugs planted in the generated kernels, each of a kind the emulator must
/// catch; the generated kernels pass the same runs:
/// - `process` without its first `qin.EnQue/DeQue`: MTE2 -> V hazard;
/// - `verify` without its `PipeBarrier<PIPE_V>` (Sub then Maxs in place):
///   strict vector pipe, quiet only with `ASCENDC_EMU_AUTO_SYNC=1`;
/// - `draw` writing its token with a scalar `SetValue` into GM: two rows on
///   two cores share a 64-byte DataCache line;
/// - `remap_draft` without its `PipeBarrier<PIPE_MTE3>` between the -inf
///   `q_logprobs` row and the scatter into it (N3): same-pipe GM WAW.
#[test]
fn planted_bugs_in_generated_kernels_are_caught() {
    let Some(cxx) = gxx() else {
        eprintln!("skipping: g++ not found");
        return;
    };
    let good = driver().unwrap();
    let dir = work_dir().join("planted");
    std::fs::create_dir_all(&dir).unwrap();
    let src = |k: &str| registry::find(k).unwrap().ascendc.unwrap();
    assert!(
        src("process").contains("AscendC::TQue<AscendC::QuePosition::VECIN, 2> qin;"),
        "process stages its loads through a depth-2 TQue"
    );
    let planted = [
        (
            "process",
            drop_enque(src("process")).expect("process stages a row tile through TQue<VECIN> and reads it on V"),
        ),
        (
            "verify",
            drop_line(src("verify"), "AscendC::PipeBarrier<PIPE_V>();").expect("verify has a V -> V dependency"),
        ),
        ("draw", scalar_token_store(src("draw")).expect("draw stores its token by DMA")),
        (
            "remap_draft",
            drop_line(src("remap_draft"), "AscendC::PipeBarrier<PIPE_MTE3>();")
                .expect("remap_draft orders its -inf row before the scatter into it"),
        ),
    ];
    let specs: Vec<KernelSpec> = planted
        .iter()
        .map(|(k, s)| KernelSpec {
            ascendc: Some(Box::leak(s.clone().into_boxed_str())),
            ..*registry::find(k).unwrap()
        })
        .collect();
    let drv = dir.join("driver.cpp");
    std::fs::write(&drv, driver_source(&dir, &specs.iter().collect::<Vec<_>>())).unwrap();
    let bad = dir.join("driver");
    compile(&cxx, &drv, &bad, false).unwrap();

    let (n, rows) = (64u32, 2u32);
    let (nn, ru) = ((n * rows) as usize, rows as usize);
    let logits: Vec<f32> = (0..n * rows).map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.0).collect();
    let process = [
        Val::F32(logits.clone()),
        Val::SU32(n),
        Val::F32(vec![0.7; ru]),
        Val::F32(vec![0.9; ru]),
        Val::I32(vec![-1; ru]),
        Val::F32(vec![0.0; ru]),
        Val::U32(vec![0; ru]),
        Val::F32(vec![0.0; nn]),
        Val::SU32(rows),
    ];
    let lps: Vec<f32> = (0..nn).map(|i| -((i % 64) as f32) * 0.1 - 0.5).collect();
    let verify = [
        Val::F32(lps.clone()),
        Val::I32((0..nn as i32).map(|i| i % 64).collect()),
        Val::F32(lps.iter().map(|x| x - 0.3).collect()),
        Val::SU32(n),
        Val::I32(vec![3; ru]),
        Val::F32(vec![-0.4; ru]),
        Val::U64(vec![7; ru]),
        Val::U64(vec![1; ru]),
        Val::U64(vec![2; ru]),
        Val::U32(vec![0; ru]),
        Val::I32(vec![-1; ru]),
        Val::SU32(rows),
    ];
    let draw = [
        Val::F32(lps),
        Val::I32((0..nn as i32).collect()),
        Val::SU32(n),
        Val::U64(vec![7; ru]),
        Val::U64(vec![1; ru]),
        Val::I32(vec![-1; ru]),
        Val::SU32(rows),
    ];
    // One row per core: candidates 7 i mod 64, two drafts (ids 3 and 9) scattered into the -inf q row.
    let remap = [
        Val::I32((0..nn as i32).map(|i| (i % 64) * 7 % 64).collect()),
        Val::SU32(n),
        Val::SU32(64),
        Val::I32([3, 9].repeat(ru)),
        Val::F32([-0.5, -1.0].repeat(ru)),
        Val::SU32(2),
        Val::I32(vec![3; ru]),
        Val::I32(vec![-1; 64 * ru]),
        Val::F32(vec![0.0; nn]),
        Val::I32(vec![-1; ru]),
        Val::F32(vec![0.0; ru]),
        Val::SU32(rows),
    ];
    let cases: [(&str, &[Val], &str, &str); 4] = [
        ("process", &process, "HAZARD", "written by pipe MTE2"),
        ("verify", &verify, "HAZARD", "without PipeBarrier<PIPE_V>"),
        ("draw", &draw, "CACHE", "written by a scalar SetValue in block 1 and also by block 0"),
        ("remap_draft", &remap, "HAZARD", "written by an earlier MTE3 DMA"),
    ];
    for (k, args, kind, detail) in cases {
        let (code, err) = run_driver(good, &dir, k, 64, 2, args, &[]);
        assert_eq!(code, Some(0), "the generated {k} must pass: {err}");
        let (code, err) = run_driver(&bad, &dir, k, 64, 2, args, &[]);
        assert_eq!(code, Some(3), "the planted bug in {k} must be caught: {err}");
        assert!(err.contains(&format!("ascendc-emu: {kind}:")) && err.contains(detail), "{k}: {err}");
    }
    // With the compiler's auto-sync, the missing vector barrier is its job.
    let (code, err) = run_driver(&bad, &dir, "verify", 64, 2, &verify, &[("ASCENDC_EMU_AUTO_SYNC", "1")]);
    assert_eq!(code, Some(0), "{err}");
}
