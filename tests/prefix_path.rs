//! The prefix path without force top-k (`StepPlan::prefix_width`,
//! `row_mass` + `process_prefix_draw`) against the full-row path, bit for bit,
//! on the CPU backend (the same DSL kernels the PTX and AscendC come from).
//!
//! - Rows whose kept set fits the prefix give the full-row results exactly
//!   on the prefix path alone (no fallback taken).
//! - Rows whose kept set does not fit are flagged, and `Backend::run` (with
//!   its fallback) still equals the full-row path.

mod common;

use common::gen::{random_step, GenOpts, Rng};
use sampler_host::backend::cpu::CpuBackend;
use sampler_host::batch::build_plan;
use sampler_host::plan::{Backend, StepPlan, StepResult};

/// A result as bits (f32 compared by bit pattern).
fn bits(r: &StepResult) -> Vec<String> {
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
    let mut step = random_step(rng, v, 0, 6, GenOpts { p_error: 0.1 });
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
            _ => {
                p.top_k = -1;
                p.top_p = rng.pick(&[1e-4f32, 0.05, 0.3, 0.5, 0.9, 0.99]);
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
            let style = (rep % 2) as u32;
            let p = plan(&mut rng, v, style);
            let full = CpuBackend::full_row().run(&p).unwrap();
            let Some(w) = p.prefix_width() else { continue };
            let (pre, overflow) = CpuBackend::default().run_prefix(&p, w).unwrap();
            if p.prefix_overflowed(&pre.group_status, &overflow) {
                flagged += 1;
            } else {
                fits += 1;
                assert_eq!(bits(&pre), bits(&full), "V={v} rep {rep} w={w}: prefix path differs from the full-row path");
            }
            // With the fallback, always equal.
            let auto = CpuBackend::default().run(&p).unwrap();
            assert_eq!(bits(&auto), bits(&full), "V={v} rep {rep} w={w}: run() differs from the full-row path");
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
    p.k = 5;
    assert_eq!(p.prefix_width(), Some(64));
    p.top_k[0] = 100;
    assert_eq!(p.prefix_width(), Some(128));
    p.top_k[0] = -1;
    p.top_p[0] = 0.9;
    assert_eq!(p.prefix_width(), Some(sampler_host::plan::PREFIX_TOPK_OFF));
    // A row that keeps every token: full-row path.
    p.top_p[0] = 1.0;
    assert_eq!(p.prefix_width(), None);
    p.top_p[0] = 0.9;
    // Force top-k on, or too wide a top-k: full-row path.
    p.top_k[0] = 20000;
    assert_eq!(p.prefix_width(), None);
    p.top_k[0] = 50;
    p.n = 1000;
    assert_eq!(p.prefix_width(), None);
}
