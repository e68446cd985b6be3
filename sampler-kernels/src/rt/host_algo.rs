//! CPU-shaped algorithms behind `rt::cpu`'s tile ops (issue 12 item 7).
//!
//! The GPU runtime selects with block-wide radix passes; a CPU core does
//! better with one streaming pass and a running threshold. The results are
//! the same bits: selection works on the unique order keys of
//! [`super::math::order_key`] (logit descending, ties by lower id), so the
//! top-n set and its order do not depend on the algorithm.

extern crate alloc;
use alloc::vec::Vec;

use super::math::{key_logit, key_of_bits, order_bits, order_is_bad, NEG_INF_ORDER};

/// Elements checked per block of the streaming filter: a block is one
/// branch-free (auto-vectorised) compare pass, and only blocks with a
/// passing element take the scalar append path.
const BLOCK: usize = 64;

/// The `n` largest order keys of `x` (ids `0..x.len()`), in descending key
/// order (SAMPLER.md section 3.6); `min(n, x.len())` keys.
///
/// Small `n`: one streaming pass keeps the keys above a running threshold
/// (the n-th largest key seen so far), in id order; when the buffer fills,
/// it is cut back to the n largest (`compact`). Later ids never tie above
/// the threshold, so comparing the logit's order bits is exact. Large `n`:
/// every key, radix-sorted. Either way the survivors are in ascending id
/// order before the final stable sort on the order bits, which therefore
/// gives exactly the key order.
pub fn top_keys(x: &[f32], n: usize) -> Vec<u64> {
    top_keys_impl::<false>(x, n).0
}

/// A row's count of bad logits (NaN or +inf) and of -inf logits
/// (SAMPLER.md section 3.2: its finite count is the length less `neg_inf`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub bad: u32,
    pub neg_inf: u32,
}

impl Counts {
    /// The counts of `x` by themselves (the paths that read no row block by block).
    fn of(x: &[f32]) -> Counts {
        x.iter().fold(Counts::default(), |c, &v| c.add_order(order_bits(v)))
    }
    #[inline(always)]
    fn add_order(self, o: u32) -> Counts {
        Counts { bad: self.bad + order_is_bad(o) as u32, neg_inf: self.neg_inf + (o == NEG_INF_ORDER) as u32 }
    }
}

/// [`top_keys`] and `x`'s [`Counts`], taken in the same streaming pass
/// (the block compares that find the candidates also find the bad and
/// -inf logits), so the row is read once.
pub fn top_keys_counted(x: &[f32], n: usize) -> (Vec<u64>, Counts) {
    top_keys_impl::<true>(x, n)
}

/// [`top_keys`], with the counts when `COUNT` (else zeros).
fn top_keys_impl<const COUNT: bool>(x: &[f32], n: usize) -> (Vec<u64>, Counts) {
    let n = n.min(x.len());
    if n == 0 {
        return (Vec::new(), if COUNT { Counts::of(x) } else { Counts::default() });
    }
    let mut counts = Counts::default();
    let mut keys = if n.saturating_mul(8) <= x.len() {
        stream_top::<COUNT>(x, n, &mut counts)
    } else {
        let mut all: Vec<u64> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let o = order_bits(v);
                if COUNT {
                    counts = counts.add_order(o);
                }
                key_of_bits(o, i as u32)
            })
            .collect();
        if n < all.len() {
            compact(&mut all, n, &mut Vec::new());
        }
        all
    };
    sort_ord_desc_stable(&mut keys);
    (keys, counts)
}

/// The streaming pass of [`top_keys`]: the `n` largest keys of `x` in
/// ascending id order (`1 <= n < x.len()`); with `COUNT`, `x`'s counts
/// added to `counts` (each logit once, also when the pass is redone).
///
/// The starting threshold comes from a strided sample of the row (about
/// 2n keys are expected to pass it); if fewer than `n` pass, the pass is
/// redone from the row's first `n` keys (exact either way, only slower).
fn stream_top<const COUNT: bool>(x: &[f32], n: usize, counts: &mut Counts) -> Vec<u64> {
    // Room for the ~2n keys the sampled threshold lets through, so that
    // typically only the final cut runs.
    let cap = (4 * n).max(n + 4 * BLOCK);
    let mut buf: Vec<u64> = Vec::with_capacity(cap + BLOCK);
    let mut scratch: Vec<u64> = Vec::with_capacity(cap + BLOCK);
    let mut counted = false;
    if let Some(t) = sampled_threshold(x, n) {
        // This pass reads the whole row: it counts it.
        filter_from::<COUNT>(x, 0, t, n, cap, &mut buf, &mut scratch, counts);
        if buf.len() >= n {
            if buf.len() > n {
                compact(&mut buf, n, &mut scratch);
            }
            return buf;
        }
        buf.clear();
        counted = true;
    }
    if COUNT && !counted {
        *counts = Counts::of(&x[..n]);
    }
    buf.extend(x[..n].iter().enumerate().map(|(i, &v)| key_of_bits(order_bits(v), i as u32)));
    // The n-th largest key so far (a later key with equal order bits is smaller: larger id).
    let thr = (buf.iter().min().copied().unwrap_or(0) >> 32) as u32;
    if COUNT && !counted {
        filter_from::<true>(x, n, thr, n, cap, &mut buf, &mut scratch, counts);
    } else {
        filter_from::<false>(x, n, thr, n, cap, &mut buf, &mut scratch, counts);
    }
    if buf.len() > n {
        compact(&mut buf, n, &mut scratch);
    }
    buf
}

/// Order bits that about `2 n` of the row's keys reach, estimated from a
/// sample of the row (`SAMPLE_RUNS` runs of `BLOCK` consecutive keys spread
/// evenly: a few cache lines each, not one line per sampled key); `None`
/// when the row is too short for a useful sample. Any value is correct (the
/// caller checks that at least `n` keys pass).
fn sampled_threshold(x: &[f32], n: usize) -> Option<u32> {
    let runs = SAMPLE_RUNS.min(x.len() / BLOCK);
    let s = runs * BLOCK;
    // Rank (from the top) in the sample of the row's 2n-th key, at least 16
    // for a stable estimate.
    let m = ((2 * n * s) / x.len()).max(16);
    if runs == 0 || m >= s / 2 {
        return None;
    }
    let step = x.len() / runs;
    let mut ords: Vec<u32> = Vec::with_capacity(s);
    for r in 0..runs {
        ords.extend(x[r * step..r * step + BLOCK].iter().map(|&v| order_bits(v)));
    }
    let (_, &mut t, _) = ords.select_nth_unstable_by(m - 1, |a, b| b.cmp(a));
    Some(t)
}

/// Runs of [`sampled_threshold`]'s sample (2048 keys).
const SAMPLE_RUNS: usize = 32;

/// Appends to `buf` the keys of `x[from..]` whose order bits are at least
/// `thr` (a superset of the keys that can still be among the n largest), in
/// id order. When `buf` reaches `cap` it is cut back to its `n` largest and
/// the threshold rises to the n-th largest key's order bits.
/// With `COUNT`, also adds the [`Counts`] of `x[from..]` to `counts`.
#[allow(clippy::too_many_arguments)]
fn filter_from<const COUNT: bool>(
    x: &[f32],
    from: usize,
    mut thr: u32,
    n: usize,
    cap: usize,
    buf: &mut Vec<u64>,
    scratch: &mut Vec<u64>,
    counts: &mut Counts,
) {
    let mut acc = Acc::new();
    let mut i = from;
    while i < x.len() {
        let end = (i + BLOCK).min(x.len());
        let blk = &x[i..end];
        // A float prefilter: order_bits(v) >= thr implies !(v < tf) (order
        // bits are monotone in the value, zeros merged; NaN always passes
        // here), so no passing key is missed; only its candidates get the
        // exact test.
        let tf = key_logit(key_of_bits(thr, 0));
        let mut m = if COUNT { candidates_counted(blk, tf, &mut acc) } else { candidates(blk, tf) };
        if m != 0 {
            while m != 0 {
                let j = m.trailing_zeros() as usize;
                m &= m - 1;
                let o = order_bits(blk[j]);
                if o >= thr {
                    buf.push(key_of_bits(o, (i + j) as u32));
                }
            }
            if buf.len() >= cap {
                thr = (compact(buf, n, scratch) >> 32) as u32;
            }
        }
        i = end;
    }
    if COUNT {
        let c = acc.finish();
        counts.bad += c.bad;
        counts.neg_inf += c.neg_inf;
    }
}

/// Bit `j` set where `!(blk[j] < tf)` (`blk.len() <= 64`): SSE2 compares and
/// move-masks on x86-64 (part of its baseline), a plain loop elsewhere.
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN must be a candidate
fn candidates(blk: &[f32], tf: f32) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if blk.len() == BLOCK {
        use core::arch::x86_64::{_mm_cmpnlt_ps, _mm_loadu_ps, _mm_movemask_ps, _mm_set1_ps};
        let mut m = 0u64;
        // SAFETY: SSE2 is part of x86-64; the 16 loads of 4 stay inside `blk` (64 elements).
        unsafe {
            let t = _mm_set1_ps(tf);
            for q in 0..BLOCK / 4 {
                let v = _mm_loadu_ps(blk.as_ptr().add(4 * q));
                m |= (_mm_movemask_ps(_mm_cmpnlt_ps(v, t)) as u64) << (4 * q);
            }
        }
        return m;
    }
    blk.iter().enumerate().fold(0u64, |m, (j, &v)| m | ((!(v < tf)) as u64) << j)
}

/// The streaming pass's running counts: on x86-64 four i32 lanes each of
/// non-finite (+-inf or NaN) and -inf logits, summed once at the end
/// ([`Acc::finish`]); the short tail blocks are counted by themselves.
#[derive(Clone, Copy)]
struct Acc {
    #[cfg(target_arch = "x86_64")]
    special: core::arch::x86_64::__m128i,
    #[cfg(target_arch = "x86_64")]
    neg_inf: core::arch::x86_64::__m128i,
    rest: Counts,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            // SAFETY: SSE2 is part of x86-64.
            #[cfg(target_arch = "x86_64")]
            special: unsafe { core::arch::x86_64::_mm_setzero_si128() },
            #[cfg(target_arch = "x86_64")]
            neg_inf: unsafe { core::arch::x86_64::_mm_setzero_si128() },
            rest: Counts::default(),
        }
    }

    fn finish(self) -> Counts {
        #[allow(unused_mut)]
        let mut c = self.rest;
        #[cfg(target_arch = "x86_64")]
        {
            let lanes = |v: core::arch::x86_64::__m128i| -> u32 {
                let mut a = [0u32; 4];
                // SAFETY: a 16-byte store into a 16-byte array (unaligned store).
                unsafe { core::arch::x86_64::_mm_storeu_si128(a.as_mut_ptr() as *mut core::arch::x86_64::__m128i, v) };
                a.iter().fold(0u32, |s, &x| s.wrapping_add(x))
            };
            let (special, neg_inf) = (lanes(self.special), lanes(self.neg_inf));
            // Non-finite = bad (NaN or +inf) or -inf.
            c.bad += special - neg_inf;
            c.neg_inf += neg_inf;
        }
        c
    }
}

/// [`candidates`], and the block's bad (NaN or +inf) and -inf logits added
/// to `acc`, from the same loads: on x86-64, per 4 logits an AND and two
/// integer compares on the bits (|bits| > +max finite: NaN or inf; bits ==
/// -inf) subtracted from lane counters, no move-mask.
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN must be a candidate
fn candidates_counted(blk: &[f32], tf: f32, acc: &mut Acc) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if blk.len() == BLOCK {
        use core::arch::x86_64::{
            _mm_and_si128, _mm_castps_si128, _mm_cmpeq_epi32, _mm_cmpgt_epi32, _mm_cmpnlt_ps, _mm_loadu_ps,
            _mm_movemask_ps, _mm_set1_epi32, _mm_set1_ps, _mm_sub_epi32,
        };
        let mut m = 0u64;
        // SAFETY: SSE2 is part of x86-64; the 16 loads of 4 stay inside `blk` (64 elements).
        unsafe {
            let t = _mm_set1_ps(tf);
            let (abs, max_finite, ninf) =
                (_mm_set1_epi32(0x7fff_ffff), _mm_set1_epi32(0x7f7f_ffff), _mm_set1_epi32(0xff80_0000u32 as i32));
            let (mut sp, mut ni) = (acc.special, acc.neg_inf);
            for q in 0..BLOCK / 4 {
                let v = _mm_loadu_ps(blk.as_ptr().add(4 * q));
                m |= (_mm_movemask_ps(_mm_cmpnlt_ps(v, t)) as u64) << (4 * q);
                let b = _mm_castps_si128(v);
                // A true compare is -1: subtracting it counts.
                sp = _mm_sub_epi32(sp, _mm_cmpgt_epi32(_mm_and_si128(b, abs), max_finite));
                ni = _mm_sub_epi32(ni, _mm_cmpeq_epi32(b, ninf));
            }
            acc.special = sp;
            acc.neg_inf = ni;
        }
        return m;
    }
    let c = Counts::of(blk);
    acc.rest = Counts { bad: acc.rest.bad + c.bad, neg_inf: acc.rest.neg_inf + c.neg_inf };
    candidates(blk, tf)
}

/// Keeps the `n` largest of the unique keys `buf` (`n < buf.len()`), in
/// their order, and returns the smallest kept key.
fn compact(buf: &mut Vec<u64>, n: usize, scratch: &mut Vec<u64>) -> u64 {
    scratch.clear();
    scratch.extend_from_slice(buf);
    let (_, &mut nth, _) = scratch.select_nth_unstable_by(n - 1, |a, b| b.cmp(a));
    buf.retain(|&k| k >= nth);
    nth
}

/// Radix digit widths of [`sort_ord_desc_stable`]: 11 + 11 + 10 bits of the
/// 32 order bits (a 2048-entry histogram stays in L1).
const DIGITS: [(u32, u32); 3] = [(0, 11), (11, 11), (22, 10)];

/// Sorts keys by their order bits (the high 32 bits) descending, stably
/// (LSD radix). Keys given in ascending id order come out in descending key order.
pub fn sort_ord_desc_stable(keys: &mut Vec<u64>) {
    if keys.len() < 2 {
        return;
    }
    if keys.len() <= 64 {
        // Insertion sort on the same (ord desc, stable) order.
        for i in 1..keys.len() {
            let k = keys[i];
            let mut j = i;
            while j > 0 && (keys[j - 1] >> 32) < (k >> 32) {
                keys[j] = keys[j - 1];
                j -= 1;
            }
            keys[j] = k;
        }
        return;
    }
    let mut hist = [[0u32; 2048]; 3];
    for &k in keys.iter() {
        let o = (k >> 32) as u32;
        for (h, &(s, w)) in hist.iter_mut().zip(&DIGITS) {
            // Descending: the largest digit gets the first slot.
            h[(((!o) >> s) & ((1 << w) - 1)) as usize] += 1;
        }
    }
    let mut tmp: Vec<u64> = Vec::with_capacity(keys.len());
    let len = keys.len() as u32;
    for (h, &(s, w)) in hist.iter_mut().zip(&DIGITS) {
        if h.contains(&len) {
            continue; // one digit value: this pass would not move anything
        }
        let mut acc = 0u32;
        for c in h.iter_mut() {
            let t = *c;
            *c = acc;
            acc += t;
        }
        tmp.clear();
        tmp.resize(keys.len(), 0);
        for &k in keys.iter() {
            let d = (((!((k >> 32) as u32)) >> s) & ((1 << w) - 1)) as usize;
            tmp[h[d] as usize] = k;
            h[d] += 1;
        }
        core::mem::swap(keys, &mut tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt::math::order_key;

    fn reference(x: &[f32], n: usize) -> Vec<u64> {
        let mut k: Vec<u64> = x.iter().enumerate().map(|(i, &v)| order_key(v, i as u32)).collect();
        k.sort_unstable_by(|a, b| b.cmp(a));
        k.truncate(n);
        k
    }

    fn rows() -> Vec<Vec<f32>> {
        let mut s = 1u64;
        let mut rnd = move || {
            s = crate::rt::math::mix64(s.wrapping_add(0x9E37_79B9_7F4A_7C15));
            s
        };
        let len = 5000;
        let mut out = vec![
            vec![1.0f32; len],                                               // all equal
            (0..len).map(|i| i as f32).collect(),                            // ascending: every element passes
            (0..len).map(|i| -(i as f32)).collect(),                         // descending
            (0..len).map(|i| (i % 7) as f32).collect(),                      // many ties at the boundary
            (0..len).map(|i| if i % 2 == 0 { -0.0 } else { 0.0 }).collect(), // signed zeros
            (0..len).map(|i| [f32::MAX, f32::MIN, f32::NEG_INFINITY, f32::MIN_POSITIVE, -1e-45][i % 5]).collect(),
        ];
        out.push((0..len).map(|_| ((rnd() >> 40) as f32 / 65536.0 - 128.0) * 3.0).collect());
        out.push((0..len).map(|_| (rnd() >> 60) as f32).collect()); // 16 values: heavy ties
        out
    }

    #[test]
    fn top_keys_equals_a_full_sort() {
        for x in rows() {
            for n in [1, 2, 7, 63, 64, 65, 100, 624, 625, 626, 1000, 2500, 4999, 5000, 6000] {
                assert_eq!(top_keys(&x, n), reference(&x, n), "n = {n}, row starts {:?}", &x[..4]);
            }
        }
    }

    #[test]
    fn top_keys_on_long_rows_and_a_misleading_sample() {
        let len = 40_000;
        let step = len / SAMPLE_RUNS; // where the sample's runs start (sampled_threshold)
        let rows: Vec<Vec<f32>> = vec![
            // The sample sees only large values: too few keys pass its
            // threshold, and the pass is redone from the row's start.
            (0..len).map(|i| if i % step < BLOCK { 1000.0 + i as f32 } else { (i % 13) as f32 }).collect(),
            (0..len).map(|i| i as f32).collect(),
            (0..len).map(|i| ((i * 7919) % 10007) as f32 * 0.25 - 100.0).collect(),
            vec![-3.0; len],
        ];
        for x in &rows {
            for n in [1, 100, 4000, 5000] {
                assert_eq!(top_keys(x, n), reference(x, n), "n = {n}, row starts {:?}", &x[..4]);
            }
        }
        let x = &rows[0];
        let t = sampled_threshold(x, 4000).expect("a sample");
        assert!(
            x.iter().filter(|&&v| order_bits(v) >= t).count() < 4000,
            "the first row must defeat the sample at n = 4000"
        );
    }

    /// The counts come from the streaming pass (every path: the sampled
    /// threshold, its redo, short rows, n = 0, the whole-row sort) and equal
    /// a direct count, with NaNs of both signs and many payloads, +-inf,
    /// -0.0 and denormals; the keys equal the uncounted ones.
    #[test]
    fn top_keys_counted_counts_every_logit_once() {
        let specials = [
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xff80_0001),
            f32::from_bits(0xffff_ffff),
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
        ];
        let len = 40_000;
        let step = len / SAMPLE_RUNS;
        let mut rows = rows();
        rows.push((0..len).map(|i| if i % step < BLOCK { 1000.0 + i as f32 } else { (i % 13) as f32 }).collect()); // defeats the sample
        rows.push(vec![f32::NEG_INFINITY; 3000]);
        rows.push((0..3000).map(|i| if i % 2 == 0 { f32::NEG_INFINITY } else { f32::NAN }).collect());
        for (r, mut x) in rows.into_iter().enumerate() {
            for (j, &sp) in specials.iter().enumerate() {
                let at = (j * 7919 + r * 31) % x.len();
                x[at] = sp;
            }
            for n in [0, 1, 7, 100, 1000, 5000] {
                let (keys, c) = top_keys_counted(&x, n);
                let bad = x.iter().filter(|v| v.is_nan() || **v == f32::INFINITY).count() as u32;
                let neg_inf = x.iter().filter(|v| **v == f32::NEG_INFINITY).count() as u32;
                assert_eq!(c, Counts { bad, neg_inf }, "row {r}, n = {n}");
                assert_eq!(keys, top_keys(&x, n), "row {r}, n = {n}");
            }
            // Short rows (no sample: the head is counted apart from the filter).
            for len in [1usize, 9, 70, 200] {
                let y = &x[..len.min(x.len())];
                let (_, c) = top_keys_counted(y, 1);
                let bad = y.iter().filter(|v| v.is_nan() || **v == f32::INFINITY).count() as u32;
                let neg_inf = y.iter().filter(|v| **v == f32::NEG_INFINITY).count() as u32;
                assert_eq!(c, Counts { bad, neg_inf }, "row {r}, len {len}");
            }
        }
    }

    #[test]
    fn stable_sort_on_order_bits_is_the_key_order() {
        for x in rows() {
            let mut k: Vec<u64> = x.iter().enumerate().map(|(i, &v)| order_key(v, i as u32)).collect();
            sort_ord_desc_stable(&mut k);
            assert_eq!(k, reference(&x, x.len()));
        }
    }
}
