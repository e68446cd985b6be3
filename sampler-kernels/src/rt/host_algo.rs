//! CPU-shaped algorithms behind `rt::cpu`'s tile ops (issue 12 item 7).
//!
//! The GPU runtime selects with block-wide radix passes; a CPU core does
//! better with one streaming pass and a running threshold. The results are
//! the same bits: selection works on the unique order keys of
//! [`super::math::order_key`] (logit descending, ties by lower id), so the
//! top-n set and its order do not depend on the algorithm.

extern crate alloc;
use alloc::vec::Vec;

use super::math::{key_of_bits, order_bits};

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
    let n = n.min(x.len());
    if n == 0 {
        return Vec::new();
    }
    let mut keys = if n.saturating_mul(8) <= x.len() {
        stream_top(x, n)
    } else {
        let mut all: Vec<u64> = x.iter().enumerate().map(|(i, &v)| key_of_bits(order_bits(v), i as u32)).collect();
        if n < all.len() {
            compact(&mut all, n, &mut Vec::new());
        }
        all
    };
    sort_ord_desc_stable(&mut keys);
    keys
}

/// The streaming pass of [`top_keys`]: the `n` largest keys of `x` in
/// ascending id order (`1 <= n < x.len()`).
fn stream_top(x: &[f32], n: usize) -> Vec<u64> {
    let cap = (2 * n).max(n + 4 * BLOCK);
    let mut buf: Vec<u64> = Vec::with_capacity(cap + BLOCK);
    let mut scratch: Vec<u64> = Vec::with_capacity(cap + BLOCK);
    buf.extend(x[..n].iter().enumerate().map(|(i, &v)| key_of_bits(order_bits(v), i as u32)));
    // The n-th largest key so far; a later element passes iff its order
    // bits exceed the threshold's (an equal logit has a larger id, so a smaller key).
    let mut thr = (buf.iter().min().copied().unwrap_or(0) >> 32) as u32;
    let mut i = n;
    while i < x.len() {
        let end = (i + BLOCK).min(x.len());
        let blk = &x[i..end];
        // Branch-free: vectorises to a compare and an or-reduction.
        let hit = blk.iter().fold(false, |a, &v| a | (order_bits(v) > thr));
        if hit {
            for (j, &v) in blk.iter().enumerate() {
                let o = order_bits(v);
                if o > thr {
                    buf.push(key_of_bits(o, (i + j) as u32));
                }
            }
            if buf.len() >= cap {
                thr = (compact(&mut buf, n, &mut scratch) >> 32) as u32;
            }
        }
        i = end;
    }
    if buf.len() > n {
        compact(&mut buf, n, &mut scratch);
    }
    buf
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
        if h.iter().any(|&c| c == len) {
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
            vec![1.0f32; len],                                      // all equal
            (0..len).map(|i| i as f32).collect(),                   // ascending: every element passes
            (0..len).map(|i| -(i as f32)).collect(),                // descending
            (0..len).map(|i| (i % 7) as f32).collect(),             // many ties at the boundary
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
    fn stable_sort_on_order_bits_is_the_key_order() {
        for x in rows() {
            let mut k: Vec<u64> = x.iter().enumerate().map(|(i, &v)| order_key(v, i as u32)).collect();
            sort_ord_desc_stable(&mut k);
            assert_eq!(k, reference(&x, x.len()));
        }
    }
}
