//! The process-wide CUDA context and the module of the committed PTX
//! (one load per process, shared by every backend).

use std::collections::HashMap;
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
    /// Block size of each entry of a `SAMPLER_PTX_FILE` module (its
    /// `.maxntid`), where it may differ from the registry's (an A/B build
    /// with other thread counts); empty for the committed PTX, whose
    /// `.maxntid` are the registry's (tests/kernels/registry.rs).
    pub(super) threads: HashMap<String, u32>,
}

/// Each entry's `.maxntid` x in a PTX module's text.
pub(super) fn entry_threads(ptx: &str) -> HashMap<String, u32> {
    let mut out = HashMap::new();
    let mut cur: Option<&str> = None;
    for line in ptx.lines() {
        if let Some(rest) = line.strip_prefix(".visible .entry ") {
            cur = rest.split('(').next().map(str::trim);
        } else if let (Some(e), Some(t)) = (cur, line.trim().strip_prefix(".maxntid ")) {
            if let Some(x) = t.split(',').next().and_then(|x| x.trim().parse().ok()) {
                out.insert(e.to_string(), x);
            }
            cur = None;
        } else if line.starts_with('{') {
            cur = None;
        }
    }
    out
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
            // Its block sizes may differ: each launch takes its entry's `.maxntid`.
            let (src, threads) = match std::env::var("SAMPLER_PTX_FILE") {
                Ok(p) => {
                    let s = std::fs::read_to_string(&p).map_err(|e| format!("SAMPLER_PTX_FILE {p}: {e}"))?;
                    let t = entry_threads(&s);
                    (s, t)
                }
                Err(_) => (PTX.to_string(), HashMap::new()),
            };
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(src))
                .map_err(|e| format!("loading the PTX failed: {e:?}"))?;
            let device = ctx.name().unwrap_or_else(|_| "CUDA device".into());
            Ok(Shared { ctx, module, device, threads })
        });
        match made {
            Ok(r) => r,
            Err(_) => Err("the CUDA driver panicked during initialisation".into()),
        }
    });
    r.as_ref().map_err(|m| unavailable(m.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parser reads the committed PTX's block sizes as the registry's,
    /// and an entry's `.maxntid` wherever its header puts it.
    #[test]
    fn entry_threads_reads_each_maxntid() {
        let t = entry_threads(PTX);
        let mut n = 0;
        for k in sampler_kernels::registry::all() {
            for v in k.variants {
                assert_eq!(t.get(v.entry), Some(&v.threads), "{}", v.entry);
                n += 1;
            }
        }
        assert_eq!(t.len(), n);
        let ptx = ".visible .entry a(\n.param .u32 x\n)\n.maxntid 512, 1, 1\n.minnctapersm 2\n{\n}\n\
                   .visible .entry b()\n{\n.maxntid 64, 1, 1\n}\n.visible .entry c()\n.maxntid 64, 1, 1\n{\n}\n";
        let t = entry_threads(ptx);
        assert_eq!((t.get("a"), t.get("b"), t.get("c")), (Some(&512), None, Some(&64)));
    }
}
