//! The engine surface over many steps: a decode loop for a batch of
//! requests with speculative decoding (draft model + verification through
//! the MTP info pool), golden teacher forcing, prompt logprobs with chunked
//! prefill, and slot recycling as requests finish.
//!
//! ```text
//! cargo run --release --example engine_loop                      # short synthetic loop (CI)
//! cargo run --release --example engine_loop -- --max-num-seqs 64 --nextn 5 --force-topk 4096
//! cargo run --release --example engine_loop -- --logits fixtures/minilm-logits.safetensors --agreement 0.9
//! cargo run --release --example engine_loop -- --tree --vocab 32000 --force-topk 1024   # tree vs chain drafter
//! ```
//!
//! `--tree` runs a decode loop twice on the same synthetic model: once with
//! the chain drafter (nextn drafts sampled from the draft model, verified as
//! section 6) and once with an EAGLE-style tree drafter (each frontier node
//! proposes its draft distribution's top `--tree-topk` tokens, the
//! `--tree-beam` children of highest cumulative draft probability are kept per
//! depth, up to `--tree-depth` levels; SAMPLER.md section 11), and prints the
//! acceptance of both side by side. `--tree-law fixed` (EAGLE, SGLang:
//! target-only) needs no draft distributions; `with` / `without` draw the
//! children from the draft distribution and pass one distribution per
//! internal node, stored in an MTP info pool laid out for trees (11.10).
//!
//! Per step it prints the requests scheduled, draft acceptance, tokens
//! emitted, the teacher-forced requests, prompt logprobs computed and the
//! pool's bytes. The header prints the pool size by the formula of
//! SAMPLER.md section 9 for the configured force top-k and for force top-k off.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use sampler_host::engine::{
    pool_bytes, tree_pool_bytes, Engine, EngineConfig, EngineRequest, LogitsSource, MtpInfoPool, Phase, RowQuery,
    RowRole, SyntheticModel,
};
use sampler_host::{
    BackendKind, DraftDist, DraftTree, FilterOrder, LogprobsMode, Request, RequestKind, Sampler, SamplerConfig,
    SamplingParams,
};

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
    /// Compare a tree drafter with the chain drafter (decode only; see the module docs).
    #[arg(long)]
    tree: bool,
    /// Tree drafter: children proposed per frontier node.
    #[arg(long, default_value_t = 4)]
    tree_topk: usize,
    /// Tree drafter: nodes kept per depth (beam).
    #[arg(long, default_value_t = 4)]
    tree_beam: usize,
    /// Tree drafter: depth (0 = nextn).
    #[arg(long, default_value_t = 0)]
    tree_depth: usize,
    /// Tree drafter's proposal law: fixed (top-k, target-only), with or without (replacement, drawn from q).
    #[arg(long, default_value = "fixed")]
    tree_law: String,
}

fn load_logits(path: &PathBuf, tensor: &str) -> Result<(Vec<f32>, usize), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = st.tensor(tensor).map_err(|e| format!("{}: tensor `{tensor}`: {e}", path.display()))?;
    if t.dtype() != safetensors::Dtype::F32 || t.shape().len() != 2 {
        return Err(format!(
            "{}: tensor `{tensor}` must be [rows, V] f32, got {:?} {:?}",
            path.display(),
            t.dtype(),
            t.shape()
        ));
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
    if a.tree {
        return tree_vs_chain(&a, &mut model, v, backend);
    }
    let sampler =
        Sampler::new(SamplerConfig { vocab_size: v as u32, force_topk: a.force_topk, nextn: a.nextn as u32, backend })
            .map_err(|e| e.to_string())?;
    let n = sampler.n() as usize;
    let cfg = EngineConfig {
        max_num_seqs: a.max_num_seqs,
        nextn: a.nextn,
        prefill_chunk: a.prefill_chunk,
        max_prompt_rows: a.max_prompt_rows,
        ..Default::default()
    };
    println!(
        "backend {} | V = {v} | N = {n} | nextn {} | max_num_seqs {} | agreement {} | prefill chunk {}",
        sampler.backend_name(),
        a.nextn,
        a.max_num_seqs,
        a.agreement,
        a.prefill_chunk
    );
    let rows = (a.max_num_seqs + 1) * a.nextn;
    if a.force_topk != 0 && (a.force_topk as usize) < v {
        let k = a.force_topk as usize;
        println!(
            "pool (force top-k {k}): ({} + 1) * {} = {rows} rows * {k} * (4 B f32 + 4 B i32) = {} bytes",
            a.max_num_seqs,
            a.nextn,
            pool_bytes(a.max_num_seqs, a.nextn, k, v)
        );
    } else {
        println!("pool (force top-k {}): off", a.force_topk);
    }
    println!(
        "pool (force top-k off): ({} + 1) * {} = {rows} rows * V {v} * 4 B f32 = {} bytes",
        a.max_num_seqs,
        a.nextn,
        pool_bytes(a.max_num_seqs, a.nextn, v, v)
    );
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

/// A test-side SplitMix64 for the tree drafter's child draws (independent of
/// the sampler's verification random numbers, as 11.4's exactness needs).
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
    /// An index drawn from `w` (unnormalised; None when all zero).
    fn pick(&mut self, w: &[f64]) -> Option<usize> {
        let total: f64 = w.iter().sum();
        if total <= 0.0 {
            return None;
        }
        let u = self.next() * total;
        let mut cum = 0.0;
        for (i, &x) in w.iter().enumerate() {
            cum += x;
            if x > 0.0 && cum > u {
                return Some(i);
            }
        }
        w.iter().rposition(|&x| x > 0.0)
    }
}

/// Processed draft distributions at `predicts` = `base + j` (j in 0..rows) of
/// one request (the synthetic draft model depends only on the position).
fn draft_rows(
    sampler: &mut Sampler,
    model: &mut SyntheticModel,
    id: u64,
    params: &SamplingParams,
    base: u64,
    rows: usize,
) -> Result<Vec<DraftDist>, String> {
    let q: Vec<RowQuery> = (0..rows)
        .map(|j| RowQuery { request: id, role: RowRole::Draft, input: -1, predicts: base + j as u64 })
        .collect();
    let logits = model.draft_logits(&q);
    let req = Request {
        params: params.clone(),
        kind: RequestKind::Draft { seqlen_k: base, seqlen_q: 1, last_valid_offset: 0, rows: rows as u32 },
        golden: Vec::new(),
        masks: None,
    };
    let (_, pr) =
        sampler.sample_with_processed(&logits, &[req], &(0..rows).collect::<Vec<_>>()).map_err(|e| e.to_string())?;
    (0..rows)
        .map(|j| {
            let (ids, lps) = pr.row(j).map_err(|e| e.to_string())?;
            let keep: Vec<usize> = (0..ids.len()).filter(|&c| lps[c] > f32::NEG_INFINITY).collect();
            Ok(DraftDist {
                ids: keep.iter().map(|&c| ids[c]).collect(),
                logprobs: keep.iter().map(|&c| lps[c]).collect(),
            })
        })
        .collect()
}

/// Target rows at `predicts` = `base + depth[n]` for each node / chain row.
fn target_rows(model: &mut SyntheticModel, id: u64, base: u64, depth: &[usize]) -> Vec<f32> {
    let q: Vec<RowQuery> = depth
        .iter()
        .map(|&d| RowQuery { request: id, role: RowRole::Target, input: -1, predicts: base + d as u64 })
        .collect();
    model.target_logits(&q)
}

/// `--tree`: the chain drafter and an EAGLE-style tree drafter on the same
/// synthetic model, decode only, acceptance side by side.
fn tree_vs_chain(a: &Args, model: &mut SyntheticModel, v: usize, backend: BackendKind) -> Result<(), String> {
    let depth_max = if a.tree_depth == 0 { a.nextn } else { a.tree_depth };
    let law = a.tree_law.as_str();
    if !matches!(law, "fixed" | "with" | "without") {
        return Err(format!("--tree-law {law}: expected fixed, with or without"));
    }
    let mk = |nextn: usize| {
        Sampler::new(SamplerConfig { vocab_size: v as u32, force_topk: a.force_topk, nextn: nextn as u32, backend })
            .map_err(|e| e.to_string())
    };
    let mut chain_s = mk(a.nextn)?;
    let mut tree_s = mk(a.nextn.max(depth_max))?;
    let n = tree_s.n() as usize;
    let max_nodes = 1 + depth_max * a.tree_beam;
    let max_internal = 1 + (depth_max - 1) * a.tree_beam;
    println!(
        "tree vs chain | backend {} | V = {v} | N = {n} | agreement {} | chain nextn {} | tree: top-{} per node, beam {}, depth {depth_max} (<= {max_nodes} nodes), law {law}",
        tree_s.backend_name(),
        a.agreement,
        a.nextn,
        a.tree_topk,
        a.tree_beam
    );
    let mut pool = if law == "fixed" {
        println!("tree pool: none (fixed children need no draft distributions, 11.10)");
        None
    } else {
        let p = MtpInfoPool::for_tree(a.batch, max_internal, n, v).map_err(|e| e.to_string())?;
        println!(
            "tree pool: ({} + 1) * {max_internal} internal nodes * N {n} = {} bytes (11.10)",
            a.batch,
            tree_pool_bytes(a.batch, max_internal, n, v)
        );
        Some(p)
    };
    let slots: Vec<usize> = match pool.as_mut() {
        Some(pl) => {
            (0..a.batch.max(1)).map(|_| pl.alloc().ok_or("tree pool: no free slot")).collect::<Result<_, _>>()?
        }
        None => Vec::new(),
    };
    let params = |id: usize| SamplingParams {
        temperature: a.temperature,
        top_p: a.top_p,
        seq_seed: Some(a.seed + id as u64),
        ..Default::default()
    };
    let mut rng = Mix(a.seed ^ 0x7EE5);
    let batch = a.batch.max(1);
    // Sequence lengths (prompt + output so far) per request, per drafter.
    let mut len_chain: Vec<u64> = (0..batch).map(|i| 20 + i as u64).collect();
    let mut len_tree = len_chain.clone();
    let (mut chain_acc, mut chain_emit, mut tree_acc, mut tree_emit, mut tree_nodes) = (0u64, 0u64, 0u64, 0u64, 0u64);
    for step in 0..a.steps {
        // ---- chain: nextn drafts drawn from the draft model, verified (section 6).
        let mut reqs = Vec::new();
        let mut logits = Vec::new();
        for (i, len) in len_chain.iter().enumerate() {
            let p = params(i);
            let dists = draft_rows(&mut chain_s, model, i as u64, &p, *len, a.nextn)?;
            let drafts: Vec<i32> = dists
                .iter()
                .map(|d| {
                    rng.pick(&d.logprobs.iter().map(|&x| (x as f64).exp()).collect::<Vec<_>>()).map_or(-1, |c| d.ids[c])
                })
                .collect();
            logits.extend(target_rows(model, i as u64, *len, &(0..=a.nextn).collect::<Vec<_>>()));
            let m = a.nextn as u64 + 1;
            reqs.push(Request::decode(p, *len + m - 1, m, drafts, dists));
        }
        let out = chain_s.sample(&logits, &reqs).map_err(|e| e.to_string())?;
        let (mut sa, mut se) = (0u64, 0u64);
        for (i, o) in out.requests.iter().enumerate() {
            o.status.clone().map_err(|e| format!("chain request {i}: {e}"))?;
            sa += o.accepted as u64;
            se += o.emitted.len() as u64;
            len_chain[i] += o.emitted.len() as u64;
        }
        // ---- tree: EAGLE-style top-k expansion, verified as section 11.
        let mut reqs = Vec::new();
        let mut logits = Vec::new();
        let mut nodes_step = 0u64;
        for (i, len) in len_tree.iter().enumerate() {
            let p = params(i);
            let dists = draft_rows(&mut tree_s, model, i as u64, &p, *len, depth_max)?;
            // Nodes level by level: (parent, token, depth, cumulative log q).
            let mut parent = vec![-1i32];
            let mut tokens = Vec::new();
            let mut depth = vec![0usize];
            let mut score = vec![0.0f64];
            let mut frontier = vec![0usize];
            #[allow(clippy::needless_range_loop)]
            for d in 0..depth_max {
                let q = &dists[d];
                let mut cand: Vec<(f64, usize, i32)> = Vec::new();
                for &f in &frontier {
                    let picks: Vec<usize> = match law {
                        // q's top tokens in the order of section 3.6 (the draft row's processed order).
                        "fixed" => (0..q.ids.len().min(a.tree_topk)).collect(),
                        _ => {
                            let mut w: Vec<f64> = q.logprobs.iter().map(|&x| (x as f64).exp()).collect();
                            let mut out = Vec::new();
                            for _ in 0..a.tree_topk {
                                let Some(c) = rng.pick(&w) else { break };
                                out.push(c);
                                if law == "without" {
                                    w[c] = 0.0;
                                }
                            }
                            out
                        }
                    };
                    for c in picks {
                        cand.push((score[f] + q.logprobs[c] as f64, f, q.ids[c]));
                    }
                }
                // Keep the beam best children, then restore each parent's draw
                // order (children must be numbered in the order they were drawn).
                let mut order: Vec<usize> = (0..cand.len()).collect();
                order.sort_by(|&x, &y| cand[y].0.partial_cmp(&cand[x].0).unwrap().then(x.cmp(&y)));
                let mut kept: Vec<usize> = order.into_iter().take(a.tree_beam).collect();
                kept.sort();
                // With a draft distribution, a node keeps all or none of its
                // drawn children (dropping some would change their law).
                if law != "fixed" {
                    let parents: Vec<usize> = kept.iter().map(|&c| cand[c].1).collect();
                    kept = (0..cand.len()).filter(|&c| parents.contains(&cand[c].1)).collect();
                }
                frontier.clear();
                for c in kept {
                    let (sc, f, t) = cand[c];
                    parent.push(f as i32);
                    tokens.push(t);
                    depth.push(d + 1);
                    score.push(sc);
                    frontier.push(parent.len() - 1);
                }
                if frontier.is_empty() {
                    break;
                }
            }
            let m = parent.len();
            nodes_step += m as u64;
            let internal: Vec<usize> = (0..m).filter(|&c| parent.contains(&(c as i32))).collect();
            let draft_dists = match pool.as_mut() {
                None => None,
                Some(pl) => {
                    // One distribution per internal node (the draft row at its depth), through the pool.
                    let slot = slots[i];
                    for (k, &c) in internal.iter().enumerate() {
                        let d = &dists[depth[c]];
                        let mut ids = d.ids.clone();
                        let mut lps = d.logprobs.clone();
                        ids.resize(n, if n < v { 0 } else { -1 });
                        lps.resize(n, f32::NEG_INFINITY);
                        pl.write(slot, k, &ids, &lps).map_err(|e| e.to_string())?;
                    }
                    Some(pl.read_tree(slot, internal.len()))
                }
            };
            logits.extend(target_rows(model, i as u64, *len, &depth));
            let tree = DraftTree { parent, tokens, draft_dists, without_replacement: law == "without" };
            reqs.push(Request::tree(p, *len + m as u64 - 1, tree));
        }
        let out = tree_s.sample(&logits, &reqs).map_err(|e| e.to_string())?;
        let (mut ta, mut te) = (0u64, 0u64);
        for (i, o) in out.requests.iter().enumerate() {
            o.status.clone().map_err(|e| format!("tree request {i}: {e}"))?;
            ta += o.accepted as u64;
            te += o.emitted.len() as u64;
            len_tree[i] += o.emitted.len() as u64;
        }
        chain_acc += sa;
        chain_emit += se;
        tree_acc += ta;
        tree_emit += te;
        tree_nodes += nodes_step;
        println!(
            "step {step:3} | chain: accepted {sa:3}/{:3}, {:.2} tokens/request | tree: accepted depth {ta:3}, {:.2} tokens/request, {:.1} nodes/request",
            batch * a.nextn,
            se as f64 / batch as f64,
            te as f64 / batch as f64,
            nodes_step as f64 / batch as f64
        );
    }
    let rs = (a.steps * batch).max(1) as f64;
    println!(
        "done: chain {:.3} tokens/request-step (acceptance {:.1}% of {} drafts) | tree {:.3} tokens/request-step ({:.2} accepted depth, {:.1} nodes/request) | gain {:.2}x",
        chain_emit as f64 / rs,
        100.0 * chain_acc as f64 / (rs * a.nextn as f64),
        a.nextn,
        tree_emit as f64 / rs,
        tree_acc as f64 / rs,
        tree_nodes as f64 / rs,
        tree_emit as f64 / chain_emit.max(1) as f64
    );
    Ok(())
}
