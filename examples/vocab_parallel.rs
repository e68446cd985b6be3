//! Vocabulary-parallel sampling (issue 15, `sampler_host::dist::vocab`): TP ranks as
//! threads, over NCCL on GPUs 0..TP-1 when a driver, libnccl and TP GPUs are
//! present, else over `LocalCollective` (channels; the CPU path).
//!
//! 1. **Bitwise check**: golden-shaped batches at V = 129280 (prefill, decode
//!    verifying drafts with remap, golden tokens, draft rows, prompt logprobs,
//!    grammar masks global and per shard, a NaN row, a bad parameter, and a
//!    batch with a top-p 1 row that forces the full-row fallback) for
//!    N = 1024, 4096 and off, on equal shards and on uneven explicit ranges
//!    with padding, finishing on every rank and on the driver only; plus every
//!    golden case under `--golden DIR`. Every finishing rank must equal the
//!    single-device `Sampler` (best backend: CUDA on a GPU) on the gathered
//!    logits bit for bit.
//! 2. **Table**: bytes each rank gathers and the step time (rank 0, median),
//!    vocab-parallel against gather-then-sample (all-gather of the `[R, V]`
//!    logits, then the single-device sampler on rank 0), at R = 1, 64, 384
//!    and N = 1024, 4096, off (V = 129280; temperature 0.7, top-p 0.9,
//!    top-k 50, top-5 logprobs, as the README's speed table).
//!
//! The vocab-parallel step's kernels run on the CPU (the DSL kernels' host
//! programs; see docs/ENGINE.md for what remains for a device-resident
//! path); the exchange goes through the collective (NCCL: host-staged
//! buffers). "exch ms" is the time spent inside collectives.
//!
//! ```text
//! cargo run --release --example vocab_parallel -- [--tp 2] [--rows 1,64,384] [--reps 5]
//!     [--vocab 129280] [--golden conformance/golden] [--collective auto|local|nccl|nccl-raw] [--skip-check] [--skip-table] [--first-round C]
//! ```
//! `nccl-raw` makes each rank's communicator outside the sampler (as an
//! engine's TP group has one) and wraps it in `tp::RawNcclCollective`.
//! The "dev exch" columns time device-resident NCCL all-gathers of the same
//! payload sizes (no host staging; NCCL only). Exit status 1 when any check fails.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use sampler_host::dist::collective::{Collective, CollectiveError, LocalCollective, NcclCollective};
use sampler_host::dist::vocab::{
    gather_logits, shard_mask, shard_of, ExchangeStats, FinishOn, MaskLayout, RawNcclCollective, Shard, ShardLayout,
    VocabParallelConfig, VocabParallelSampler,
};
use sampler_host::{BackendKind, DraftDist, Request, RequestKind, Sampler, SamplerConfig, SamplingParams, StepOutput};

/// A collective that times what it spends inside collectives.
struct Timed {
    inner: Inner,
    spent: f64,
}
enum Inner {
    Local(LocalCollective),
    Nccl(NcclCollective),
    /// A communicator made outside the sampler (as an engine's TP group's), wrapped.
    Raw(RawNcclCollective),
}
impl Timed {
    fn c(&mut self) -> &mut dyn Collective {
        match &mut self.inner {
            Inner::Local(c) => c,
            Inner::Nccl(c) => c,
            Inner::Raw(c) => c,
        }
    }
    fn timed<T>(&mut self, f: impl FnOnce(&mut dyn Collective) -> T) -> T {
        let t = Instant::now();
        let r = f(self.c());
        self.spent += t.elapsed().as_secs_f64();
        r
    }
}
impl Collective for Timed {
    fn rank(&self) -> usize {
        match &self.inner {
            Inner::Local(c) => c.rank(),
            Inner::Nccl(c) => c.rank(),
            Inner::Raw(c) => c.rank(),
        }
    }
    fn world_size(&self) -> usize {
        match &self.inner {
            Inner::Local(c) => c.world_size(),
            Inner::Nccl(c) => c.world_size(),
            Inner::Raw(c) => c.world_size(),
        }
    }
    fn broadcast_i32(&mut self, buf: &mut Vec<i32>, root: usize) -> Result<(), CollectiveError> {
        self.timed(|c| c.broadcast_i32(buf, root))
    }
    fn barrier(&mut self) -> Result<(), CollectiveError> {
        self.timed(|c| c.barrier())
    }
    fn all_gather_i32(&mut self, send: &[i32], counts: &[usize]) -> Result<Vec<i32>, CollectiveError> {
        self.timed(|c| c.all_gather_i32(send, counts))
    }
}

/// One unit of work for every rank.
enum Job {
    Vp {
        cfg: VocabParallelConfig,
        logits: Arc<Vec<f32>>,
        reqs: Arc<Vec<Request>>,
        reps: usize,
    },
    Gather {
        vocab: u32,
        force_topk: u32,
        logits: Arc<Vec<f32>>,
        reqs: Arc<Vec<Request>>,
        reps: usize,
    },
    /// Device-resident NCCL all-gathers of `count` i32 per rank (NCCL only).
    DeviceGather {
        count: usize,
        reps: usize,
    },
}

#[derive(Default)]
struct Reply {
    out: Option<StepOutput>,
    step_s: Vec<f64>,
    exch_s: Vec<f64>,
    bytes: u64,
    stats: ExchangeStats,
}

/// Each request's masks cut for shard `s` (a malformed global mask stays malformed).
fn cut_masks(reqs: &[Request], vocab: u32, s: Shard) -> Vec<Request> {
    let words = vocab.div_ceil(32) as usize;
    let cut = |m: &Vec<u32>| {
        let mut c = shard_mask(m, s);
        if m.len() != words {
            c.push(u32::MAX);
        }
        c
    };
    reqs.iter()
        .map(|r| Request { masks: r.masks.as_ref().map(|ms| ms.iter().map(cut).collect()), ..r.clone() })
        .collect()
}

fn run_job(coll: Timed, job: &Job) -> (Timed, Result<Reply, String>) {
    match job {
        Job::DeviceGather { count, reps } => {
            let mut coll = coll;
            let res = match &mut coll.inner {
                Inner::Nccl(c) => c
                    .time_all_gather_device(*count, *reps)
                    .map(|t| Reply { step_s: vec![t], ..Default::default() })
                    .map_err(|e| e.to_string()),
                Inner::Local(_) | Inner::Raw(_) => Ok(Reply::default()),
            };
            (coll, res)
        }
        Job::Vp { cfg, logits, reqs, reps } => {
            let mut vp = match VocabParallelSampler::new(cfg.clone(), coll) {
                Ok(v) => v,
                Err(e) => panic!("vocab-parallel config refused: {e}"),
            };
            let shard = shard_of(logits, cfg.vocab_size, vp.shard(), f32::NAN);
            let reqs = if cfg.masks == MaskLayout::Shard {
                cut_masks(reqs, cfg.vocab_size, vp.shard())
            } else {
                reqs.to_vec()
            };
            let mut rep = Reply::default();
            let res = (|| -> Result<(), String> {
                for i in 0..=*reps {
                    vp.collective().barrier().map_err(|e| e.to_string())?;
                    vp.collective().spent = 0.0;
                    let t = Instant::now();
                    let out = vp.sample(&shard, &reqs).map_err(|e| e.to_string())?;
                    let dt = t.elapsed().as_secs_f64();
                    if i > 0 || *reps == 0 {
                        rep.step_s.push(dt);
                        rep.exch_s.push(vp.collective().spent);
                    }
                    rep.out = Some(out);
                }
                rep.stats = vp.last_stats().clone();
                rep.bytes = rep.stats.gathered_bytes;
                Ok(())
            })();
            (vp.into_collective(), res.map(|_| rep))
        }
        Job::Gather { vocab, force_topk, logits, reqs, reps } => {
            let mut coll = coll;
            let res = (|| -> Result<Reply, String> {
                let tp = coll.world_size();
                let shards = ShardLayout::Equal { tp }.shards(*vocab).map_err(|e| e.to_string())?;
                let shard = shard_of(logits, *vocab, shards[coll.rank()], f32::NAN);
                let rows = reqs.iter().map(|r| r.rows()).sum::<usize>();
                let mut sampler = if coll.rank() == 0 {
                    let cfg = SamplerConfig {
                        vocab_size: *vocab,
                        force_topk: *force_topk,
                        nextn: 8,
                        backend: BackendKind::Auto,
                    };
                    Some(Sampler::new(cfg).map_err(|e| e.to_string())?)
                } else {
                    None
                };
                let mut rep = Reply::default();
                for i in 0..=*reps {
                    coll.barrier().map_err(|e| e.to_string())?;
                    coll.spent = 0.0;
                    let t = Instant::now();
                    let full = gather_logits(&mut coll, &shards, *vocab, rows, &shard).map_err(|e| e.to_string())?;
                    if let Some(s) = sampler.as_mut() {
                        rep.out = Some(s.sample(&full, reqs).map_err(|e| e.to_string())?);
                    }
                    if i > 0 || *reps == 0 {
                        rep.step_s.push(t.elapsed().as_secs_f64());
                        rep.exch_s.push(coll.spent);
                    }
                    rep.bytes = full.len() as u64 * 4;
                }
                Ok(rep)
            })();
            (coll, res)
        }
    }
}

fn rank_loop(mut coll: Timed, jobs: Receiver<Arc<Job>>, replies: Sender<Result<Reply, String>>) {
    while let Ok(job) = jobs.recv() {
        let (c, r) = run_job(coll, &job);
        coll = c;
        if replies.send(r).is_err() {
            break;
        }
    }
}

struct Group {
    jobs: Vec<Sender<Arc<Job>>>,
    replies: Vec<Receiver<Result<Reply, String>>>,
    what: String,
}

impl Group {
    fn start(tp: usize, kind: &str) -> Result<Group, String> {
        let raw = kind == "nccl-raw";
        let kind = if raw { "nccl" } else { kind };
        let nccl = match kind {
            "local" => None,
            _ => match NcclCollective::unique_id() {
                Ok(id) if NcclCollective::device_count() >= tp => Some(id),
                Ok(_) if kind == "nccl" => {
                    return Err(format!("--collective nccl needs {tp} GPUs, found {}", NcclCollective::device_count()))
                }
                Err(e) if kind == "nccl" => return Err(e.to_string()),
                _ => None,
            },
        };
        let locals = if nccl.is_none() {
            LocalCollective::group(tp).into_iter().map(Some).collect()
        } else {
            (0..tp).map(|_| None).collect::<Vec<_>>()
        };
        let (mut jobs, mut replies) = (Vec::new(), Vec::new());
        for (r, local) in locals.into_iter().enumerate() {
            let (jt, jr) = channel::<Arc<Job>>();
            let (rt, rr) = channel();
            jobs.push(jt);
            replies.push(rr);
            std::thread::spawn(move || {
                let inner = match (local, nccl) {
                    (Some(l), _) => Inner::Local(l),
                    (None, Some(id)) if raw => match raw_comm(r, tp, id) {
                        Ok(c) => Inner::Raw(c),
                        Err(e) => {
                            let _ = rt.send(Err(format!("rank {r}: {e}")));
                            return;
                        }
                    },
                    (None, Some(id)) => match NcclCollective::new(r, tp, r, &id) {
                        Ok(c) => Inner::Nccl(c),
                        Err(e) => {
                            let _ = rt.send(Err(format!("rank {r}: {e}")));
                            return;
                        }
                    },
                    (None, None) => unreachable!(),
                };
                rank_loop(Timed { inner, spent: 0.0 }, jr, rt)
            });
        }
        let what = if nccl.is_some() {
            format!(
                "NCCL{} on GPUs 0..{}",
                if raw { " (engine-made communicator, RawNcclCollective)" } else { "" },
                tp - 1
            )
        } else {
            "LocalCollective (threads, CPU path)".into()
        };
        Ok(Group { jobs, replies, what })
    }
    fn run(&self, job: Job) -> Result<Vec<Reply>, String> {
        let job = Arc::new(job);
        for j in &self.jobs {
            j.send(job.clone()).map_err(|_| "a rank thread is gone".to_string())?;
        }
        self.replies.iter().map(|r| r.recv().map_err(|_| "a rank thread is gone".to_string())?).collect()
    }
}

/// An NCCL communicator made the way an engine makes its TP group's
/// (`ncclCommInitRank` on its own context and stream), then wrapped.
fn raw_comm(rank: usize, tp: usize, id: sampler_host::dist::collective::NcclId) -> Result<RawNcclCollective, String> {
    let ctx = cudarc::driver::CudaContext::new(rank).map_err(|e| format!("CUDA context: {e:?}"))?;
    ctx.bind_to_thread().map_err(|e| format!("bind: {e:?}"))?;
    let stream = ctx.new_stream().map_err(|e| format!("stream: {e:?}"))?;
    let mut comm = std::ptr::null_mut();
    // SAFETY: every rank calls this with the same id and size; `comm` is written once.
    unsafe {
        cudarc::nccl::result::comm_init_rank(
            &mut comm,
            tp as i32,
            cudarc::nccl::sys::ncclUniqueId { internal: id },
            rank as i32,
        )
    }
    .map_err(|e| format!("ncclCommInitRank: {e:?}"))?;
    // SAFETY: `comm` is live for the process (never destroyed) and used by this rank's thread only.
    unsafe { RawNcclCollective::new(comm, stream) }.map_err(|e| e.to_string())
}

/// Test-side RNG (xorshift64*).
struct Rng(u64);
impl Rng {
    fn u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn f64(&mut self) -> f64 {
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: usize) -> usize {
        (self.u64() % n as u64) as usize
    }
    fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.f64().max(1e-300), self.f64());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// A logits row shaped like an LLM's: a normal body, a few strong tokens
/// holding most of the mass (top-p 0.9 keeps a short prefix), some ties.
fn row(rng: &mut Rng, v: usize) -> Vec<f32> {
    let mut x: Vec<f32> = (0..v).map(|_| (rng.normal() * 1.5) as f32).collect();
    for _ in 0..8 {
        let i = rng.below(v);
        x[i] = 14.0 + (rng.normal() * 1.5) as f32;
    }
    let tie = x[rng.below(v)];
    for _ in 0..3 {
        let i = rng.below(v);
        x[i] = tie;
    }
    x
}

/// The draft model's processed distribution over a row's 256 best ids (and the argmax).
fn draft_dist(x: &[f32]) -> (i32, DraftDist) {
    let mut ids: Vec<usize> = (0..x.len()).collect();
    ids.sort_by(|&a, &b| x[b].total_cmp(&x[a]).then(a.cmp(&b)));
    ids.truncate(256);
    let m = x[ids[0]] as f64;
    let lse = m + ids.iter().map(|&i| (x[i] as f64 - m).exp()).sum::<f64>().ln();
    let lps = ids.iter().map(|&i| ((x[i] as f64 - lse).min(0.0)) as f32).collect();
    (ids[0] as i32, DraftDist { ids: ids.iter().map(|&i| i as i32).collect(), logprobs: lps })
}

fn params(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 0.7,
        top_p: 0.9,
        top_k: 50,
        top_logprobs: 5,
        seq_seed: Some(seed),
        ..Default::default()
    }
}

/// Golden-shaped batch: every row kind; `full_row` adds a top-p 1 / top-k off row.
fn tour(rng: &mut Rng, v: usize, full_row: bool) -> (Vec<f32>, Vec<Request>) {
    let mut logits = Vec::new();
    let mut reqs = Vec::new();
    let rows = |rng: &mut Rng, n: usize, logits: &mut Vec<f32>| -> Vec<Vec<f32>> {
        (0..n)
            .map(|_| {
                let r = row(rng, v);
                logits.extend_from_slice(&r);
                r
            })
            .collect()
    };
    // Prefill of a 41-token prompt.
    rows(rng, 1, &mut logits);
    reqs.push(Request::prefill(params(1), 41));
    // Decode verifying 5 drafts (argmax drafts and a random one), seqlen_q 6.
    let rs = rows(rng, 6, &mut logits);
    let (mut drafts, mut dists) = (Vec::new(), Vec::new());
    for (j, r) in rs.iter().take(5).enumerate() {
        let (best, d) = draft_dist(r);
        drafts.push(if j == 3 { rng.below(v) as i32 } else { best });
        dists.push(d);
    }
    reqs.push(Request::decode(
        SamplingParams { temperature: 1.0, top_p: 0.95, top_k: -1, ..params(2) },
        55,
        6,
        drafts,
        dists,
    ));
    // Decode with golden tokens, seqlen_q 4.
    let rs = rows(rng, 4, &mut logits);
    let (drafts, dists): (Vec<i32>, Vec<DraftDist>) = rs.iter().take(3).map(|r| draft_dist(r)).unzip();
    let mut d = Request::decode(params(3), 80, 4, drafts.clone(), dists);
    d.golden = vec![drafts[0], -1, 17, 5];
    reqs.push(d);
    // Draft-model rows.
    rows(rng, 3, &mut logits);
    reqs.push(Request {
        params: params(4),
        kind: RequestKind::Draft { seqlen_k: 60, seqlen_q: 2, last_valid_offset: 1, rows: 3 },
        golden: Vec::new(),
        masks: None,
    });
    // Prompt logprobs of 8 positions (one without a target).
    rows(rng, 8, &mut logits);
    let targets = (0..8).map(|i| if i == 7 { -1 } else { rng.below(v) as i32 }).collect();
    reqs.push(Request {
        params: SamplingParams { prompt_logprobs: true, ..params(5) },
        kind: RequestKind::PromptLogprobs { targets },
        golden: Vec::new(),
        masks: None,
    });
    // Grammar masks (bits set past V too: ignored).
    rows(rng, 2, &mut logits);
    let (best, dist) = draft_dist(&logits[logits.len() - 2 * v..logits.len() - v]);
    let mut m = Request::decode(params(6), 90, 2, vec![best], vec![dist]);
    let words = v.div_ceil(32);
    m.masks = Some((0..2).map(|_| (0..words).map(|_| rng.u64() as u32 | rng.u64() as u32).collect()).collect());
    reqs.push(m);
    // A NaN logit: fails only its request.
    let bad = rows(rng, 1, &mut logits);
    let at = logits.len() - v + rng.below(bad[0].len());
    logits[at] = f32::NAN;
    reqs.push(Request::prefill(params(7), 12));
    // A bad parameter.
    rows(rng, 1, &mut logits);
    reqs.push(Request::prefill(SamplingParams { temperature: -1.0, ..params(8) }, 12));
    if full_row {
        rows(rng, 1, &mut logits);
        reqs.push(Request::prefill(SamplingParams { temperature: 1.0, top_p: 1.0, top_k: -1, ..params(9) }, 20));
    }
    (logits, reqs)
}

/// Output as bits (statuses by text; `loose`: any error the same).
fn bits(o: &StepOutput, loose: bool) -> Vec<String> {
    let b = |x: f32| x.to_bits();
    let mut v = vec![format!("k={}", o.top_logprobs_width)];
    for r in &o.rows {
        let top: Vec<(i32, u32)> = r.top_logprobs.iter().map(|&(i, x)| (i, b(x))).collect();
        v.push(format!("{} {} {:?} {}", r.token, b(r.logprob), top, b(r.sum_smaller_probs)));
    }
    for q in &o.requests {
        let st = if loose { format!("{}", q.status.is_ok()) } else { format!("{:?}", q.status) };
        let e: Vec<u32> = q.emitted_logprobs.iter().map(|&x| b(x)).collect();
        let p: Vec<u32> = q.prompt_logprobs.iter().map(|&x| b(x)).collect();
        v.push(format!("{st} {} {:?} {e:?} {p:?}", q.accepted, q.emitted));
    }
    v
}

fn uneven(v: u32, tp: usize) -> ShardLayout {
    let mut b: Vec<u32> = (0..=tp)
        .map(|r| ((v as u64 * r as u64) / tp as u64) as u32 + if r % 2 == 1 && r < tp { 17 } else { 0 })
        .collect();
    b[tp] = v + 64;
    ShardLayout::Ranges((0..tp).rev().map(|r| (b[r], b[r + 1])).collect())
}

fn median(xs: &[f64]) -> f64 {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

struct Args {
    tp: usize,
    rows: Vec<usize>,
    reps: usize,
    vocab: u32,
    golden: Option<String>,
    collective: String,
    check: bool,
    table: bool,
    first_round: u32,
}

fn args() -> Args {
    let mut a = Args {
        tp: 2,
        rows: vec![1, 64, 384],
        reps: 5,
        vocab: 129280,
        golden: None,
        collective: "auto".into(),
        check: true,
        table: true,
        first_round: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--tp" => a.tp = val().parse().expect("--tp"),
            "--rows" => a.rows = val().split(',').map(|x| x.parse().expect("--rows")).collect(),
            "--reps" => a.reps = val().parse().expect("--reps"),
            "--vocab" => a.vocab = val().parse().expect("--vocab"),
            "--golden" => a.golden = Some(val()),
            "--collective" => a.collective = val(),
            "--skip-check" => a.check = false,
            "--skip-table" => a.table = false,
            "--first-round" => a.first_round = val().parse().expect("--first-round"),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn main() {
    let a = args();
    let group = match Group::start(a.tp, &a.collective) {
        Ok(g) => g,
        Err(e) => {
            println!("vocab_parallel: FAILED to start the group: {e}");
            std::process::exit(1);
        }
    };
    let v = a.vocab;
    let reference = |ft: u32, logits: &[f32], reqs: &[Request]| {
        let cfg = SamplerConfig { vocab_size: v, force_topk: ft, nextn: 8, backend: BackendKind::Auto };
        let mut s = Sampler::new(cfg).expect("single-device sampler");
        (s.sample(logits, reqs).expect("single-device step"), s.backend_name())
    };
    println!("vocab_parallel: TP = {}, {}, V = {v}", a.tp, group.what);
    let mut failures = 0usize;
    let mut checks = 0usize;
    let check = |name: &str, vocab: u32, ft: u32, logits: Vec<f32>, reqs: Vec<Request>, failures: &mut usize| {
        let (want, backend) = {
            let cfg = SamplerConfig { vocab_size: vocab, force_topk: ft, nextn: 8, backend: BackendKind::Auto };
            let mut s = Sampler::new(cfg).expect("single-device sampler");
            (s.sample(&logits, &reqs).expect("single-device step"), s.backend_name())
        };
        let (logits, reqs) = (Arc::new(logits), Arc::new(reqs));
        let mut lines = Vec::new();
        for (layout, lname) in [(ShardLayout::Equal { tp: a.tp }, "equal"), (uneven(vocab, a.tp), "ranges")] {
            for (finish, masks) in [(FinishOn::AllRanks, MaskLayout::Global), (FinishOn::Driver, MaskLayout::Shard)] {
                let cfg = VocabParallelConfig {
                    vocab_size: vocab,
                    force_topk: ft,
                    nextn: 8,
                    layout: layout.clone(),
                    finish,
                    masks,
                    first_round: a.first_round,
                };
                let got = group.run(Job::Vp { cfg, logits: logits.clone(), reqs: reqs.clone(), reps: 0 });
                let ok = match &got {
                    Err(e) => {
                        lines.push(format!("{lname}/{finish:?}/{masks:?}: error {e}"));
                        false
                    }
                    Ok(reps) => {
                        reps.iter().enumerate().all(|(r, rep)| match (&rep.out, finish == FinishOn::Driver && r > 0) {
                            (Some(o), true) => o.rows.is_empty(),
                            (Some(o), false) => {
                                bits(o, masks == MaskLayout::Shard) == bits(&want, masks == MaskLayout::Shard)
                            }
                            (None, _) => false,
                        })
                    }
                };
                let stats = got.as_ref().ok().and_then(|r| r.first()).map(|r| r.stats.clone()).unwrap_or_default();
                lines.push(format!(
                    "{lname}/{finish:?}/{masks:?} {} (gathered {} B{})",
                    if ok { "ok" } else { "FAIL" },
                    stats.gathered_bytes,
                    if stats.full_rows { ", full rows" } else { "" }
                ));
                if !ok {
                    *failures += 1;
                }
            }
        }
        println!(
            "  {name} (N={}, vs single-device {backend}): {}",
            if ft == 0 || ft >= vocab { "off".to_string() } else { ft.to_string() },
            lines.join("; ")
        );
    };
    if a.check {
        println!("== bitwise check against the single-device sampler on the gathered logits");
        let mut rng = Rng(0x15_15_15_15);
        for ft in [1024u32, 4096, 0] {
            for full in [false, true] {
                let (logits, reqs) = tour(&mut rng, v as usize, full);
                let name = if full { "tour + top-p 1 row" } else { "tour" };
                check(name, v, ft, logits, reqs, &mut failures);
                checks += 1;
            }
        }
        if let Some(dir) = &a.golden {
            let files = sampler_host::conformance::case::golden_files(std::path::Path::new(dir));
            for f in &files {
                let text = std::fs::read_to_string(f).expect("golden file");
                let Ok(case) = sampler_host::conformance::case::parse_case(&text) else { continue };
                let (reqs, logits) = case.well_formed();
                if reqs.is_empty() {
                    continue;
                }
                let name = f.file_name().unwrap().to_string_lossy().into_owned();
                check(&name, case.vocab_size, case.force_topk, logits, reqs, &mut failures);
                checks += 1;
            }
        }
        println!("bitwise check: {checks} batches x 4 configurations, {failures} failing");
    }
    if a.table {
        println!(
            "== bytes gathered per rank and step time (rank 0, median of {} after 1 warm-up), TP = {}",
            a.reps, a.tp
        );
        println!("| R | N | vp bytes | gather bytes | ratio | vp step ms | vp exch ms | gather+sample ms | gather exch ms | dev exch vp ms | dev exch gather ms | bitwise |");
        println!("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|");
        let mut rng = Rng(0xBE_EF);
        for ft in [1024u32, 4096, 0] {
            for &r in &a.rows {
                let mut logits = Vec::with_capacity(r * v as usize);
                let reqs: Vec<Request> =
                    (0..r).map(|i| Request::prefill(params(100 + i as u64), 41 + i as u64)).collect();
                for _ in 0..r {
                    logits.extend(row(&mut rng, v as usize));
                }
                let (want, _) = reference(ft, &logits, &reqs);
                let (logits, reqs) = (Arc::new(logits), Arc::new(reqs));
                let cfg = VocabParallelConfig {
                    vocab_size: v,
                    force_topk: ft,
                    nextn: 8,
                    layout: ShardLayout::Equal { tp: a.tp },
                    finish: FinishOn::AllRanks,
                    masks: MaskLayout::Global,
                    first_round: a.first_round,
                };
                let vp = group.run(Job::Vp { cfg, logits: logits.clone(), reqs: reqs.clone(), reps: a.reps });
                let ga = group.run(Job::Gather { vocab: v, force_topk: ft, logits, reqs, reps: a.reps });
                let (vp, ga) = match (vp, ga) {
                    (Ok(x), Ok(y)) => (x, y),
                    (x, y) => {
                        println!("| {r} | {ft} | error: {:?} {:?} |", x.err(), y.err());
                        failures += 1;
                        continue;
                    }
                };
                // The same payload sizes as device-resident NCCL all-gathers (largest rank's share).
                let dev = |bytes: u64| -> String {
                    match group
                        .run(Job::DeviceGather { count: (bytes / 4).div_ceil(a.tp as u64) as usize, reps: a.reps })
                    {
                        Ok(r) if !r[0].step_s.is_empty() => format!("{:.3}", r[0].step_s[0] * 1e3),
                        Ok(_) => "-".into(),
                        Err(e) => format!("error {e}"),
                    }
                };
                let (dev_vp, dev_ga) = (dev(vp[0].bytes), dev(ga[0].bytes));
                let same = vp[0].out.as_ref().map(|o| bits(o, false)) == Some(bits(&want, false))
                    && ga[0].out.as_ref().map(|o| bits(o, false)) == Some(bits(&want, false));
                failures += usize::from(!same);
                let ms = |x: f64| x * 1e3;
                println!(
                    "| {r} | {} | {} | {} | {:.1}x | {:.2} | {:.2} | {:.2} | {:.2} | {dev_vp} | {dev_ga} | {}{} |",
                    if ft == 0 { "off".into() } else { ft.to_string() },
                    vp[0].bytes,
                    ga[0].bytes,
                    ga[0].bytes as f64 / vp[0].bytes.max(1) as f64,
                    ms(median(&vp[0].step_s)),
                    ms(median(&vp[0].exch_s)),
                    ms(median(&ga[0].step_s)),
                    ms(median(&ga[0].exch_s)),
                    if same { "equal" } else { "DIFFERENT" },
                    if vp[0].stats.full_rows { " (full rows)" } else { "" },
                );
            }
        }
    }
    println!("vocab_parallel: {}", if failures == 0 { "OK" } else { "FAILED" });
    std::process::exit(if failures == 0 { 0 } else { 1 });
}
