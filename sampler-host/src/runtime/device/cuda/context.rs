//! The process-wide CUDA context and the module of the committed PTX
//! (one load per process, shared by every backend).

use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaModule};

use crate::error::ConfigError;

/// The committed PTX of every kernel (`cargo run --example regenerate`).
pub const PTX: &str = include_str!("../../../../ptx/sampler_kernels.ptx");

/// Whether a CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

pub(super) struct Shared {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) module: Arc<CudaModule>,
    pub(super) device: String,
}

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();

pub(super) fn shared() -> Result<&'static Shared, ConfigError> {
    let unavailable = |m: String| ConfigError::BackendUnavailable("cuda", m);
    if !driver_present() {
        return Err(unavailable("no CUDA driver library (libcuda) found".into()));
    }
    let r = SHARED.get_or_init(|| {
        let made = std::panic::catch_unwind(|| -> Result<Shared, String> {
            let ctx = CudaContext::new(0).map_err(|e| format!("no usable CUDA device: {e:?}"))?;
            // One stream per backend, no multi-stream sharing of buffers: no event tracking needed.
            // SAFETY: called before any buffer exists.
            unsafe { ctx.disable_event_tracking() };
            // SAMPLER_PTX_FILE: a kernel author's A/B build of the same kernels (same entry
            // points and launch shapes) timed without rebuilding the binaries.
            let src = match std::env::var("SAMPLER_PTX_FILE") {
                Ok(p) => std::fs::read_to_string(&p).map_err(|e| format!("SAMPLER_PTX_FILE {p}: {e}"))?,
                Err(_) => PTX.to_string(),
            };
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(src))
                .map_err(|e| format!("loading the PTX failed: {e:?}"))?;
            let device = ctx.name().unwrap_or_else(|_| "CUDA device".into());
            Ok(Shared { ctx, module, device })
        });
        match made {
            Ok(r) => r,
            Err(_) => Err("the CUDA driver panicked during initialisation".into()),
        }
    });
    r.as_ref().map_err(|m| unavailable(m.clone()))
}
