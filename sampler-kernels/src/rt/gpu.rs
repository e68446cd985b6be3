//! nvptx tile runtime: the tile ops of [`super::cpu`] as block-cooperative
//! routines (one thread block per program), bit for bit the same results.
//!
//! Layout. A program runs on one block of `TH` threads; a tile of the
//! variant holds up to `TILE = TH * I` elements, thread `t` owning elements
//! `t*I .. t*I+I` (the blocked arrangement) in a `[T; I]` array. Small
//! variants keep that array in registers; big ones (force top-k off, `I` of
//! 128..512) get it in local memory, which the driver sizes at launch.
//! Every tile carries its valid length `n`: maps compute padding too (pure
//! functions), reductions, scans, searches and stores only look at valid
//! elements, and loads only read valid elements.
//!
//! Scalar code runs redundantly on every thread of the block (every scalar is
//! block-uniform: loads of one address, broadcast reductions), so branches of
//! scalar code never diverge and barriers inside them are legal. Scalar
//! stores are done by thread 0. A barrier (`bar.sync 0`) follows every op
//! that writes global or shared memory that another thread may read next.
//!
//! Exactness. Integer sums and scans are exact (any order gives the same
//! bits). Max/min combine partial results in index order (thread-local fold,
//! then lanes 0..31 in order, then warps in order), so even the choice
//! between `-0.0` and `+0.0` is that of the CPU's left fold. Selection and
//! sorting run on the unique 64-bit order keys of `rt::math`, so top-n sets
//! and orders do not depend on the algorithm.
//!
//! Shared memory: one dynamic `.extern .shared` array (no static shared,
//! no `.extern .func`), laid out as [`SMEM_BASE`] bytes of reduction and
//! histogram scratch, then the sort buffer of `8 * min(TILE, SORT_CAP)`
//! bytes in kernels that use `top_n` or `sort_desc`
//! ([`crate::spec::gpu_shared_bytes`] gives the launch size), then, when the
//! host gives a launch more (`spec::gpu_stage_bytes`), `top_n`'s staging
//! area: a row range of up to that many keys is read once into shared
//! memory as u32 order bits, and the selection passes read it there.
//!
//! `top_n` / `sort_desc`: chunks of up to `SORT_CAP` keys in order: a radix
//! select (8-bit digits over the 64-bit keys, histograms in shared memory,
//! early exit once the selected bucket is exactly what is still needed) finds
//! the chunk's smallest key, the keys between it and the previous chunk's
//! bound are gathered into shared memory (exactly `m`, keys being unique),
//! bitonic-sorted descending, and copied into the owners' tile slots.

use core::arch::asm;
use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::math::{key_id, key_logit, key_of_bits, order_bits, order_key};
pub use crate::spec::{GPU_SMEM_BASE as SMEM_BASE, GPU_SORT_CAP as SORT_CAP};

core::arch::global_asm!(".extern .shared .align 16 .b8 __sk_smem[];");

/// Generic address of the block's dynamic shared memory.
#[inline(always)]
fn smem() -> *mut u8 {
    let p: u64;
    // SAFETY: reads the address of the module's dynamic shared array.
    unsafe { asm!("cvta.shared.u64 {p}, __sk_smem;", p = out(reg64) p, options(pure, nomem, nostack)) };
    p as *mut u8
}

/// Reduction slots: 32 of 16 bytes (one per warp).
const SLOTS: usize = 0;
/// Radix histogram: 256 u32.
const HIST: usize = 512;
/// Block-uniform scalars published by one thread (8 u32).
const MISC: usize = 1536;

/// Reduction slot `w` (16 bytes, shared-window address).
#[inline(always)]
fn slot(w: usize) -> u64 {
    sh() + (SLOTS + 16 * w) as u64
}

// Shared-window addresses and `ld/st/atom/red.shared` for the hot paths of
// selection and sorting: generic pointers into shared memory compile to
// generic `LD`/`ST`/`ATOM` (a slower path than `LDS`/`STS`/`ATOMS`).

/// Shared-window address of the dynamic shared array.
#[inline(always)]
fn sh() -> u64 {
    let p: u64;
    // SAFETY: reads the shared-window address of the module's dynamic shared array.
    unsafe { asm!("mov.u64 {p}, __sk_smem;", p = out(reg64) p, options(pure, nomem, nostack)) };
    p
}
#[inline(always)]
fn lds32(a: u64) -> u32 {
    let v: u32;
    // SAFETY: `a` is a 4-byte aligned address inside the launch's shared memory.
    unsafe { asm!("ld.shared.u32 {v}, [{a}];", v = out(reg32) v, a = in(reg64) a, options(nostack, readonly)) };
    v
}
#[inline(always)]
fn sts32(a: u64, v: u32) {
    // SAFETY: as `lds32`.
    unsafe { asm!("st.shared.u32 [{a}], {v};", a = in(reg64) a, v = in(reg32) v, options(nostack)) };
}
#[inline(always)]
fn lds64(a: u64) -> u64 {
    let v: u64;
    // SAFETY: `a` is an 8-byte aligned address inside the launch's shared memory.
    unsafe { asm!("ld.shared.u64 {v}, [{a}];", v = out(reg64) v, a = in(reg64) a, options(nostack, readonly)) };
    v
}
#[inline(always)]
fn sts64(a: u64, v: u64) {
    // SAFETY: as `lds64`.
    unsafe { asm!("st.shared.u64 [{a}], {v};", a = in(reg64) a, v = in(reg64) v, options(nostack)) };
}
/// `atom.shared.add.u32`: adds `v` at `a`, returns the old value.
#[inline(always)]
fn atoms_add(a: u64, v: u32) -> u32 {
    let r: u32;
    // SAFETY: as `lds32`.
    unsafe { asm!("atom.shared.add.u32 {r}, [{a}], {v};", r = out(reg32) r, a = in(reg64) a, v = in(reg32) v, options(nostack)) };
    r
}
/// `red.shared.add.u32`: adds `v` at `a`.
#[inline(always)]
fn reds_add(a: u64, v: u32) {
    // SAFETY: as `lds32`.
    unsafe { asm!("red.shared.add.u32 [{a}], {v};", a = in(reg64) a, v = in(reg32) v, options(nostack)) };
}
#[inline(always)]
fn hist(b: u32) -> u64 {
    sh() + HIST as u64 + 4 * b as u64
}
#[inline(always)]
fn misc(i: u32) -> u64 {
    sh() + MISC as u64 + 4 * i as u64
}
/// The sort buffer (u64 keys).
#[inline(always)]
fn sortbuf() -> u64 {
    sh() + SMEM_BASE as u64
}

/// Bytes of dynamic shared memory this launch got (`%dynamic_smem_size`).
#[inline(always)]
fn dynamic_smem_bytes() -> u32 {
    let b: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {b}, %dynamic_smem_size;", b = out(reg32) b, options(pure, nomem, nostack)) };
    b
}

/// The staging area of `top_n` (u32 order bits), after the sort buffer,
/// and how many keys it holds in this launch (0: none; the host gives it
/// room per launch, `spec::gpu_stage_bytes`).
#[inline(always)]
fn stagebuf<const TH: usize, const I: usize>() -> (u64, u32) {
    let cap = Ctx::<TH, I>::CAP;
    let start = SMEM_BASE + 8 * if cap < SORT_CAP { cap } else { SORT_CAP };
    let have = dynamic_smem_bytes();
    let keys = if have > start { (have - start) / 4 } else { 0 };
    (sh() + start as u64, keys)
}

#[inline(always)]
fn sync() {
    // SAFETY: every call site is reached by all threads of the block
    // (tile ops are called from block-uniform scalar code).
    unsafe { _syncthreads() }
}

/// Per-program context: the thread's index in the block.
#[derive(Clone, Copy)]
pub struct Ctx<const TH: usize, const I: usize> {
    tid: u32,
}

impl<const TH: usize, const I: usize> Ctx<TH, I> {
    #[inline(always)]
    pub fn new() -> Self {
        // SAFETY: reads the special register %tid.x.
        Ctx { tid: unsafe { _thread_idx_x() } }
    }
    /// Tile capacity `TH * I`.
    const CAP: u32 = (TH * I) as u32;
    /// Element index of this thread's slot `j`.
    #[inline(always)]
    fn idx(&self, j: usize) -> u32 {
        self.tid * I as u32 + j as u32
    }
    #[inline(always)]
    fn lane(&self) -> u32 {
        self.tid & 31
    }
    #[inline(always)]
    fn warp(&self) -> usize {
        (self.tid >> 5) as usize
    }
    const WARPS: usize = TH.div_ceil(32);
    const WIDTH: u32 = if TH < 32 { TH as u32 } else { 32 };
    const MASK: u32 = if TH >= 32 { u32::MAX } else { (1u32 << TH) - 1 };
}

impl<const TH: usize, const I: usize> Default for Ctx<TH, I> {
    fn default() -> Self {
        Self::new()
    }
}

/// A tile: this thread's `I` slots and the tile's valid length.
#[derive(Clone, Copy)]
pub struct Tile<T, const I: usize> {
    pub v: [T; I],
    pub n: u32,
}

/// A global buffer as seen by a kernel: a raw device pointer. The host
/// sizes every buffer for the kernel's shapes before launching.
#[derive(Clone, Copy)]
pub struct Gm<T> {
    p: *mut T,
}

impl<T: Copy> Gm<T> {
    #[inline(always)]
    pub fn from_raw(p: *mut T) -> Self {
        Gm { p }
    }
    #[inline(always)]
    fn read(&self, i: u64) -> T {
        // SAFETY: in bounds by the host's sizing contract.
        unsafe { *self.p.add(i as usize) }
    }
    #[inline(always)]
    fn write(&self, i: u64, v: T) {
        // SAFETY: in bounds by the host's sizing contract; programs write disjoint elements.
        unsafe { *self.p.add(i as usize) = v }
    }
}

/// Four elements loaded together (`ld.global.v4`).
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct V4<T>([T; 4]);

/// A scalar operand of an elementwise map (broadcast to every element).
#[derive(Clone, Copy)]
pub struct S<T>(pub T);

/// An operand of an elementwise map: a tile or a broadcast scalar.
pub trait Operand<T: Copy, const I: usize> {
    fn at(&self, j: usize) -> T;
    fn tile_len(&self) -> u32;
}
impl<T: Copy, const I: usize> Operand<T, I> for S<T> {
    #[inline(always)]
    fn at(&self, _: usize) -> T {
        self.0
    }
    #[inline(always)]
    fn tile_len(&self) -> u32 {
        u32::MAX
    }
}
impl<T: Copy, const I: usize> Operand<T, I> for &Tile<T, I> {
    #[inline(always)]
    fn at(&self, j: usize) -> T {
        // SAFETY: maps call with j < I.
        unsafe { *self.v.get_unchecked(j) }
    }
    #[inline(always)]
    fn tile_len(&self) -> u32 {
        self.n
    }
}

/// `a[j]` for `j < I` (every caller loops over `0..I`): no bounds check,
/// so no panic path (and no `.extern .func`) reaches the PTX.
#[inline(always)]
fn ix<T: Copy, const I: usize>(a: &[T; I], j: usize) -> T {
    // SAFETY: j < I at every call site.
    unsafe { *a.get_unchecked(j) }
}

#[inline(always)]
fn common_len(ls: &[u32]) -> u32 {
    let m = ls.iter().copied().min().unwrap_or(0);
    if m == u32::MAX {
        0
    } else {
        m
    }
}

/// Elementwise map of one operand.
#[inline(always)]
pub fn map1<A: Copy, R: Copy + Default, const TH: usize, const I: usize>(
    _: &Ctx<TH, I>,
    a: impl Operand<A, I>,
    f: impl Fn(A) -> R,
) -> Tile<R, I> {
    let n = common_len(&[a.tile_len()]);
    let mut v = [R::default(); I];
    for (j, o) in v.iter_mut().enumerate() {
        *o = f(a.at(j));
    }
    Tile { v, n }
}
/// Elementwise map of two operands.
#[inline(always)]
pub fn map2<A: Copy, B: Copy, R: Copy + Default, const TH: usize, const I: usize>(
    _: &Ctx<TH, I>,
    a: impl Operand<A, I>,
    b: impl Operand<B, I>,
    f: impl Fn(A, B) -> R,
) -> Tile<R, I> {
    let n = common_len(&[a.tile_len(), b.tile_len()]);
    let mut v = [R::default(); I];
    for (j, o) in v.iter_mut().enumerate() {
        *o = f(a.at(j), b.at(j));
    }
    Tile { v, n }
}
/// Elementwise map of three operands.
#[inline(always)]
pub fn map3<A: Copy, B: Copy, C: Copy, R: Copy + Default, const TH: usize, const I: usize>(
    _: &Ctx<TH, I>,
    a: impl Operand<A, I>,
    b: impl Operand<B, I>,
    c: impl Operand<C, I>,
    f: impl Fn(A, B, C) -> R,
) -> Tile<R, I> {
    let n = common_len(&[a.tile_len(), b.tile_len(), c.tile_len()]);
    let mut v = [R::default(); I];
    for (j, o) in v.iter_mut().enumerate() {
        *o = f(a.at(j), b.at(j), c.at(j));
    }
    Tile { v, n }
}
/// Elementwise map of four operands.
#[inline(always)]
pub fn map4<A: Copy, B: Copy, C: Copy, D: Copy, R: Copy + Default, const TH: usize, const I: usize>(
    _: &Ctx<TH, I>,
    a: impl Operand<A, I>,
    b: impl Operand<B, I>,
    c: impl Operand<C, I>,
    d: impl Operand<D, I>,
    f: impl Fn(A, B, C, D) -> R,
) -> Tile<R, I> {
    let n = common_len(&[a.tile_len(), b.tile_len(), c.tile_len(), d.tile_len()]);
    let mut v = [R::default(); I];
    for (j, o) in v.iter_mut().enumerate() {
        *o = f(a.at(j), b.at(j), c.at(j), d.at(j));
    }
    Tile { v, n }
}

// ---------------------------------------------------------------- warp level

#[inline(always)]
fn shfl_down32(v: u32, d: u32, mask: u32) -> u32 {
    let r: u32;
    // SAFETY: called by every thread of `mask` at the same point (block-uniform code).
    unsafe { asm!("shfl.sync.down.b32 {r}, {v}, {d}, 31, {m};", r = out(reg32) r, v = in(reg32) v, d = in(reg32) d, m = in(reg32) mask) };
    r
}
#[inline(always)]
fn shfl_up32(v: u32, d: u32, mask: u32) -> u32 {
    let r: u32;
    // SAFETY: as `shfl_down32`.
    unsafe { asm!("shfl.sync.up.b32 {r}, {v}, {d}, 0, {m};", r = out(reg32) r, v = in(reg32) v, d = in(reg32) d, m = in(reg32) mask) };
    r
}

/// Values moved between lanes by warp shuffles (as 32-bit words).
pub trait Shfl: Copy {
    fn down(self, d: u32, mask: u32) -> Self;
    fn up(self, d: u32, mask: u32) -> Self;
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

/// Combines every thread's `v` in thread order (`op(lower, higher)`) and
/// returns the result on every thread.
#[inline(always)]
fn block_fold<T: Shfl, const TH: usize, const I: usize>(c: &Ctx<TH, I>, mut v: T, op: impl Fn(T, T) -> T) -> T {
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
    if lane == 0 {
        v.sh_st(slot(c.warp()));
    }
    sync();
    let mut r = T::sh_ld(slot(0));
    for w in 1..Ctx::<TH, I>::WARPS {
        r = op(r, T::sh_ld(slot(w)));
    }
    sync();
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
#[inline(always)]
fn block_excl_scan<T: IntSum, const TH: usize, const I: usize>(c: &Ctx<TH, I>, own: T) -> (T, T) {
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
    if lane == width - 1 {
        v.sh_st(slot(c.warp()));
    }
    sync();
    let mut before = T::default();
    let mut total = T::default();
    for w in 0..Ctx::<TH, I>::WARPS {
        let s = T::sh_ld(slot(w));
        if w < c.warp() {
            before = before.wadd(s);
        }
        total = total.wadd(s);
    }
    sync();
    (before.wadd(v.wsub(own)), total)
}

// ------------------------------------------------------------- program, memory

/// Program index: the block's index (the row or request).
#[inline(always)]
pub fn row<const TH: usize, const I: usize>(_: &Ctx<TH, I>) -> u32 {
    // SAFETY: reads %ctaid.x.
    unsafe { _block_idx_x() }
}

/// `n` consecutive elements of `buf` from element `off`.
#[inline(always)]
pub fn load<T: Copy + Default, const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: Gm<T>, off: u64, n: u32) -> Tile<T, I> {
    let n = n.min(Ctx::<TH, I>::CAP);
    let mut v = [T::default(); I];
    // 16-byte vector loads of 4-byte elements when this thread's run of I is
    // whole and aligned (row starts are, for V a multiple of 4).
    if core::mem::size_of::<T>() == 4 && I % 4 == 0 {
        let first = c.idx(0);
        let p = buf.p.wrapping_add(off.wrapping_add(first as u64) as usize);
        if first + I as u32 <= n && (p as usize) % 16 == 0 {
            for q in 0..I / 4 {
                // SAFETY: in bounds (first + I <= n) and 16-byte aligned.
                let w = unsafe { *(p.add(4 * q) as *const V4<T>) };
                v[4 * q..4 * q + 4].copy_from_slice(&w.0);
            }
            return Tile { v, n };
        }
    }
    for (j, o) in v.iter_mut().enumerate() {
        let e = c.idx(j);
        if e < n {
            *o = buf.read(off.wrapping_add(e as u64));
        }
    }
    Tile { v, n }
}
/// Writes the tile at element `off` of `buf`.
#[inline(always)]
pub fn store<T: Copy + Default, const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: Gm<T>, off: u64, t: &Tile<T, I>) {
    store_head(c, buf, off, t, u32::MAX)
}
/// Writes the first `k` elements of the tile at element `off` of `buf`.
#[inline(always)]
pub fn store_head<T: Copy + Default, const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: Gm<T>, off: u64, t: &Tile<T, I>, k: u32) {
    let n = t.n.min(k);
    for j in 0..I {
        let e = c.idx(j);
        if e < n {
            buf.write(off.wrapping_add(e as u64), ix(&t.v, j));
        }
    }
    sync();
}
/// One element of `buf` (every thread reads it).
#[inline(always)]
pub fn load_scalar<T: Copy + Default, const TH: usize, const I: usize>(_: &Ctx<TH, I>, buf: Gm<T>, i: u64) -> T {
    buf.read(i)
}
/// Writes one element of `buf` (thread 0).
#[inline(always)]
pub fn store_scalar<T: Copy + Default, const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: Gm<T>, i: u64, v: T) {
    if c.tid == 0 {
        buf.write(i, v);
    }
    sync();
}
/// Bits `0..n` of the u32 words from word `word_off`.
#[inline(always)]
pub fn mask_bits<const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: Gm<u32>, word_off: u64, n: u32) -> Tile<bool, I> {
    let n = n.min(Ctx::<TH, I>::CAP);
    let mut v = [false; I];
    for (j, o) in v.iter_mut().enumerate() {
        let e = c.idx(j);
        if e < n {
            *o = (buf.read(word_off + (e / 32) as u64) >> (e % 32)) & 1 == 1;
        }
    }
    Tile { v, n }
}
/// `[0, 1, ..., n-1]`.
#[inline(always)]
pub fn iota<const TH: usize, const I: usize>(c: &Ctx<TH, I>, n: u32) -> Tile<u32, I> {
    let mut v = [0u32; I];
    for (j, o) in v.iter_mut().enumerate() {
        *o = c.idx(j);
    }
    Tile { v, n: n.min(Ctx::<TH, I>::CAP) }
}
/// `n` copies of `v`.
#[inline(always)]
pub fn full<T: Copy, const TH: usize, const I: usize>(_: &Ctx<TH, I>, n: u32, v: T) -> Tile<T, I> {
    Tile { v: [v; I], n: n.min(Ctx::<TH, I>::CAP) }
}
/// Number of valid elements.
#[inline(always)]
pub fn len<T, const TH: usize, const I: usize>(_: &Ctx<TH, I>, t: &Tile<T, I>) -> u32 {
    t.n
}

// ------------------------------------------------------------ reductions, scans

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
fn scan<T: IntSum, const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<T, I>, inclusive: bool) -> Tile<T, I> {
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
pub fn get<T: Copy + Default, const TH: usize, const I: usize>(c: &Ctx<TH, I>, t: &Tile<T, I>, i: u32) -> T {
    if i >= t.n {
        return T::default();
    }
    if c.tid == i / I as u32 {
        let j = (i % I as u32) as usize;
        // A constant-index walk keeps register tiles in registers.
        let mut x = T::default();
        for (jj, &y) in t.v.iter().enumerate() {
            if jj == j {
                x = y;
            }
        }
        unsafe { *(smem().add(SLOTS) as *mut T) = x };
    }
    sync();
    let r = unsafe { *(smem().add(SLOTS) as *mut T) };
    sync();
    r
}

// ------------------------------------------------------------ selection, order


/// Slot `pos` for each lane of the warp with `take`, counted in `misc(i)`:
/// one shared atomic per warp (ballot + popc) instead of one per key.
/// Every lane of the warp must call it together.
#[inline(always)]
fn warp_claim(tid: u32, take: bool, i: u32) -> u32 {
    let ballot: u32;
    // SAFETY: all 32 lanes are converged here (uniform loop bounds).
    unsafe { asm!("{{ .reg .pred p; setp.ne.u32 p, {t}, 0; vote.sync.ballot.b32 {b}, p, 0xffffffff; }}", b = out(reg32) ballot, t = in(reg32) take as u32) };
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
        unsafe { asm!("shfl.sync.idx.b32 {r}, {v}, {l}, 31, 0xffffffff;", r = out(reg32) r, v = in(reg32) base, l = in(reg32) leader) };
        r
    };
    base + (ballot & ((1u32 << lane) - 1)).count_ones()
}

/// The warp's ballot of `p` (every lane of the warp calls it together).
#[inline(always)]
fn ballot(p: bool) -> u32 {
    let b: u32;
    // SAFETY: all 32 lanes are converged here (uniform loop bounds).
    unsafe { asm!("{{ .reg .pred q; setp.ne.u32 q, {t}, 0; vote.sync.ballot.b32 {b}, q, 0xffffffff; }}", b = out(reg32) b, t = in(reg32) p as u32) };
    b
}

/// Lane `src`'s `v`, on every lane (every lane calls it together).
#[inline(always)]
fn shfl_idx32(v: u32, src: u32) -> u32 {
    let r: u32;
    // SAFETY: as `ballot`.
    unsafe { asm!("shfl.sync.idx.b32 {r}, {v}, {l}, 31, 0xffffffff;", r = out(reg32) r, v = in(reg32) v, l = in(reg32) src) };
    r
}

/// Keys loaded together per thread in the selection passes.
const SEL_BATCH: usize = 8;

/// Adds 1 to `hist(bin)` for every lane of the warp (`bin == 256`: none);
/// lanes with the same bin add once, by their lowest lane. Every lane of the
/// warp must call it together (block sizes are multiples of 32).
#[inline(always)]
fn warp_hist_add(tid: u32, bin: u32) {
    let peers: u32;
    // SAFETY: all 32 lanes are converged here (uniform loop bounds).
    unsafe { asm!("match.any.sync.b32 {p}, {b}, 0xffffffff;", p = out(reg32) peers, b = in(reg32) bin) };
    if bin < 256 && (tid & 31) == peers.trailing_zeros() {
        reds_add(hist(bin), peers.count_ones());
    }
}

/// The smallest key of the `k` largest keys `< hi` (all keys when `!has_hi`)
/// among those `keys` yields, `1 <= k <=` their number; every thread gets it.
/// `keys(it)` is this thread's `it`-th key, `None` when it has none there.
#[inline(always)]
fn radix_select<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    iters: u32,
    keys: &impl Fn(u32) -> Option<u64>,
    has_hi: bool,
    hi: u64,
    k: u32,
) -> u64 {
    let mut prefix = 0u64;
    let mut mask = 0u64;
    let mut rem = k;
    let mut shift = 56u32;
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
        // Warp 0 finds the bin holding the rem-th largest key: lane l sums
        // bins 255 - 8l ..= 248 - 8l (from the top), a shuffle scan over the
        // lanes, and the one lane whose range crosses rem walks its 8 bins
        // (instead of one thread walking all 256 bins).
        if c.tid < 32 {
            let lane = c.tid;
            let mut h = [0u32; 8];
            let mut s = 0u32;
            for (j, x) in h.iter_mut().enumerate() {
                *x = lds32(hist(255 - (8 * lane + j as u32)));
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
                sts32(misc(0), pick.0);
                sts32(misc(1), pick.1);
                sts32(misc(2), pick.2);
            }
        }
        sync();
        let (bk, cum, cnt) = (lds32(misc(0)), lds32(misc(1)), lds32(misc(2)));
        rem -= cum;
        prefix |= (bk as u64) << shift;
        mask |= 255u64 << shift;
        if cnt == rem || shift == 0 {
            return prefix;
        }
        shift -= 8;
    }
}

/// The `n` largest keys that `keys` yields, in descending order, as a tile.
#[inline(always)]
fn sorted_keys<const TH: usize, const I: usize>(c: &Ctx<TH, I>, iters: u32, keys: impl Fn(u32) -> Option<u64>, n: u32) -> Tile<u64, I> {
    let n = n.min(Ctx::<TH, I>::CAP);
    let cap = if Ctx::<TH, I>::CAP < SORT_CAP { Ctx::<TH, I>::CAP } else { SORT_CAP };
    let buf = sortbuf();
    let mut out = [0u64; I];
    let mut has_hi = false;
    let mut hi = 0u64;
    let mut c0 = 0u32;
    while c0 < n {
        let m = (n - c0).min(cap);
        let lo = radix_select(c, iters, &keys, has_hi, hi, m);
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
        let p = m.next_power_of_two();
        let mut i = m + c.tid;
        while i < p {
            sts64(buf + 8 * i as u64, 0);
            i += TH as u32;
        }
        sync();
        bitonic_desc(c, buf, p);
        for (j, o) in out.iter_mut().enumerate() {
            let e = c.idx(j);
            if e >= c0 && e < c0 + m {
                *o = lds64(buf + 8 * (e - c0) as u64);
            }
        }
        sync();
        has_hi = true;
        hi = lo;
        c0 += m;
    }
    Tile { v: out, n }
}

#[inline(always)]
fn shfl_xor64(v: u64, m: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: every lane of the warp calls it together (uniform loops).
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 31, 0xffffffff;", r = out(reg32) lo, v = in(reg32) v as u32, m = in(reg32) m);
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 31, 0xffffffff;", r = out(reg32) hi, v = in(reg32) (v >> 32) as u32, m = in(reg32) m);
    }
    ((hi as u64) << 32) | lo as u64
}

/// One compare-exchange of the bitonic network, seen from position `i`
/// holding `a`, whose partner `i ^ stride` holds `b`: the new key at `i`.
#[inline(always)]
fn bitonic_keep(i: u32, stride: u32, size: u32, a: u64, b: u64) -> u64 {
    let desc = (i & size) == 0;
    let lower = (i & stride) == 0;
    if desc == lower {
        if a > b { a } else { b }
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
fn bitonic_desc<const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: u64, p: u32) {
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
fn bitonic_reg<const TH: usize, const I: usize, const E: usize>(c: &Ctx<TH, I>, buf: u64, p: u32) {
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
fn in_thread<const E: usize, const S: usize>(k: &mut [u64; E], base: u32, size: u32) {
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
fn bitonic_desc_shared<const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: u64, p: u32) {
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

/// The `n` largest of `v` logits at `buf[off..off+v]`, ordered as SAMPLER.md
/// section 3.6 (logit descending, ties by lower id), with their ids.
#[inline(always)]
pub fn top_n<const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: Gm<f32>, off: u64, v: u32, n: u32) -> (Tile<f32, I>, Tile<i32, I>) {
    let iters = v.div_ceil(TH as u32);
    let tid = c.tid;
    if let Some(st) = stage::<TH, I>(c, buf, off, v) {
        let keys = move |it: u32| {
            let i = it * TH as u32 + tid;
            // Staged: i < v <= the staging area's keys.
            if i < v {
                Some(key_of_bits(lds32(st + 4 * i as u64), i))
            } else {
                None
            }
        };
        let k = sorted_keys(c, iters, keys, n.min(v));
        return split_keys(&k);
    }
    let keys = move |it: u32| {
        let i = it * TH as u32 + tid;
        if i < v {
            Some(order_key(buf.read(off + i as u64), i))
        } else {
            None
        }
    };
    let k = sorted_keys(c, iters, keys, n.min(v));
    split_keys(&k)
}

/// Reads `buf[off..off+v]` once into the staging area as u32 order bits
/// (loads in flight together) when the launch gave room for `v` keys; every
/// selection pass then reads shared memory. `None`: no room.
#[inline(always)]
fn stage<const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: Gm<f32>, off: u64, v: u32) -> Option<u64> {
    let (st, room) = stagebuf::<TH, I>();
    if v > room {
        return None;
    }
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
        for (j, &xj) in x.iter().enumerate() {
            let i = (base + j as u32) * TH as u32 + c.tid;
            if i < v {
                sts32(st + 4 * i as u64, order_bits(xj));
            }
        }
        base += SEL_BATCH as u32;
    }
    sync();
    Some(st)
}

/// The `n` largest of `v` logits at `buf[off..off+v]` with their ids, in
/// ascending id order (no sort): a radix select finds the n-th largest key,
/// then each warp takes a contiguous id range and ballots plus a block scan
/// of the warps' counts place the keys in id order. Equal logits come out in
/// ascending id order, as `top_n` puts them.
#[inline(always)]
pub fn top_n_set<const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: Gm<f32>, off: u64, v: u32, n: u32) -> (Tile<f32, I>, Tile<i32, I>) {
    let cap = if Ctx::<TH, I>::CAP < SORT_CAP { Ctx::<TH, I>::CAP } else { SORT_CAP };
    let n = n.min(v);
    if n == 0 || n > cap || TH % 32 != 0 {
        // Sorted order keeps equal logits in ascending id order too.
        return top_n(c, buf, off, v, n);
    }
    let iters = v.div_ceil(TH as u32);
    let tid = c.tid;
    let st = stage::<TH, I>(c, buf, off, v);
    let key_at = move |i: u32| match st {
        Some(st) => key_of_bits(lds32(st + 4 * i as u64), i),
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
    let lo = radix_select(c, iters, &keys, false, 0, n);
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
    split_keys(&Tile { v: out, n })
}

/// Sorts (logit, id) pairs in the order of SAMPLER.md section 3.6.
#[inline(always)]
pub fn sort_desc<const TH: usize, const I: usize>(c: &Ctx<TH, I>, vals: &Tile<f32, I>, ids: &Tile<i32, I>) -> (Tile<f32, I>, Tile<i32, I>) {
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
fn split_keys<const I: usize>(k: &Tile<u64, I>) -> (Tile<f32, I>, Tile<i32, I>) {
    let mut x = [0f32; I];
    let mut id = [0i32; I];
    for ((xo, io), &key) in x.iter_mut().zip(id.iter_mut()).zip(k.v.iter()) {
        *xo = key_logit(key);
        *io = key_id(key) as i32;
    }
    (Tile { v: x, n: k.n }, Tile { v: id, n: k.n })
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

/// `buf[off + idx[i]]` for each i, or `fallback` where `idx[i] < 0`.
#[inline(always)]
pub fn gather<T: Copy + Default, const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: Gm<T>,
    off: u64,
    idx: &Tile<i32, I>,
    fallback: T,
) -> Tile<T, I> {
    let mut v = [T::default(); I];
    for (j, o) in v.iter_mut().enumerate() {
        if c.idx(j) < idx.n {
            let i = ix(&idx.v, j);
            *o = if i < 0 { fallback } else { buf.read(off + i as u64) };
        }
    }
    Tile { v, n: idx.n }
}
/// `buf[off + idx[i]] = vals[i]` for each i with `idx[i] >= 0`.
#[inline(always)]
pub fn scatter<T: Copy + Default, const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: Gm<T>, off: u64, idx: &Tile<i32, I>, vals: &Tile<T, I>) {
    let n = idx.n.min(vals.n);
    for j in 0..I {
        if c.idx(j) < n {
            let i = ix(&idx.v, j);
            if i >= 0 {
                buf.write(off + i as u64, ix(&vals.v, j));
            }
        }
    }
    sync();
}
