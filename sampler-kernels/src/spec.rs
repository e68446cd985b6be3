//! Kernel descriptions emitted by `#[kernel]` (no_std: used on every target).

/// Element types of kernel parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prim {
    Bool,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

/// How a parameter is passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A read-only global buffer of this element type.
    Gm(Prim),
    /// A writable global buffer of this element type.
    GmMut(Prim),
    /// A scalar passed by value.
    Scalar(Prim),
    /// Read-only `[.., V]` logits whose element type (f32, bf16 or f16:
    /// [`crate::codes::LOGITS_F32`] ..) is chosen at launch; every read widens
    /// to f32 exactly. Its argument is a buffer; on NVIDIA the entry point
    /// takes the pointer, then the `u32` element type code.
    Logits,
}

/// One kernel parameter.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
}

/// One tile variant: its tile size, its NVIDIA block size and PTX entry name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub tile: u32,
    pub threads: u32,
    pub entry: &'static str,
    /// Dynamic shared memory bytes the PTX entry point needs at launch
    /// ([`gpu_shared_bytes`]); above 48 KiB the launcher must raise the
    /// function's `MAX_DYNAMIC_SHARED_SIZE_BYTES` attribute first.
    pub shared: u32,
    /// `#[kernel(cluster = C)]`: the most CTAs of a thread-block cluster one
    /// program (row) may run on; the launch picks its cluster size up to it
    /// and launches that many CTAs a program (0: a plain kernel, one CTA a
    /// program).
    pub cluster: u32,
}

/// NVIDIA runtime: bytes of reduction / histogram scratch at the start of
/// the dynamic shared memory of every entry point (two areas of reduction
/// slots used in turn, the radix histogram, block-uniform scalars).
pub const GPU_SMEM_BASE: u32 = 2560;
/// NVIDIA runtime: most keys `top_n` / `sort_desc` sort at once in shared memory.
pub const GPU_SORT_CAP: u32 = crate::codes::MAX_N_NVIDIA;

/// NVIDIA runtime: most logits per program `top_n` stages in shared memory.
pub const GPU_STAGE_CAP: u32 = 32768;

/// NVIDIA runtime: bytes of selection scratch at the sort buffer's place:
/// the wide first-digit histogram (4096 u32 bins) of the staged keys, then
/// (once read) the list of the boundary bin's positions. The selection is
/// done before the sort buffer is written, so the two share memory; a sort
/// buffer smaller than this is grown to it when a launch stages.
pub const GPU_SELECT_SCRATCH: u32 = 16384;

/// NVIDIA runtime: extra dynamic shared memory a launch of a kernel using
/// `top_n` over `len` logits per program may get (`base`: the variant's own
/// bytes, [`gpu_shared_bytes`]), so that `top_n` reads them from global
/// memory once (u32 order bits, 4 bytes a key) plus what the selection
/// scratch needs beyond the sort buffer; 0 when they would not fit next to
/// `base` (227 KiB per block on sm_90) or `len` is above [`GPU_STAGE_CAP`]
/// (more would cost occupancy). Results never depend on it.
pub const fn gpu_stage_bytes(base: u32, len: u32) -> u32 {
    let sort = base.saturating_sub(GPU_SMEM_BASE);
    let grow = GPU_SELECT_SCRATCH.saturating_sub(sort);
    let want = 4 * len + grow;
    if len <= GPU_STAGE_CAP && base + want <= 227 * 1024 {
        want
    } else {
        0
    }
}

/// Dynamic shared memory of an NVIDIA entry point of tile size `tile`
/// (`sorts`: the kernel uses `top_n` or `sort_desc`, whose sort buffer holds
/// `min(tile, GPU_SORT_CAP)` u64 keys).
pub const fn gpu_shared_bytes(tile: u32, sorts: bool) -> u32 {
    if sorts {
        GPU_SMEM_BASE + 8 * if tile < GPU_SORT_CAP { tile } else { GPU_SORT_CAP }
    } else {
        GPU_SMEM_BASE
    }
}

/// NVIDIA runtime, `top_n_cluster`: bytes of the radix histograms of each
/// CTA of a cluster: ten of 2048 u32 bins, five of its own (the first
/// digit's, then two digits for each of the two ranks selected; the others
/// read one bin of them for ties) and five the leader merges them into
/// (in every CTA, once the passes are over, the room where its kept keys
/// are staged: 5120 u64).
pub const GPU_CLUSTER_HIST_BYTES: u32 = 10 * 2048 * 4;

/// NVIDIA runtime, `top_n_cluster`: logits of a row each of the `ctas` CTAs
/// of its cluster holds in shared memory (the row cut into slices of a
/// multiple of 8 logits; the last may be shorter or empty).
pub const fn cluster_slice(v: u32, ctas: u32) -> u32 {
    let c = if ctas == 0 { 1 } else { ctas };
    v.div_ceil(c).div_ceil(8) * 8
}

/// Dynamic shared memory of a `top_n_cluster` launch of tile size `tile`
/// whose CTAs hold `slice` logits each: the reduction scratch, the leader's
/// two key buffers (the kept set and its sorted prefix, `8 * min(tile,
/// GPU_SORT_CAP)` bytes each), the histograms, and the slice as u32 order
/// bits. The op falls back to the leader alone when a launch gets less.
pub const fn gpu_cluster_bytes(tile: u32, slice: u32) -> u32 {
    let keys = if tile < GPU_SORT_CAP { tile } else { GPU_SORT_CAP };
    // In u64, saturated: a slice of 2^30 logits must not wrap into a small size.
    let b = GPU_SMEM_BASE as u64 + 16 * keys as u64 + GPU_CLUSTER_HIST_BYTES as u64 + 4 * slice as u64;
    if b > u32::MAX as u64 {
        u32::MAX
    } else {
        b as u32
    }
}

/// A registered kernel (host builds only).
#[cfg(not(target_arch = "nvptx64"))]
#[derive(Clone, Copy)]
pub struct KernelSpec {
    pub name: &'static str,
    pub params: &'static [ParamSpec],
    pub variants: &'static [Variant],
    /// AscendC source, when the AscendC emitter supports this kernel.
    pub ascendc: Option<&'static str>,
    /// Why [`KernelSpec::ascendc`] is `None`: the opt-out, or the reason
    /// the AscendC emitter gives (`None` when there is a source).
    pub ascendc_skipped: Option<&'static str>,
    /// `#[kernel(ascend = false)]`: the kernel has no AscendC on purpose.
    pub ascend_opt_out: bool,
    /// The host program with run-time checked arguments.
    pub cpu: unsafe fn(u32, &[crate::rt::cpu::Arg]) -> Result<(), crate::rt::cpu::ArgError>,
}

#[cfg(not(target_arch = "nvptx64"))]
impl core::fmt::Debug for KernelSpec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KernelSpec")
            .field("name", &self.name)
            .field("params", &self.params)
            .field("variants", &self.variants)
            .finish()
    }
}

impl Variant {
    /// The smallest variant whose tile holds `n` elements.
    pub fn pick(variants: &'static [Variant], n: u32) -> Option<&'static Variant> {
        variants.iter().filter(|v| v.tile >= n).min_by_key(|v| v.tile)
    }
}

/// One kernel argument as a device launches it: a global buffer as the
/// device's handle type `B`, or a scalar by value. Each kernel's generated
/// `Args<B>::list()` gives its arguments in this form, in signature order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LaunchArg<B> {
    /// A global buffer (`Gm<T>` / `GmMut<T>`; the element type is the
    /// parameter's [`ParamKind`]).
    Buf(B),
    /// A `bool` scalar.
    Bool(bool),
    /// An `i32` scalar.
    I32(i32),
    /// A `u32` scalar.
    U32(u32),
    /// An `i64` scalar.
    I64(i64),
    /// A `u64` scalar.
    U64(u64),
    /// An `f32` scalar.
    F32(f32),
    /// An `f64` scalar.
    F64(f64),
}

impl<B> LaunchArg<B> {
    /// The scalar's 8 bytes, little-endian and zero-extended (bit patterns,
    /// not values: `-1i32` is `0xffff_ffff`); `None` for a buffer.
    pub fn scalar_bits(&self) -> Option<u64> {
        Some(match *self {
            LaunchArg::Buf(_) => return None,
            LaunchArg::Bool(x) => x as u64,
            LaunchArg::I32(x) => x as u32 as u64,
            LaunchArg::U32(x) => x as u64,
            LaunchArg::I64(x) => x as u64,
            LaunchArg::U64(x) => x,
            LaunchArg::F32(x) => x.to_bits() as u64,
            LaunchArg::F64(x) => x.to_bits(),
        })
    }
}
