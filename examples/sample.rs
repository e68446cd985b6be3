//! The main job: the seed's tour end to end on the best backend present.
//!
//! A prefill step with two prompts (41 and 100 tokens), then decode steps
//! for three requests with seqlen_q = 6, 6, 4: each step a draft model
//! proposes drafts (draft-model draws, seed + 1000000007), then the target
//! verifies them (reject sampling) and emits accepted + 1 tokens.
//!
//! ```text
//! cargo run --release --example sample [-- --force-topk 1024 --seed 7 --steps 3]
//! cargo run --release --example sample -- --logits fixtures/minilm-logits.safetensors --temperature 0.15
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// `println!` that ends the program quietly when stdout is closed (`| head`).
macro_rules! say {
    ($($t:tt)*) => {
        if writeln!(std::io::stdout().lock(), $($t)*).is_err() {
            std::process::exit(0);
        }
    };
}

use clap::Parser;
use sampler::logits::{load_safetensors, synthetic, Logits};
use sampler_host::{
    BackendKind, DraftDist, FilterOrder, LogprobsMode, Request, RequestKind, Sampler, SamplerConfig, SamplingParams,
    StepOutput,
};

#[derive(Parser, Debug)]
#[command(about = "The seed's tour: prefill 41 + 100 tokens, then decode with drafts (seqlen_q 6, 6, 4).")]
struct Args {
    /// Logits file (safetensors, tensor `--tensor`, [rows, V]); rows are reused cyclically.
    #[arg(long)]
    logits: Option<PathBuf>,
    /// Tensor name in the logits file.
    #[arg(long, default_value = "logits")]
    tensor: String,
    /// Vocabulary size of the synthetic logits (ignored with --logits).
    #[arg(long, default_value_t = 129_280)]
    vocab: usize,
    /// Force top-k width N (0 = off).
    #[arg(long, default_value_t = 0)]
    force_topk: u32,
    /// Base seq_seed of the requests (request i uses seed + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Decode steps after the prefill.
    #[arg(long, default_value_t = 3)]
    steps: usize,
    /// Backend: auto (CUDA if present, else CPU), cpu or cuda.
    #[arg(long, default_value = "auto")]
    backend: String,
    #[arg(long, default_value_t = 0.7)]
    temperature: f32,
    #[arg(long, default_value_t = 0.9)]
    top_p: f32,
    #[arg(long, default_value_t = 50)]
    top_k: i64,
    /// Min-p in [0, 1] (0 = off; SAMPLER.md 10.1).
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// Filter order: top_p_then_top_k (the seed) or top_k_then_top_p (vLLM / HF; SAMPLER.md 10.2).
    #[arg(long, default_value = "top_p_then_top_k")]
    filter_order: FilterOrder,
    /// Reported logprobs: processed (the seed) or raw (SAMPLER.md 10.3).
    #[arg(long, default_value = "processed")]
    logprobs_mode: LogprobsMode,
    /// Top logprobs per row to print.
    #[arg(long, default_value_t = 3)]
    top_logprobs: u32,
    /// How far the draft model's logits stray from the target's (0 = identical).
    #[arg(long, default_value_t = 0.5)]
    draft_noise: f32,
    /// One token per line (line number = id) to print tokens as text.
    #[arg(long)]
    vocab_file: Option<PathBuf>,
}

/// A request of the tour and its state between steps.
struct Seq {
    name: &'static str,
    seed: u64,
    /// Tokens in context (prompt + output so far).
    context: u64,
    output: Vec<i32>,
    /// Rows of a decode step (seqlen_q).
    seqlen_q: u64,
    /// Accepted drafts in the last step (last_valid_offset of the next draft step).
    last_accepted: u64,
}

struct Source {
    file: Option<Logits>,
    vocab: usize,
    seed: u64,
}

impl Source {
    /// Target logits for `rows` rows, varied by `salt`.
    fn target(&self, rows: usize, salt: u64) -> Vec<f32> {
        match &self.file {
            Some(l) => l.cycle_rows(rows, salt as usize),
            None => synthetic(rows, self.vocab, self.seed ^ salt.wrapping_mul(0x9E37_79B9)).data,
        }
    }
    /// Draft-model logits: the target's plus deterministic noise.
    fn draft(&self, target: &[f32], noise: f32, salt: u64) -> Vec<f32> {
        let n = synthetic(1, target.len(), self.seed ^ salt ^ 0xD4AF7).data;
        target.iter().zip(n).map(|(t, z)| t + noise * z / 1.5).collect()
    }
}

fn params(a: &Args, seed: u64, top_logprobs: u32) -> SamplingParams {
    SamplingParams {
        temperature: a.temperature,
        top_p: a.top_p,
        top_k: a.top_k,
        top_logprobs,
        seq_seed: Some(seed),
        min_p: a.min_p,
        filter_order: a.filter_order,
        logprobs_mode: a.logprobs_mode,
        ..Default::default()
    }
}

/// One step, timed. On CUDA the logits are first put in device memory (as
/// an engine's are; not timed), then the step runs on the device-resident
/// path: metadata up in one async copy, outputs copied to pinned host memory.
/// The time is the real elapsed time of the call.
fn timed_step(
    sampler: &mut Sampler,
    logits: &[f32],
    reqs: &[Request],
) -> Result<(StepOutput, std::time::Duration), Box<dyn std::error::Error>> {
    if let Some(stream) = sampler.cuda_stream() {
        let d = stream.clone_htod(logits)?;
        stream.synchronize()?;
        let t0 = Instant::now();
        let out = sampler.sample_async(sampler_host::interop::CudaLogits::f32(&d), reqs)?.wait()?;
        return Ok((out, t0.elapsed()));
    }
    let t0 = Instant::now();
    let out = sampler.sample(logits, reqs)?;
    Ok((out, t0.elapsed()))
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let file = match &a.logits {
        Some(p) => Some(load_safetensors(p, &a.tensor)?),
        None => None,
    };
    let vocab = file.as_ref().map_or(a.vocab, |l| l.vocab);
    let names = load_vocab(a, vocab);
    let src = Source { file, vocab, seed: a.seed };
    let backend: BackendKind = a.backend.parse()?;
    let mut sampler =
        Sampler::new(SamplerConfig { vocab_size: vocab as u32, force_topk: a.force_topk, nextn: 5, backend })?;
    let n = sampler.n();
    say!(
        "sampler: backend {}, V = {vocab}, N = {}, temperature {}, top_p {}, top_k {}, min_p {}, {}, {} logprobs, logits {}",
        sampler.backend_name(),
        if n as usize == vocab { "off".to_string() } else { n.to_string() },
        a.temperature,
        a.top_p,
        a.top_k,
        a.min_p,
        a.filter_order.as_str(),
        a.logprobs_mode.as_str(),
        a.logits.as_ref().map_or("synthetic (LLM-shaped)".into(), |p| p.display().to_string())
    );
    let tok = |t: i32| match (&names, t) {
        (Some(v), t) if t >= 0 && (t as usize) < v.len() => format!("{t}:{:?}", v[t as usize]),
        _ => t.to_string(),
    };

    // Prefill: prompts of 41 and 100 tokens in one step (R = 2).
    let mut seqs = vec![
        Seq { name: "A", seed: a.seed, context: 41, output: vec![], seqlen_q: 6, last_accepted: 0 },
        Seq { name: "B", seed: a.seed + 1, context: 100, output: vec![], seqlen_q: 6, last_accepted: 0 },
        Seq { name: "C", seed: a.seed + 2, context: 57, output: vec![], seqlen_q: 4, last_accepted: 0 },
    ];
    let reqs: Vec<Request> =
        seqs[..2].iter().map(|s| Request::prefill(params(a, s.seed, a.top_logprobs), s.context)).collect();
    let logits = src.target(2, 0);
    let (out, dt) = timed_step(&mut sampler, &logits, &reqs)?;
    say!("\nprefill step: R = 2 (prompts of 41 and 100 tokens), {:.3} ms", dt.as_secs_f64() * 1e3);
    for (i, s) in seqs[..2].iter_mut().enumerate() {
        report(s, &out, i, &tok);
        s.output.extend(&out.requests[i].emitted);
        s.context += 1;
    }
    // Request C was prefilled earlier; it joins the decode batch with one output token.
    seqs[2].output.push(0);
    seqs[2].context += 1;
    let mut done: Vec<Seq> = Vec::new();
    drop_failed(
        &mut seqs,
        &mut done,
        &out.requests.iter().map(|r| r.status.is_err()).chain([false]).collect::<Vec<_>>(),
    );

    for step in 0..a.steps {
        if seqs.is_empty() {
            say!("\ndecode step {}: no request left", step + 1);
            continue;
        }
        // 1. Draft model: seqlen_q - 1 draws per request (seed + 1000000007).
        let draft_rows: Vec<usize> = seqs.iter().map(|s| s.seqlen_q as usize - 1).collect();
        let rows: usize = draft_rows.iter().sum();
        let target_logits = src.target(seqs.iter().map(|s| s.seqlen_q as usize).sum(), 1000 + step as u64);
        // Draft i of a request approximates the target row that verifies it (row i of the request).
        let mut aligned = Vec::with_capacity(rows * vocab);
        let mut first = 0;
        for s in &seqs {
            aligned.extend_from_slice(&target_logits[first * vocab..(first + s.seqlen_q as usize - 1) * vocab]);
            first += s.seqlen_q as usize;
        }
        let draft_logits = src.draft(&aligned, a.draft_noise, step as u64);
        let k = n.min(64);
        let dreqs: Vec<Request> = seqs
            .iter()
            .zip(&draft_rows)
            .map(|(s, &r)| Request {
                params: params(a, s.seed, k),
                kind: RequestKind::Draft {
                    seqlen_k: s.context + s.seqlen_q - 1,
                    seqlen_q: s.seqlen_q,
                    last_valid_offset: s.last_accepted,
                    rows: r as u32,
                },
                golden: vec![],
                masks: None,
            })
            .collect();
        let (dout, t_draft) = timed_step(&mut sampler, &draft_logits, &dreqs)?;
        // 2. Target verifies: rows seqlen_q = 6, 6, 4 (R = 16).
        let mut vreqs = Vec::new();
        let mut row = 0;
        for (i, s) in seqs.iter().enumerate() {
            let drafts = dout.requests[i].emitted.clone();
            // The draft's processed distribution that proposed each draft (its top-64 = all kept tokens when top_k <= 64).
            let dists = (0..draft_rows[i])
                .map(|j| {
                    let t = &dout.rows[row + j].top_logprobs;
                    DraftDist { ids: t.iter().map(|x| x.0).collect(), logprobs: t.iter().map(|x| x.1).collect() }
                })
                .collect();
            row += draft_rows[i];
            vreqs.push(Request::decode(
                params(a, s.seed, a.top_logprobs),
                s.context + s.seqlen_q - 1,
                s.seqlen_q,
                drafts,
                dists,
            ));
        }
        let (out, t_verify) = timed_step(&mut sampler, &target_logits, &vreqs)?;
        say!(
            "\ndecode step {}: draft R = {rows} in {:.3} ms, verify R = {} (seqlen_q {}) in {:.3} ms",
            step + 1,
            t_draft.as_secs_f64() * 1e3,
            target_logits.len() / vocab,
            seqs.iter().map(|s| s.seqlen_q.to_string()).collect::<Vec<_>>().join(", "),
            t_verify.as_secs_f64() * 1e3
        );
        for (i, s) in seqs.iter_mut().enumerate() {
            let r = &out.requests[i];
            if let RequestKind::Decode { drafts, .. } = &vreqs[i].kind {
                say!("  {} drafts {:?}", s.name, drafts.iter().map(|&t| tok(t)).collect::<Vec<_>>());
            }
            report(s, &out, i, &tok);
            s.output.extend(&r.emitted);
            s.context += r.emitted.len() as u64;
            s.last_accepted = r.accepted as u64;
        }
        let failed: Vec<bool> =
            out.requests.iter().zip(&dout.requests).map(|(v, d)| v.status.is_err() || d.status.is_err()).collect();
        drop_failed(&mut seqs, &mut done, &failed);
    }
    say!("\noutputs:");
    seqs.extend(done);
    seqs.sort_by_key(|s| s.name);
    for s in &seqs {
        say!(
            "  {} ({} tokens in context): {:?}",
            s.name,
            s.context,
            s.output.iter().map(|&t| tok(t)).collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// A request whose step failed reports its error (already printed) and drops
/// out of later steps; the others keep decoding.
fn drop_failed(seqs: &mut Vec<Seq>, done: &mut Vec<Seq>, failed: &[bool]) {
    for (i, s) in std::mem::take(seqs).into_iter().enumerate() {
        if failed.get(i).copied().unwrap_or(false) {
            say!("  {} dropped out", s.name);
            done.push(s);
        } else {
            seqs.push(s);
        }
    }
}

fn report(s: &Seq, out: &StepOutput, i: usize, tok: &dyn Fn(i32) -> String) {
    let r = &out.requests[i];
    match &r.status {
        Err(e) => say!("  {} error: {e}", s.name),
        Ok(()) => {
            let pairs: Vec<String> =
                r.emitted.iter().zip(&r.emitted_logprobs).map(|(&t, lp)| format!("{} ({lp:.4})", tok(t))).collect();
            say!("  {} accepted {} emitted [{}]", s.name, r.accepted, pairs.join(", "));
        }
    }
}

fn load_vocab(a: &Args, vocab: usize) -> Option<Vec<String>> {
    let default = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/minilm-vocab.txt"));
    let path = a.vocab_file.clone().unwrap_or(default);
    let text = std::fs::read_to_string(path).ok()?;
    let v: Vec<String> = text.lines().map(str::to_string).collect();
    (v.len() == vocab).then_some(v)
}
