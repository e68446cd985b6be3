//! The CPU backend: a [`Device`] that runs the kernels' host programs, one
//! program per row (rayon over rows), in the launch order of
//! [`crate::runtime::pipeline`].

use rayon::prelude::*;
use sampler_kernels::rt::cpu::{self, Arg, Gm};
use sampler_kernels::spec::{LaunchArg, ParamKind, Prim};

use crate::error::BackendError;
use crate::runtime::pipeline::{self, Buf, Caps, Device, HostSlice, HostSliceMut, Launch};
use crate::runtime::plan::{StepPlan, StepResult};

/// Runs every kernel on the host CPU with rayon.
///
/// Without force top-k it takes the prefix path when the step allows it
/// ([`StepPlan::prefix_width`]) and falls back to the full-row path when a
/// row's kept set does not fit; [`CpuBackend::full_row`] forces the full-row
/// path (tests compare the two bit for bit).
///
/// Large steps run in blocks of whole requests (a long prompt-logprobs
/// request in blocks of rows), so the scratch buffers stay bounded
/// ([`CpuBackend::set_block_bytes`]); a row's results never depend on its block.
#[derive(Debug)]
pub struct CpuBackend {
    full_row: bool,
    block_bytes: usize,
    dev: CpuDevice,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend { full_row: false, block_bytes: DEFAULT_BLOCK_BYTES, dev: CpuDevice::default() }
    }
}

/// Default scratch budget of one block of rows (bytes of `[rows, N]` buffers).
pub const DEFAULT_BLOCK_BYTES: usize = 48 << 20;

impl CpuBackend {
    /// A backend that always takes the full-row path (no prefix path).
    pub fn full_row() -> CpuBackend {
        CpuBackend { full_row: true, ..Default::default() }
    }

    /// Sets the scratch budget per block of rows (bytes; at least one row
    /// or one verify request per block whatever the budget).
    pub fn set_block_bytes(&mut self, bytes: usize) {
        self.block_bytes = bytes;
    }

    /// One step on the prefix path of width `w` only (no fallback), with
    /// `process_prefix_draw`'s `[R]` overflow flags: what [`CpuBackend::run`] does
    /// before it checks [`StepPlan::prefix_overflowed`]. For tests and
    /// benchmarks; `w` must be a tile size of `process_prefix_draw` below V.
    pub fn run_prefix(&mut self, p: &StepPlan<'_>, w: u32) -> Result<(StepResult, Vec<u32>), BackendError> {
        pipeline::run_program(&mut self.dev, p, Some(w))
    }
}

impl CpuBackend {
    /// Short name.
    pub fn name(&self) -> &'static str {
        "cpu"
    }

    /// Runs one step (in blocks of rows when it is large). Errors: CUDA
    /// device logits, or a kernel without a tile variant.
    pub fn run(&mut self, p: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        if matches!(p.logits, crate::runtime::plan::Logits::Cuda(_)) {
            return Err(err("CUDA device logits given to the CPU backend: pass host logits".into()));
        }
        // Bytes per row of the [R, N] and [R, V] scratch the step keeps
        // (the masked f32 copy of the logits only when a row has a mask).
        let per_row = 16 * p.n.max(1) as usize
            + if p.any_verify || p.any_tree { 4 * p.vocab as usize } else { 0 }
            + if pipeline::any_mask(p) { 4 * p.vocab as usize } else { 0 };
        let block_rows = (self.block_bytes / per_row).max(1);
        if (p.rows as usize) <= block_rows || !p.processed_rows.is_empty() {
            return pipeline::run_step(&mut self.dev, p, self.full_row);
        }
        let mut out = StepResult::default();
        for sub in p.row_blocks(block_rows) {
            let res = pipeline::run_step(&mut self.dev, &sub.plan, self.full_row)?;
            sub.merge_into(&mut out, res);
        }
        if !p.any_tree {
            out.path.clear();
        }
        Ok(out)
    }
}

/// One host array of a step buffer.
#[derive(Debug)]
enum Store {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    U64(Vec<u64>),
}

impl Store {
    fn new(p: Prim) -> Store {
        match p {
            Prim::F32 => Store::F32(Vec::new()),
            Prim::I32 => Store::I32(Vec::new()),
            Prim::U64 => Store::U64(Vec::new()),
            _ => Store::U32(Vec::new()),
        }
    }
    fn len(&self) -> usize {
        match self {
            Store::F32(v) => v.len(),
            Store::I32(v) => v.len(),
            Store::U32(v) => v.len(),
            Store::U64(v) => v.len(),
        }
    }
    fn resize(&mut self, len: usize) {
        match self {
            Store::F32(v) => v.resize(len, 0.0),
            Store::I32(v) => v.resize(len, 0),
            Store::U32(v) => v.resize(len, 0),
            Store::U64(v) => v.resize(len, 0),
        }
    }
    /// A kernel view (writable when `write`).
    fn arg(&mut self, write: bool) -> Arg {
        match self {
            Store::F32(v) => Arg::GmF32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Store::I32(v) => Arg::GmI32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Store::U32(v) => Arg::GmU32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Store::U64(v) => Arg::GmU64(if write { Gm::new_mut(v) } else { Gm::new(v) }),
        }
    }
}

/// The host as a [`Device`]: one `Vec` per buffer, kept and grown across
/// steps. The host logits (f32, bf16 or f16) are read in place, in their
/// own element type (the kernels' `Logits` parameters widen at load): no
/// copy of them is made (a grammar mask's copy is the mask check's output).
#[derive(Debug)]
pub struct CpuDevice {
    bufs: Vec<Store>,
    /// The plan's logits, borrowed for the step (`None`: `Buf::Logits` holds f32).
    borrowed: Option<cpu::Logits>,
}

// SAFETY: the borrowed view is only dereferenced during the step that set it.
unsafe impl Send for CpuDevice {}

impl Default for CpuDevice {
    fn default() -> Self {
        CpuDevice { bufs: Buf::ALL.iter().map(|b| Store::new(b.prim())).collect(), borrowed: None }
    }
}

fn err(msg: String) -> BackendError {
    BackendError::Device { backend: "cpu", msg }
}

impl Device for CpuDevice {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn caps(&self, v: u32, _n: u32, _rows: u32) -> Caps {
        // The mask check as mask_check_chunk with one chunk per row (+
        // status_merge): the same statuses and masked logits as mask_check,
        // with one fused count per tile (bad and finite together), faster here;
        // and on a step without masks or raw rows, none at all: the top-N's
        // streaming pass counts (`force_topn_counted`, docs/CPU_NOTES.md).
        let tile = sampler_kernels::kernels::mask_check_chunk::VARIANTS.iter().map(|x| x.tile).max().unwrap_or(1);
        Caps {
            mask_chunk: Some(v.div_ceil(tile).max(1) * tile),
            topn_chunks: 1,
            fused_max: 0,
            counts_in_topn: true,
            stream_select: false,
            stream_chunks: 0,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: 0,
            cluster_tail: false,
            pdl: false,
            pdl_max_ctas: 0,
        }
    }

    fn alloc(&mut self, buf: Buf, len: usize) -> Result<(), BackendError> {
        let s = &mut self.bufs[buf as usize];
        if s.len() < len {
            s.resize(len);
        }
        Ok(())
    }

    fn upload(&mut self, buf: Buf, data: HostSlice<'_>) -> Result<(), BackendError> {
        self.alloc(buf, data.len())?;
        match (&mut self.bufs[buf as usize], data) {
            (Store::F32(v), HostSlice::F32(d)) => v[..d.len()].copy_from_slice(d),
            (Store::I32(v), HostSlice::I32(d)) => v[..d.len()].copy_from_slice(d),
            (Store::U32(v), HostSlice::U32(d)) => v[..d.len()].copy_from_slice(d),
            (Store::U64(v), HostSlice::U64(d)) => v[..d.len()].copy_from_slice(d),
            _ => return Err(err(format!("upload to {buf:?}: element type mismatch"))),
        }
        Ok(())
    }

    fn fill(&mut self, buf: Buf, len: usize, value: LaunchArg<()>) -> Result<(), BackendError> {
        self.alloc(buf, len)?;
        match (&mut self.bufs[buf as usize], value) {
            (Store::F32(v), LaunchArg::F32(x)) => v[..len].fill(x),
            (Store::I32(v), LaunchArg::I32(x)) => v[..len].fill(x),
            (Store::U32(v), LaunchArg::U32(x)) => v[..len].fill(x),
            (Store::U64(v), LaunchArg::U64(x)) => v[..len].fill(x),
            _ => return Err(err(format!("fill of {buf:?}: element type mismatch"))),
        }
        Ok(())
    }

    fn bind_logits(&mut self, plan: &StepPlan<'_>) -> Result<(), BackendError> {
        use crate::runtime::plan::Logits as L;
        // No kernel writes Buf::Logits (a mask goes to Buf::Masked): read the caller's buffer.
        self.borrowed = Some(match &plan.logits {
            L::F32(s) => cpu::Logits::f32(s),
            L::Owned(v) => cpu::Logits::f32(v),
            L::Bf16(s) => cpu::Logits::bf16(s),
            L::F16(s) => cpu::Logits::f16(s),
            L::Cuda(_) => return Err(err("device logits given to the CPU backend".into())),
        });
        Ok(())
    }

    fn launch(&mut self, l: &Launch) -> Result<(), BackendError> {
        let mut args = Vec::with_capacity(l.args.len());
        for (a, p) in l.args.iter().zip(l.spec.params) {
            let write = matches!(p.kind, ParamKind::GmMut(_));
            args.push(match *a {
                // The plan that bound these logits outlives the step; no kernel writes them.
                LaunchArg::Buf(Buf::Logits) if p.kind == ParamKind::Logits && self.borrowed.is_some() => {
                    Arg::Logits(self.borrowed.unwrap())
                }
                // Any other buffer a `Logits` parameter reads is ours, in f32 (Buf::Masked).
                LaunchArg::Buf(b) if p.kind == ParamKind::Logits => match self.bufs[b as usize].arg(false) {
                    Arg::GmF32(g) => Arg::Logits(g.into()),
                    other => other, // refused by the kernel's checked arguments
                },
                LaunchArg::Buf(b) => self.bufs[b as usize].arg(write),
                LaunchArg::Bool(x) => Arg::Bool(x),
                LaunchArg::I32(x) => Arg::I32(x),
                LaunchArg::U32(x) => Arg::U32(x),
                LaunchArg::I64(x) => Arg::I64(x),
                LaunchArg::U64(x) => Arg::U64(x),
                LaunchArg::F32(x) => Arg::F32(x),
                LaunchArg::F64(x) => Arg::F64(x),
            });
        }
        let f = l.spec.cpu;
        // SAFETY: the buffers are sized by the pipeline for the step's shapes;
        // each program writes only its own row's (or group's) elements.
        (0..l.grid).into_par_iter().try_for_each(|i| unsafe { f(i, &args) }).map_err(|e| err(e.to_string()))
    }

    fn download(&mut self, buf: Buf, offset: usize, out: HostSliceMut<'_>) -> Result<(), BackendError> {
        let range = |n: usize, have: usize| {
            if offset + n <= have {
                Ok(offset..offset + n)
            } else {
                Err(err(format!("download of {buf:?} past its end")))
            }
        };
        match (&self.bufs[buf as usize], out) {
            (Store::F32(v), HostSliceMut::F32(o)) => o.copy_from_slice(&v[range(o.len(), v.len())?]),
            (Store::I32(v), HostSliceMut::I32(o)) => o.copy_from_slice(&v[range(o.len(), v.len())?]),
            (Store::U32(v), HostSliceMut::U32(o)) => o.copy_from_slice(&v[range(o.len(), v.len())?]),
            (Store::U64(v), HostSliceMut::U64(o)) => o.copy_from_slice(&v[range(o.len(), v.len())?]),
            _ => return Err(err(format!("download of {buf:?}: element type mismatch"))),
        }
        Ok(())
    }
}
