//! Host logits as the engine hands them over (SAMPLER.md section 2, issue 11):
//! bf16 and f16 logits give results identical, bit for bit, to their exact
//! f32 widening; large steps run in blocks of rows with results identical to
//! one pass (batch invariance), the host buffer borrowed, not copied.

mod common;

use std::path::Path;

use half::{bf16, f16};
use sampler_host::backend::cpu::CpuBackend;
use sampler_host::batch::build_plan;
use sampler_host::plan::Backend;
use sampler_host::{BackendKind, Sampler, SamplerConfig};

use common::gen::{random_step, GenOpts, Rng};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn cases() -> Vec<sampler_host::case::Case> {
    let files = sampler_host::case::golden_files(&Path::new(ROOT).join("../shared/golden"));
    assert!(!files.is_empty(), "golden cases not found beside the repository");
    files.iter().map(|f| sampler_host::case::parse_case(&std::fs::read_to_string(f).unwrap()).unwrap()).collect()
}

#[test]
fn half_logits_equal_their_f32_widening_bitwise() {
    let mut checked = 0;
    for case in cases() {
        let (reqs, logits): (Vec<_>, Vec<_>) = case.requests.iter().flatten().cloned().unzip();
        let logits: Vec<f32> = logits.concat();
        let cfg = SamplerConfig { vocab_size: case.vocab_size, force_topk: case.force_topk, nextn: case.nextn, backend: BackendKind::Cpu };
        let mut s = Sampler::new(cfg).unwrap();
        let b: Vec<bf16> = logits.iter().map(|&x| bf16::from_f32(x)).collect();
        let h: Vec<f16> = logits.iter().map(|&x| f16::from_f32(x)).collect();
        let bw: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
        let hw: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
        let dbg = |o: &sampler_host::StepOutput| format!("{o:?}");
        assert_eq!(dbg(&s.sample(&b, &reqs).unwrap()), dbg(&s.sample(&bw, &reqs).unwrap()), "bf16 vs its f32 widening");
        assert_eq!(dbg(&s.sample(&h, &reqs).unwrap()), dbg(&s.sample(&hw, &reqs).unwrap()), "f16 vs its f32 widening");
        checked += 1;
    }
    assert!(checked > 10);
}

#[test]
fn row_blocks_equal_one_pass() {
    let mut rng = Rng::new(11);
    let (mut split, mut trees, mut raws) = (0, 0, 0);
    for rep in 0..40u64 {
        let v = [64usize, 300, 1000][rep as usize % 3];
        let step = random_step(&mut rng, v, if rep % 2 == 0 { 0 } else { 16 }, 8, GenOpts { p_error: 0.1, ..Default::default() });
        let (p, _) = build_plan(v as u32, if rep % 2 == 0 { v as u32 } else { 16 }, u32::MAX, &step.logits, &step.requests).unwrap();
        let whole = CpuBackend::default().run(&p).unwrap();
        for block_rows in [1usize, 2, 3] {
            let mut cpu = CpuBackend::default();
            // Bytes for `block_rows` rows of this step's scratch.
            cpu.set_block_bytes(block_rows * (16 * p.n as usize + 8 * v));
            let got = cpu.run(&p).unwrap();
            if p.rows as usize > block_rows {
                split += 1;
            }
            // Failed groups keep their status; their rows' raw values may differ (assembly discards them).
            assert_eq!(got.group_status, whole.group_status, "rep {rep} block {block_rows}");
            assert_eq!(got.accepted, whole.accepted, "rep {rep} block {block_rows}");
            let ok_row = |r: usize| (0..p.groups()).any(|g| whole.group_status[g] == 0 && (p.group_first[g] as usize..(p.group_first[g] + p.group_rows[g]) as usize).contains(&r));
            for r in (0..p.rows as usize).filter(|&r| ok_row(r)) {
                assert_eq!(got.tokens[r], whole.tokens[r], "rep {rep} block {block_rows} row {r}");
                assert_eq!(got.token_lp[r].to_bits(), whole.token_lp[r].to_bits(), "rep {rep} row {r}");
                assert_eq!(got.sum_smaller[r].to_bits(), whole.sum_smaller[r].to_bits(), "rep {rep} row {r}");
                let k = p.k as usize;
                assert_eq!(got.top_ids[r * k..(r + 1) * k], whole.top_ids[r * k..(r + 1) * k]);
                let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got.top_lps[r * k..(r + 1) * k]), bits(&whole.top_lps[r * k..(r + 1) * k]), "rep {rep} row {r}");
                // Tree paths (section 11) survive the split.
                assert_eq!(got.path.get(r), whole.path.get(r), "rep {rep} block {block_rows} row {r}");
            }
            assert_eq!(got.path.len(), whole.path.len(), "rep {rep}: a step has a path exactly when it has a tree");
            trees += p.any_tree as usize;
            raws += p.any_raw as usize;
        }
    }
    assert!(split > 20, "blocks must be exercised ({split})");
    assert!(trees > 0 && raws > 0, "trees ({trees}) and raw-logprob rows ({raws}) must be split too");
}

/// n-gram drafts (no draft distribution, an empty `DraftDist`) count as
/// one-hot at the draft token: identical to passing that one-hot explicitly.
#[test]
fn ngram_drafts_are_one_hot() {
    use sampler_host::{DraftDist, Request, SamplingParams};
    let v = 50usize;
    let mut rng = Rng::new(5);
    let mut s = Sampler::new(SamplerConfig { vocab_size: v as u32, force_topk: 0, nextn: 5, backend: BackendKind::Cpu }).unwrap();
    let mut accepted = 0;
    for rep in 0..40u64 {
        let mut logits: Vec<f32> = (0..4 * v).map(|_| (rng.range(0, 1000) as f32) / 1000.0).collect();
        // Mostly likely drafts (a peak at the draft in its row), sometimes not.
        let drafts: Vec<i32> = (0..3).map(|_| rng.range(0, v as u64) as i32).collect();
        for (j, &d) in drafts.iter().enumerate() {
            logits[j * v + d as usize] += if rep % 4 == 0 { 0.0 } else { 4.0 };
        }
        let p = SamplingParams { temperature: 1.0, seq_seed: Some(rep), top_logprobs: 2, ..Default::default() };
        let ngram = Request::decode(p.clone(), 20, 4, drafts.clone(), vec![DraftDist::default(); 3]);
        let onehot = Request::decode(p, 20, 4, drafts.clone(), drafts.iter().map(|&d| DraftDist { ids: vec![d], logprobs: vec![0.0] }).collect());
        let a = s.sample(&logits, &[ngram]).unwrap();
        let b = s.sample(&logits, &[onehot]).unwrap();
        assert!(a.requests[0].status.is_ok(), "{:?}", a.requests[0].status);
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "rep {rep}");
        accepted += a.requests[0].accepted;
    }
    assert!(accepted > 0, "some n-gram drafts must be accepted");
}

/// Logits of the wrong kind or length are a typed error, never a panic.
#[test]
fn logits_shape_errors_are_typed() {
    let mut s = Sampler::new(SamplerConfig { vocab_size: 8, force_topk: 0, nextn: 5, backend: BackendKind::Cpu }).unwrap();
    let req = [sampler_host::Request::prefill(sampler_host::SamplingParams { seq_seed: Some(1), ..Default::default() }, 3)];
    let short: Vec<bf16> = vec![bf16::from_f32(0.0); 7];
    assert!(matches!(s.sample(&short, &req), Err(sampler_host::BatchError::LogitsShape { got: 7, .. })));
    let out = s.sample(&vec![f16::from_f32(1.0); 8], &req).unwrap();
    assert!(out.requests[0].status.is_ok());
    // Past the end of the processed rows: an error, not a panic.
    let (_, pr) = s.sample_with_processed(&vec![0.0f32; 8], &req, &[0]).unwrap();
    assert!(pr.row(0).is_ok());
    assert!(pr.row(1).is_err());
}
