//! Engine: grammar masks across steps (SAMPLER.md section 9): `nextn + 1`
//! masks per step, output always allowed, and a bad mask or a matcher error
//! fails only its own request.

use sampler_host::engine::grammar::{mask_allows, request_masks, GrammarMatcher, JsonMatcher, StepMasks};
use sampler_host::engine::{Engine, EngineConfig, EngineRequest, SyntheticModel};
use sampler_host::{BackendKind, Request, RequestError, Sampler, SamplerConfig, SamplingParams};

/// The backend under test: `SAMPLER_ENGINE_BACKEND=cuda` runs these tests on
/// the GPU (the GPU suite); the default is the CPU.
fn test_backend() -> BackendKind {
    std::env::var("SAMPLER_ENGINE_BACKEND").ok().and_then(|s| s.parse().ok()).unwrap_or(BackendKind::Cpu)
}

/// A small token vocabulary for JSON (token id = index). EOS is the last.
fn vocab() -> Vec<String> {
    let toks = [
        "{", "}", "[", "]", ",", ":", " ", "\"", "\"a\"", "\"b\"", "\"key\"", "\":", "{\"", "1", "23", "-", "0",
        "true", "false", "null", "x", "yz", "}}", "]}", "\"}", "!", "\\", "tr", "ue", "<eos>",
    ];
    toks.iter().map(|s| s.to_string()).collect()
}

const EOS: i32 = 29;

fn engine(v: u32, nextn: usize, force_topk: u32) -> Engine {
    let s = Sampler::new(SamplerConfig { vocab_size: v, force_topk, nextn: nextn as u32, backend: test_backend() })
        .unwrap();
    Engine::new(s, EngineConfig { max_num_seqs: 8, nextn, ..Default::default() }).unwrap()
}

fn json_request(id: u64, max_tokens: usize) -> EngineRequest {
    let mut r =
        EngineRequest::new(id, vec![0, 1], SamplingParams { seq_seed: Some(id), ..Default::default() }, max_tokens);
    r.eos = Some(EOS);
    r.grammar = Some(Box::new(JsonMatcher::new(vocab(), EOS, true)));
    r
}

fn model(v: usize, agreement: f32) -> SyntheticModel {
    let mut m = SyntheticModel::new(v, 3, agreement);
    // Favour closing tokens and EOS so objects tend to end.
    m.bias = vec![(EOS, 6.0), (1, 3.0), (13, 2.0), (8, 2.0)];
    m
}

fn text(ids: &[i32]) -> String {
    let v = vocab();
    ids.iter().filter(|&&t| t != EOS).map(|&t| v[t as usize].as_str()).collect()
}

#[test]
fn masks_per_step_layout() {
    let mut m = JsonMatcher::new(vocab(), EOS, true);
    // drafts: "{" "\"a\"" ":" "1" "}" -> all allowed: 6 masks, mask j for row j.
    let drafts = [0, 8, 5, 13, 1];
    let ms = request_masks(&mut m, &drafts, 1).unwrap();
    assert_eq!(ms.len(), drafts.len() + 1);
    for (j, &d) in drafts.iter().enumerate() {
        assert!(mask_allows(&ms[j], d), "mask {j} allows draft {}", j + 1);
    }
    assert!(mask_allows(&ms[5], EOS) && !mask_allows(&ms[4], EOS));
    // [batch, words] per row index; unconstrained requests are all ones.
    let mut sm = StepMasks::new(5, 3, 30);
    sm.set(1, &ms);
    assert_eq!(sm.masks.len(), 6);
    assert_eq!(sm.masks[0].len(), 3 * sm.words);
    assert!(sm.request(0, 6).is_none());
    assert_eq!(sm.request(1, 6).unwrap(), ms);
    assert_eq!(sm.bytes(), 6 * 3 * 4);
    // The trial was rolled back.
    let mut fresh = vec![0u32; 1];
    m.fill_mask(&mut fresh).unwrap();
    assert_eq!(fresh, ms[0]);
}

#[test]
fn output_is_always_allowed_by_the_grammar() {
    let v = vocab().len() as u32;
    for (nextn, agreement, force_topk) in [(3usize, 0.5f32, 0u32), (5, 0.0, 0), (2, 1.0, 16)] {
        let mut e = engine(v, nextn, force_topk);
        for id in 0..6 {
            e.add_request(json_request(id, 48)).unwrap();
        }
        let mut m = model(v as usize, agreement);
        let reports = e.run_to_completion(&mut m, 200).unwrap();
        assert!(reports.iter().any(|r| r.mask_bytes == (nextn + 1) * r.requests.len() * 4));
        let fin = e.take_finished();
        assert_eq!(fin.len(), 6);
        let checker = JsonMatcher::new(vocab(), EOS, true);
        let mut complete = 0;
        for f in &fin {
            assert!(f.status.is_ok(), "{:?}", f.status);
            assert!(
                checker.allows_sequence(&f.output),
                "request {} output {:?} = {:?}",
                f.id,
                f.output,
                text(&f.output)
            );
            if f.output.last() == Some(&EOS) {
                complete += 1;
                let s = text(&f.output);
                let j: serde_json::Value = serde_json::from_str(&s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
                assert!(j.is_object());
            }
        }
        assert!(complete > 0, "some outputs reach EOS");
    }
}

/// Wraps a matcher and fails (or allows nothing) from a given call on.
struct Faulty {
    inner: JsonMatcher,
    calls: usize,
    fail_at: usize,
    empty_mask: bool,
}

impl GrammarMatcher for Faulty {
    fn fill_mask(&mut self, mask: &mut [u32]) -> Result<(), String> {
        self.calls += 1;
        if self.calls >= self.fail_at {
            if self.empty_mask {
                return Ok(()); // a mask that allows nothing
            }
            return Err("matcher exploded".into());
        }
        self.inner.fill_mask(mask)
    }
    fn accept(&mut self, t: i32) -> Result<(), String> {
        self.inner.accept(t)
    }
    fn rollback(&mut self, n: usize) -> Result<(), String> {
        self.inner.rollback(n)
    }
    fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }
}

fn run_with(bad: Option<bool>) -> Vec<(u64, Vec<i32>, Result<(), RequestError>)> {
    let v = vocab().len() as u32;
    let mut e = engine(v, 3, 0);
    for id in 0..4 {
        if id == 2 {
            if let Some(empty_mask) = bad {
                let mut r = json_request(id, 30);
                r.grammar = Some(Box::new(Faulty {
                    inner: JsonMatcher::new(vocab(), EOS, true),
                    calls: 0,
                    fail_at: 3,
                    empty_mask,
                }));
                e.add_request(r).unwrap();
                continue;
            }
        }
        e.add_request(json_request(id, 30)).unwrap();
    }
    let mut m = model(v as usize, 0.5);
    let mut failed_step_seen = false;
    while e.pending() > 0 {
        let r = e.step(&mut m).unwrap();
        for q in &r.requests {
            if q.status.is_err() {
                assert_eq!(q.id, 2, "only the faulty request fails");
                assert!(q.emitted.is_empty(), "a failed request emits nothing (tokens -1)");
                assert!(q.finished);
                failed_step_seen = true;
            }
        }
    }
    assert_eq!(failed_step_seen, bad.is_some());
    let mut fin: Vec<_> = e.take_finished().into_iter().map(|f| (f.id, f.output, f.status)).collect();
    fin.sort_by_key(|f| f.0);
    fin
}

#[test]
fn matcher_error_fails_only_its_request() {
    let good = run_with(None);
    let bad = run_with(Some(false));
    assert!(matches!(&bad[2].2, Err(RequestError::Matcher(m)) if m.contains("exploded")));
    for i in [0, 1, 3] {
        assert_eq!(bad[i], good[i], "request {i} unaffected (batch invariance)");
    }
}

#[test]
fn bad_mask_fails_only_its_request() {
    let good = run_with(None);
    let bad = run_with(Some(true));
    assert!(matches!(bad[2].2, Err(RequestError::AllMasked { .. })), "{:?}", bad[2].2);
    for i in [0, 1, 3] {
        assert_eq!(bad[i], good[i]);
    }
    // A mask of the wrong size (from the [batch, words] buffers) fails only its request too.
    let v = 64u32;
    let mut s =
        Sampler::new(SamplerConfig { vocab_size: v, force_topk: 0, nextn: 1, backend: test_backend() }).unwrap();
    let mut sm = StepMasks::new(1, 2, v as usize);
    sm.set(0, &[vec![u32::MAX; 2], vec![u32::MAX; 2]]);
    sm.set(1, &[vec![u32::MAX; 2], vec![u32::MAX; 2]]);
    let mut reqs: Vec<Request> =
        (0..2).map(|i| Request::prefill(SamplingParams { seq_seed: Some(i), ..Default::default() }, 5)).collect();
    reqs[0].masks = sm.request(0, 1);
    let mut short = sm.request(1, 1).unwrap();
    short[0].pop();
    reqs[1].masks = Some(short);
    let logits: Vec<f32> = (0..2 * v).map(|i| (i % 7) as f32).collect();
    let out = s.sample(&logits, &reqs).unwrap();
    assert!(out.requests[0].status.is_ok());
    assert!(matches!(out.requests[1].status, Err(RequestError::BadMask { .. })));
    assert_eq!(out.rows[1].token, -1);
}
