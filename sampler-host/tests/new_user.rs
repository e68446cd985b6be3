//! A new user's engine-like program against the documented API only
//! (README "Using it from an engine", docs/ENGINE.md, the rustdoc): built
//! without the `conformance` feature, so nothing doc-hidden is reachable.
//! Then the same API is fed bad input: every bad request must fail only
//! itself with an error naming the field and the value (SAMPLER.md 1-11).

use sampler_host::interop::bf16;
use sampler_host::{
    BackendKind, BatchError, DraftDist, DraftTree, ParamError, Request, RequestError, RequestKind, Sampler,
    SamplerConfig, SamplingParams, StepOutput, TokenMask,
};

const V: u32 = 1000;

fn sampler(force_topk: u32) -> Sampler {
    Sampler::new(SamplerConfig { vocab_size: V, force_topk, nextn: 5, backend: BackendKind::Cpu }).unwrap()
}

/// LLM-shaped synthetic logits: `rows` rows of V, a few peaks per row.
fn logits(rows: usize, salt: u64) -> Vec<f32> {
    let mut z = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(rows * V as usize);
    for r in 0..rows {
        for t in 0..V as usize {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            let noise = (z >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            let peak = if (t * 7 + r * 3) % 97 == 0 { 6.0 } else { 0.0 };
            out.push(noise * 4.0 + peak - 2.0);
        }
    }
    out
}

fn params(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 0.8,
        top_p: 0.9,
        top_k: 40,
        min_p: 0.01,
        top_logprobs: 5,
        seq_seed: Some(seed),
        ..Default::default()
    }
}

fn ok(out: &StepOutput) {
    for (i, r) in out.requests.iter().enumerate() {
        assert!(r.status.is_ok(), "request {i}: {:?}", r.status);
    }
}

/// One "engine step": prefill two prompts, draft, verify the drafts, a
/// plain decode row, prompt logprobs and a tree, in one batch.
fn engine_batch(s: &mut Sampler) -> (Vec<Request>, usize) {
    let p = params(11);
    let q = params(12);
    // Draft model: 3 draws for request A, whose processed rows feed its verify.
    let draft =
        s.request(q.clone(), RequestKind::Draft { seqlen_k: 50, seqlen_q: 1, last_valid_offset: 0, rows: 3 }).unwrap();
    let dl = logits(3, 99);
    let (dout, proc_rows) = s.sample_with_processed(&dl, std::slice::from_ref(&draft), &[0, 1, 2]).unwrap();
    ok(&dout);
    let drafts: Vec<i32> = dout.requests[0].emitted.clone();
    assert_eq!(drafts.len(), 3);
    let dists: Vec<DraftDist> = (0..3)
        .map(|i| {
            let (ids, lps) = proc_rows.row(i).unwrap();
            DraftDist { ids: ids.to_vec(), logprobs: lps.to_vec() }
        })
        .collect();
    let verify = s
        .request(
            q.clone(),
            RequestKind::Decode { seqlen_k: 53, seqlen_q: 4, drafts: drafts.clone(), draft_dists: dists },
        )
        .unwrap();
    // n-gram drafts: no distribution (one-hot).
    let ngram = Request::decode(p.clone(), 80, 3, vec![5, 6], vec![DraftDist::default(); 2]);
    let prefill_a = Request::prefill(p.clone(), 41);
    let prefill_b = Request::prefill(SamplingParams { seq_seed: Some(3), top_logprobs: 2, ..Default::default() }, 100);
    let fresh = Request::decode(p.clone(), 60, 1, vec![], vec![]);
    let prompt = s.request(p.clone(), RequestKind::PromptLogprobs { targets: vec![4, 8, 15, 16, -1] }).unwrap();
    let tree = Request::tree(
        p.clone(),
        70,
        DraftTree { parent: vec![-1, 0, 0, 1], tokens: vec![7, 14, 21], draft_dists: None, without_replacement: false },
    );
    let draft2 = Request {
        params: q,
        kind: RequestKind::Draft { seqlen_k: 53, seqlen_q: 4, last_valid_offset: 2, rows: 2 },
        golden: vec![],
        masks: None,
    };
    let reqs = vec![prefill_a, prefill_b, verify, ngram, fresh, prompt, tree, draft2];
    let rows = reqs.iter().map(Request::rows).sum();
    (reqs, rows)
}

#[test]
fn engine_like_program_f32_and_bf16() {
    for n in [0, 64] {
        let mut s = sampler(n);
        let (reqs, rows) = engine_batch(&mut s);
        let l = logits(rows, 7);
        let out = s.sample(&l, &reqs).unwrap();
        ok(&out);
        assert_eq!(out.rows.len(), rows);
        assert_eq!(out.top_logprobs_width, 5);
        // Prefill: one token; its own top-logprobs width.
        assert_eq!(out.requests[0].emitted.len(), 1);
        assert_eq!(out.top_logprobs(0, 0).unwrap().len(), 5);
        assert_eq!(out.top_logprobs(1, 0).unwrap().len(), 2);
        // Verify: accepted + 1 tokens.
        let v = &out.requests[2];
        assert_eq!(v.emitted.len() as u32, v.accepted + 1);
        // Prompt logprobs: one per target != -1, all finite and <= 0.
        assert_eq!(out.requests[5].prompt_logprobs.len(), 4);
        assert!(out.requests[5].prompt_logprobs.iter().all(|x| *x <= 0.0));
        assert!(out.requests[5].emitted.is_empty());
        // Tree: a path root first.
        let t = &out.requests[6];
        assert_eq!(t.path.as_ref().unwrap().len() as u32, t.accepted + 1);
        assert_eq!(t.path.as_ref().unwrap()[0], 0);
        // Draft rows: one token each.
        assert_eq!(out.requests[7].emitted.len(), 2);
        // The top logprobs are sorted and the emitted token's logprob is kept.
        for r in &out.rows {
            for w in r.top_logprobs.windows(2) {
                assert!(w[0].1 >= w[1].1, "{:?}", r.top_logprobs);
            }
        }
        // Deterministic with seeds.
        assert_eq!(s.sample(&l, &reqs).unwrap(), out);
        // bf16: equal to the widened f32 logits, bit for bit.
        let h: Vec<bf16> = l.iter().map(|&x| bf16::from_f32(x)).collect();
        let w: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
        assert_eq!(s.sample(&h, &reqs).unwrap(), s.sample(&w, &reqs).unwrap());
        // Batch invariance: each request alone gives its own outputs.
        let mut first = 0;
        for (i, r) in reqs.iter().enumerate() {
            let k = r.rows();
            let alone = s.sample(&l[first * V as usize..(first + k) * V as usize], std::slice::from_ref(r)).unwrap();
            assert_eq!(alone.requests[0].emitted, out.requests[i].emitted, "request {i}");
            assert_eq!(alone.requests[0].prompt_logprobs, out.requests[i].prompt_logprobs, "request {i}");
            first += k;
        }
    }
}

/// `bad` among good requests: it fails with `want`, the others are bitwise
/// what they are without it.
fn one_bad_among_good(bad: Request, bad_logits: Option<Vec<f32>>, want: impl Fn(&RequestError) -> bool) {
    let mut s = sampler(64);
    let good = vec![
        Request::prefill(params(1), 10),
        Request::decode(params(2), 20, 3, vec![1, 2], vec![DraftDist::default(); 2]),
    ];
    let gl = logits(4, 5);
    let base = s.sample(&gl, &good).unwrap();
    ok(&base);
    let br = bad.rows();
    let bl = bad_logits.unwrap_or_else(|| logits(br, 6));
    assert_eq!(bl.len(), br * V as usize);
    let mut l = gl[..V as usize].to_vec();
    l.extend_from_slice(&bl);
    l.extend_from_slice(&gl[V as usize..]);
    let reqs = vec![good[0].clone(), bad, good[1].clone()];
    let out = s.sample(&l, &reqs).unwrap();
    let e = out.requests[1].status.as_ref().expect_err("the bad request must fail");
    assert!(want(e), "unexpected error: {e:?} ({e})");
    assert!(out.rows[1..1 + br].iter().all(|r| r.token == -1));
    for (i, j) in [(0, 0), (2, 1)] {
        let (a, b) = (&out.requests[i], &base.requests[j]);
        assert_eq!(
            (&a.status, &a.emitted, &a.emitted_logprobs, a.accepted),
            (&b.status, &b.emitted, &b.emitted_logprobs, b.accepted),
            "good request {j}"
        );
    }
    assert_eq!(out.rows[0], base.rows[0]);
    assert_eq!(&out.rows[1 + br..], &base.rows[1..]);
}

#[test]
fn bad_parameters_fail_only_their_request() {
    let with = |f: &dyn Fn(&mut SamplingParams)| {
        let mut p = params(9);
        f(&mut p);
        Request::prefill(p, 5)
    };
    one_bad_among_good(
        with(&|p| p.temperature = f32::NAN),
        None,
        |e| matches!(e, RequestError::Param(ParamError::Temperature(x)) if x.is_nan()),
    );
    one_bad_among_good(with(&|p| p.temperature = -0.5), None, |e| {
        *e == RequestError::Param(ParamError::Temperature(-0.5))
    });
    // +inf is an error naming the field (decided), like NaN.
    one_bad_among_good(with(&|p| p.temperature = f32::INFINITY), None, |e| {
        *e == RequestError::Param(ParamError::Temperature(f32::INFINITY)) && e.to_string().contains("temperature")
    });
    one_bad_among_good(with(&|p| p.top_p = 0.0), None, |e| *e == RequestError::Param(ParamError::TopP(0.0)));
    one_bad_among_good(with(&|p| p.top_p = 1.0001), None, |e| matches!(e, RequestError::Param(ParamError::TopP(_))));
    one_bad_among_good(with(&|p| p.top_p = f32::NAN), None, |e| matches!(e, RequestError::Param(ParamError::TopP(_))));
    one_bad_among_good(with(&|p| p.top_k = -5), None, |e| *e == RequestError::Param(ParamError::TopK(-5)));
    one_bad_among_good(with(&|p| p.top_k = i64::MAX), None, |e| *e == RequestError::Param(ParamError::TopK(i64::MAX)));
    one_bad_among_good(with(&|p| p.top_logprobs = u32::MAX), None, |e| {
        matches!(e, RequestError::Param(ParamError::TopLogprobs { .. }))
    });
    one_bad_among_good(with(&|p| p.min_p = -0.1), None, |e| *e == RequestError::Param(ParamError::MinP(-0.1)));
    one_bad_among_good(with(&|p| p.golden_token_ids = vec![1]), None, |e| e.to_string().contains("golden_token_ids"));
    one_bad_among_good(with(&|p| p.prompt_logprobs = true), None, |e| e.to_string().contains("prompt_logprobs"));
}

#[test]
fn huge_top_k_is_fine() {
    // top_k above V (and above N) keeps everything: not an error.
    let mut s = sampler(64);
    let p = SamplingParams { top_k: i32::MAX as i64, top_logprobs: 64, seq_seed: Some(1), ..Default::default() };
    let out = s.sample(&logits(1, 1), &[Request::prefill(p, 3)]).unwrap();
    ok(&out);
}

#[test]
fn bad_logits_fail_only_their_request() {
    let mut nan = logits(1, 3);
    nan[17] = f32::NAN;
    one_bad_among_good(Request::prefill(params(3), 4), Some(nan), |e| *e == RequestError::BadLogits { row: 0 });
    let mut inf = logits(2, 3);
    inf[V as usize + 1] = f32::INFINITY;
    one_bad_among_good(Request::decode(params(3), 9, 2, vec![4], vec![DraftDist::default()]), Some(inf), |e| {
        *e == RequestError::BadLogits { row: 1 }
    });
    let ninf = vec![f32::NEG_INFINITY; V as usize];
    one_bad_among_good(Request::prefill(params(3), 4), Some(ninf), |e| *e == RequestError::AllMasked { row: 0 });
    // -inf here and there is fine.
    let mut some = logits(1, 3);
    some[0] = f32::NEG_INFINITY;
    let mut s = sampler(64);
    ok(&s.sample(&some, &[Request::prefill(params(3), 4)]).unwrap());
}

#[test]
fn bad_drafts_fail_only_their_request() {
    let named = |field: &'static str, value: &'static str| move |e: &RequestError| matches!(e, RequestError::Field { field: f, msg } if *f == field && msg.contains(value));
    one_bad_among_good(
        Request::decode(params(4), 30, 3, vec![1, 1000], vec![DraftDist::default(); 2]),
        None,
        named("drafts", "1000"),
    );
    one_bad_among_good(
        Request::decode(params(4), 30, 3, vec![-7, 1], vec![DraftDist::default(); 2]),
        None,
        named("drafts", "-7"),
    );
    // seqlen_q that does not match the drafts.
    one_bad_among_good(
        Request::decode(params(4), 30, 4, vec![1, 2], vec![DraftDist::default(); 2]),
        None,
        named("drafts", "seqlen_q = 4"),
    );
    one_bad_among_good(
        Request::decode(params(4), 30, 2, vec![1, 2], vec![DraftDist::default(); 2]),
        None,
        named("drafts", "seqlen_q = 2"),
    );
    // More drafts than nextn.
    one_bad_among_good(
        Request::decode(params(4), 30, 7, vec![1; 6], vec![DraftDist::default(); 6]),
        None,
        named("drafts", "nextn"),
    );
    // Draft distributions: count, id range, lengths, NaN / positive logprobs.
    one_bad_among_good(
        Request::decode(params(4), 30, 3, vec![1, 2], vec![DraftDist::default()]),
        None,
        named("draft_dists", "1 entries"),
    );
    let d = |ids: Vec<i32>, lps: Vec<f32>| DraftDist { ids, logprobs: lps };
    one_bad_among_good(
        Request::decode(params(4), 30, 2, vec![1], vec![d(vec![1, 5000], vec![-0.1, -2.0])]),
        None,
        named("draft_dists", "5000"),
    );
    one_bad_among_good(
        Request::decode(params(4), 30, 2, vec![1], vec![d(vec![1, 2], vec![-0.1])]),
        None,
        named("draft_dists", "2 ids and 1 logprobs"),
    );
    // More ids than V (ids repeat): refused, and it does not widen the other rows' draft arrays.
    one_bad_among_good(
        Request::decode(params(4), 30, 2, vec![1], vec![d(vec![1; 1001], vec![-7.0; 1001])]),
        None,
        named("draft_dists", "1001 ids, more than vocab_size = 1000"),
    );
    let tree = DraftTree {
        parent: vec![-1, 0],
        tokens: vec![1],
        draft_dists: Some(vec![d(vec![1; 1001], vec![-7.0; 1001])]),
        without_replacement: false,
    };
    one_bad_among_good(Request::tree(params(4), 30, tree), None, named("draft_dists", "1001 ids"));
    one_bad_among_good(
        Request::decode(params(4), 30, 2, vec![1], vec![d(vec![1], vec![f32::NAN])]),
        None,
        named("draft_dists", "NaN"),
    );
    one_bad_among_good(
        Request::decode(params(4), 30, 2, vec![1], vec![d(vec![1], vec![0.5])]),
        None,
        named("draft_dists", "0.5"),
    );
    // Section 6 (decided): repeated ids, a logprob above 1e-6, a total above
    // 1 + 1e-4 fail their request alone, also on an unused placeholder row.
    one_bad_among_good(
        Request::decode(params(4), 30, 2, vec![1], vec![d(vec![1, 3, 1], vec![-2.0, -2.0, -2.0])]),
        None,
        named("draft_dists", "repeated ids"),
    );
    one_bad_among_good(
        Request::decode(params(4), 30, 2, vec![1], vec![d(vec![1], vec![2e-6])]),
        None,
        named("draft_dists", "2e-6"),
    );
    one_bad_among_good(
        Request::decode(params(4), 30, 2, vec![-1], vec![d(vec![1, 2], vec![-0.1, -1.0])]),
        None,
        named("draft_dists", "total probability"),
    );
    // Golden ids.
    let mut g = Request::prefill(params(4), 5);
    g.golden = vec![V as i32];
    one_bad_among_good(g, None, named("golden", "1000"));
    let mut g = Request::prefill(params(4), 5);
    g.golden = vec![1, 2];
    one_bad_among_good(g, None, named("golden", "2 entries"));
    // Prompt-logprob targets.
    let pl = Request {
        params: params(4),
        kind: RequestKind::PromptLogprobs { targets: vec![1, 2000] },
        golden: vec![],
        masks: None,
    };
    one_bad_among_good(pl, None, named("targets", "2000"));
    // Draft rows above nextn.
    let dr = Request {
        params: params(4),
        kind: RequestKind::Draft { seqlen_k: 5, seqlen_q: 1, last_valid_offset: 0, rows: 6 },
        golden: vec![],
        masks: None,
    };
    one_bad_among_good(dr, None, named("rows", "6"));
    // Draft draws for a decode request of seqlen_q 0 (which cannot exist).
    let dr = Request {
        params: params(4),
        kind: RequestKind::Draft { seqlen_k: 5, seqlen_q: 0, last_valid_offset: 0, rows: 2 },
        golden: vec![],
        masks: None,
    };
    one_bad_among_good(dr, None, named("seqlen_q", "= 0"));
}

#[test]
fn bad_trees_fail_only_their_request() {
    let t = |parent: Vec<i32>, tokens: Vec<i32>| {
        Request::tree(params(5), 40, DraftTree { parent, tokens, draft_dists: None, without_replacement: false })
    };
    let has = |s: &'static str| move |e: &RequestError| e.to_string().contains(s);
    one_bad_among_good(t(vec![-1, 0, 5], vec![1, 2]), None, has("5"));
    one_bad_among_good(t(vec![-1, 0, 0], vec![1, 9999]), None, has("9999"));
    one_bad_among_good(t(vec![-1, 0, 0], vec![1]), None, has("1"));
    one_bad_among_good(t(vec![0, 0], vec![1]), None, has("0"));
}

#[test]
fn bad_masks_fail_only_their_request() {
    let words = V.div_ceil(32) as usize;
    let mut m = Request::prefill(params(6), 5);
    m.masks = Some(vec![vec![0; words]]); // allows nothing
    one_bad_among_good(m, None, |e| *e == RequestError::AllMasked { row: 0 });
    let mut m = Request::prefill(params(6), 5);
    m.masks = Some(vec![vec![u32::MAX; words - 1]]);
    one_bad_among_good(m, None, |e| {
        matches!(e, RequestError::BadMask { .. }) && e.to_string().contains(&format!("{}", words - 1))
    });
    let mut m = Request::prefill(params(6), 5);
    m.masks = Some(vec![]);
    one_bad_among_good(m, None, |e| matches!(e, RequestError::BadMask { got_masks: 0, .. }));
}

#[test]
fn batch_shape_errors_are_typed() {
    let mut s = sampler(0);
    let r = [Request::prefill(params(1), 3)];
    // Wrong logits length: a typed batch error naming the numbers.
    let e = s.sample(&vec![0.0f32; V as usize + 1], &r).unwrap_err();
    assert!(matches!(e, BatchError::LogitsShape { got: 1001, rows: 1, vocab: 1000, expected: 1000 }), "{e:?}");
    assert!(e.to_string().contains("1001"), "{e}");
    // Empty batch: nothing to do, an empty output (or a clear error), never a panic.
    let out = s.sample(&Vec::<f32>::new(), &[]);
    assert!(matches!(&out, Ok(o) if o.rows.is_empty() && o.requests.is_empty()), "{out:?}");
}

#[test]
fn zero_row_requests_do_not_break_the_batch() {
    // Requests that own no rows (empty prompt-logprob targets, 0 draft rows, seqlen_q 0).
    let mut s = sampler(64);
    let empty_pl = Request {
        params: params(1),
        kind: RequestKind::PromptLogprobs { targets: vec![] },
        golden: vec![],
        masks: None,
    };
    let zero_draft = Request {
        params: params(1),
        kind: RequestKind::Draft { seqlen_k: 5, seqlen_q: 1, last_valid_offset: 0, rows: 0 },
        golden: vec![],
        masks: None,
    };
    let q0 = Request::decode(params(1), 5, 0, vec![], vec![]);
    let good = Request::prefill(params(2), 7);
    let l = logits(1, 2);
    let alone = s.sample(&l, std::slice::from_ref(&good)).unwrap();
    let out = s.sample(&l, &[empty_pl, zero_draft, good.clone(), q0]).unwrap();
    assert_eq!(out.requests[2].emitted, alone.requests[0].emitted);
    assert_eq!(out.rows, alone.rows);
    assert!(out.requests[0].status.is_ok(), "{:?}", out.requests[0].status);
    assert!(
        matches!(&out.requests[3].status, Err(RequestError::Field { field: "seqlen_q", .. })),
        "{:?}",
        out.requests[3].status
    );
}

#[test]
fn processed_rows_out_of_range_is_typed() {
    let mut s = sampler(64);
    let r = [Request::prefill(params(1), 3)];
    // A bad argument of the call is named as such, not as "request 0".
    let e = s.sample_with_processed(&logits(1, 1), &r, &[1]).unwrap_err();
    assert!(matches!(e, BatchError::Field { field: "rows", .. }), "{e:?}");
    assert_eq!(e.to_string(), "bad `rows`: processed row 1 is not below R = 1");
    let (_, p) = s.sample_with_processed(&logits(1, 1), &r, &[0]).unwrap();
    let e = p.row(1).unwrap_err();
    assert_eq!(e.to_string(), "bad `i`: processed row index 1 is not below 1");
    assert_eq!(p.row(0).unwrap().0.len(), 64);
}

#[test]
fn config_errors_are_typed() {
    let e =
        Sampler::new(SamplerConfig { vocab_size: 0, force_topk: 0, nextn: 5, backend: BackendKind::Cpu }).unwrap_err();
    assert!(e.to_string().contains("vocab_size = 0"), "{e}");
    // top_logprobs larger than N.
    let s = sampler(64);
    let e = s
        .request(SamplingParams { top_logprobs: 65, ..Default::default() }, RequestKind::Prefill { seqlen_k: 1 })
        .unwrap_err();
    assert!(e.to_string().contains("65") && e.to_string().contains("top_logprobs"), "{e}");
}

// ---------------------------------------------------------------- the engine layer (docs/ENGINE.md)

use sampler_host::engine::{Engine, EngineConfig, EngineRequest, SyntheticModel};

fn engine(nextn_sampler: u32, nextn_engine: usize) -> Result<Engine, sampler_host::engine::EngineError> {
    let s =
        Sampler::new(SamplerConfig { vocab_size: V, force_topk: 64, nextn: nextn_sampler, backend: BackendKind::Cpu })
            .unwrap();
    Engine::new(s, EngineConfig { max_num_seqs: 4, nextn: nextn_engine, prefill_chunk: 16, ..Default::default() })
}

#[test]
fn engine_as_documented() {
    let mut e = engine(5, 5).unwrap();
    let mut model = SyntheticModel::new(V as usize, 1, 0.9);
    for id in 0..6u64 {
        let p = SamplingParams { prompt_logprobs: id % 2 == 0, ..params(id) };
        e.add_request(EngineRequest::new(id, (0..41).map(|t| (t * 13 + id as i32) % V as i32).collect(), p, 12))
            .unwrap();
    }
    let mut steps = 0;
    while e.pending() > 0 {
        e.step(&mut model).unwrap();
        steps += 1;
        assert!(steps < 200);
    }
    let mut done = e.take_finished();
    done.sort_by_key(|f| f.id);
    assert_eq!(done.len(), 6);
    for f in &done {
        assert!(f.status.is_ok(), "{:?}", f.status);
        assert_eq!(f.output.len(), 12);
        assert_eq!(f.prompt_logprobs.len(), if f.id % 2 == 0 { 40 } else { 0 });
    }
}

#[test]
fn engine_bad_request_fails_only_itself() {
    let mut e = engine(5, 5).unwrap();
    let mut model = SyntheticModel::new(V as usize, 1, 0.9);
    let prompt: Vec<i32> = (0..20).collect();
    e.add_request(EngineRequest::new(1, prompt.clone(), params(1), 6)).unwrap();
    e.add_request(EngineRequest::new(2, prompt.clone(), SamplingParams { top_p: 2.0, ..params(2) }, 6)).unwrap();
    e.add_request(EngineRequest::new(3, prompt.clone(), params(3), 6)).unwrap();
    e.run_to_completion(&mut model, 100).unwrap();
    let mut done = e.take_finished();
    done.sort_by_key(|f| f.id);
    assert!(done[0].status.is_ok() && done[2].status.is_ok());
    assert_eq!(done[1].status, Err(RequestError::Param(ParamError::TopP(2.0))));
    assert_eq!((done[0].output.len(), done[2].output.len()), (6, 6));
}

#[test]
fn engine_refuses_a_live_duplicate_id() {
    // RowQuery and Finished name requests by id: two live requests with one
    // id could not be told apart by the model or the caller.
    let mut e = engine(5, 5).unwrap();
    let prompt: Vec<i32> = (0..20).collect();
    e.add_request(EngineRequest::new(7, prompt.clone(), params(1), 2)).unwrap();
    let err = e.add_request(EngineRequest::new(7, prompt.clone(), params(2), 2)).unwrap_err();
    assert!(err.to_string().contains("id 7"), "{err}");
    assert_eq!(e.pending(), 1);
    // Once finished and taken, the id may be used again.
    let mut model = SyntheticModel::new(V as usize, 1, 0.9);
    e.run_to_completion(&mut model, 100).unwrap();
    assert_eq!(e.take_finished().len(), 1);
    e.add_request(EngineRequest::new(7, prompt, params(3), 2)).unwrap();
}

#[test]
fn engine_nextn_above_the_samplers_is_a_config_error() {
    // The engine would build decode requests with 6 drafts that a sampler
    // of nextn 5 fails one by one; refuse the pair when built instead.
    let err = engine(5, 6).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("nextn") && msg.contains('6') && msg.contains('5'), "{msg}");
    assert!(engine(5, 5).is_ok() && engine(5, 2).is_ok() && engine(5, 0).is_ok());
}

#[test]
fn a_decode_request_whose_rows_break_the_layout_is_named() {
    // seqlen_q disagrees with the drafts and the logits do not fit: the
    // batch cannot be laid out, and the error names the request and value.
    let mut s = sampler(64);
    let l = logits(2, 1);
    for q in [1u64 << 33, u64::MAX, 3] {
        let e = s
            .sample(&l, &[Request::prefill(params(1), 3), Request::decode(params(2), 3, q, vec![], vec![])])
            .unwrap_err();
        assert!(matches!(&e, BatchError::Rows { index: 1, rows, .. } if *rows == q), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("seqlen_q = {q}")) && msg.contains("request 1"), "{msg}");
    }
    // A consistent request with the wrong logits is still LogitsShape.
    let e = s
        .sample(
            &l,
            &[
                Request::prefill(params(1), 3),
                Request::decode(params(2), 9, 2, vec![4], vec![DraftDist::default()]),
                Request::prefill(params(1), 3),
            ],
        )
        .unwrap_err();
    assert!(matches!(e, BatchError::LogitsShape { got: 2000, rows: 4, .. }), "{e:?}");
}

#[test]
fn an_unwritten_pool_row_rejects_its_draft() {
    // MtpInfoPool::read documents "a row never written: q = 0, reject"; an
    // empty DraftDist would be one-hot (q = 1) and accept a draft the target
    // likes. The target here puts almost all its mass on the draft.
    use sampler_host::engine::MtpInfoPool;
    let pool = MtpInfoPool::new(2, 3, 64, V as usize).unwrap();
    let mut l = vec![0.0f32; 2 * V as usize];
    l[42] = 30.0;
    let mut s = sampler(64);
    for seed in 0..8 {
        for q in [pool.read(0, 0), pool.read(7, 0), pool.read(0, 9)] {
            let out = s.sample(&l, &[Request::decode(params(seed), 20, 2, vec![42], vec![q])]).unwrap();
            ok(&out);
            assert_eq!(out.requests[0].accepted, 0, "seed {seed}");
        }
    }
    // Slot or row far out of range: no overflow, the same q = 0.
    assert_eq!(pool.read(usize::MAX, usize::MAX), pool.read(0, 0));
}

#[test]
fn a_pool_too_large_to_allocate_is_an_error() {
    use sampler_host::engine::MtpInfoPool;
    for (seqs, nextn) in [(1usize << 40, 5usize), (usize::MAX, 2), (usize::MAX / 2, 3)] {
        let e = MtpInfoPool::new(seqs, nextn, 64, V as usize).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
    }
}

#[test]
fn engine_nan_logits_of_one_request_fail_only_it() {
    use sampler_host::engine::{LogitsSource, RowQuery};
    struct Poisoned(SyntheticModel, u64);
    impl LogitsSource for Poisoned {
        fn target_logits(&mut self, rows: &[RowQuery]) -> Vec<f32> {
            let mut l = self.0.target_logits(rows);
            for (q, row) in rows.iter().zip(l.chunks_mut(V as usize)) {
                if q.request == self.1 {
                    row[3] = f32::NAN;
                }
            }
            l
        }
        fn draft_logits(&mut self, rows: &[RowQuery]) -> Vec<f32> {
            self.0.draft_logits(rows)
        }
    }
    let run = |poison: u64| {
        let mut e = engine(5, 5).unwrap();
        for id in 1..=3u64 {
            let p = SamplingParams { prompt_logprobs: true, ..params(id) };
            e.add_request(EngineRequest::new(id, (0..30).map(|t| t * 3 + id as i32).collect(), p, 8)).unwrap();
        }
        e.run_to_completion(&mut Poisoned(SyntheticModel::new(V as usize, 1, 0.9), poison), 100).unwrap();
        let mut done = e.take_finished();
        done.sort_by_key(|f| f.id);
        done
    };
    let (clean, bad) = (run(0), run(2));
    assert!(matches!(bad[1].status, Err(RequestError::BadLogits { .. })), "{:?}", bad[1].status);
    for i in [0, 2] {
        assert!(bad[i].status.is_ok());
        assert_eq!(
            (&bad[i].output, &bad[i].output_logprobs, &bad[i].prompt_logprobs),
            (&clean[i].output, &clean[i].output_logprobs, &clean[i].prompt_logprobs)
        );
    }
}

#[test]
fn engine_md_sglang_tree_snippet() {
    // docs/ENGINE.md "Draft trees", as written there, on a 4-node tree:
    // root 0 with children 1, 2; node 3 a child of 2.
    let mut sampler = sampler(64);
    let params = params(5);
    let seqlen_k = 44;
    let row_offset = 1; // one prefill row before this request
    let next_token = vec![1, -1, 3, -1];
    let next_sibling = vec![-1, 2, -1, -1];
    let candidates = [9, 17, 42, 77];
    let parent = DraftTree::parents_from_first_child_next_sibling(&next_token, &next_sibling).unwrap();
    assert_eq!(parent, [-1, 0, 0, 2]);
    let tree = DraftTree { parent, tokens: candidates[1..].to_vec(), draft_dists: None, without_replacement: false };
    let req = Request::tree(params.clone(), seqlen_k, tree);
    let mut logits = logits(5, 4);
    logits[(row_offset) * V as usize + 42] = 40.0; // the target loves node 2's token at the root
    let out = sampler.sample(&logits, &[Request::prefill(params, 3), req]).unwrap();
    ok(&out);
    let r = &out.requests[1];
    let accept_index: Vec<usize> = r.path.as_ref().unwrap().iter().map(|&n| row_offset + n as usize).collect();
    assert_eq!(accept_index[..2], [row_offset, row_offset + 2]);
    assert!(r.accepted >= 1);
    assert_eq!(r.emitted[0], 42);
    // SGLang's per-row `predicts`: the root row reports node 2's token; node 1's row is off the path.
    assert_eq!(out.rows[row_offset].token, 42);
    assert_eq!(out.rows[row_offset + 1].token, -1);
}

#[test]
fn engine_bad_golden_ids_fail_only_their_request() {
    let mut e = engine(5, 5).unwrap();
    let mut model = SyntheticModel::new(V as usize, 1, 0.9);
    let prompt: Vec<i32> = (0..20).collect();
    e.add_request(EngineRequest::new(1, prompt.clone(), params(1), 6)).unwrap();
    e.add_request(EngineRequest::new(
        2,
        prompt.clone(),
        SamplingParams { golden_token_ids: vec![3, 5000, 4], ..params(2) },
        6,
    ))
    .unwrap();
    e.add_request(EngineRequest::new(
        3,
        prompt.clone(),
        SamplingParams { golden_token_ids: vec![3, 9, 4, 8, 1, 2], ..params(3) },
        6,
    ))
    .unwrap();
    e.run_to_completion(&mut model, 100).unwrap();
    let mut done = e.take_finished();
    done.sort_by_key(|f| f.id);
    assert!(done[0].status.is_ok() && done[2].status.is_ok(), "{:?} {:?}", done[0].status, done[2].status);
    assert!(matches!(&done[1].status, Err(e) if e.to_string().contains("5000")), "{:?}", done[1].status);
    assert_eq!(done[2].output, [3, 9, 4, 8, 1, 2], "teacher forcing follows the golden ids");
}

// ---- The builders of issue 26 item 9: seqlen_q derived, golden and mask helpers.

#[test]
fn verify_derives_seqlen_q_and_equals_decode() {
    let mut s = sampler(64);
    let dists = vec![DraftDist::default(); 3];
    let built = Request::verify(params(4), 30, vec![1, 2, 3], dists.clone());
    let spelled = Request::decode(params(4), 30, 4, vec![1, 2, 3], dists);
    assert_eq!(built, spelled);
    assert_eq!(built.rows(), 4);
    let l = logits(4, 8);
    let a = s.sample(&l, &[built]).unwrap();
    ok(&a);
    assert_eq!(a, s.sample(&l, &[spelled]).unwrap());
    // No drafts: one fresh row, as `fresh`.
    let one = Request::verify(params(4), 30, vec![], vec![]);
    assert_eq!(one, Request::fresh(params(4), 30));
    assert_eq!(one.rows(), 1);
    ok(&s.sample(&logits(1, 8), &[one]).unwrap());
}

#[test]
fn seqlen_k_below_seqlen_q_fails_only_its_request_naming_seqlen_k() {
    let named =
        |e: &RequestError| matches!(e, RequestError::Field { field: "seqlen_k", msg } if msg.contains("= 2 is below"));
    one_bad_among_good(Request::verify(params(4), 2, vec![1, 2], vec![DraftDist::default(); 2]), None, named);
    let draft = Request {
        params: params(4),
        kind: RequestKind::Draft { seqlen_k: 2, seqlen_q: 4, last_valid_offset: 0, rows: 2 },
        golden: vec![],
        masks: None,
    };
    one_bad_among_good(draft, None, named);
    let tree = DraftTree { parent: vec![-1, 0, 0], tokens: vec![1, 2], draft_dists: None, without_replacement: false };
    one_bad_among_good(Request::tree(params(4), 2, tree.clone()), None, named);
    // Sampler::request reports it when the request is built.
    let s = sampler(64);
    let kind = RequestKind::Decode { seqlen_k: 0, seqlen_q: 1, drafts: vec![], draft_dists: vec![] };
    let e = s.request(params(4), kind).unwrap_err();
    assert!(e.to_string().contains("seqlen_k") && e.to_string().contains("= 0"), "{e}");
    // Equal is the smallest valid value (sample_position 1), for every kind.
    assert!(s.check(&Request::verify(params(4), 3, vec![1, 2], vec![DraftDist::default(); 2])).is_ok());
    assert!(s.check(&Request::tree(params(4), 3, tree)).is_ok());
    assert!(s.check(&Request::fresh(params(4), 1)).is_ok());
}

#[test]
fn token_mask_bit_order_is_what_the_sampler_reads() {
    // V = 1000 is not a multiple of 32: 32 words, the last with 8 valid bits.
    let mut s = sampler(64);
    let allowed = [3u32, 31, 32, 64, 999];
    let m = TokenMask::from_allowed(V, allowed).unwrap();
    assert_eq!(m.words().len(), 32);
    assert_eq!(&m.words()[..3], [(1 << 3) | (1 << 31), 1, 1]);
    assert_eq!(m.words()[31], 1 << (999 % 32));
    let flat = SamplingParams { temperature: 1.0, top_logprobs: 8, seq_seed: Some(3), ..Default::default() };
    let l = vec![0.0f32; V as usize]; // every token equally likely: only the mask decides
    let out = s.sample(&l, &[Request::prefill(flat.clone(), 5).with_masks([m.clone()])]).unwrap();
    ok(&out);
    let kept: Vec<i32> =
        out.rows[0].top_logprobs.iter().filter(|(_, lp)| *lp > f32::NEG_INFINITY).map(|(id, _)| *id).collect();
    assert_eq!(kept, allowed.iter().map(|&t| t as i32).collect::<Vec<_>>());
    // The raw words give the same step bit for bit.
    let raw = Request::prefill(flat.clone(), 5).with_masks([m.words().to_vec()]);
    assert_eq!(s.sample(&l, &[raw]).unwrap(), out);
    // all(): the valid bits only, and it changes nothing against no mask.
    let all = TokenMask::all(V);
    assert_eq!(all.words()[31], (1 << 8) - 1);
    assert!(all.is_allowed(999) && !all.is_allowed(1000));
    let logits1 = logits(1, 4);
    let masked = s.sample(&logits1, &[Request::prefill(params(5), 5).with_masks([all])]).unwrap();
    assert_eq!(masked, s.sample(&logits1, &[Request::prefill(params(5), 5)]).unwrap());
    // forbid, and ids outside the vocabulary are typed errors naming `masks`.
    let mut m2 = m.clone();
    m2.forbid(3).unwrap();
    assert!(!m2.is_allowed(3) && m2.is_allowed(31));
    let e = TokenMask::from_allowed(V, [1000]).unwrap_err();
    assert!(matches!(&e, RequestError::Field { field: "masks", msg } if msg.contains("1000")), "{e:?}");
    // A mask per row of a verify request; a wrong count fails only it.
    let two = Request::verify(params(6), 20, vec![3], vec![DraftDist::default()]).with_masks([m.clone(), m.clone()]);
    ok(&s.sample(&logits(2, 9), &[two]).unwrap());
    let short = Request::verify(params(6), 20, vec![3], vec![DraftDist::default()]).with_masks([m]);
    one_bad_among_good(short, None, |e| matches!(e, RequestError::BadMask { need: 2, got_masks: 1, .. }));
}

#[test]
fn golden_builders_follow_the_golden_output() {
    let mut s = sampler(64);
    let golden = [7, 11, 13, 17, 19];
    // Nothing emitted yet: a prefill row takes golden[0].
    let pre = Request::prefill(params(1), 12).with_golden_from(&golden, 0, 5);
    assert_eq!(pre.golden, [7]);
    let out = s.sample(&logits(1, 2), &[pre]).unwrap();
    ok(&out);
    assert_eq!(out.requests[0].emitted, [7]);
    // One emitted: a verify request whose drafts agree with the golden text emits it all.
    let v = Request::verify(params(1), 15, vec![11, 13], vec![DraftDist::default(); 2]).with_golden_from(&golden, 1, 5);
    assert_eq!(v.golden, [11, 13, 17]);
    let out = s.sample(&logits(3, 3), &[v]).unwrap();
    ok(&out);
    assert_eq!((out.requests[0].accepted, &out.requests[0].emitted[..]), (2, &[11, 13, 17][..]));
    // A draft that disagrees stops at the golden token; past the end nothing is forced.
    let v = Request::verify(params(1), 15, vec![11, 2], vec![DraftDist::default(); 2]).with_golden_from(&golden, 1, 5);
    let out = s.sample(&logits(3, 3), &[v]).unwrap();
    assert_eq!(out.requests[0].emitted, [11, 13]);
    assert!(Request::fresh(params(1), 20).with_golden_from(&golden, 5, 5).golden.is_empty());
    // Tail shorter than the rows: -1 pads; nextn caps what one step takes.
    let v = Request::verify(params(1), 15, vec![19, 2], vec![DraftDist::default(); 2]).with_golden_from(&golden, 4, 5);
    assert_eq!(v.golden, [19, -1, -1]);
    let v = Request::verify(params(1), 15, vec![7, 11], vec![DraftDist::default(); 2]).with_golden_from(&golden, 0, 1);
    assert_eq!(v.golden, [7, 11, -1]);
    // A tree: one per depth (depths 0..=2 here); the golden token of depth j is
    // emitted at the depth-j node and selects its child of that token (11.7).
    let tree =
        DraftTree { parent: vec![-1, 0, 0, 2], tokens: vec![1, 7, 11], draft_dists: None, without_replacement: false };
    let t = Request::tree(params(1), 40, tree).with_golden_from(&golden, 0, 5);
    assert_eq!(t.golden, [7, 11, 13]);
    let out = s.sample(&logits(4, 4), &[t]).unwrap();
    ok(&out);
    assert_eq!(out.requests[0].path.as_deref(), Some(&[0, 2, 3][..]));
    assert_eq!(out.requests[0].emitted, [7, 11, 13]);
    // with_golden takes this step's ids as they are; a wrong count fails only the request.
    let bad = Request::verify(params(1), 15, vec![11], vec![DraftDist::default()]).with_golden(vec![11]);
    one_bad_among_good(bad, None, |e| matches!(e, RequestError::Field { field: "golden", .. }));
}
