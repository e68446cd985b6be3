//! Engine: golden teacher forcing across steps (SAMPLER.md section 7).

use sampler_host::engine::golden::{assign_golden, next_golden_tokens, step_golden};
use sampler_host::engine::{Engine, EngineConfig, EngineRequest, Phase, SyntheticModel};
use sampler_host::{BackendKind, Sampler, SamplerConfig, SamplingParams};

/// The backend under test: `SAMPLER_ENGINE_BACKEND=cuda` runs these tests on
/// the GPU (the GPU suite); the default is the CPU.
fn test_backend() -> BackendKind {
    std::env::var("SAMPLER_ENGINE_BACKEND").ok().and_then(|s| s.parse().ok()).unwrap_or(BackendKind::Cpu)
}

fn engine(v: u32, force_topk: u32, nextn: usize, chunk: usize) -> Engine {
    let s = Sampler::new(SamplerConfig { vocab_size: v, force_topk, nextn: nextn as u32, backend: test_backend() })
        .unwrap();
    Engine::new(s, EngineConfig { max_num_seqs: 8, nextn, prefill_chunk: chunk, ..Default::default() }).unwrap()
}

#[test]
fn window_is_2_nextn_plus_1_and_rows_get_min_seqlen_q_nextn_plus_1() {
    let g: Vec<i32> = (100..120).collect();
    // 2 * nextn + 1 values from the current output length, padded with -1.
    assert_eq!(next_golden_tokens(&g, 0, 5), (100..111).collect::<Vec<_>>());
    assert_eq!(next_golden_tokens(&g, 15, 5), vec![115, 116, 117, 118, 119, -1, -1, -1, -1, -1, -1]);
    // min(seqlen_q, nextn + 1) of them go to rows 0..
    let w = next_golden_tokens(&g, 3, 5);
    assert_eq!(assign_golden(&w, 6, 5, 6), vec![103, 104, 105, 106, 107, 108]);
    assert_eq!(assign_golden(&w, 3, 5, 3), vec![103, 104, 105]);
    assert_eq!(assign_golden(&w, 6, 2, 6), vec![103, 104, 105, -1, -1, -1]);
    // A prefill row (one row, seqlen_q = chunk length) gets the first.
    assert_eq!(assign_golden(&w, 41, 5, 1), vec![103]);
    // Past the golden text: no teacher forcing.
    assert!(step_golden(&g, 20, 5, 6, 6).is_empty());
    assert_eq!(step_golden(&g, 18, 5, 6, 6), vec![118, 119, -1, -1, -1, -1]);
}

#[test]
fn output_follows_the_golden_text_exactly() {
    let v = 1000;
    for (force_topk, agreement) in [(0u32, 0.6f32), (50, 1.0), (50, 0.0)] {
        let mut e = engine(v, force_topk, 4, 0);
        let golden: Vec<i32> = (0..37).map(|i| (i * 37 + 11) % v as i32).collect();
        for id in 0..3u64 {
            let params = SamplingParams { seq_seed: Some(id), golden_token_ids: golden.clone(), ..Default::default() };
            // Request 2 runs past the golden text: it then samples freely.
            let max = if id == 2 { 45 } else { 37 };
            e.add_request(EngineRequest::new(id, vec![3, 1, 4, 1, 5], params, max)).unwrap();
        }
        // A request without golden tokens in the same batch.
        e.add_request(EngineRequest::new(
            9,
            vec![2, 7],
            SamplingParams { seq_seed: Some(9), ..Default::default() },
            20,
        ))
        .unwrap();
        let mut model = SyntheticModel::new(v as usize, 5, agreement);
        let mut forced_steps = 0;
        let mut total_acc = 0u64;
        for _ in 0..100 {
            if e.pending() == 0 {
                break;
            }
            // Drafts pending before the step: accepted == leading drafts equal to golden.
            let before: Vec<(u64, Vec<i32>, usize)> = e
                .running_ids()
                .into_iter()
                .map(|id| (id, e.drafts_of(id).unwrap().to_vec(), e.output_of(id).unwrap().len()))
                .collect();
            let r = e.step(&mut model).unwrap();
            for q in &r.requests {
                assert!(q.status.is_ok());
                if q.id == 9 {
                    assert!(!q.teacher_forced);
                    continue;
                }
                // Requests admitted by this step had no drafts and no output.
                let (_, drafts, out_len) =
                    before.iter().find(|b| b.0 == q.id).cloned().unwrap_or((q.id, Vec::new(), 0));
                let (drafts, out_len) = (&drafts, &out_len);
                assert_eq!(q.teacher_forced, *out_len < golden.len(), "request {} at {out_len}", q.id);
                if q.teacher_forced {
                    forced_steps += 1;
                    if let Phase::Decode { .. } = q.phase {
                        let lead = drafts.iter().zip(&golden[*out_len..]).take_while(|(d, g)| d == g).count();
                        if *out_len + drafts.len() < golden.len() {
                            assert_eq!(q.accepted as usize, lead, "accept iff draft == golden");
                        }
                        total_acc += q.accepted as u64;
                    }
                }
            }
        }
        assert!(forced_steps > 0);
        let fin = e.take_finished();
        assert_eq!(fin.len(), 4);
        for f in fin {
            if f.id == 9 {
                assert_eq!(f.output.len(), 20);
                continue;
            }
            assert_eq!(
                &f.output[..37],
                &golden[..],
                "force_topk {force_topk}: request {} follows the golden text",
                f.id
            );
            assert_eq!(f.output.len(), if f.id == 2 { 45 } else { 37 });
            // Logprobs are computed as usual (-inf where force top-k removed the golden token).
            assert!(f.output_logprobs.iter().all(|x| *x <= 0.0));
        }
        // Golden tokens are unrelated to the model, so drafts rarely match.
        assert!(total_acc < 37 * 3);
    }
}

#[test]
fn drafts_matching_the_golden_text_are_accepted() {
    // The golden text is the target's own argmax path at a near-zero
    // temperature; a fully agreeing draft proposes exactly it, so every draft
    // is accepted and the output is still the golden text.
    let v = 500u32;
    let model = SyntheticModel::new(v as usize, 21, 1.0);
    let prompt = vec![4, 4, 4];
    let mut golden = Vec::new();
    let mut row = vec![0f32; v as usize];
    for i in 0..30u64 {
        model.target_row(1, prompt.len() as u64 + i, &mut row);
        let best = (0..v as usize).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a))).unwrap();
        golden.push(best as i32);
    }
    let mut e = engine(v, 0, 5, 0);
    let params =
        SamplingParams { temperature: 0.0, seq_seed: Some(3), golden_token_ids: golden.clone(), ..Default::default() };
    e.add_request(EngineRequest::new(1, prompt, params, 30)).unwrap();
    let mut m = model.clone();
    let reports = e.run_to_completion(&mut m, 50).unwrap();
    let (a, d) = reports.iter().map(|r| r.acceptance()).fold((0, 0), |x, y| (x.0 + y.0, x.1 + y.1));
    assert!(d > 0);
    assert_eq!(a, d);
    assert_eq!(e.take_finished()[0].output, golden);
}

#[test]
fn golden_with_chunked_prefill() {
    let v = 300;
    let golden: Vec<i32> = (0..12).map(|i| 290 - i).collect();
    let mut e = engine(v, 0, 3, 4);
    let params = SamplingParams { seq_seed: Some(1), golden_token_ids: golden.clone(), ..Default::default() };
    e.add_request(EngineRequest::new(1, (0..10).collect(), params, 12)).unwrap();
    let mut model = SyntheticModel::new(v as usize, 2, 0.3);
    let reports = e.run_to_completion(&mut model, 40).unwrap();
    // Chunks of 4, 4, 2: the first two steps emit nothing.
    assert!(reports[0].requests[0].emitted.is_empty() && reports[1].requests[0].emitted.is_empty());
    assert_eq!(reports[2].requests[0].emitted, vec![290]);
    assert_eq!(e.take_finished()[0].output, golden);
}
