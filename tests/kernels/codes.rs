//! The limits and codes of `sampler_kernels::codes` are the ones the kernels
//! and the host use (issue 11 item 4): the DSL spells them as literals, so
//! this runs the kernels and checks each code where it is produced.

use sampler_host::layout::build_plan;
use sampler_host::request::RequestKind;
use sampler_host::runtime::device::cpu::CpuBackend;
use sampler_host::{BackendKind, ConfigError, Request, Sampler, SamplerConfig, SamplingParams};
use sampler_kernels::codes::*;

#[test]
fn row_and_group_codes_are_the_kernels() {
    let v = 64usize;
    let p = SamplingParams { seq_seed: Some(1), ..Default::default() };
    let mut logits = vec![0.5f32; 4 * v];
    logits[v + 3] = f32::NAN; // row 1: a bad value
    logits[2 * v..3 * v].fill(f32::NEG_INFINITY); // row 2: all masked
    let bad = SamplingParams { top_p: 2.0, ..p.clone() };
    let reqs = [
        Request::prefill(p.clone(), 5),
        Request::prefill(p.clone(), 5),
        Request::prefill(p.clone(), 5),
        Request { params: bad, kind: RequestKind::Prefill { seqlen_k: 5 }, golden: vec![], masks: None },
    ];
    let (plan, _) = build_plan(v as u32, v as u32, 5, &logits, &reqs).unwrap();
    assert_eq!(plan.group_kind, [GROUP_FRESH; 4]);
    assert_eq!(plan.group_status, [GROUP_OK, GROUP_OK, GROUP_OK, GROUP_HOST_FAILED]);
    let res = CpuBackend::default().run(&plan).unwrap();
    assert_eq!(res.row_status[..3], [ROW_OK, ROW_BAD_VALUE, ROW_ALL_MASKED]);
    assert_eq!(res.group_status, [GROUP_OK, ROW_BAD_VALUE, ROW_ALL_MASKED, GROUP_HOST_FAILED]);
    // Kinds: a prompt-logprobs group draws nothing, a verify group is one.
    let prompt = Request {
        params: p.clone(),
        kind: RequestKind::PromptLogprobs { targets: vec![1, 2] },
        golden: vec![],
        masks: None,
    };
    let verify = Request::decode(p, 10, 2, vec![3], vec![Default::default()]);
    let logits = vec![0.5f32; 4 * v];
    let (plan, _) = build_plan(v as u32, v as u32, 5, &logits, &[prompt, verify]).unwrap();
    assert_eq!(plan.group_kind, [GROUP_NO_DRAW, GROUP_VERIFY]);
    let res = CpuBackend::default().run(&plan).unwrap();
    assert_eq!(res.tokens[..2], [-1, -1], "GROUP_NO_DRAW rows draw no token");
}

#[test]
fn force_topk_limits_are_the_config_limits() {
    let cfg = |n, b| SamplerConfig { vocab_size: 129280, force_topk: n, nextn: 5, backend: b };
    // The CPU has no limit; Ascend's is checked before CANN is probed.
    assert!(Sampler::new(cfg(MAX_N_NVIDIA + 1, BackendKind::Cpu)).is_ok());
    match Sampler::new(cfg(MAX_N_ASCEND + 1, BackendKind::Ascend)) {
        Err(ConfigError::ForceTopkTooLarge { limit, .. }) => assert_eq!(limit, MAX_N_ASCEND),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        sampler_host::sampler::check_force_topk(MAX_N_NVIDIA + 1, 129280, "nvidia"),
        Err(ConfigError::ForceTopkTooLarge { n: MAX_N_NVIDIA + 1, platform: "nvidia", limit: MAX_N_NVIDIA })
    );
    assert_eq!(sampler_host::runtime::device::cuda::FUSED_MAX, MAX_N_NVIDIA);
    assert_eq!(sampler_kernels::spec::GPU_SORT_CAP, MAX_N_NVIDIA);
}

/// GROUP_TREE and the tree laws: the host's codes for a tree request, and
/// `finalize` leaving a tree group's rows undecided (-1) for `tree_walk`.
#[test]
fn tree_codes_are_the_kernels() {
    use sampler_host::{DraftDist, DraftTree};
    let v = 64usize;
    let p = SamplingParams { seq_seed: Some(1), ..Default::default() };
    let fixed = DraftTree { parent: vec![-1, 0, 0], tokens: vec![3, 5], draft_dists: None, without_replacement: false };
    let dist = DraftDist { ids: vec![3, 5], logprobs: vec![-0.5, -1.0] };
    let drawn = DraftTree { draft_dists: Some(vec![dist]), without_replacement: true, ..fixed.clone() };
    let reqs = [Request::tree(p.clone(), 20, fixed), Request::tree(p, 20, drawn)];
    let logits = vec![0.5f32; 6 * v];
    let (mut plan, infos) = build_plan(v as u32, v as u32, 5, &logits, &reqs).unwrap();
    assert!(infos.iter().all(|i| i.params.is_ok()), "{infos:?}");
    assert_eq!(plan.group_kind, [GROUP_TREE; 2]);
    assert_eq!(plan.tree_mode, [TREE_FIXED, TREE_WITHOUT_REPLACEMENT]);
    assert!(plan.any_tree);
    let res = CpuBackend::default().run(&plan).unwrap();
    for g in 0..2 {
        // tree_walk emits accepted + 1 tokens per tree (the path, then the bonus).
        let emitted = res.tokens[3 * g..3 * g + 3].iter().filter(|&&t| t >= 0).count();
        assert_eq!(emitted, res.accepted[g] as usize + 1, "group {g}: {:?}", res.tokens);
    }
    // Without tree_walk, finalize alone leaves every row of a GROUP_TREE group at -1.
    plan.any_tree = false;
    let res = CpuBackend::default().run(&plan).unwrap();
    assert_eq!(res.tokens, [-1; 6]);
}
