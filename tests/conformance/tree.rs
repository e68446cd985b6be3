//! Tree verification (SAMPLER.md section 11) on the CPU backend:
//! - the worked example of 11.11 (with and without replacement, fixed, chain);
//! - every chain-shaped tree equals the same request as `verify`, bit for bit (11.8);
//! - a malformed tree fails only its own request (11.10);
//! - random trees against the f64 reference (`tests/common/reference.rs`).

use crate::common;

use common::gen::{random_row, random_tree, Rng};
use common::reference::{compare, reference_step};
use sampler_host::{BackendKind, DraftDist, DraftTree, Request, RequestKind, Sampler, SamplerConfig, SamplingParams};

fn sampler(vocab: u32, force_topk: u32, nextn: u32) -> Sampler {
    Sampler::new(SamplerConfig { vocab_size: vocab, force_topk, nextn, backend: BackendKind::Cpu }).unwrap()
}

fn dist(q: &[f64]) -> DraftDist {
    let ids = (0..q.len()).filter(|&t| q[t] > 0.0).collect::<Vec<_>>();
    DraftDist {
        ids: ids.iter().map(|&t| t as i32).collect(),
        logprobs: ids.iter().map(|&t| q[t].ln() as f32).collect(),
    }
}

/// 11.11: seq_seed 1, sample_position 50, V = 4, no filters.
#[test]
fn worked_example() {
    let p = [[0.10f64, 0.50, 0.30, 0.10], [0.25, 0.25, 0.25, 0.25], [0.05, 0.15, 0.20, 0.60], [0.40, 0.30, 0.20, 0.10]];
    let logits: Vec<f32> = p.iter().flat_map(|r| r.iter().map(|x| x.ln() as f32)).collect();
    let (q0, q2) = (dist(&[0.60, 0.20, 0.10, 0.10]), dist(&[0.10, 0.10, 0.10, 0.70]));
    let params = SamplingParams { temperature: 1.0, top_p: 1.0, top_k: -1, seq_seed: Some(1), ..Default::default() };
    // M = 4 nodes: sample_position = seqlen_k - 4 + 1 = 50.
    let tree = |dists: Option<Vec<DraftDist>>, wr: bool| DraftTree {
        parent: vec![-1, 0, 0, 2],
        tokens: vec![0, 1, 3],
        draft_dists: dists,
        without_replacement: wr,
    };
    let mut s = sampler(4, 0, 5);
    for wr in [false, true] {
        let req = Request::tree(params.clone(), 53, tree(Some(vec![q0.clone(), q2.clone()]), wr));
        let out = s.sample(&logits, &[req]).unwrap();
        let o = &out.requests[0];
        assert_eq!(o.status, Ok(()));
        assert_eq!(
            (o.accepted, o.path.clone(), o.emitted.clone()),
            (2, Some(vec![0, 2, 3]), vec![1, 3, 3]),
            "without_replacement = {wr}"
        );
        let toks: Vec<i32> = out.rows.iter().map(|r| r.token).collect();
        assert_eq!(toks, [1, -1, 3, 3], "row 1 reports -1");
    }
    let out = s.sample(&logits, &[Request::tree(params.clone(), 53, tree(None, false))]).unwrap();
    let o = &out.requests[0];
    assert_eq!((o.accepted, o.path.clone(), o.emitted.clone()), (0, Some(vec![0]), vec![2]));
    assert_eq!(out.rows.iter().map(|r| r.token).collect::<Vec<_>>(), [2, -1, -1, -1]);
    // As a chain (root -> A): section 6, token 1; sample_position 50 = 51 - 2 + 1.
    let chain = DraftTree::chain(vec![0], Some(vec![q0.clone()]));
    let out = s.sample(&logits[..8], &[Request::tree(params.clone(), 51, chain)]).unwrap();
    assert_eq!((out.requests[0].accepted, out.requests[0].emitted.clone()), (0, vec![1]));
    let v = s.sample(&logits[..8], &[Request::decode(params, 51, 2, vec![0], vec![q0])]).unwrap();
    assert_eq!(v.requests[0].emitted, vec![1]);
}

/// Section 11.8: a chain-shaped tree is section 6. For random chains (with
/// and without draft distributions, placeholders, golden tokens, masks,
/// force top-k on and off) the tree request and the same request as
/// `verify` give bitwise the same rows and the same accepted / emitted.
#[test]
fn every_chain_equals_verify_bitwise() {
    let mut compared = [0usize; 3];
    for seed in 0..400u64 {
        let mut rng = Rng::new(seed ^ 0x7733);
        let v = 2 + rng.below(200);
        let force = if rng.chance(0.4) { 1 + rng.below(v - 1) } else { 0 };
        let n = if force == 0 { v } else { force };
        let nreq = 1 + rng.below(4);
        let mut logits = Vec::new();
        let (mut trees, mut verifies) = (Vec::new(), Vec::new());
        for _ in 0..nreq {
            let m = 1 + rng.below(8);
            let rows: Vec<Vec<f32>> = (0..m).map(|_| random_row(&mut rng, v)).collect();
            let mode = rng.below(3);
            let mut t = random_tree(&mut rng, v, m, &|j| rows[j].clone());
            // Make it a chain with this proposal law (random_tree may pick another shape).
            t = DraftTree::chain(t.tokens, None);
            let dists: Vec<DraftDist> = (0..m.saturating_sub(1))
                .map(|j| {
                    let d = t.tokens[j];
                    if mode == 0 {
                        // Fixed: q one-hot at the draft (nothing for a placeholder).
                        if d >= 0 {
                            DraftDist { ids: vec![d], logprobs: vec![0.0] }
                        } else {
                            DraftDist::default()
                        }
                    } else {
                        let q: Vec<f64> =
                            (0..v).map(|_| if rng.chance(0.7) { rng.f64() + 0.01 } else { 0.0 }).collect();
                        let s: f64 = q.iter().sum::<f64>().max(1e-9);
                        let ids: Vec<usize> = (0..v).filter(|&x| q[x] > 0.0).collect();
                        DraftDist {
                            ids: ids.iter().map(|&x| x as i32).collect(),
                            logprobs: ids.iter().map(|&x| ((q[x] / s).ln() as f32).min(0.0)).collect(),
                        }
                    }
                })
                .collect();
            if mode > 0 {
                t.draft_dists = Some(dists.clone());
                t.without_replacement = mode == 2;
            }
            let temperature = rng.pick(&[0.0f32, 0.5, 1.0, 1.5]);
            let top_p = rng.pick(&[1.0f32, 0.9, 0.5]);
            let top_k = rng.pick(&[-1i64, 1, 3, 50]);
            let params = SamplingParams {
                temperature,
                top_p,
                top_k,
                top_logprobs: rng.below(n.min(4) + 1) as u32,
                seq_seed: Some(rng.next_u64()),
                ..Default::default()
            };
            let seqlen_k = rng.range(m as u64, 1 << 40);
            let golden: Vec<i32> = if rng.chance(0.25) {
                (0..m)
                    .map(|j| {
                        if rng.chance(0.5) {
                            -1
                        } else if j + 1 < m && rng.chance(0.5) {
                            t.tokens[j]
                        } else {
                            rng.below(v) as i32
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let masks = rng.chance(0.2).then(|| {
                (0..m)
                    .map(|_| {
                        let mut w = vec![0u32; v.div_ceil(32)];
                        for x in 0..v {
                            if x == 0 || rng.chance(0.7) {
                                w[x / 32] |= 1 << (x % 32);
                            }
                        }
                        w
                    })
                    .collect::<Vec<_>>()
            });
            let drafts = t.tokens.clone();
            trees.push(Request {
                params: params.clone(),
                kind: RequestKind::Tree { seqlen_k, tree: t },
                golden: golden.clone(),
                masks: masks.clone(),
            });
            verifies.push(Request {
                params,
                kind: RequestKind::Decode { seqlen_k, seqlen_q: m as u64, drafts, draft_dists: dists },
                golden,
                masks,
            });
            compared[mode] += 1;
            logits.extend(rows.into_iter().flatten());
        }
        // nextn 8 so that every chain is a valid verify request.
        let mut s = sampler(v as u32, force as u32, 8);
        let a = s.sample(&logits, &trees).unwrap();
        let b = s.sample(&logits, &verifies).unwrap();
        assert_eq!(a.rows.len(), b.rows.len());
        for (i, (x, y)) in a.rows.iter().zip(&b.rows).enumerate() {
            let same = x.token == y.token
                && x.logprob.to_bits() == y.logprob.to_bits()
                && x.sum_smaller_probs.to_bits() == y.sum_smaller_probs.to_bits()
                && x.top_logprobs.len() == y.top_logprobs.len()
                && x.top_logprobs
                    .iter()
                    .zip(&y.top_logprobs)
                    .all(|(p, q)| p.0 == q.0 && p.1.to_bits() == q.1.to_bits());
            assert!(same, "seed {seed} row {i}: tree {x:?} vs verify {y:?}");
        }
        for (i, (x, y)) in a.requests.iter().zip(&b.requests).enumerate() {
            assert_eq!(x.status.is_ok(), y.status.is_ok(), "seed {seed} request {i}: {:?} vs {:?}", x.status, y.status);
            assert_eq!((x.accepted, &x.emitted), (y.accepted, &y.emitted), "seed {seed} request {i}");
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&x.emitted_logprobs), bits(&y.emitted_logprobs), "seed {seed} request {i}");
            if x.status.is_ok() {
                assert_eq!(
                    x.path,
                    Some((0..=x.accepted).collect()),
                    "seed {seed} request {i}: a chain's path is its prefix"
                );
            }
        }
    }
    assert!(compared.iter().all(|&c| c >= 100), "{compared:?}");
}

/// Section 11.10: each malformed tree fails only its request; the others'
/// outputs are bitwise those of a batch without it.
#[test]
fn malformed_trees_fail_only_themselves() {
    let v = 16usize;
    let mut rng = Rng::new(5);
    let good_tree = DraftTree::fixed(vec![-1, 0, 0, 1], vec![3, 4, 5]);
    let params = SamplingParams {
        temperature: 0.8,
        top_p: 0.9,
        top_k: -1,
        top_logprobs: 2,
        seq_seed: Some(9),
        ..Default::default()
    };
    let good = Request::tree(params.clone(), 100, good_tree.clone());
    let d = DraftDist { ids: vec![1, 2], logprobs: vec![-0.5, -1.0] };
    let bad: Vec<(&str, DraftTree, Vec<i32>, Option<usize>)> = vec![
        ("tree_parent", DraftTree { parent: vec![0, 0, 0, 1], ..good_tree.clone() }, vec![], None),
        ("tree_parent", DraftTree { parent: vec![-1, 0, 3, 1], ..good_tree.clone() }, vec![], None),
        ("tree_parent", DraftTree { parent: vec![-1, 0, -1, 1], ..good_tree.clone() }, vec![], None),
        ("tree_parent", DraftTree { parent: vec![-1, 0, 2, 1], ..good_tree.clone() }, vec![], None),
        ("tree_token", DraftTree { tokens: vec![3, 4], ..good_tree.clone() }, vec![], None),
        ("tree_token", DraftTree { tokens: vec![3, 16, 5], ..good_tree.clone() }, vec![], None),
        ("draft_dists", DraftTree { draft_dists: Some(vec![d.clone()]), ..good_tree.clone() }, vec![], None),
        ("without_replacement", DraftTree { without_replacement: true, ..good_tree.clone() }, vec![], None),
        ("golden", good_tree.clone(), vec![1, 2, 3, 4], None),
        ("mask", good_tree.clone(), vec![], Some(3)),
    ];
    let rows = |m: usize, rng: &mut Rng| -> Vec<f32> { (0..m).flat_map(|_| random_row(rng, v)).collect() };
    let lg = rows(4, &mut rng);
    let mut s = sampler(v as u32, 0, 5);
    let alone = s.sample(&lg, std::slice::from_ref(&good)).unwrap();
    assert_eq!(alone.requests[0].status, Ok(()));
    for (field, t, golden, masks) in bad {
        let m = t.parent.len();
        let mut req = Request::tree(params.clone(), 100, t);
        req.golden = golden;
        req.masks = masks.map(|k| vec![vec![u32::MAX]; k]);
        let mut l = lg.clone();
        l.extend(rows(m, &mut rng));
        let out = s.sample(&l, &[good.clone(), req]).unwrap();
        let e = out.requests[1].status.as_ref().expect_err(field);
        assert!(e.to_string().contains(field), "{field}: {e}");
        assert!(out.rows[4..].iter().all(|r| r.token == -1 && r.top_logprobs.is_empty()), "{field}");
        assert_eq!(out.requests[1].path, None);
        assert_eq!(out.rows[..4], alone.rows[..], "{field}: the good request changed");
        assert_eq!(out.requests[0], alone.requests[0], "{field}");
    }
}

/// Random steps mixing trees of every law with the other kinds, against the
/// f64 reference (ids compared where no decision is within 1e-6 of a boundary).
#[test]
fn random_trees_match_the_reference() {
    let mut trees = 0usize;
    for seed in 0..300u64 {
        let mut rng = Rng::new(seed ^ 0xfeed);
        let v = 1 + rng.below(120);
        let force = if v > 1 && rng.chance(0.4) { 1 + rng.below(v - 1) } else { 0 };
        let opts = common::gen::GenOpts { p_tree: 0.6, ..Default::default() };
        let step = common::gen::random_step(&mut rng, v, force, 5, opts);
        trees += step.requests.iter().filter(|r| matches!(r.kind, RequestKind::Tree { .. })).count();
        let got = sampler(v as u32, force as u32, 5).sample(&step.logits, &step.requests).unwrap();
        let want = reference_step(v, force, &step.logits, &step.requests);
        let d = compare(&got, &want, &step.requests);
        assert!(d.is_empty(), "seed {seed}: {d:#?}");
    }
    assert!(trees > 300, "{trees}");
}

/// The converters give the canonical parents of one SGLang-style tree.
#[test]
fn converters_from_engine_encodings() {
    // root -> 1, 2, 3; 1 -> 4, 5; 3 -> 6; 4 -> 7
    let want = vec![-1, 0, 0, 0, 1, 1, 3, 4];
    let first_child = [1, 4, -1, 6, 7, -1, -1, -1];
    let next_sibling = [-1, 2, 3, -1, 5, -1, -1, -1];
    assert_eq!(DraftTree::parents_from_first_child_next_sibling(&first_child, &next_sibling).unwrap(), want);
    let ranks = vec![vec![0], vec![1], vec![2], vec![0, 0], vec![0, 1], vec![2, 0], vec![0, 0, 0]];
    assert_eq!(DraftTree::parents_from_rank_paths(&ranks).unwrap(), want);
    let retrieve = vec![vec![0, 1, 4, 7], vec![0, 1, 5, -1], vec![0, 2, -1, -1], vec![0, 3, 6, -1]];
    assert_eq!(DraftTree::parents_from_node_paths(8, &retrieve).unwrap(), want);
    // DFS order renumbers nodes (0, 1, 4, 7, 5, 2, 3, 6): its own parents.
    assert_eq!(DraftTree::parents_from_dfs_depths(&[0, 1, 2, 3, 2, 1, 1, 2]).unwrap(), vec![-1, 0, 1, 2, 1, 0, 0, 6]);
}
