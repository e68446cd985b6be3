//! Scalar numerics shared by every Rust target (CPU and nvptx).
//!
//! Everything here is plain IEEE f32/f64 arithmetic and integer arithmetic
//! with no fused multiply-add and no libm, so the CPU backend and the PTX
//! compute bit-identical values. Sums of probabilities are kept in unsigned
//! fixed point ([`FIX_BITS`] fractional bits): integer addition is
//! associative, so reductions and scans give the same bits in any order, on
//! any tile size and thread count (SAMPLER.md section 9, batch invariance).

// `!(x > 0.0)` is deliberate: NaN must take the "not positive" branch.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

/// Fractional bits of the fixed-point weights: `w = floor(p * 2^44)`.
/// A row of up to 2^19 weights of at most 1.0 sums to less than 2^63.
pub const FIX_BITS: u32 = 44;
/// Largest vocabulary the fixed-point sums support without overflow.
pub const MAX_VOCAB: u32 = 1 << 19;

/// SplitMix64 increment (SAMPLER.md section 2).
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64 finaliser (SAMPLER.md section 2).
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `rand_u64(seed, seq)`: the seq-th output of SplitMix64(seed) (SAMPLER.md section 2).
#[inline(always)]
pub fn rand_u64(seed: u64, seq: u64) -> u64 {
    mix64(seed.wrapping_add(seq.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// The 53-bit integer `k` of `uniform(seed, seq) = k * 2^-53` (SAMPLER.md section 2).
/// Decisions compare `k` exactly in integers instead of rounding a product in f64.
#[inline(always)]
pub fn uniform53(seed: u64, seq: u64) -> u64 {
    rand_u64(seed, seq) >> 11
}

/// `uniform(seed, seq)` as an f64 in [0, 1) (for tests and host code).
#[inline(always)]
pub fn uniform_f64(seed: u64, seq: u64) -> f64 {
    uniform53(seed, seq) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// Mantissa and exponent of a finite non-negative f32: `x = m * 2^e`, `m < 2^24`.
#[inline(always)]
fn decompose(x: f32) -> (u64, i32) {
    let bits = x.to_bits();
    let exp = ((bits >> 23) & 0xff) as i32;
    let frac = (bits & 0x7f_ffff) as u64;
    if exp == 0 {
        (frac, -149)
    } else {
        (frac | 0x80_0000, exp - 150)
    }
}

/// `floor(total * p)` computed exactly, for `p` a finite f32 in [0, 1].
/// Used for the top-p threshold: a token is removed when the exclusive
/// prefix of fixed-point weights before it exceeds `p * total`.
#[inline(always)]
pub fn frac_floor(total: u64, p: f32) -> u64 {
    if !(p > 0.0) {
        return 0;
    }
    if p >= 1.0 {
        return total;
    }
    let (m, e) = decompose(p);
    let prod = total as u128 * m as u128;
    // p < 1 so e < 0.
    let s = (-e) as u32;
    if s >= 128 {
        0
    } else {
        (prod >> s) as u64
    }
}

/// Accept test of speculative decoding, exactly: `q > 0 && k * 2^-53 * q < p`
/// for `k` from [`uniform53`] and `p`, `q` probabilities as f32 (SAMPLER.md section 6.3).
#[inline(always)]
pub fn accept(k: u64, q: f32, p: f32) -> bool {
    if !(q > 0.0) || !(p > 0.0) || q.is_nan() || p.is_nan() {
        return false;
    }
    if q.is_infinite() {
        return k == 0;
    }
    if p.is_infinite() {
        return true;
    }
    let (mq, eq) = decompose(q);
    let (mp, ep) = decompose(p);
    let lhs = k as u128 * mq as u128; // < 2^77
                                      // k*mq*2^(eq-53) < mp*2^ep  <=>  lhs < mp * 2^d
    let d = ep - eq + 53;
    if lhs == 0 {
        return true;
    }
    if d >= 0 {
        if d > 100 {
            true
        } else {
            lhs < (mp as u128) << (d as u32)
        }
    } else {
        let s = (-d) as u32;
        if lhs >= (1u128 << 24) || s >= 64 {
            false
        } else {
            (lhs << s) < mp as u128
        }
    }
}

/// Fixed-point weight of a probability: `floor(x * 2^44)`, 0 for NaN or x <= 0.
#[inline(always)]
pub fn to_fixed(x: f32) -> u64 {
    if !(x > 0.0) {
        return 0;
    }
    let y = x * (1u64 << FIX_BITS) as f32;
    if y >= 9.223_372e18 {
        return 1u64 << 63;
    }
    y as u64
}

/// [`to_fixed`] without branches or saturating conversions, for the CPU:
/// tile maps that end in a fixed-point weight auto-vectorise. The same
/// value for every input (tests check all 2^32 bit patterns).
///
/// `y = x * 2^44` is converted exactly in pieces that fit an i32: below
/// 2^55 as `hi * 2^31 + lo` (`hi = trunc(y / 2^31)` has at most 24 bits, so
/// `hi * 2^31` and the remainder `lo < 2^31` are exact f32 values), from
/// 2^55 on as `trunc(y / 2^32) * 2^32` (y is then a multiple of 2^32).
#[inline(always)]
pub fn to_fixed_flat(x: f32) -> u64 {
    let y = x * (1u64 << FIX_BITS) as f32;
    let big = y >= 9.223_372e18;
    // Inputs that return early in `to_fixed` (NaN, x <= 0, overflow) compute on 0.
    let yc = if x > 0.0 && !big { y } else { 0.0 };
    const P31: f32 = 2_147_483_648.0;
    const P55: f32 = 36_028_797_018_963_968.0;
    let ya = if yc < P55 { yc } else { 0.0 };
    // SAFETY (both conversions): finite, non-negative and below 2^31 (ya < 2^55, yc < 2^63).
    let hi: i32 = unsafe { (ya * (1.0 / P31)).to_int_unchecked() };
    let lo: i32 = unsafe { (ya - hi as f32 * P31).to_int_unchecked() };
    let small = ((hi as u32 as u64) << 31) + lo as u32 as u64;
    let top: i32 = unsafe { (yc * (0.5 / P31)).to_int_unchecked() };
    let large = (top as u32 as u64) << 32;
    let v = if yc < P55 { small } else { large };
    if big && x > 0.0 {
        1u64 << 63
    } else {
        v
    }
}

/// A fixed-point sum back to a probability, rounded to f32.
#[inline(always)]
pub fn fixed_to_f32(s: u64) -> f32 {
    (s as f64 * (1.0 / (1u64 << FIX_BITS) as f64)) as f32
}

const LN2_F64: f64 = core::f64::consts::LN_2;

/// Natural log of `s * 2^-44` (a fixed-point sum), as f32; `-inf` for 0.
/// Used for the log-normaliser of the kept set (SAMPLER.md section 3.9).
pub fn ln_fixed(s: u64) -> f32 {
    if s == 0 {
        return f32::NEG_INFINITY;
    }
    // s = m * 2^e with m in [sqrt(1/2), sqrt(2)).
    let lz = s.leading_zeros() as i32;
    let e = 63 - lz; // floor(log2 s)
    let top = s << lz; // bit 63 set
                       // m in [1, 2): 52 bits of mantissa from the top bits (exact for s < 2^53).
    let mut m = f64::from_bits((1023u64 << 52) | ((top << 1) >> 12));
    let mut e = e - FIX_BITS as i32;
    // The literal (one ulp below SQRT_2) is part of the committed numerics: keep it.
    #[allow(clippy::approx_constant)]
    let sqrt2 = 1.414_213_562_373_095;
    if m > sqrt2 {
        m *= 0.5;
        e += 1;
    }
    let t = (m - 1.0) / (m + 1.0);
    let t2 = t * t;
    // ln m = 2 (t + t^3/3 + t^5/5 + ...), |t| < 0.172: 9 terms reach 1e-16.
    let mut acc = 1.0 / 19.0;
    acc = acc * t2 + 1.0 / 17.0;
    acc = acc * t2 + 1.0 / 15.0;
    acc = acc * t2 + 1.0 / 13.0;
    acc = acc * t2 + 1.0 / 11.0;
    acc = acc * t2 + 1.0 / 9.0;
    acc = acc * t2 + 1.0 / 7.0;
    acc = acc * t2 + 1.0 / 5.0;
    acc = acc * t2 + 1.0 / 3.0;
    acc = acc * t2 + 1.0;
    let ln_m = 2.0 * t * acc;
    (ln_m + e as f64 * LN2_F64) as f32
}

/// `exp(x)` in f32 with plain IEEE operations (no FMA, no libm), within
/// 2 ulp of the true value; identical bits on every Rust target.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > 88.72283 {
        return f32::INFINITY;
    }
    if x < -103.97208 {
        return 0.0;
    }
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let t = x * LOG2E;
    let k = if t >= 0.0 { (t + 0.5) as i32 } else { (t - 0.5) as i32 };
    let kf = k as f32;
    let r = (x - kf * LN2_HI) - kf * LN2_LO;
    let p = exp_taylor7(r);
    // Scale by 2^k in two steps so subnormal results round once, deterministically.
    if k >= -126 {
        if k > 127 {
            p * f32::from_bits(254u32 << 23) * f32::from_bits(((k - 127 + 127) as u32) << 23)
        } else {
            p * f32::from_bits(((k + 127) as u32) << 23)
        }
    } else {
        p * f32::from_bits(((k + 64 + 127) as u32) << 23) * f32::from_bits(((127 - 64) as u32) << 23)
    }
}

/// exp(r) for |r| <= 0.35: Taylor to degree 7, in Horner form (the one
/// sequence of operations [`exp_f32`] and [`exp_f32_flat`] share bit for bit).
#[inline(always)]
fn exp_taylor7(r: f32) -> f32 {
    let mut p = 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    p
}

/// [`exp_f32`] without branches, for the CPU: the same operations on the
/// same values, every special case a select, so loops over tiles
/// auto-vectorise. Bit-identical to [`exp_f32`] for every input (tests check
/// it on all 2^32 bit patterns); the nvptx build keeps [`exp_f32`].
#[inline(always)]
pub fn exp_f32_flat(x: f32) -> f32 {
    const HI: f32 = 88.72283;
    const LO: f32 = -103.97208;
    // In range the computation sees x itself; out of range (and NaN) its
    // result is replaced below, so it sees 0 (a clamp to LO would compute a
    // subnormal, which costs a microcode assist on x86 for every -inf).
    let xc = if (LO..=HI).contains(&x) { x } else { 0.0 };
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let t = xc * LOG2E;
    // |t| <= 151 (xc is in range, never NaN): the conversion needs no
    // saturation, so it is a plain (vectorisable) truncation.
    // SAFETY: t + 0.5 is finite and within i32.
    let k: i32 = unsafe { (t + if t >= 0.0 { 0.5 } else { -0.5 }).to_int_unchecked() };
    let kf = k as f32;
    let r = (xc - kf * LN2_HI) - kf * LN2_LO;
    let p = exp_taylor7(r);
    // exp_f32's three scalings as (p * a) * b; b = 1 (exact) in the middle case.
    let (ea, eb) = if k > 127 {
        (254, k)
    } else if k >= -126 {
        (k + 127, 127)
    } else {
        (k + 64 + 127, 127 - 64)
    };
    let v = p * f32::from_bits((ea as u32) << 23) * f32::from_bits((eb as u32) << 23);
    if x.is_nan() {
        x
    } else if x > HI {
        f32::INFINITY
    } else if x < LO {
        0.0
    } else {
        v
    }
}

/// Order key of a (logit, id) pair: larger key = earlier in the order of
/// SAMPLER.md section 3.6 (logit descending, ties by lower vocabulary id).
/// Keys are unique per row, so the top-N set does not depend on the algorithm.
#[inline(always)]
pub fn order_key(logit: f32, id: u32) -> u64 {
    key_of_bits(order_bits(logit), id)
}

/// The high half of [`order_key`]: a monotone map of f32 onto u32
/// (-0.0 and +0.0 compare equal as logits).
#[inline(always)]
pub fn order_bits(logit: f32) -> u32 {
    let b = logit.to_bits();
    let b = if b == 0x8000_0000 { 0 } else { b };
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// [`order_bits`] of -inf: every order bits value below it is a negative
/// NaN, so the bad logits (NaN or +inf, SAMPLER.md section 3.2) are
/// exactly the order bits `< NEG_INF_ORDER` or `>= POS_INF_ORDER`.
pub const NEG_INF_ORDER: u32 = 0x007f_ffff;
/// [`order_bits`] of +inf: every order bits value above it is a positive NaN.
pub const POS_INF_ORDER: u32 = 0xff80_0000;

/// Whether order bits `o` (of [`order_bits`]) are those of a bad logit:
/// NaN of any sign and payload, or +inf (SAMPLER.md section 3.2).
#[inline(always)]
pub fn order_is_bad(o: u32) -> bool {
    !(NEG_INF_ORDER..POS_INF_ORDER).contains(&o)
}

/// A row's (or chunk's) bad and finite counts from the histogram of the
/// top `bits` of its order bits (bin `b` = how many keys have
/// `o >> (32 - bits) == b`), as the mask check counts them (SAMPLER.md
/// section 3.2; "finite" = not -inf):
/// - the bins below -inf's bin hold only negative NaNs, the bins from
///   +inf's up only +inf and positive NaNs: all bad;
/// - -inf's own bin mixes -inf (its top) with negative NaNs: `neg_inf`, the
///   exact number of -inf keys (a scan of the keys, needed only when that
///   bin is not empty), splits it;
/// - every other bin holds finite logits (and -0.0 / denormals) only.
///
/// `9 <= bits <= 23` (+inf's order bits start a bin). Returns `(bad, finite)`
/// for `v` keys.
#[inline(always)]
pub fn counts_from_bins(hist: impl Fn(u32) -> u32, bits: u32, neg_inf: u32, v: u32) -> (u32, u32) {
    let shift = 32 - bits;
    let (nb, pb) = (NEG_INF_ORDER >> shift, POS_INF_ORDER >> shift);
    let mut bad = 0u32;
    let mut b = 0u32;
    while b < nb {
        bad += hist(b);
        b += 1;
    }
    let mut b = pb;
    while b < (1u32 << bits) {
        bad += hist(b);
        b += 1;
    }
    (bad + hist(nb) - neg_inf, v - neg_inf)
}

/// [`order_key`] from its high half ([`order_bits`]) and the id.
#[inline(always)]
pub fn key_of_bits(ord: u32, id: u32) -> u64 {
    ((ord as u64) << 32) | (!id) as u64
}

/// Logit of an order key (inverse of [`order_key`]).
#[inline(always)]
pub fn key_logit(key: u64) -> f32 {
    let ord = (key >> 32) as u32;
    let b = if ord & 0x8000_0000 != 0 { ord & 0x7fff_ffff } else { !ord };
    f32::from_bits(b)
}

/// Vocabulary id of an order key (inverse of [`order_key`]).
#[inline(always)]
pub fn key_id(key: u64) -> u32 {
    !(key as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order-bits classification of bad and -inf logits (and of the
    /// 12-bit bins `counts_from_bins` and the GPU's staging histogram use)
    /// agrees with is_nan / +inf / -inf for the f32 with bit pattern `b`.
    fn check_classification(b: u32) {
        let (nb, pb) = (NEG_INF_ORDER >> 20, POS_INF_ORDER >> 20);
        let x = f32::from_bits(b);
        let o = order_bits(x);
        let bad = x.is_nan() || x == f32::INFINITY;
        assert_eq!(order_is_bad(o), bad, "{b:#x}");
        assert_eq!(o == NEG_INF_ORDER, x == f32::NEG_INFINITY, "{b:#x}");
        let bin = o >> 20;
        if bin < nb || bin >= pb {
            assert!(bad, "{b:#x}: bin {bin} is all bad");
        } else if bin == nb {
            assert!(bad || x == f32::NEG_INFINITY, "{b:#x}: -inf's bin");
        } else {
            assert!(!bad && x != f32::NEG_INFINITY, "{b:#x}: a finite bin");
        }
    }

    /// Every NaN and infinity (both signs, every payload: all 2^24 patterns
    /// with the exponent all ones), the finite neighbours of the bin edges,
    /// and a stride through the rest.
    #[test]
    fn order_bits_classify_bad_and_neg_inf() {
        assert_eq!((NEG_INF_ORDER >> 20, POS_INF_ORDER >> 20), (7, 0xff8));
        for sign in [0u32, 0x8000_0000] {
            for m in 0..1u32 << 23 {
                check_classification(sign | 0x7f80_0000 | m);
            }
        }
        for b in [0u32, 1, 0x8000_0000, 0x8000_0001, 0x7f7f_ffff, 0xff7f_ffff, 0x0080_0000, 0x8080_0000] {
            check_classification(b);
        }
        for b in (0..=u32::MAX).step_by(4099) {
            check_classification(b);
        }
    }

    /// All 2^32 inputs (about 30 s in release; run with `--ignored`).
    #[test]
    #[ignore]
    fn order_bits_classify_bad_and_neg_inf_on_all_inputs() {
        for b in 0..=u32::MAX {
            check_classification(b);
        }
    }

    #[test]
    fn counts_from_bins_equal_direct_counts() {
        let specials = [
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xff80_0001),
            f32::from_bits(0xff8f_ffff),
            f32::from_bits(0xff90_0000),
            f32::from_bits(0x7fff_ffff),
            f32::from_bits(0xffff_ffff),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            -0.0,
            0.0,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            1.5,
            -2.25,
        ];
        let mut s = 5u64;
        for rep in 0..400 {
            let len = [1usize, 7, 64, 1000][rep % 4];
            let row: Vec<f32> = (0..len)
                .map(|_| {
                    s = mix64(s.wrapping_add(0x9E37_79B9_7F4A_7C15));
                    match rep % 5 {
                        0 => f32::NEG_INFINITY,
                        1 => specials[(s % specials.len() as u64) as usize],
                        _ if s.is_multiple_of(3) => specials[((s >> 8) % specials.len() as u64) as usize],
                        _ => f32::from_bits((s >> 16) as u32),
                    }
                })
                .collect();
            let mut hist = vec![0u32; 4096];
            for &x in &row {
                hist[(order_bits(x) >> 20) as usize] += 1;
            }
            let ninf = row.iter().filter(|&&x| x == f32::NEG_INFINITY).count() as u32;
            let want_bad = row.iter().filter(|x| x.is_nan() || **x == f32::INFINITY).count() as u32;
            let got = counts_from_bins(|b| hist[b as usize], 12, ninf, len as u32);
            assert_eq!(got, (want_bad, len as u32 - ninf), "rep {rep}");
        }
    }

    #[test]
    fn uniform_check_value() {
        assert_eq!(uniform_f64(0, 0), 0.883_310_808_213_642_6);
    }

    #[test]
    fn exp_is_accurate() {
        let mut x = -103.0f32;
        while x < 88.0 {
            let a = exp_f32(x) as f64;
            let b = (x as f64).exp();
            // Relative accuracy where the result is normal; subnormals round to a multiple of 2^-149.
            let ok = if b >= f32::MIN_POSITIVE as f64 { ((a - b) / b).abs() < 3e-7 } else { (a - b).abs() <= 1.5e-45 };
            assert!(ok, "x={x} a={a} b={b}");
            x += 0.0137;
        }
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn exp_flat_equals_exp_on_a_dense_sample() {
        // Every 4099th bit pattern (all exponents, signs, NaNs and infinities), plus the edges.
        let mut b = 0u32;
        loop {
            let x = f32::from_bits(b);
            assert_eq!(exp_f32_flat(x).to_bits(), exp_f32(x).to_bits(), "x = {x:e} ({b:#x})");
            match b.checked_add(4099) {
                Some(n) => b = n,
                None => break,
            }
        }
        for x in [88.72283f32, -103.97208, 88.72284, -103.97209, 0.0, -0.0, f32::MAX, f32::MIN, -87.33655, -87.33654] {
            assert_eq!(exp_f32_flat(x).to_bits(), exp_f32(x).to_bits(), "x = {x:e}");
        }
    }

    /// All 2^32 inputs (minutes on one core): `cargo test --release -p sampler-kernels exp_flat_equals_exp_on_all -- --ignored`.
    #[test]
    #[ignore]
    fn exp_flat_equals_exp_on_all_inputs() {
        for b in 0..=u32::MAX {
            let x = f32::from_bits(b);
            assert_eq!(exp_f32_flat(x).to_bits(), exp_f32(x).to_bits(), "x = {x:e} ({b:#x})");
        }
    }

    #[test]
    fn to_fixed_flat_equals_to_fixed_on_a_dense_sample() {
        let mut b = 0u32;
        loop {
            let x = f32::from_bits(b);
            assert_eq!(to_fixed_flat(x), to_fixed(x), "x = {x:e} ({b:#x})");
            match b.checked_add(4099) {
                Some(n) => b = n,
                None => break,
            }
        }
        for e in 0..64 {
            // Around every power of two of y = x * 2^44 (the pieces' edges).
            let x = (2.0f64.powi(e) / 2.0f64.powi(44)) as f32;
            for x in [x, f32::from_bits(x.to_bits() - 1), f32::from_bits(x.to_bits() + 1)] {
                assert_eq!(to_fixed_flat(x), to_fixed(x), "x = {x:e}");
            }
        }
        for x in [0.0f32, -0.0, 1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX, 524_288.0, 524_287.97] {
            assert_eq!(to_fixed_flat(x), to_fixed(x), "x = {x:e}");
        }
    }

    /// All 2^32 inputs: `cargo test --release -p sampler-kernels to_fixed_flat_all -- --ignored`.
    #[test]
    #[ignore]
    fn to_fixed_flat_all_inputs() {
        for b in 0..=u32::MAX {
            let x = f32::from_bits(b);
            assert_eq!(to_fixed_flat(x), to_fixed(x), "x = {x:e} ({b:#x})");
        }
    }

    #[test]
    fn ln_fixed_is_accurate() {
        for s in [1u64, 3, 1 << 44, (1 << 44) + 12345, 987_654_321_987, u64::MAX >> 1] {
            let want = (s as f64).ln() - FIX_BITS as f64 * core::f64::consts::LN_2;
            let got = ln_fixed(s) as f64;
            assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "s={s} {got} {want}");
        }
    }

    #[test]
    fn frac_floor_exact() {
        assert_eq!(frac_floor(1000, 0.5), 500);
        assert_eq!(frac_floor(1000, 1.0), 1000);
        assert_eq!(frac_floor(3, 0.5), 1);
        let t = 1u64 << 44;
        assert_eq!(frac_floor(t, 0.8f32), (t as f64 * 0.8f32 as f64) as u64);
    }

    #[test]
    fn accept_matches_f64() {
        let mut s = 1u64;
        for _ in 0..20000 {
            s = mix64(s);
            let k = s >> 11;
            let q = (mix64(s ^ 1) >> 40) as f32 / (1u64 << 24) as f32;
            let p = (mix64(s ^ 2) >> 40) as f32 / (1u64 << 24) as f32;
            let u = k as f64 / 9_007_199_254_740_992.0;
            let want = q > 0.0 && u * (q as f64) < p as f64;
            let lhs = u * q as f64;
            if (lhs - p as f64).abs() > 1e-12 {
                assert_eq!(accept(k, q, p), want, "k={k} q={q} p={p}");
            }
        }
        assert!(accept(123, 0.5, 0.5));
        assert!(!accept(123, 0.0, 0.5));
        assert!(!accept(0, 0.5, 0.0));
    }

    #[test]
    fn order_keys() {
        let a = order_key(1.0, 5);
        let b = order_key(1.0, 7);
        let c = order_key(0.5, 0);
        let d = order_key(f32::NEG_INFINITY, 0);
        assert!(a > b && b > c && c > d);
        assert_eq!(key_logit(order_key(-2.5, 3)), -2.5);
        assert_eq!(key_id(order_key(-2.5, 3)), 3);
        assert!(order_key(-0.0, 1) == order_key(0.0, 1));
    }
}
