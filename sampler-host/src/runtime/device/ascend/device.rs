//! The pipeline [`Device`] over the ACL runtime ([`super::acl`]): the
//! shared launch list ([`crate::runtime::pipeline`]) runs on a 910B through it.

use sampler_kernels::spec::LaunchArg;

use super::{acl, MAX_N_ASCEND};
use crate::error::BackendError;
use crate::runtime::pipeline::{Buf, Caps, Device, HostSlice, HostSliceMut, Launch};

/// The arguments of `l` as its AscendC entry takes them: the kernel's
/// parameters in signature order (buffers as `GM_ADDR` from `addr`), then
/// `uint32_t programs` (the launch's grid). A `Logits` parameter is one
/// `GM_ADDR` of f32: the AscendC kernels read f32 logits only, so this
/// device binds host bf16 / f16 logits widened on the host (the default
/// [`Device::bind_logits`]). Errors: a scalar type the AscendC entries do
/// not take.
pub fn launch_args(
    l: &Launch,
    addr: &dyn Fn(Buf) -> *mut std::ffi::c_void,
) -> Result<Vec<acl::KernelArg>, BackendError> {
    use acl::KernelArg as K;
    let mut out = Vec::with_capacity(l.args.len() + 1);
    for a in &l.args {
        out.push(match *a {
            LaunchArg::Buf(b) => K::Gm(addr(b)),
            LaunchArg::U32(x) => K::U32(x),
            LaunchArg::I32(x) => K::I32(x),
            LaunchArg::U64(x) => K::U64(x),
            LaunchArg::F32(x) => K::F32(x),
            other => {
                return Err(BackendError::Device {
                    backend: "ascend",
                    msg: format!("kernel `{}`: argument {other:?} has no AscendC form", l.spec.name),
                })
            }
        });
    }
    out.push(K::U32(l.grid));
    Ok(out)
}

/// The launch list's capabilities on Ascend: one program per row for the
/// mask check and the top-N (`Sort32` + `MrgSort` over N <= 4096), fused
/// kernels up to [`MAX_N_ASCEND`]; on a step without masks or raw rows the
/// top-N counts each chunk as it lands in UB (`force_topn_counted`) and no
/// mask check runs (checked in the emulation; not timed on hardware).
pub fn ascend_caps() -> Caps {
    Caps {
        mask_chunk: None,
        topn_chunks: 1,
        fused_max: MAX_N_ASCEND,
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

/// Ascend through CANN as a pipeline [`Device`]: every kernel source
/// compiled by aclrtc at start, one device buffer per [`Buf`] (grown, never
/// shrunk), synchronous copies and launches, each launch on
/// `min(grid, `[`super::max_blocks`]`)` AIV blocks. Written from the public ACL
/// documentation; **not run here** (no Ascend hardware): docs/ASCEND.md.
pub struct AscendDevice {
    rt: acl::Runtime,
    funcs: std::collections::HashMap<&'static str, acl::Function>,
    _bins: Vec<acl::Binary>,
    bufs: Vec<(*mut std::ffi::c_void, usize)>,
    cores: u32,
}

// SAFETY: used by one thread at a time (`&mut self`); see acl::Runtime.
unsafe impl Send for AscendDevice {}

impl std::fmt::Debug for AscendDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendDevice").field("entries", &self.funcs.len()).field("cores", &self.cores).finish()
    }
}

fn ae(msg: String) -> BackendError {
    BackendError::Device { backend: "ascend", msg }
}

fn elem_bytes(p: sampler_kernels::spec::Prim) -> usize {
    use sampler_kernels::spec::Prim;
    match p {
        Prim::Bool => 1,
        Prim::I64 | Prim::U64 | Prim::F64 => 8,
        _ => 4,
    }
}

impl AscendDevice {
    /// Compiles and loads every kernel's AscendC source on `rt`.
    pub fn new(rt: acl::Runtime) -> Result<AscendDevice, String> {
        let mut funcs = std::collections::HashMap::new();
        let mut bins = Vec::new();
        for spec in sampler_kernels::registry::all() {
            let name = spec.name;
            let Some(src) = spec.ascendc else { continue };
            let bin = rt.load(&rt.compile(name, src)?)?;
            for v in spec.variants.iter().filter(|v| v.tile <= MAX_N_ASCEND) {
                funcs.insert(v.entry, rt.function(&bin, v.entry)?);
            }
            bins.push(bin);
        }
        let cores = super::max_blocks();
        Ok(AscendDevice { rt, funcs, _bins: bins, bufs: vec![(std::ptr::null_mut(), 0); Buf::ALL.len()], cores })
    }

    fn host_bytes(data: &HostSlice<'_>) -> Vec<u8> {
        match *data {
            HostSlice::F32(s) => s.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostSlice::I32(s) => s.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostSlice::U32(s) => s.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostSlice::U64(s) => s.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
}

impl Drop for AscendDevice {
    fn drop(&mut self) {
        for &(p, _) in &self.bufs {
            if !p.is_null() {
                // SAFETY: allocated by alloc_raw of this runtime; dropped once.
                unsafe { self.rt.free_raw(p) };
            }
        }
    }
}

impl Device for AscendDevice {
    fn name(&self) -> &'static str {
        "ascend"
    }
    fn caps(&self, _v: u32, _n: u32, _rows: u32) -> Caps {
        ascend_caps()
    }
    fn alloc(&mut self, buf: Buf, len: usize) -> Result<(), BackendError> {
        let bytes = len * elem_bytes(buf.prim());
        let (p, have) = self.bufs[buf as usize];
        if have < bytes.max(32) {
            if !p.is_null() {
                // SAFETY: ours, replaced below.
                unsafe { self.rt.free_raw(p) };
            }
            let want = bytes.max(32).max(have + have / 2);
            self.bufs[buf as usize] = (self.rt.alloc_raw(want).map_err(ae)?, want);
        }
        Ok(())
    }
    fn upload(&mut self, buf: Buf, data: HostSlice<'_>) -> Result<(), BackendError> {
        self.alloc(buf, data.len())?;
        let (p, have) = self.bufs[buf as usize];
        // SAFETY: `p` holds `have` >= the data's bytes (alloc above).
        unsafe { self.rt.copy_h2d(p, have, &Self::host_bytes(&data)) }.map_err(ae)
    }
    fn fill(&mut self, buf: Buf, len: usize, value: LaunchArg<()>) -> Result<(), BackendError> {
        let w = elem_bytes(buf.prim());
        let bits = value.scalar_bits().unwrap_or(0).to_le_bytes();
        let bytes: Vec<u8> = (0..len).flat_map(|_| bits[..w].to_vec()).collect();
        self.alloc(buf, len)?;
        let (p, have) = self.bufs[buf as usize];
        // SAFETY: as upload.
        unsafe { self.rt.copy_h2d(p, have, &bytes) }.map_err(ae)
    }
    fn launch(&mut self, l: &Launch) -> Result<(), BackendError> {
        let f =
            *self.funcs.get(l.variant.entry).ok_or_else(|| ae(format!("no AscendC entry `{}`", l.variant.entry)))?;
        let bufs = &self.bufs;
        let args = launch_args(l, &|b| bufs[b as usize].0)?;
        // SAFETY: the arguments follow the kernel's generated Args (its signature) plus
        // `programs`; the pipeline sized every buffer for the step.
        unsafe { self.rt.launch(f, l.grid.clamp(1, self.cores), &args) }.map_err(ae)
    }
    fn download(&mut self, buf: Buf, offset: usize, out: HostSliceMut<'_>) -> Result<(), BackendError> {
        let w = elem_bytes(buf.prim());
        let (p, have) = self.bufs[buf as usize];
        let n = match &out {
            HostSliceMut::F32(o) => o.len(),
            HostSliceMut::I32(o) => o.len(),
            HostSliceMut::U32(o) => o.len(),
            HostSliceMut::U64(o) => o.len(),
        };
        if (offset + n) * w > have {
            return Err(ae(format!("download of {buf:?} past its end")));
        }
        let mut bytes = vec![0u8; n * w];
        // SAFETY: range checked above.
        unsafe { self.rt.copy_d2h(&mut bytes, (p as *const u8).add(offset * w) as *const std::ffi::c_void) }
            .map_err(ae)?;
        macro_rules! put {
            ($o:expr, $t:ty) => {
                for (x, c) in $o.iter_mut().zip(bytes.chunks_exact(w)) {
                    *x = <$t>::from_le_bytes(c.try_into().expect("element width"));
                }
            };
        }
        match out {
            HostSliceMut::F32(o) => put!(o, f32),
            HostSliceMut::I32(o) => put!(o, i32),
            HostSliceMut::U32(o) => put!(o, u32),
            HostSliceMut::U64(o) => put!(o, u64),
        }
        Ok(())
    }
}
