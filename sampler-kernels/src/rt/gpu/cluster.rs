//! Thread-block clusters (issue 22): `top_n_cluster`, one row's exact top-N
//! selected by the `C` CTAs of a cluster together (`#[kernel(cluster = ..)]`,
//! launched with a cluster dimension of `C`; a plain launch is a cluster of
//! one and gives the same results).
//!
//! Each CTA reads its slice of the row once into shared memory as u32 order
//! bits ([`crate::spec::cluster_slice`] logits), histogramming their top 11
//! bits on the way. An MSB-first radix select over those 32-bit order bits
//! then runs on the whole cluster: every CTA reads the others' histograms
//! through distributed shared memory (`ld.shared::cluster`), so all of them
//! find the same boundary digit, and the next digit is histogrammed over
//! the keys of that bin only; 11 + 11 + 10 bits, ending early once the
//! boundary bin holds exactly the keys still needed (bf16 logits after 22
//! bits: their widening leaves the low bits constant for a sign). Two ranks
//! are selected in the same passes: the row's `n`-th key and its `s`-th
//! (the end of the sorted prefix). A boundary value shared by more keys
//! than still needed is split by id: the CTAs hold id ranges in rank order
//! and each CTA's count of that value is read from its histogram, so each
//! takes its quota of the lowest ids (a block scan in position order).
//! Finally every CTA sends its kept keys to the leader (rank 0): the prefix
//! keys into one buffer, the rest into another, at offsets taken with one
//! remote atomic per CTA; the leader sorts the prefix and returns the tiles.
//!
//! Exact by construction (no sample, no fallback): the kept set is the `n`
//! largest unique (order bits, id) keys, as `top_n_counted`.

use super::super::math::{key_of_bits, order_bits, order_is_bad, NEG_INF_ORDER};
use super::block::{block_excl_scan, block_fold};
use super::ptx::{
    atomc_add, cluster_rank, cluster_size, cluster_sync, dynamic_smem_bytes, ldc2, ldc32, lds32, lds64, mapa, misc,
    redc_add, reds_add, sh, stc64, sts128, sts32, sts64, sync,
};
use super::select::top_n_impl;
use super::sort::{bitonic_desc, split_keys};
use super::{Ctx, Source, Tile, SMEM_BASE, SORT_CAP};
use crate::spec::{cluster_slice, GPU_CLUSTER_HIST_BYTES};

/// Bins of each histogram (11-bit digits; the last digit has 10 bits).
const HB: u32 = 2048;
/// The digits, most significant first: pass `p`'s shift and bits
/// (21/11, 10/11, 0/10; arithmetic, not a table: a table indexed by a loop
/// variable would be a global load).
#[inline(always)]
fn digit(p: u32) -> (u32, u32) {
    match p {
        0 => (21, 11),
        1 => (10, 11),
        _ => (0, 10),
    }
}

// Words of the `misc` scratch (shared memory): the leader's counters, which
// the other CTAs update remotely, then this CTA's own values.
/// Leader: prefix keys placed so far.
const M_PREFIX: u32 = 16;
/// Leader: rest keys placed so far.
const M_REST: u32 = 17;
/// Leader: the row's bad and -inf logits.
const M_BAD: u32 = 18;
const M_NEG: u32 = 19;
/// This CTA's first prefix and rest slots (+0, +1).
const M_BASE: u32 = 20;
/// The boundary of selection j: bin, keys above it, keys in it (+3j).
const M_SEL: u32 = 24;
/// Selection j's boundary value: each rank's count of it (+16j + rank).
const M_RANKS: u32 = 32;

/// The pass of the radix select in progress, as [`settle`] needs it.
struct Pass {
    shift: u32,
    bits: u32,
    /// No digit follows (the last, or bf16 after 22 bits).
    last: bool,
    /// This thread's bins: `b0 .. b0 + per`.
    b0: u32,
    per: u32,
    ctas: u32,
}

/// Publishes `sel`'s boundary bin to `misc(m..m+3)` (bin, keys above it,
/// keys in it) if it is one of this thread's bins `b0 .. b0 + per`, whose
/// counts are `g`; `above`: the keys in the bins of higher threads.
#[inline(always)]
fn publish(sel: &Sel, g: &[u32; 8], mut above: u32, m: u32, b0: u32, per: u32) {
    if sel.done {
        return;
    }
    for kk in 0..8 {
        let k = 7 - kk;
        if (k as u32) < per {
            let cnt = g[k];
            if above < sel.need && sel.need <= above + cnt {
                sts32(misc(m), b0 + k as u32);
                sts32(misc(m + 1), above);
                sts32(misc(m + 2), cnt);
            }
            above += cnt;
        }
    }
}

/// Takes the boundary [`publish`] wrote at `misc(m..)` into `sel`: the
/// selection ends when its bin holds exactly the keys still needed, or
/// after the last digit (a value shared by more keys than needed: its
/// owner thread then copies every rank's count of it from the histogram at
/// `hist` to `misc(ranks..)`, and the caller syncs). Returns whether it did.
#[inline(always)]
fn settle(sel: &mut Sel, m: u32, ranks: u32, hist: u64, at: &Pass) -> bool {
    if sel.done {
        return false;
    }
    let (b, above, cnt) = (lds32(misc(m)), lds32(misc(m + 1)), lds32(misc(m + 2)));
    sel.need -= above;
    sel.pre = (sel.pre << at.bits) | b;
    if cnt == sel.need {
        // Every key of the bin is kept.
        sel.done = true;
        sel.thr = sel.pre << at.shift;
        return false;
    }
    if !at.last {
        return false;
    }
    // One value (bf16 after 22 bits: the bits below are its sign's): split by id.
    sel.done = true;
    sel.ties = true;
    let shift = at.shift;
    let fill = if shift == 0 || (sel.pre >> (31 - shift)) & 1 == 1 { 0 } else { (1u32 << shift) - 1 };
    sel.thr = (sel.pre << shift) | fill;
    if b >= at.b0 && b < at.b0 + at.per {
        let mut r = 0u32;
        while r < at.ctas {
            sts32(misc(ranks + r), ldc32(mapa(hist + 4 * b as u64, r)));
            r += 1;
        }
    }
    true
}

/// This CTA's (rank `q`) share of `sel`'s boundary value: `(all, quota)`,
/// all of its keys of that value, or the `quota` of them with the lowest
/// ids (the ranks before it take theirs first), from the per-rank counts at
/// `misc(ranks..)`. `(true, 0)` when the selection has no split value.
#[inline(always)]
fn share_of(sel: &Sel, ranks: u32, q: u32) -> (bool, u32) {
    if !sel.ties {
        return (true, 0);
    }
    let mut before = 0u32;
    let mut r = 0u32;
    while r < q {
        before += lds32(misc(ranks + r));
        r += 1;
    }
    let mine = lds32(misc(ranks + q));
    let take = if sel.need > before { (sel.need - before).min(mine) } else { 0 };
    (take == mine, take)
}

/// One of the two ranks selected together.
#[derive(Clone, Copy)]
struct Sel {
    /// Digits decided so far.
    pre: u32,
    /// Keys still needed at or below the decided prefix.
    need: u32,
    done: bool,
    /// Once done: keys with order bits above `thr` are kept; keys equal to
    /// it all (`!ties`) or the `need` of them with the lowest ids (`ties`).
    thr: u32,
    ties: bool,
}

/// The `n` largest logits of the row at `buf[off..off+v]` (ties by lower
/// id), with the row's bad and finite counts, selected by the CTAs of this
/// CTA's cluster together; every CTA of the cluster calls it. The leader
/// (rank 0) gets the tiles, the first `min(sorted, n)` in the order of
/// SAMPLER.md 3.6 and the rest in no fixed order (`sorted >= n`: all
/// sorted), the counts, and how many CTAs selected the row (the cluster's
/// size; 0 when the leader selected it alone: a launch without the shared
/// memory of [`crate::spec::gpu_cluster_bytes`], or an `n` above the tile);
/// the other CTAs get empty tiles and zeros.
#[inline(always)]
pub fn top_n_cluster<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
    sorted: u32,
) -> (Tile<f32, I>, Tile<i32, I>, u32, u32, u32) {
    let cap = if Ctx::<TH, I>::CAP < SORT_CAP { Ctx::<TH, I>::CAP } else { SORT_CAP };
    let n = n.min(v);
    let ctas = cluster_size();
    let q = cluster_rank();
    let slice_len = cluster_slice(v, ctas);
    let keybuf = sh() + SMEM_BASE as u64;
    let pbuf = keybuf + 8 * cap as u64;
    let hists = pbuf + 8 * cap as u64;
    let slice = hists + GPU_CLUSTER_HIST_BYTES as u64;
    let need_bytes = (slice - sh()) as u32 + 4 * slice_len;
    let th = TH as u32;
    let empty = || (Tile { v: [0f32; I], n: 0 }, Tile { v: [0i32; I], n: 0 }, 0u32, 0u32, 0u32);
    // Cluster-uniform: every CTA of the cluster has the same launch shape.
    if n == 0 || n > cap || TH % 32 != 0 || !(256..=HB).contains(&th) || ctas > 16 || dynamic_smem_bytes() < need_bytes
    {
        if q != 0 {
            return empty();
        }
        let (x, id, (bad, fin)) = top_n_impl::<TH, I, true>(c, buf, off, v, n);
        return (x, id, bad, fin, 0);
    }
    let tid = c.tid;
    let start = (q * slice_len).min(v);
    let len = slice_len.min(v - start);
    // Nothing remote touches this CTA's histograms or counters before the
    // first cluster barrier.
    let mut i = tid;
    while i < 5 * HB {
        sts32(hists + 4 * i as u64, 0);
        i += th;
    }
    if tid < 4 {
        sts32(misc(M_PREFIX + tid), 0);
    }
    sync();
    let (bad, neg) = match buf.as_f32() {
        Some(g) => load_slice(c, g, off + start as u64, len, slice, hists),
        None => load_slice(c, buf, off + start as u64, len, slice, hists),
    };
    let both = block_fold(c, ((bad as u64) << 32) | neg as u64, |a, b| a.wrapping_add(b));
    cluster_sync();
    if tid == 0 {
        redc_add(mapa(misc(M_BAD), 0), (both >> 32) as u32);
        redc_add(mapa(misc(M_NEG), 0), both as u32);
    }

    let s = sorted.min(n);
    let two = s > 0 && s < n;
    let fresh = |need: u32, done: bool| Sel { pre: 0, need, done, thr: 0, ties: false };
    // Two selections, as two variables (an array indexed in a loop would live
    // in local memory): the n-th key (0) and the end of the sorted prefix (1).
    let mut s0 = fresh(n, false);
    let mut s1 = fresh(s, !two);
    let flat = buf.flat_bits();
    let hist = |h: u32| hists + (4 * HB * h) as u64;
    let per = HB / th;
    let b0 = tid * per;
    let mut p = 0u32;
    while p < 3 && !(s0.done && s1.done) {
        let (shift, bits) = digit(p);
        // This pass's histograms: the first digit's is shared; later ones
        // are selection 1's own once its prefix differs from selection 0's.
        let h0 = if p == 0 { 0 } else { 2 * p - 1 };
        let share = p == 0 || (!s0.done && s1.pre == s0.pre);
        let h1 = if share { h0 } else { 2 * p };
        let own1 = !share && !s1.done;
        if p > 0 {
            let above = shift + bits;
            let mask = (1u32 << bits) - 1;
            let (a0, pre0, pre1) = (!s0.done, s0.pre, s1.pre);
            for_each_key(c, len, slice, |_, u| {
                let d = 4 * ((u >> shift) & mask) as u64;
                if a0 && (u >> above) == pre0 {
                    reds_add(hist(h0) + d, 1);
                }
                if own1 && (u >> above) == pre1 {
                    reds_add(hist(h1) + d, 1);
                }
            });
            cluster_sync();
        }
        // Every rank's counts of this thread's bins (remote loads, four
        // ranks in flight; `per` is a constant of the variant).
        let mut g0 = [0u32; 8];
        let mut g1 = [0u32; 8];
        let mut r0 = 0u32;
        while r0 < ctas {
            for kh in 0..4 {
                let k = 2 * kh;
                if (k as u32) < per {
                    let sum4 = |a: u64| {
                        let l = |d: u32| if r0 + d < ctas { ldc2(mapa(a, r0 + d)) } else { [0, 0] };
                        let (x0, x1, x2, x3) = (l(0), l(1), l(2), l(3));
                        (x0[0] + x1[0] + x2[0] + x3[0], x0[1] + x1[1] + x2[1] + x3[1])
                    };
                    let (e, o) = sum4(hist(h0) + 4 * (b0 + k as u32) as u64);
                    g0[k] += e;
                    g0[k + 1] += o;
                    if own1 {
                        let (e, o) = sum4(hist(h1) + 4 * (b0 + k as u32) as u64);
                        g1[k] += e;
                        g1[k + 1] += o;
                    }
                }
            }
            r0 += 4;
        }
        if !own1 {
            g1 = g0;
        }
        let (mut own0, mut own_1) = (0u32, 0u32);
        for k in 0..8 {
            if (k as u32) < per {
                own0 += g0[k];
                own_1 += g1[k];
            }
        }
        // Keys in the bins of the threads above this one (both selections, packed).
        let packed = ((own_1 as u64) << 32) | own0 as u64;
        let (excl, total) = block_excl_scan(c, packed);
        let higher = total - excl - packed;
        publish(&s0, &g0, higher as u32, M_SEL, b0, per);
        publish(&s1, &g1, (higher >> 32) as u32, M_SEL + 3, b0, per);
        sync();
        let last = p == 2 || (p == 1 && flat >= digit(1).0);
        let at = Pass { shift, bits, last, b0, per, ctas };
        let tie0 = settle(&mut s0, M_SEL, M_RANKS, hist(h0), &at);
        let tie1 = settle(&mut s1, M_SEL + 3, M_RANKS + 16, hist(h1), &at);
        if tie0 || tie1 {
            sync();
        }
        p += 1;
    }

    // This CTA's share of each selection's boundary value: all of its keys
    // of that value, none, or (`partial`) its quota of their lowest ids.
    let (all0, quota0) = share_of(&s0, M_RANKS, q);
    let (all1, quota1) = if two { share_of(&s1, M_RANKS + 16, q) } else { (true, 0) };
    let partial = (!all0 && quota0 > 0) || (!all1 && quota1 > 0);
    let (t0, t1) = (s0.thr, s1.thr);
    // (kept, in the sorted prefix) of a key whose value ties `tr` keys
    // of this CTA before it (per selection, counted only when `partial`).
    let keep = |u: u32, tr: (u32, u32)| {
        let k0 = u > t0 || (u == t0 && (all0 || tr.0 < quota0));
        let k1 = u > t1 || (u == t1 && (all1 || tr.1 < quota1));
        (k0, if two { k1 } else { s == n && k0 })
    };
    let next = |u: u32, tr: (u32, u32)| (tr.0 + (u == t0) as u32, tr.1 + (u == t1) as u32);
    // The ranks of ties need the keys in position order: each thread then
    // walks a contiguous run (else the strided order, conflict-free).
    let per_thread = len.div_ceil(th);
    let (first, step) = if partial { (tid * per_thread, 1) } else { (tid, th) };
    let mut tbase = (0u32, 0u32);
    if partial {
        let (c0, c1) = walk(first, step, per_thread, len, slice, (0u32, 0u32), |t, _, u| next(u, t));
        let (ex, _) = block_excl_scan(c, ((c1 as u64) << 32) | c0 as u64);
        tbase = (ex as u32, (ex >> 32) as u32);
    }
    // (prefix keys, rest keys, tie ranks) of this thread.
    let (np, nr, _) = walk(first, step, per_thread, len, slice, (0u32, 0u32, tbase), |(np, nr, tr), _, u| {
        let (k, pre) = keep(u, tr);
        (np + pre as u32, nr + (k && !pre) as u32, next(u, tr))
    });
    let (ex, tot) = block_excl_scan(c, ((np as u64) << 32) | nr as u64);
    if tid == 0 {
        let (tp, tq) = ((tot >> 32) as u32, tot as u32);
        let bp = if tp > 0 { atomc_add(mapa(misc(M_PREFIX), 0), tp) } else { 0 };
        let bq = if tq > 0 { atomc_add(mapa(misc(M_REST), 0), tq) } else { 0 };
        sts32(misc(M_BASE), bp);
        sts32(misc(M_BASE + 1), bq);
    }
    sync();
    let pp = lds32(misc(M_BASE)) + (ex >> 32) as u32;
    let pq = lds32(misc(M_BASE + 1)) + ex as u32;
    walk(first, step, per_thread, len, slice, (pp, pq, tbase), |(pp, pq, tr), i, u| {
        let (k, pre) = keep(u, tr);
        let key = key_of_bits(u, start + i);
        if pre {
            stc64(mapa(pbuf + 8 * pp as u64, 0), key);
        } else if k {
            stc64(mapa(keybuf + 8 * pq as u64, 0), key);
        }
        (pp + pre as u32, pq + (k && !pre) as u32, next(u, tr))
    });
    // Every key and count has reached the leader; no CTA touches another's
    // shared memory after this.
    cluster_sync();
    if q != 0 {
        return empty();
    }
    let sp = if two {
        s
    } else if s == n {
        n
    } else {
        0
    };
    if sp > 1 {
        let p2 = sp.next_power_of_two();
        let mut i = sp + tid;
        while i < p2 {
            sts64(pbuf + 8 * i as u64, 0);
            i += th;
        }
        sync();
        bitonic_desc(c, pbuf, p2);
    }
    let mut out = [0u64; I];
    for (j, o) in out.iter_mut().enumerate() {
        let e = c.idx(j);
        if e < n {
            *o = if e < sp { lds64(pbuf + 8 * e as u64) } else { lds64(keybuf + 8 * (e - sp) as u64) };
        }
    }
    let (bad, neg) = (lds32(misc(M_BAD)), lds32(misc(M_NEG)));
    sync();
    let (x, id) = split_keys(&Tile { v: out, n });
    (x, id, bad, v - neg, ctas)
}

/// Folds `st = f(st, position, order bits)` over positions `first + k *
/// step`, `k < count`, below `len` of the slice at `slice`, four loads in
/// flight.
#[inline(always)]
fn walk<S: Copy>(
    first: u32,
    step: u32,
    count: u32,
    len: u32,
    slice: u64,
    mut st: S,
    f: impl Fn(S, u32, u32) -> S,
) -> S {
    let mut k = 0u32;
    while k < count {
        let at = |d: u32| first + (k + d) * step;
        let ld = |d: u32| if k + d < count && at(d) < len { lds32(slice + 4 * at(d) as u64) } else { 0 };
        let (u0, u1, u2, u3) = (ld(0), ld(1), ld(2), ld(3));
        // The state goes by value (captured counters would live in local
        // memory), four calls rather than a loop over an array of pairs.
        let g = |st: S, d: u32, u: u32| if k + d < count && at(d) < len { f(st, at(d), u) } else { st };
        st = g(st, 0, u0);
        st = g(st, 1, u1);
        st = g(st, 2, u2);
        st = g(st, 3, u3);
        k += 4;
    }
    st
}

/// [`walk`] over this thread's strided positions of the whole slice.
#[inline(always)]
fn for_each_key<const TH: usize, const I: usize>(c: &Ctx<TH, I>, len: u32, slice: u64, f: impl Fn(u32, u32)) {
    walk(c.tid, TH as u32, len.div_ceil(TH as u32), len, slice, (), |_, i, u| f(i, u))
}

/// Reads `buf[off..off+len]` once (16-byte non-caching loads of f32, four
/// in flight per thread) into the slice at `slice` as u32 order bits,
/// counts each key into the first digit's histogram at `h0`, and returns
/// this thread's (bad, -inf) counts.
#[inline(always)]
fn load_slice<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    len: u32,
    slice: u64,
    h0: u64,
) -> (u32, u32) {
    let tid = c.tid;
    let th = TH as u32;
    let (mut bad, mut neg) = (0u32, 0u32);
    let mut count = |u: u32| {
        reds_add(h0 + 4 * (u >> digit(0).0) as u64, 1);
        bad += order_is_bad(u) as u32;
        neg += (u == NEG_INF_ORDER) as u32;
    };
    // Head logits up to the first aligned quad, whole quads, tail.
    let mut h = 0u32;
    while h < 4 && h < len && !buf.quad_aligned(off + h as u64) {
        h += 1;
    }
    let groups = if h < 4 { (len - h.min(len)) / 4 } else { 0 };
    let h = if h < 4 { h } else { len };
    let body = h + 4 * groups;
    let mut i = tid;
    while i < h {
        let u = order_bits(buf.read(off + i as u64));
        sts32(slice + 4 * i as u64, u);
        count(u);
        i += th;
    }
    let mut i = body + tid;
    while i < len {
        let u = order_bits(buf.read(off + i as u64));
        sts32(slice + 4 * i as u64, u);
        count(u);
        i += th;
    }
    let qoff = off + h as u64;
    let mut g0 = 0u32;
    while g0 < groups {
        let ld = |j: u32| {
            let g = g0 + j * th + tid;
            if g < groups {
                // SAFETY: g < groups: a whole, aligned quad of the slice.
                Some(unsafe { buf.quad_stream(qoff + 4 * g as u64) })
            } else {
                None
            }
        };
        let (q0, q1, q2, q3) = (ld(0), ld(1), ld(2), ld(3));
        let mut put = |j: u32, qv: Option<[f32; 4]>| {
            if let Some(x) = qv {
                let g = g0 + j * th + tid;
                let u = [order_bits(x[0]), order_bits(x[1]), order_bits(x[2]), order_bits(x[3])];
                let at = slice + 4 * (h + 4 * g) as u64;
                if h == 0 {
                    sts128(at, u);
                } else {
                    for (e, &ue) in u.iter().enumerate() {
                        sts32(at + 4 * e as u64, ue);
                    }
                }
                for &ue in u.iter() {
                    count(ue);
                }
            }
        };
        put(0, q0);
        put(1, q1);
        put(2, q2);
        put(3, q3);
        g0 += 4 * th;
    }
    (bad, neg)
}
