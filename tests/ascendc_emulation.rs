//! The generated AscendC kernels, compiled with g++ against our x86
//! emulation of the AscendC subset (sampler-host/ascendc/emu), run kernel by
//! kernel on inputs prepared from the golden cases, and compared with the
//! CPU kernel programs on the same input buffers: ids and statuses
//! identical, floats within |a - b| <= 1e-4 + 1e-5 |b|. Besides the CPU
//! backend's sequence, the kernels only the CUDA backend launches are run
//! too: the fused `process_draw` / `process_prefix_draw` / `token_info_top`,
//! `row_mass`, and the multi-block `topn_chunk` + `topn_merge`.
//!
//! Skips (passing) only when g++ is absent.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::ascendc_emu::*;
use sampler_host::request::Request;
use sampler_kernels::registry;
use sampler_kernels::spec::KernelSpec;

/// Runs one golden case through every kernel; returns a one-line summary.
fn run_case(path: &Path) -> Result<Option<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let case = sampler_host::case::parse_case(&text).map_err(|e| e.to_string())?;
    let v = case.vocab_size;
    let n = if case.force_topk == 0 || case.force_topk >= v { v } else { case.force_topk };
    if n > 4096 {
        return Ok(None);
    }
    let mut reqs: Vec<Request> = Vec::new();
    let mut logits = Vec::new();
    for (r, l) in case.requests.iter().flatten() {
        reqs.push(r.clone());
        logits.extend_from_slice(l);
    }
    let (p, _) = sampler_host::batch::build_plan(v, n, case.nextn, &logits, &reqs).map_err(|e| e.to_string())?;
    let r = p.rows;
    let g = p.groups() as u32;
    let bad = |what: &str, row: usize| format!("{}: {what} differs at {row}", path.display());

    // 1. mask_check (with the raw partial sums of section 10.3 for raw rows)
    let tiles = sampler_host::plan::raw_tiles(v);
    let rt = (r * tiles) as usize;
    let args = vec![
        Val::F32(p.logits.clone()),
        Val::SU32(v),
        Val::U32(p.masks.clone()),
        Val::U32(p.has_mask.clone()),
        Val::U32(p.raw_logprobs.clone()),
        Val::F32(vec![f32::NEG_INFINITY; rt]),
        Val::U64(vec![0; rt]),
        Val::I32(vec![0; r as usize]),
    ];
    let (c, e) = run_both("mask_check", tile_for("mask_check", v), r, &args)?;
    if c[7].i32s() != e[7].i32s() {
        return Err(bad("mask_check status", 0));
    }
    let status = c[7].i32s().to_vec();
    for i in (0..r as usize).filter(|&i| status[i] == 0 && p.raw_logprobs[i] != 0) {
        let s = i * tiles as usize..(i + 1) * tiles as usize;
        // Tile maxima exactly; the sums to a relative 1e-5 (AscendC's Exp, as row_mass).
        let (cm, em) = (&c[5].f32s()[s.clone()], &e[5].f32s()[s.clone()]);
        if cm.iter().zip(em).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(format!("{} (cpu {cm:?} emu {em:?})", bad("mask_check raw_max", i)));
        }
        for (&a, &b) in c[6].u64s()[s.clone()].iter().zip(&e[6].u64s()[s]) {
            if (a as f64 - b as f64).abs() > 1e-5 * (a as f64) + 16.0 {
                return Err(format!("{} (cpu {a} emu {b})", bad("mask_check raw_sum", i)));
            }
        }
    }
    let (raw_max, raw_sum) = (c[5].clone(), c[6].clone());
    let ok_row = |i: usize| status[i] == 0;
    for i in 0..r as usize {
        if ok_row(i) && c[0].f32s()[i * v as usize..(i + 1) * v as usize].iter().map(|x| x.to_bits()).ne(e[0].f32s()[i * v as usize..(i + 1) * v as usize].iter().map(|x| x.to_bits())) {
            return Err(bad("masked logits", i));
        }
    }
    let masked = c[0].clone();
    let nn = n as usize;

    // 2. force_topn
    let args = vec![masked.clone(), Val::SU32(v), Val::SU32(n), Val::F32(vec![0.0; r as usize * nn]), Val::I32(vec![0; r as usize * nn])];
    let (c, e) = run_both("force_topn", tile_for("force_topn", n), r, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        let s = i * nn..(i + 1) * nn;
        if c[4].i32s()[s.clone()] != e[4].i32s()[s.clone()] || c[3].f32s()[s.clone()].iter().zip(&e[3].f32s()[s]).any(|(a, b)| a.to_bits() != b.to_bits() && !(*a == 0.0 && *b == 0.0)) {
            return Err(bad("force_topn", i));
        }
    }
    let (cand, cand_ids) = (c[3].clone(), c[4].clone());

    // 3. process
    let (min_p, order) = (Val::F32(p.min_p.clone()), Val::U32(p.filter_order.clone()));
    let args = vec![
        cand.clone(),
        Val::SU32(n),
        Val::F32(p.temperature.clone()),
        Val::F32(p.top_p.clone()),
        Val::I32(p.top_k.clone()),
        min_p.clone(),
        order.clone(),
        Val::F32(vec![0.0; r as usize * nn]),
    ];
    let (c, e) = run_both("process", tile_for("process", n), r, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        for j in i * nn..(i + 1) * nn {
            if !close(e[7].f32s()[j], c[7].f32s()[j]) {
                return Err(format!("{} (col {}: cpu {} emu {})", bad("process logprobs", i), j - i * nn, c[7].f32s()[j], e[7].f32s()[j]));
            }
        }
    }
    let logprobs = c[7].clone();

    // 4. draw
    let args = vec![logprobs.clone(), cand_ids.clone(), Val::SU32(n), Val::U64(p.seed.clone()), Val::U64(p.seq_draw.clone()), Val::I32(vec![-1; r as usize])];
    let (c, e) = run_both("draw", tile_for("draw", n), r, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        if c[5].i32s()[i] != e[5].i32s()[i] {
            return Err(bad("draw token", i));
        }
    }
    let fresh = c[5].clone();

    // 3-4 fused (process_draw, the CUDA backend's): emulated = CPU, and CPU = process then draw.
    let args = vec![
        cand.clone(),
        cand_ids.clone(),
        Val::SU32(n),
        Val::F32(p.temperature.clone()),
        Val::F32(p.top_p.clone()),
        Val::I32(p.top_k.clone()),
        min_p.clone(),
        order.clone(),
        Val::U64(p.seed.clone()),
        Val::U64(p.seq_draw.clone()),
        Val::F32(vec![0.0; r as usize * nn]),
        Val::I32(vec![-1; r as usize]),
    ];
    let (c, e) = run_both("process_draw", tile_for("process_draw", n), r, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        let s = i * nn..(i + 1) * nn;
        if c[11].i32s()[i] != e[11].i32s()[i] || c[11].i32s()[i] != fresh.i32s()[i] || e[10].f32s()[s.clone()].iter().zip(&c[10].f32s()[s.clone()]).any(|(a, b)| !close(*a, *b)) {
            return Err(bad("process_draw", i));
        }
        if c[10].f32s()[s.clone()].iter().zip(&logprobs.f32s()[s]).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(bad("process_draw (CPU) vs process", i));
        }
    }

    // 3-4 on the prefix path (row_mass + process_prefix_draw) over the same candidates.
    let mchunks = v.div_ceil(16384);
    let args = vec![masked.clone(), Val::SU32(v), Val::SU32(16384), Val::SU32(mchunks), cand.clone(), Val::SU32(n), Val::F32(p.temperature.clone()), Val::U64(vec![0; (r * mchunks) as usize])];
    let (c, e) = run_both("row_mass", tile_for("row_mass", 1), r * mchunks, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        // AscendC's vector Exp is not the CPU's polynomial bit for bit (docs/ASCEND.md):
        // the fixed-point sums agree to a relative 1e-5.
        let s = i * mchunks as usize..(i + 1) * mchunks as usize;
        for (&a, &b) in c[7].u64s()[s.clone()].iter().zip(&e[7].u64s()[s]) {
            if (a as f64 - b as f64).abs() > 1e-5 * (a as f64) + 16.0 {
                return Err(format!("{} (cpu {a} emu {b})", bad("row_mass", i)));
            }
        }
    }
    // Each side takes its own row_mass (the emulated weights use the emulated Exp).
    let args = |mass: Val| {
        vec![
            cand.clone(),
            cand_ids.clone(),
            Val::SU32(n),
            Val::SU32(v),
            mass,
            Val::SU32(mchunks),
            Val::F32(p.temperature.clone()),
            Val::F32(p.top_p.clone()),
            Val::I32(p.top_k.clone()),
            min_p.clone(),
            order.clone(),
            Val::U64(p.seed.clone()),
            Val::U64(p.seq_draw.clone()),
            Val::F32(vec![0.0; r as usize * nn]),
            Val::U32(vec![0; r as usize]),
            Val::I32(vec![-1; r as usize]),
        ]
    };
    let (c, _) = run_both("process_prefix_draw", tile_for("process_prefix_draw", n), r, &args(c[7].clone()))?;
    let (_, e) = run_both("process_prefix_draw", tile_for("process_prefix_draw", n), r, &args(e[7].clone()))?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        let s = i * nn..(i + 1) * nn;
        if c[14].u32s()[i] != e[14].u32s()[i] || c[15].i32s()[i] != e[15].i32s()[i] || e[13].f32s()[s.clone()].iter().zip(&c[13].f32s()[s.clone()]).any(|(a, b)| !close(*a, *b)) {
            let lp = |x: &Val| x.f32s()[s.clone()].iter().take(8).copied().collect::<Vec<f32>>();
            return Err(format!(
                "{} (overflow cpu {} emu {}, token cpu {} emu {}, logprobs cpu {:?} emu {:?})",
                bad("process_prefix_draw", i),
                c[14].u32s()[i],
                e[14].u32s()[i],
                c[15].i32s()[i],
                e[15].i32s()[i],
                lp(&c[13]),
                lp(&e[13])
            ));
        }
        // Without force top-k the candidates are all V: the prefix path is the full path.
        if n == v && (c[13].f32s()[s.clone()].iter().zip(&logprobs.f32s()[s]).any(|(a, b)| a.to_bits() != b.to_bits()) || c[15].i32s()[i] != fresh.i32s()[i]) {
            return Err(bad("process_prefix_draw (CPU, n = V) vs process + draw", i));
        }
    }

    // 2 on several blocks per row (topn_chunk + topn_merge), when two chunks hold n each.
    let clen = v.div_ceil(2);
    if v - clen >= n {
        let m = 2 * n;
        let args = vec![masked.clone(), Val::SU32(v), Val::SU32(clen), Val::SU32(2), Val::SU32(n), Val::F32(vec![0.0; (r * m) as usize]), Val::I32(vec![0; (r * m) as usize])];
        let (c, e) = run_both("topn_chunk", tile_for("topn_chunk", n), 2 * r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            // The chunk stage's order is the backend's (ids ascending on the CPU, top_n's on
            // AscendC): compare each chunk as a set of (id, logit bits).
            for ch in 0..2 {
                let s = (2 * i + ch) * nn..(2 * i + ch + 1) * nn;
                let set = |x: &Val, id: &Val| {
                    let mut v: Vec<(i32, u32)> = id.i32s()[s.clone()].iter().zip(&x.f32s()[s.clone()]).map(|(&a, &b)| (a, b.to_bits())).collect();
                    v.sort_unstable();
                    v
                };
                if set(&c[5], &c[6]) != set(&e[5], &e[6]) {
                    return Err(bad("topn_chunk", i));
                }
            }
        }
        let args = vec![e[5].clone(), e[6].clone(), Val::SU32(m), Val::SU32(n), Val::F32(vec![0.0; r as usize * nn]), Val::I32(vec![0; r as usize * nn])];
        let (c, e) = run_both("topn_merge", tile_for("topn_merge", n), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            let s = i * nn..(i + 1) * nn;
            if c[5].i32s()[s.clone()] != e[5].i32s()[s.clone()] || c[5].i32s()[s.clone()] != cand_ids.i32s()[s] {
                return Err(bad("topn_merge (vs force_topn)", i));
            }
        }
    }

    // 5-6. remap_draft + verify
    let mut accept = Val::U32(vec![0; r as usize]);
    let mut residual = Val::I32(vec![-1; r as usize]);
    if p.any_verify {
        let args = vec![
            cand_ids.clone(),
            Val::SU32(n),
            Val::SU32(v),
            Val::I32(p.draft_ids.clone()),
            Val::F32(p.draft_lps.clone()),
            Val::SU32(p.draft_width),
            Val::I32(p.drafts.clone()),
            Val::I32(vec![-1; r as usize * v as usize]),
            Val::F32(vec![0.0; r as usize * nn]),
            Val::I32(vec![-1; r as usize]),
            Val::F32(vec![f32::NEG_INFINITY; r as usize]),
        ];
        let (c, e) = run_both("remap_draft", tile_for("remap_draft", n), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            let s = i * nn..(i + 1) * nn;
            if c[8].f32s()[s.clone()].iter().zip(&e[8].f32s()[s]).any(|(a, b)| a.to_bits() != b.to_bits())
                || c[9].i32s()[i] != e[9].i32s()[i]
                || c[10].f32s()[i].to_bits() != e[10].f32s()[i].to_bits()
            {
                return Err(bad("remap_draft", i));
            }
        }
        let args = vec![
            logprobs.clone(),
            cand_ids.clone(),
            c[8].clone(),
            Val::SU32(n),
            c[9].clone(),
            c[10].clone(),
            Val::U64(p.seed.clone()),
            Val::U64(p.seq_accept.clone()),
            Val::U64(p.seq_residual.clone()),
            Val::U32(vec![0; r as usize]),
            Val::I32(vec![-1; r as usize]),
        ];
        let (c, e) = run_both("verify", tile_for("verify", n), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            if c[9].u32s()[i] != e[9].u32s()[i] || c[10].i32s()[i] != e[10].i32s()[i] {
                return Err(bad("verify", i));
            }
        }
        accept = c[9].clone();
        residual = c[10].clone();
    }

    // 7. finalize
    let args = vec![
        Val::U32(p.group_first.clone()),
        Val::U32(p.group_rows.clone()),
        Val::U32(p.group_kind.clone()),
        Val::I32(p.group_status.clone()),
        Val::I32(status.clone()),
        Val::I32(p.golden.clone()),
        Val::I32(p.drafts.clone()),
        accept,
        residual,
        fresh.clone(),
        Val::I32(vec![-1; r as usize]),
        Val::I32(vec![-1; r as usize]),
        Val::U32(vec![0; g as usize]),
        Val::I32(vec![0; g as usize]),
    ];
    let (c, e) = run_both("finalize", tile_for("finalize", 1), g, &args)?;
    for (k, what) in [(10, "tokens"), (11, "lookup"), (13, "group status")] {
        if c[k].i32s() != e[k].i32s() {
            return Err(bad(what, 0));
        }
    }
    if c[12].u32s() != e[12].u32s() {
        return Err(bad("accepted", 0));
    }
    let (mut tokens, mut lookup) = (c[10].i32s().to_vec(), c[11].clone());

    // 7b. tree_walk (section 11), after finalize
    if p.any_tree {
        let wd = p.draft_width;
        let args = vec![
            Val::U32(p.group_first.clone()),
            Val::U32(p.group_rows.clone()),
            Val::U32(p.group_kind.clone()),
            Val::U32(p.tree_mode.clone()),
            c[13].clone(),
            Val::I32(p.tree_parent.clone()),
            Val::I32(p.tree_token.clone()),
            Val::I32(p.golden.clone()),
            fresh.clone(),
            logprobs.clone(),
            cand_ids.clone(),
            Val::SU32(n),
            Val::SU32(v),
            Val::I32(p.draft_ids.clone()),
            Val::F32(p.draft_lps.clone()),
            Val::SU32(wd),
            Val::I32(vec![-1; if wd > 0 { r as usize * v as usize } else { 1 }]),
            Val::U64(p.seed.clone()),
            Val::U64(p.seq_accept.clone()),
            Val::U64(p.seq_residual.clone()),
            c[10].clone(),
            c[11].clone(),
            c[12].clone(),
            Val::I32(vec![-1; r as usize]),
        ];
        let (c, e) = run_both("tree_walk", tile_for("tree_walk", n.max(wd)), g, &args)?;
        for (k, what) in [(20, "tree_walk tokens"), (21, "tree_walk lookup"), (23, "tree_walk path")] {
            if c[k].i32s() != e[k].i32s() {
                return Err(bad(what, 0));
            }
        }
        if c[22].u32s() != e[22].u32s() {
            return Err(bad("tree_walk accepted", 0));
        }
        tokens = c[20].i32s().to_vec();
        lookup = c[21].clone();
    }

    // 8. token_info
    let args = vec![cand.clone(), cand_ids.clone(), logprobs.clone(), Val::SU32(n), lookup.clone(), Val::F32(vec![0.0; r as usize]), Val::F32(vec![0.0; r as usize])];
    let (c, e) = run_both("token_info", tile_for("token_info", n), r, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        if !close(e[5].f32s()[i], c[5].f32s()[i]) || !close(e[6].f32s()[i], c[6].f32s()[i]) {
            return Err(bad("token_info", i));
        }
    }
    let token_lp = c[5].clone();

    // 8-9 fused (token_info_top, the CUDA backend's)
    let kk = p.k;
    {
        let kn = kk as usize;
        let args = vec![
            cand.clone(),
            cand_ids.clone(),
            logprobs.clone(),
            Val::SU32(n),
            lookup.clone(),
            Val::SU32(kk),
            Val::F32(vec![0.0; r as usize]),
            Val::F32(vec![0.0; r as usize]),
            Val::I32(vec![-1; r as usize * kn.max(1)]),
            Val::F32(vec![0.0; r as usize * kn.max(1)]),
        ];
        let (c, e) = run_both("token_info_top", tile_for("token_info_top", n), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            if !close(e[6].f32s()[i], c[6].f32s()[i]) || !close(e[7].f32s()[i], c[7].f32s()[i]) {
                return Err(bad("token_info_top", i));
            }
            for j in i * kn..(i + 1) * kn {
                if c[8].i32s()[j] != e[8].i32s()[j] || !close(e[9].f32s()[j], c[9].f32s()[j]) {
                    return Err(bad("token_info_top top logprobs", i));
                }
            }
        }
    }

    // 9. top_logprobs
    let kn = kk as usize;
    let (mut top_ids, mut top_lps) = (Val::I32(vec![-1; r as usize * kn]), Val::F32(vec![f32::NEG_INFINITY; r as usize * kn]));
    if kk > 0 {
        let args = vec![cand_ids.clone(), logprobs.clone(), Val::SU32(n), Val::SU32(kk), Val::I32(vec![-1; r as usize * kn]), Val::F32(vec![0.0; r as usize * kn])];
        let (c, e) = run_both("top_logprobs", tile_for("top_logprobs", n), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            for j in i * kn..(i + 1) * kn {
                if c[4].i32s()[j] != e[4].i32s()[j] || !close(e[5].f32s()[j], c[5].f32s()[j]) {
                    return Err(bad("top_logprobs", i));
                }
            }
        }
        (top_ids, top_lps) = (c[4].clone(), c[5].clone());
    }

    // 10. raw_logprobs (section 10.3), when a row asks for them
    if p.any_raw {
        let args = vec![
            masked.clone(),
            Val::SU32(v),
            Val::U32(p.raw_logprobs.clone()),
            raw_max.clone(),
            raw_sum.clone(),
            Val::SU32(tiles),
            lookup.clone(),
            Val::SU32(kk),
            top_ids.clone(),
            token_lp.clone(),
            top_lps.clone(),
        ];
        let (c, e) = run_both("raw_logprobs", tile_for("raw_logprobs", kk.max(1)), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i) && p.raw_logprobs[i] != 0) {
            if !close(e[9].f32s()[i], c[9].f32s()[i]) {
                return Err(format!("{} (cpu {} emu {})", bad("raw_logprobs token", i), c[9].f32s()[i], e[9].f32s()[i]));
            }
            for j in i * kn..(i + 1) * kn {
                if !close(e[10].f32s()[j], c[10].f32s()[j]) {
                    return Err(bad("raw_logprobs top logprobs", i));
                }
            }
        }
    }
    Ok(Some(format!(
        "{}: V={v} N={n} R={r} groups={g} verify={} tree={} tokens={:?} -> identical",
        path.file_name().unwrap().to_string_lossy(),
        p.any_verify,
        p.any_tree,
        &tokens[..tokens.len().min(8)]
    )))
}

#[test]
fn every_kernel_has_committed_ascendc_source() {
    let dir = Path::new(ROOT).join("sampler-host/ascendc");
    for spec in registry::all() {
        let name = spec.name;
        let Some(src) = spec.ascendc else {
            // Honoured opt-out; anything else is a kernel silently missing a target.
            assert!(spec.ascend_opt_out, "kernel `{name}` has no AscendC source: {}; lower it or opt out with `#[kernel(ascend = false)]`", spec.ascendc_skipped.unwrap_or("?"));
            eprintln!("skip {name}: {}", spec.ascendc_skipped.unwrap_or("opted out"));
            continue;
        };
        let file = dir.join(format!("{name}.cpp"));
        let committed = std::fs::read_to_string(&file).unwrap_or_else(|_| panic!("kernel `{name}`: missing {}: run `cargo run --example regenerate -- --ascendc`", file.display()));
        assert!(committed == src, "kernel `{name}`: {} is stale: run `cargo run --example regenerate -- --ascendc`", file.display());
    }
}

#[test]
fn golden_cases_match_cpu_under_emulation() {
    if gxx().is_none() {
        eprintln!("skipping: g++ not found");
        return;
    }
    let paths: Vec<PathBuf> = sampler_host::case::golden_files(&Path::new(ROOT).join("../shared/golden"));
    assert!(!paths.is_empty(), "golden cases not found beside the repository");
    let only = std::env::var("ASCENDC_EMU_CASE").ok();
    let mut ran = 0;
    let mut failures = Vec::new();
    for p in &paths {
        if only.as_ref().is_some_and(|o| !p.to_string_lossy().contains(o.as_str())) {
            continue;
        }
        match run_case(p) {
            Ok(Some(line)) => {
                ran += 1;
                eprintln!("ok   {line}");
            }
            Ok(None) => eprintln!("skip {} (N > 4096: not an Ascend configuration)", p.file_name().unwrap().to_string_lossy()),
            Err(e) => {
                eprintln!("FAIL {e}");
                failures.push(e);
            }
        }
    }
    eprintln!("{ran} golden cases ran under emulation, {} failed", failures.len());
    assert!(failures.is_empty(), "{} cases differ:\n{}", failures.len(), failures.join("\n"));
    assert!(ran > 0);
}

/// Removes the first `qin.EnQue(t); t = qin.DeQue<T>();` of a kernel body:
/// the tile is still staged through the queue's buffer, but nothing orders
/// the MTE2 copy before the vector pipe's read.
fn drop_enque(src: &str) -> Option<String> {
    let body = src.find("extern \"C\"")?;
    let at = body + src[body..].find("qin.EnQue(")?;
    let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = at + src[at..].find('\n')?;
    Some(format!("{}{}", &src[..line_start], &src[line_end + 1..]))
}

#[test]
fn hazard_checker_catches_a_planted_missing_sync() {
    let Some(cxx) = gxx() else {
        eprintln!("skipping: g++ not found");
        return;
    };
    let dir = work_dir().join("planted");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = registry::find("process").unwrap();
    let good = spec.ascendc.unwrap();
    let planted = drop_enque(good).expect("process stages a row tile through TQue<VECIN> and reads it on V");
    assert!(good.contains("AscendC::TQue<AscendC::QuePosition::VECIN, 2> qin;"), "process stages its loads through a depth-2 TQue");
    let n = 64u32;
    let rows = 2u32;
    let logits: Vec<f32> = (0..rows * n).map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.0).collect();
    let mut input = Vec::new();
    let args = [
        Val::F32(logits),
        Val::SU32(n),
        Val::F32(vec![0.7; rows as usize]),
        Val::F32(vec![0.9; rows as usize]),
        Val::I32(vec![-1; rows as usize]),
        Val::F32(vec![0.0; rows as usize]),
        Val::U32(vec![0; rows as usize]),
        Val::F32(vec![0.0; (rows * n) as usize]),
        Val::SU32(rows),
    ];
    input.extend_from_slice(&(args.len() as u32).to_le_bytes());
    for a in &args {
        a.encode(&mut input);
    }
    let fin = dir.join("in.bin");
    std::fs::write(&fin, input).unwrap();
    let mut results = Vec::new();
    for (tag, src) in [("good", good.to_string()), ("planted", planted)] {
        let kdir = dir.join(tag);
        std::fs::create_dir_all(&kdir).unwrap();
        let fake = [KernelSpec { ascendc: Some(Box::leak(src.into_boxed_str())), ..*spec }];
        let drv = kdir.join("driver.cpp");
        std::fs::write(&drv, driver_source(&kdir, &fake.iter().collect::<Vec<_>>())).unwrap();
        let bin = kdir.join("driver");
        compile(&cxx, &drv, &bin, false).unwrap();
        let o = Command::new(&bin).args(["process", "64", "1"]).arg(&fin).arg(kdir.join("out.bin")).output().unwrap();
        results.push((o.status.code(), String::from_utf8_lossy(&o.stderr).to_string()));
    }
    assert_eq!(results[0].0, Some(0), "the generated kernel must pass: {}", results[0].1);
    assert_eq!(results[1].0, Some(3), "the planted missing sync must be caught: {}", results[1].1);
    assert!(results[1].1.contains("HAZARD") && results[1].1.contains("MTE2"), "{}", results[1].1);
}
