//! Inline-PTX intrinsics of the nvptx runtime: the dynamic shared-memory
//! array and its layout, `ld/st/atom/red.shared` on shared-window addresses,
//! special registers and the block barrier.

use core::arch::asm;
use core::arch::nvptx::_syncthreads;

use super::{Ctx, SMEM_BASE, SORT_CAP};

core::arch::global_asm!(".extern .shared .align 16 .b8 __sk_smem[];");

/// Generic address of the block's dynamic shared memory.
#[inline(always)]
pub(super) fn smem() -> *mut u8 {
    let p: u64;
    // SAFETY: reads the address of the module's dynamic shared array.
    unsafe { asm!("cvta.shared.u64 {p}, __sk_smem;", p = out(reg64) p, options(pure, nomem, nostack)) };
    p as *mut u8
}

/// Reduction slots: 32 of 16 bytes (one per warp).
pub(super) const SLOTS: usize = 0;
/// Radix histogram: 256 u32.
pub(super) const HIST: usize = 512;
/// Block-uniform scalars published by one thread (8 u32).
pub(super) const MISC: usize = 1536;
/// The second area of reduction slots (`block::slots`): 32 of 16 bytes.
pub(super) const SLOTS2: usize = 2048;
/// Words of [`misc`]: up to the second slot area.
pub(super) const MISC_WORDS: u32 = ((SLOTS2 - MISC) / 4) as u32;

/// Reduction slot `w` (16 bytes, shared-window address).
#[inline(always)]
pub(super) fn slot(w: usize) -> u64 {
    sh() + (SLOTS + 16 * w) as u64
}

// Shared-window addresses and `ld/st/atom/red.shared` for the hot paths of
// selection and sorting: generic pointers into shared memory compile to
// generic `LD`/`ST`/`ATOM` (a slower path than `LDS`/`STS`/`ATOMS`).

/// Shared-window address of the dynamic shared array.
#[inline(always)]
pub(super) fn sh() -> u64 {
    let p: u64;
    // SAFETY: reads the shared-window address of the module's dynamic shared array.
    unsafe { asm!("mov.u64 {p}, __sk_smem;", p = out(reg64) p, options(pure, nomem, nostack)) };
    p
}
#[inline(always)]
pub(super) fn lds32(a: u64) -> u32 {
    let v: u32;
    // SAFETY: `a` is a 4-byte aligned address inside the launch's shared memory.
    unsafe { asm!("ld.shared.u32 {v}, [{a}];", v = out(reg32) v, a = in(reg64) a, options(nostack, readonly)) };
    v
}
#[inline(always)]
pub(super) fn sts32(a: u64, v: u32) {
    // SAFETY: as `lds32`.
    unsafe { asm!("st.shared.u32 [{a}], {v};", a = in(reg64) a, v = in(reg32) v, options(nostack)) };
}
#[inline(always)]
pub(super) fn lds64(a: u64) -> u64 {
    let v: u64;
    // SAFETY: `a` is an 8-byte aligned address inside the launch's shared memory.
    unsafe { asm!("ld.shared.u64 {v}, [{a}];", v = out(reg64) v, a = in(reg64) a, options(nostack, readonly)) };
    v
}
#[inline(always)]
pub(super) fn sts64(a: u64, v: u64) {
    // SAFETY: as `lds64`.
    unsafe { asm!("st.shared.u64 [{a}], {v};", a = in(reg64) a, v = in(reg64) v, options(nostack)) };
}
/// `atom.shared.add.u32`: adds `v` at `a`, returns the old value.
#[inline(always)]
pub(super) fn atoms_add(a: u64, v: u32) -> u32 {
    let r: u32;
    // SAFETY: as `lds32`.
    unsafe {
        asm!("atom.shared.add.u32 {r}, [{a}], {v};", r = out(reg32) r, a = in(reg64) a, v = in(reg32) v, options(nostack))
    };
    r
}
/// `red.shared.add.u32`: adds `v` at `a`.
#[inline(always)]
pub(super) fn reds_add(a: u64, v: u32) {
    // SAFETY: as `lds32`.
    unsafe { asm!("red.shared.add.u32 [{a}], {v};", a = in(reg64) a, v = in(reg32) v, options(nostack)) };
}
/// `red.shared.add.u32` under a predicate (no branch around it).
#[inline(always)]
pub(super) fn reds_add_if(p: bool, a: u64, v: u32) {
    // SAFETY: as `lds32` (`a` is only dereferenced where `p` holds).
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {c}, 0; @p red.shared.add.u32 [{a}], {v}; }}", c = in(reg32) p as u32, a = in(reg64) a, v = in(reg32) v, options(nostack))
    };
}
#[inline(always)]
pub(super) fn hist(b: u32) -> u64 {
    sh() + HIST as u64 + 4 * b as u64
}
#[inline(always)]
pub(super) fn misc(i: u32) -> u64 {
    sh() + MISC as u64 + 4 * i as u64
}
/// The sort buffer (u64 keys).
#[inline(always)]
pub(super) fn sortbuf() -> u64 {
    sh() + SMEM_BASE as u64
}

/// Bytes of dynamic shared memory this launch got (`%dynamic_smem_size`).
#[inline(always)]
pub(super) fn dynamic_smem_bytes() -> u32 {
    let b: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {b}, %dynamic_smem_size;", b = out(reg32) b, options(pure, nomem, nostack)) };
    b
}

/// The staging area of `top_n` (u32 order bits), after the sort buffer
/// grown to at least [`crate::spec::GPU_SELECT_SCRATCH`] bytes (the
/// selection scratch, at the sort buffer's place): (scratch address,
/// staging address, how many keys it holds in this launch; 0: none, the
/// host gives it room per launch, `spec::gpu_stage_bytes`).
#[inline(always)]
pub(super) fn stagebuf<const TH: usize, const I: usize>() -> (u64, u64, u32) {
    let cap = Ctx::<TH, I>::CAP;
    let sort = 8 * if cap < SORT_CAP { cap } else { SORT_CAP };
    let scratch = crate::spec::GPU_SELECT_SCRATCH;
    let start = SMEM_BASE + if sort < scratch { scratch } else { sort };
    let have = dynamic_smem_bytes();
    let keys = if have > start { (have - start) / 4 } else { 0 };
    (sh() + SMEM_BASE as u64, sh() + start as u64, keys)
}

/// `ld.shared.u16` (zero-extended).
#[inline(always)]
pub(super) fn lds16(a: u64) -> u32 {
    let v: u16;
    // SAFETY: `a` is a 2-byte aligned address inside the launch's shared memory.
    unsafe { asm!("ld.shared.u16 {v}, [{a}];", v = out(reg16) v, a = in(reg64) a, options(nostack, readonly)) };
    v as u32
}
/// `st.shared.u16` of the low half of `v`.
#[inline(always)]
pub(super) fn sts16(a: u64, v: u32) {
    // SAFETY: as `lds16`.
    unsafe { asm!("st.shared.u16 [{a}], {v};", a = in(reg64) a, v = in(reg16) v as u16, options(nostack)) };
}
/// `ld.shared.v4.u32`: four words at the 16-byte aligned `a`.
#[inline(always)]
pub(super) fn lds128(a: u64) -> [u32; 4] {
    let (x, y, z, w): (u32, u32, u32, u32);
    // SAFETY: `a` is a 16-byte aligned address inside the launch's shared memory.
    unsafe {
        asm!("ld.shared.v4.u32 {{{x}, {y}, {z}, {w}}}, [{a}];", a = in(reg64) a, x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w, options(nostack, readonly))
    };
    [x, y, z, w]
}

/// `st.shared.v4.u32`: four words at the 16-byte aligned `a`.
#[inline(always)]
pub(super) fn sts128(a: u64, v: [u32; 4]) {
    // SAFETY: `a` is a 16-byte aligned address inside the launch's shared memory.
    unsafe {
        asm!("st.shared.v4.u32 [{a}], {{{x}, {y}, {z}, {w}}};", a = in(reg64) a, x = in(reg32) v[0], y = in(reg32) v[1], z = in(reg32) v[2], w = in(reg32) v[3], options(nostack))
    };
}

#[inline(always)]
pub(super) fn sync() {
    // SAFETY: every call site is reached by all threads of the block
    // (tile ops are called from block-uniform scalar code).
    unsafe { _syncthreads() }
}

/// `ld.global.nc.L1::no_allocate.v4.f32`: four f32 at the 16-byte aligned
/// global `p`, through the non-coherent path without allocating in L1 (a
/// one-pass stream).
///
/// # Safety
/// `p` is a 16-byte aligned, in-bounds global address nothing writes
/// during the launch.
#[inline(always)]
pub(super) unsafe fn ldg_nc_v4(p: *const f32) -> [f32; 4] {
    let (x, y, z, w): (f32, f32, f32, f32);
    // SAFETY: the caller's contract.
    unsafe {
        asm!("{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ld.global.nc.L1::no_allocate.v4.f32 {{{x}, {y}, {z}, {w}}}, [g]; }}", p = in(reg64) p as u64, x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w, options(pure, readonly, nostack))
    };
    [x, y, z, w]
}

// Thread-block clusters (sm_90, PTX ISA 7.8): the CTAs of a cluster read and
// write each other's shared memory (distributed shared memory) at
// `shared::cluster` addresses that `mapa` gives for a shared-window address
// and a rank. Without a cluster launch every CTA is a cluster of one.

/// This CTA's rank in its cluster (`%cluster_ctarank`).
#[inline(always)]
pub(super) fn cluster_rank() -> u32 {
    let r: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {r}, %cluster_ctarank;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}
/// CTAs in this CTA's cluster (`%cluster_nctarank`).
#[inline(always)]
pub(super) fn cluster_size() -> u32 {
    let r: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {r}, %cluster_nctarank;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}
/// The cluster's index in the grid (`%clusterid.x`; clusters are 1-D).
#[inline(always)]
pub(super) fn cluster_id() -> u32 {
    let r: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {r}, %clusterid.x;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}
/// The `shared::cluster` address of shared-window address `a` in the CTA of rank `rank`.
#[inline(always)]
pub(super) fn mapa(a: u64, rank: u32) -> u64 {
    let d: u64;
    // SAFETY: address arithmetic only.
    unsafe {
        asm!("mapa.shared::cluster.u64 {d}, {a}, {r};", d = out(reg64) d, a = in(reg64) a, r = in(reg32) rank, options(pure, nomem, nostack))
    };
    d
}
/// `ld.shared::cluster.u32` at the cluster address `a`.
#[inline(always)]
pub(super) fn ldc32(a: u64) -> u32 {
    let v: u32;
    // SAFETY: `a` is a 4-byte aligned cluster address of a running CTA's shared memory.
    unsafe {
        asm!("ld.shared::cluster.u32 {v}, [{a}];", v = out(reg32) v, a = in(reg64) a, options(nostack, readonly))
    };
    v
}
/// `st.shared::cluster.u64` at the cluster address `a`.
#[inline(always)]
pub(super) fn stc64(a: u64, v: u64) {
    // SAFETY: `a` is an 8-byte aligned cluster address of a running CTA's shared memory.
    unsafe { asm!("st.shared::cluster.u64 [{a}], {v};", a = in(reg64) a, v = in(reg64) v, options(nostack)) };
}
/// `atom.shared::cluster.add.u32`: adds `v` at the cluster address `a`, returns the old value.
#[inline(always)]
pub(super) fn atomc_add(a: u64, v: u32) -> u32 {
    let r: u32;
    // SAFETY: as `ldc32`.
    unsafe {
        asm!("atom.shared::cluster.add.u32 {r}, [{a}], {v};", r = out(reg32) r, a = in(reg64) a, v = in(reg32) v, options(nostack))
    };
    r
}
/// `red.shared::cluster.add.u32`: adds `v` at the cluster address `a`.
#[inline(always)]
pub(super) fn redc_add(a: u64, v: u32) {
    // SAFETY: as `ldc32`.
    unsafe { asm!("red.shared::cluster.add.u32 [{a}], {v};", a = in(reg64) a, v = in(reg32) v, options(nostack)) };
}
/// The arrive half of a cluster barrier (`barrier.cluster`, release: this
/// thread's shared and global writes): the wait half,
/// [`cluster_wait`], may come later, work done between the two overlapping
/// the other CTAs' arrival. Every thread calls each once, in this order.
#[inline(always)]
pub(super) fn cluster_arrive() {
    // SAFETY: every call site is reached by all threads of every CTA of the
    // cluster (cluster-uniform control flow).
    unsafe { asm!("barrier.cluster.arrive.aligned;", options(nostack)) };
}
/// [`cluster_arrive`] without its release (`.relaxed`, PTX ISA 8.0): a
/// thread whose shared-memory writes other CTAs read after the wait calls
/// [`fence_cluster`] first; the others skip the `MEMBAR.ALL.GPU` every
/// plain arrive compiles to. Every thread calls it, as `cluster_arrive`.
#[inline(always)]
pub(super) fn cluster_arrive_relaxed() {
    // SAFETY: cluster-uniform control flow, as `cluster_arrive`.
    unsafe { asm!("barrier.cluster.arrive.relaxed.aligned;", options(nostack)) };
}
/// `fence.acq_rel.cluster`: this thread's writes before it are seen by any
/// thread of the cluster that acquires after a later arrive of this thread
/// (with [`cluster_arrive_relaxed`], the release of a plain arrive).
#[inline(always)]
pub(super) fn fence_cluster() {
    // SAFETY: a fence only.
    unsafe { asm!("fence.acq_rel.cluster;", options(nostack)) };
}
/// Programmatic dependent launch (sm_90), at every kernel's entry:
/// `griddepcontrol.launch_dependents` lets the stream's next kernel, when
/// launched with the programmatic-serialization attribute, start its CTAs
/// now (they wait below, so its launch overlaps this kernel), and
/// `griddepcontrol.wait` waits until the grids this one depends on have
/// completed with their memory visible. Both are no-ops for a launch
/// without the attribute. Before any memory access of the kernel (the asm
/// clobbers memory, so no load moves above it).
#[inline(always)]
pub fn grid_dependency_entry() {
    // SAFETY: no operands; ordering only.
    unsafe { asm!("griddepcontrol.launch_dependents;", "griddepcontrol.wait;", options(nostack)) };
}
/// The wait half of a split cluster barrier (acquire), after [`cluster_arrive`].
#[inline(always)]
pub(super) fn cluster_wait() {
    // SAFETY: as `cluster_arrive`.
    unsafe { asm!("barrier.cluster.wait.aligned;", options(nostack)) };
}
