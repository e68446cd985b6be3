//! CPU tile runtime: the reference semantics of every tile op of the DSL.
//!
//! A program (one row, or one request for per-request kernels) runs on one
//! thread; a tile is a `Vec` of its valid elements. The nvptx runtime
//! (`rt::gpu`) implements the same functions block-cooperatively and must
//! give bit-identical results: every op here is either exact (integer sums
//! and scans, max/min, selection on unique keys) or a per-element IEEE
//! operation, so no result depends on an evaluation order.

extern crate alloc;
use alloc::vec::Vec;

use super::host_algo::{top_keys, top_keys_counted};
use super::math::{key_id, key_logit, order_key};

/// Whether the CPU runtime checks what the GPU punishes (out-of-range
/// reads and writes of a `Gm`, `load` / `mask_bits` past `TILE`) and
/// panics naming the kernel, the argument and the index: debug builds, or
/// the `checked` feature. Otherwise out-of-range reads give the type's zero
/// and out-of-range writes are dropped (the in-range path costs the same).
pub const CHECKED: bool = cfg!(any(debug_assertions, feature = "checked"));

/// Per-program context: which program (row or request) this is, and for
/// the checked mode ([`CHECKED`]) the kernel's name and largest tile.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    pub program: u32,
    /// The kernel's name (`"?"` when built with [`Ctx::new`]).
    pub kernel: &'static str,
    /// The largest tile a `load` may read (`TILE` of the host program).
    pub tile: u32,
}

impl Ctx {
    /// A context without a kernel name or tile limit.
    #[inline(always)]
    pub fn new(program: u32) -> Self {
        Ctx { program, kernel: "?", tile: u32::MAX }
    }
    /// The context `#[kernel]`'s host program makes: program `program` of
    /// kernel `kernel`, whose tiles hold at most `tile` elements.
    #[inline(always)]
    pub fn for_kernel(program: u32, kernel: &'static str, tile: u32) -> Self {
        Ctx { program, kernel, tile }
    }
    #[inline(always)]
    fn check_tile(&self, op: &str, n: u32) {
        if CHECKED && n > self.tile {
            too_long(self, op, n);
        }
    }
}

#[cold]
#[inline(never)]
fn too_long(c: &Ctx, op: &str, n: u32) {
    panic!(
        "kernel `{}` (program {}): `{op}` of {n} elements, past TILE = {} (the GPU has no room for it)",
        c.kernel, c.program, c.tile
    );
}

/// A tile: the valid elements of a row chunk.
pub type Tile<T> = Vec<T>;

/// A global buffer as seen by a kernel: a raw pointer and a length.
///
/// Programs of one launch run concurrently on different threads and each
/// writes only its own rows; the host checks every buffer's size against the
/// kernel's shapes before launching, so accesses stay in bounds.
#[derive(Clone, Copy, Debug)]
pub struct Gm<T> {
    ptr: *mut T,
    len: usize,
    /// Kernel and parameter names, for the checked mode's panics.
    kernel: &'static str,
    arg: &'static str,
}

// SAFETY: a Gm is a view handed to programs that write disjoint elements;
// the launcher upholds that contract (see `Gm` docs).
unsafe impl<T: Send> Send for Gm<T> {}
unsafe impl<T: Sync> Sync for Gm<T> {}

impl<T: Copy + Default> Gm<T> {
    /// A read-only view of `s` (the DSL refuses stores to `Gm` parameters).
    pub fn new(s: &[T]) -> Self {
        Gm { ptr: s.as_ptr() as *mut T, len: s.len(), kernel: "?", arg: "?" }
    }
    /// A writable view of `s`.
    pub fn new_mut(s: &mut [T]) -> Self {
        Gm { ptr: s.as_mut_ptr(), len: s.len(), kernel: "?", arg: "?" }
    }
    /// The view, named as parameter `arg` of kernel `kernel` (for the
    /// checked mode's messages; `#[kernel]`'s host program does this).
    pub fn named(self, kernel: &'static str, arg: &'static str) -> Self {
        Gm { kernel, arg, ..self }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[inline(always)]
    fn read(&self, i: u64) -> T {
        if (i as usize) < self.len && i < usize::MAX as u64 {
            // SAFETY: bounds checked above; the buffer outlives the launch.
            unsafe { *self.ptr.add(i as usize) }
        } else {
            if CHECKED {
                self.out_of_range("read", i);
            }
            T::default()
        }
    }
    #[inline(always)]
    fn write(&self, i: u64, v: T) {
        if (i as usize) < self.len && i < usize::MAX as u64 {
            // SAFETY: bounds checked above; programs write disjoint elements.
            unsafe { *self.ptr.add(i as usize) = v }
        } else if CHECKED {
            self.out_of_range("write", i);
        }
    }
    #[cold]
    #[inline(never)]
    fn out_of_range(&self, what: &str, i: u64) {
        panic!(
            "kernel `{}`: {what} of `{}` at index {i}, out of range (its length is {})",
            self.kernel, self.arg, self.len
        );
    }
}

/// A buffer the read ops (`load`, `load_scalar`, `gather`, `top_n`,
/// `top_n_set`) accept: a [`Gm`] of its element type, or [`Logits`] (read
/// as f32 whatever the element type it holds).
pub trait Source: Copy {
    /// The element type reads give.
    type Elem: Copy + Default;
    /// Element `i` (out of range: a panic in the checked mode, else zero).
    fn read(&self, i: u64) -> Self::Elem;
    /// `self[off..off + n]` as a slice when it lies in bounds and is stored
    /// as `Elem` (no conversion needed); `None` otherwise.
    fn span(&self, off: u64, n: u32) -> Option<&[Self::Elem]>;
    /// `self[off..off + n]` as a tile (out-of-range elements as [`Source::read`] gives them).
    fn tile(&self, off: u64, n: u32) -> Tile<Self::Elem> {
        match self.span(off, n) {
            Some(s) => s.to_vec(),
            None => (0..n as u64).map(|i| self.read(off.wrapping_add(i))).collect(),
        }
    }
}

impl<T: Copy + Default> Source for Gm<T> {
    type Elem = T;
    #[inline(always)]
    fn read(&self, i: u64) -> T {
        Gm::read(self, i)
    }
    #[inline(always)]
    fn span(&self, off: u64, n: u32) -> Option<&[T]> {
        span(self, off, n)
    }
}

/// A `Logits` kernel parameter on the CPU: `[.., V]` logits in f32, bf16 or
/// f16 (the element type chosen at launch), read as f32. The widening is
/// exact (every bf16 and f16 value, subnormals included, is an f32), so a
/// kernel gives the same bits as on the widened f32 logits.
#[derive(Clone, Copy, Debug)]
pub enum Logits {
    /// IEEE single precision ([`crate::codes::LOGITS_F32`]).
    F32(Gm<f32>),
    /// bfloat16 ([`crate::codes::LOGITS_BF16`]).
    Bf16(Gm<half::bf16>),
    /// IEEE half precision ([`crate::codes::LOGITS_F16`]).
    F16(Gm<half::f16>),
}

impl Logits {
    /// A view of f32 logits.
    pub fn f32(s: &[f32]) -> Self {
        Logits::F32(Gm::new(s))
    }
    /// A view of bfloat16 logits.
    pub fn bf16(s: &[half::bf16]) -> Self {
        Logits::Bf16(Gm::new(s))
    }
    /// A view of IEEE half logits.
    pub fn f16(s: &[half::f16]) -> Self {
        Logits::F16(Gm::new(s))
    }
    /// The view, named as parameter `arg` of kernel `kernel` (checked mode's messages).
    pub fn named(self, kernel: &'static str, arg: &'static str) -> Self {
        match self {
            Logits::F32(g) => Logits::F32(g.named(kernel, arg)),
            Logits::Bf16(g) => Logits::Bf16(g.named(kernel, arg)),
            Logits::F16(g) => Logits::F16(g.named(kernel, arg)),
        }
    }
    /// Number of logits.
    pub fn len(&self) -> usize {
        match self {
            Logits::F32(g) => g.len(),
            Logits::Bf16(g) => g.len(),
            Logits::F16(g) => g.len(),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The element type code ([`crate::codes::LOGITS_F32`], `LOGITS_BF16`, `LOGITS_F16`).
    pub fn dtype(&self) -> u32 {
        match self {
            Logits::F32(_) => crate::codes::LOGITS_F32,
            Logits::Bf16(_) => crate::codes::LOGITS_BF16,
            Logits::F16(_) => crate::codes::LOGITS_F16,
        }
    }
}

/// f32 logits (as a `Gm<f32>` argument was before logits took any element type).
impl From<Gm<f32>> for Logits {
    fn from(g: Gm<f32>) -> Self {
        Logits::F32(g)
    }
}

impl Source for Logits {
    type Elem = f32;
    #[inline(always)]
    fn read(&self, i: u64) -> f32 {
        match self {
            Logits::F32(g) => g.read(i),
            Logits::Bf16(g) => g.read(i).to_f32(),
            Logits::F16(g) => g.read(i).to_f32(),
        }
    }
    #[inline(always)]
    fn span(&self, off: u64, n: u32) -> Option<&[f32]> {
        match self {
            Logits::F32(g) => span(g, off, n),
            _ => None,
        }
    }
    fn tile(&self, off: u64, n: u32) -> Tile<f32> {
        use half::slice::HalfFloatSliceExt;
        // In bounds: one widening pass over the slice (F16C where present).
        let mut out = alloc::vec![0f32; n as usize];
        match self {
            Logits::F32(g) => return g.tile(off, n),
            Logits::Bf16(g) => match span(g, off, n) {
                Some(s) => s.convert_to_f32_slice(&mut out),
                None => out.iter_mut().enumerate().for_each(|(i, o)| *o = self.read(off.wrapping_add(i as u64))),
            },
            Logits::F16(g) => match span(g, off, n) {
                Some(s) => s.convert_to_f32_slice(&mut out),
                None => out.iter_mut().enumerate().for_each(|(i, o)| *o = self.read(off.wrapping_add(i as u64))),
            },
        }
        out
    }
}

/// A scalar operand of an elementwise map (broadcast to every element).
#[derive(Clone, Copy)]
pub struct S<T>(pub T);

/// An operand of an elementwise map: a tile or a broadcast scalar.
pub trait Operand<T: Copy> {
    /// Element `i` (a scalar: the scalar).
    ///
    /// # Safety
    /// For a tile, `i < tile_len()` (the maps only index below the common length).
    unsafe fn at(&self, i: usize) -> T;
    fn tile_len(&self) -> Option<usize>;
    /// The tile's elements (`None` for a scalar).
    fn as_slice(&self) -> Option<&[T]> {
        None
    }
}
impl<T: Copy> Operand<T> for S<T> {
    #[inline(always)]
    unsafe fn at(&self, _: usize) -> T {
        self.0
    }
    fn tile_len(&self) -> Option<usize> {
        None
    }
}
impl<T: Copy> Operand<T> for &Vec<T> {
    #[inline(always)]
    unsafe fn at(&self, i: usize) -> T {
        debug_assert!(i < self.len());
        // SAFETY: the caller keeps i below the tile's length. Unchecked so
        // that the maps' loops auto-vectorise.
        unsafe { *self.get_unchecked(i) }
    }
    fn tile_len(&self) -> Option<usize> {
        Some(self.len())
    }
    fn as_slice(&self) -> Option<&[T]> {
        Some(self)
    }
}

#[inline(always)]
fn common_len(ls: &[Option<usize>]) -> usize {
    ls.iter().flatten().copied().min().unwrap_or(0)
}

// SAFETY (every map): i < n = the smallest tile length of the operands.

/// Elementwise map of one operand.
#[inline(always)]
pub fn map1<A: Copy, R>(_: &Ctx, a: impl Operand<A>, f: impl Fn(A) -> R) -> Tile<R> {
    if let Some(s) = a.as_slice() {
        return s.iter().map(|&x| f(x)).collect(); // a slice loop: vectorises
    }
    let n = common_len(&[a.tile_len()]);
    (0..n).map(|i| unsafe { f(a.at(i)) }).collect()
}
/// Elementwise map of two operands.
#[inline(always)]
pub fn map2<A: Copy, B: Copy, R>(_: &Ctx, a: impl Operand<A>, b: impl Operand<B>, f: impl Fn(A, B) -> R) -> Tile<R> {
    if let (Some(x), Some(y)) = (a.as_slice(), b.as_slice()) {
        return x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect();
    }
    let n = common_len(&[a.tile_len(), b.tile_len()]);
    (0..n).map(|i| unsafe { f(a.at(i), b.at(i)) }).collect()
}
/// Elementwise map of three operands.
#[inline(always)]
pub fn map3<A: Copy, B: Copy, C: Copy, R>(
    _: &Ctx,
    a: impl Operand<A>,
    b: impl Operand<B>,
    c: impl Operand<C>,
    f: impl Fn(A, B, C) -> R,
) -> Tile<R> {
    let n = common_len(&[a.tile_len(), b.tile_len(), c.tile_len()]);
    (0..n).map(|i| unsafe { f(a.at(i), b.at(i), c.at(i)) }).collect()
}
/// Elementwise map of four operands.
#[inline(always)]
pub fn map4<A: Copy, B: Copy, C: Copy, D: Copy, R>(
    _: &Ctx,
    a: impl Operand<A>,
    b: impl Operand<B>,
    c: impl Operand<C>,
    d: impl Operand<D>,
    f: impl Fn(A, B, C, D) -> R,
) -> Tile<R> {
    let n = common_len(&[a.tile_len(), b.tile_len(), c.tile_len(), d.tile_len()]);
    (0..n).map(|i| unsafe { f(a.at(i), b.at(i), c.at(i), d.at(i)) }).collect()
}

/// Program index: the row (or request) this program handles.
#[inline(always)]
pub fn row(ctx: &Ctx) -> u32 {
    ctx.program
}

/// The most elements a tile of a warp scope holds (docs/DSL.md, "Warp
/// scopes"; on NVIDIA two a lane of one warp).
pub const WARP_TILE: u32 = 64;

/// Whether `if warp_scope(len) { .. }` runs its block on the warp context:
/// `len` at most [`WARP_TILE`] (else on the block's, the same results).
#[inline(always)]
pub fn warp_fits(_: &Ctx, len: u32) -> bool {
    len <= WARP_TILE
}

/// The context a warp scope's block runs on: here the program's, whose
/// tiles may hold at most [`WARP_TILE`] elements (the NVIDIA warp's room,
/// checked in the checked mode as `TILE` is).
#[inline(always)]
pub fn warp_ctx(c: &Ctx, _len: u32) -> Option<Ctx> {
    Some(Ctx { tile: WARP_TILE.min(c.tile), ..*c })
}

/// The end of a warp scope run on the warp context (nothing to wait for here).
#[inline(always)]
pub fn warp_join(_: &Ctx) {}

/// `n` consecutive elements of `buf` from element `off` (logits widened to f32).
pub fn load<B: Source>(c: &Ctx, buf: B, off: u64, n: u32) -> Tile<B::Elem> {
    c.check_tile("load", n);
    buf.tile(off, n) // in bounds: one copy (or one widening pass)
}
/// Writes the tile at element `off` of `buf`.
pub fn store<T: Copy + Default>(_: &Ctx, buf: Gm<T>, off: u64, t: &Tile<T>) {
    if let Some(d) = span_mut(&buf, off, t.len() as u32) {
        d.copy_from_slice(t); // in bounds: one copy
        return;
    }
    for (i, &v) in t.iter().enumerate() {
        buf.write(off.wrapping_add(i as u64), v);
    }
}
/// Writes the first `k` elements of the tile at element `off` of `buf`.
pub fn store_head<T: Copy + Default>(_: &Ctx, buf: Gm<T>, off: u64, t: &Tile<T>, k: u32) {
    for (i, &v) in t.iter().take(k as usize).enumerate() {
        buf.write(off.wrapping_add(i as u64), v);
    }
}
/// One element of `buf` (the type's zero when out of range).
pub fn load_scalar<B: Source>(_: &Ctx, buf: B, i: u64) -> B::Elem {
    buf.read(i)
}
/// Writes one element of `buf`.
pub fn store_scalar<T: Copy + Default>(_: &Ctx, buf: Gm<T>, i: u64, v: T) {
    buf.write(i, v)
}
/// Bits `0..n` of the u32 words from word `word_off` (bit `t % 32` of word `t / 32`).
pub fn mask_bits(c: &Ctx, buf: Gm<u32>, word_off: u64, n: u32) -> Tile<bool> {
    c.check_tile("mask_bits", n);
    (0..n).map(|t| (buf.read(word_off + (t / 32) as u64) >> (t % 32)) & 1 == 1).collect()
}
/// `[0, 1, ..., n-1]`.
pub fn iota(c: &Ctx, n: u32) -> Tile<u32> {
    c.check_tile("iota", n);
    (0..n).collect()
}
/// `n` copies of `v`.
pub fn full<T: Copy>(c: &Ctx, n: u32, v: T) -> Tile<T> {
    c.check_tile("full", n);
    alloc::vec![v; n as usize]
}
/// Number of valid elements.
pub fn len<T>(_: &Ctx, t: &Tile<T>) -> u32 {
    t.len() as u32
}

/// Bounds of a primitive type: identities of max/min reductions.
pub trait Bounded: Copy + PartialOrd {
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
pub fn reduce_max<T: Bounded>(_: &Ctx, t: &Tile<T>) -> T {
    t.iter().fold(T::LOWEST, |a, &b| if b > a { b } else { a })
}
/// Smallest element (NaN never wins; HIGHEST for an empty tile).
pub fn reduce_min<T: Bounded>(_: &Ctx, t: &Tile<T>) -> T {
    t.iter().fold(T::HIGHEST, |a, &b| if b < a { b } else { a })
}

/// Integer element types with exact (wrapping) sums.
pub trait IntSum: Copy + Default {
    fn wadd(self, o: Self) -> Self;
}
impl IntSum for u32 {
    fn wadd(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
}
impl IntSum for u64 {
    fn wadd(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
}

/// Sum of an integer tile (exact; wrapping).
pub fn reduce_sum<T: IntSum>(_: &Ctx, t: &Tile<T>) -> T {
    t.iter().fold(T::default(), |a, &b| a.wadd(b))
}
/// Exclusive prefix sums of an integer tile.
pub fn exclusive_scan<T: IntSum>(_: &Ctx, t: &Tile<T>) -> Tile<T> {
    let mut acc = T::default();
    t.iter()
        .map(|&v| {
            let r = acc;
            acc = acc.wadd(v);
            r
        })
        .collect()
}
/// Inclusive prefix sums of an integer tile.
pub fn inclusive_scan<T: IntSum>(_: &Ctx, t: &Tile<T>) -> Tile<T> {
    let mut acc = T::default();
    t.iter()
        .map(|&v| {
            acc = acc.wadd(v);
            acc
        })
        .collect()
}
/// Number of true elements.
pub fn count(_: &Ctx, t: &Tile<bool>) -> u32 {
    // A sum of 0/1 (vectorises), not a filter.
    t.iter().map(|&b| b as u32).sum()
}
/// Whether any element is true.
pub fn any(_: &Ctx, t: &Tile<bool>) -> bool {
    t.iter().any(|&b| b)
}
/// Whether every element is true (true for an empty tile).
pub fn all(_: &Ctx, t: &Tile<bool>) -> bool {
    t.iter().all(|&b| b)
}
/// Index of the first true element, or -1.
pub fn first_where(_: &Ctx, t: &Tile<bool>) -> i32 {
    t.iter().position(|&b| b).map_or(-1, |i| i as i32)
}
/// Index of the last true element, or -1.
pub fn last_where(_: &Ctx, t: &Tile<bool>) -> i32 {
    t.iter().rposition(|&b| b).map_or(-1, |i| i as i32)
}
/// Element `i` of a tile (the type's zero when out of range).
pub fn get<T: Copy + Default>(_: &Ctx, t: &Tile<T>, i: u32) -> T {
    t.get(i as usize).copied().unwrap_or_default()
}

/// `buf[off..off + n]` as a slice when it lies in bounds (`None` otherwise:
/// callers then read element by element, with [`Gm`]'s out-of-range zeros).
/// For ops that stream a whole row (auto-vectorised loops over a slice).
#[inline(always)]
fn span<T>(buf: &Gm<T>, off: u64, n: u32) -> Option<&[T]> {
    let end = off.checked_add(n as u64)?;
    if end > buf.len as u64 {
        return None;
    }
    // SAFETY: in bounds (checked above); the buffer outlives the launch and
    // no program writes this span while the op reads it.
    Some(unsafe { core::slice::from_raw_parts(buf.ptr.add(off as usize), n as usize) })
}

/// [`span`] for writing: `buf[off..off + n]` when in bounds.
#[inline(always)]
#[allow(clippy::mut_from_ref)]
fn span_mut<T>(buf: &Gm<T>, off: u64, n: u32) -> Option<&mut [T]> {
    let end = off.checked_add(n as u64)?;
    if end > buf.len as u64 {
        return None;
    }
    // SAFETY: in bounds; programs write disjoint elements (see `Gm`), and
    // the slice lives only for the op's copy.
    Some(unsafe { core::slice::from_raw_parts_mut(buf.ptr.add(off as usize), n as usize) })
}

/// The `n` largest of `v` logits at `buf[off..off+v]`, ordered as SAMPLER.md
/// section 3.6 (logit descending, ties by lower id), with their ids.
/// NaN logits rank as the key order puts them; callers reject such rows first.
/// One streaming pass with a running threshold ([`super::host_algo::top_keys`]).
pub fn top_n(_: &Ctx, buf: impl Source<Elem = f32>, off: u64, v: u32, n: u32) -> (Tile<f32>, Tile<i32>) {
    let keys = match buf.span(off, v) {
        Some(x) => top_keys(x, n as usize),
        // Half-precision logits (or a range past the end): the row widened first.
        None => top_keys(&buf.tile(off, v), n as usize),
    };
    (keys.iter().map(|&k| key_logit(k)).collect(), keys.iter().map(|&k| key_id(k) as i32).collect())
}
/// The `n` largest of `v` logits with their ids, in ascending id order
/// (the same set as [`top_n`], not sorted by logit).
pub fn top_n_set(c: &Ctx, buf: impl Source<Elem = f32>, off: u64, v: u32, n: u32) -> (Tile<f32>, Tile<i32>) {
    let (x, id) = top_n(c, buf, off, v, n);
    let mut pairs: Vec<(f32, i32)> = x.into_iter().zip(id).collect();
    pairs.sort_unstable_by_key(|p| p.1);
    (pairs.iter().map(|p| p.0).collect(), pairs.iter().map(|p| p.1).collect())
}
/// [`top_n`] and the range's bad (NaN or +inf) and finite (not -inf)
/// logit counts, as the mask check counts them (SAMPLER.md section 3.2),
/// taken in the top-N's own streaming pass over the row
/// ([`super::host_algo::top_keys_counted`]): the row is read once.
pub fn top_n_counted(
    _: &Ctx,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
) -> (Tile<f32>, Tile<i32>, u32, u32) {
    let (keys, c) = match buf.span(off, v) {
        Some(x) => top_keys_counted(x, n as usize),
        None => top_keys_counted(&buf.tile(off, v), n as usize),
    };
    (
        keys.iter().map(|&k| key_logit(k)).collect(),
        keys.iter().map(|&k| key_id(k) as i32).collect(),
        c.bad,
        v - c.neg_inf,
    )
}
/// The contract of the streaming selections' `sorted` argument: the first
/// `sorted` candidates in the order of SAMPLER.md 3.6, the rest in no fixed
/// order. Here the rest is reversed, so that a consumer relying on its order
/// differs from the fully sorted steps (the tests run both).
fn unordered_tail(x: &mut Tile<f32>, id: &mut Tile<i32>, sorted: u32) {
    let s = (sorted as usize).min(x.len());
    x[s..].reverse();
    id[s..].reverse();
}
/// [`top_n_counted`] as the one-pass streaming selection computes it on
/// NVIDIA (a sampled threshold, survivors in shared memory, an exact
/// fallback): the same set by construction (the exact op), its first
/// `sorted` in order and the rest not ([`unordered_tail`]), and the fifth
/// value, why the device kept its survivors or not (0 here: nothing to fall
/// back from).
pub fn top_n_stream_counted(
    c: &Ctx,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
    sorted: u32,
) -> (Tile<f32>, Tile<i32>, u32, u32, u32) {
    let (mut x, mut id, bad, fin) = top_n_counted(c, buf, off, v, n);
    unordered_tail(&mut x, &mut id, sorted);
    (x, id, bad, fin, 0)
}
/// [`top_n_counted`] as a thread-block cluster selects it on NVIDIA (the
/// row's slices in the CTAs' shared memory, a radix select over all of them
/// through distributed shared memory, the kept keys gathered in the leader):
/// the same set by construction, its first `sorted` in order and the rest
/// not ([`unordered_tail`]), and how many CTAs selected it together (1:
/// here a program is the whole cluster, so the program itself is the
/// leader, [`cluster_leader`]).
pub fn top_n_cluster(
    c: &Ctx,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
    sorted: u32,
) -> (Tile<f32>, Tile<i32>, u32, u32, u32) {
    let (mut x, mut id, bad, fin) = top_n_counted(c, buf, off, v, n);
    unordered_tail(&mut x, &mut id, sorted);
    (x, id, bad, fin, 1)
}
/// Whether this program leads its cluster: always on the CPU, where a
/// program is a whole row (on NVIDIA only rank 0 goes on after a cluster op).
pub fn cluster_leader(_: &Ctx) -> bool {
    true
}
/// Stage 1 of the streaming top-N over several blocks per row (NVIDIA:
/// the chunk's logits at or above the row's sampled threshold): here the
/// chunk's exact top `n`, which holds every logit of the chunk among the
/// row's top `n` (what stage 2 needs), with positions in the chunk as ids
/// and the chunk's bad and finite counts.
pub fn top_n_chunk_stream(
    c: &Ctx,
    buf: impl Source<Elem = f32>,
    row_off: u64,
    _v: u32,
    start: u32,
    len: u32,
    n: u32,
) -> (Tile<f32>, Tile<i32>, u32, u32) {
    top_n_counted(c, buf, row_off + start as u64, len, n.min(len))
}
/// Stage 2 of the streaming top-N over several blocks per row: the top `n`
/// of the chunks' candidates (chunk `ch`: `counts[cnt_off + ch]` pairs at
/// `cand_off + ch * slot`), the first `sorted` in the order of SAMPLER.md
/// 3.6 and the rest not ([`unordered_tail`]), or, when they hold fewer than
/// `n`, the exact top `n` of the row `logits[row_off..row_off+v]` (as
/// NVIDIA's stage 2 falls back).
#[allow(clippy::too_many_arguments)]
pub fn top_n_merge_stream(
    c: &Ctx,
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
) -> (Tile<f32>, Tile<i32>) {
    let n = n.min(v);
    let mut keys = Vec::new();
    for ch in 0..chunks as u64 {
        let at = cand_off + ch * slot as u64;
        for q in 0..counts.read(cnt_off + ch) as u64 {
            keys.push(order_key(vals.read(at + q), ids.read(at + q) as u32));
        }
    }
    let (mut x, mut id) = if keys.len() < n as usize {
        top_n(c, logits, row_off, v, n)
    } else {
        keys.sort_unstable_by(|a, b| b.cmp(a));
        keys.truncate(n as usize);
        (keys.iter().map(|&k| key_logit(k)).collect(), keys.iter().map(|&k| key_id(k) as i32).collect())
    };
    unordered_tail(&mut x, &mut id, sorted);
    (x, id)
}
/// [`top_n_set`] and the counts of [`top_n_counted`].
pub fn top_n_set_counted(
    c: &Ctx,
    buf: impl Source<Elem = f32>,
    off: u64,
    v: u32,
    n: u32,
) -> (Tile<f32>, Tile<i32>, u32, u32) {
    let (x, id, bad, fin) = top_n_counted(c, buf, off, v, n);
    let mut pairs: Vec<(f32, i32)> = x.into_iter().zip(id).collect();
    pairs.sort_unstable_by_key(|p| p.1);
    (pairs.iter().map(|p| p.0).collect(), pairs.iter().map(|p| p.1).collect(), bad, fin)
}
/// Sorts (logit, id) pairs in the order of SAMPLER.md section 3.6.
pub fn sort_desc(_: &Ctx, vals: &Tile<f32>, ids: &Tile<i32>) -> (Tile<f32>, Tile<i32>) {
    let mut keys: Vec<u64> = vals.iter().zip(ids).map(|(&v, &i)| order_key(v, i as u32)).collect();
    keys.sort_unstable_by(|a, b| b.cmp(a));
    (keys.iter().map(|&k| key_logit(k)).collect(), keys.iter().map(|&k| key_id(k) as i32).collect())
}
/// Categorical draw over fixed-point weights: the first index whose inclusive
/// prefix sum `c` satisfies `c * 2^53 > k * total` (that is `c / total > u`
/// with `u = k * 2^-53`), or -1 when every weight is zero (SAMPLER.md section 4).
pub fn categorical(_: &Ctx, w: &Tile<u64>, k: u64) -> i32 {
    let total: u128 = w.iter().map(|&x| x as u128).sum();
    if total == 0 {
        return -1;
    }
    let thr = k as u128 * total;
    let mut acc: u128 = 0;
    for (i, &x) in w.iter().enumerate() {
        acc += x as u128;
        if (acc << 53) > thr {
            return i as i32;
        }
    }
    // Unreachable for k < 2^53; keep the spec's fallback (last nonzero weight).
    w.iter().rposition(|&x| x > 0).map_or(-1, |i| i as i32)
}
/// `buf[off + idx[i]]` for each i, or `fallback` where `idx[i] < 0`.
pub fn gather<B: Source>(_: &Ctx, buf: B, off: u64, idx: &Tile<i32>, fallback: B::Elem) -> Tile<B::Elem> {
    idx.iter().map(|&j| if j < 0 { fallback } else { buf.read(off + j as u64) }).collect()
}
/// `buf[off + idx[i]] = vals[i]` for each i with `idx[i] >= 0`.
pub fn scatter<T: Copy + Default>(_: &Ctx, buf: Gm<T>, off: u64, idx: &Tile<i32>, vals: &Tile<T>) {
    for (&j, &v) in idx.iter().zip(vals) {
        if j >= 0 {
            buf.write(off + j as u64, v);
        }
    }
}

/// Launches a kernel on the CPU: `f(program)` for every program in
/// `0..programs`, in parallel (rayon), returning when all are done.
///
/// `f` calls the kernel's typed host program, `my_kernel::cpu(program,
/// args..)`, with `Gm` views of the caller's buffers ([`Gm::new`] for the
/// `Gm<T>` parameters, [`Gm::new_mut`] for `GmMut<T>`) and its scalars:
///
/// ```ignore
/// let (x, mut y) = (vec![0.5f32; 2 * 64], vec![0.0f32; 2 * 64]);
/// let (gx, gy) = (Gm::new(&x), Gm::new_mut(&mut y));
/// // SAFETY: the buffers outlive the launch; each program (row) writes only its row of `y`.
/// rt::cpu::launch(2, |r| unsafe { my_kernel::cpu(r, gx, 64, gy) });
/// ```
///
/// The `unsafe` contract of `cpu` is the GPU's: the buffers must outlive
/// the launch, and programs run concurrently, so each must write only its
/// own elements (SAMPLER.md's kernels write their own row or group). In the
/// checked mode ([`CHECKED`]) an out-of-range access or a `load` past
/// `TILE` panics, naming the kernel, the argument and the index.
pub fn launch(programs: u32, f: impl Fn(u32) + Sync + Send) {
    use rayon::prelude::*;
    (0..programs).into_par_iter().for_each(f);
}

/// [`launch`] of a registered kernel with run-time checked arguments
/// (`sampler_kernels::registry::find(name)`): a wrong argument count or
/// type is an [`ArgError`] naming the kernel and parameter, before any
/// program runs.
///
/// # Safety
/// As [`launch`]: the buffers outlive the call, and the kernel's programs
/// write disjoint elements.
pub unsafe fn launch_dyn(kernel: &crate::spec::KernelSpec, programs: u32, args: &[Arg]) -> Result<(), ArgError> {
    if programs == 0 {
        return Ok(());
    }
    // Program 0 checks the arguments (and runs); the rest cannot fail.
    // SAFETY: the caller's contract.
    unsafe { (kernel.cpu)(0, args)? };
    let cpu = kernel.cpu;
    launch(programs - 1, |p| {
        // SAFETY: as above; the arguments were checked by program 0.
        let _ = unsafe { cpu(p + 1, args) };
    });
    Ok(())
}

/// A run-time typed kernel argument (for launching any kernel by name).
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    GmBool(Gm<bool>),
    GmI32(Gm<i32>),
    GmU32(Gm<u32>),
    GmI64(Gm<i64>),
    GmU64(Gm<u64>),
    GmF32(Gm<f32>),
    GmF64(Gm<f64>),
    /// A `Logits` parameter (f32, bf16 or f16 logits, read as f32).
    Logits(Logits),
    Bool(bool),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl Arg {
    /// The DSL type of this argument, for error messages.
    pub fn describe(&self) -> &'static str {
        match self {
            Arg::GmBool(_) => "Gm<bool>",
            Arg::GmI32(_) => "Gm<i32>",
            Arg::GmU32(_) => "Gm<u32>",
            Arg::GmI64(_) => "Gm<i64>",
            Arg::GmU64(_) => "Gm<u64>",
            Arg::GmF32(_) => "Gm<f32>",
            Arg::GmF64(_) => "Gm<f64>",
            Arg::Logits(_) => "Logits",
            Arg::Bool(_) => "bool",
            Arg::I32(_) => "i32",
            Arg::U32(_) => "u32",
            Arg::I64(_) => "i64",
            Arg::U64(_) => "u64",
            Arg::F32(_) => "f32",
            Arg::F64(_) => "f64",
        }
    }
}

/// A launch whose arguments do not match the kernel's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    Count { kernel: &'static str, expected: usize, got: usize },
    Type { kernel: &'static str, index: usize, param: &'static str, expected: &'static str, got: &'static str },
}

impl core::fmt::Display for ArgError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ArgError::Count { kernel, expected, got } => {
                write!(f, "kernel `{kernel}` takes {expected} arguments, got {got}")
            }
            ArgError::Type { kernel, index, param, expected, got } => {
                write!(f, "kernel `{kernel}` argument {index} (`{param}`) must be {expected}, got {got}")
            }
        }
    }
}

impl std::error::Error for ArgError {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    fn panics(f: impl FnOnce()) -> Option<String> {
        let e = catch_unwind(AssertUnwindSafe(f)).err()?;
        Some(e.downcast_ref::<String>().cloned().unwrap_or_default())
    }

    // The fast slice path (in bounds) and the element path agree.
    #[test]
    fn load_store_in_bounds() {
        let c = Ctx::for_kernel(0, "k", 8);
        let src = [1.0f32, 2.0, 3.0, 4.0, 5.0];
        let mut dst = [0.0f32; 5];
        let t = load(&c, Gm::new(&src).named("k", "src"), 1, 3);
        assert_eq!(t, [2.0, 3.0, 4.0]);
        store(&c, Gm::new_mut(&mut dst).named("k", "dst"), 2, &t);
        assert_eq!(dst, [0.0, 0.0, 2.0, 3.0, 4.0]);
    }

    // Checked mode runs before the fast path: an access past the buffer or
    // a tile past TILE panics naming kernel and argument; unchecked, reads
    // past the end give zero and writes are dropped.
    #[test]
    fn out_of_range_is_checked_or_zero() {
        let c = Ctx::for_kernel(3, "k", 4);
        let src = [1u32, 2, 3];
        let read = panics(|| assert_eq!(load(&c, Gm::new(&src).named("k", "src"), 2, 2), [3, 0]));
        let mut dst = [0u32; 3];
        let write = panics(|| store(&c, Gm::new_mut(&mut dst).named("k", "dst"), 2, &alloc::vec![7, 8]));
        let long = panics(|| drop(load(&c, Gm::new(&[0u32; 8]).named("k", "src"), 0, 5)));
        if CHECKED {
            assert!(read.is_some_and(|m| m.contains("`k`") && m.contains("`src`") && m.contains("index 3")));
            assert!(write.is_some_and(|m| m.contains("`dst`") && m.contains("index 3")));
            assert!(long.is_some_and(|m| m.contains("past TILE = 4")));
        } else {
            assert_eq!((read, write, long), (None, None, None));
        }
        assert_eq!(dst[2], 7); // the in-range element is written either way
    }

    // A warp scope's tiles fit one NVIDIA warp (WARP_TILE), whatever the
    // kernel's TILE: the checked mode says so at the op that overflows.
    #[test]
    fn warp_scope_tiles_are_checked_against_warp_tile() {
        let c = Ctx::for_kernel(0, "k", 1024);
        assert!(warp_fits(&c, WARP_TILE) && !warp_fits(&c, WARP_TILE + 1));
        let w = warp_ctx(&c, WARP_TILE).expect("the CPU runs every scope");
        let src = [1u32; 128];
        assert_eq!(load(&w, Gm::new(&src).named("k", "src"), 0, WARP_TILE).len(), WARP_TILE as usize);
        let long = panics(|| drop(load(&w, Gm::new(&src).named("k", "src"), 0, WARP_TILE + 1)));
        let iota_long = panics(|| drop(iota(&w, WARP_TILE + 1)));
        if CHECKED {
            assert!(long.is_some_and(|m| m.contains("past TILE = 64")));
            assert!(iota_long.is_some_and(|m| m.contains("`iota`")));
        } else {
            assert_eq!((long, iota_long), (None, None));
        }
    }
}
