//! Host logits as the engine hands them over (SAMPLER.md section 2, issue 11):
//! bf16 and f16 logits give results identical, bit for bit, to their exact
//! f32 widening; large steps run in blocks of rows with results identical to
//! one pass (batch invariance), the host buffer borrowed, not copied.

use crate::common;

use std::path::Path;

use half::{bf16, f16};
use sampler_host::layout::build_plan;
use sampler_host::runtime::device::cpu::CpuBackend;
use sampler_host::{BackendKind, Sampler, SamplerConfig};

use common::gen::{random_step, GenOpts, Rng};

fn cases() -> Vec<sampler_host::conformance::case::Case> {
    let files = sampler_host::conformance::case::golden_files(Path::new(sampler_host::conformance::case::GOLDEN_DIR));
    assert!(files.len() >= 50, "golden cases not found at {}", sampler_host::conformance::case::GOLDEN_DIR);
    files
        .iter()
        .map(|f| sampler_host::conformance::case::parse_case(&std::fs::read_to_string(f).unwrap()).unwrap())
        .collect()
}

#[test]
fn half_logits_equal_their_f32_widening_bitwise() {
    let mut checked = 0;
    for case in cases() {
        let (reqs, logits): (Vec<_>, Vec<_>) = case.requests.iter().flatten().cloned().unzip();
        let logits: Vec<f32> = logits.concat();
        let cfg = SamplerConfig {
            vocab_size: case.vocab_size,
            force_topk: case.force_topk,
            nextn: case.nextn,
            backend: BackendKind::Cpu,
        };
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
        let step = random_step(
            &mut rng,
            v,
            if rep % 2 == 0 { 0 } else { 16 },
            8,
            GenOpts { p_error: 0.1, ..Default::default() },
        );
        let (p, _) =
            build_plan(v as u32, if rep % 2 == 0 { v as u32 } else { 16 }, u32::MAX, &step.logits, &step.requests)
                .unwrap();
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
            let ok_row = |r: usize| {
                (0..p.groups()).any(|g| {
                    whole.group_status[g] == 0
                        && (p.group_first[g] as usize..(p.group_first[g] + p.group_rows[g]) as usize).contains(&r)
                })
            };
            for r in (0..p.rows as usize).filter(|&r| ok_row(r)) {
                assert_eq!(got.tokens[r], whole.tokens[r], "rep {rep} block {block_rows} row {r}");
                assert_eq!(got.token_lp[r].to_bits(), whole.token_lp[r].to_bits(), "rep {rep} row {r}");
                assert_eq!(got.sum_smaller[r].to_bits(), whole.sum_smaller[r].to_bits(), "rep {rep} row {r}");
                let k = p.k as usize;
                assert_eq!(got.top_ids[r * k..(r + 1) * k], whole.top_ids[r * k..(r + 1) * k]);
                let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got.top_lps[r * k..(r + 1) * k]),
                    bits(&whole.top_lps[r * k..(r + 1) * k]),
                    "rep {rep} row {r}"
                );
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
    let mut s =
        Sampler::new(SamplerConfig { vocab_size: v as u32, force_topk: 0, nextn: 5, backend: BackendKind::Cpu })
            .unwrap();
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
        let onehot = Request::decode(
            p,
            20,
            4,
            drafts.clone(),
            drafts.iter().map(|&d| DraftDist { ids: vec![d], logprobs: vec![0.0] }).collect(),
        );
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
    let mut s =
        Sampler::new(SamplerConfig { vocab_size: 8, force_topk: 0, nextn: 5, backend: BackendKind::Cpu }).unwrap();
    let req =
        [sampler_host::Request::prefill(sampler_host::SamplingParams { seq_seed: Some(1), ..Default::default() }, 3)];
    let short: Vec<bf16> = vec![bf16::from_f32(0.0); 7];
    assert!(matches!(s.sample(&short, &req), Err(sampler_host::BatchError::LogitsShape { got: 7, .. })));
    let out = s.sample(&vec![f16::from_f32(1.0); 8], &req).unwrap();
    assert!(out.requests[0].status.is_ok());
    // Past the end of the processed rows: an error, not a panic.
    let (_, pr) = s.sample_with_processed(&vec![0.0f32; 8], &req, &[0]).unwrap();
    assert!(pr.row(0).is_ok());
    assert!(pr.row(1).is_err());
}

/// One backend configuration of [`half_steps`]: the default (prefix path
/// where the step allows it), the full-row path, or blocks of `rows` rows.
fn backends(p: &sampler_host::runtime::plan::StepPlan<'_>) -> Vec<(&'static str, CpuBackend)> {
    let mut blocks = CpuBackend::default();
    blocks.set_block_bytes(2 * (16 * p.n as usize + 8 * p.vocab as usize));
    vec![("default", CpuBackend::default()), ("full-row", CpuBackend::full_row()), ("blocks of 2 rows", blocks)]
}

/// Random steps fed as bf16 and as f16 (read by the kernels' widening load,
/// no f32 copy) against the same steps fed as their exact f32 widening:
/// every output of the step (statuses, tokens, logprobs, top logprobs,
/// `sum_smaller_probs`, accepted counts, tree paths, processed rows) equal
/// bit for bit, on the prefix path, the full-row path and in blocks of
/// rows. The steps have grammar masks (the masked f32 copy path), draft
/// chains and trees, raw logprobs, bad values, all-masked rows, force top-k
/// on and off, and rows scaled into f16's subnormal and overflow ranges.
fn half_steps(seed: u64) -> Result<(usize, usize, usize), String> {
    use sampler_host::runtime::plan::StepResult;
    let mut rng = Rng::new(seed);
    let v = rng.pick(&[64usize, 300, 1000, 4099]);
    let force = rng.pick(&[0usize, 16, 64]);
    let mut step = random_step(&mut rng, v, force, 6, GenOpts { p_error: 0.1, ..Default::default() });
    // Half of the steps without force top-k cut every row by top-k: the prefix path.
    if force == 0 && rng.chance(0.5) {
        for r in step.requests.iter_mut() {
            r.params.top_k = rng.range(1, 40) as i64;
        }
    }
    // Rows pushed to f16's subnormals (|x| < 6.1e-5) or past its largest finite value (65504).
    for row in step.logits.chunks_mut(v) {
        match rng.below(6) {
            0 => row.iter_mut().for_each(|x| *x *= 1e-6),
            1 => row.iter_mut().for_each(|x| *x *= 4e4),
            _ => {}
        }
    }
    let n = if force == 0 || force >= v { v } else { force } as u32;
    let b: Vec<bf16> = step.logits.iter().map(|&x| bf16::from_f32(x)).collect();
    let h: Vec<f16> = step.logits.iter().map(|&x| f16::from_f32(x)).collect();
    let bw: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
    let hw: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
    let (pb, _) = build_plan(v as u32, n, u32::MAX, &b, &step.requests).map_err(|e| e.to_string())?;
    let (ph, _) = build_plan(v as u32, n, u32::MAX, &h, &step.requests).map_err(|e| e.to_string())?;
    let (pbw, _) = build_plan(v as u32, n, u32::MAX, &bw, &step.requests).map_err(|e| e.to_string())?;
    let (phw, _) = build_plan(v as u32, n, u32::MAX, &hw, &step.requests).map_err(|e| e.to_string())?;
    let dbg = |r: &StepResult| format!("{r:?}");
    for (what, half, wide) in [("bf16", &pb, &pbw), ("f16", &ph, &phw)] {
        for (name, mut cpu) in backends(half) {
            let (got, want) = (cpu.run(half).map_err(|e| e.to_string())?, cpu.run(wide).map_err(|e| e.to_string())?);
            if dbg(&got) != dbg(&want) {
                return Err(format!("seed {seed} V={v} N={n} {what} ({name}): differs from its f32 widening\n half: {got:?}\n wide: {want:?}"));
            }
        }
    }
    Ok((pb.has_mask.iter().any(|&m| m != 0) as usize, pb.prefix_width().is_some() as usize, pb.any_raw as usize))
}

#[test]
fn half_logits_in_random_steps_equal_their_widening() {
    let (mut masked, mut prefix, mut raw) = (0, 0, 0);
    for seed in 0..96u64 {
        let (m, p, r) = half_steps(seed).unwrap();
        masked += m;
        prefix += p;
        raw += r;
    }
    // The paths that matter were taken: masked copies, the prefix path, raw logprobs.
    assert!(masked > 10 && prefix >= 5 && raw > 10, "masked {masked} prefix {prefix} raw {raw}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, max_shrink_iters: 0, ..Default::default() })]
    /// [`half_steps`] on proptest's seeds.
    #[test]
    fn half_logits_equal_their_widening_proptest(seed in proptest::prelude::any::<u64>()) {
        if let Err(e) = half_steps(seed) {
            proptest::prop_assert!(false, "{}", e);
        }
    }
}

/// The kernels' widening load itself: `rt::cpu::Logits` reads every bf16
/// and f16 bit pattern as `half`'s exact `to_f32` (NaN as NaN), in the
/// element-wise path and in the slice path, and `mask_check` with `copy`
/// writes the widened, masked row (f32 bits) whatever the element type.
#[test]
fn widening_load_is_exact_for_every_bit_pattern() {
    use sampler_kernels::kernels::mask_check;
    use sampler_kernels::rt::cpu::{load, load_scalar, Ctx, Gm, Logits};
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let b: Vec<bf16> = all.iter().map(|&x| bf16::from_bits(x)).collect();
    let h: Vec<f16> = all.iter().map(|&x| f16::from_bits(x)).collect();
    let same = |a: f32, w: f32| a.to_bits() == w.to_bits() || (a.is_nan() && w.is_nan());
    let c = Ctx::new(0);
    for (name, l, wide) in [
        ("bf16", Logits::bf16(&b), b.iter().map(|x| x.to_f32()).collect::<Vec<f32>>()),
        ("f16", Logits::f16(&h), h.iter().map(|x| x.to_f32()).collect::<Vec<f32>>()),
    ] {
        assert_eq!((l.len(), l.dtype()), (all.len(), if name == "bf16" { 1 } else { 2 }));
        let tile = load(&c, l, 0, all.len() as u32);
        for (i, w) in wide.iter().enumerate() {
            assert!(same(tile[i], *w), "{name} {i:#06x}: tile {} want {w}", tile[i]);
            assert!(same(load_scalar(&c, l, i as u64), *w), "{name} {i:#06x}");
        }
        // f16 subnormals are f32 normals, exactly.
        if name == "f16" {
            assert_eq!(tile[1], 2f32.powi(-24));
        }
        // mask_check, one row of 4096 (mask: even ids allowed), copy on.
        let v = 4096u32;
        let row = match l {
            Logits::Bf16(_) => Logits::bf16(&b[0x3c00..0x3c00 + 4096]),
            _ => Logits::f16(&h[0x3c00..0x3c00 + 4096]),
        };
        let words = vec![0x5555_5555u32; 128];
        let (has, raw) = ([1u32], [0u32]);
        let mut masked = vec![0f32; 4096];
        let (mut rm, mut rs, mut st) = (vec![0f32; 1], vec![0u64; 1], vec![9i32; 1]);
        // SAFETY: one program (row 0); every buffer holds row 0.
        unsafe {
            mask_check::cpu(
                0,
                row,
                v,
                Gm::new(&words),
                Gm::new(&has),
                1,
                Gm::new_mut(&mut masked),
                Gm::new(&raw),
                Gm::new_mut(&mut rm),
                Gm::new_mut(&mut rs),
                Gm::new_mut(&mut st),
            )
        };
        for (j, m) in masked.iter().enumerate() {
            let want = if j % 2 == 0 { wide[0x3c00 + j] } else { f32::NEG_INFINITY };
            assert!(same(*m, want), "{name} masked {j}: {m} want {want}");
        }
        assert_eq!(st[0], 0, "{name}: finite row");
    }
}
