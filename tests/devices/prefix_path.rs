//! The prefix path without force top-k (`StepPlan::prefix_width`,
//! `row_mass` + `process_prefix_draw`) against the full-row path, bit for bit,
//! on the CPU backend (the same DSL kernels the PTX and AscendC come from).
//!
//! - Rows whose kept set fits the prefix give the full-row results exactly
//!   on the prefix path alone (no fallback taken).
//! - Rows whose kept set does not fit are flagged, and `Backend::run` (with
//!   its fallback) still equals the full-row path.

use crate::common;

use common::gen::{random_step, GenOpts, Rng};
use sampler_host::layout::build_plan;
use sampler_host::runtime::device::cpu::CpuBackend;
use sampler_host::runtime::plan::{StepPlan, StepResult};
use sampler_host::FilterOrder;

/// A result as bits (f32 compared by bit pattern), with the rows of failed
/// groups blanked: their outputs are discarded, and the prefix path ignores
/// their overflow flags, so they may differ.
fn bits(p: &StepPlan, r: &StepResult) -> Vec<String> {
    let mut r = r.clone();
    let k = p.k as usize;
    for g in 0..p.groups() {
        if r.group_status[g] != 0 {
            for row in p.group_first[g] as usize..(p.group_first[g] + p.group_rows[g]) as usize {
                r.token_lp[row] = 0.0;
                r.sum_smaller[row] = 0.0;
                r.top_ids[row * k..(row + 1) * k].fill(0);
                r.top_lps[row * k..(row + 1) * k].fill(0.0);
            }
        }
    }
    let r = &r;
    let f = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    vec![
        format!("{:?}", r.row_status),
        format!("{:?}", r.tokens),
        format!("{:?}", f(&r.token_lp)),
        format!("{:?}", f(&r.sum_smaller)),
        format!("{:?}", r.top_ids),
        format!("{:?}", f(&r.top_lps)),
        format!("{:?}", r.accepted),
        format!("{:?}", r.group_status),
    ]
}

/// Random steps without force top-k whose rows all have top-k or top-p < 1.
fn plan(rng: &mut Rng, v: usize, style: u32) -> StepPlan<'static> {
    let mut step = random_step(rng, v, 0, 6, GenOpts { p_error: 0.1, ..Default::default() });
    for r in &mut step.requests {
        let p = &mut r.params;
        if p.temperature.is_nan() || p.temperature < 0.0 {
            continue; // a bad request: its group fails, the others must not care
        }
        p.temperature = rng.pick(&[0.05f32, 0.3, 0.7, 1.0, 1.5]);
        match style {
            // top-k on: the kept set always fits.
            0 => p.top_k = rng.pick(&[1i64, 5, 50, 64, 200]),
            // top-p only: fits or overflows, depending on the row.
            1 => {
                p.top_k = -1;
                p.top_p = rng.pick(&[1e-4f32, 0.05, 0.3, 0.5, 0.9, 0.99]);
            }
            // Min-p alone (section 10.1): a prefix cut that fits or overflows.
            2 => {
                p.top_k = -1;
                p.top_p = 1.0;
                p.min_p = rng.pick(&[1e-4f32, 0.01, 0.05, 0.3, 1.0]);
            }
            // Top-k first (section 10.2), with and without min-p and top-k.
            _ => {
                p.filter_order = FilterOrder::TopKThenTopP;
                p.top_k = rng.pick(&[-1i64, -1, 5, 50, 200]);
                p.top_p = rng.pick(&[0.05f32, 0.5, 0.9, 0.99]);
                p.min_p = rng.pick(&[0f32, 0.0, 1e-4, 0.05]);
            }
        }
    }
    build_plan(v as u32, v as u32, u32::MAX, &step.logits, &step.requests).unwrap().0.into_owned()
}

#[test]
fn prefix_path_equals_full_row_path() {
    let mut fits = 0;
    let mut flagged = 0;
    for (i, &v) in [300usize, 1000, 5000, 20000].iter().enumerate() {
        for rep in 0..24u64 {
            let mut rng = Rng::new(7000 + 100 * i as u64 + rep);
            let style = (rep % 4) as u32;
            let p = plan(&mut rng, v, style);
            let full = CpuBackend::full_row().run(&p).unwrap();
            let Some(w) = p.prefix_width() else { continue };
            let (pre, overflow) = CpuBackend::default().run_prefix(&p, w).unwrap();
            if p.prefix_overflowed(&pre.group_status, &overflow) {
                flagged += 1;
            } else {
                fits += 1;
                assert_eq!(
                    bits(&p, &pre),
                    bits(&p, &full),
                    "V={v} rep {rep} w={w}: prefix path differs from the full-row path"
                );
            }
            // With the fallback, always equal.
            let auto = CpuBackend::default().run(&p).unwrap();
            assert_eq!(bits(&p, &auto), bits(&p, &full), "V={v} rep {rep} w={w}: run() differs from the full-row path");
            if style == 0 {
                assert!(overflow.iter().all(|&o| o == 0), "V={v} rep {rep}: top-k <= w never overflows");
            }
        }
    }
    eprintln!("prefix path: {fits} steps fit, {flagged} flagged for the full-row path");
    assert!(fits >= 30, "the prefix path must be exercised ({fits} steps fit)");
    assert!(flagged >= 3, "the fallback must be exercised ({flagged} steps flagged)");
}

#[test]
fn prefix_width_rules() {
    let mut rng = Rng::new(42);
    let mut p = plan(&mut rng, 20000, 0);
    p.top_k.iter_mut().for_each(|k| *k = 50);
    p.log_min_p.iter_mut().for_each(|m| *m = f32::NEG_INFINITY);
    p.k = 5;
    assert_eq!(p.prefix_width(), Some(64));
    p.top_k[0] = 100;
    assert_eq!(p.prefix_width(), Some(128));
    p.top_k[0] = -1;
    p.top_p[0] = 0.9;
    assert_eq!(p.prefix_width(), Some(sampler_host::runtime::pipeline::PREFIX_TOPK_OFF));
    // A row that keeps every token: full-row path.
    p.top_p[0] = 1.0;
    assert_eq!(p.prefix_width(), None);
    // ... unless min-p cuts it (section 10.1).
    p.log_min_p[0] = sampler_host::params::log_min_p(0.05);
    assert_eq!(p.prefix_width(), Some(sampler_host::runtime::pipeline::PREFIX_TOPK_OFF));
    // min_p 1 (L = 0) cuts too.
    p.log_min_p[0] = 0.0;
    assert_eq!(p.prefix_width(), Some(sampler_host::runtime::pipeline::PREFIX_TOPK_OFF));
    p.log_min_p[0] = f32::NEG_INFINITY;
    p.top_p[0] = 0.9;
    // Force top-k on, or too wide a top-k: full-row path.
    p.top_k[0] = 20000;
    assert_eq!(p.prefix_width(), None);
    p.top_k[0] = 50;
    p.n = 1000;
    assert_eq!(p.prefix_width(), None);
}
