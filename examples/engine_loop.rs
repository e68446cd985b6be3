//! The engine surface over many steps: a decode loop for a batch of
//! requests with speculative decoding (draft model + verification through
//! the MTP info pool), golden teacher forcing, prompt logprobs with chunked
//! prefill, and slot recycling as requests finish.
//!
//! ```text
//! cargo run --release --example engine_loop                      # short synthetic loop (CI)
//! cargo run --release --example engine_loop -- --max-num-seqs 64 --nextn 5 --force-topk 4096
//! cargo run --release --example engine_loop -- --logits fixtures/minilm-logits.safetensors --agreement 0.9
//! ```
//!
//! Per step it prints the requests scheduled, draft acceptance, tokens
//! emitted, the teacher-forced requests, prompt logprobs computed and the
//! pool's bytes. The header prints the pool size by the formula of
//! SAMPLER.md section 9 for the configured force top-k and for force top-k off.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use sampler_host::engine::{pool_bytes, Engine, EngineConfig, EngineRequest, Phase, SyntheticModel};
use sampler_host::{BackendKind, FilterOrder, LogprobsMode, Sampler, SamplerConfig, SamplingParams};

#[derive(Parser, Debug)]
#[command(about = "Engine decode loop: speculative decoding, teacher forcing, prompt logprobs, MTP info pool.")]
struct Args {
    /// Steps to run.
    #[arg(long, default_value_t = 8)]
    steps: usize,
    /// Requests running at once (the first batch; finished ones are replaced).
    #[arg(long, default_value_t = 6)]
    batch: usize,
    /// Requests in total.
    #[arg(long, default_value_t = 10)]
    requests: usize,
    /// Pool slots (max_num_seqs).
    #[arg(long, default_value_t = 64)]
    max_num_seqs: usize,
    /// Draft tokens per step.
    #[arg(long, default_value_t = 5)]
    nextn: usize,
    /// Force top-k width N (0 = off).
    #[arg(long, default_value_t = 4096)]
    force_topk: u32,
    /// Vocabulary size of the synthetic logits (ignored with --logits).
    #[arg(long, default_value_t = 129_280)]
    vocab: usize,
    /// Logits file (safetensors, tensor `--tensor`, [rows, V] f32): target rows are drawn from it.
    #[arg(long)]
    logits: Option<PathBuf>,
    #[arg(long, default_value = "logits")]
    tensor: String,
    /// How closely the draft model agrees with the target (0..=1; 1 = identical).
    #[arg(long, default_value_t = 0.7)]
    agreement: f32,
    /// Noise amplitude of the draft at agreement 0 (logit units).
    #[arg(long, default_value_t = 4.0)]
    noise: f32,
    /// Requests (the first ones) that are teacher-forced with a golden text.
    #[arg(long, default_value_t = 2)]
    golden: usize,
    /// Requests (after the golden ones) that ask for prompt logprobs.
    #[arg(long, default_value_t = 2)]
    prompt_logprobs: usize,
    /// Prompt tokens prefilled per step (0 = whole prompts).
    #[arg(long, default_value_t = 16)]
    prefill_chunk: usize,
    /// Rows per sampler call for prompt logprobs.
    #[arg(long, default_value_t = 8192)]
    max_prompt_rows: usize,
    /// Output tokens per request.
    #[arg(long, default_value_t = 24)]
    max_tokens: usize,
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Min-p in [0, 1] (0 = off; SAMPLER.md 10.1).
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// Filter order: top_p_then_top_k (the seed) or top_k_then_top_p (SAMPLER.md 10.2).
    #[arg(long, default_value = "top_p_then_top_k")]
    filter_order: FilterOrder,
    /// Reported logprobs: processed (the seed) or raw (SAMPLER.md 10.3).
    #[arg(long, default_value = "processed")]
    logprobs_mode: LogprobsMode,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Backend: auto, cpu or cuda.
    #[arg(long, default_value = "cpu")]
    backend: String,
}

fn load_logits(path: &PathBuf, tensor: &str) -> Result<(Vec<f32>, usize), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = st.tensor(tensor).map_err(|e| format!("{}: tensor `{tensor}`: {e}", path.display()))?;
    if t.dtype() != safetensors::Dtype::F32 || t.shape().len() != 2 {
        return Err(format!("{}: tensor `{tensor}` must be [rows, V] f32, got {:?} {:?}", path.display(), t.dtype(), t.shape()));
    }
    let v = t.shape()[1];
    let data = t.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    Ok((data, v))
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("engine_loop: {e}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> Result<(), String> {
    let (mut model, v) = match &a.logits {
        Some(p) => {
            let (rows, v) = load_logits(p, &a.tensor)?;
            println!("logits: {} ({} rows, V = {v})", p.display(), rows.len() / v);
            (SyntheticModel::from_rows(rows, v, a.seed, a.agreement), v)
        }
        None => (SyntheticModel::new(a.vocab, a.seed, a.agreement), a.vocab),
    };
    model.noise_scale = a.noise;
    let backend: BackendKind = a.backend.parse().map_err(|e| format!("{e}"))?;
    let sampler = Sampler::new(SamplerConfig { vocab_size: v as u32, force_topk: a.force_topk, nextn: a.nextn as u32, backend }).map_err(|e| e.to_string())?;
    let n = sampler.n() as usize;
    let cfg = EngineConfig { max_num_seqs: a.max_num_seqs, nextn: a.nextn, prefill_chunk: a.prefill_chunk, max_prompt_rows: a.max_prompt_rows, ..Default::default() };
    println!("backend {} | V = {v} | N = {n} | nextn {} | max_num_seqs {} | agreement {} | prefill chunk {}", sampler.backend_name(), a.nextn, a.max_num_seqs, a.agreement, a.prefill_chunk);
    let rows = (a.max_num_seqs + 1) * a.nextn;
    if a.force_topk != 0 && (a.force_topk as usize) < v {
        let k = a.force_topk as usize;
        println!("pool (force top-k {k}): ({} + 1) * {} = {rows} rows * {k} * (4 B f32 + 4 B i32) = {} bytes", a.max_num_seqs, a.nextn, pool_bytes(a.max_num_seqs, a.nextn, k, v));
    } else {
        println!("pool (force top-k {}): off", a.force_topk);
    }
    println!("pool (force top-k off): ({} + 1) * {} = {rows} rows * V {v} * 4 B f32 = {} bytes", a.max_num_seqs, a.nextn, pool_bytes(a.max_num_seqs, a.nextn, v, v));
    let mut engine = Engine::new(sampler, cfg).map_err(|e| e.to_string())?;
    println!("pool in use: {} bytes", engine.pool().bytes());

    // Requests: prompts of a few lengths; the first --golden are teacher-forced,
    // the next --prompt-logprobs ask for prompt logprobs.
    let lens = [41usize, 100, 17, 8, 33, 64, 5, 23];
    let make = |id: usize| {
        let plen = lens[id % lens.len()];
        let prompt: Vec<i32> = (0..plen).map(|i| ((id * 7919 + i * 104_729) % v) as i32).collect();
        let mut p = SamplingParams {
            temperature: a.temperature,
            top_p: a.top_p,
            seq_seed: Some(a.seed + id as u64),
            min_p: a.min_p,
            filter_order: a.filter_order,
            logprobs_mode: a.logprobs_mode,
            ..Default::default()
        };
        if id < a.golden {
            p.golden_token_ids = (0..a.max_tokens / 2).map(|i| ((id * 31 + i * 577) % v) as i32).collect();
        } else if id < a.golden + a.prompt_logprobs {
            p.prompt_logprobs = true;
        }
        EngineRequest::new(id as u64, prompt, p, a.max_tokens)
    };
    let mut next_id = 0;
    while next_id < a.batch.min(a.requests) {
        engine.add_request(make(next_id)).map_err(|e| e.to_string())?;
        next_id += 1;
    }

    let t0 = Instant::now();
    let (mut tot_acc, mut tot_drafted, mut tot_emitted, mut tot_prompt) = (0u64, 0u64, 0usize, 0usize);
    let mut steps_run = 0;
    for _ in 0..a.steps {
        if engine.pending() == 0 {
            break;
        }
        let t = Instant::now();
        let r = engine.step(&mut model).map_err(|e| e.to_string())?;
        steps_run += 1;
        let (acc, drafted) = r.acceptance();
        let emitted: usize = r.requests.iter().map(|q| q.emitted.len()).sum();
        let prompt: usize = r.requests.iter().map(|q| q.prompt_logprobs).sum();
        let prefill = r.requests.iter().filter(|q| matches!(q.phase, Phase::Prefill { .. })).count();
        let forced: Vec<u64> = r.requests.iter().filter(|q| q.teacher_forced).map(|q| q.id).collect();
        let finished: Vec<u64> = r.requests.iter().filter(|q| q.finished).map(|q| q.id).collect();
        let failed = r.requests.iter().filter(|q| q.status.is_err()).count();
        tot_acc += acc;
        tot_drafted += drafted;
        tot_emitted += emitted;
        tot_prompt += prompt;
        let rate = if drafted > 0 { format!("{:5.1}%", 100.0 * acc as f64 / drafted as f64) } else { "   -  ".into() };
        println!(
            "step {:3} | reqs {:2} (prefill {:2}) | accepted {:3}/{:3} {rate} | emitted {:3} | teacher-forced {:?} | prompt logprobs {:3} | pool {} B, {} slots{}{}  [{:.1} ms]",
            r.step,
            r.requests.len(),
            prefill,
            acc,
            drafted,
            emitted,
            forced,
            prompt,
            r.pool_bytes,
            r.slots_in_use,
            if finished.is_empty() { String::new() } else { format!(" | finished {finished:?}") },
            if failed > 0 { format!(" | failed {failed}") } else { String::new() },
            t.elapsed().as_secs_f64() * 1e3
        );
        // Refill: finished requests free their slot; new ones take it.
        for _ in 0..finished.len() {
            if next_id < a.requests {
                engine.add_request(make(next_id)).map_err(|e| e.to_string())?;
                next_id += 1;
            }
        }
    }
    let fin = engine.take_finished();
    println!(
        "done: {steps_run} steps in {:.2} s | {tot_emitted} tokens emitted ({:.2}/request-step) | acceptance {tot_acc}/{tot_drafted} ({:.1}%) | prompt logprobs {tot_prompt} | finished {} | running {}",
        t0.elapsed().as_secs_f64(),
        tot_emitted as f64 / steps_run.max(1) as f64 / a.batch.max(1) as f64,
        if tot_drafted > 0 { 100.0 * tot_acc as f64 / tot_drafted as f64 } else { 0.0 },
        fin.len(),
        engine.pending()
    );
    for f in fin.iter().take(6) {
        let golden = f.id < a.golden as u64;
        println!(
            "  request {:2}: {} tokens{} | accepted {}/{} | prompt logprobs {} | first tokens {:?}",
            f.id,
            f.output.len(),
            if golden { " (teacher-forced)" } else { "" },
            f.accepted,
            f.drafted,
            f.prompt_logprobs.len(),
            &f.output[..f.output.len().min(6)]
        );
    }
    Ok(())
}
