//! Thread-block clusters (issue 22): `top_n_cluster`, one row's exact top-N
//! selected by the `C` CTAs of a cluster together (`#[kernel(cluster = ..)]`,
//! launched with a cluster dimension of `C`; a plain launch is a cluster of
//! one and gives the same results).
//!
//! Each CTA reads its slice of the row once into shared memory as u32 order
//! bits ([`crate::spec::cluster_slice`] logits), histogramming their top 11
//! bits on the way. An MSB-first radix select over those 32-bit order bits
//! then runs on the whole cluster: each CTA adds the nonzero bins of its
//! histogram into the leader's (rank 0) through distributed shared memory
//! (`red.shared::cluster`) and each chunk's total (64 bins) into the
//! leader's chunk totals; after one cluster barrier two warps of every CTA
//! find each selection's boundary bin from those (one remote read of the
//! chunk totals, one of the chunk that holds the boundary), and the next
//! digit is histogrammed over the keys of that bin only; 11 + 11 + 10
//! bits, ending early once the boundary bin holds exactly the keys still
//! needed (bf16 logits after 22 bits: their widening leaves the low bits
//! constant for a sign). Two ranks are selected in the
//! same passes: the row's `n`-th key and its `s`-th (the end of the sorted
//! prefix). A boundary value shared by more keys than still needed is split
//! by id: the CTAs hold id ranges in rank order and each CTA reads the
//! lower ranks' counts of that value from their own histograms, so each
//! takes its quota of the lowest ids (a block scan in position order).
//! Finally every CTA sends its kept keys to the leader: the prefix keys into
//! one buffer, the rest into another, at offsets taken with one remote
//! atomic per CTA; the leader sorts the prefix and returns the tiles.
//!
//! Exact by construction (no sample, no fallback): the kept set is the `n`
//! largest unique (order bits, id) keys, as `top_n_counted`.

use super::super::math::{key_of_bits, order_bits, order_is_bad, NEG_INF_ORDER};
use super::block::block_excl_scan;
use super::ptx::{
    atomc_add, cluster_arrive, cluster_arrive_relaxed, cluster_rank, cluster_size, cluster_wait, dynamic_smem_bytes,
    fence_cluster, ldc32, lds128, lds32, lds64, mapa, misc, redc_add, reds_add, reds_add_if, sh, stc64, sts128, sts32,
    sts64, sync, MISC_WORDS,
};
use super::select::top_n_impl;
use super::sort::{bitonic_desc, split_keys};
use super::warp::{ballot, shfl_down32, shfl_idx32, warp_claim};
use super::{Ctx, Source, Tile, SMEM_BASE, SORT_CAP};
use crate::spec::{cluster_slice, GPU_CLUSTER_HIST_BYTES};

/// Bins of each histogram (11-bit digits; the last digit has 10 bits).
const HB: u32 = 2048;
/// The histograms: this CTA's own (`L`, five) and the leader's merged ones
/// (`M`, five, at `L + MERGED`): index 0 the first digit's (both ranks),
/// then `2p - 1` / `2p` the digit of pass `p` for each rank. Only the
/// leader's `M` are added into; after the passes each CTA stages its kept
/// keys in its own `M`.
const MERGED: u32 = 5;
/// Chunks of 64 bins a histogram: the leader also keeps each chunk's
/// total, so every CTA finds a boundary with two small remote reads.
const CHUNKS: u32 = HB / 64;
/// Keys (u64) the merged histograms hold once the passes are over: this
/// CTA's kept keys are staged there (at most `n`, at most the tile).
const STAGE_KEYS: u32 = MERGED * HB / 2;
/// Below this N the classification walk votes once a quad and skips a
/// warp's claims when none of its keys is kept (see `top_n_cluster`).
const VOTE_MAX_N: u32 = 1024;
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

// Words of the `misc` scratch (shared memory).
/// Leader: prefix keys placed so far.
const M_PREFIX: u32 = 16;
/// Leader: rest keys placed so far.
const M_REST: u32 = 17;
/// Leader: the row's bad and -inf logits.
const M_BAD: u32 = 18;
const M_NEG: u32 = 19;
/// This CTA's bad and -inf logits.
const M_LBAD: u32 = 20;
const M_LNEG: u32 = 21;
/// This CTA's first prefix and rest slots (+0, +1).
const M_BASE: u32 = 22;
/// The boundary of selection j in pass p, found by warp j of this CTA: bin,
/// keys above it, keys in it (+6p + 3j).
const M_SEL: u32 = 64;
/// This CTA's kept keys staged so far: prefix, rest.
const M_LP: u32 = 30;
const M_LQ: u32 = 31;
/// Selection j's boundary value: each rank's count of it (+16j + rank).
const M_RANKS: u32 = 32;
// The words above fit `misc` without overlapping (pass p < 3, 16 ranks).
const _: () = assert!(M_LQ < M_RANKS && M_RANKS + 32 <= M_SEL && M_SEL + 6 * 2 + 6 <= MISC_WORDS);

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
/// memory of [`crate::spec::gpu_cluster_bytes`], or an `n` above the tile
/// or above the 5120 keys a CTA can stage: no cluster variant's tile is);
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
    c.before_read();
    let cap = if Ctx::<TH, I>::CAP < SORT_CAP { Ctx::<TH, I>::CAP } else { SORT_CAP };
    let n = n.min(v);
    let ctas = cluster_size();
    let q = cluster_rank();
    let slice_len = cluster_slice(v, ctas);
    let keybuf = sh() + SMEM_BASE as u64;
    let pbuf = keybuf + 8 * cap as u64;
    let hists = pbuf + 8 * cap as u64;
    let slice = hists + GPU_CLUSTER_HIST_BYTES as u64;
    // In u64: a slice of 2^30 logits must not wrap into a small size.
    let need_bytes = (slice - sh()) + 4 * slice_len as u64;
    let th = TH as u32;
    let empty = || (Tile { v: [0f32; I], n: 0 }, Tile { v: [0i32; I], n: 0 }, 0u32, 0u32, 0u32);
    // Cluster-uniform: every CTA of the cluster has the same launch shape.
    if n == 0
        || n > cap
        || n > STAGE_KEYS
        || TH % 32 != 0
        || !th.is_power_of_two()
        || !(256..=HB).contains(&th)
        || ctas > 16
        || (dynamic_smem_bytes() as u64) < need_bytes
    {
        if q != 0 {
            return empty();
        }
        let (x, id, (bad, fin)) = top_n_impl::<TH, I, true>(c, buf, off, v, n);
        return (x, id, bad, fin, 0);
    }
    let tid = c.tid;
    let (lane, warp) = (tid & 31, tid >> 5);
    let start = (q * slice_len).min(v);
    let len = slice_len.min(v - start);
    // Nothing remote touches this CTA's histograms or counters before the
    // cluster's first barrier, split around the load: its arrive releases
    // the zeroed memory, its wait comes before the first remote access.
    // Only the leader's merged histograms are ever added into (the other
    // CTAs' hold staged keys at the end): zeroed 16 bytes a store.
    let words = if q == 0 { 2 * MERGED * HB } else { MERGED * HB };
    let mut i = 4 * tid;
    while i < words {
        sts128(hists + 4 * i as u64, [0u32; 4]);
        i += 4 * th;
    }
    if tid < 16 {
        sts32(misc(M_PREFIX + tid), 0);
    }
    // The leader's chunk totals of histogram h (32 chunks of 64 bins), in
    // the radix histogram's room (unused here).
    let chunk = |h: u32, k: u32| super::ptx::hist(CHUNKS * h + k);
    if q == 0 && tid < MERGED * CHUNKS / 4 {
        sts128(chunk(0, 4 * tid), [0u32; 4]);
    }
    sync();
    cluster_arrive();
    let (bad, neg) = match buf.as_f32() {
        Some(g) => load_slice(c, g, off + start as u64, len, slice, hists),
        None => load_slice(c, buf, off + start as u64, len, slice, hists),
    };
    // This CTA's counts: one shared add a warp.
    let (bad, neg) = (warp_sum(bad), warp_sum(neg));
    if lane == 0 {
        reds_add(misc(M_LBAD), bad);
        reds_add(misc(M_LNEG), neg);
    }
    sync();
    cluster_wait();
    if tid == 0 {
        redc_add(mapa(misc(M_BAD), 0), lds32(misc(M_LBAD)));
        redc_add(mapa(misc(M_NEG), 0), lds32(misc(M_LNEG)));
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
            // Predicated adds: most keys match neither prefix.
            quads(tid, th, len, slice, false, (), |_, _, u, ok| {
                let d = 4 * ((u >> shift) & mask) as u64;
                reds_add_if(ok & a0 & ((u >> above) == pre0), hist(h0) + d, 1);
                reds_add_if(ok & own1 & ((u >> above) == pre1), hist(h1) + d, 1);
            });
            sync();
        }
        // This CTA's nonzero bins into the leader's merged histograms.
        let add = |to: u64, x: u32| {
            if q == 0 {
                reds_add(to, x);
            } else {
                redc_add(mapa(to, 0), x);
            }
        };
        // Whether this thread added any bin.
        let push = |h: u32| {
            let mut any = false;
            let mut sum = 0u32;
            for k in 0..8u32 {
                if k < per {
                    let at = 4 * (b0 + k) as u64;
                    let x = lds32(hist(h) + at);
                    if x != 0 {
                        add(hist(h + MERGED) + at, x);
                        any = true;
                    }
                    sum += x;
                }
            }
            // And the chunk's total (64 bins: `64 / per` lanes) into the
            // leader's chunk totals, by the chunk's first lane.
            let width = (64 / per).min(32);
            let mut d = width / 2;
            while d > 0 {
                sum += super::warp::shfl_xor32(sum, d);
                d /= 2;
            }
            if lane % width == 0 && sum != 0 {
                add(chunk(h, b0 / 64), sum);
                any = true;
            }
            any
        };
        let p0 = !s0.done && push(h0);
        let p1 = own1 && push(h1);
        // Only the threads that added release (their histogram writes came
        // before the block barrier after the walk, so the fence covers the
        // CTA's: the ranks' counts read below); the rest arrive relaxed.
        if p0 || p1 {
            fence_cluster();
        }
        cluster_arrive_relaxed();
        cluster_wait();
        // Every CTA finds the boundaries itself (warp j selection j's) in
        // the leader's chunk totals and merged histograms: no leader-only
        // search, no second cluster barrier.
        if warp < 2 {
            let (sj, h) = if warp == 0 { (s0, h0) } else { (s1, h1) };
            if !sj.done {
                let (b, above, cnt) = warp_boundary(lane, chunk(h, 0), hist(h + MERGED), sj.need);
                if lane == 0 {
                    let m = M_SEL + 6 * p + 3 * warp;
                    sts32(misc(m), b);
                    sts32(misc(m + 1), above);
                    sts32(misc(m + 2), cnt);
                }
            }
        }
        sync();
        let last = p == 2 || (p == 1 && flat >= digit(1).0);
        let tie0 = settle(&mut s0, M_SEL + 6 * p, shift, bits, last);
        let tie1 = settle(&mut s1, M_SEL + 6 * p + 3, shift, bits, last);
        // A split value: lane r of warp 0 (of warp 1 for selection 1) copies
        // rank r's count of its bin (their own histograms), the remote loads
        // in flight together.
        if ((tie0 && warp == 0) || (tie1 && warp == 1)) && lane < ctas {
            let m = M_SEL + 6 * p + 3 * warp;
            let (ranks, h) = if warp == 0 { (M_RANKS, h0) } else { (M_RANKS + 16, h1) };
            let at = hist(h) + 4 * lds32(misc(m)) as u64;
            sts32(misc(ranks + lane), ldc32(mapa(at, lane)));
        }
        if tie0 || tie1 {
            sync();
        }
        p += 1;
    }

    // The leader stages its keys in its merged histograms, which warps 0
    // and 1 of every CTA read until they have the last pass's boundaries:
    // their fence orders those reads (and the ties' reads of the ranks' own
    // histograms) before the arrive, and every CTA waits before staging.
    if warp < 2 {
        fence_cluster();
    }
    cluster_arrive_relaxed();
    // This CTA's share of each selection's boundary value: all of its keys
    // of that value, none, or (`partial`) its quota of their lowest ids.
    let (all0, quota0) = share_of(&s0, M_RANKS, q);
    let (all1, quota1) = if two { share_of(&s1, M_RANKS + 16, q) } else { (true, 0) };
    let (part0, part1) = (!all0 && quota0 > 0, !all1 && quota1 > 0);
    let partial = part0 || part1;
    let (t0, t1) = (s0.thr, s1.thr);
    // Keys at or above `lo` are kept (the boundary value's too when all of
    // this CTA's are), and a partial boundary value's first `quota` by id.
    let lo = |t: u32, all: bool| t as u64 + (!all) as u64;
    let (lo0, lo1) = (lo(t0, all0), lo(t1, all1));
    // (kept, in the sorted prefix) of a key whose value ties `tr` keys
    // of this CTA before it (per selection, counted only when `partial`).
    let keep = |u: u32, tr: (u32, u32)| {
        let k0 = u as u64 >= lo0 || (part0 && u == t0 && tr.0 < quota0);
        let k1 = u as u64 >= lo1 || (part1 && u == t1 && tr.1 < quota1);
        (k0, if two { k1 } else { s == n && k0 })
    };
    let next = |u: u32, tr: (u32, u32)| (tr.0 + (u == t0) as u32, tr.1 + (u == t1) as u32);
    // The ranks of ties need the keys in position order: each thread then
    // walks a contiguous run of quads (else the strided quads, conflict-free).
    let mut tbase = (0u32, 0u32);
    if partial {
        let (c0, c1) = quads(tid, th, len, slice, true, (0u32, 0u32), |t, _, u, ok| if ok { next(u, t) } else { t });
        let (ex, _) = block_excl_scan(c, ((c1 as u64) << 32) | c0 as u64);
        tbase = (ex as u32, (ex >> 32) as u32);
    }
    cluster_wait();
    // One walk stages this CTA's kept keys in its merged histograms (free
    // once the passes are over): prefix keys from the bottom, the rest
    // from the top, slots claimed a warp at a time.
    let stage = hist(MERGED);
    let top = stage + 8 * STAGE_KEYS as u64;
    let cls = |u: u32, ok: bool, tr: (u32, u32)| if ok { keep(u, tr) } else { (false, false) };
    let adv = |u: u32, ok: bool, tr: (u32, u32)| if ok && partial { next(u, tr) } else { tr };
    let put = |u: u32, i: u32, (k, pre): (bool, bool)| {
        let at = warp_claim(tid, pre, M_LP);
        if pre {
            sts64(stage + 8 * at as u64, key_of_bits(u, start + i));
        }
        let rest = k && !pre;
        let at = warp_claim(tid, rest, M_LQ);
        if rest {
            sts64(top - 8 * (at as u64 + 1), key_of_bits(u, start + i));
        }
    };
    if n < VOTE_MAX_N {
        // Few kept keys (force top-k off's prefix path): most quads of a
        // warp keep nothing, and one vote skips their claims (run 49: the
        // claims on every key cost more at N = 1024 / 4096 than the vote saves).
        // The vote reads only `k`: a key of the sorted prefix is always kept
        // (the prefix's s <= n keys are the top of the n kept ones).
        quad_fold(tid, th, len, slice, partial, tbase, |tr, i, q, nv| {
            let c0 = cls(q[0], nv > 0, tr);
            let tr = adv(q[0], nv > 0, tr);
            let c1 = cls(q[1], nv > 1, tr);
            let tr = adv(q[1], nv > 1, tr);
            let c2 = cls(q[2], nv > 2, tr);
            let tr = adv(q[2], nv > 2, tr);
            let c3 = cls(q[3], nv > 3, tr);
            let tr = adv(q[3], nv > 3, tr);
            if ballot(c0.0 || c1.0 || c2.0 || c3.0) != 0 {
                put(q[0], i, c0);
                put(q[1], i + 1, c1);
                put(q[2], i + 2, c2);
                put(q[3], i + 3, c3);
            }
            tr
        });
    } else {
        quads(tid, th, len, slice, partial, tbase, |tr, i, u, ok| {
            put(u, i, cls(u, ok, tr));
            adv(u, ok, tr)
        });
    }
    sync();
    // Then into the leader's buffers at offsets from one remote atomic each.
    let (tp, tq) = (lds32(misc(M_LP)), lds32(misc(M_LQ)));
    if tid == 0 {
        let bp = if tp > 0 { atomc_add(mapa(misc(M_PREFIX), 0), tp) } else { 0 };
        let bq = if tq > 0 { atomc_add(mapa(misc(M_REST), 0), tq) } else { 0 };
        sts32(misc(M_BASE), bp);
        sts32(misc(M_BASE + 1), bq);
    }
    sync();
    let (bp, bq) = (lds32(misc(M_BASE)), lds32(misc(M_BASE + 1)));
    let mut i = tid;
    while i < tp {
        stc64(mapa(pbuf + 8 * (bp + i) as u64, 0), lds64(stage + 8 * i as u64));
        i += th;
    }
    let mut i = tid;
    while i < tq {
        stc64(mapa(keybuf + 8 * (bq + i) as u64, 0), lds64(top - 8 * (i as u64 + 1)));
        i += th;
    }
    // Every key and count has reached the leader (released by the threads
    // that sent any: thread 0 sent the bad / -inf counts, whether or not
    // this CTA keeps a key); no CTA touches another's shared memory after this.
    if tid == 0 || tid < tp || tid < tq {
        fence_cluster();
    }
    cluster_arrive_relaxed();
    cluster_wait();
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

/// Takes the boundary the leader wrote at `misc(m..m+3)` (bin, keys above
/// it, keys in it) into `sel`: the selection ends when its bin holds exactly
/// the keys still needed, or after the `last` digit with a value shared by
/// more keys than needed (bf16 after 22 bits: the bits below are its
/// sign's), split by id. Returns whether it ended that way.
#[inline(always)]
fn settle(sel: &mut Sel, m: u32, shift: u32, bits: u32, last: bool) -> bool {
    if sel.done {
        return false;
    }
    let (b, above, cnt) = (lds32(misc(m)), lds32(misc(m + 1)), lds32(misc(m + 2)));
    sel.need -= above;
    sel.pre = (sel.pre << bits) | b;
    if cnt == sel.need {
        // Every key of the bin is kept.
        sel.done = true;
        sel.thr = sel.pre << shift;
        return false;
    }
    if !last {
        return false;
    }
    sel.done = true;
    sel.ties = true;
    let fill = if shift == 0 || (sel.pre >> (31 - shift)) & 1 == 1 { 0 } else { (1u32 << shift) - 1 };
    sel.thr = (sel.pre << shift) | fill;
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

/// Warp-wide: the boundary of the `need`-th largest key (`need >= 1`, at
/// most the keys counted) in the leader's 2048-bin merged histogram at `h`
/// with its 32 chunk totals at `chunks` (this CTA's addresses of them; read
/// remotely), bins ranked from the top: (bin, keys in the bins above it,
/// keys in it), on every lane. Lane l reads chunk l's total; the chunk
/// holding the boundary is split over the lanes two bins each. Every lane
/// of the warp calls it.
#[inline(always)]
fn warp_boundary(lane: u32, chunks: u64, h: u64, need: u32) -> (u32, u32, u32) {
    let t = ldc32(mapa(chunks + 4 * lane as u64, 0));
    // Keys in this lane's chunk and every higher one.
    let incl = suffix_sum(t, lane, 32);
    let hit = ballot(incl - t < need && need <= incl);
    let l = hit.trailing_zeros();
    let ab = shfl_idx32(incl - t, l);
    // Chunk l's bins 2 lane, 2 lane + 1.
    let b = 64 * l + 2 * lane;
    let at = mapa(h + 4 * b as u64, 0);
    let (x, y) = (ldc32(at), ldc32(at + 4));
    let s = x + y;
    let above = ab + suffix_sum(s, lane, 32) - s;
    let hit = ballot(above < need && need <= above + s);
    let m = hit.trailing_zeros();
    // In lane m: the higher bin first.
    let (bin, ab, cnt) = if need <= above + y { (b + 1, above, y) } else { (b, above + y, x) };
    (shfl_idx32(bin, m), shfl_idx32(ab, m), shfl_idx32(cnt, m))
}

/// `x` summed over this lane and the `width - 1` lanes above it (fewer at
/// the warp's top), `width` a power of two; every lane calls it together.
#[inline(always)]
fn suffix_sum(mut x: u32, lane: u32, width: u32) -> u32 {
    let mut d = 1u32;
    while d < width {
        let y = shfl_down32(x, d, u32::MAX);
        if lane + d < 32 {
            x += y;
        }
        d *= 2;
    }
    x
}

/// The warp's sum of `x` on every lane.
#[inline(always)]
fn warp_sum(mut x: u32) -> u32 {
    let mut d = 16u32;
    while d > 0 {
        x += super::warp::shfl_xor32(x, d);
        d /= 2;
    }
    x
}

/// Folds `st = f(st, position, order bits, valid)` over this thread's
/// quads of the slice at `slice` (`len` keys, 16-byte loads): the strided
/// quads `tid + k * th`, or (`contiguous`) a run of whole quads per thread
/// in position order. Every lane makes the same calls (four a quad, `valid`
/// false past `len`), so `f` may use warp votes.
#[inline(always)]
fn quads<S: Copy>(
    tid: u32,
    th: u32,
    len: u32,
    slice: u64,
    contiguous: bool,
    st: S,
    f: impl Fn(S, u32, u32, bool) -> S,
) -> S {
    quad_fold(tid, th, len, slice, contiguous, st, |st, i, q, nv| {
        // Four calls, not a loop over the array (local memory).
        let st = f(st, i, q[0], nv > 0);
        let st = f(st, i + 1, q[1], nv > 1);
        let st = f(st, i + 2, q[2], nv > 2);
        f(st, i + 3, q[3], nv > 3)
    })
}

/// [`quads`] a quad at a time: `st = f(st, first position, quad, keys of
/// it below len)`, every lane making the same calls.
#[inline(always)]
fn quad_fold<S: Copy>(
    tid: u32,
    th: u32,
    len: u32,
    slice: u64,
    contiguous: bool,
    mut st: S,
    f: impl Fn(S, u32, [u32; 4], u32) -> S,
) -> S {
    let nq = len.div_ceil(4);
    let per = len.div_ceil(th).div_ceil(4);
    let (iters, first, step) = if contiguous { (per, tid * per, 1) } else { (nq.div_ceil(th), tid, th) };
    let mut k = 0u32;
    while k < iters {
        let g = first + k * step;
        let q = if g < nq { lds128(slice + 16 * g as u64) } else { [0u32; 4] };
        let i = 4 * g;
        let nv = if i < len { (len - i).min(4) } else { 0 };
        st = f(st, i, q, nv);
        k += 1;
    }
    st
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
