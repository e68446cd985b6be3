//! One sampler step on Ascend as an ordered launch list over a table of GM
//! buffers, so any executor runs it the same way: the ACL runtime on a 910B
//! ([`super::acl`]), the x86 emulator (`tests/ascendc_emulation.rs`), or the
//! CPU programs of the same kernels ([`CpuDevice`], the list's own check).
//!
//! The order is the CUDA backend's (fused kernels), SAMPLER.md section 3:
//! `mask_check`, `force_topn`, then either `process_draw` (full-row path) or
//! `row_mass` + `process_prefix_draw` (the prefix path without force top-k,
//! [`StepPlan::prefix_width`], re-run on the full-row path when a row's kept
//! set overflows the prefix), then `remap_draft` + `verify` when a row
//! verifies drafts, `finalize`, `tree_walk` when a group is a tree
//! (section 11), `token_info_top`, and `raw_logprobs` when a row asks for
//! raw logprobs (section 10.3).
//!
//! When the engine's shared step pipeline lands, [`StepLaunches::build`] is
//! where its launch order plugs in; [`run_step`] already takes the prefix
//! path and its fallback.

use sampler_kernels::registry;
use sampler_kernels::rt::cpu::{Arg as CpuArg, Gm};
use sampler_kernels::spec::{ParamKind, Variant};

use crate::error::BackendError;
use crate::plan::{mass_chunks, raw_tiles, StepPlan, StepResult, MASS_CHUNK};

use super::MAX_N_ASCEND;

/// A host copy of one GM buffer of the step (`[len]` of its dtype).
#[derive(Clone, Debug, PartialEq)]
pub enum Buf {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    U64(Vec<u64>),
}

impl Buf {
    /// The buffer's bytes (little-endian elements), for uploads.
    pub fn bytes(&self) -> &[u8] {
        fn b<T>(v: &[T]) -> &[u8] {
            // SAFETY: plain-old-data elements viewed as bytes.
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        }
        match self {
            Buf::F32(v) => b(v),
            Buf::I32(v) => b(v),
            Buf::U32(v) => b(v),
            Buf::U64(v) => b(v),
        }
    }

    /// The buffer's bytes, writable, for downloads.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        fn b<T>(v: &mut [T]) -> &mut [u8] {
            // SAFETY: plain-old-data elements (every bit pattern valid) viewed as bytes.
            unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
        }
        match self {
            Buf::F32(v) => b(v),
            Buf::I32(v) => b(v),
            Buf::U32(v) => b(v),
            Buf::U64(v) => b(v),
        }
    }

    fn f32s(&self) -> &[f32] {
        match self {
            Buf::F32(v) => v,
            _ => &[],
        }
    }
    fn i32s(&self) -> &[i32] {
        match self {
            Buf::I32(v) => v,
            _ => &[],
        }
    }
    fn u32s(&self) -> &[u32] {
        match self {
            Buf::U32(v) => v,
            _ => &[],
        }
    }
}

/// One kernel argument: a buffer of the step's table (by index) or a scalar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    Buf(usize),
    U32(u32),
    I32(i32),
}

/// One launch of the entry `{kernel}_t{tile}` over `programs` programs
/// (rows, row chunks or groups); `args` are the kernel's parameters in
/// order (the entry's trailing `programs` is added by the executor).
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub kernel: &'static str,
    pub tile: u32,
    pub programs: u32,
    pub args: Vec<Arg>,
}

/// Runs launch lists: buffers in, the launches in order, buffers out.
pub trait Device {
    /// Runs `launches` in order on `bufs` (uploaded before, downloaded after).
    /// Errors: the executor's message (compile, launch or emulator failure).
    fn run(&mut self, bufs: &mut [Buf], launches: &[Launch]) -> Result<(), String>;
}

/// The Ascend tile of `kernel` for width `n`: its only variant, or the
/// smallest tile >= n. Errors when that tile is above 4096 (not emitted
/// for Ascend) or the kernel is unknown.
pub fn tile_for(kernel: &str, n: u32) -> Result<u32, String> {
    let spec = registry::find(kernel).ok_or_else(|| format!("unknown kernel `{kernel}`"))?;
    let tile = if spec.variants.len() == 1 { spec.variants[0].tile } else { Variant::pick(spec.variants, n).map_or(0, |v| v.tile) };
    if tile == 0 || tile > MAX_N_ASCEND {
        return Err(format!("kernel `{kernel}` has no Ascend variant for width {n} (tiles up to {MAX_N_ASCEND})"));
    }
    Ok(tile)
}

/// Indices of the result buffers in [`StepLaunches::bufs`].
#[derive(Clone, Debug)]
struct Outputs {
    row_status: usize,
    cand_ids: usize,
    logprobs: usize,
    overflow: usize,
    tokens: usize,
    accepted: usize,
    group_status: usize,
    token_lp: usize,
    sum_smaller: usize,
    top_ids: usize,
    top_lps: usize,
    /// `tree_walk`'s `[R]` path, when the step has a tree.
    path: Option<usize>,
    n: u32,
}

/// The buffers and the ordered launches of one path of a step.
#[derive(Clone, Debug)]
pub struct StepLaunches {
    pub bufs: Vec<Buf>,
    pub launches: Vec<Launch>,
    out: Outputs,
}

impl StepLaunches {
    /// The launch list of `p` on the full-row path (`prefix == None`) or
    /// the prefix path of width `w`. Errors: a width above 4096.
    pub fn build(p: &StepPlan, prefix: Option<u32>) -> Result<StepLaunches, String> {
        let (r, v, kk) = (p.rows, p.vocab, p.k);
        let n = prefix.unwrap_or(p.n);
        if n > MAX_N_ASCEND {
            return Err(format!("N = {n} is above the Ascend limit {MAX_N_ASCEND}"));
        }
        let g = p.groups() as u32;
        let (ru, nn) = (r as usize, (r * n) as usize);
        let mut bufs: Vec<Buf> = Vec::new();
        let mut add = |b: Buf| {
            bufs.push(b);
            Arg::Buf(bufs.len() - 1)
        };
        let logits = add(Buf::F32(p.logits.clone()));
        let masks = add(Buf::U32(p.masks.clone()));
        let has_mask = add(Buf::U32(p.has_mask.clone()));
        let row_status = add(Buf::I32(vec![0; ru]));
        let cand = add(Buf::F32(vec![0.0; nn]));
        let cand_ids = add(Buf::I32(vec![0; nn]));
        let temperature = add(Buf::F32(p.temperature.clone()));
        let top_p = add(Buf::F32(p.top_p.clone()));
        let top_k = add(Buf::I32(p.top_k.clone()));
        let min_p = add(Buf::F32(p.min_p.clone()));
        let order = add(Buf::U32(p.filter_order.clone()));
        // mask_check writes the raw partial sums (section 10.3) of raw rows only.
        let tiles = raw_tiles(v);
        let raw = add(Buf::U32(p.raw_logprobs.clone()));
        let raw_max = add(Buf::F32(vec![f32::NEG_INFINITY; ru * tiles as usize]));
        let raw_sum = add(Buf::U64(vec![0; ru * tiles as usize]));
        let seed = add(Buf::U64(p.seed.clone()));
        let seq_draw = add(Buf::U64(p.seq_draw.clone()));
        let logprobs = add(Buf::F32(vec![0.0; nn]));
        let overflow = add(Buf::U32(vec![0; ru]));
        let fresh = add(Buf::I32(vec![-1; ru]));
        let accept = add(Buf::U32(vec![0; ru]));
        let residual = add(Buf::I32(vec![-1; ru]));
        let mut launches = vec![
            Launch { kernel: "mask_check", tile: tile_for("mask_check", v)?, programs: r, args: vec![logits, Arg::U32(v), masks, has_mask, raw, raw_max, raw_sum, row_status] },
            Launch { kernel: "force_topn", tile: tile_for("force_topn", n)?, programs: r, args: vec![logits, Arg::U32(v), Arg::U32(n), cand, cand_ids] },
        ];
        if prefix.is_some() {
            let chunks = mass_chunks(v);
            let mass = add(Buf::U64(vec![0; ru * chunks as usize]));
            launches.push(Launch {
                kernel: "row_mass",
                tile: tile_for("row_mass", 1)?,
                programs: r * chunks,
                args: vec![logits, Arg::U32(v), Arg::U32(MASS_CHUNK), Arg::U32(chunks), cand, Arg::U32(n), temperature, mass],
            });
            launches.push(Launch {
                kernel: "process_prefix_draw",
                tile: tile_for("process_prefix_draw", n)?,
                programs: r,
                args: vec![cand, cand_ids, Arg::U32(n), Arg::U32(v), mass, Arg::U32(chunks), temperature, top_p, top_k, min_p, order, seed, seq_draw, logprobs, overflow, fresh],
            });
        } else {
            launches.push(Launch {
                kernel: "process_draw",
                tile: tile_for("process_draw", n)?,
                programs: r,
                args: vec![cand, cand_ids, Arg::U32(n), temperature, top_p, top_k, min_p, order, seed, seq_draw, logprobs, fresh],
            });
        }
        // Draft distributions and the col_of scratch: read by remap_draft
        // (chains) and tree_walk (trees with draft rows); 1-element dummies
        // when neither reads them.
        let wide = p.any_verify || (p.any_tree && p.draft_width > 0);
        let draft_ids = add(Buf::I32(if wide { p.draft_ids.clone() } else { vec![-1] }));
        let draft_lps = add(Buf::F32(if wide { p.draft_lps.clone() } else { vec![f32::NEG_INFINITY] }));
        let col_of = add(Buf::I32(vec![-1; if wide { ru * v as usize } else { 1 }]));
        let seq_accept = add(Buf::U64(p.seq_accept.clone()));
        let seq_residual = add(Buf::U64(p.seq_residual.clone()));
        if p.any_verify {
            let drafts = add(Buf::I32(p.drafts.clone()));
            let q_lps = add(Buf::F32(vec![0.0; nn]));
            let draft_col = add(Buf::I32(vec![-1; ru]));
            let draft_q = add(Buf::F32(vec![f32::NEG_INFINITY; ru]));
            launches.push(Launch {
                kernel: "remap_draft",
                tile: tile_for("remap_draft", n)?,
                programs: r,
                args: vec![cand_ids, Arg::U32(n), Arg::U32(v), draft_ids, draft_lps, Arg::U32(p.draft_width), drafts, col_of, q_lps, draft_col, draft_q],
            });
            launches.push(Launch {
                kernel: "verify",
                tile: tile_for("verify", n)?,
                programs: r,
                args: vec![logprobs, cand_ids, q_lps, Arg::U32(n), draft_col, draft_q, seed, seq_accept, seq_residual, accept, residual],
            });
        }
        let group_first = add(Buf::U32(p.group_first.clone()));
        let group_rows = add(Buf::U32(p.group_rows.clone()));
        let group_kind = add(Buf::U32(p.group_kind.clone()));
        let group_status_in = add(Buf::I32(p.group_status.clone()));
        let golden = add(Buf::I32(p.golden.clone()));
        let drafts = add(Buf::I32(p.drafts.clone()));
        let tokens = add(Buf::I32(vec![-1; ru]));
        let lookup = add(Buf::I32(vec![-1; ru]));
        let accepted = add(Buf::U32(vec![0; g as usize]));
        let group_status = add(Buf::I32(vec![0; g as usize]));
        launches.push(Launch {
            kernel: "finalize",
            tile: tile_for("finalize", 1)?,
            programs: g,
            args: vec![group_first, group_rows, group_kind, group_status_in, row_status, golden, drafts, accept, residual, fresh, tokens, lookup, accepted, group_status],
        });
        let path = if p.any_tree {
            let tree_mode = add(Buf::U32(p.tree_mode.clone()));
            let tree_parent = add(Buf::I32(p.tree_parent.clone()));
            let tree_token = add(Buf::I32(p.tree_token.clone()));
            let path = add(Buf::I32(vec![-1; ru]));
            let wd = p.draft_width;
            launches.push(Launch {
                kernel: "tree_walk",
                tile: tile_for("tree_walk", n.max(wd))?,
                programs: g,
                args: vec![
                    group_first, group_rows, group_kind, tree_mode, group_status, tree_parent, tree_token, golden, fresh, logprobs, cand_ids,
                    Arg::U32(n), Arg::U32(v), draft_ids, draft_lps, Arg::U32(wd), col_of, seed, seq_accept, seq_residual, tokens, lookup, accepted,
                    path,
                ],
            });
            Some(path)
        } else {
            None
        };
        let token_lp = add(Buf::F32(vec![f32::NEG_INFINITY; ru]));
        let sum_smaller = add(Buf::F32(vec![0.0; ru]));
        let top_ids = add(Buf::I32(vec![-1; ru * kk as usize]));
        let top_lps = add(Buf::F32(vec![f32::NEG_INFINITY; ru * kk as usize]));
        launches.push(Launch {
            kernel: "token_info_top",
            tile: tile_for("token_info_top", n)?,
            programs: r,
            args: vec![cand, cand_ids, logprobs, Arg::U32(n), lookup, Arg::U32(kk), token_lp, sum_smaller, top_ids, top_lps],
        });
        if p.any_raw {
            launches.push(Launch {
                kernel: "raw_logprobs",
                tile: tile_for("raw_logprobs", kk.max(1))?,
                programs: r,
                args: vec![logits, Arg::U32(v), raw, raw_max, raw_sum, Arg::U32(tiles), lookup, Arg::U32(kk), top_ids, token_lp, top_lps],
            });
        }
        let ix = |a: Arg| match a {
            Arg::Buf(i) => i,
            _ => unreachable!("buffer arguments only"),
        };
        let out = Outputs {
            row_status: ix(row_status),
            cand_ids: ix(cand_ids),
            logprobs: ix(logprobs),
            overflow: ix(overflow),
            tokens: ix(tokens),
            accepted: ix(accepted),
            group_status: ix(group_status),
            token_lp: ix(token_lp),
            sum_smaller: ix(sum_smaller),
            top_ids: ix(top_ids),
            top_lps: ix(top_lps),
            path: path.map(ix),
            n,
        };
        Ok(StepLaunches { bufs, launches, out })
    }

    /// The step's result from the buffers after a run, and the prefix path's
    /// `[R]` overflow flags. Errors: a processed row out of range.
    pub fn result(&self, p: &StepPlan) -> Result<(StepResult, Vec<u32>), BackendError> {
        let o = &self.out;
        let b = &self.bufs;
        let nn = o.n as usize;
        let (cand_ids, logprobs) = (b[o.cand_ids].i32s(), b[o.logprobs].f32s());
        let mut processed_ids = Vec::new();
        let mut processed_lps = Vec::new();
        for row in p.processed_rows_checked("ascend")? {
            processed_ids.extend_from_slice(&cand_ids[row * nn..(row + 1) * nn]);
            processed_lps.extend_from_slice(&logprobs[row * nn..(row + 1) * nn]);
        }
        let res = StepResult {
            row_status: b[o.row_status].i32s().to_vec(),
            tokens: b[o.tokens].i32s().to_vec(),
            token_lp: b[o.token_lp].f32s().to_vec(),
            sum_smaller: b[o.sum_smaller].f32s().to_vec(),
            top_ids: b[o.top_ids].i32s().to_vec(),
            top_lps: b[o.top_lps].f32s().to_vec(),
            accepted: b[o.accepted].u32s().to_vec(),
            group_status: b[o.group_status].i32s().to_vec(),
            processed_ids,
            processed_lps,
            path: o.path.map_or_else(Vec::new, |i| b[i].i32s().to_vec()),
        };
        Ok((res, b[o.overflow].u32s().to_vec()))
    }
}

/// One step on `dev`: the prefix path when the plan allows it, falling back
/// to the full-row path when a row's kept set overflows the prefix (as the
/// CPU backend). Errors: [`BackendError::Device`] with the executor's message.
pub fn run_step(dev: &mut dyn Device, p: &StepPlan) -> Result<StepResult, BackendError> {
    let fail = |msg: String| BackendError::Device { backend: "ascend", msg };
    if let Some(w) = p.prefix_width() {
        let mut s = StepLaunches::build(p, Some(w)).map_err(fail)?;
        dev.run(&mut s.bufs, &s.launches).map_err(fail)?;
        let (res, overflow) = s.result(p)?;
        if !p.prefix_overflowed(&res.group_status, &overflow) {
            return Ok(res);
        }
    }
    let mut s = StepLaunches::build(p, None).map_err(fail)?;
    dev.run(&mut s.bufs, &s.launches).map_err(fail)?;
    Ok(s.result(p)?.0)
}

/// Compares a device result with the CPU backend's: statuses, tokens,
/// accepted counts, tree paths and top ids identical; on rows with status 0, token
/// logprobs, sum_smaller_probs and top logprobs within 1e-4 + 1e-5 |cpu|.
/// Errors: the first difference, named.
pub fn compare(got: &StepResult, cpu: &StepResult) -> Result<(), String> {
    let same = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
        let (a, b) = (format!("{a:?}"), format!("{b:?}"));
        if a == b {
            Ok(())
        } else {
            Err(format!("{what}: device {a}, cpu {b}"))
        }
    };
    same("row_status", &got.row_status, &cpu.row_status)?;
    same("group_status", &got.group_status, &cpu.group_status)?;
    same("tokens", &got.tokens, &cpu.tokens)?;
    same("accepted", &got.accepted, &cpu.accepted)?;
    same("tree path", &got.path, &cpu.path)?;
    let close = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a - b).abs() as f64 <= 1e-4 + 1e-5 * b.abs() as f64;
    let k = if cpu.row_status.is_empty() { 0 } else { cpu.top_ids.len() / cpu.row_status.len() };
    for r in (0..cpu.row_status.len()).filter(|&r| cpu.row_status[r] == 0) {
        if !close(got.token_lp[r], cpu.token_lp[r]) || !close(got.sum_smaller[r], cpu.sum_smaller[r]) {
            return Err(format!("row {r}: token_lp {} / {}, sum_smaller {} / {} (device / cpu)", got.token_lp[r], cpu.token_lp[r], got.sum_smaller[r], cpu.sum_smaller[r]));
        }
        let s = r * k..(r + 1) * k;
        same(&format!("row {r} top_ids"), &got.top_ids[s.clone()].to_vec(), &cpu.top_ids[s.clone()].to_vec())?;
        if got.top_lps[s.clone()].iter().zip(&cpu.top_lps[s]).any(|(a, b)| !close(*a, *b)) {
            return Err(format!("row {r}: top logprobs differ"));
        }
    }
    Ok(())
}

/// Hardware probes: small launch lists with a stated expected outcome,
/// run by the emulator in CI and by `hardware_*` tests on a 910B.
pub mod probe {
    use super::{Arg, Buf, Launch};

    /// `force_topn_t64` on one row of 64 logits in two `TILE/2` chunks:
    /// NaN at ids 1 and 5, 1.0 at ids 3 and 40 (one per chunk), 0.0, -0.0
    /// and 0.0 at ids 0, 2 and 4, -inf elsewhere; N = 8. Returns the
    /// buffers, the launch and the ids the stated Sort32/MrgSort order gives
    /// (docs/ASCEND.md: every NaN first, -0.0 == +0.0, ties in id order,
    /// the lower MrgSort list first): `[1, 5, 3, 40, 0, 2, 4, 6]`.
    pub fn sort_ties() -> (Vec<Buf>, Launch, Vec<i32>) {
        let mut row = vec![f32::NEG_INFINITY; 64];
        row[0] = 0.0;
        row[1] = f32::NAN;
        row[2] = -0.0;
        row[3] = 1.0;
        row[4] = 0.0;
        row[5] = -f32::NAN;
        row[40] = 1.0;
        let bufs = vec![Buf::F32(row), Buf::F32(vec![0.0; 8]), Buf::I32(vec![-1; 8])];
        let launch = Launch { kernel: "force_topn", tile: 64, programs: 1, args: vec![Arg::Buf(0), Arg::U32(64), Arg::U32(8), Arg::Buf(1), Arg::Buf(2)] };
        (bufs, launch, vec![1, 5, 3, 40, 0, 2, 4, 6])
    }

    /// The hand-written probe kernel `exp_div_probe` (vector `Exp` and
    /// `Div` over GM buffers, `sampler-host/ascendc/probes/exp_div_probe.cpp`).
    pub const EXP_DIV_SOURCE: &str = include_str!("../../../ascendc/probes/exp_div_probe.cpp");

    /// `n` probe inputs: `x` evenly over [-104, 89] (the whole range where
    /// `exp` is finite and not flushed), divisors `y` spread over
    /// [0.05, 10.05) by a multiplicative hash.
    pub fn exp_div_inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
        let x = (0..n).map(|i| -104.0 + 193.0 * (i as f64 / n.max(1) as f64)).map(|v| v as f32).collect();
        let y = (0..n).map(|i| 0.05 + 10.0 * (((i as u64).wrapping_mul(2654435761) % (1 << 20)) as f64 / (1 << 20) as f64)).map(|v| v as f32).collect();
        (x, y)
    }

    /// Histogram of the ulp distance of the device's `e = Exp(x)` and
    /// `d = x / y` from `rt::math::exp_f32` and IEEE division: counts of
    /// 0, 1, 2, 3+ ulp and of results flushed to zero (the expected value
    /// subnormal); returns `(exp, div)` histograms and the worst distance.
    pub fn ulp_histogram(x: &[f32], y: &[f32], e: &[f32], d: &[f32]) -> ([u64; 5], [u64; 5], u32) {
        fn bucket(h: &mut [u64; 5], worst: &mut u32, got: f32, want: f32) {
            if got.to_bits() == want.to_bits() || got == want {
                h[0] += 1;
            } else if got == 0.0 && want.is_subnormal() {
                h[4] += 1;
            } else {
                let dist = if got.is_finite() && want.is_finite() && got.is_sign_negative() == want.is_sign_negative() {
                    (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs() as u32
                } else {
                    u32::MAX
                };
                *worst = (*worst).max(dist);
                h[dist.min(3) as usize] += 1;
            }
        }
        let (mut he, mut hd, mut worst) = ([0u64; 5], [0u64; 5], 0u32);
        for i in 0..x.len() {
            bucket(&mut he, &mut worst, e[i], sampler_kernels::rt::math::exp_f32(x[i]));
            bucket(&mut hd, &mut worst, d[i], x[i] / y[i]);
        }
        (he, hd, worst)
    }

    /// The ids `force_topn` wrote (the third buffer of [`sort_ties`]).
    pub fn ids(bufs: &[Buf]) -> Vec<i32> {
        bufs[2].i32s().to_vec()
    }
}

/// Runs launch lists with the kernels' CPU programs (one program at a
/// time, in order): the reference executor the launch list is tested with.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuDevice;

impl Device for CpuDevice {
    fn run(&mut self, bufs: &mut [Buf], launches: &[Launch]) -> Result<(), String> {
        for l in launches {
            let spec = registry::find(l.kernel).ok_or_else(|| format!("unknown kernel `{}`", l.kernel))?;
            if spec.params.len() != l.args.len() {
                return Err(format!("{}: {} arguments for {} parameters", l.kernel, l.args.len(), spec.params.len()));
            }
            // Raw views of the buffers (a kernel may name one buffer twice, read-only).
            let ptrs: Vec<*mut Buf> = bufs.iter_mut().map(|b| b as *mut Buf).collect();
            let mut args = Vec::with_capacity(l.args.len());
            for (a, prm) in l.args.iter().zip(spec.params) {
                let write = matches!(prm.kind, ParamKind::GmMut(_));
                args.push(match *a {
                    Arg::U32(x) => CpuArg::U32(x),
                    Arg::I32(x) => CpuArg::I32(x),
                    Arg::Buf(i) => {
                        // SAFETY: the index is in range (built by StepLaunches) and each
                        // kernel's programs write only their own rows.
                        let p = ptrs[i];
                        let b = unsafe { &mut *p };
                        match b {
                            Buf::F32(v) => CpuArg::GmF32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
                            Buf::I32(v) => CpuArg::GmI32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
                            Buf::U32(v) => CpuArg::GmU32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
                            Buf::U64(v) => CpuArg::GmU64(if write { Gm::new_mut(v) } else { Gm::new(v) }),
                        }
                    }
                });
            }
            for prog in 0..l.programs {
                // SAFETY: buffers sized by StepLaunches::build for these shapes.
                unsafe { (spec.cpu)(prog, &args) }.map_err(|e| format!("{}: {e}", l.kernel))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;
    use crate::plan::Backend;

    /// The launch list, run by the kernels' CPU programs, gives the CPU
    /// backend's result on every golden case with N <= 4096 (prefix path
    /// and fallback included).
    #[test]
    fn the_launch_list_reproduces_the_cpu_backend_on_golden_cases() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/golden");
        let files = crate::case::golden_files(&dir);
        assert!(!files.is_empty(), "golden cases not found at {}", dir.display());
        let mut ran = 0;
        for f in files {
            let case = crate::case::parse_case(&std::fs::read_to_string(&f).unwrap()).unwrap();
            let v = case.vocab_size;
            let n = if case.force_topk == 0 || case.force_topk >= v { v } else { case.force_topk };
            let mut reqs = Vec::new();
            let mut logits = Vec::new();
            for (r, l) in case.requests.iter().flatten() {
                reqs.push(r.clone());
                logits.extend_from_slice(l);
            }
            let Ok((p, _)) = crate::batch::build_plan(v, n, case.nextn, &logits, &reqs) else { continue };
            if p.n > MAX_N_ASCEND {
                continue;
            }
            let want = CpuBackend::default().run(&p).unwrap();
            let got = run_step(&mut CpuDevice, &p).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            // Debug text: exact (shortest round-trip floats) and NaN equals NaN
            // (the discarded rows of invalid logits carry NaN logprobs).
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "{}", f.display());
            ran += 1;
        }
        assert!(ran > 40, "{ran} golden cases ran");
    }

    #[test]
    fn widths_above_4096_are_an_error_naming_the_limit() {
        let e = tile_for("process_draw", 8192).unwrap_err();
        assert!(e.contains("no Ascend variant for width 8192"), "{e}");
        assert_eq!(tile_for("process_draw", 1000), Ok(1024));
        assert_eq!(tile_for("finalize", 1).map(|t| t <= 4096), Ok(true));
    }
}
