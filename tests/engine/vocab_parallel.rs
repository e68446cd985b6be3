//! Vocabulary-parallel sampling (`sampler_host::dist::vocab`, issue 15) with threads
//! standing in for ranks (`LocalCollective`): every layout (equal shards with
//! a padded tail, explicit uneven ranges in any rank order, empty shards) for
//! TP = 2, 4 and 8, bitwise against the single-rank `Sampler` on the gathered
//! logits, on the golden cases and on random batches of every row kind
//! (sample, draft, verify with remap, prompt logprobs, grammar masks global
//! or per shard, bad rows). Padding columns hold NaN: reading one would fail
//! its row, so equality also proves they are never read.

use crate::common;

use common::gen::{random_step, GenOpts, Rng, Step};
use sampler_host::dist::collective::LocalCollective;
use sampler_host::dist::vocab::{
    shard_mask, shard_of, ExchangeStats, FinishOn, MaskLayout, Shard, ShardLayout, VocabParallelConfig,
    VocabParallelSampler,
};
use sampler_host::{BackendKind, Request, Sampler, SamplerConfig, SamplingParams, StepOutput};

const NEXTN: u32 = 8;

/// A step output as bits (f32 by bit pattern; statuses by their text).
fn bits(o: &StepOutput) -> Vec<String> {
    let b = |x: f32| x.to_bits();
    let mut v = vec![format!("k={}", o.top_logprobs_width)];
    for r in &o.rows {
        let top: Vec<(i32, u32)> = r.top_logprobs.iter().map(|&(i, x)| (i, b(x))).collect();
        v.push(format!("row {} {} {:?} {}", r.token, b(r.logprob), top, b(r.sum_smaller_probs)));
    }
    for q in &o.requests {
        let e: Vec<u32> = q.emitted_logprobs.iter().map(|&x| b(x)).collect();
        let p: Vec<u32> = q.prompt_logprobs.iter().map(|&x| b(x)).collect();
        v.push(format!("req {:?} {} {:?} {:?} {:?}", q.status, q.accepted, q.emitted, e, p));
    }
    v
}

/// The same with request errors reduced to "failed" (shard masks name a rank).
fn bits_loose(o: &StepOutput) -> Vec<String> {
    let mut o = o.clone();
    for q in &mut o.requests {
        if q.status.is_err() {
            q.status = Err(sampler_host::RequestError::Field { field: "any", msg: String::new() });
        }
    }
    bits(&o)
}

fn single(step: &Step, rows_proc: &[usize]) -> (StepOutput, sampler_host::sampler::ProcessedRows) {
    let cfg = SamplerConfig {
        vocab_size: step.vocab as u32,
        force_topk: step.force_topk as u32,
        nextn: NEXTN,
        backend: BackendKind::Cpu,
    };
    Sampler::new(cfg).unwrap().sample_with_processed(&step.logits, &step.requests, rows_proc).unwrap()
}

/// A request's masks cut for one shard (a wrong count or length stays wrong).
fn shard_requests(reqs: &[Request], vocab: usize, s: Shard) -> Vec<Request> {
    let words = vocab.div_ceil(32);
    reqs.iter()
        .map(|r| {
            let masks = r.masks.as_ref().map(|ms| {
                ms.iter()
                    .map(|m| {
                        let mut cut = shard_mask(m, s);
                        if m.len() != words {
                            cut.push(u32::MAX); // malformed globally: malformed here too
                        }
                        cut
                    })
                    .collect()
            });
            Request { masks, ..r.clone() }
        })
        .collect()
}

/// Runs the step on `world` threads; returns each rank's output, processed rows and stats.
fn run_tp(
    step: &Step,
    layout: &ShardLayout,
    finish: FinishOn,
    masks: MaskLayout,
    rows_proc: &[usize],
    first_round: u32,
) -> Vec<(StepOutput, sampler_host::sampler::ProcessedRows, ExchangeStats)> {
    let v = step.vocab as u32;
    let shards = layout.shards(v).unwrap();
    let colls = LocalCollective::group(shards.len());
    std::thread::scope(|sc| {
        let hs: Vec<_> = colls
            .into_iter()
            .zip(&shards)
            .map(|(c, &s)| {
                let cfg = VocabParallelConfig {
                    vocab_size: v,
                    force_topk: step.force_topk as u32,
                    nextn: NEXTN,
                    layout: layout.clone(),
                    finish,
                    masks,
                    first_round,
                };
                sc.spawn(move || {
                    let mut vp = VocabParallelSampler::new(cfg, c).unwrap();
                    let logits = shard_of(&step.logits, v, s, f32::NAN);
                    let reqs = match masks {
                        MaskLayout::Global => step.requests.clone(),
                        MaskLayout::Shard => shard_requests(&step.requests, step.vocab, s),
                    };
                    let (out, proc_rows) = vp.sample_with_processed(&logits, &reqs, rows_proc).unwrap();
                    (out, proc_rows, vp.last_stats().clone())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Random uneven contiguous ranges for `tp` ranks covering V plus `pad`
/// columns, some possibly empty, handed to the ranks in a shuffled order.
fn random_ranges(rng: &mut Rng, v: u32, tp: usize, pad: u32) -> ShardLayout {
    let total = v + pad;
    let mut cuts: Vec<u32> = (0..tp - 1).map(|_| rng.range(0, total as u64 + 1) as u32).collect();
    cuts.push(0);
    cuts.push(total);
    cuts.sort();
    let mut ranges: Vec<(u32, u32)> = cuts.windows(2).map(|w| (w[0], w[1])).collect();
    for i in (1..ranges.len()).rev() {
        let j = rng.below(i + 1);
        ranges.swap(i, j);
    }
    ShardLayout::Ranges(ranges)
}

/// Checks one step on one layout: every finishing rank equals single-rank bitwise.
fn check(
    step: &Step,
    layout: &ShardLayout,
    finish: FinishOn,
    masks: MaskLayout,
    rows_proc: &[usize],
    first_round: u32,
    what: &str,
) -> ExchangeStats {
    let (want, want_proc) = single(step, rows_proc);
    let got = run_tp(step, layout, finish, masks, rows_proc, first_round);
    let cmp = |o: &StepOutput| if masks == MaskLayout::Shard { bits_loose(o) } else { bits(o) };
    for (rank, (out, proc_rows, _)) in got.iter().enumerate() {
        if finish == FinishOn::Driver && rank > 0 {
            assert!(out.rows.is_empty() && out.requests.is_empty(), "{what}: follower {rank} returned an output");
            continue;
        }
        let (w, g) = (cmp(&want), cmp(out));
        if w != g {
            let first = w.iter().zip(&g).position(|(a, b)| a != b).unwrap_or(0);
            panic!("{what} ({layout:?}, {finish:?}, {masks:?}, first round {first_round}) rank {rank}: differs at line {first}:\n want {:?}\n  got {:?}", w.get(first), g.get(first));
        }
        let pb = |p: &sampler_host::sampler::ProcessedRows| {
            (p.n, p.ids.clone(), p.logprobs.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
        };
        assert_eq!(pb(&want_proc), pb(proc_rows), "{what}: processed rows differ on rank {rank}");
    }
    got[0].2.clone()
}

fn layouts(rng: &mut Rng, v: u32) -> Vec<ShardLayout> {
    let mut out = Vec::new();
    for tp in [2usize, 4, 8] {
        out.push(ShardLayout::Equal { tp });
        let pad = if rng.chance(0.5) { rng.range(0, 40) as u32 } else { 0 };
        out.push(random_ranges(rng, v, tp, pad));
    }
    out
}

#[test]
fn golden_cases_bitwise_on_every_layout() {
    let dir = std::path::Path::new(sampler_host::conformance::case::GOLDEN_DIR);
    let files = sampler_host::conformance::case::golden_files(dir);
    assert!(files.len() >= 50, "expected the golden cases at {}, found {}", dir.display(), files.len());
    let mut rng = Rng::new(15);
    let mut run = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let Ok(case) = sampler_host::conformance::case::parse_case(&text) else { continue };
        let mut requests = Vec::new();
        let mut logits = Vec::new();
        for (req, l) in case.requests.iter().flatten() {
            requests.push(req.clone());
            logits.extend_from_slice(l);
        }
        if requests.is_empty() {
            continue;
        }
        let step = Step { vocab: case.vocab_size as usize, force_topk: case.force_topk as usize, logits, requests };
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        for (i, layout) in layouts(&mut rng, case.vocab_size).into_iter().enumerate() {
            check(&step, &layout, FinishOn::AllRanks, MaskLayout::Global, &[], (i % 2) as u32 * 2, &name);
        }
        check(&step, &ShardLayout::Equal { tp: 4 }, FinishOn::Driver, MaskLayout::Shard, &[], 1, &name);
        run += 1;
    }
    eprintln!("vocab-parallel: {run} golden cases on 6 layouts each");
    assert!(run >= 50, "expected at least 50 golden cases, ran {run}");
}

#[test]
fn random_batches_bitwise_on_every_layout() {
    let mut rng = Rng::new(1515);
    for rep in 0..24u64 {
        let v = rng.pick(&[7usize, 33, 64, 100, 257, 600]);
        let ft = rng.pick(&[0usize, 0, 1, 5, 16, 40, 64, 1000]);
        let step = random_step(&mut rng, v, ft, 5, GenOpts { p_error: 0.15, ..Default::default() });
        let masks = if rep % 3 == 0 { MaskLayout::Shard } else { MaskLayout::Global };
        let finish = if rep % 2 == 0 { FinishOn::AllRanks } else { FinishOn::Driver };
        let rows: usize = step.requests.iter().map(|r| r.rows()).sum();
        let proc_rows: Vec<usize> = if rep % 4 == 1 && rows > 0 { vec![rows - 1, 0] } else { Vec::new() };
        for (i, layout) in layouts(&mut rng, v as u32).into_iter().enumerate() {
            let first_round = [0, 1, 2][(i + rep as usize) % 3];
            check(&step, &layout, finish, masks, &proc_rows, first_round, &format!("rep {rep} V={v} force_topk={ft}"));
        }
    }
}

/// Force top-k off with every row filtering (the prefix path): wide vocabularies,
/// top-p only rows that overflow the prefix (wider prefix, then full rows).
#[test]
fn prefix_path_and_its_fallbacks() {
    let mut rng = Rng::new(4242);
    let (mut prefix_only, mut wider, mut full) = (0, 0, 0);
    for rep in 0..16u64 {
        let v = rng.pick(&[3000usize, 20000]);
        let mut step = random_step(&mut rng, v, 0, 4, GenOpts { p_error: 0.1, ..Default::default() });
        let style = rep % 3;
        for r in &mut step.requests {
            let p = &mut r.params;
            if p.temperature.is_nan() || p.temperature < 0.0 {
                continue;
            }
            p.temperature = rng.pick(&[0.05f32, 0.7, 1.0, 1.5]);
            match style {
                0 => p.top_k = rng.pick(&[1i64, 5, 50, 200]),
                1 => {
                    p.top_k = -1;
                    p.top_p = rng.pick(&[0.05f32, 0.5, 0.9]);
                }
                _ => {
                    // Flat rows keep most tokens: overflow on purpose.
                    p.top_k = -1;
                    p.top_p = rng.pick(&[0.3f32, 0.99]);
                    p.temperature = 5.0;
                }
            }
        }
        let tp = rng.pick(&[2usize, 4, 8]);
        let layout = if rep % 2 == 0 { ShardLayout::Equal { tp } } else { random_ranges(&mut rng, v as u32, tp, 13) };
        let finish = if rep % 4 < 2 { FinishOn::AllRanks } else { FinishOn::Driver };
        let stats = check(
            &step,
            &layout,
            finish,
            MaskLayout::Global,
            &[],
            (rep % 3 == 0) as u32 * 2,
            &format!("prefix rep {rep} V={v}"),
        );
        match (stats.full_rows, stats.prefix_width) {
            (true, _) => full += 1,
            (false, w) if w > 1024 => wider += 1,
            _ => prefix_only += 1,
        }
    }
    eprintln!("prefix path: {prefix_only} steps on the first prefix, {wider} on a wider one, {full} on full rows");
    assert!(prefix_only > 0 && full > 0 && wider > 0, "every path must be exercised: {prefix_only} {wider} {full}");
}

/// Force top-k on exchanges only the shards' top-N (+ statuses), never the rows.
#[test]
fn force_topk_exchanges_candidates_only() {
    let mut rng = Rng::new(77);
    let (v, n) = (4096usize, 64usize);
    let mut step = random_step(&mut rng, v, n, 3, GenOpts { p_error: 0.0, p_tree: 0.0 });
    // Raw logprobs gather the full rows (section 10.3): this test is about candidates.
    step.requests.iter_mut().for_each(|r| r.params.logprobs_mode = sampler_host::LogprobsMode::Processed);
    let rows: usize = step.requests.iter().map(|r| r.rows()).sum();
    for tp in [2usize, 4, 8] {
        let stats =
            check(&step, &ShardLayout::Equal { tp }, FinishOn::AllRanks, MaskLayout::Global, &[], 0, "exchange");
        assert_eq!(stats.collectives, 1);
        assert!(!stats.full_rows);
        assert_eq!(stats.gathered_bytes, (tp * rows * (1 + 2 * n)) as u64 * 4, "TP={tp}");
    }
}

#[test]
fn bad_layouts_and_shapes_are_typed_errors() {
    let cfg = |layout| VocabParallelConfig {
        vocab_size: 100,
        force_topk: 0,
        nextn: 5,
        layout,
        finish: FinishOn::AllRanks,
        masks: MaskLayout::Global,
        first_round: 0,
    };
    let c = LocalCollective::group(2).pop().unwrap();
    let e = VocabParallelSampler::new(cfg(ShardLayout::Equal { tp: 3 }), c).unwrap_err();
    assert!(matches!(e, sampler_host::ConfigError::Field { field: "layout", .. }), "{e}");
    let mut g = LocalCollective::group(1);
    let mut vp = VocabParallelSampler::new(cfg(ShardLayout::Equal { tp: 1 }), g.pop().unwrap()).unwrap();
    let req = Request::prefill(Default::default(), 3);
    let e = vp.sample(&[0.0; 99], &[req]).unwrap_err();
    assert!(e.to_string().contains("expected"), "{e}");
}

/// Force top-k off with some requests keeping every token (top-p 1, top-k
/// off, the default parameters of many engines) beside filtering ones: only
/// the former gather their full rows; outputs still equal single-rank bitwise.
#[test]
fn mixed_batches_gather_full_rows_only_where_needed() {
    let mut rng = Rng::new(9191);
    let mut split = 0;
    for rep in 0..8u64 {
        let v = 5000usize;
        let mut step = random_step(&mut rng, v, 0, 6, GenOpts { p_error: 0.1, p_tree: 0.0 });
        for (i, r) in step.requests.iter_mut().enumerate() {
            let p = &mut r.params;
            if p.temperature.is_nan() || p.temperature < 0.0 {
                continue;
            }
            p.temperature = rng.pick(&[0.3f32, 0.7, 1.0]);
            p.logprobs_mode = sampler_host::LogprobsMode::Processed;
            if i % 2 == 0 {
                (p.top_p, p.top_k) = (1.0, -1);
            } else {
                p.top_k = rng.pick(&[1i64, 20, 50]);
            }
        }
        let rows: usize = step.requests.iter().map(|r| r.rows()).sum();
        let full_rows: usize = step.requests.iter().step_by(2).map(|r| r.rows()).sum();
        let tp = [2usize, 4, 8][rep as usize % 3];
        let finish = if rep % 2 == 0 { FinishOn::AllRanks } else { FinishOn::Driver };
        let masks = if rep % 4 == 3 { MaskLayout::Shard } else { MaskLayout::Global };
        let stats = check(
            &step,
            &ShardLayout::Equal { tp },
            finish,
            masks,
            &[],
            (rep % 2) as u32 * 2,
            &format!("mixed rep {rep}"),
        );
        if step.requests.len() > 1 && full_rows < rows {
            // The filtering requests' rows never travel whole.
            assert!(
                stats.gathered_bytes < (rows * v * 4) as u64,
                "rep {rep}: gathered {} bytes for {rows} rows",
                stats.gathered_bytes
            );
            split += 1;
        }
    }
    assert!(split > 0);
}

/// The two-round exchange: a spread-out top N needs one short round (fewer
/// bytes); a top N clustered in one shard needs the second, full round;
/// both stay bitwise equal to single-rank.
#[test]
fn two_round_exchange_is_exact_and_smaller_when_spread() {
    let mut rng = Rng::new(2024);
    let (v, n, tp) = (8192usize, 256usize, 8usize);
    let reqs = |rng: &mut Rng, rows: usize| -> Vec<Request> {
        (0..rows)
            .map(|i| {
                Request::prefill(
                    SamplingParams {
                        temperature: 0.8,
                        top_p: 0.9,
                        top_logprobs: 3,
                        seq_seed: Some(rng.next_u64()),
                        ..Default::default()
                    },
                    10 + i as u64,
                )
            })
            .collect()
    };
    // Spread: i.i.d. normal logits.
    let rows = 6;
    let logits: Vec<f32> = (0..rows * v).map(|_| rng.normal() as f32).collect();
    let spread = Step { vocab: v, force_topk: n, logits, requests: reqs(&mut rng, rows) };
    let one =
        check(&spread, &ShardLayout::Equal { tp }, FinishOn::AllRanks, MaskLayout::Global, &[], 0, "spread, one round");
    let two = check(
        &spread,
        &ShardLayout::Equal { tp },
        FinishOn::AllRanks,
        MaskLayout::Global,
        &[],
        2,
        "spread, two rounds",
    );
    assert_eq!((one.collectives, two.collectives), (1, 1), "a spread top N needs no second round");
    assert!(two.gathered_bytes * 3 < one.gathered_bytes, "{} vs {}", two.gathered_bytes, one.gathered_bytes);
    // Clustered: the best logits all in the first shard (low ids, as frequent tokens often are).
    let logits: Vec<f32> =
        (0..rows * v).map(|i| if i % v < n { 5.0 + rng.normal() as f32 } else { rng.normal() as f32 }).collect();
    let clustered = Step { vocab: v, force_topk: n, logits, requests: reqs(&mut rng, rows) };
    let two = check(
        &clustered,
        &ShardLayout::Equal { tp },
        FinishOn::Driver,
        MaskLayout::Global,
        &[],
        2,
        "clustered, two rounds",
    );
    assert_eq!(two.collectives, 2, "a clustered top N needs the second round");
}
