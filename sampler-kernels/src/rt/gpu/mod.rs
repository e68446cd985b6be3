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
//! stores are done by thread 0. Barriers (`bar.sync 0`): one in each block
//! fold, scan or `get` (two slot areas used in turn, `block::slots`), those
//! of the shared-memory selection and sort steps, and after global stores
//! one owed barrier, paid before the next op that reads global memory unless
//! a collective's barrier comes first (`Ctx::stored`; none at the end of a
//! kernel). A warp scope (`if warp_scope(len) { .. }`, [`warp_ctx`]) runs on
//! warp 0 alone as a one-warp context (`Ctx<32, 2>`): shuffles instead of
//! shared memory, no barrier in its collectives, `bar.warp.sync` for a store's
//! owed barrier, one `bar.sync` at its join.
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
//! memory as u32 order bits, and the selection passes read it there. A
//! staging launch's sort buffer is at least `spec::GPU_SELECT_SCRATCH`
//! bytes: before the sort it holds the selection scratch.
//!
//! Staged selection (`top_n` with `n <= SORT_CAP`, `top_n_set`): while
//! staging, a histogram of the keys' top 12 bits (sign, exponent, 3 mantissa
//! bits); a block scan of it finds the bin holding the n-th largest key;
//! one pass compacts that bin's positions, and the radix select below runs
//! on them only (a bin of more than 4096 keys falls back to the radix
//! select over every key).
//!
//! `top_n` / `sort_desc` otherwise: chunks of up to `SORT_CAP` keys in order: a radix
//! select (8-bit digits over the 64-bit keys, histograms in shared memory,
//! early exit once the selected bucket is exactly what is still needed) finds
//! the chunk's smallest key, the keys between it and the previous chunk's
//! bound are gathered into shared memory (exactly `m`, keys being unique),
//! bitonic-sorted descending, and copied into the owners' tile slots.
//! Staged `top_n` of more than 1024 keys (`topn_merge`) sorts them with a
//! block LSD radix sort instead (`sort::radix_desc`; counters in the staging
//! area, dead once the keys are gathered): same order, the keys being unique.
//!
//! Files by concern: `ptx` (inline-PTX intrinsics: shared-memory window,
//! barriers, special registers, cluster barrier and distributed shared
//! memory), `warp` (shuffles, ballots, warp-aggregated
//! atomics), `block` (block-wide folds, scans, reductions, the categorical
//! draw), `select` (radix select, `top_n`, `top_n_set`), `cluster` (a row
//! over the CTAs of a thread-block cluster: `top_n_cluster`) and `sort` (bitonic
//! and radix sorts, `sort_desc`); this file holds the context, tiles, buffers, maps
//! and memory ops.

use core::arch::nvptx::{_block_idx_x, _thread_idx_x};

pub use crate::spec::{GPU_SMEM_BASE as SMEM_BASE, GPU_SORT_CAP as SORT_CAP};

mod block;
mod cluster;
mod ptx;
mod select;
mod sort;
mod warp;

pub use block::{
    all, any, categorical, count, exclusive_scan, first_where, get, inclusive_scan, last_where, reduce_max, reduce_min,
    reduce_sum, Bounded, IntSum,
};
pub use cluster::top_n_cluster;
pub use ptx::grid_dependency_entry;
pub use select::{
    top_n, top_n_chunk_stream, top_n_counted, top_n_merge_stream, top_n_set, top_n_set_counted, top_n_stream_counted,
};
pub use sort::sort_desc;
pub use warp::Shfl;

use ptx::sync;

/// Per-program context: the thread's index in the block, and its barrier
/// state (block-uniform: every thread runs the same ops): bit 0 which of the
/// two reduction-slot areas the next fold or scan uses (`block::slots`), bit
/// 1 a global store whose barrier is still owed ([`Ctx::stored`]); and
/// which buffers those stores wrote (a hash bit each, [`buf_bit`]; bit 1
/// stays beside it: it is known at compile time, so ops after no store
/// carry no barrier code, while `wrote` depends on the addresses).
#[derive(Clone)]
pub struct Ctx<const TH: usize, const I: usize> {
    tid: u32,
    st: core::cell::Cell<u32>,
    wrote: core::cell::Cell<u32>,
}

/// Bit of the buffer at address `p` in [`Ctx`]'s set of written buffers: a
/// hash of the address (a collision costs a barrier, never a race).
#[inline(always)]
fn buf_bit(p: u64) -> u32 {
    1u32 << (((p >> 8) ^ (p >> 13) ^ (p >> 21)) as u32 & 31)
}

impl<const TH: usize, const I: usize> Ctx<TH, I> {
    #[inline(always)]
    pub fn new() -> Self {
        // A block's context: `TH == 32` is the one-warp context of a warp
        // scope, whose collectives have no barrier (`ONE_WARP`).
        const { assert!(TH != 32, "no 32-thread variants: Ctx<32, _> is a warp scope's") };
        // SAFETY: reads the special register %tid.x.
        Ctx { tid: unsafe { _thread_idx_x() }, st: core::cell::Cell::new(0), wrote: core::cell::Cell::new(0) }
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
    /// The context is one whole warp (`TH == 32`: a warp scope's; no
    /// variant has 32-thread blocks): its collectives are shuffles with no
    /// barrier (they touch no shared memory) and its stores' barrier is
    /// `bar.warp.sync`, so a scope runs while the block's other warps wait
    /// at its join.
    const ONE_WARP: bool = TH == 32;
    /// The barrier after a write other threads read next: the block's, or
    /// the warp's for a one-warp context.
    #[inline(always)]
    fn bar(&self) {
        if Self::ONE_WARP {
            warp::syncwarp();
        } else {
            sync();
        }
    }
    /// After this thread's global stores into the buffer at `p`: their
    /// barrier is owed, paid by the next op that reads global memory
    /// ([`Ctx::before_read`]) or writes that buffer again
    /// ([`Ctx::before_write`]) unless a block collective's barrier comes
    /// first ([`Ctx::synced`]); none at the end.
    #[inline(always)]
    fn stored(&self, p: u64) {
        self.st.set(self.st.get() | 2);
        self.wrote.set(self.wrote.get() | buf_bit(p));
    }
    /// Before an op reads global memory: the owed barrier, if any (so a
    /// thread reads what the others stored before it).
    #[inline(always)]
    fn before_read(&self) {
        if self.st.get() & 2 != 0 {
            self.bar();
            self.synced();
        }
    }
    /// Before an op writes the buffer at `p`: the owed barrier if a store
    /// since the last one may have written that buffer (other threads'
    /// elements: two writes of one address are ordered).
    #[inline(always)]
    fn before_write(&self, p: u64) {
        if self.st.get() & 2 != 0 && self.wrote.get() & buf_bit(p) != 0 {
            self.bar();
            self.synced();
        }
    }
    /// The block barrier of a collective: it orders every store before it.
    #[inline(always)]
    fn synced(&self) {
        self.st.set(self.st.get() & !2);
        self.wrote.set(0);
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

/// The most elements a tile of a warp scope holds: two a lane of one warp
/// (docs/DSL.md, "Warp scopes").
pub const WARP_TILE: u32 = 64;

/// Whether `if warp_scope(len) { .. }` runs its block on [`warp_ctx`]:
/// `len` at most [`WARP_TILE`] in a block of whole warps (else the block
/// runs it, the same results).
#[inline(always)]
pub fn warp_fits<const TH: usize, const I: usize>(_: &Ctx<TH, I>, len: u32) -> bool {
    TH % 32 == 0 && TH >= 32 && Ctx::<TH, I>::CAP >= WARP_TILE && len <= WARP_TILE
}

/// A warp scope's context: warp 0 of the block as a one-warp context
/// (lane `l` holding elements `2l`, `2l + 1`), `None` on the other warps,
/// which go on to [`warp_join`]. The scope's tiles hold at most `len`
/// (<= [`WARP_TILE`]) elements, its results leave it through global
/// stores (the checker's rules), so nothing but the join is shared.
#[inline(always)]
pub fn warp_ctx<const TH: usize, const I: usize>(c: &Ctx<TH, I>, _len: u32) -> Option<Ctx<32, 2>> {
    // The scope reads what the block stored before it.
    c.before_read();
    if c.tid < 32 {
        Some(Ctx { tid: c.tid, st: core::cell::Cell::new(0), wrote: core::cell::Cell::new(0) })
    } else {
        None
    }
}

/// The end of a warp scope: the block waits for warp 0 (its global stores
/// are then visible to every thread of the block).
#[inline(always)]
pub fn warp_join<const TH: usize, const I: usize>(c: &Ctx<TH, I>) {
    sync();
    c.synced();
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
    /// The buffer's address (which buffer a store wrote: [`Ctx::stored`]).
    #[inline(always)]
    fn addr(&self) -> u64 {
        self.p as u64
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

/// Eight 2-byte elements loaded together (one 16-byte load).
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct V8<T>([T; 8]);

/// Four 2-byte elements loaded together (one 8-byte load).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct H4([u16; 4]);

/// A buffer the read ops (`load`, `load_scalar`, `gather`, `top_n`,
/// `top_n_set`) accept: a [`Gm`] of its element type, or [`Logits`] (read
/// as f32 whatever the element type it holds).
pub trait Source: Copy {
    /// The element type reads give.
    type Elem: Copy + Default;
    /// Element `i` (in bounds by the host's sizing contract).
    fn read(&self, i: u64) -> Self::Elem;
    /// `n` consecutive elements from element `off`, thread `t` reading its own slots.
    fn load_tile<const TH: usize, const I: usize>(&self, c: &Ctx<TH, I>, off: u64, n: u32) -> Tile<Self::Elem, I>;
    /// Whether element `off` starts a group of four elements that
    /// [`Source::quad`] reads in one vector load (4-byte elements: 16-byte
    /// aligned; 2-byte logits: 8-byte aligned). False for other element sizes.
    fn quad_aligned(&self, off: u64) -> bool;
    /// Elements `i .. i + 4` in one vector load.
    ///
    /// # Safety
    /// In bounds, and `quad_aligned(i)`.
    unsafe fn quad(&self, i: u64) -> [Self::Elem; 4];
    /// [`Source::quad`] for a one-pass stream over read-only logits: f32
    /// logits through `ld.global.nc.L1::no_allocate.v4` (no L1 allocation).
    ///
    /// # Safety
    /// As [`Source::quad`], and nothing writes the buffer during the launch.
    #[inline(always)]
    unsafe fn quad_stream(&self, i: u64) -> [Self::Elem; 4] {
        // SAFETY: the caller's contract.
        unsafe { self.quad(i) }
    }
    /// The buffer as plain f32 when it holds f32 elements behind a run-time
    /// element type (`Logits`), so a hot loop can leave the per-element
    /// type branch out; `None` otherwise.
    #[inline(always)]
    fn as_f32(&self) -> Option<Gm<f32>> {
        None
    }
    /// How many low bits of [`order_bits`](super::math::order_bits) every
    /// element leaves constant for its sign once read as f32 (all 0 for a
    /// positive logit, all 1 for a negative one): 16 for bf16 logits (the
    /// widening is a shift; -0.0 reads as +0.0), else 0. f16 stays 0: its
    /// conversion need not keep a NaN's payload. The radix select sets
    /// those digits instead of counting them.
    #[inline(always)]
    fn flat_bits(&self) -> u32 {
        0
    }
}

impl<T: Copy + Default> Source for Gm<T> {
    type Elem = T;
    #[inline(always)]
    fn read(&self, i: u64) -> T {
        Gm::read(self, i)
    }
    #[inline(always)]
    fn load_tile<const TH: usize, const I: usize>(&self, c: &Ctx<TH, I>, off: u64, n: u32) -> Tile<T, I> {
        load_gm(c, *self, off, n)
    }
    #[inline(always)]
    fn quad_aligned(&self, off: u64) -> bool {
        core::mem::size_of::<T>() == 4 && (self.p.wrapping_add(off as usize) as usize) % 16 == 0
    }
    #[inline(always)]
    unsafe fn quad(&self, i: u64) -> [T; 4] {
        // SAFETY: the caller's contract (4-byte elements, 16-byte aligned, in bounds).
        unsafe { *(self.p.add(i as usize) as *const V4<T>) }.0
    }
    #[inline(always)]
    unsafe fn quad_stream(&self, i: u64) -> [T; 4] {
        // SAFETY: the caller's contract (4-byte elements, 16-byte aligned, in bounds, read-only).
        let w = unsafe { ptx::ldg_nc_v4(self.p.add(i as usize) as *const f32) };
        // SAFETY: T is 4 bytes (quad's contract) and plain data (Copy): any bits are a value
        // of the element types the kernels read (f32, i32, u32).
        unsafe { core::mem::transmute_copy::<[f32; 4], [T; 4]>(&w) }
    }
}

/// A `Logits` kernel parameter: a device pointer and its element type code
/// (`codes::LOGITS_F32`, `LOGITS_BF16`, `LOGITS_F16`, a launch scalar, so
/// one entry point serves all three). Reads widen to f32 exactly: bf16 by
/// a 16-bit shift, f16 by `cvt.f32.f16` (exact for every f16, subnormals
/// included). The branch on the code is uniform across the block.
#[derive(Clone, Copy)]
pub struct Logits {
    p: *mut u8,
    dtype: u32,
}

impl Logits {
    #[inline(always)]
    pub fn from_raw(p: *mut u8, dtype: u32) -> Self {
        Logits { p, dtype }
    }
    #[inline(always)]
    fn halves(&self) -> Gm<u16> {
        Gm::from_raw(self.p as *mut u16)
    }
    #[inline(always)]
    fn singles(&self) -> Gm<f32> {
        Gm::from_raw(self.p as *mut f32)
    }
}

/// bfloat16 bits -> f32 (exact: bf16 is the top half of an f32).
#[inline(always)]
fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// IEEE half bits -> f32 (exact).
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let f: f32;
    // SAFETY: a register-only conversion.
    unsafe {
        core::arch::asm!("cvt.f32.f16 {f}, {h};", f = out(reg32) f, h = in(reg16) h, options(pure, nomem, nostack))
    };
    f
}

/// A tile of bf16 (`f16 == false`) or f16 bits, widened to f32.
#[inline(always)]
fn widen<const I: usize>(t: Tile<u16, I>, f16: bool) -> Tile<f32, I> {
    let mut v = [0f32; I];
    for (j, o) in v.iter_mut().enumerate() {
        let h = ix(&t.v, j);
        *o = if f16 { f16_to_f32(h) } else { bf16_to_f32(h) };
    }
    Tile { v, n: t.n }
}

impl Source for Logits {
    type Elem = f32;
    #[inline(always)]
    fn read(&self, i: u64) -> f32 {
        match self.dtype {
            crate::codes::LOGITS_BF16 => bf16_to_f32(self.halves().read(i)),
            crate::codes::LOGITS_F16 => f16_to_f32(self.halves().read(i)),
            _ => self.singles().read(i),
        }
    }
    #[inline(always)]
    fn load_tile<const TH: usize, const I: usize>(&self, c: &Ctx<TH, I>, off: u64, n: u32) -> Tile<f32, I> {
        match self.dtype {
            crate::codes::LOGITS_BF16 => widen(load_gm(c, self.halves(), off, n), false),
            crate::codes::LOGITS_F16 => widen(load_gm(c, self.halves(), off, n), true),
            _ => load_gm(c, self.singles(), off, n),
        }
    }
    #[inline(always)]
    fn quad_aligned(&self, off: u64) -> bool {
        match self.dtype {
            crate::codes::LOGITS_BF16 | crate::codes::LOGITS_F16 => {
                (self.p.wrapping_add(2 * off as usize) as usize) % 8 == 0
            }
            _ => self.singles().quad_aligned(off),
        }
    }
    #[inline(always)]
    unsafe fn quad(&self, i: u64) -> [f32; 4] {
        let h = |f16: bool| {
            // SAFETY: the caller's contract (in bounds, 8-byte aligned for 2-byte logits).
            let q = unsafe { *(self.p.add(2 * i as usize) as *const H4) }.0;
            let w = |x: u16| if f16 { f16_to_f32(x) } else { bf16_to_f32(x) };
            [w(q[0]), w(q[1]), w(q[2]), w(q[3])]
        };
        match self.dtype {
            crate::codes::LOGITS_BF16 => h(false),
            crate::codes::LOGITS_F16 => h(true),
            // SAFETY: the caller's contract.
            _ => unsafe { self.singles().quad(i) },
        }
    }
    #[inline(always)]
    unsafe fn quad_stream(&self, i: u64) -> [f32; 4] {
        match self.dtype {
            crate::codes::LOGITS_BF16 | crate::codes::LOGITS_F16 => {
                // SAFETY: the caller's contract.
                unsafe { self.quad(i) }
            }
            // SAFETY: the caller's contract.
            _ => unsafe { self.singles().quad_stream(i) },
        }
    }
    #[inline(always)]
    fn as_f32(&self) -> Option<Gm<f32>> {
        match self.dtype {
            crate::codes::LOGITS_BF16 | crate::codes::LOGITS_F16 => None,
            _ => Some(self.singles()),
        }
    }
    #[inline(always)]
    fn flat_bits(&self) -> u32 {
        if self.dtype == crate::codes::LOGITS_BF16 {
            16
        } else {
            0
        }
    }
}

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

// ------------------------------------------------------------- program, memory

/// Program index: the block's index (the row or request).
#[inline(always)]
pub fn row<const TH: usize, const I: usize>(_: &Ctx<TH, I>) -> u32 {
    // SAFETY: reads %ctaid.x.
    unsafe { _block_idx_x() }
}

/// Whether this CTA leads its cluster (rank 0; every CTA of a launch
/// without clusters): after a cluster op only the leader goes on
/// (`#[kernel(cluster = ..)]`).
#[inline(always)]
pub fn cluster_leader<const TH: usize, const I: usize>(_: &Ctx<TH, I>) -> bool {
    ptx::cluster_rank() == 0
}

/// The runtime as a cluster kernel (`#[kernel(cluster = ..)]`) sees it:
/// every op of [`super::gpu`], but [`in_cluster::row`] is the cluster's
/// index (the CTAs of a cluster work on one row together).
pub mod in_cluster {
    pub use super::*;
    /// Program index: the cluster's index in the grid (the row).
    #[inline(always)]
    pub fn row<const TH: usize, const I: usize>(_: &Ctx<TH, I>) -> u32 {
        super::ptx::cluster_id()
    }
}

/// `n` consecutive elements of `buf` from element `off` (logits widened to f32).
#[inline(always)]
pub fn load<B: Source, const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: B, off: u64, n: u32) -> Tile<B::Elem, I> {
    c.before_read();
    buf.load_tile(c, off, n)
}

/// [`load`] of a plain buffer.
#[inline(always)]
fn load_gm<T: Copy + Default, const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: Gm<T>,
    off: u64,
    n: u32,
) -> Tile<T, I> {
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
    // The same for 2-byte elements (half-precision logits), eight a load.
    if core::mem::size_of::<T>() == 2 && I % 8 == 0 {
        let first = c.idx(0);
        let p = buf.p.wrapping_add(off.wrapping_add(first as u64) as usize);
        if first + I as u32 <= n && (p as usize) % 16 == 0 {
            for q in 0..I / 8 {
                // SAFETY: in bounds (first + I <= n) and 16-byte aligned.
                let w = unsafe { *(p.add(8 * q) as *const V8<T>) };
                v[8 * q..8 * q + 8].copy_from_slice(&w.0);
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
pub fn store_head<T: Copy + Default, const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: Gm<T>,
    off: u64,
    t: &Tile<T, I>,
    k: u32,
) {
    c.before_write(buf.addr());
    let n = t.n.min(k);
    for j in 0..I {
        let e = c.idx(j);
        if e < n {
            buf.write(off.wrapping_add(e as u64), ix(&t.v, j));
        }
    }
    c.stored(buf.addr());
}
/// One element of `buf` (every thread reads it).
#[inline(always)]
pub fn load_scalar<B: Source, const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: B, i: u64) -> B::Elem {
    c.before_read();
    buf.read(i)
}
/// Writes one element of `buf` (thread 0).
#[inline(always)]
pub fn store_scalar<T: Copy + Default, const TH: usize, const I: usize>(c: &Ctx<TH, I>, buf: Gm<T>, i: u64, v: T) {
    c.before_write(buf.addr());
    if c.tid == 0 {
        buf.write(i, v);
    }
    c.stored(buf.addr());
}
/// Bits `0..n` of the u32 words from word `word_off`.
#[inline(always)]
pub fn mask_bits<const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: Gm<u32>,
    word_off: u64,
    n: u32,
) -> Tile<bool, I> {
    c.before_read();
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

/// `buf[off + idx[i]]` for each i, or `fallback` where `idx[i] < 0`.
#[inline(always)]
pub fn gather<B: Source, const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: B,
    off: u64,
    idx: &Tile<i32, I>,
    fallback: B::Elem,
) -> Tile<B::Elem, I> {
    c.before_read();
    let mut v = [B::Elem::default(); I];
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
pub fn scatter<T: Copy + Default, const TH: usize, const I: usize>(
    c: &Ctx<TH, I>,
    buf: Gm<T>,
    off: u64,
    idx: &Tile<i32, I>,
    vals: &Tile<T, I>,
) {
    c.before_write(buf.addr());
    let n = idx.n.min(vals.n);
    for j in 0..I {
        if c.idx(j) < n {
            let i = ix(&idx.v, j);
            if i >= 0 {
                buf.write(off + i as u64, ix(&vals.v, j));
            }
        }
    }
    c.stored(buf.addr());
}
