//! Selection: the radix select over 64-bit order keys, `top_n` (select,
//! then bitonic- or radix-sort chunk by chunk) and `top_n_set` (select, then ballots
//! place the kept keys in id order), with the shared-memory staging of a row;
//! `top_n_counted` / `top_n_set_counted` also count the range's bad and
//! finite logits from the staging histogram (no second read of the logits).

use super::super::math::{counts_from_bins, key_of_bits, order_bits, order_is_bad, order_key, NEG_INF_ORDER};
use super::block::{block_excl_scan, block_fold};
use super::ptx::{atoms_add, hist, lds32, lds64, misc, reds_add, sortbuf, stagebuf, sts128, sts32, sts64, sync};
use super::sort::{bitonic_desc, radix_desc, radix_fits, split_keys};
use super::warp::{ballot, match_any, shfl_idx32, shfl_up32, warp_claim, warp_hist_add};
use super::{Ctx, Gm, Source, Tile, SORT_CAP};

/// Keys loaded together per thread in the selection passes.
pub(super) const SEL_BATCH: usize = 8;

/// The smallest key of the `k` largest keys `< hi` (all keys when `!has_hi`)
/// among those `keys` yields, `1 <= k <=` their number; every thread gets it.
/// `keys(it)` is this thread's `it`-th key, `None` when it has none there.
#[inline(always)]
pub(super) fn radix_select<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    iters: u32,
    keys: &impl Fn(u32) -> Option<u64>,
    has_hi: bool,
    hi: u64,
    k: u32,
) -> u64 {
    radix_select_from(c, iters, keys, has_hi, hi, k, 56, 0, 0)
}

/// [`radix_select`] from the digit at bit `from` (a multiple of 8) down to
/// the digit at bit `last`, for keys that all share their bits above
/// `from + 8`. With `last > 0` the result is the k-th largest key with its
/// bits below `last` cleared: a bound with at least `k` keys at or above it.
/// `flat` ([`skips`]; 0 none; only with `from == 56` and `last` not a
/// skipped digit): the low order bits every key leaves constant for its
/// sign, set from the sign bit instead of counted, with the top digit of
/// `!id` when every id is below 2^24 ([`IDS24`]).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn radix_select_from<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    iters: u32,
    keys: &impl Fn(u32) -> Option<u64>,
    has_hi: bool,
    hi: u64,
    k: u32,
    from: u32,
    last: u32,
    flat: u32,
) -> u64 {
    let mut prefix = 0u64;
    let mut mask = 0u64;
    let mut rem = k;
    let mut shift = from;
    loop {
        let first = shift == 56;
        let mut b = c.tid as usize;
        while b < 256 {
            sts32(hist(b as u32), 0);
            b += TH;
        }
        sync();
        // Loads in batches of SEL_BATCH (independent, in flight together),
        // then one shared atomic per distinct digit and warp (match.any):
        // the high digits of similar logits hit few bins.
        let mut base = 0u32;
        while base < iters {
            let ld = |it: u32| if it < iters { keys(it) } else { None };
            let bin = |k: Option<u64>| match k {
                Some(key) if (!has_hi || key < hi) && (key & mask) == prefix => ((key >> shift) & 255) as u32,
                _ => 256u32,
            };
            // Hand-unrolled so the batch stays in registers.
            let (k0, k1, k2, k3) = (ld(base), ld(base + 1), ld(base + 2), ld(base + 3));
            let (k4, k5, k6, k7) = (ld(base + 4), ld(base + 5), ld(base + 6), ld(base + 7));
            // The top digit of similar logits hits few bins: aggregate per warp
            // (match.any costs about one step per distinct value). Later digits
            // spread over the bins: plain shared atomics.
            let add = |b: u32| {
                if first {
                    warp_hist_add(c.tid, b);
                } else if b < 256 {
                    reds_add(hist(b), 1);
                }
            };
            add(bin(k0));
            add(bin(k1));
            add(bin(k2));
            add(bin(k3));
            add(bin(k4));
            add(bin(k5));
            add(bin(k6));
            add(bin(k7));
            base += SEL_BATCH as u32;
        }
        sync();
        if c.tid < 32 {
            pick_bin(c.tid, hist(0), rem, misc(0));
        }
        sync();
        let (bk, cum, cnt) = (lds32(misc(0)), lds32(misc(1)), lds32(misc(2)));
        rem -= cum;
        prefix |= (bk as u64) << shift;
        mask |= 255u64 << shift;
        if cnt == rem || shift == last {
            return prefix;
        }
        if flat_next(shift, flat) {
            // The flat digits below: every key left has them, no pass, rem unchanged.
            prefix |= flat_fill(prefix, flat);
            mask |= flat_mask(flat);
            shift = flat_to(flat);
        } else {
            shift -= 8;
        }
    }
}

/// In a radix select's `flat` (with flat bits only): every key's id is below
/// 2^24, so the top digit of its `!id` ([`key_of_bits`]) is 0xff: set with
/// the flat digits, not counted (bf16 ties walk one id digit fewer).
pub(super) const IDS24: u32 = 1 << 8;

/// The `flat` of a radix select over the keys of logits with `src_flat`
/// flat bits ([`Source::flat_bits`]) and ids below `ids`.
#[inline(always)]
pub(super) fn skips(src_flat: u32, ids: u32) -> u32 {
    src_flat | if src_flat > 0 && ids <= 1 << 24 { IDS24 } else { 0 }
}

/// The digit a select goes on at after the flat jump.
#[inline(always)]
fn flat_to(flat: u32) -> u32 {
    if flat & IDS24 != 0 {
        16
    } else {
        24
    }
}

/// Whether the digits below the one at bit `shift` are the low `flat` order
/// bits (key bits 32 .. 32 + flat, `flat` 0 or 16), which [`Source::flat_bits`]
/// says every key leaves constant for its sign: the select then sets them
/// and goes on at the id digits ([`flat_to`]).
#[inline(always)]
fn flat_next(shift: u32, flat: u32) -> bool {
    let bits = flat & 0xff;
    bits > 0 && shift == 32 + bits
}

/// The flat digits of the keys under `prefix` (their sign bit, key bit 63,
/// already in it): 0 for a positive logit's order bits (`bits | 1 << 31`),
/// all ones for a negative one's (`!bits`).
#[inline(always)]
fn flat_fill(prefix: u64, flat: u32) -> u64 {
    let id = flat_mask(flat) & ID_TOP;
    if prefix >> 63 != 0 {
        id
    } else {
        flat_mask(flat)
    }
}

/// Key bits 32 .. 32 + flat.
#[inline(always)]
fn flat_mask(flat: u32) -> u64 {
    (((1u64 << (flat & 0xff)) - 1) << 32) | if flat & IDS24 != 0 { ID_TOP } else { 0 }
}

/// The top digit of a key's `!id` for an id below 2^24.
const ID_TOP: u64 = 0xff << 24;

/// One warp (lane `lane`) finds the bin of the 256-bin histogram at `hb`
/// (shared, u32 counts) that holds the `rem`-th largest key, and writes
/// (bin, keys in the bins above it, keys in it) at `out` (3 u32): lane l
/// sums bins 255 - 8l ..= 248 - 8l (from the top), a shuffle scan over the
/// lanes, and the one lane whose range crosses rem walks its 8 bins
/// (instead of one thread walking all 256 bins).
#[inline(always)]
fn pick_bin(lane: u32, hb: u64, rem: u32, out: u64) {
    let mut h = [0u32; 8];
    let mut s = 0u32;
    for (j, x) in h.iter_mut().enumerate() {
        *x = lds32(hb + 4 * (255 - (8 * lane + j as u32)) as u64);
        s += *x;
    }
    let mut incl = s;
    let mut d = 1u32;
    while d < 32 {
        let y = shfl_up32(incl, d, 0xffff_ffff);
        if lane >= d {
            incl += y;
        }
        d *= 2;
    }
    let excl = incl - s;
    let mut pick = (0u32, 0u32, 0u32);
    let mut write = lane == 31 && incl < rem;
    if excl < rem && incl >= rem {
        write = true;
        let mut cum = excl;
        let mut found = false;
        for (j, &x) in h.iter().enumerate() {
            if !found && cum + x >= rem {
                pick = ((255 - (8 * lane as usize + j)) as u32, cum, x);
                found = true;
            }
            if !found {
                cum += x;
            }
        }
    }
    if write {
        sts32(out, pick.0);
        sts32(out + 4, pick.1);
        sts32(out + 8, pick.2);
    }
}

/// [`radix_select`] of two ranks at once: the smallest keys of the `rank1`
/// and of the `rank2` largest keys `keys` yields, from one sequence of passes (two
/// histograms a pass, one while both ranks are in the same bin; warps 0 and
/// 1 pick their bins together), so a second rank costs no extra barriers.
/// The second histogram and pick use the first 1036 bytes of the sort
/// buffer, free until the gathers.
#[inline(always)]
fn radix_select2<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    iters: u32,
    keys: &impl Fn(u32) -> Option<u64>,
    rank1: u32,
    rank2: u32,
    flat: u32,
) -> (u64, u64) {
    let h2 = sortbuf();
    let out2 = h2 + 1024;
    let (mut p1, mut m1, mut r1, mut d1) = (0u64, 0u64, rank1, false);
    let (mut p2, mut m2, mut r2, mut d2) = (0u64, 0u64, rank2, false);
    let mut shift = 56u32;
    loop {
        // One histogram while both ranks share their prefix (always on the
        // first digit): the second pick then reads the first histogram.
        let shared = !d1 && !d2 && p1 == p2 && m1 == m2;
        let two = !d1 && !d2 && !shared;
        let first = shift == 56;
        let mut b = c.tid as usize;
        while b < 512 {
            if b < 256 {
                sts32(hist(b as u32), 0);
            } else if two {
                sts32(h2 + 4 * (b - 256) as u64, 0);
            }
            b += TH;
        }
        sync();
        // The histogram of a rank still open: hist for rank 1 (or rank 2
        // when rank 1 is done), h2 for rank 2 beside rank 1.
        let (pa, ma) = if d1 { (p2, m2) } else { (p1, m1) };
        let mut base = 0u32;
        while base < iters {
            let ld = |it: u32| if it < iters { keys(it) } else { None };
            let bin = |k: Option<u64>, p: u64, m: u64| match k {
                Some(key) if (key & m) == p => ((key >> shift) & 255) as u32,
                _ => 256u32,
            };
            let (k0, k1, k2, k3) = (ld(base), ld(base + 1), ld(base + 2), ld(base + 3));
            let (k4, k5, k6, k7) = (ld(base + 4), ld(base + 5), ld(base + 6), ld(base + 7));
            let add = |k: Option<u64>| {
                let ba = bin(k, pa, ma);
                if first {
                    warp_hist_add(c.tid, ba);
                } else if ba < 256 {
                    reds_add(hist(ba), 1);
                }
                if two {
                    let bb = bin(k, p2, m2);
                    if bb < 256 {
                        reds_add(h2 + 4 * bb as u64, 1);
                    }
                }
            };
            add(k0);
            add(k1);
            add(k2);
            add(k3);
            add(k4);
            add(k5);
            add(k6);
            add(k7);
            base += SEL_BATCH as u32;
        }
        sync();
        let w = c.tid / 32;
        let w2 = if TH >= 64 { 1 } else { 0 };
        if w == 0 && !d1 {
            pick_bin(c.tid & 31, hist(0), r1, misc(0));
        }
        if w == w2 && !d2 {
            pick_bin(c.tid & 31, if two { h2 } else { hist(0) }, r2, out2);
        }
        sync();
        if !d1 {
            let (bk, cum, cnt) = (lds32(misc(0)), lds32(misc(1)), lds32(misc(2)));
            r1 -= cum;
            p1 |= (bk as u64) << shift;
            m1 |= 255u64 << shift;
            d1 = cnt == r1 || shift == 0;
        }
        if !d2 {
            let (bk, cum, cnt) = (lds32(out2), lds32(out2 + 4), lds32(out2 + 8));
            r2 -= cum;
            p2 |= (bk as u64) << shift;
            m2 |= 255u64 << shift;
            d2 = cnt == r2 || shift == 0;
        }
        if d1 && d2 {
            return (p1, p2);
        }
        if flat_next(shift, flat) {
            // As in radix_select_from: set, not counted (ranks still open stay open).
            if !d1 {
                p1 |= flat_fill(p1, flat);
                m1 |= flat_mask(flat);
            }
            if !d2 {
                p2 |= flat_fill(p2, flat);
                m2 |= flat_mask(flat);
            }
            shift = flat_to(flat);
        } else {
            shift -= 8;
        }
    }
}

/// The `n` largest keys that `keys` yields, in descending order, as a tile.
#[inline(always)]
pub(super) fn sorted_keys<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    iters: u32,
    keys: impl Fn(u32) -> Option<u64>,
    n: u32,
) -> Tile<u64, I> {
    let n = n.min(Ctx::<TH, I>::CAP);
    let cap = if Ctx::<TH, I>::CAP < SORT_CAP { Ctx::<TH, I>::CAP } else { SORT_CAP };
    let mut out = [0u64; I];
    let mut has_hi = false;
    let mut hi = 0u64;
    let mut c0 = 0u32;
    while c0 < n {
        let m = (n - c0).min(cap);
        let lo = radix_select(c, iters, &keys, has_hi, hi, m);
        gather_sorted(c, iters, &keys, lo, has_hi, hi, m, c0, &mut out, 0, 0);
        has_hi = true;
        hi = lo;
        c0 += m;
    }
    Tile { v: out, n }
}

/// Gathers the `m` keys in `[lo, hi)` (`[lo, ..)` when `!has_hi`) that
/// `keys` yields into the sort buffer, sorts them descending and puts them
/// at tile positions `c0 .. c0 + m` of `out` (`m <= min(TILE, SORT_CAP)`).
/// `tmp`: `tmp_bytes` of shared memory free once the keys are gathered (the
/// radix sort's, when they suffice; else the bitonic network).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gather_sorted<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    iters: u32,
    keys: &impl Fn(u32) -> Option<u64>,
    lo: u64,
    has_hi: bool,
    hi: u64,
    m: u32,
    c0: u32,
    out: &mut [u64; I],
    tmp: u64,
    tmp_bytes: u32,
) {
    let buf = sortbuf();
    if c.tid == 0 {
        sts32(misc(3), 0);
    }
    sync();
    let mut base = 0u32;
    while base < iters {
        let ld = |it: u32| if it < iters { keys(it) } else { None };
        let put = |k: Option<u64>| {
            let key = k.unwrap_or(0);
            let take = k.is_some() && key >= lo && (!has_hi || key < hi);
            let pos = warp_claim(c.tid, take, 3);
            if take {
                sts64(buf + 8 * pos as u64, key);
            }
        };
        let (k0, k1, k2, k3) = (ld(base), ld(base + 1), ld(base + 2), ld(base + 3));
        let (k4, k5, k6, k7) = (ld(base + 4), ld(base + 5), ld(base + 6), ld(base + 7));
        put(k0);
        put(k1);
        put(k2);
        put(k3);
        put(k4);
        put(k5);
        put(k6);
        put(k7);
        base += SEL_BATCH as u32;
    }
    let radix = radix_fits::<TH, I>(m, tmp_bytes);
    let p = m.next_power_of_two();
    if !radix {
        let mut i = m + c.tid;
        while i < p {
            sts64(buf + 8 * i as u64, 0);
            i += TH as u32;
        }
    }
    sync();
    if radix {
        radix_desc(c, buf, m, tmp);
    } else {
        bitonic_desc(c, buf, p);
    }
    for (j, o) in out.iter_mut().enumerate() {
        let e = c.idx(j);
        if e >= c0 && e < c0 + m {
            *o = lds64(buf + 8 * (e - c0) as u64);
        }
    }
    sync();
}

/// Gathers the `m` keys in `[lo, hi)` (`[lo, ..)` when `!has_hi`) that
/// `keys` yields into the sort buffer, in no fixed order, and puts them at
/// tile positions `c0 .. c0 + m` of `out` (`m <= min(TILE, SORT_CAP)`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gather_plain<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    iters: u32,
    keys: &impl Fn(u32) -> Option<u64>,
    lo: u64,
    has_hi: bool,
    hi: u64,
    m: u32,
    c0: u32,
    out: &mut [u64; I],
) {
    let buf = sortbuf();
    if c.tid == 0 {
        sts32(misc(3), 0);
    }
    sync();
    let mut base = 0u32;
    while base < iters {
        let ld = |it: u32| if it < iters { keys(it) } else { None };
        let put = |k: Option<u64>| {
            let key = k.unwrap_or(0);
            let take = k.is_some() && key >= lo && (!has_hi || key < hi);
            let pos = warp_claim(c.tid, take, 3);
            if take {
                sts64(buf + 8 * pos as u64, key);
            }
        };
        let (k0, k1, k2, k3) = (ld(base), ld(base + 1), ld(base + 2), ld(base + 3));
        let (k4, k5, k6, k7) = (ld(base + 4), ld(base + 5), ld(base + 6), ld(base + 7));
        put(k0);
        put(k1);
        put(k2);
        put(k3);
        put(k4);
        put(k5);
        put(k6);
        put(k7);
        base += SEL_BATCH as u32;
    }
    sync();
    for (j, o) in out.iter_mut().enumerate() {
        let e = c.idx(j);
        if e >= c0 && e < c0 + m {
            *o = lds64(buf + 8 * (e - c0) as u64);
        }
    }
    sync();
}

/// Whether staging aggregates the wide histogram's adds per warp
/// (`match.any`, one add per distinct bin) instead of one shared atomic
/// per key.
const AGG_HIST: bool = false;

/// Adds 1 at bin `bin` of the histogram at `scr` for every lane of the
/// warp (`bin >= WIDE_BINS`: none), once per distinct bin by its lowest
/// lane. Every lane of the warp calls it together.
#[inline(always)]
fn warp_bin_add(tid: u32, scr: u64, bin: u32) {
    let peers = match_any(bin);
    if bin < WIDE_BINS && (tid & 31) == peers.trailing_zeros() {
        reds_add(scr + 4 * bin as u64, peers.count_ones());
    }
}

/// Bits of the wide first digit: the top 12 of the 32-bit order bits
/// (sign, exponent and 3 mantissa bits), histogrammed while staging.
const WIDE: u32 = 12;
const WIDE_BINS: u32 = 1 << WIDE;
/// Boundary-bin positions the selection scratch holds (u32 each).
const CAND_CAP: u32 = crate::spec::GPU_SELECT_SCRATCH / 4;

/// The smallest key of the `n` largest staged keys (`1 <= n <= v`), from
/// the wide histogram `stage` built: the bin holding the n-th largest key
/// (a block scan of the bins from the top), then a radix select over the
/// remaining bits of only that bin's keys, whose positions one pass over
/// the staged keys compacts into the scratch. A bin of more than
/// [`CAND_CAP`] keys (e.g. many equal logits) falls back to the radix
/// select over every staged key: never a dropped candidate.
#[inline(always)]
fn wide_select<const TH: usize, const I: usize>(c: &Ctx<TH, I>, scr: u64, st: u64, v: u32, n: u32) -> u64 {
    let tid = c.tid;
    let iters = v.div_ceil(TH as u32);
    let all = move |it: u32| {
        let i = it * TH as u32 + tid;
        if i < v {
            Some(key_of_bits(lds32(st + 4 * i as u64), i))
        } else {
            None
        }
    };
    let per = WIDE_BINS / TH as u32;
    if per == 0 || WIDE_BINS % TH as u32 != 0 || TH % 32 != 0 {
        return radix_select(c, iters, &all, false, 0, n);
    }
    // Thread t sums bins top - t*per down to top - t*per - per + 1.
    let top = WIDE_BINS - 1 - tid * per;
    let mut s = 0u32;
    let mut j = 0u32;
    while j < per {
        s += lds32(scr + 4 * (top - j) as u64);
        j += 1;
    }
    let (before, _) = block_excl_scan(c, s);
    if before < n && before + s >= n {
        let mut cum = before;
        let mut j = 0u32;
        while j < per {
            let x = lds32(scr + 4 * (top - j) as u64);
            if cum + x >= n {
                sts32(misc(0), top - j);
                sts32(misc(1), cum);
                sts32(misc(2), x);
                break;
            }
            cum += x;
            j += 1;
        }
    }
    if tid == 0 {
        sts32(misc(3), 0);
    }
    sync();
    let (b, above, cnt) = (lds32(misc(0)), lds32(misc(1)), lds32(misc(2)));
    let rem = n - above;
    if rem == cnt {
        // The whole bin is kept: every key of bin >= b.
        return (b as u64) << (64 - WIDE);
    }
    if cnt > CAND_CAP {
        return radix_select(c, iters, &all, false, 0, n);
    }
    // Positions of bin b's keys into the scratch (its histogram is read).
    let mut base = 0u32;
    while base < iters {
        let ld = |q: u32| {
            let i = (base + q) * TH as u32 + tid;
            if i < v {
                lds32(st + 4 * i as u64)
            } else {
                0
            }
        };
        let put = |q: u32, o: u32| {
            let i = (base + q) * TH as u32 + tid;
            let take = i < v && (o >> (32 - WIDE)) == b;
            let pos = warp_claim(tid, take, 3);
            if take {
                sts32(scr + 4 * pos as u64, i);
            }
        };
        let (o0, o1, o2, o3) = (ld(0), ld(1), ld(2), ld(3));
        let (o4, o5, o6, o7) = (ld(4), ld(5), ld(6), ld(7));
        put(0, o0);
        put(1, o1);
        put(2, o2);
        put(3, o3);
        put(4, o4);
        put(5, o5);
        put(6, o6);
        put(7, o7);
        base += SEL_BATCH as u32;
    }
    sync();
    let cand = move |it: u32| {
        let q = it * TH as u32 + tid;
        if q < cnt {
            let i = lds32(scr + 4 * q as u64);
            Some(key_of_bits(lds32(st + 4 * i as u64), i))
        } else {
            None
        }
    };
    // The bin's keys share their top WIDE bits: start at the digit below
    // 56; the select's prefix has bits 0..56, the bin gives the rest.
    radix_select_from(c, cnt.div_ceil(TH as u32), &cand, false, 0, rem, 48, 0, 0) | ((b as u64) << (64 - WIDE))
}

/// The `n` largest of `v` logits at `buf[off..off+v]`, ordered as SAMPLER.md
/// section 3.6 (logit descending, ties by lower id), with their ids.
#[inline(always)]
pub fn top_n<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
) -> (Tile<f32, I>, Tile<i32, I>) {
    c.before_read();
    let (x, id, _) = top_n_impl::<TH, I, false>(c, buf, off, v, n);
    (x, id)
}

/// [`top_n`] and the range's bad (NaN or +inf) and finite (not -inf)
/// logit counts, as the mask check counts them (SAMPLER.md section 3.2),
/// on every thread: from the staging histogram (no second read of the
/// logits), else from a counting pass over `buf` when the range is not staged.
#[inline(always)]
pub fn top_n_counted<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
) -> (Tile<f32, I>, Tile<i32, I>, u32, u32) {
    c.before_read();
    let (x, id, (bad, fin)) = top_n_impl::<TH, I, true>(c, buf, off, v, n);
    (x, id, bad, fin)
}

/// The bad and finite counts of the `v` staged keys (see
/// [`counts_from_bins`]), read from the wide histogram `stage` built: only
/// when -inf's bin is not empty does a pass over the staged keys (shared
/// memory) count the -inf keys in it. Must run before anything overwrites
/// the histogram (`wide_select` reuses the scratch); block-uniform.
#[inline(always)]
fn staged_counts<const TH: usize, const I: usize>(c: &Ctx<TH, I>, scr: u64, st: u64, v: u32) -> (u32, u32) {
    // Every thread reads the same bins after staging's barrier: a uniform branch.
    let mixed = lds32(scr + 4 * (NEG_INF_ORDER >> (32 - WIDE)) as u64);
    let mut neg_inf = 0u32;
    if mixed > 0 {
        let mut k = 0u32;
        let mut i = c.tid;
        while i < v {
            k += (lds32(st + 4 * i as u64) == NEG_INF_ORDER) as u32;
            i += TH as u32;
        }
        neg_inf = block_fold(c, k, |a, b| a.wrapping_add(b));
    }
    // 16 bins, the same address across a warp (broadcast reads).
    counts_from_bins(|b| lds32(scr + 4 * b as u64), WIDE, neg_inf, v)
}

/// The bad and finite counts of `buf[off..off+v]` by reading it (the
/// fallback when the range is not staged); block-uniform.
#[inline(always)]
fn direct_counts<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
) -> (u32, u32) {
    let (mut bad, mut neg_inf) = (0u32, 0u32);
    // SEL_BATCH loads in flight (as staging's tail loop); past the end: 0.0, counted as neither.
    let iters = v.div_ceil(TH as u32);
    let mut base = 0u32;
    while base < iters {
        let mut x = [0f32; SEL_BATCH];
        for (j, xj) in x.iter_mut().enumerate() {
            let i = (base + j as u32) * TH as u32 + c.tid;
            if i < v {
                *xj = buf.read(off + i as u64);
            }
        }
        for &xj in x.iter() {
            let o = order_bits(xj);
            bad += order_is_bad(o) as u32;
            neg_inf += (o == NEG_INF_ORDER) as u32;
        }
        base += SEL_BATCH as u32;
    }
    // Both in one reduction: bad in the high word.
    let both = block_fold(c, ((bad as u64) << 32) | neg_inf as u64, |a, b| a.wrapping_add(b));
    ((both >> 32) as u32, v - both as u32)
}

/// [`top_n`], with the counts of [`top_n_counted`] when `COUNT` (else `(0, 0)`).
#[inline(always)]
pub(super) fn top_n_impl<const TH: usize, const I: usize, const COUNT: bool>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
) -> (Tile<f32, I>, Tile<i32, I>, (u32, u32)) {
    let iters = v.div_ceil(TH as u32);
    let tid = c.tid;
    if let Some((scr, st)) = stage::<TH, I>(c, buf, off, v) {
        let counts = if COUNT { staged_counts(c, scr, st, v) } else { (0, 0) };
        let keys = move |it: u32| {
            let i = it * TH as u32 + tid;
            // Staged: i < v <= the staging area's keys.
            if i < v {
                Some(key_of_bits(lds32(st + 4 * i as u64), i))
            } else {
                None
            }
        };
        let n = n.min(v).min(Ctx::<TH, I>::CAP);
        let cap = if Ctx::<TH, I>::CAP < SORT_CAP { Ctx::<TH, I>::CAP } else { SORT_CAP };
        if n >= 1 && n <= cap {
            let lo = wide_select(c, scr, st, v, n);
            let mut out = [0u64; I];
            // The staging area is dead once gathered: the radix sort's histograms.
            let room = stagebuf::<TH, I>().2;
            gather_sorted(c, iters, &keys, lo, false, 0, n, 0, &mut out, st, 4 * room);
            let (x, id) = split_keys(&Tile { v: out, n });
            return (x, id, counts);
        }
        let k = sorted_keys(c, iters, keys, n);
        let (x, id) = split_keys(&k);
        return (x, id, counts);
    }
    let counts = if COUNT { direct_counts(c, buf, off, v) } else { (0, 0) };
    let keys = move |it: u32| {
        let i = it * TH as u32 + tid;
        if i < v {
            Some(order_key(buf.read(off + i as u64), i))
        } else {
            None
        }
    };
    let k = sorted_keys(c, iters, keys, n.min(v));
    let (x, id) = split_keys(&k);
    (x, id, counts)
}

/// Reads `buf[off..off+v]` once into the staging area as u32 order bits
/// (16-byte loads, many in flight) when the launch gave room for `v` keys,
/// and histograms their top [`WIDE`] bits into the scratch on the way;
/// every selection pass then reads shared memory. `None`: no room.
/// `Some((scratch, staging area))`.
#[inline(always)]
pub(super) fn stage<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
) -> Option<(u64, u64)> {
    let (scr, st, room) = stagebuf::<TH, I>();
    if v > room {
        return None;
    }
    let mut b = c.tid;
    while b < WIDE_BINS {
        sts32(scr + 4 * b as u64, 0);
        b += TH as u32;
    }
    sync();
    let put = |i: u32, o: u32| {
        sts32(st + 4 * i as u64, o);
        reds_add(scr + 4 * (o >> (32 - WIDE)) as u64, 1);
    };
    // Block-uniform: the row range is aligned to 4 logits (V and chunk starts
    // multiples of 4): groups of 4 keys (one 16-byte load of f32, 8 bytes of
    // bf16/f16 logits), thread t taking groups t, t + TH, ...
    let groups = if buf.quad_aligned(off) { v / 4 } else { 0 };
    let giters = groups.div_ceil(TH as u32);
    let mut base = 0u32;
    while base < giters {
        let ld = |j: u32| {
            let g = (base + j) * TH as u32 + c.tid;
            if g < groups {
                // SAFETY: 4 * g + 3 < v, aligned to 4 logits (checked above).
                unsafe { buf.quad(off + 4 * g as u64) }
            } else {
                [0f32; 4]
            }
        };
        let put4 = |j: u32, x: [f32; 4]| {
            let g = (base + j) * TH as u32 + c.tid;
            let o = [order_bits(x[0]), order_bits(x[1]), order_bits(x[2]), order_bits(x[3])];
            if AGG_HIST && TH % 32 == 0 {
                // Every lane of the warp (uniform loop): one add per distinct bin.
                if g < groups {
                    sts128(st + 16 * g as u64, o);
                }
                for &oq in o.iter() {
                    warp_bin_add(c.tid, scr, if g < groups { oq >> (32 - WIDE) } else { WIDE_BINS });
                }
            } else if g < groups {
                sts128(st + 16 * g as u64, o);
                reds_add(scr + 4 * (o[0] >> (32 - WIDE)) as u64, 1);
                reds_add(scr + 4 * (o[1] >> (32 - WIDE)) as u64, 1);
                reds_add(scr + 4 * (o[2] >> (32 - WIDE)) as u64, 1);
                reds_add(scr + 4 * (o[3] >> (32 - WIDE)) as u64, 1);
            }
        };
        // Hand-unrolled so the batch stays in registers (an array of V4
        // went to local memory).
        let (x0, x1, x2, x3) = (ld(0), ld(1), ld(2), ld(3));
        let (x4, x5, x6, x7) = (ld(4), ld(5), ld(6), ld(7));
        put4(0, x0);
        put4(1, x1);
        put4(2, x2);
        put4(3, x3);
        put4(4, x4);
        put4(5, x5);
        put4(6, x6);
        put4(7, x7);
        base += SEL_BATCH as u32;
    }
    // The rest (all of it when unaligned), SEL_BATCH loads in flight.
    let first = 4 * groups;
    let iters = (v - first).div_ceil(TH as u32);
    let mut base = 0u32;
    while base < iters {
        let mut x = [0f32; SEL_BATCH];
        for (j, xj) in x.iter_mut().enumerate() {
            let i = first + (base + j as u32) * TH as u32 + c.tid;
            if i < v {
                *xj = buf.read(off + i as u64);
            }
        }
        for (j, &xj) in x.iter().enumerate() {
            let i = first + (base + j as u32) * TH as u32 + c.tid;
            if i < v {
                put(i, order_bits(xj));
            }
        }
        base += SEL_BATCH as u32;
    }
    sync();
    Some((scr, st))
}

/// The `n` largest of `v` logits at `buf[off..off+v]` with their ids, in
/// ascending id order (no sort): a radix select finds the n-th largest key,
/// then each warp takes a contiguous id range and ballots plus a block scan
/// of the warps' counts place the keys in id order. Equal logits come out in
/// ascending id order, as `top_n` puts them.
#[inline(always)]
pub fn top_n_set<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
) -> (Tile<f32, I>, Tile<i32, I>) {
    c.before_read();
    let (x, id, _) = top_n_set_impl::<TH, I, false>(c, buf, off, v, n);
    (x, id)
}

/// [`top_n_set`] and the range's bad and finite counts, as [`top_n_counted`].
#[inline(always)]
pub fn top_n_set_counted<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
) -> (Tile<f32, I>, Tile<i32, I>, u32, u32) {
    c.before_read();
    let (x, id, (bad, fin)) = top_n_set_impl::<TH, I, true>(c, buf, off, v, n);
    (x, id, bad, fin)
}

/// [`top_n_set`], with the counts of [`top_n_counted`] when `COUNT` (else `(0, 0)`).
#[inline(always)]
fn top_n_set_impl<const TH: usize, const I: usize, const COUNT: bool>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
) -> (Tile<f32, I>, Tile<i32, I>, (u32, u32)) {
    let cap = if Ctx::<TH, I>::CAP < SORT_CAP { Ctx::<TH, I>::CAP } else { SORT_CAP };
    let n = n.min(v);
    if n == 0 || n > cap || TH % 32 != 0 {
        // Sorted order keeps equal logits in ascending id order too.
        return top_n_impl::<TH, I, COUNT>(c, buf, off, v, n);
    }
    let iters = v.div_ceil(TH as u32);
    let tid = c.tid;
    let staged = stage::<TH, I>(c, buf, off, v);
    // Before wide_select reuses the histogram's scratch.
    let counts = match staged {
        _ if !COUNT => (0, 0),
        Some((scr, st)) => staged_counts(c, scr, st, v),
        None => direct_counts(c, buf, off, v),
    };
    let key_at = move |i: u32| match staged {
        Some((_, st)) => key_of_bits(lds32(st + 4 * i as u64), i),
        None => order_key(buf.read(off + i as u64), i),
    };
    let keys = move |it: u32| {
        let i = it * TH as u32 + tid;
        if i < v {
            Some(key_at(i))
        } else {
            None
        }
    };
    let lo = match staged {
        Some((scr, st)) => wide_select(c, scr, st, v, n),
        None => radix_select(c, iters, &keys, false, 0, n),
    };
    // Warp w takes ids w*span .. w*span+span, 32 consecutive ids a step
    // (coalesced, no bank conflicts): count by ballots, scan the warps'
    // counts, then write in id order at lane offsets from the ballots.
    let warps = (TH as u32).div_ceil(32);
    let span = v.div_ceil(warps).div_ceil(32) * 32;
    let (w, lane) = (tid / 32, tid % 32);
    let steps = span / 32;
    let take_at = |step: u32| {
        let i = w * span + step * 32 + lane;
        i < v && key_at(i) >= lo
    };
    let mut wc = 0u32;
    for step in 0..steps {
        wc += ballot(take_at(step)).count_ones();
    }
    let (before, _) = block_excl_scan(c, if lane == 0 { wc } else { 0 });
    let mut pos = shfl_idx32(before, 0);
    let sb = sortbuf();
    let below = (1u32 << lane) - 1;
    for step in 0..steps {
        let t = take_at(step);
        let b = ballot(t);
        if t {
            let i = w * span + step * 32 + lane;
            sts64(sb + 8 * (pos + (b & below).count_ones()) as u64, key_at(i));
        }
        pos += b.count_ones();
    }
    sync();
    let mut out = [0u64; I];
    for (j, o) in out.iter_mut().enumerate() {
        let e = c.idx(j);
        if e < n {
            *o = lds64(sb + 8 * e as u64);
        }
    }
    sync();
    let (x, id) = split_keys(&Tile { v: out, n });
    (x, id, counts)
}

/// Logits of the row sampled for the threshold of [`top_n_stream_counted`]
/// (at fixed positions spread evenly over the row: `stream_threshold`).
const STREAM_SAMPLE: u32 = 4096;

/// Why [`top_n_stream_counted`] did not keep its streamed survivors (its
/// fifth result): 0 streamed; 1 not applicable (no survivor buffer in this
/// launch, or `n` above the tile); 2 the buffer overflowed (ties, quantized
/// or all-equal rows); 3 fewer than `n` survived (a miscalibrated sample).
pub const STREAM_STREAMED: u32 = 0;

/// [`top_n_counted`] in one read of the row (no staging of all `v` keys):
/// P1 a threshold `T` on the order bits, the k-th largest of `S` = 4096
/// logits sampled at fixed positions (k = mu + 4 sqrt(mu) + 5 with
/// mu = n S / v: about k v / S logits of a typical row reach it); P2 one pass of 16-byte non-caching loads over the
/// row, where a logit below `T` costs a float compare (the rare ones at or
/// above it, and the NaN / +-inf ones, are classified for the counts and
/// appended as 64-bit order keys to a shared-memory buffer with a shared
/// atomic); P3 if the buffer overflowed or fewer than `n` survived, the exact
/// unstreamed selection re-reads the row (never a dropped candidate); P4 the
/// radix select of the survivors in shared memory and the sort of their
/// first `sorted` (the rest in no fixed order: only a row's kept prefix needs it). The survivor
/// buffer is the launch's staging room (`spec::gpu_stage_bytes`: 8 bytes a
/// key), so the host sizes it. Results equal [`top_n_counted`]'s for any
/// buffer size (the keys are unique, and any `T` keeping at least `n` keys
/// keeps the top `n`), plus the reason code above (5th value).
#[inline(always)]
pub fn top_n_stream_counted<const TH: usize, const I: usize>(
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
    let (scr, st, room) = stagebuf::<TH, I>();
    let bcap = room / 2;
    if n == 0 || n > cap || TH % 32 != 0 || bcap < n {
        let (x, id, (bad, fin)) = top_n_impl::<TH, I, true>(c, buf, off, v, n);
        return (x, id, bad, fin, 1);
    }
    let tid = c.tid;
    if tid == 0 {
        sts32(misc(5), 0);
    }
    let t_ord = stream_threshold(c, buf, off, v, n, scr, v <= bcap);
    // P2, with the element type branch out of the loop for f32 logits.
    let (bad, neg) = match buf.as_f32() {
        Some(g) => stream_pass::<TH, I, 8>(c, g, off, v, t_ord, st, bcap),
        None => stream_pass::<TH, I, 4>(c, buf, off, v, t_ord, st, bcap),
    };
    sync();
    let total = lds32(misc(5));
    let both = block_fold(c, ((bad as u64) << 32) | neg as u64, |a, b| a.wrapping_add(b));
    let (bad, fin) = ((both >> 32) as u32, v - both as u32);
    // P3: the exact fallback (block-uniform: `total` is one shared word).
    if total > bcap || total < n {
        let (x, id, _) = top_n_impl::<TH, I, false>(c, buf, off, v, n);
        return (x, id, bad, fin, if total > bcap { 2 } else { 3 });
    }
    // P4: select the survivors and sort their first `sorted` (the buffer, then the sort's counters).
    let (x, id) = survivors_top(c, st, total, n, sorted, bcap, skips(buf.flat_bits(), v));
    (x, id, bad, fin, STREAM_STREAMED)
}

/// P1 of [`top_n_stream_counted`]: the order bits of the threshold `T` for
/// keeping the top `n` of the row at `buf[off..off+v]`: the top 16 order
/// bits of the k-th largest of `STREAM_SAMPLE` logits at fixed positions
/// (k = mu + 4 sqrt(mu) + 5, mu = n S / v), or 0 (every key survives) when
/// `all` or k is past the sample.
/// The sample goes through the scratch at `scr`; ends with a barrier.
#[inline(always)]
fn stream_threshold<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
    scr: u64,
    all: bool,
) -> u32 {
    let tid = c.tid;
    // The sample holds about mu = n * S / v of the row's top n: T at the
    // k-th largest sample, k = mu + 4 sqrt(mu) + 5, keeps the top n unless
    // the sample is 4 standard deviations off (then the exact fallback), and
    // about k * v / S keys survive (1.4-1.9 n at v = 129280, n >= 1024).
    let mu = ((n as u64 * STREAM_SAMPLE as u64) / v.max(1) as u64) as u32;
    // floor(sqrt(mu)), mu < 4096 here or k is past the sample anyway (a
    // loop: core's isqrt brings a lookup table into the module).
    let mut root = 0u32;
    while root < 64 && (root + 1) * (root + 1) <= mu {
        root += 1;
    }
    let k = mu + 4 * root + 5;
    if all || k >= STREAM_SAMPLE {
        sync();
        return 0;
    }
    // The sample's order bits in the scratch (16 KB, free until the sort).
    // From V = 4096: 512 runs of 8 neighbours, each run one 32-byte sector
    // of an aligned f32 row (16 KB of reads, where 4096 single logits touch
    // 4096 sectors, a quarter of the row's bytes), spaced evenly over the row.
    let runs = v >= STREAM_SAMPLE && TH % 8 == 0;
    let mut base = 0u32;
    let iters = STREAM_SAMPLE / TH as u32;
    while base < iters {
        let at = |j: u32| (base + j) * TH as u32 + tid;
        let ld = |j: u32| {
            let s = at(j);
            let pos = if runs {
                ((((s >> 3) as u64 * v as u64) >> 9) & !7) + (s & 7) as u64
            } else {
                (s as u64 * v as u64) >> 12
            };
            if j < iters - base {
                order_bits(buf.read(off + pos))
            } else {
                0
            }
        };
        let (a0, a1, a2, a3) = (ld(0), ld(1), ld(2), ld(3));
        let (a4, a5, a6, a7) = (ld(4), ld(5), ld(6), ld(7));
        let put = |j: u32, o: u32| {
            if j < iters - base {
                sts32(scr + 4 * at(j) as u64, o);
            }
        };
        put(0, a0);
        put(1, a1);
        put(2, a2);
        put(3, a3);
        put(4, a4);
        put(5, a5);
        put(6, a6);
        put(7, a7);
        base += SEL_BATCH as u32;
    }
    sync();
    let keys = move |it: u32| {
        let s = it * TH as u32 + tid;
        Some(key_of_bits(lds32(scr + 4 * s as u64), s))
    };
    // The k-th largest sample's top 16 order bits (two digits, not three or
    // four): a bound with at least k samples at or above it, 1/128 of a
    // binade below the exact one (a few more survivors, fewer barriers).
    (radix_select_from(c, iters, &keys, false, 0, k, 56, 48, 0) >> 32) as u32
}

/// P4 of [`top_n_stream_counted`]: the `m = min(n, total)` largest of the
/// `total` unique keys at `st` (`n <= total <= bcap`, or `total < n` for all
/// of them) as (logit, id) tiles (ids as keyed): the first `min(sorted, m)`
/// in descending order (SAMPLER.md 3.6), the rest in no fixed order. Only
/// the kept prefix of a row needs its order (top-k, top logprobs): a second
/// select of the top `sorted` and a sort of those replace the sort of all m.
/// `flat`: the [`Source::flat_bits`] of the logits the keys came from.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn survivors_top<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    st: u64,
    total: u32,
    n: u32,
    sorted: u32,
    bcap: u32,
    flat: u32,
) -> (Tile<f32, I>, Tile<i32, I>) {
    let tid = c.tid;
    let m = n.min(total);
    if m == 0 {
        return (Tile { v: [0f32; I], n: 0 }, Tile { v: [0i32; I], n: 0 });
    }
    let keys = move |it: u32| {
        let q = it * TH as u32 + tid;
        if q < total {
            Some(lds64(st + 8 * q as u64))
        } else {
            None
        }
    };
    let iters = total.div_ceil(TH as u32);
    let mut out = [0u64; I];
    let s = sorted.min(m);
    if s == m {
        let lo = if total > m { radix_select_from(c, iters, &keys, false, 0, m, 56, 0, flat) } else { 0 };
        gather_sorted(c, iters, &keys, lo, false, 0, m, 0, &mut out, st, 8 * bcap);
    } else {
        // Both bounds from one sequence of passes when both are needed.
        let (lo, hi) = if total > m && s > 0 {
            radix_select2(c, iters, &keys, m, s, flat)
        } else {
            let sel = |r: u32| radix_select_from(c, iters, &keys, false, 0, r, 56, 0, flat);
            let lo = if total > m { sel(m) } else { 0 };
            (lo, if s > 0 { sel(s) } else { 0 })
        };
        // The unsorted rest first: the sort below reuses the survivor buffer.
        gather_plain(c, iters, &keys, lo, s > 0, hi, m - s, s, &mut out);
        if s > 0 {
            gather_sorted(c, iters, &keys, hi, false, 0, s, 0, &mut out, st, 8 * bcap);
        }
    }
    split_keys(&Tile { v: out, n: m })
}

/// Stage 1 of the streaming top-N over several blocks per row: candidates
/// of the chunk `start .. start + len` of the row at `buf[row_off..row_off+v]`
/// that hold every logit of the chunk among the row's top `n` whenever at
/// least `n` logits of the row reach the threshold of the row's fixed sample
/// ([`top_n_stream_counted`]'s P1, the same for every chunk of the row):
/// the chunk's logits at or above it (at most `n`: above `n`, the chunk's
/// top `n` of them), or the chunk's exact top `n` when they overflow the
/// survivor buffer. Positions in the chunk as ids, in no fixed order;
/// the tile's length is the count kept. With the chunk's bad and finite counts.
#[inline(always)]
pub fn top_n_chunk_stream<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    row_off: u64,
    v: u32,
    start: u32,
    len: u32,
    n: u32,
) -> (Tile<f32, I>, Tile<i32, I>, u32, u32) {
    c.before_read();
    let cap = if Ctx::<TH, I>::CAP < SORT_CAP { Ctx::<TH, I>::CAP } else { SORT_CAP };
    // The threshold from the row's n, the same in every chunk (the merge is
    // exact only then); a chunk keeps at most its own length.
    let n_row = n.min(v);
    let n = n.min(len);
    let (scr, st, room) = stagebuf::<TH, I>();
    let bcap = room / 2;
    let coff = row_off + start as u64;
    if n == 0 || n > cap || TH % 32 != 0 || bcap < n {
        let (x, id, (bad, fin)) = top_n_set_impl::<TH, I, true>(c, buf, coff, len, n);
        return (x, id, bad, fin);
    }
    if c.tid == 0 {
        sts32(misc(5), 0);
    }
    let t_ord = stream_threshold(c, buf, row_off, v, n_row, scr, false);
    let (bad, neg) = match buf.as_f32() {
        Some(g) => stream_pass::<TH, I, 8>(c, g, coff, len, t_ord, st, bcap),
        None => stream_pass::<TH, I, 4>(c, buf, coff, len, t_ord, st, bcap),
    };
    sync();
    let total = lds32(misc(5));
    let both = block_fold(c, ((bad as u64) << 32) | neg as u64, |a, b| a.wrapping_add(b));
    let (bad, fin) = ((both >> 32) as u32, len - both as u32);
    if total > bcap {
        let (x, id, _) = top_n_set_impl::<TH, I, false>(c, buf, coff, len, n);
        return (x, id, bad, fin);
    }
    // Stage 2 takes the row's order from the keys: no sort here.
    let (x, id) = survivors_top(c, st, total, n, 0, bcap, skips(buf.flat_bits(), len));
    (x, id, bad, fin)
}

/// Stage 2 of the streaming top-N over several blocks per row: the row's
/// top `n` (the first `sorted` in the order of SAMPLER.md 3.6, the rest in
/// no fixed order) from its `chunks` chunks' candidates of
/// [`top_n_chunk_stream`] (chunk `ch`: `counts[cnt_off + ch]` (logit, id)
/// pairs at `vals` / `ids` from `cand_off + ch * slot`); when they hold fewer
/// than `n` (the sample misled) or overflow the buffer, the exact top `n` of
/// the row at `logits[row_off..row_off+v]`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn top_n_merge_stream<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    vals: Gm<f32>,
    ids: Gm<i32>,
    counts: Gm<u32>,
    cand_off: u64,
    slot: u32,
    cnt_off: u64,
    chunks: u32,
    logits: impl Source<Elem = f32>,
    row_off: u64,
    v: u32,
    n: u32,
    sorted: u32,
) -> (Tile<f32, I>, Tile<i32, I>) {
    c.before_read();
    let cap = if Ctx::<TH, I>::CAP < SORT_CAP { Ctx::<TH, I>::CAP } else { SORT_CAP };
    let n = n.min(v);
    let (scr, st, room) = stagebuf::<TH, I>();
    let bcap = room / 2;
    // Warp 0 reads 32 chunks' counts at once and publishes their exclusive
    // prefix (the scratch, 4 bytes a chunk) and the total: a loop over the
    // chunks would pay two dependent global round trips per chunk (run 26
    // profile: a third of the kernel).
    let fits = TH % 32 == 0 && chunks <= crate::spec::GPU_SELECT_SCRATCH / 4;
    if fits && c.tid < 32 {
        let lane = c.tid;
        let mut run = 0u32;
        let mut g = 0u32;
        while g < chunks {
            let ch = g + lane;
            let cn = if ch < chunks { counts.read(cnt_off + ch as u64) } else { 0 };
            let mut incl = cn;
            let mut d = 1u32;
            while d < 32 {
                let y = shfl_up32(incl, d, 0xffff_ffff);
                if lane >= d {
                    incl += y;
                }
                d *= 2;
            }
            if ch < chunks {
                sts32(scr + 4 * ch as u64, run + incl - cn);
            }
            run += shfl_idx32(incl, 31);
            g += 32;
        }
        if lane == 0 {
            sts32(misc(6), run);
        }
    }
    sync();
    let total = lds32(misc(6));
    if !fits || n == 0 || n > cap || total < n || total > bcap {
        let (x, id, _) = top_n_impl::<TH, I, false>(c, logits, row_off, v, n);
        return (x, id);
    }
    // Every candidate of the row by its flat position: its chunk by a binary
    // search of the prefix, SEL_BATCH loads in flight per thread.
    let chunk_of = |q: u32| {
        let (mut lo, mut hi) = (0u32, chunks);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if lds32(scr + 4 * mid as u64) <= q {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo, q - lds32(scr + 4 * lo as u64))
    };
    let iters = total.div_ceil(TH as u32);
    let mut base = 0u32;
    while base < iters {
        let ld = |j: u32| {
            let q = (base + j) * TH as u32 + c.tid;
            if j < iters - base && q < total {
                let (ch, i) = chunk_of(q);
                let at = cand_off + (ch * slot + i) as u64;
                Some((q, order_key(vals.read(at), ids.read(at) as u32)))
            } else {
                None
            }
        };
        let put = |k: Option<(u32, u64)>| {
            if let Some((q, key)) = k {
                sts64(st + 8 * q as u64, key);
            }
        };
        let (k0, k1, k2, k3) = (ld(0), ld(1), ld(2), ld(3));
        let (k4, k5, k6, k7) = (ld(4), ld(5), ld(6), ld(7));
        put(k0);
        put(k1);
        put(k2);
        put(k3);
        put(k4);
        put(k5);
        put(k6);
        put(k7);
        base += SEL_BATCH as u32;
    }
    sync();
    survivors_top(c, st, total, n, sorted, bcap, skips(logits.flat_bits(), v))
}

/// P2 of [`top_n_stream_counted`]: one pass over `buf[off..off+v]` that
/// appends every key with order bits `>= t_ord` to the survivor buffer at
/// `st` (`bcap` keys; the count in `misc(5)`, zeroed and fenced by a
/// barrier before), and returns this thread's (bad, -inf) counts. `U`
/// (8 for f32 logits, else 4): the quads (16 bytes of f32, 8 of bf16 / f16)
/// a thread has in flight a step.
#[inline(always)]
fn stream_pass<const TH: usize, const I: usize, const U: u32>(
    c: &Ctx<TH, I>,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    t_ord: u32,
    st: u64,
    bcap: u32,
) -> (u32, u32) {
    let tid = c.tid;
    // The float of T (NaN for T = 0 and the negative-NaN range: every logit
    // is then classified exactly below). `!(x < tf)` is true at or above T
    // and for NaN; -inf is tested apart (counted, never above a finite T).
    let tf = f32::from_bits(if t_ord & 0x8000_0000 != 0 { t_ord & 0x7fff_ffff } else { !t_ord });
    let (mut bad, mut neg) = (0u32, 0u32);
    // A finite logit is at or above T exactly when `x >= tf`, or, for a NaN
    // `tf`, when T is below -inf's order bits (T = 0 or a negative NaN's).
    let fin_all = tf.is_nan() && t_ord < NEG_INF_ORDER;
    let append = |o: u32, i: u32| {
        let pos = atoms_add(misc(5), 1);
        if pos < bcap {
            sts64(st + 8 * pos as u64, key_of_bits(o, i));
        }
    };
    // One logit at or above T, NaN or +-inf (lane-level: no warp-wide op):
    // a finite one is appended without classifying; the rest are counted.
    let mut visit = |x: f32, i: u32| {
        if x.abs() < f32::INFINITY {
            if (x >= tf) | fin_all {
                append(order_bits(x), i);
            }
        } else {
            let o = order_bits(x);
            bad += order_is_bad(o) as u32;
            neg += (o == NEG_INF_ORDER) as u32;
            if o >= t_ord {
                append(o, i);
            }
        }
    };
    let hot = |x: f32| !(x < tf) | (x == f32::NEG_INFINITY);
    // P2: head logits up to the first 16-byte boundary, quads, tail.
    let mut h = 0u32;
    while h < 4 && h < v && !buf.quad_aligned(off + h as u64) {
        h += 1;
    }
    let groups = if h < 4 { (v - h.min(v)) / 4 } else { 0 };
    let h = if h < 4 { h } else { v };
    let body = h + 4 * groups;
    let mut i = tid;
    while i < h {
        let x = buf.read(off + i as u64);
        if hot(x) {
            visit(x, i);
        }
        i += TH as u32;
    }
    let mut i = body + tid;
    while i < v {
        let x = buf.read(off + i as u64);
        if hot(x) {
            visit(x, i);
        }
        i += TH as u32;
    }
    let qoff = off + h as u64;
    let bits = |q: [f32; 4], s: u32| {
        ((hot(q[0]) as u32) | ((hot(q[1]) as u32) << 1) | ((hot(q[2]) as u32) << 2) | ((hot(q[3]) as u32) << 3)) << s
    };
    // A mask of a step's hot logits, then a loop over its set bits (most
    // lanes have none). At 1-2% survivors nearly every warp has a hot logit
    // in every quad, so a branch per quad or per logit made the whole warp
    // walk the rare path 4-16 times a step (run 20 profile).
    if U == 8 {
        // f32: eight 16-byte loads in flight a thread, 32 logits a step (at
        // one CTA an SM a row's pass is latency-bound: four left half the
        // memory parallelism unused; run 52: -1..-6.5 us from R = 16), the
        // last step's quads past the row masked off. (bf16 / f16 lost 8-38 us
        // in this form, eight or four a step: they keep the loop below.)
        let step = 8 * TH as u32;
        let mut g0 = tid;
        while g0 < groups {
            let ld = |j: u32| {
                let g = g0 + j * TH as u32;
                if g < groups {
                    // SAFETY: g < groups: a whole, aligned quad of the row.
                    unsafe { buf.quad_stream(qoff + 4 * g as u64) }
                } else {
                    [0f32; 4]
                }
            };
            let (q0, q1, q2, q3) = (ld(0), ld(1), ld(2), ld(3));
            let (q4, q5, q6, q7) = (ld(4), ld(5), ld(6), ld(7));
            let on = |q: [f32; 4], j: u32| if g0 + j * (TH as u32) < groups { bits(q, 4 * j) } else { 0 };
            let mut m = on(q0, 0) | on(q1, 1) | on(q2, 2) | on(q3, 3) | on(q4, 4) | on(q5, 5) | on(q6, 6) | on(q7, 7);
            while m != 0 {
                let j = m.trailing_zeros();
                let x = if j < 16 { pick16(j, &q0, &q1, &q2, &q3) } else { pick16(j - 16, &q4, &q5, &q6, &q7) };
                visit(x, h + 4 * (g0 + (j >> 2) * TH as u32) + (j & 3));
                m &= m - 1;
            }
            g0 += step;
        }
        return (bad, neg);
    }
    // Four quads a step, whole steps only, then the rest a quad at a time.
    let step = 4 * TH as u32;
    let full = groups / step;
    let mut it = 0u32;
    while it < full {
        let g0 = it * step + tid;
        // SAFETY: g0 + 3 * TH < groups: whole quads of the row, aligned.
        let ld = |j: u32| unsafe { buf.quad_stream(qoff + 4 * (g0 + j * TH as u32) as u64) };
        let (q0, q1, q2, q3) = (ld(0), ld(1), ld(2), ld(3));
        let mut m = bits(q0, 0) | bits(q1, 4) | bits(q2, 8) | bits(q3, 12);
        while m != 0 {
            let j = m.trailing_zeros();
            let x = pick16(j, &q0, &q1, &q2, &q3);
            visit(x, h + 4 * (g0 + (j >> 2) * TH as u32) + (j & 3));
            m &= m - 1;
        }
        it += 1;
    }
    let mut quad_at = |g: u32, q: [f32; 4]| {
        if hot(q[0]) | hot(q[1]) | hot(q[2]) | hot(q[3]) {
            let i = h + 4 * g;
            for (e, &x) in q.iter().enumerate() {
                if hot(x) {
                    visit(x, i + e as u32);
                }
            }
        }
    };
    let mut g = full * step + tid;
    while g < groups {
        // SAFETY: g < groups.
        let q = unsafe { buf.quad_stream(qoff + 4 * g as u64) };
        quad_at(g, q);
        g += TH as u32;
    }
    (bad, neg)
}

/// Logit `j` (0..16) of four quads, `j / 4` the quad, by selects (a dynamic
/// index into registers would put them in local memory).
#[inline(always)]
fn pick16(j: u32, q0: &[f32; 4], q1: &[f32; 4], q2: &[f32; 4], q3: &[f32; 4]) -> f32 {
    let pick = |q: &[f32; 4]| {
        let lo = if j & 1 != 0 { q[1] } else { q[0] };
        let hi = if j & 1 != 0 { q[3] } else { q[2] };
        if j & 2 != 0 {
            hi
        } else {
            lo
        }
    };
    let (a, b) = if j & 8 != 0 { (pick(q2), pick(q3)) } else { (pick(q0), pick(q1)) };
    if j & 4 != 0 {
        b
    } else {
        a
    }
}
