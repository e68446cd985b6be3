//! Sorting: bitonic networks over keys in shared memory (registers and
//! warp shuffles for the short strides), `sort_desc`, and keys back to (logit, id) tiles.

use super::super::math::{key_id, key_logit, order_key};
use super::block::{block_excl_scan, block_fold};
use super::ptx::{lds128, lds16, lds64, sts128, sts16, sts64, sync};
use super::select::sorted_keys;
use super::warp::{ballot, shfl_xor64, syncwarp};
use super::{ix, Ctx, Tile, SORT_CAP};

/// One compare-exchange of the bitonic network, seen from position `i`
/// holding `a`, whose partner `i ^ stride` holds `b`: the new key at `i`.
#[inline(always)]
pub(super) fn bitonic_keep(i: u32, stride: u32, size: u32, a: u64, b: u64) -> u64 {
    let desc = (i & size) == 0;
    let lower = (i & stride) == 0;
    if desc == lower {
        if a > b {
            a
        } else {
            b
        }
    } else if a < b {
        a
    } else {
        b
    }
}

/// Sorts `buf[0..p]` descending (`p` a power of two) in shared memory.
///
/// Thread t holds positions `t*e .. t*e+e` in registers (`e = max(1, p/TH)`,
/// at most 2; more keys per thread use [`bitonic_desc_shared`]):
/// strides below `e` are exchanged in registers, below `32*e` by warp
/// shuffles, and only the wider ones through shared memory and a barrier.
#[inline(always)]
pub(super) fn bitonic_desc<const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: u64, p: u32) {
    let e = if p > TH as u32 { p / TH as u32 } else { 1 };
    if TH % 32 != 0 {
        return bitonic_desc_shared(c, buf, p);
    }
    // Only the key counts this variant can have (p <= min(TILE, SORT_CAP)).
    let most = (if Ctx::<TH, I>::CAP < SORT_CAP { Ctx::<TH, I>::CAP } else { SORT_CAP }) / TH as u32;
    match e {
        1 => bitonic_reg::<TH, I, 1>(c, buf, p),
        2 if most >= 2 => bitonic_reg::<TH, I, 2>(c, buf, p),
        // Measured on the H200: 4+ keys per thread are no faster in registers
        // (local memory for 8+); those sorts stay in shared memory.
        _ => bitonic_desc_shared(c, buf, p),
    }
}

/// [`bitonic_desc`] with `E = p / TH` keys per thread (`E = 1` when `p <= TH`).
#[inline(always)]
pub(super) fn bitonic_reg<const TH: usize, const I: usize, const E: usize>(c: &Ctx<TH, I>, buf: u64, p: u32) {
    let e = E as u32;
    let base = c.tid * e;
    let mut k = [0u64; E];
    for (q, kq) in k.iter_mut().enumerate() {
        let i = base + q as u32;
        if i < p {
            *kq = lds64(buf + 8 * i as u64);
        }
    }
    let mut size = 2u32;
    while size <= p {
        let mut stride = size / 2;
        while stride > 0 {
            if stride >= 32 * e {
                // Across warps: through shared memory.
                sync();
                for (q, &kq) in k.iter().enumerate() {
                    let i = base + q as u32;
                    if i < p {
                        sts64(buf + 8 * i as u64, kq);
                    }
                }
                sync();
                for (q, kq) in k.iter_mut().enumerate() {
                    let i = base + q as u32;
                    if i < p {
                        let b = lds64(buf + 8 * (i ^ stride) as u64);
                        *kq = bitonic_keep(i, stride, size, *kq, b);
                    }
                }
            } else if stride >= e {
                // Within the warp: lane ^ (stride / e), same register.
                for (q, kq) in k.iter_mut().enumerate() {
                    let b = shfl_xor64(*kq, stride / e);
                    *kq = bitonic_keep(base + q as u32, stride, size, *kq, b);
                }
            } else {
                // Within the thread: registers q and q ^ stride (constant indices).
                match stride {
                    1 => in_thread::<E, 1>(&mut k, base, size),
                    2 => in_thread::<E, 2>(&mut k, base, size),
                    4 => in_thread::<E, 4>(&mut k, base, size),
                    _ => in_thread::<E, 8>(&mut k, base, size),
                }
            }
            stride /= 2;
        }
        size *= 2;
    }
    sync();
    for (q, &kq) in k.iter().enumerate() {
        let i = base + q as u32;
        if i < p {
            sts64(buf + 8 * i as u64, kq);
        }
    }
    sync();
}

/// The in-thread stage of stride `S` of [`bitonic_reg`] (`S` constant, so
/// the registers are indexed by constants).
#[inline(always)]
pub(super) fn in_thread<const E: usize, const S: usize>(k: &mut [u64; E], base: u32, size: u32) {
    for q in 0..E {
        let r = q ^ S;
        if r > q && r < E {
            let i = base + q as u32;
            let (a, b) = (k[q], k[r]);
            k[q] = bitonic_keep(i, S as u32, size, a, b);
            k[r] = bitonic_keep(i ^ S as u32, S as u32, size, b, a);
        }
    }
}

/// [`bitonic_desc`] with every stage through shared memory.
#[inline(always)]
pub(super) fn bitonic_desc_shared<const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: u64, p: u32) {
    let mut size = 2u32;
    while size <= p {
        let mut stride = size / 2;
        while stride > 0 {
            let mut t = c.tid;
            while t < p / 2 {
                let i = 2 * t - (t & (stride - 1));
                let j = i + stride;
                let a = lds64(buf + 8 * i as u64);
                let b = lds64(buf + 8 * j as u64);
                let desc = (i & size) == 0;
                if (desc && a < b) || (!desc && a > b) {
                    sts64(buf + 8 * i as u64, b);
                    sts64(buf + 8 * j as u64, a);
                }
                t += TH as u32;
            }
            sync();
            stride /= 2;
        }
        size *= 2;
    }
}

/// Most keys per thread [`radix_desc`] holds in registers.
const RADIX_E: u32 = 4;
/// Fewest keys [`radix_desc`] sorts. Measured on the H200 (docs/bench/run14-sort/NOTES.md):
/// at 4096 keys (4 a thread) the radix sort makes `topn_merge`
/// 22% faster than the bitonic network; at 1024 keys (1 a thread, mostly
/// in registers and shuffles) the bitonic network is 30% faster.
const RADIX_MIN: u32 = 1025;
/// Longest run of equal values [`radix_desc`] orders by insertion.
const RUN_MAX: u32 = 32;

/// Whether [`radix_desc`] sorts `m` keys, given `tmp_bytes` of free shared
/// memory (its histograms need `16 * TH` bytes).
#[inline(always)]
pub(super) fn radix_fits<const TH: usize, const I: usize>(m: u32, tmp_bytes: u32) -> bool {
    TH % 256 == 0
        && (TH / 32).is_power_of_two()
        && m >= RADIX_MIN
        && m <= RADIX_E * TH as u32
        && tmp_bytes >= 16 * TH as u32
}

/// Sorts the `m` unique keys `buf[0..m]` descending, in place ([`radix_fits`]
/// must hold; `tmp`: 16-byte aligned, `16 * TH` free bytes): an LSD radix
/// sort with 8-bit digits, stable per pass, so the order is exactly the
/// bitonic network's (the keys are unique). Only the digits that vary among
/// the keys get a pass (a block OR/AND of the keys); the value digits are
/// sorted first, then runs of equal values are put in id order: short ones
/// by insertion, and any run longer than [`RUN_MAX`] restarts the sort
/// from the id digits (LSD needs the lower digits first).
#[inline(always)]
pub(super) fn radix_desc<const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: u64, m: u32, tmp: u64) {
    let e = m.div_ceil(TH as u32);
    let first = (c.tid / 32) * 32 * e + (c.tid & 31);
    let mut or = 0u64;
    let mut and = u64::MAX;
    for q in 0..RADIX_E {
        let i = first + 32 * q;
        if q < e && i < m {
            let k = lds64(buf + 8 * i as u64);
            or |= k;
            and &= k;
        }
    }
    // Low half: OR; high half: AND (one fold, two barriers).
    let f = block_fold(c, (or as u128) | ((and as u128) << 64), |a, b| {
        ((a | b) & (u64::MAX as u128)) | ((a & b) >> 64 << 64)
    });
    let diff = (f as u64) ^ ((f >> 64) as u64);
    let mut s = 32u32;
    while s < 64 {
        if (diff >> s) & 255 != 0 {
            radix_pass(c, buf, m, e, tmp, s);
        }
        s += 8;
    }
    // Equal values are adjacent now, in gather order: a thread whose
    // position starts a run of equal values sorts it by insertion (the full
    // keys: id order), when it is short; a longer run restarts the sort
    // from the id digits (LSD over every varying digit).
    let mut long = 0u32;
    for q in 0..RADIX_E {
        let i = first + 32 * q;
        if q < e && i < m {
            let hv = lds64(buf + 8 * i as u64) >> 32;
            if i == 0 || (lds64(buf + 8 * (i - 1) as u64) >> 32) != hv {
                let mut len = 1u32;
                while len <= RUN_MAX && i + len < m && (lds64(buf + 8 * (i + len) as u64) >> 32) == hv {
                    len += 1;
                }
                if len > RUN_MAX {
                    long = 1;
                } else {
                    let mut j = 1u32;
                    while j < len {
                        let key = lds64(buf + 8 * (i + j) as u64);
                        let mut t = j;
                        while t > 0 {
                            let prev = lds64(buf + 8 * (i + t - 1) as u64);
                            if prev >= key {
                                break;
                            }
                            sts64(buf + 8 * (i + t) as u64, prev);
                            t -= 1;
                        }
                        sts64(buf + 8 * (i + t) as u64, key);
                        j += 1;
                    }
                }
            }
        }
    }
    if block_fold(c, long, |a, b| a | b) != 0 {
        let mut s = 0u32;
        while s < 64 {
            if (diff >> s) & 255 != 0 {
                radix_pass(c, buf, m, e, tmp, s);
            }
            s += 8;
        }
    }
}

/// One stable pass of [`radix_desc`] on the digit at bit `s`, descending.
/// Warp `w` owns positions `w*32*e ..` (key `q` of lane `l` at
/// `w*32*e + 32*q + l`, so (warp, q, lane) is position order). Counters:
/// u16, logical index `(255 - digit) * WARPS + w`, so their exclusive scan
/// in that order is each (digit, warp)'s first destination; thread `t`
/// scans logical counters `8t .. 8t+8` (`256 * WARPS == 8 * TH`). Stored
/// at column `w ^ (digit % WARPS)` of the digit's row, so that the lanes
/// of a warp (one `w`, many digits) spread over the banks.
#[inline(always)]
fn radix_pass<const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: u64, m: u32, e: u32, h: u64, s: u32) {
    let warps = TH as u32 / 32;
    let (w, lane) = (c.tid / 32, c.tid & 31);
    let first = w * 32 * e + lane;
    sts128(h + 16 * c.tid as u64, [0; 4]);
    // Hand-unrolled over the (at most 4) keys of the thread, so that keys,
    // ranks and counter addresses stay in registers (a loop puts them in
    // local memory).
    let ld = |q: u32| {
        let i = first + 32 * q;
        if q < e && i < m {
            lds64(buf + 8 * i as u64)
        } else {
            0
        }
    };
    let (k0, k1, k2, k3) = (ld(0), ld(1), ld(2), ld(3));
    sync();
    // Rank of each key among its warp's keys of the same digit before it.
    // The lanes with the same digit: 8 ballots (match.any serialises over
    // distinct values, here up to 32).
    let rank = |q: u32, key: u64| -> (u32, u64) {
        if q >= e {
            return (0, 0);
        }
        let valid = first + 32 * q < m;
        let d = ((key >> s) & 255) as u32;
        let mut peers = ballot(valid);
        for b in 0..8 {
            let bit = (d >> b) & 1 != 0;
            let v = ballot(bit);
            peers &= if bit { v } else { !v };
        }
        let a = h + 2 * ((255 - d) * warps + (w ^ (d & (warps - 1)))) as u64;
        let before = lds16(a);
        syncwarp();
        if valid && lane == 31 - peers.leading_zeros() {
            sts16(a, before + peers.count_ones());
        }
        syncwarp();
        (before + (peers & ((1u32 << lane) - 1)).count_ones(), a)
    };
    let (r0, a0) = rank(0, k0);
    let (r1, a1) = rank(1, k1);
    let (r2, a2) = rank(2, k2);
    let (r3, a3) = rank(3, k3);
    sync();
    // Logical counters 8t .. 8t+8: row 8t / WARPS, columns w0 .. w0+8,
    // stored in the 8-aligned chunk w0 ^ (x & !7), permuted by x & 7.
    let row = 8 * c.tid / warps;
    let w0 = 8 * c.tid % warps;
    let x = (255 - row) & (warps - 1);
    let chunk = h + 2 * (row * warps + (w0 ^ (x & !7))) as u64;
    let v = lds128(chunk);
    let v = (v[0] as u128) | ((v[1] as u128) << 32) | ((v[2] as u128) << 64) | ((v[3] as u128) << 96);
    let mut n = [0u32; 8];
    let mut sum = 0u32;
    for (i, ni) in n.iter_mut().enumerate() {
        *ni = ((v >> (16 * ((i as u32) ^ (x & 7)))) & 0xffff) as u32;
        sum += *ni;
    }
    let (mut run, _) = block_excl_scan(c, sum);
    let mut o = 0u128;
    for (i, &ni) in n.iter().enumerate() {
        o |= (run as u128) << (16 * ((i as u32) ^ (x & 7)));
        run += ni;
    }
    sts128(chunk, [o as u32, (o >> 32) as u32, (o >> 64) as u32, (o >> 96) as u32]);
    sync();
    let put = |q: u32, key: u64, r: u32, a: u64| {
        if q < e && first + 32 * q < m {
            sts64(buf + 8 * (lds16(a) + r) as u64, key);
        }
    };
    put(0, k0, r0, a0);
    put(1, k1, r1, a1);
    put(2, k2, r2, a2);
    put(3, k3, r3, a3);
    sync();
}

/// Sorts (logit, id) pairs in the order of SAMPLER.md section 3.6.
#[inline(always)]
pub fn sort_desc<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    vals: &Tile<f32, I>,
    ids: &Tile<i32, I>,
) -> (Tile<f32, I>, Tile<i32, I>) {
    let n = vals.n.min(ids.n);
    let base = c.idx(0);
    let (vv, iv) = (vals.v, ids.v);
    let keys = move |it: u32| {
        if base + it < n {
            Some(order_key(ix(&vv, it as usize), ix(&iv, it as usize) as u32))
        } else {
            None
        }
    };
    let k = sorted_keys(c, I as u32, keys, n);
    split_keys(&k)
}

#[inline(always)]
pub(super) fn split_keys<const I: usize>(k: &Tile<u64, I>) -> (Tile<f32, I>, Tile<i32, I>) {
    let mut x = [0f32; I];
    let mut id = [0i32; I];
    for ((xo, io), &key) in x.iter_mut().zip(id.iter_mut()).zip(k.v.iter()) {
        *xo = key_logit(key);
        *io = key_id(key) as i32;
    }
    (Tile { v: x, n: k.n }, Tile { v: id, n: k.n })
}
