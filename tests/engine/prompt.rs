//! Engine: prompt logprobs with chunked prefill (SAMPLER.md section 8).

use sampler_host::engine::prompt::{chunk_targets, compute_prompt_logprobs, PromptJob};
use sampler_host::engine::{
    Engine, EngineConfig, EngineRequest, LogitsSource, RowQuery, RowRole, SyntheticModel, MAX_PROMPT_ROWS,
};
use sampler_host::{BackendKind, Sampler, SamplerConfig, SamplingParams};

/// The backend under test: `SAMPLER_ENGINE_BACKEND=cuda` runs these tests on
/// the GPU (the GPU suite); the default is the CPU.
fn test_backend() -> BackendKind {
    std::env::var("SAMPLER_ENGINE_BACKEND").ok().and_then(|s| s.parse().ok()).unwrap_or(BackendKind::Cpu)
}

const V: u32 = 2000;

fn sampler(force_topk: u32) -> Sampler {
    Sampler::new(SamplerConfig { vocab_size: V, force_topk, nextn: 5, backend: test_backend() }).unwrap()
}

fn prompt(n: usize, salt: i32) -> Vec<i32> {
    (0..n as i32).map(|i| (i * 131 + salt * 17 + 7) % V as i32).collect()
}

fn params(seed: u64) -> SamplingParams {
    SamplingParams { seq_seed: Some(seed), prompt_logprobs: true, temperature: 0.8, top_p: 0.95, ..Default::default() }
}

/// Prompt logprobs of one request through the engine, prefilling `chunk` tokens per step.
fn via_engine(
    force_topk: u32,
    chunk: usize,
    max_rows: usize,
    prompts: &[Vec<i32>],
) -> (Vec<Vec<f32>>, Vec<Vec<usize>>) {
    via_engine_ids(
        force_topk,
        chunk,
        max_rows,
        &prompts.iter().cloned().enumerate().map(|(i, p)| (i as u64, p)).collect::<Vec<_>>(),
    )
}

fn via_engine_ids(
    force_topk: u32,
    chunk: usize,
    max_rows: usize,
    prompts: &[(u64, Vec<i32>)],
) -> (Vec<Vec<f32>>, Vec<Vec<usize>>) {
    let mut e = Engine::new(
        sampler(force_topk),
        EngineConfig {
            max_num_seqs: 4,
            nextn: 2,
            prefill_chunk: chunk,
            max_prompt_rows: max_rows,
            ..Default::default()
        },
    )
    .unwrap();
    for (id, p) in prompts {
        e.add_request(EngineRequest::new(*id, p.clone(), params(*id), 2)).unwrap();
    }
    let mut model = SyntheticModel::new(V as usize, 77, 0.5);
    let mut per_step = vec![Vec::new(); prompts.len()];
    let pos = |id: u64| prompts.iter().position(|p| p.0 == id).unwrap();
    while e.pending() > 0 {
        let r = e.step(&mut model).unwrap();
        assert!(r.prompt_stats.max_rows_per_call <= max_rows);
        assert!(
            r.prompt_stats.max_logits_bytes <= max_rows * V as usize * 4,
            "logits never exceed max_rows * V * 4 bytes"
        );
        for q in &r.requests {
            if q.prompt_logprobs > 0 {
                per_step[pos(q.id)].push(q.prompt_logprobs);
            }
        }
    }
    let mut fin = e.take_finished();
    fin.sort_by_key(|f| pos(f.id));
    (fin.into_iter().map(|f| f.prompt_logprobs).collect(), per_step)
}

#[test]
fn targets_of_chunks() {
    let p: Vec<i32> = (10..51).collect(); // 41 tokens
    assert_eq!(chunk_targets(&p, 0, 41).len(), 40);
    let a = chunk_targets(&p, 0, 16);
    assert_eq!(a.len(), 16);
    assert_eq!(*a.last().unwrap(), p[16], "a non-final chunk's last row targets the next chunk's first token");
    assert_eq!(chunk_targets(&p, 16, 16).len(), 16);
    assert_eq!(chunk_targets(&p, 32, 9).len(), 8, "the last row of the last chunk has no target");
    assert_eq!([a, chunk_targets(&p, 16, 16), chunk_targets(&p, 32, 9)].concat(), chunk_targets(&p, 0, 41));
    assert_eq!(MAX_PROMPT_ROWS, 8192);
}

#[test]
fn forty_one_tokens_one_chunk_equals_16_16_9() {
    for force_topk in [0u32, 100] {
        let p = prompt(41, 1);
        let (one, steps1) = via_engine(force_topk, 0, MAX_PROMPT_ROWS, std::slice::from_ref(&p));
        assert_eq!(one[0].len(), 40, "a 41-token prompt in one chunk gives 40 values");
        assert_eq!(steps1[0], vec![40]);
        let (chunked, steps) = via_engine(force_topk, 16, MAX_PROMPT_ROWS, std::slice::from_ref(&p));
        assert_eq!(steps[0], vec![16, 16, 8]);
        assert_eq!(
            chunked[0].iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            one[0].iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "same 40 values, bit for bit"
        );
        // Sampler calls of at most 7 rows give the same values too.
        let (small, _) = via_engine(force_topk, 16, 7, std::slice::from_ref(&p));
        assert_eq!(small[0], one[0]);
        assert!(one[0].iter().all(|x| *x <= 0.0));
    }
}

#[test]
fn results_split_back_per_request() {
    // Two prompts (41 and 100 tokens) in the same steps, rows cut into calls of 32.
    let (a, b) = (prompt(41, 1), prompt(100, 2));
    let (both, _) = via_engine(0, 0, 32, &[a.clone(), b.clone()]);
    assert_eq!(both[0].len(), 40);
    assert_eq!(both[1].len(), 99);
    let (alone_a, _) = via_engine(0, 0, MAX_PROMPT_ROWS, std::slice::from_ref(&a));
    assert_eq!(both[0], alone_a[0]);
    let (alone_b, _) = via_engine_ids(0, 0, MAX_PROMPT_ROWS, &[(1, b.clone())]);
    assert_eq!(both[1], alone_b[0]);
}

#[test]
fn values_are_the_processed_logprob_of_the_next_token() {
    // Temperature 1, no top-p/top-k, no force top-k: log_softmax of the row at the next token.
    let p = prompt(12, 3);
    let mut s = sampler(0);
    let mut model = SyntheticModel::new(V as usize, 5, 1.0);
    let jobs = [PromptJob {
        params: SamplingParams { seq_seed: Some(1), ..Default::default() },
        prompt: &p,
        start: 0,
        len: p.len(),
    }];
    let (res, stats) = compute_prompt_logprobs(&mut s, &jobs, 5, |rows| {
        let q: Vec<RowQuery> = rows
            .iter()
            .map(|&(_, i)| RowQuery { request: 0, role: RowRole::Prompt, input: p[i], predicts: i as u64 + 1 })
            .collect();
        Ok(model.target_logits(&q))
    })
    .unwrap();
    assert_eq!(stats.calls, 3); // 11 rows in calls of 5, 5, 1
    let lps = res.into_iter().next().unwrap().unwrap();
    assert_eq!(lps.len(), 11);
    let mut row = vec![0f32; V as usize];
    for i in 0..11 {
        model.target_row(0, i as u64 + 1, &mut row);
        let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let lse = m + row.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
        let want = row[p[i + 1] as usize] as f64 - lse;
        assert!((lps[i] as f64 - want).abs() < 1e-4, "row {i}: {} vs {want}", lps[i]);
    }
}
