//! Block-wide operations: folds and exact scans over the block's threads,
//! the reductions, scans and searches of tiles, and the categorical draw.

use super::ptx::{slot, smem, sync, SLOTS, SLOTS2};
use super::warp::Shfl;
use super::{ix, Ctx, Tile};

/// The reduction slots of the block's next fold, scan or `get`: a byte
/// offset from the first area to the one in use. Two areas of 16 bytes a
/// warp, used in turn: a collective writes its area, waits at one barrier
/// and reads it; the next collective's barrier (on the other area) comes
/// after every thread's reads, so the one after that may write it again:
/// one `bar.sync` a collective, not two.
#[inline(always)]
fn slots<const TH: usize, const I: usize>(c: &Ctx<TH, I>) -> usize {
    (SLOTS2 - SLOTS) * (c.st.get() & 1) as usize
}
/// The end of a collective's reads of its slots: the other area next.
#[inline(always)]
fn slots_done<const TH: usize, const I: usize>(c: &Ctx<TH, I>) {
    c.st.set(c.st.get() ^ 1);
}

/// Combines every thread's `v` in thread order (`op(lower, higher)`) and
/// returns the result on every thread. Two levels: each warp folds its
/// lanes, then every warp folds the warps' results in its lanes (one load
/// a lane, not one a warp in every thread: issue 22, run 44).
#[inline(always)]
pub(super) fn block_fold<T: Shfl, const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    mut v: T,
    op: impl Fn(T, T) -> T,
) -> T {
    let width = Ctx::<TH, I>::WIDTH;
    let lane = c.lane();
    let mut d = 1u32;
    while d < width {
        let o = v.down(d, Ctx::<TH, I>::MASK);
        if lane + d < width {
            v = op(v, o);
        }
        d <<= 1;
    }
    if Ctx::<TH, I>::ONE_WARP {
        // One warp (a warp scope's): lane 0's fold, no shared memory and no
        // barrier (a store's is paid before the next read: `Ctx::stored`).
        return v.idx(0);
    }
    let at = slots(c) as u64;
    if lane == 0 {
        v.sh_st(slot(c.warp()) + at);
    }
    sync();
    c.synced();
    let warps = Ctx::<TH, I>::WARPS as u32;
    let r = if warps == 1 {
        T::sh_ld(slot(0) + at)
    } else {
        // Several warps: whole warps (TH a multiple of 32), full masks.
        let mut r = T::sh_ld(slot(if lane < warps { lane as usize } else { 0 }) + at);
        let mut d = 1u32;
        while d < warps {
            let o = r.down(d, u32::MAX);
            if lane + d < warps {
                r = op(r, o);
            }
            d <<= 1;
        }
        r.idx(0)
    };
    slots_done(c);
    r
}

/// Integer types with exact (wrapping) sums, for reductions and scans.
pub trait IntSum: Copy + Default + Shfl {
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
}
macro_rules! intsum {
    ($($t:ty),*) => {$( impl IntSum for $t {
        #[inline(always)] fn wadd(self, o: Self) -> Self { self.wrapping_add(o) }
        #[inline(always)] fn wsub(self, o: Self) -> Self { self.wrapping_sub(o) }
    } )*};
}
intsum!(u32, u64, u128);

/// Exclusive prefix of every thread's `v` over threads (exact) and the total.
/// Two levels, as [`block_fold`]: every warp scans the warps' totals in its
/// lanes.
#[inline(always)]
pub(super) fn block_excl_scan<T: IntSum, const TH: usize, const I: usize>(c: &Ctx<TH, I>, own: T) -> (T, T) {
    let width = Ctx::<TH, I>::WIDTH;
    let lane = c.lane();
    let mut v = own;
    let mut d = 1u32;
    while d < width {
        let o = v.up(d, Ctx::<TH, I>::MASK);
        if lane >= d {
            v = v.wadd(o);
        }
        d <<= 1;
    }
    if Ctx::<TH, I>::ONE_WARP {
        // One warp: the last lane's inclusive prefix is the total (no
        // barrier, as in block_fold).
        return (v.wsub(own), v.idx(31));
    }
    let at = slots(c) as u64;
    if lane == width - 1 {
        v.sh_st(slot(c.warp()) + at);
    }
    sync();
    c.synced();
    let warps = Ctx::<TH, I>::WARPS as u32;
    let (before, total) = if warps == 1 {
        (T::default(), T::sh_ld(slot(0) + at))
    } else {
        // Several warps: whole warps (TH a multiple of 32), full masks.
        let t = if lane < warps { T::sh_ld(slot(lane as usize) + at) } else { T::default() };
        let mut x = t;
        let mut d = 1u32;
        while d < warps {
            let y = x.up(d, u32::MAX);
            if lane >= d {
                x = x.wadd(y);
            }
            d <<= 1;
        }
        (x.wsub(t).idx(c.warp() as u32), x.idx(warps - 1))
    };
    slots_done(c);
    (before.wadd(v.wsub(own)), total)
}

/// Bounds of a primitive type: identities of max/min reductions.
pub trait Bounded: Copy + PartialOrd + Shfl {
    const LOWEST: Self;
    const HIGHEST: Self;
}
impl Bounded for f32 {
    const LOWEST: Self = f32::NEG_INFINITY;
    const HIGHEST: Self = f32::INFINITY;
}
macro_rules! bounded_int {
    ($($t:ty),*) => {$( impl Bounded for $t { const LOWEST: Self = <$t>::MIN; const HIGHEST: Self = <$t>::MAX; } )*};
}
bounded_int!(i32, u32, u64, i64);

/// Largest element (NaN never wins; LOWEST for an empty tile).
#[inline(always)]
pub fn reduce_max<T: Bounded, const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<T, I>) -> T {
    let mut a = T::LOWEST;
    for j in 0..I {
        if c.idx(j) < t.n && ix(&t.v, j) > a {
            a = ix(&t.v, j);
        }
    }
    block_fold(c, a, |a, b| if b > a { b } else { a })
}
/// Smallest element (NaN never wins; HIGHEST for an empty tile).
#[inline(always)]
pub fn reduce_min<T: Bounded, const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<T, I>) -> T {
    let mut a = T::HIGHEST;
    for j in 0..I {
        if c.idx(j) < t.n && ix(&t.v, j) < a {
            a = ix(&t.v, j);
        }
    }
    block_fold(c, a, |a, b| if b < a { b } else { a })
}
/// Sum of an integer tile (exact; wrapping).
#[inline(always)]
pub fn reduce_sum<T: IntSum, const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<T, I>) -> T {
    let mut a = T::default();
    for j in 0..I {
        if c.idx(j) < t.n {
            a = a.wadd(ix(&t.v, j));
        }
    }
    block_fold(c, a, |a, b| a.wadd(b))
}
#[inline(always)]
pub(super) fn scan<T: IntSum, const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    t: &Tile<T, I>,
    inclusive: bool,
) -> Tile<T, I> {
    let mut own = T::default();
    for j in 0..I {
        if c.idx(j) < t.n {
            own = own.wadd(ix(&t.v, j));
        }
    }
    let (mut acc, _) = block_excl_scan(c, own);
    let mut v = [T::default(); I];
    for (j, o) in v.iter_mut().enumerate() {
        if c.idx(j) < t.n {
            if inclusive {
                acc = acc.wadd(ix(&t.v, j));
                *o = acc;
            } else {
                *o = acc;
                acc = acc.wadd(ix(&t.v, j));
            }
        }
    }
    Tile { v, n: t.n }
}
/// Exclusive prefix sums of an integer tile.
#[inline(always)]
pub fn exclusive_scan<T: IntSum, const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<T, I>) -> Tile<T, I> {
    scan(c, t, false)
}
/// Inclusive prefix sums of an integer tile.
#[inline(always)]
pub fn inclusive_scan<T: IntSum, const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<T, I>) -> Tile<T, I> {
    scan(c, t, true)
}
/// Number of true elements.
#[inline(always)]
pub fn count<const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<bool, I>) -> u32 {
    let mut a = 0u32;
    for j in 0..I {
        if c.idx(j) < t.n && ix(&t.v, j) {
            a += 1;
        }
    }
    block_fold(c, a, |a, b| a.wrapping_add(b))
}
/// Whether any element is true.
#[inline(always)]
pub fn any<const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<bool, I>) -> bool {
    count(c, t) > 0
}
/// Whether every element is true (true for an empty tile).
#[inline(always)]
pub fn all<const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<bool, I>) -> bool {
    count(c, t) == t.n
}
/// Index of the first true element, or -1.
#[inline(always)]
pub fn first_where<const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<bool, I>) -> i32 {
    let mut a = u32::MAX;
    for j in (0..I).rev() {
        if c.idx(j) < t.n && ix(&t.v, j) {
            a = c.idx(j);
        }
    }
    let r = block_fold(c, a, |a, b| if b < a { b } else { a });
    if r == u32::MAX {
        -1
    } else {
        r as i32
    }
}
/// Index of the last true element, or -1.
#[inline(always)]
pub fn last_where<const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<bool, I>) -> i32 {
    let mut a = -1i32;
    for j in 0..I {
        if c.idx(j) < t.n && ix(&t.v, j) {
            a = c.idx(j) as i32;
        }
    }
    block_fold(c, a, |a, b| if b > a { b } else { a })
}
/// Element `i` of a tile (the type's zero when out of range), on every thread.
#[inline(always)]
pub fn get<T: Shfl + Default, const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<T, I>, i: u32) -> T {
    if i >= t.n {
        return T::default();
    }
    if Ctx::<TH, I>::ONE_WARP {
        // One warp: every lane takes slot j, the owner's comes by shuffle.
        let j = (i % I as u32) as usize;
        let mut x = T::default();
        for (jj, &y) in t.v.iter().enumerate() {
            if jj == j {
                x = y;
            }
        }
        return x.idx(i / I as u32);
    }
    let at = slots(c);
    if c.tid == i / I as u32 {
        let j = (i % I as u32) as usize;
        // A constant-index walk keeps register tiles in registers.
        let mut x = T::default();
        for (jj, &y) in t.v.iter().enumerate() {
            if jj == j {
                x = y;
            }
        }
        unsafe { *(smem().add(SLOTS + at) as *mut T) = x };
    }
    sync();
    c.synced();
    let r = unsafe { *(smem().add(SLOTS + at) as *mut T) };
    slots_done(c);
    r
}

/// Categorical draw over fixed-point weights (see `rt::cpu::categorical`):
/// the first index whose inclusive prefix `c` has `c * 2^53 > k * total`,
/// else the last nonzero weight, -1 when every weight is zero.
#[inline(always)]
pub fn categorical<const TH: usize, const I: usize>(c: &Ctx<TH, I>, w: &Tile<u64, I>, k: u64) -> i32 {
    let mut own = 0u128;
    for j in 0..I {
        if c.idx(j) < w.n {
            own += ix(&w.v, j) as u128;
        }
    }
    let (mut acc, total) = block_excl_scan(c, own);
    if total == 0 {
        return -1;
    }
    let thr = k as u128 * total;
    let mut first = u32::MAX;
    let mut last = -1i32;
    for j in 0..I {
        let e = c.idx(j);
        if e < w.n {
            acc += ix(&w.v, j) as u128;
            if first == u32::MAX && (acc << 53) > thr {
                first = e;
            }
            if ix(&w.v, j) > 0 {
                last = e as i32;
            }
        }
    }
    let first = block_fold(c, first, |a, b| if b < a { b } else { a });
    if first != u32::MAX {
        return first as i32;
    }
    block_fold(c, last, |a, b| if b > a { b } else { a })
}
