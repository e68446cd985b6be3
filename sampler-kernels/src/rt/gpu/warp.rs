//! Warp-level operations: shuffles (and the `Shfl` trait moving any element
//! type through them), ballots, warp-aggregated shared atomics.

use core::arch::asm;

use super::ptx::{atoms_add, hist, lds32, misc, reds_add, sts32};

#[inline(always)]
pub(super) fn shfl_down32(v: u32, d: u32, mask: u32) -> u32 {
    let r: u32;
    // SAFETY: called by every thread of `mask` at the same point (block-uniform code).
    unsafe {
        asm!("shfl.sync.down.b32 {r}, {v}, {d}, 31, {m};", r = out(reg32) r, v = in(reg32) v, d = in(reg32) d, m = in(reg32) mask)
    };
    r
}
/// Lane `lane ^ m`'s `v` (every lane of the warp calls it together).
#[inline(always)]
pub(super) fn shfl_xor32(v: u32, m: u32) -> u32 {
    let r: u32;
    // SAFETY: every lane of the warp calls it together (uniform code).
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 31, 0xffffffff;", r = out(reg32) r, v = in(reg32) v, m = in(reg32) m)
    };
    r
}
#[inline(always)]
pub(super) fn shfl_up32(v: u32, d: u32, mask: u32) -> u32 {
    let r: u32;
    // SAFETY: as `shfl_down32`.
    unsafe {
        asm!("shfl.sync.up.b32 {r}, {v}, {d}, 0, {m};", r = out(reg32) r, v = in(reg32) v, d = in(reg32) d, m = in(reg32) mask)
    };
    r
}

/// Values moved between lanes by warp shuffles (as 32-bit words).
pub trait Shfl: Copy {
    fn down(self, d: u32, mask: u32) -> Self;
    fn up(self, d: u32, mask: u32) -> Self;
    /// Lane `src`'s value (a whole warp calls it together, full mask).
    fn idx(self, src: u32) -> Self;
    /// Stores the value at shared-window address `a` (16-byte slot).
    fn sh_st(self, a: u64);
    /// Loads a value stored by `sh_st`.
    fn sh_ld(a: u64) -> Self;
}
macro_rules! shfl32 {
    ($($t:ty: $to:expr, $from:expr);*) => {$(
        impl Shfl for $t {
            #[inline(always)] fn down(self, d: u32, m: u32) -> Self { let f: fn(u32) -> $t = $from; let t: fn($t) -> u32 = $to; f(shfl_down32(t(self), d, m)) }
            #[inline(always)] fn up(self, d: u32, m: u32) -> Self { let f: fn(u32) -> $t = $from; let t: fn($t) -> u32 = $to; f(shfl_up32(t(self), d, m)) }
            #[inline(always)] fn idx(self, s: u32) -> Self { let f: fn(u32) -> $t = $from; let t: fn($t) -> u32 = $to; f(shfl_idx32(t(self), s)) }
            #[inline(always)] fn sh_st(self, a: u64) { let t: fn($t) -> u32 = $to; sts32(a, t(self)) }
            #[inline(always)] fn sh_ld(a: u64) -> Self { let f: fn(u32) -> $t = $from; f(lds32(a)) }
        }
    )*};
}
shfl32!(u32: |x| x, |x| x; i32: |x| x as u32, |x| x as i32; f32: |x| x.to_bits(), f32::from_bits; bool: |x| x as u32, |x| x != 0);
macro_rules! shfl_wide {
    ($($t:ty: $words:expr);*) => {$(
        impl Shfl for $t {
            #[inline(always)] fn down(self, d: u32, m: u32) -> Self {
                let x = self as u128; let mut r = 0u128;
                for w in 0..$words { r |= (shfl_down32((x >> (32 * w)) as u32, d, m) as u128) << (32 * w); }
                r as $t
            }
            #[inline(always)] fn up(self, d: u32, m: u32) -> Self {
                let x = self as u128; let mut r = 0u128;
                for w in 0..$words { r |= (shfl_up32((x >> (32 * w)) as u32, d, m) as u128) << (32 * w); }
                r as $t
            }
            #[inline(always)] fn idx(self, s: u32) -> Self {
                let x = self as u128; let mut r = 0u128;
                for w in 0..$words { r |= (shfl_idx32((x >> (32 * w)) as u32, s) as u128) << (32 * w); }
                r as $t
            }
            #[inline(always)] fn sh_st(self, a: u64) {
                let x = self as u128;
                for w in 0..$words { sts32(a + 4 * w as u64, (x >> (32 * w)) as u32); }
            }
            #[inline(always)] fn sh_ld(a: u64) -> Self {
                let mut r = 0u128;
                for w in 0..$words { r |= (lds32(a + 4 * w as u64) as u128) << (32 * w); }
                r as $t
            }
        }
    )*};
}
shfl_wide!(u64: 2; i64: 2; u128: 4);

/// Slot `pos` for each lane of the warp with `take`, counted in `misc(i)`:
/// one shared atomic per warp (ballot + popc) instead of one per key.
/// Every lane of the warp must call it together.
#[inline(always)]
pub(super) fn warp_claim(tid: u32, take: bool, i: u32) -> u32 {
    let ballot: u32;
    // SAFETY: all 32 lanes are converged here (uniform loop bounds).
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {t}, 0; vote.sync.ballot.b32 {b}, p, 0xffffffff; }}", b = out(reg32) ballot, t = in(reg32) take as u32)
    };
    if ballot == 0 {
        return 0;
    }
    let lane = tid & 31;
    let leader = ballot.trailing_zeros();
    let mut base = 0u32;
    if lane == leader {
        base = atoms_add(misc(i), ballot.count_ones());
    }
    let base: u32 = {
        let r: u32;
        // SAFETY: converged warp, as above.
        unsafe {
            asm!("shfl.sync.idx.b32 {r}, {v}, {l}, 31, 0xffffffff;", r = out(reg32) r, v = in(reg32) base, l = in(reg32) leader)
        };
        r
    };
    base + (ballot & ((1u32 << lane) - 1)).count_ones()
}

/// The warp's ballot of `p` (every lane of the warp calls it together).
#[inline(always)]
pub(super) fn ballot(p: bool) -> u32 {
    let b: u32;
    // SAFETY: all 32 lanes are converged here (uniform loop bounds).
    unsafe {
        asm!("{{ .reg .pred q; setp.ne.u32 q, {t}, 0; vote.sync.ballot.b32 {b}, q, 0xffffffff; }}", b = out(reg32) b, t = in(reg32) p as u32)
    };
    b
}

/// Lane `src`'s `v`, on every lane (every lane calls it together).
#[inline(always)]
pub(super) fn shfl_idx32(v: u32, src: u32) -> u32 {
    let r: u32;
    // SAFETY: as `ballot`.
    unsafe {
        asm!("shfl.sync.idx.b32 {r}, {v}, {l}, 31, 0xffffffff;", r = out(reg32) r, v = in(reg32) v, l = in(reg32) src)
    };
    r
}

/// The lanes of the warp whose `v` equals this lane's (`match.any`);
/// every lane of the warp calls it together.
#[inline(always)]
pub(super) fn match_any(v: u32) -> u32 {
    let peers: u32;
    // SAFETY: all 32 lanes are converged here (uniform loop bounds).
    unsafe { asm!("match.any.sync.b32 {p}, {b}, 0xffffffff;", p = out(reg32) peers, b = in(reg32) v) };
    peers
}

/// Adds 1 to `hist(bin)` for every lane of the warp (`bin == 256`: none);
/// lanes with the same bin add once, by their lowest lane. Every lane of the
/// warp must call it together (block sizes are multiples of 32).
#[inline(always)]
pub(super) fn warp_hist_add(tid: u32, bin: u32) {
    let peers: u32;
    // SAFETY: all 32 lanes are converged here (uniform loop bounds).
    unsafe { asm!("match.any.sync.b32 {p}, {b}, 0xffffffff;", p = out(reg32) peers, b = in(reg32) bin) };
    if bin < 256 && (tid & 31) == peers.trailing_zeros() {
        reds_add(hist(bin), peers.count_ones());
    }
}

#[inline(always)]
pub(super) fn shfl_xor64(v: u64, m: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: every lane of the warp calls it together (uniform loops).
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 31, 0xffffffff;", r = out(reg32) lo, v = in(reg32) v as u32, m = in(reg32) m);
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 31, 0xffffffff;", r = out(reg32) hi, v = in(reg32) (v >> 32) as u32, m = in(reg32) m);
    }
    ((hi as u64) << 32) | lo as u64
}

/// `bar.warp.sync`: orders the warp's shared-memory accesses before it
/// against those after it (every lane of the warp calls it together).
#[inline(always)]
pub(super) fn syncwarp() {
    // SAFETY: every lane of the warp calls it together (uniform loops).
    unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) };
}
