//! Property test: the CPU `Sampler` against the independent f64 reference
//! (tests/common/reference.rs) on random steps of every request kind.
//!
//! Statuses must agree; token ids must agree except where the reference's
//! decision lies within 1e-6 of a boundary (a draw's u vs a cumulative sum,
//! an accept test u1*q vs p, a top-p cut); floats within
//! `1e-4 + 1e-5 |b|` (CONFORMANCE.md).

use crate::common;

use common::gen::{random_step, GenOpts, Rng};
use common::reference::{compare, reference_step, self_check};
use proptest::prelude::*;
use sampler_host::{BackendKind, Sampler, SamplerConfig};

fn run_one(seed: u64, vocab: usize, force: usize, max_requests: usize) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let step = random_step(&mut rng, vocab, force, max_requests, GenOpts::default());
    let cfg = SamplerConfig { vocab_size: vocab as u32, force_topk: force as u32, nextn: 5, backend: BackendKind::Cpu };
    let mut s = Sampler::new(cfg).expect("sampler");
    let got = s.sample(&step.logits, &step.requests).expect("batch");
    let want = reference_step(vocab, force, &step.logits, &step.requests);
    let diffs = compare(&got, &want, &step.requests);
    if !diffs.is_empty() {
        let summary: Vec<String> = step
            .requests
            .iter()
            .zip(&got.requests)
            .zip(&want.requests)
            .map(|((r, g), w)| {
                format!(
                    "{:?} golden={:?} masks={} {:?} | cpu {:?} | ref {:?}",
                    r.kind,
                    r.golden,
                    r.masks.as_ref().map_or(0, |m| m.len()),
                    r.params,
                    g.status,
                    w.status
                )
            })
            .collect();
        prop_assert!(false, "V={vocab} N={force} seed={seed}: {diffs:#?}\nrequests: {summary:#?}");
    }
    Ok(())
}

#[test]
fn reference_self_check() {
    self_check();
}

fn vocab_and_force() -> impl Strategy<Value = (usize, usize)> {
    (1usize..=300).prop_flat_map(|v| {
        let force = if v > 1 { prop_oneof![Just(0usize), 1..v].boxed() } else { Just(0usize).boxed() };
        (Just(v), force)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn cpu_matches_reference((vocab, force) in vocab_and_force(), max_requests in 1usize..=6, seed in any::<u64>()) {
        run_one(seed, vocab, force, max_requests)?;
    }

    #[test]
    fn cpu_matches_reference_small_vocab(vocab in 1usize..=12, force in 0usize..12, max_requests in 1usize..=8, seed in any::<u64>()) {
        run_one(seed, vocab, if force < vocab { force } else { 0 }, max_requests)?;
    }
}

proptest! {
    // Larger vocabularies reach the kernels' other tile variants (4096 and up,
    // several mask-check chunks); few cases, they are slower.
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 50, ..ProptestConfig::default() })]

    #[test]
    fn cpu_matches_reference_large_vocab(vocab in 300usize..=20_000, force_sel in 0usize..4, force_frac in 0.0f64..1.0, seed in any::<u64>()) {
        let force = match force_sel {
            0 | 1 => 0,
            2 => 1 + (force_frac * 64.0) as usize,
            _ => 1 + (force_frac * (vocab - 1) as f64) as usize,
        };
        run_one(seed, vocab, force.min(vocab - 1), 3)?;
    }
}

/// The generator reaches every corner the comparison is meant to cover, and
/// margins rarely hide a decision.
#[test]
fn generator_coverage() {
    use common::reference::MARGIN;
    use sampler_host::RequestKind;
    let mut c = std::collections::BTreeMap::<&str, usize>::new();
    let mut inc = |k: &'static str| *c.entry(k).or_default() += 1;
    for seed in 0..1500u64 {
        let mut rng = Rng::new(seed);
        let v = 1 + rng.below(300);
        let force = if v > 1 && rng.chance(0.5) { 1 + rng.below(v - 1) } else { 0 };
        let step = random_step(&mut rng, v, force, 6, GenOpts::default());
        let want = reference_step(v, force, &step.logits, &step.requests);
        for (r, w) in step.requests.iter().zip(&want.requests) {
            inc("requests");
            if w.status.is_err() {
                inc("error status");
                continue;
            }
            if w.cut_margin < MARGIN {
                inc("skipped: top-p cut margin");
                continue;
            }
            if w.draw_margin < MARGIN {
                inc("skipped ids: draw margin");
                continue;
            }
            match &r.kind {
                RequestKind::Decode { drafts, .. } if !drafts.is_empty() => {
                    inc("verify compared");
                    if w.accepted as usize == drafts.len() {
                        inc("verify: all accepted");
                    } else if w.accepted > 0 {
                        inc("verify: partly accepted");
                    } else {
                        inc("verify: first rejected");
                    }
                }
                RequestKind::Tree { tree, .. } => {
                    inc("tree compared");
                    if w.accepted > 0 {
                        inc("tree: some accepted");
                    }
                    if w.path.as_ref().is_some_and(|p| p.windows(2).any(|x| x[1] != x[0] + 1)) {
                        inc("tree: path off the first chain");
                    }
                    if tree.draft_dists.is_some() {
                        inc(if tree.without_replacement {
                            "tree: without replacement"
                        } else {
                            "tree: with replacement"
                        });
                    }
                }
                RequestKind::PromptLogprobs { .. } => inc("prompt logprobs compared"),
                RequestKind::Draft { .. } => inc("draft compared"),
                _ => inc("fresh compared"),
            }
            if r.golden.iter().any(|&g| g >= 0) {
                inc("golden compared");
            }
            if r.masks.is_some() {
                inc("masked compared");
            }
        }
    }
    eprintln!("{c:#?}");
    for k in [
        "error status",
        "verify: all accepted",
        "verify: partly accepted",
        "verify: first rejected",
        "prompt logprobs compared",
        "draft compared",
        "fresh compared",
        "golden compared",
        "masked compared",
        "tree compared",
        "tree: some accepted",
        "tree: path off the first chain",
        "tree: with replacement",
        "tree: without replacement",
    ] {
        assert!(c.get(k).copied().unwrap_or(0) >= 20, "too few `{k}`: {c:#?}");
    }
    let skipped = c.get("skipped ids: draw margin").copied().unwrap_or(0)
        + c.get("skipped: top-p cut margin").copied().unwrap_or(0);
    assert!(skipped * 50 < c["requests"], "margins hide too much: {c:#?}");
}

/// The reference itself reproduces every golden case of `conformance/golden`
/// (parsed with `sampler_host::conformance::case`, compared with CONFORMANCE.md's rule):
/// a check on the reference, independent of the kernels.
#[test]
fn reference_passes_golden_cases() {
    use common::reference::RefOutput;
    use sampler_host::conformance::case::parse_case;
    use sampler_host::conformance::compare::compare_results;
    use serde_json::{json, Value};

    let dir = std::path::Path::new(sampler_host::conformance::case::GOLDEN_DIR);
    let fl = |x: f64| if x == f64::NEG_INFINITY { Value::Null } else { json!(x) };
    let files = sampler_host::conformance::case::golden_files(dir);
    let mut failures = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        let expected = serde_json::from_str::<Value>(&text).unwrap()["expected"].clone();
        let case = parse_case(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (reqs, logits) = case.well_formed();
        let out: RefOutput = reference_step(case.vocab_size as usize, case.force_topk as usize, &logits, &reqs);
        // Splice malformed requests back in (error status, token -1 rows).
        let (mut rows, mut outs) = (Vec::new(), Vec::new());
        let (mut gi, mut ri) = (0usize, 0usize);
        for (i, r) in case.requests.iter().enumerate() {
            match r {
                Ok((req, _)) => {
                    for row in &out.rows[ri..ri + req.rows()] {
                        let top: Vec<Value> = row.top_logprobs.iter().map(|&(id, lp)| json!([id, fl(lp)])).collect();
                        rows.push(json!({"token": row.token, "logprob": fl(row.logprob), "top_logprobs": top, "sum_smaller_probs": row.sum_smaller_probs}));
                    }
                    let o = &out.requests[gi];
                    let status = match &o.status {
                        Ok(()) => "ok".to_string(),
                        Err(e) => format!("error: {e}"),
                    };
                    let pl: Vec<Value> = o.prompt_logprobs.iter().map(|&x| fl(x)).collect();
                    let mut doc =
                        json!({"status": status, "accepted": o.accepted, "emitted": o.emitted, "prompt_logprobs": pl});
                    if let Some(path) = &o.path {
                        doc["path"] = json!(path);
                    }
                    outs.push(doc);
                    ri += req.rows();
                    gi += 1;
                }
                Err(e) => {
                    for _ in 0..case.rows[i] {
                        rows.push(json!({"token": -1, "logprob": null, "top_logprobs": [], "sum_smaller_probs": 0.0}));
                    }
                    outs.push(
                        json!({"status": format!("error: {e}"), "accepted": 0, "emitted": [], "prompt_logprobs": []}),
                    );
                }
            }
        }
        let actual = json!({"rows": rows, "requests": outs});
        let diffs = compare_results(&expected, &actual);
        if !diffs.is_empty() {
            failures.push(format!("{name}: {}", diffs.iter().take(8).cloned().collect::<Vec<_>>().join("\n    ")));
        }
    }
    eprintln!("reference on golden: {} files, {} failing", files.len(), failures.len());
    assert!(failures.is_empty(), "the reference fails golden cases:\n{}", failures.join("\n"));
    assert!(files.len() >= 50);
}

/// SAMPLER.md section 5: k counts requests with valid *parameters*, even when
/// they fail on their mask (regression: the host used to leave them out).
#[test]
fn top_logprobs_width_counts_requests_failing_on_their_mask() {
    use sampler_host::{Request, SamplingParams};
    let v = 40;
    let bad_mask = Request {
        masks: Some(vec![vec![u32::MAX]]),
        ..Request::prefill(SamplingParams { top_logprobs: 4, seq_seed: Some(1), ..Default::default() }, 10)
    };
    let ok = Request::prefill(SamplingParams { top_logprobs: 1, seq_seed: Some(2), ..Default::default() }, 10);
    let logits: Vec<f32> = (0..2 * v).map(|i| (i % 7) as f32).collect();
    let reqs = [bad_mask, ok];
    let mut s =
        Sampler::new(SamplerConfig { vocab_size: v as u32, force_topk: 0, nextn: 5, backend: BackendKind::Cpu })
            .unwrap();
    let got = s.sample(&logits, &reqs).unwrap();
    assert!(got.requests[0].status.is_err() && got.requests[1].status.is_ok());
    assert_eq!(got.top_logprobs_width, 4);
    assert_eq!(got.rows[1].top_logprobs.len(), 4);
    assert!(got.rows[0].top_logprobs.is_empty());
    assert!(compare(&got, &reference_step(v, 0, &logits, &reqs), &reqs).is_empty());
}

/// Issue 24 item 3: runs a [`common::gen::min_p_boundary_step`] on the CPU
/// and checks each row against [`common::gen::min_p_kept_set`] (section
/// 10.1, `x < L` with L in f64 rounded to f32): the visible candidates
/// (`top_logprobs`, the first `min(N, 64)`) are kept exactly when the rule
/// keeps them, and the drawn token is a kept one. Returns how many rows had
/// a candidate exactly on the boundary (`x == L`) and how many rows the
/// f32 `exp(x) < min_p` rule would have cut differently.
fn check_min_p_step(seed: u64, vocab: usize, force: usize, rows: usize, far_tail: bool) -> (usize, usize) {
    use common::gen::{min_p_boundary_step, min_p_kept_set};
    let mut rng = Rng::new(seed);
    let step = min_p_boundary_step(&mut rng, vocab, force, rows, far_tail);
    let n = if force == 0 || force >= vocab { vocab } else { force };
    let cfg = SamplerConfig { vocab_size: vocab as u32, force_topk: force as u32, nextn: 5, backend: BackendKind::Cpu };
    let out = Sampler::new(cfg).unwrap().sample(&step.logits, &step.requests).unwrap();
    if far_tail && vocab > 1100 && force == 0 {
        let (p, _) = sampler_host::layout::build_plan(vocab as u32, n as u32, 5, &step.logits, &step.requests).unwrap();
        assert!(p.prefix_width().is_some(), "seed {seed}: the prefix path is not taken");
    }
    let (mut on_boundary, mut exp_rule_differs) = (0, 0);
    for (r, req) in step.requests.iter().enumerate() {
        let row = &step.logits[r * vocab..(r + 1) * vocab];
        let (kept, xs, l) = min_p_kept_set(row, n, req.params.temperature, req.params.min_p);
        let o = &out.rows[r];
        assert!(out.requests[r].status.is_ok(), "seed {seed} row {r}: {:?}", out.requests[r].status);
        let shown: Vec<i32> = o.top_logprobs.iter().map(|t| t.0).collect();
        let want_shown: Vec<i32> = xs.iter().take(shown.len()).map(|t| t.0).collect();
        assert_eq!(shown, want_shown, "seed {seed} row {r}: candidate order");
        let got_kept: Vec<i32> = o.top_logprobs.iter().filter(|t| t.1 > f32::NEG_INFINITY).map(|t| t.0).collect();
        let want_kept: Vec<i32> = kept.iter().copied().take(shown.len()).collect();
        assert_eq!(
            got_kept,
            want_kept,
            "seed {seed} row {r} (V={vocab} N={n}): T={} min_p={} L={l}; x of the shown: {:?}",
            req.params.temperature,
            req.params.min_p,
            &xs[..shown.len()]
        );
        assert!(kept.contains(&o.token), "seed {seed} row {r}: token {} not kept", o.token);
        if req.params.temperature >= 1e-5 {
            on_boundary += xs.iter().any(|&(_, x)| x == l) as usize;
            let by_exp: Vec<i32> = xs.iter().filter(|&&(_, x)| x.exp() >= req.params.min_p).map(|&(i, _)| i).collect();
            exp_rule_differs += (by_exp != kept) as usize;
        }
    }
    (on_boundary, exp_rule_differs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 100, ..ProptestConfig::default() })]

    /// Issue 24 item 3 (SAMPLER.md 10.1, decided): for random logits (with
    /// tokens placed on and next to the boundary), temperatures and min_p,
    /// the CPU's kept set is the one of `x < L` with `L = f32(ln min_p)`,
    /// computed in f64: full-row path, force top-k, and (`far_tail`, V
    /// above the prefix width) the prefix path.
    #[test]
    fn min_p_kept_set_is_x_below_f32_ln_min_p(
        vocab in 2usize..=300,
        force_sel in 0usize..3,
        rows in 1usize..=6,
        far_tail in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let force = [0, vocab / 2, 64][force_sel];
        let _ = check_min_p_step(seed, vocab, if force < vocab { force } else { 0 }, rows, far_tail);
    }

    #[test]
    fn min_p_kept_set_on_the_prefix_path(vocab in 1100usize..=5000, rows in 1usize..=4, seed in any::<u64>()) {
        let _ = check_min_p_step(seed, vocab, 0, rows, true);
    }
}

/// The min-p property test has teeth: over fixed seeds, many rows have a
/// candidate exactly on the boundary (`x == L`), and the f32 `exp(x) <
/// min_p` rule (the kernels' rule before issue 24) cuts differently on
/// some of them, while the CPU follows `x < L` on every row.
#[test]
fn min_p_boundary_rows_are_hit_and_discriminate() {
    let (mut hit, mut differ, mut total) = (0, 0, 0);
    for seed in 0..60u64 {
        let (vocab, force, far) = [(8, 0, false), (40, 0, false), (300, 64, false), (2000, 0, true)][seed as usize % 4];
        let (h, d) = check_min_p_step(seed, vocab, force, 4, far);
        hit += h;
        differ += d;
        total += 4;
    }
    eprintln!("min-p boundary: {hit} of {total} rows with x == L, {differ} where exp(x) < min_p cuts differently");
    assert!(hit * 5 >= total, "only {hit} of {total} rows put a candidate on the boundary");
    assert!(differ >= 5, "only {differ} rows tell x < L from exp(x) < min_p");
}
