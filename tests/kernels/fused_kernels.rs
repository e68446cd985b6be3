//! The fused kernels the CUDA backend launches (`process_draw`,
//! `process_prefix_draw`, `token_info_top`) against the kernels they fuse
//! (`process_prefix_draw` with n = V against `process` + `draw`),
//! bit for bit, on the CPU (same DSL source as the PTX). The GPU round also
//! compares the CUDA results (fused) with the CPU backend (unfused).

use crate::common;

use common::gen::{random_row, Rng};
use sampler_kernels::kernels as k;
use sampler_kernels::rt::cpu::Gm;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn fused_kernels_equal_the_kernels_they_fuse() {
    let mut rng = Rng::new(99);
    let (mut cases, mut skips, mut heads) = (0, 0, 0);
    for rep in 0..300u64 {
        let v = rng.pick(&[5usize, 64, 300, 1000, 3000]);
        let n = if rng.chance(0.25) { v as u32 } else { (rng.range(1, v as u64 + 1) as u32).min(v as u32) };
        let logits = random_row(&mut rng, v);
        // Candidates in order, as force_topn gives them.
        let (mut cand, mut ids) = (vec![0f32; n as usize], vec![0i32; n as usize]);
        unsafe { k::force_topn::cpu(0, Gm::new(&logits), v as u32, n, Gm::new_mut(&mut cand), Gm::new_mut(&mut ids)) };
        let t = [rng.pick(&[1e-5f32, 0.3, 0.7, 1.0, 2.0])];
        let tp = [rng.pick(&[0.05f32, 0.5, 0.9, 1.0])];
        let tk = [rng.pick(&[-1i32, 1, 5, 50])];
        // Section 10: min-p and the filter order (0 = the seed's, 1 = top-k first).
        let mp = [sampler_host::params::log_min_p(rng.pick(&[0f32, 0.0, 0.05, 0.3, 1.0]))];
        let ord = [rng.pick(&[0u32, 1])];
        let (seed, seq) = ([rng.next_u64()], [rng.next_u64() >> 2]);
        // process + draw vs process_draw
        let (mut lp1, mut tok1) = (vec![0f32; n as usize], [0i32]);
        unsafe {
            k::process::cpu(
                0,
                Gm::new(&cand),
                n,
                Gm::new(&t),
                Gm::new(&tp),
                Gm::new(&tk),
                Gm::new(&mp),
                Gm::new(&ord),
                Gm::new_mut(&mut lp1),
            );
            k::draw::cpu(0, Gm::new(&lp1), Gm::new(&ids), n, Gm::new(&seed), Gm::new(&seq), Gm::new_mut(&mut tok1));
        }
        let (mut lp2, mut tok2) = (vec![0f32; n as usize], [0i32]);
        unsafe {
            k::process_draw::cpu(
                0,
                Gm::new(&cand),
                Gm::new(&ids),
                n,
                Gm::new(&t),
                Gm::new(&tp),
                Gm::new(&tk),
                Gm::new(&mp),
                Gm::new(&ord),
                Gm::new(&seed),
                Gm::new(&seq),
                Gm::new_mut(&mut lp2),
                Gm::new_mut(&mut tok2),
            );
        }
        assert_eq!((bits(&lp1), tok1), (bits(&lp2), tok2), "rep {rep}: process_draw");
        // process_prefix_draw (the mass of the whole row from row_mass)
        let mass = {
            let mut m = [0u64];
            unsafe {
                k::row_mass::cpu(
                    0,
                    Gm::new(&logits),
                    v as u32,
                    v as u32,
                    1,
                    Gm::new(&cand),
                    n,
                    Gm::new(&t),
                    Gm::new_mut(&mut m),
                )
            };
            m
        };
        let (mut lp4, mut of4, mut tok4) = (vec![0f32; n as usize], [0u32], [0i32]);
        unsafe {
            k::process_prefix_draw::cpu(
                0,
                Gm::new(&cand),
                Gm::new(&ids),
                n,
                v as u32,
                Gm::new(&mass),
                1,
                Gm::new(&t),
                Gm::new(&tp),
                Gm::new(&tk),
                Gm::new(&mp),
                Gm::new(&ord),
                Gm::new(&seed),
                Gm::new(&seq),
                Gm::new_mut(&mut lp4),
                Gm::new_mut(&mut of4),
                Gm::new_mut(&mut tok4),
            );
        }
        // row_mass_bounded: where it leaves the total out, process_prefix_draw gives the bits
        // it gives with the true total (issue 22, perf-design 3.4 E), at any chunk count.
        let chunks = rng.pick(&[1u32, 2, 3]);
        let chunk_len = (v as u32).div_ceil(chunks);
        let mut bmass = vec![0u64; chunks as usize];
        for c in 0..chunks {
            unsafe {
                k::row_mass_bounded::cpu(
                    c,
                    Gm::new(&logits),
                    v as u32,
                    chunk_len,
                    chunks,
                    Gm::new(&cand),
                    n,
                    Gm::new(&t),
                    Gm::new(&tp),
                    Gm::new(&tk),
                    Gm::new(&mp),
                    Gm::new(&ord),
                    Gm::new_mut(&mut bmass),
                )
            };
        }
        let skipped = bmass[0] == k::MASS_UNNEEDED;
        if skipped {
            assert!(bmass[1..].iter().all(|&x| x == 0), "rep {rep}: the other chunks write 0");
            skips += 1;
        } else {
            assert_eq!(bmass.iter().sum::<u64>(), mass[0], "rep {rep}: row_mass_bounded's chunks sum to row_mass");
        }
        let (mut lp5, mut of5, mut tok5) = (vec![0f32; n as usize], [0u32], [0i32]);
        unsafe {
            k::process_prefix_draw::cpu(
                0,
                Gm::new(&cand),
                Gm::new(&ids),
                n,
                v as u32,
                Gm::new(&bmass),
                chunks,
                Gm::new(&t),
                Gm::new(&tp),
                Gm::new(&tk),
                Gm::new(&mp),
                Gm::new(&ord),
                Gm::new(&seed),
                Gm::new(&seq),
                Gm::new_mut(&mut lp5),
                Gm::new_mut(&mut of5),
                Gm::new_mut(&mut tok5),
            );
        }
        assert_eq!(
            (bits(&lp5), of5, tok5),
            (bits(&lp4), of4, tok4),
            "rep {rep}: process_prefix_draw after row_mass_bounded (skipped {skipped}) differs from the true total's"
        );
        if n as usize == v {
            // All V candidates: the prefix path is the full path, and nothing overflows.
            assert_eq!(
                (bits(&lp4), of4, tok4),
                (bits(&lp1), [0u32], tok1),
                "rep {rep}: process_prefix_draw with n = V differs from process + draw"
            );
        }
        // token_info + top_logprobs vs token_info_top
        let kk = rng.range(0, n.min(6) as u64 + 1) as u32;
        let tok = [if rng.chance(0.8) { tok1[0] } else { rng.below(v) as i32 }];
        let (mut tl1, mut ss1, mut oi1, mut ol1) = ([0f32], [0f32], vec![0i32; kk as usize], vec![0f32; kk as usize]);
        unsafe {
            k::token_info::cpu(
                0,
                Gm::new(&cand),
                Gm::new(&ids),
                Gm::new(&lp1),
                n,
                Gm::new(&tok),
                Gm::new_mut(&mut tl1),
                Gm::new_mut(&mut ss1),
            );
            k::top_logprobs::cpu(0, Gm::new(&ids), Gm::new(&lp1), n, kk, Gm::new_mut(&mut oi1), Gm::new_mut(&mut ol1));
        }
        let (mut tl2, mut ss2, mut oi2, mut ol2) = ([0f32], [0f32], vec![0i32; kk as usize], vec![0f32; kk as usize]);
        unsafe {
            k::token_info_top::cpu(
                0,
                Gm::new(&cand),
                Gm::new(&ids),
                Gm::new(&lp1),
                n,
                n,
                Gm::new(&tok),
                kk,
                Gm::new_mut(&mut tl2),
                Gm::new_mut(&mut ss2),
                Gm::new_mut(&mut oi2),
                Gm::new_mut(&mut ol2),
            );
        }
        assert_eq!(
            (bits(&tl1), bits(&ss1), &oi1, bits(&ol1)),
            (bits(&tl2), bits(&ss2), &oi2, bits(&ol2)),
            "rep {rep}: token_info_top"
        );
        // process_draw_head + token_info_top over a head holding top-k and the top
        // logprobs, the rest of the row shuffled (the stream select's unordered rest).
        if tk[0] > 0 && (tk[0] as u32) <= n {
            let lo = (tk[0] as u32).max(kk).max(1);
            let head = rng.range(lo as u64, n as u64 + 1) as u32;
            let (mut sc, mut si) = (cand.clone(), ids.clone());
            for i in (head as usize + 1..n as usize).rev() {
                let j = head as usize + rng.below(i - head as usize + 1);
                sc.swap(i, j);
                si.swap(i, j);
            }
            let (mut lp3, mut tok3) = (vec![7f32; n as usize], [0i32]);
            unsafe {
                k::process_draw_head::cpu(
                    0,
                    Gm::new(&sc),
                    Gm::new(&si),
                    n,
                    head,
                    Gm::new(&t),
                    Gm::new(&tp),
                    Gm::new(&tk),
                    Gm::new(&mp),
                    Gm::new(&ord),
                    Gm::new(&seed),
                    Gm::new(&seq),
                    Gm::new_mut(&mut lp3),
                    Gm::new_mut(&mut tok3),
                );
            }
            assert_eq!((bits(&lp3), tok3), (bits(&lp1), tok1), "rep {rep}: process_draw_head, head {head} of {n}");
            let (mut tl3, mut ss3, mut oi3, mut ol3) =
                ([0f32], [0f32], vec![0i32; kk as usize], vec![0f32; kk as usize]);
            unsafe {
                k::token_info_top::cpu(
                    0,
                    Gm::new(&sc),
                    Gm::new(&si),
                    Gm::new(&lp3),
                    n,
                    head,
                    Gm::new(&tok),
                    kk,
                    Gm::new_mut(&mut tl3),
                    Gm::new_mut(&mut ss3),
                    Gm::new_mut(&mut oi3),
                    Gm::new_mut(&mut ol3),
                );
            }
            assert_eq!(
                (bits(&tl3), bits(&ss3), &oi3, bits(&ol3)),
                (bits(&tl1), bits(&ss1), &oi1, bits(&ol1)),
                "rep {rep}: token_info_top over a head of {head} of {n}"
            );
            heads += 1;
        }
        cases += 1;
    }
    assert_eq!(cases, 300);
    assert!(heads > 100, "{heads} rows through the head kernels");
    eprintln!("row_mass_bounded skipped the total on {skips} of 300 rows");
    // The bound decides a fair share of these rows, and not all of them.
    assert!(skips > 30 && skips < 270, "row_mass_bounded skipped {skips} of 300 rows");
}

/// The multi-block top-N (`topn_chunk` with `top_n_set`, then `topn_merge`)
/// against `force_topn`, with ties across and within chunks.
#[test]
fn chunked_top_n_equals_force_topn() {
    let mut rng = Rng::new(7);
    let mut runs = 0;
    for rep in 0..400u64 {
        let v = rng.pick(&[64usize, 300, 1000, 4000]);
        let chunks = rng.pick(&[2u32, 3, 4, 8, 16]);
        let chunk_len = (v as u32).div_ceil(chunks);
        let last = v as i64 - (chunks as i64 - 1) * chunk_len as i64;
        if last < 1 {
            continue;
        }
        let n = rng.range(1, last as u64 + 1) as u32;
        let mut logits = random_row(&mut rng, v);
        if rng.chance(0.5) {
            // Heavy ties: few distinct values.
            for x in logits.iter_mut() {
                if x.is_finite() {
                    *x = (*x * 2.0).round() / 2.0;
                }
            }
        }
        let (mut want_x, mut want_id) = (vec![0f32; n as usize], vec![0i32; n as usize]);
        unsafe {
            k::force_topn::cpu(0, Gm::new(&logits), v as u32, n, Gm::new_mut(&mut want_x), Gm::new_mut(&mut want_id))
        };
        let m = chunks * n;
        let (mut cx, mut cid) = (vec![0f32; m as usize], vec![0i32; m as usize]);
        for c in 0..chunks {
            unsafe {
                k::topn_chunk::cpu(
                    c,
                    Gm::new(&logits),
                    v as u32,
                    chunk_len,
                    chunks,
                    n,
                    Gm::new_mut(&mut cx),
                    Gm::new_mut(&mut cid),
                )
            };
        }
        // Each chunk's candidates come in ascending id order.
        for c in 0..chunks as usize {
            let ids = &cid[c * n as usize..(c + 1) * n as usize];
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "rep {rep}: chunk {c} ids not ascending: {ids:?}");
        }
        let (mut x, mut id) = (vec![0f32; n as usize], vec![0i32; n as usize]);
        let (zero, mut st) = ([0u32; 1], [0i32; 1]);
        unsafe {
            k::topn_merge::cpu(
                0,
                Gm::new(&cx),
                Gm::new(&cid),
                m,
                n,
                Gm::new_mut(&mut x),
                Gm::new_mut(&mut id),
                Gm::new(&zero),
                Gm::new(&zero),
                0,
                Gm::new_mut(&mut st),
            )
        };
        assert_eq!(
            (bits(&x), &id),
            (bits(&want_x), &want_id),
            "topn_chunk + topn_merge vs force_topn, rep {rep}: V={v} chunks={chunks} n={n}"
        );
        runs += 1;
    }
    assert!(runs > 300, "{runs} runs");
}

/// `remap_draft` does not depend on its `col_of` scratch's old contents, even
/// stale columns of a wider step (the CUDA backend never clears it).
#[test]
fn remap_draft_ignores_stale_scratch() {
    let mut rng = Rng::new(11);
    for rep in 0..100u64 {
        let v = rng.pick(&[300usize, 1000]);
        let n = rng.pick(&[8u32, 64, 200]);
        let rows = 3usize;
        let (mut ids, mut cand) = (vec![0i32; rows * n as usize], vec![0f32; rows * n as usize]);
        let mut logits = Vec::new();
        for _ in 0..rows {
            logits.extend(random_row(&mut rng, v));
        }
        for r in 0..rows as u32 {
            unsafe {
                k::force_topn::cpu(r, Gm::new(&logits), v as u32, n, Gm::new_mut(&mut cand), Gm::new_mut(&mut ids))
            };
        }
        // A V-wide draft distribution per row (ids in a random order), and the drafted token.
        let wd = v as u32;
        let mut dids = Vec::new();
        let mut dlps = Vec::new();
        let mut dtok = Vec::new();
        for _ in 0..rows {
            let mut perm: Vec<i32> = (0..v as i32).collect();
            for i in (1..v).rev() {
                perm.swap(i, rng.below(i + 1));
            }
            dlps.extend((0..v).map(|_| -(rng.f64() as f32) * 5.0));
            dtok.push(perm[rng.below(v)]);
            dids.extend(perm);
        }
        let run = |col_of: &mut Vec<i32>| {
            let (mut q, mut dc, mut dq) = (vec![0f32; rows * n as usize], vec![0i32; rows], vec![0f32; rows]);
            // Last row first: a stray write into a later row's columns then stays visible
            // (on the GPU the programs run in any order).
            for r in (0..rows as u32).rev() {
                unsafe {
                    k::remap_draft::cpu(
                        r,
                        Gm::new(&ids),
                        n,
                        v as u32,
                        Gm::new(&dids),
                        Gm::new(&dlps),
                        wd,
                        Gm::new(&dtok),
                        Gm::new_mut(col_of),
                        Gm::new_mut(&mut q),
                        Gm::new_mut(&mut dc),
                        Gm::new_mut(&mut dq),
                    )
                };
            }
            (bits(&q), dc, bits(&dq))
        };
        let mut clean = vec![-1i32; rows * v];
        let mut stale: Vec<i32> = (0..rows * v).map(|_| rng.below(v) as i32).collect();
        assert_eq!(run(&mut clean), run(&mut stale), "remap_draft, rep {rep}: V={v} n={n}");
    }
}

/// Logits the mask check must classify: NaNs of both signs and many
/// payloads (every kind `order_bits` maps below -inf, into -inf's 12-bit
/// bin, into +inf's bin and above it), +-inf, -0.0 and denormals.
const SPECIALS: [f32; 14] = [
    f32::NAN,
    -f32::NAN,
    f32::from_bits(0x7f80_0001),
    f32::from_bits(0x7fff_ffff),
    f32::from_bits(0xff80_0001),
    f32::from_bits(0xff8f_ffff),
    f32::from_bits(0xff90_0000),
    f32::from_bits(0xffff_ffff),
    f32::INFINITY,
    f32::NEG_INFINITY,
    -0.0,
    0.0,
    f32::from_bits(1),
    f32::from_bits(0x8000_0001),
];

/// The counted top-N kernels (`force_topn_counted`; `topn_chunk_counted`
/// then `topn_merge`: what a step without masks or raw rows runs in place
/// of the mask check under `Caps::counts_in_topn`) give the candidates of
/// the uncounted ones bit for bit, each chunk's bad / finite counts as the
/// mask check counts them, and `mask_check`'s row status: on rows with NaN,
/// +inf, -inf, all -inf rows and chunks, -0.0 and denormals.
#[test]
fn counted_top_n_kernels_give_the_mask_checks_counts_and_status() {
    let mut rng = Rng::new(12);
    let mut statuses = [0usize; 3];
    for rep in 0..300u64 {
        let v = rng.pick(&[64usize, 300, 1000, 4000, 40000]);
        let chunks = rng.pick(&[2u32, 3, 4, 8]);
        let chunk_len = (v as u32).div_ceil(chunks);
        let last = v as i64 - (chunks as i64 - 1) * chunk_len as i64;
        if last < 1 {
            continue;
        }
        let n = rng.range(1, last.min(300) as u64 + 1) as u32;
        let mut logits = random_row(&mut rng, v);
        match rng.below(7) {
            0 => logits.iter_mut().for_each(|x| *x = f32::NEG_INFINITY),
            1 => {
                // One chunk all -inf (the others finite).
                let c = rng.below(chunks as usize);
                let end = ((c + 1) * chunk_len as usize).min(v);
                logits[c * chunk_len as usize..end].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
            }
            2 => logits.iter_mut().for_each(|x| *x = SPECIALS[rng.below(SPECIALS.len())]),
            3 => {
                // -inf with negative NaNs of -inf's own 12-bit bin only (no other bad value).
                logits.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                logits[rng.below(v)] = f32::from_bits(0xff80_0001);
            }
            4 => logits.iter_mut().for_each(|x| *x = if rng.chance(0.5) { -0.0 } else { f32::from_bits(1) }),
            _ => {
                for _ in 0..rng.below(4) {
                    logits[rng.below(v)] = SPECIALS[rng.below(SPECIALS.len())];
                }
            }
        }
        // The mask check's status (no mask, no raw row).
        let (zero, mut masked, mut rmax, mut rsum, mut want_st) = ([0u32; 1], [0f32; 1], [0f32; 1], [0u64; 1], [-1i32]);
        let words = vec![0u32; v.div_ceil(32)];
        unsafe {
            k::mask_check::cpu(
                0,
                Gm::new(&logits),
                v as u32,
                Gm::new(&words),
                Gm::new(&zero),
                0,
                Gm::new_mut(&mut masked),
                Gm::new(&zero),
                Gm::new_mut(&mut rmax),
                Gm::new_mut(&mut rsum),
                Gm::new_mut(&mut want_st),
            )
        };
        statuses[want_st[0] as usize] += 1;
        // force_topn_counted: force_topn's candidates and mask_check's status.
        let (mut wx, mut wid) = (vec![0f32; n as usize], vec![0i32; n as usize]);
        let (mut x, mut id, mut st) = (vec![0f32; n as usize], vec![0i32; n as usize], [-1i32]);
        unsafe {
            k::force_topn::cpu(0, Gm::new(&logits), v as u32, n, Gm::new_mut(&mut wx), Gm::new_mut(&mut wid));
            k::force_topn_counted::cpu(
                0,
                Gm::new(&logits),
                v as u32,
                n,
                Gm::new_mut(&mut x),
                Gm::new_mut(&mut id),
                Gm::new_mut(&mut st),
            );
        }
        assert_eq!((bits(&x), &id), (bits(&wx), &wid), "rep {rep}: force_topn_counted's candidates");
        assert_eq!(st, want_st, "rep {rep}: force_topn_counted's status, V={v}");
        // topn_chunk_counted: topn_chunk's candidates, each chunk's counts.
        let m = (chunks * n) as usize;
        let (mut cx, mut cid, mut kx, mut kid) = (vec![0f32; m], vec![0i32; m], vec![0f32; m], vec![0i32; m]);
        let (mut bad, mut fin) = (vec![u32::MAX; chunks as usize], vec![u32::MAX; chunks as usize]);
        for c in 0..chunks {
            unsafe {
                k::topn_chunk::cpu(
                    c,
                    Gm::new(&logits),
                    v as u32,
                    chunk_len,
                    chunks,
                    n,
                    Gm::new_mut(&mut cx),
                    Gm::new_mut(&mut cid),
                );
                k::topn_chunk_counted::cpu(
                    c,
                    Gm::new(&logits),
                    v as u32,
                    chunk_len,
                    chunks,
                    n,
                    Gm::new_mut(&mut kx),
                    Gm::new_mut(&mut kid),
                    Gm::new_mut(&mut bad),
                    Gm::new_mut(&mut fin),
                );
            }
        }
        assert_eq!((bits(&kx), &kid), (bits(&cx), &cid), "rep {rep}: topn_chunk_counted's candidates");
        for c in 0..chunks as usize {
            let part = &logits[c * chunk_len as usize..((c + 1) * chunk_len as usize).min(v)];
            let want_bad = part.iter().filter(|x| x.is_nan() || **x == f32::INFINITY).count() as u32;
            let want_fin = part.iter().filter(|x| **x != f32::NEG_INFINITY).count() as u32;
            assert_eq!((bad[c], fin[c]), (want_bad, want_fin), "rep {rep}: chunk {c} counts");
        }
        // topn_merge turns them into the status (mchunks = chunks).
        let (mut mx, mut mid, mut mst) = (vec![0f32; n as usize], vec![0i32; n as usize], [-1i32]);
        unsafe {
            k::topn_merge::cpu(
                0,
                Gm::new(&kx),
                Gm::new(&kid),
                m as u32,
                n,
                Gm::new_mut(&mut mx),
                Gm::new_mut(&mut mid),
                Gm::new(&bad),
                Gm::new(&fin),
                chunks,
                Gm::new_mut(&mut mst),
            )
        };
        assert_eq!(mst, want_st, "rep {rep}: the merged status");
        if want_st[0] == 0 {
            assert_eq!((bits(&mx), &mid), (bits(&wx), &wid), "rep {rep}: merged candidates vs force_topn");
        }
    }
    assert!(statuses.iter().all(|&s| s >= 20), "every status often enough: {statuses:?}");
}

/// `finalize_info_top` against `finalize` then `token_info_top` on steps of
/// one-row groups (fresh or no draw), with host-failed groups, bad rows,
/// golden tokens and prompt targets.
#[test]
fn finalize_info_top_equals_finalize_then_token_info_top() {
    let mut rng = Rng::new(5);
    for rep in 0..200u64 {
        let v = rng.pick(&[64usize, 300, 1000]);
        let rows = rng.range(1, 6) as usize;
        let n = rng.pick(&[1u32, 8, 64]).min(v as u32);
        let (mut cand, mut ids) = (vec![0f32; rows * n as usize], vec![0i32; rows * n as usize]);
        let mut logits = Vec::new();
        for _ in 0..rows {
            logits.extend(random_row(&mut rng, v));
        }
        for r in 0..rows as u32 {
            unsafe {
                k::force_topn::cpu(r, Gm::new(&logits), v as u32, n, Gm::new_mut(&mut cand), Gm::new_mut(&mut ids))
            };
        }
        let lps: Vec<f32> = cand.iter().map(|&x| if rng.chance(0.3) { f32::NEG_INFINITY } else { x - 20.0 }).collect();
        let first: Vec<u32> = (0..rows as u32).collect();
        let ones = vec![1u32; rows];
        let kind: Vec<u32> = (0..rows).map(|_| rng.pick(&[0u32, 0, 2])).collect();
        let gstatus: Vec<i32> = (0..rows).map(|_| rng.pick(&[0i32, 0, 0, -1])).collect();
        let rstatus: Vec<i32> = (0..rows).map(|_| rng.pick(&[0i32, 0, 0, 1, 2])).collect();
        let pick_id = |rng: &mut Rng, r: usize| {
            if rng.chance(0.5) {
                ids[r * n as usize + rng.below(n as usize)]
            } else {
                rng.below(v) as i32
            }
        };
        let golden: Vec<i32> = (0..rows).map(|r| if rng.chance(0.3) { pick_id(&mut rng, r) } else { -1 }).collect();
        let fresh: Vec<i32> = (0..rows).map(|r| if rng.chance(0.9) { pick_id(&mut rng, r) } else { -1 }).collect();
        let none = vec![-1i32; rows];
        let zero = vec![0u32; rows];
        let kk = rng.range(0, n as u64 + 1) as u32;
        let rk = rows * kk as usize;
        // finalize, then token_info_top on its lookup
        let (mut tok1, mut look1, mut acc1, mut st1) =
            (vec![9i32; rows], vec![9i32; rows], vec![9u32; rows], vec![9i32; rows]);
        let (mut tl1, mut ss1, mut oi1, mut ol1) = (vec![0f32; rows], vec![0f32; rows], vec![0i32; rk], vec![0f32; rk]);
        for g in 0..rows as u32 {
            unsafe {
                k::finalize::cpu(
                    g,
                    Gm::new(&first),
                    Gm::new(&ones),
                    Gm::new(&kind),
                    Gm::new(&gstatus),
                    Gm::new(&rstatus),
                    Gm::new(&golden),
                    Gm::new(&none),
                    Gm::new(&zero),
                    Gm::new(&none),
                    Gm::new(&fresh),
                    Gm::new_mut(&mut tok1),
                    Gm::new_mut(&mut look1),
                    Gm::new_mut(&mut acc1),
                    Gm::new_mut(&mut st1),
                )
            };
        }
        for r in 0..rows as u32 {
            unsafe {
                k::token_info_top::cpu(
                    r,
                    Gm::new(&cand),
                    Gm::new(&ids),
                    Gm::new(&lps),
                    n,
                    n,
                    Gm::new(&look1),
                    kk,
                    Gm::new_mut(&mut tl1),
                    Gm::new_mut(&mut ss1),
                    Gm::new_mut(&mut oi1),
                    Gm::new_mut(&mut ol1),
                )
            };
        }
        let (mut tok2, mut look2, mut acc2, mut st2) =
            (vec![7i32; rows], vec![7i32; rows], vec![7u32; rows], vec![7i32; rows]);
        let (mut tl2, mut ss2, mut oi2, mut ol2) = (vec![0f32; rows], vec![0f32; rows], vec![0i32; rk], vec![0f32; rk]);
        for r in 0..rows as u32 {
            unsafe {
                k::finalize_info_top::cpu(
                    r,
                    Gm::new(&kind),
                    Gm::new(&gstatus),
                    Gm::new(&rstatus),
                    Gm::new(&golden),
                    Gm::new(&fresh),
                    Gm::new_mut(&mut tok2),
                    Gm::new_mut(&mut look2),
                    Gm::new_mut(&mut acc2),
                    Gm::new_mut(&mut st2),
                    Gm::new(&cand),
                    Gm::new(&ids),
                    Gm::new(&lps),
                    n,
                    n,
                    kk,
                    Gm::new_mut(&mut tl2),
                    Gm::new_mut(&mut ss2),
                    Gm::new_mut(&mut oi2),
                    Gm::new_mut(&mut ol2),
                )
            };
        }
        assert_eq!((&tok2, &look2, &acc2, &st2), (&tok1, &look1, &acc1, &st1), "rep {rep}: finalize outputs");
        assert_eq!(
            (bits(&tl2), bits(&ss2), &oi2, bits(&ol2)),
            (bits(&tl1), bits(&ss1), &oi1, bits(&ol1)),
            "rep {rep}: token info and top logprobs"
        );
    }
}

/// The group inputs of a step of one-row groups: kind (fresh or no draw),
/// host status, row status and golden token, with ids from the row's
/// candidates or anywhere in the vocabulary.
struct Groups {
    kind: Vec<u32>,
    gstatus: Vec<i32>,
    rstatus: Vec<i32>,
    golden: Vec<i32>,
}

impl Groups {
    fn random(rng: &mut Rng, ids: &[i32], rows: usize, n: usize, v: usize) -> Groups {
        let kind = (0..rows).map(|_| rng.pick(&[0u32, 0, 2])).collect();
        let gstatus = (0..rows).map(|_| rng.pick(&[0i32, 0, 0, -1])).collect();
        let rstatus = (0..rows).map(|_| rng.pick(&[0i32, 0, 0, 1, 2])).collect();
        let golden = (0..rows)
            .map(|r| match rng.below(3) {
                0 => ids[r * n + rng.below(n)],
                1 => rng.below(v) as i32,
                _ => -1,
            })
            .collect();
        Groups { kind, gstatus, rstatus, golden }
    }
}

/// Every output of a draw kernel and `finalize_info_top` (or the fused
/// kernel doing both), as bits.
#[derive(Debug, PartialEq)]
struct Tail {
    logprobs: Vec<u32>,
    overflow: Vec<u32>,
    fresh: Vec<i32>,
    tokens: Vec<i32>,
    lookup: Vec<i32>,
    accepted: Vec<u32>,
    status: Vec<i32>,
    token_lp: Vec<u32>,
    sum_smaller: Vec<u32>,
    top_ids: Vec<i32>,
    top_lps: Vec<u32>,
}

/// The filter and draw parameters of a batch's rows (`[R]` each, as the
/// kernels take them).
struct Params {
    t: Vec<f32>,
    tp: Vec<f32>,
    tk: Vec<i32>,
    mp: Vec<f32>,
    ord: Vec<u32>,
    seed: Vec<u64>,
    seq: Vec<u64>,
}

struct TailBufs {
    logprobs: Vec<f32>,
    overflow: Vec<u32>,
    fresh: Vec<i32>,
    tokens: Vec<i32>,
    lookup: Vec<i32>,
    accepted: Vec<u32>,
    status: Vec<i32>,
    token_lp: Vec<f32>,
    sum_smaller: Vec<f32>,
    top_ids: Vec<i32>,
    top_lps: Vec<f32>,
}

impl TailBufs {
    /// Buffers of `rows` rows filled with `fill` (stale scratch).
    fn new(rows: usize, n: usize, kk: usize, fill: i32) -> TailBufs {
        TailBufs {
            logprobs: vec![fill as f32; rows * n],
            overflow: vec![fill as u32; rows],
            fresh: vec![fill; rows],
            tokens: vec![fill; rows],
            lookup: vec![fill; rows],
            accepted: vec![fill as u32; rows],
            status: vec![fill; rows],
            token_lp: vec![fill as f32; rows],
            sum_smaller: vec![fill as f32; rows],
            top_ids: vec![fill; rows * kk],
            top_lps: vec![fill as f32; rows * kk],
        }
    }

    fn bits(&self) -> Tail {
        Tail {
            logprobs: bits(&self.logprobs),
            overflow: self.overflow.clone(),
            fresh: self.fresh.clone(),
            tokens: self.tokens.clone(),
            lookup: self.lookup.clone(),
            accepted: self.accepted.clone(),
            status: self.status.clone(),
            token_lp: bits(&self.token_lp),
            sum_smaller: bits(&self.sum_smaller),
            top_ids: self.top_ids.clone(),
            top_lps: bits(&self.top_lps),
        }
    }

    /// `finalize_info_top` on row `r` over the first `len` of `n` columns.
    fn finalize_info_top(&mut self, r: u32, g: &Groups, (cand, ids): (&[f32], &[i32]), n: u32, len: u32, kk: u32) {
        unsafe {
            k::finalize_info_top::cpu(
                r,
                Gm::new(&g.kind),
                Gm::new(&g.gstatus),
                Gm::new(&g.rstatus),
                Gm::new(&g.golden),
                Gm::new(&self.fresh),
                Gm::new_mut(&mut self.tokens),
                Gm::new_mut(&mut self.lookup),
                Gm::new_mut(&mut self.accepted),
                Gm::new_mut(&mut self.status),
                Gm::new(cand),
                Gm::new(ids),
                Gm::new(&self.logprobs),
                n,
                len,
                kk,
                Gm::new_mut(&mut self.token_lp),
                Gm::new_mut(&mut self.sum_smaller),
                Gm::new_mut(&mut self.top_ids),
                Gm::new_mut(&mut self.top_lps),
            )
        };
    }

    /// `process_draw_head` on row `r` (head of `head` of `n` candidates).
    fn draw_head(&mut self, r: u32, p: &Params, (cand, ids): (&[f32], &[i32]), n: u32, head: u32) {
        unsafe {
            k::process_draw_head::cpu(
                r,
                Gm::new(cand),
                Gm::new(ids),
                n,
                head,
                Gm::new(&p.t),
                Gm::new(&p.tp),
                Gm::new(&p.tk),
                Gm::new(&p.mp),
                Gm::new(&p.ord),
                Gm::new(&p.seed),
                Gm::new(&p.seq),
                Gm::new_mut(&mut self.logprobs),
                Gm::new_mut(&mut self.fresh),
            )
        };
    }

    /// `process_draw_finish` on row `r`: `(n, head, kk)` as `draw_head` and
    /// `finalize_info_top`.
    fn draw_finish(
        &mut self,
        r: u32,
        p: &Params,
        g: &Groups,
        (cand, ids): (&[f32], &[i32]),
        (n, head, kk): (u32, u32, u32),
    ) {
        unsafe {
            k::process_draw_finish::cpu(
                r,
                Gm::new(cand),
                Gm::new(ids),
                n,
                head,
                Gm::new(&p.t),
                Gm::new(&p.tp),
                Gm::new(&p.tk),
                Gm::new(&p.mp),
                Gm::new(&p.ord),
                Gm::new(&p.seed),
                Gm::new(&p.seq),
                Gm::new_mut(&mut self.logprobs),
                Gm::new_mut(&mut self.fresh),
                Gm::new(&g.kind),
                Gm::new(&g.gstatus),
                Gm::new(&g.rstatus),
                Gm::new(&g.golden),
                Gm::new_mut(&mut self.tokens),
                Gm::new_mut(&mut self.lookup),
                Gm::new_mut(&mut self.accepted),
                Gm::new_mut(&mut self.status),
                kk,
                Gm::new_mut(&mut self.token_lp),
                Gm::new_mut(&mut self.sum_smaller),
                Gm::new_mut(&mut self.top_ids),
                Gm::new_mut(&mut self.top_lps),
            )
        };
    }
}

/// `process_draw_finish` against `process_draw_head` (`process_draw` when
/// the head is all N) then `finalize_info_top`, and `prefix_draw_finish`
/// against `process_prefix_draw` then `finalize_info_top`, bit for bit on
/// every output, over batches of one-row groups with mixed filters, heads
/// with a shuffled rest, host-failed groups, bad rows, golden tokens and
/// prompt targets.
#[test]
fn draw_finish_kernels_equal_the_draw_then_finalize_info_top() {
    let mut rng = Rng::new(23);
    let (mut heads, mut prefix_overflows) = (0, 0);
    for rep in 0..300u64 {
        let v = rng.pick(&[64usize, 300, 1000, 3000]);
        let rows = rng.range(1, 5) as usize;
        let n = rng.pick(&[1u32, 8, 64, 200, 1000]).min(v as u32);
        let nn = n as usize;
        let mut logits = Vec::new();
        for _ in 0..rows {
            logits.extend(random_row(&mut rng, v));
        }
        let (mut cand, mut ids) = (vec![0f32; rows * nn], vec![0i32; rows * nn]);
        for r in 0..rows as u32 {
            unsafe {
                k::force_topn::cpu(r, Gm::new(&logits), v as u32, n, Gm::new_mut(&mut cand), Gm::new_mut(&mut ids))
            };
        }
        let t: Vec<f32> = (0..rows).map(|_| rng.pick(&[1e-5f32, 0.3, 0.7, 1.0, 2.0])).collect();
        let tp: Vec<f32> = (0..rows).map(|_| rng.pick(&[0.05f32, 0.5, 0.9, 1.0])).collect();
        let tk: Vec<i32> = (0..rows).map(|_| rng.pick(&[-1i32, 1, 5, 50])).collect();
        let mp: Vec<f32> =
            (0..rows).map(|_| sampler_host::params::log_min_p(rng.pick(&[0f32, 0.05, 0.3, 1.0]))).collect();
        let ord: Vec<u32> = (0..rows).map(|_| rng.pick(&[0u32, 1])).collect();
        let seed: Vec<u64> = (0..rows).map(|_| rng.next_u64()).collect();
        let seq: Vec<u64> = (0..rows).map(|_| rng.next_u64() >> 2).collect();
        let p = Params { t, tp, tk, mp, ord, seed, seq };
        let g = Groups::random(&mut rng, &ids, rows, nn, v);
        let kk = rng.range(0, n.min(6) as u64 + 1) as u32;
        // A head holding every row's top-k and the top logprobs, the rest of
        // each row shuffled (the stream select's unordered rest); all N when
        // some row has top-k off.
        let lo = p.tk.iter().map(|&x| if x < 0 { n } else { (x as u32).min(n) }).max().unwrap().max(kk).max(1);
        let head = rng.range(lo as u64, n as u64 + 1) as u32;
        for r in 0..rows {
            for i in (head as usize + 1..nn).rev() {
                let j = head as usize + rng.below(i - head as usize + 1);
                cand.swap(r * nn + i, r * nn + j);
                ids.swap(r * nn + i, r * nn + j);
            }
        }
        heads += (head < n) as usize;
        let (mut a, mut b) = (TailBufs::new(rows, nn, kk as usize, 9), TailBufs::new(rows, nn, kk as usize, 9));
        for r in 0..rows as u32 {
            if head < n {
                a.draw_head(r, &p, (&cand, &ids), n, head);
            } else {
                unsafe {
                    k::process_draw::cpu(
                        r,
                        Gm::new(&cand),
                        Gm::new(&ids),
                        n,
                        Gm::new(&p.t),
                        Gm::new(&p.tp),
                        Gm::new(&p.tk),
                        Gm::new(&p.mp),
                        Gm::new(&p.ord),
                        Gm::new(&p.seed),
                        Gm::new(&p.seq),
                        Gm::new_mut(&mut a.logprobs),
                        Gm::new_mut(&mut a.fresh),
                    )
                };
            }
        }
        for r in 0..rows as u32 {
            a.finalize_info_top(r, &g, (&cand, &ids), n, head, kk);
        }
        for r in 0..rows as u32 {
            b.draw_finish(r, &p, &g, (&cand, &ids), (n, head, kk));
        }
        assert_eq!(b.bits(), a.bits(), "rep {rep}: process_draw_finish, head {head} of {n}, {rows} rows");
        // The prefix path: the first n of each row in order (unshuffled), the
        // mass of the whole row from row_mass over 1-3 chunks.
        let (mut cand, mut ids) = (vec![0f32; rows * nn], vec![0i32; rows * nn]);
        for r in 0..rows as u32 {
            unsafe {
                k::force_topn::cpu(r, Gm::new(&logits), v as u32, n, Gm::new_mut(&mut cand), Gm::new_mut(&mut ids))
            };
        }
        let chunks = rng.pick(&[1u32, 2, 3]);
        let chunk_len = (v as u32).div_ceil(chunks);
        let mut mass = vec![0u64; rows * chunks as usize];
        for i in 0..rows as u32 * chunks {
            unsafe {
                k::row_mass_bounded::cpu(
                    i,
                    Gm::new(&logits),
                    v as u32,
                    chunk_len,
                    chunks,
                    Gm::new(&cand),
                    n,
                    Gm::new(&p.t),
                    Gm::new(&p.tp),
                    Gm::new(&p.tk),
                    Gm::new(&p.mp),
                    Gm::new(&p.ord),
                    Gm::new_mut(&mut mass),
                )
            };
        }
        let (mut a, mut b) = (TailBufs::new(rows, nn, kk as usize, 7), TailBufs::new(rows, nn, kk as usize, 7));
        for r in 0..rows as u32 {
            unsafe {
                k::process_prefix_draw::cpu(
                    r,
                    Gm::new(&cand),
                    Gm::new(&ids),
                    n,
                    v as u32,
                    Gm::new(&mass),
                    chunks,
                    Gm::new(&p.t),
                    Gm::new(&p.tp),
                    Gm::new(&p.tk),
                    Gm::new(&p.mp),
                    Gm::new(&p.ord),
                    Gm::new(&p.seed),
                    Gm::new(&p.seq),
                    Gm::new_mut(&mut a.logprobs),
                    Gm::new_mut(&mut a.overflow),
                    Gm::new_mut(&mut a.fresh),
                )
            };
        }
        for r in 0..rows as u32 {
            a.finalize_info_top(r, &g, (&cand, &ids), n, n, kk);
        }
        for r in 0..rows as u32 {
            unsafe {
                k::prefix_draw_finish::cpu(
                    r,
                    Gm::new(&cand),
                    Gm::new(&ids),
                    n,
                    v as u32,
                    Gm::new(&mass),
                    chunks,
                    Gm::new(&p.t),
                    Gm::new(&p.tp),
                    Gm::new(&p.tk),
                    Gm::new(&p.mp),
                    Gm::new(&p.ord),
                    Gm::new(&p.seed),
                    Gm::new(&p.seq),
                    Gm::new_mut(&mut b.logprobs),
                    Gm::new_mut(&mut b.overflow),
                    Gm::new_mut(&mut b.fresh),
                    Gm::new(&g.kind),
                    Gm::new(&g.gstatus),
                    Gm::new(&g.rstatus),
                    Gm::new(&g.golden),
                    Gm::new_mut(&mut b.tokens),
                    Gm::new_mut(&mut b.lookup),
                    Gm::new_mut(&mut b.accepted),
                    Gm::new_mut(&mut b.status),
                    kk,
                    Gm::new_mut(&mut b.token_lp),
                    Gm::new_mut(&mut b.sum_smaller),
                    Gm::new_mut(&mut b.top_ids),
                    Gm::new_mut(&mut b.top_lps),
                )
            };
        }
        prefix_overflows += a.overflow.iter().filter(|&&o| o == 1).count();
        assert_eq!(b.bits(), a.bits(), "rep {rep}: prefix_draw_finish, n {n} of {v}, {chunks} chunks, {rows} rows");
    }
    eprintln!(
        "process_draw_finish over a partial head in {heads} of 300 steps; {prefix_overflows} prefix rows overflowed"
    );
    assert!(heads > 80, "{heads} steps with a partial head");
    assert!(prefix_overflows > 20, "{prefix_overflows} prefix rows overflowed");
}

/// The draw over a kept head with a rest of whole tiles and more (over
/// `TILE` = 16384 candidates on the CPU lowering, as at `tile = 256` on the
/// GPU with N = 4096: the per-lane sums of the rest, the last tiles clamped
/// to end at N), rests of exactly 1, 2 and 3 tiles and between, up to 6
/// passes: `process_draw_head` against `process` then `draw` over every
/// column, and `process_draw_finish` against `process_draw_head` then
/// `finalize_info_top`, bit for bit.
#[test]
fn kept_head_draws_over_a_rest_of_many_tiles_equal_the_full_row() {
    const T: u32 = 16384;
    let mut rng = Rng::new(31);
    let v = 12 * T as usize;
    let mut wide = 0;
    for rep in 0..24u64 {
        // Odd reps: 64 logits well above a flat rest holding most of the mass, so
        // that top-p's cut inside the head moves with the rest's total.
        let logits = if rep % 2 == 0 {
            random_row(&mut rng, v)
        } else {
            let mut x: Vec<f32> = (0..v).map(|_| rng.below(1000) as f32 * 1e-3).collect();
            for _ in 0..64 {
                x[rng.below(v)] = 5.0 + rng.below(100) as f32 * 1e-2;
            }
            x
        };
        let sharp = rep % 2 == 1;
        let t = [if sharp { 1.0 } else { rng.pick(&[0.3f32, 0.7, 1.0, 2.0, 30.0]) }];
        let tp = [if sharp { rng.pick(&[0.03f32, 0.05, 0.08]) } else { rng.pick(&[0.5f32, 0.9, 1.0]) }];
        let tk = [if sharp { 50 } else { rng.pick(&[1i32, 5, 50]) }];
        let head = rng.range(tk[0] as u64, 65) as u32;
        // The rest: whole tiles exactly, a tile and a bit, or up to 11 tiles and change.
        let rest = match rep % 4 {
            0 => T * rng.range(1, 4) as u32,
            1 => T * rng.range(1, 3) as u32 + rng.range(1, 100) as u32,
            2 => rng.range(T as u64, 12 * T as u64 - 64) as u32,
            _ => T - 1,
        };
        let n = head + rest;
        let nn = n as usize;
        let (mut cand, mut ids) = (vec![0f32; nn], vec![0i32; nn]);
        unsafe { k::force_topn::cpu(0, Gm::new(&logits), v as u32, n, Gm::new_mut(&mut cand), Gm::new_mut(&mut ids)) };
        let mp = [sampler_host::params::log_min_p(rng.pick(&[0f32, 0.05]))];
        let ord = [rng.pick(&[0u32, 1])];
        let (seed, seq) = ([rng.next_u64()], [rng.next_u64() >> 2]);
        let p = Params {
            t: t.to_vec(),
            tp: tp.to_vec(),
            tk: tk.to_vec(),
            mp: mp.to_vec(),
            ord: ord.to_vec(),
            seed: seed.to_vec(),
            seq: seq.to_vec(),
        };
        let (mut lp1, mut tok1) = (vec![0f32; nn], [0i32]);
        unsafe {
            k::process::cpu(
                0,
                Gm::new(&cand),
                n,
                Gm::new(&t),
                Gm::new(&tp),
                Gm::new(&tk),
                Gm::new(&mp),
                Gm::new(&ord),
                Gm::new_mut(&mut lp1),
            );
            k::draw::cpu(0, Gm::new(&lp1), Gm::new(&ids), n, Gm::new(&seed), Gm::new(&seq), Gm::new_mut(&mut tok1));
        }
        for i in (head as usize + 1..nn).rev() {
            let j = head as usize + rng.below(i - head as usize + 1);
            cand.swap(i, j);
            ids.swap(i, j);
        }
        let kk = rng.range(0, 6) as u32;
        let g = Groups::random(&mut rng, &ids, 1, nn, v);
        let (mut a, mut b) = (TailBufs::new(1, nn, kk as usize, 7), TailBufs::new(1, nn, kk as usize, 7));
        a.draw_head(0, &p, (&cand, &ids), n, head);
        // lp1 is in the sorted order; the head's columns are the same, the rest all -inf.
        let h = head as usize;
        assert_eq!(bits(&a.logprobs[..h]), bits(&lp1[..h]), "rep {rep}: head {head} of {n}");
        assert!(a.logprobs[h..].iter().all(|&x| x == f32::NEG_INFINITY), "rep {rep}: the rest is -inf");
        assert!(lp1[h..].iter().all(|&x| x == f32::NEG_INFINITY), "rep {rep}: top-k {} kept past the head", tk[0]);
        assert_eq!(a.fresh, tok1.to_vec(), "rep {rep}: token, head {head} of {n}");
        a.finalize_info_top(0, &g, (&cand, &ids), n, head, kk);
        b.draw_finish(0, &p, &g, (&cand, &ids), (n, head, kk));
        assert_eq!(b.bits(), a.bits(), "rep {rep}: process_draw_finish, head {head} of {n}");
        wide += (rest >= T) as usize;
    }
    assert!(wide >= 18, "{wide} rows with a rest of whole tiles");
}
