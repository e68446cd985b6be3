//! Element-level operations of the DSL, shared by every Rust target.
//!
//! The `#[kernel]` macro lowers each elementwise expression to a closure over
//! these functions (one closure per fused expression), and scalar code calls
//! them directly. Integer arithmetic wraps and integer division by zero gives
//! zero, as on GPU hardware, so no input can make a kernel panic.

#[cfg(target_arch = "nvptx64")]
pub use super::math::to_fixed;
/// [`super::math::to_fixed`]; on the CPU its branch-free twin
/// [`super::math::to_fixed_flat`] (the same values), so tile maps vectorise.
#[cfg(not(target_arch = "nvptx64"))]
pub use super::math::to_fixed_flat as to_fixed;
pub use super::math::{accept, fixed_to_f32, frac_floor, ln_fixed, rand_u64, uniform53};

/// Arithmetic with the DSL's semantics: IEEE for floats, wrapping for integers.
pub trait Arith: Copy {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn rem(self, o: Self) -> Self;
    fn neg(self) -> Self;
}

macro_rules! arith_int {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline(always)] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)] fn div(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_div(o) } }
            #[inline(always)] fn rem(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_rem(o) } }
            #[inline(always)] fn neg(self) -> Self { self.wrapping_neg() }
        }
    )*};
}
arith_int!(i32, u32, i64, u64);

macro_rules! arith_float {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(self, o: Self) -> Self { self + o }
            #[inline(always)] fn sub(self, o: Self) -> Self { self - o }
            #[inline(always)] fn mul(self, o: Self) -> Self { self * o }
            #[inline(always)] fn div(self, o: Self) -> Self { self / o }
            #[inline(always)] fn rem(self, o: Self) -> Self { self % o }
            #[inline(always)] fn neg(self) -> Self { -self }
        }
    )*};
}
arith_float!(f32, f64);

#[inline(always)]
pub fn add<T: Arith>(a: T, b: T) -> T {
    a.add(b)
}
#[inline(always)]
pub fn sub<T: Arith>(a: T, b: T) -> T {
    a.sub(b)
}
#[inline(always)]
pub fn mul<T: Arith>(a: T, b: T) -> T {
    a.mul(b)
}
#[inline(always)]
pub fn div<T: Arith>(a: T, b: T) -> T {
    a.div(b)
}
#[inline(always)]
pub fn rem<T: Arith>(a: T, b: T) -> T {
    a.rem(b)
}
#[inline(always)]
pub fn neg<T: Arith>(a: T) -> T {
    a.neg()
}
/// Shift left; shift amounts wrap at the bit width.
#[inline(always)]
pub fn shl(a: u64, b: u32) -> u64 {
    a.wrapping_shl(b)
}
/// Shift right; shift amounts wrap at the bit width.
#[inline(always)]
pub fn shr(a: u64, b: u32) -> u64 {
    a.wrapping_shr(b)
}

/// `exp(x)` in f32 ([`super::math::exp_f32`]; on the CPU its branch-free
/// twin [`super::math::exp_f32_flat`], the same bits, so tile maps vectorise).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    #[cfg(not(target_arch = "nvptx64"))]
    return super::math::exp_f32_flat(x);
    #[cfg(target_arch = "nvptx64")]
    return super::math::exp_f32(x);
}
/// The smaller of two values (`a` when unordered).
#[inline(always)]
pub fn min<T: PartialOrd>(a: T, b: T) -> T {
    if b < a {
        b
    } else {
        a
    }
}
/// The larger of two values (`a` when unordered).
#[inline(always)]
pub fn max<T: PartialOrd>(a: T, b: T) -> T {
    if b > a {
        b
    } else {
        a
    }
}
/// `c ? a : b`.
#[inline(always)]
pub fn select<T>(c: bool, a: T, b: T) -> T {
    if c {
        a
    } else {
        b
    }
}
#[inline(always)]
pub fn is_nan(x: f32) -> bool {
    x.is_nan()
}
#[inline(always)]
pub fn is_pos_inf(x: f32) -> bool {
    x == f32::INFINITY
}
#[inline(always)]
pub fn is_neg_inf(x: f32) -> bool {
    x == f32::NEG_INFINITY
}
#[inline(always)]
pub fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}
