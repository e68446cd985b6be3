//! The Ascend backend (910B/910C, dav-2201): the AscendC sources the DSL
//! emits, their launch glue, and a [`Backend`] that reports a typed
//! "not available" error where no CANN runtime is installed.
//!
//! Launch plan on real hardware (see docs/ASCEND.md): each kernel source is
//! compiled at run time by `aclrtc` (CANN >= 8.5) or ahead of time by
//! `bisheng` (`sampler-host/ascendc/build_aot.sh`); entries are
//! `{kernel}_t{tile}` with the kernel's parameters plus `uint32_t programs`,
//! launched on `min(programs, AIV cores)` blocks.

use std::path::{Path, PathBuf};

use crate::error::{BackendError, ConfigError};
use crate::plan::{Backend, StepPlan, StepResult};

/// Largest force top-k width N on Ascend (SAMPLER.md section 9).
pub const MAX_N_ASCEND: u32 = 4096;

/// The AscendC source of every registered kernel that has one, as
/// `(kernel name, C++ source)`, in pipeline order.
pub fn sources() -> Vec<(&'static str, &'static str)> {
    sampler_kernels::kernels::ALL
        .iter()
        .filter_map(|name| sampler_kernels::registry::find(name).and_then(|k| k.ascendc.map(|s| (k.name, s))))
        .collect()
}

/// Writes one `<kernel>.cpp` per kernel into `dir` (created if needed).
///
/// Returns the paths written. Errors: any I/O error creating or writing.
pub fn write_sources(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::new();
    for (name, src) in sources() {
        let p = dir.join(format!("{name}.cpp"));
        std::fs::write(&p, src)?;
        out.push(p);
    }
    Ok(out)
}

/// Where a CANN toolkit is installed, if anywhere: `ASCEND_HOME_PATH`,
/// `ASCEND_TOOLKIT_HOME`, or `/usr/local/Ascend/ascend-toolkit/latest`,
/// holding `lib64/libascendcl.so`.
pub fn cann_home() -> Option<PathBuf> {
    let candidates = ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain(std::iter::once(PathBuf::from("/usr/local/Ascend/ascend-toolkit/latest")));
    for c in candidates {
        if c.join("lib64/libascendcl.so").exists() {
            return Some(c);
        }
    }
    None
}

/// The Ascend backend. Construction fails with
/// [`ConfigError::BackendUnavailable`] when CANN (libascendcl, aclrtc) is
/// absent, and also where it is present: launching through `aclrtc` from
/// Rust is not wired yet (docs/ASCEND.md lists the commands to run the
/// generated sources on hardware meanwhile).
#[derive(Debug)]
pub struct AscendBackend {
    _home: PathBuf,
}

impl AscendBackend {
    /// Probes for CANN. Errors: [`ConfigError::BackendUnavailable`] with the reason.
    pub fn new() -> Result<AscendBackend, ConfigError> {
        let Some(home) = cann_home() else {
            return Err(ConfigError::BackendUnavailable(
                "ascend",
                "no CANN toolkit found (set ASCEND_HOME_PATH to a toolkit holding lib64/libascendcl.so)".into(),
            ));
        };
        if !home.join("lib64/libacl_rtc.so").exists() && !home.join("lib64/libaclrtc.so").exists() {
            return Err(ConfigError::BackendUnavailable("ascend", format!("{}: no aclrtc library (CANN >= 8.5 needed)", home.display())));
        }
        Err(ConfigError::BackendUnavailable("ascend", "aclrtc launch from Rust is not implemented yet: see docs/ASCEND.md".into()))
    }
}

impl Backend for AscendBackend {
    fn name(&self) -> &'static str {
        "ascend"
    }

    fn run(&mut self, _plan: &StepPlan) -> Result<StepResult, BackendError> {
        Err(BackendError::Device { backend: "ascend", msg: "not available".into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_has_a_source() {
        assert_eq!(sources().len(), sampler_kernels::kernels::ALL.len());
    }

    #[test]
    fn without_cann_the_backend_is_a_typed_error() {
        if cann_home().is_none() {
            assert!(matches!(AscendBackend::new(), Err(ConfigError::BackendUnavailable("ascend", _))));
        }
    }
}
