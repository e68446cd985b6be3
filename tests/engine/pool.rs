//! Engine: the MTP info pool (SAMPLER.md sections 6 and 9): its size, slot
//! recycling, what draft-model draws write there, and the remap of drafts
//! into the target's top-N space (absent -> -1 -> reject).

use sampler_host::engine::pool::remap_draft_column;
use sampler_host::engine::{pool_bytes, Engine, EngineConfig, EngineRequest, MtpInfoPool, Phase, SyntheticModel};
use sampler_host::{BackendKind, Request, Sampler, SamplerConfig, SamplingParams};

/// The backend under test: `SAMPLER_ENGINE_BACKEND=cuda` runs these tests on
/// the GPU (the GPU suite); the default is the CPU.
fn test_backend() -> BackendKind {
    std::env::var("SAMPLER_ENGINE_BACKEND").ok().and_then(|s| s.parse().ok()).unwrap_or(BackendKind::Cpu)
}

fn sampler(v: u32, force_topk: u32, nextn: u32) -> Sampler {
    Sampler::new(SamplerConfig { vocab_size: v, force_topk, nextn, backend: test_backend() }).unwrap()
}

fn params(seed: u64) -> SamplingParams {
    SamplingParams { seq_seed: Some(seed), ..Default::default() }
}

#[test]
fn pool_size_formula() {
    // (max_num_seqs + 1) * nextn rows of N f32, plus N i32 ids with force top-k.
    assert_eq!(pool_bytes(64, 5, 4096, 129280), 325 * 4096 * 8);
    assert_eq!(pool_bytes(64, 5, 4096, 129280), 10_649_600);
    assert_eq!(pool_bytes(64, 5, 129280, 129280), 325 * 129280 * 4);
    assert_eq!(pool_bytes(64, 5, 129280, 129280), 168_064_000);
    let p = MtpInfoPool::new(64, 5, 4096, 129280).unwrap();
    assert_eq!((p.rows(), p.bytes(), p.has_ids()), (325, 10_649_600, true));
    let p = MtpInfoPool::new(64, 5, 129280, 129280).unwrap();
    assert_eq!((p.rows(), p.bytes(), p.has_ids()), (325, 168_064_000, false));
    // The engine's pool follows its sampler's N.
    let e =
        Engine::new(sampler(1000, 64, 5), EngineConfig { max_num_seqs: 7, nextn: 3, ..Default::default() }).unwrap();
    assert_eq!(e.pool().bytes(), 8 * 3 * 64 * 8);
    let e = Engine::new(sampler(1000, 0, 5), EngineConfig { max_num_seqs: 7, nextn: 3, ..Default::default() }).unwrap();
    assert_eq!(e.pool().bytes(), 8 * 3 * 1000 * 4);
}

#[test]
fn slots_are_recycled() {
    let mut p = MtpInfoPool::new(2, 3, 8, 16).unwrap();
    let a = p.alloc().unwrap();
    let b = p.alloc().unwrap();
    assert_ne!(a, b);
    assert!(p.alloc().is_none(), "only max_num_seqs slots; the +1 slot is scratch");
    assert_ne!(a, p.scratch_slot());
    p.release(a);
    assert_eq!(p.alloc(), Some(a));

    // Through the engine: 6 requests, 2 slots.
    let mut e =
        Engine::new(sampler(512, 32, 3), EngineConfig { max_num_seqs: 2, nextn: 3, ..Default::default() }).unwrap();
    for id in 0..6 {
        e.add_request(EngineRequest::new(id, vec![1, 2, 3, id as i32 + 4], params(id), 3 + id as usize)).unwrap();
    }
    let mut model = SyntheticModel::new(512, 9, 0.7);
    let mut max_in_use = 0;
    let mut steps = 0;
    while e.pending() > 0 {
        let r = e.step(&mut model).unwrap();
        assert!(r.requests.len() <= 2);
        max_in_use = max_in_use.max(r.slots_in_use);
        steps += 1;
        assert!(steps < 200);
    }
    let fin = e.take_finished();
    assert_eq!(fin.len(), 6);
    assert_eq!(max_in_use, 2);
    for f in &fin {
        assert!(f.status.is_ok());
        assert!(f.slot < 2, "slot {} handed out", f.slot);
        assert_eq!(f.output.len(), 3 + f.id as usize);
    }
    assert!(fin.iter().filter(|f| f.slot == 0).count() >= 2, "slot 0 reused");
    assert_eq!(e.pool().slots_in_use(), 0);
}

#[test]
fn draft_draws_fill_the_pool() {
    for force_topk in [0u32, 16] {
        let v = 256;
        let mut e =
            Engine::new(sampler(v, force_topk, 4), EngineConfig { max_num_seqs: 4, nextn: 4, ..Default::default() })
                .unwrap();
        e.add_request(EngineRequest::new(7, vec![5; 10], params(3), 50)).unwrap();
        let mut model = SyntheticModel::new(v as usize, 1, 0.5);
        e.step(&mut model).unwrap(); // prefill + 4 drafts
        let drafts = e.drafts_of(7).unwrap().to_vec();
        assert_eq!(drafts.len(), 4);
        let slot = e.slot_of(7).unwrap();
        let n = if force_topk == 0 { v as usize } else { 16 };
        for (i, &d) in drafts.iter().enumerate() {
            let q = e.pool().read(slot, i);
            assert!(q.ids.len() <= n && !q.ids.is_empty());
            // The draft token has mass in its own distribution, which sums to 1.
            assert!(q.ids.contains(&d), "draft {d} in its distribution");
            let total: f64 = q.logprobs.iter().map(|&x| (x as f64).exp()).sum();
            assert!((total - 1.0).abs() < 1e-4, "sum {total}");
            let (ids, _) = e.pool().raw_row(slot, i);
            assert_eq!(ids.len(), n);
        }
        assert_eq!(e.pool().has_ids(), force_topk != 0);
    }
}

#[test]
fn remap_absent_draft_rejects() {
    // V = 16, N = 4: the target's top-4 is ids 12..15 (largest logits).
    let v = 16u32;
    let mut s = sampler(v, 4, 1);
    let logits: Vec<f32> = (0..v).map(|t| t as f32).collect();
    let target_top: Vec<i32> = vec![15, 14, 13, 12];
    assert_eq!(remap_draft_column(3, &target_top), -1);
    assert_eq!(remap_draft_column(13, &target_top), 2);

    // The draft model put all its mass on token 3 (its own top-4: 3, 0, 1, 2).
    let mut pool = MtpInfoPool::new(2, 1, 4, v as usize).unwrap();
    let slot = pool.alloc().unwrap();
    pool.write(slot, 0, &[3, 0, 1, 2], &[0.0, f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY]).unwrap();
    let q = pool.read(slot, 0);
    assert_eq!((q.ids.clone(), q.logprobs.clone()), (vec![3], vec![0.0]));
    let rows = [logits.clone(), logits.clone()].concat();
    for seed in 0..20 {
        let req = Request::decode(params(seed), 11, 2, vec![3], vec![q.clone()]);
        let out = s.sample(&rows, &[req]).unwrap();
        let r = &out.requests[0];
        assert!(r.status.is_ok());
        assert_eq!(r.accepted, 0, "a draft outside the target's top-N is rejected");
        assert_ne!(r.emitted[0], 3);
        assert!(target_top.contains(&r.emitted[0]), "the residual draw stays in the target's top-N");
    }
    // The same draft inside the target's top-N with q <= p is accepted.
    let mut pool = MtpInfoPool::new(2, 1, 4, v as usize).unwrap();
    let slot = pool.alloc().unwrap();
    let lq = [(0.01f32).ln(), (0.33f32).ln(), (0.33f32).ln(), (0.33f32).ln()];
    pool.write(slot, 0, &[15, 0, 1, 2], &lq).unwrap();
    let req = Request::decode(params(5), 11, 2, vec![15], vec![pool.read(slot, 0)]);
    let out = s.sample(&rows, &[req]).unwrap();
    assert_eq!(out.requests[0].accepted, 1);
    assert_eq!(out.requests[0].emitted[0], 15);
}

#[test]
fn full_agreement_accepts_every_draft() {
    // A draft equal to the target at the same predicted position has q == p:
    // always accepted. This checks that draft positions line up with the
    // next step's verify rows, with and without force top-k.
    for force_topk in [0u32, 64] {
        let mut e =
            Engine::new(sampler(1024, force_topk, 5), EngineConfig { max_num_seqs: 4, nextn: 5, ..Default::default() })
                .unwrap();
        for id in 0..3 {
            e.add_request(EngineRequest::new(
                id,
                vec![9; 5 + id as usize],
                SamplingParams { top_p: 0.9, ..params(id) },
                40,
            ))
            .unwrap();
        }
        let mut model = SyntheticModel::new(1024, 4, 1.0);
        let reports = e.run_to_completion(&mut model, 100).unwrap();
        let (acc, drafted) = reports.iter().map(|r| r.acceptance()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        assert!(drafted > 0);
        assert_eq!(acc, drafted, "force_topk {force_topk}");
        for r in &reports {
            for q in &r.requests {
                if let Phase::Decode { drafts } = q.phase {
                    assert_eq!(q.emitted.len(), (drafts + 1).min(q.emitted.len()));
                }
            }
        }
        assert!(e.take_finished().iter().all(|f| f.output.len() == 40));
    }
}

#[test]
fn low_agreement_rejects_some_and_runs_are_deterministic() {
    let run = |agreement: f32| {
        let mut e =
            Engine::new(sampler(2048, 128, 5), EngineConfig { max_num_seqs: 8, nextn: 5, ..Default::default() })
                .unwrap();
        for id in 0..4 {
            e.add_request(EngineRequest::new(id, vec![1, 2, 3], params(100 + id), 30)).unwrap();
        }
        let mut model = SyntheticModel::new(2048, 11, agreement);
        let reports = e.run_to_completion(&mut model, 200).unwrap();
        let (a, d) = reports.iter().map(|r| r.acceptance()).fold((0, 0), |x, y| (x.0 + y.0, x.1 + y.1));
        let mut fin = e.take_finished();
        fin.sort_by_key(|f| f.id);
        (a, d, fin.into_iter().map(|f| f.output).collect::<Vec<_>>())
    };
    let (a, d, out1) = run(0.0);
    assert!(d > 0 && a < d, "noisy drafts are sometimes rejected: {a}/{d}");
    let (_, _, out2) = run(0.0);
    assert_eq!(out1, out2, "bitwise deterministic");
    assert!(out1.iter().all(|o| o.len() == 30));
}

/// Issue 24 through the engine (prefill, draft draws into the pool, verify
/// of the pool's draft distributions): temperature +inf fails only its own
/// request, naming the field; -0.0 runs exactly as 0 (clamped, not
/// negative); min-p requests and every pool distribution pass the draft
/// distribution checks of SAMPLER.md 6 (no request fails on `draft_dists`).
#[test]
fn temperature_inf_fails_alone_and_minus_zero_is_zero_through_the_engine() {
    use sampler_host::{ParamError, RequestError};
    let run = |temps: &[f32]| {
        let mut e = Engine::new(sampler(1024, 64, 4), EngineConfig { max_num_seqs: 8, nextn: 4, ..Default::default() })
            .unwrap();
        for (id, &t) in temps.iter().enumerate() {
            let p = SamplingParams { temperature: t, min_p: [0.0, 0.05, 0.2][id % 3], ..params(40 + id as u64) };
            e.add_request(EngineRequest::new(id as u64, vec![3, 1, 4], p, 25)).unwrap();
        }
        let mut model = SyntheticModel::new(1024, 7, 0.8);
        let reports = e.run_to_completion(&mut model, 200).unwrap();
        assert!(reports.iter().map(|r| r.acceptance().1).sum::<u64>() > 0, "drafts were verified");
        let mut fin = e.take_finished();
        fin.sort_by_key(|f| f.id);
        fin
    };
    let a = run(&[0.8, f32::INFINITY, -0.0, 1.0, 0.0]);
    assert_eq!(a.len(), 5);
    assert_eq!(a[1].status, Err(RequestError::Param(ParamError::Temperature(f32::INFINITY))));
    assert!(a[1].status.as_ref().unwrap_err().to_string().contains("temperature"));
    for i in [0, 2, 3, 4] {
        assert!(a[i].status.is_ok(), "request {i}: {:?}", a[i].status);
        assert_eq!(a[i].output.len(), 25);
    }
    // -0.0 gives bitwise what 0.0 gives with the same seed (ids 2 and 4 differ
    // in seed, so compare against a run with the temperatures swapped).
    let b = run(&[0.8, f32::INFINITY, 0.0, 1.0, -0.0]);
    assert_eq!((&a[2].output, &a[2].output_logprobs), (&b[2].output, &b[2].output_logprobs));
    assert_eq!((&a[4].output, &a[4].output_logprobs), (&b[4].output, &b[4].output_logprobs));
    assert_eq!(a[0].output, b[0].output, "the other requests are unaffected");
}
