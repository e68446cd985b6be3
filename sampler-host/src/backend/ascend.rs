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
/// `(kernel name, C++ source)`, in name order.
pub fn sources() -> Vec<(&'static str, &'static str)> {
    sampler_kernels::registry::all().filter_map(|k| k.ascendc.map(|s| (k.name, s))).collect()
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
/// `ASCEND_TOOLKIT_HOME`, `/usr/local/Ascend/ascend-toolkit/latest`,
/// `/usr/local/Ascend/latest` or `$HOME/Ascend/ascend-toolkit/latest`,
/// holding `lib64/libascendcl.so`.
pub fn cann_home() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join("Ascend/ascend-toolkit/latest"));
    let candidates = ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .chain([PathBuf::from("/usr/local/Ascend/ascend-toolkit/latest"), PathBuf::from("/usr/local/Ascend/latest")])
        .chain(home);
    for c in candidates {
        if c.join("lib64/libascendcl.so").exists() {
            return Some(c);
        }
    }
    None
}

/// The aclrtc library of a toolkit (`libacl_rtc.so` or `libaclrtc.so`).
pub fn aclrtc_library(home: &Path) -> Option<PathBuf> {
    ["lib64/libacl_rtc.so", "lib64/libaclrtc.so"].iter().map(|l| home.join(l)).find(|p| p.exists())
}

/// Run-time glue over CANN's C API, loaded with `libloading` (no link-time
/// dependency on CANN). Written from the public ACL / aclrtc documentation
/// and **untested here** (no Ascend device in CI): the call sequence is
/// `aclInit` -> `aclrtSetDevice` -> `aclrtCreateStream`, per source
/// `aclrtcCreateProg` -> `aclrtcCompileProg(--npu-arch=dav-2201)` ->
/// `aclrtcGetBinDataSize` / `aclrtcGetBinData` -> `aclrtBinaryLoadFromData`
/// -> `aclrtBinaryGetFunction("{kernel}_t{tile}")`, then per launch
/// `aclrtLaunchKernel(func, blocks, packed args, stream)` and
/// `aclrtSynchronizeStream`.
pub mod acl {
    use std::ffi::{c_char, c_int, c_void, CString};
    use std::path::Path;

    use libloading::Library;

    /// `aclError`: 0 is success.
    pub type AclError = c_int;
    type Handle = *mut c_void;

    /// `aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST`.
    const ACL_MEM_MALLOC_HUGE_FIRST: c_int = 0;
    /// `aclrtMemcpyKind`: host to device, device to host.
    const ACL_MEMCPY_HOST_TO_DEVICE: c_int = 1;
    const ACL_MEMCPY_DEVICE_TO_HOST: c_int = 2;

    /// The resolved entry points (function pointers copied out of the libraries,
    /// which [`Runtime`] keeps loaded).
    #[allow(clippy::type_complexity)]
    struct Api {
        init: unsafe extern "C" fn(*const c_char) -> AclError,
        set_device: unsafe extern "C" fn(i32) -> AclError,
        create_stream: unsafe extern "C" fn(*mut Handle) -> AclError,
        synchronize_stream: unsafe extern "C" fn(Handle) -> AclError,
        malloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_int) -> AclError,
        free: unsafe extern "C" fn(*mut c_void) -> AclError,
        memcpy: unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize, c_int) -> AclError,
        binary_load_from_data: unsafe extern "C" fn(*const c_void, usize, *const c_void, *mut Handle) -> AclError,
        binary_get_function: unsafe extern "C" fn(Handle, *const c_char, *mut Handle) -> AclError,
        launch_kernel: unsafe extern "C" fn(Handle, u32, *const c_void, usize, Handle) -> AclError,
        rtc_create_prog: unsafe extern "C" fn(*mut Handle, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> AclError,
        rtc_compile_prog: unsafe extern "C" fn(Handle, c_int, *const *const c_char) -> AclError,
        rtc_get_bin_data_size: unsafe extern "C" fn(Handle, *mut usize) -> AclError,
        rtc_get_bin_data: unsafe extern "C" fn(Handle, *mut c_char) -> AclError,
        rtc_get_compile_log_size: unsafe extern "C" fn(Handle, *mut usize) -> AclError,
        rtc_get_compile_log: unsafe extern "C" fn(Handle, *mut c_char) -> AclError,
        rtc_destroy_prog: unsafe extern "C" fn(*mut Handle) -> AclError,
    }

    /// CANN loaded, initialised, with one device and one stream.
    pub struct Runtime {
        api: Api,
        device: i32,
        stream: Handle,
        _acl: Library,
        _rtc: Library,
    }

    // SAFETY: ACL handles are process-wide; a thread that uses the runtime
    // binds the device first (`launch` calls `aclrtSetDevice`), and `&mut`
    // / single-owner use keeps one thread on the stream at a time.
    unsafe impl Send for Runtime {}

    impl std::fmt::Debug for Runtime {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("acl::Runtime").finish_non_exhaustive()
        }
    }

    /// A compiled and loaded kernel source.
    #[derive(Debug)]
    pub struct Binary {
        handle: Handle,
    }

    /// One kernel entry (`{kernel}_t{tile}`).
    #[derive(Debug, Clone, Copy)]
    pub struct Function {
        handle: Handle,
    }

    /// A device buffer (freed on drop).
    pub struct DeviceBuffer<'r> {
        rt: &'r Runtime,
        ptr: *mut c_void,
        bytes: usize,
    }

    /// One kernel argument: a device buffer address (`GM_ADDR`) or a scalar by value.
    #[derive(Debug, Clone, Copy)]
    pub enum KernelArg {
        Gm(*mut c_void),
        U32(u32),
        I32(i32),
        U64(u64),
        F32(f32),
    }

    /// Packs arguments as the kernel's C parameter list is laid out:
    /// natural alignment, pointers 8 bytes.
    pub fn pack_args(args: &[KernelArg]) -> Vec<u8> {
        let mut out: Vec<u8> = Vec::new();
        let mut put = |bytes: &[u8]| {
            let a = bytes.len();
            while out.len() % a != 0 {
                out.push(0);
            }
            out.extend_from_slice(bytes);
        };
        for a in args {
            match *a {
                KernelArg::Gm(p) => put(&(p as u64).to_le_bytes()),
                KernelArg::U32(v) => put(&v.to_le_bytes()),
                KernelArg::I32(v) => put(&v.to_le_bytes()),
                KernelArg::U64(v) => put(&v.to_le_bytes()),
                KernelArg::F32(v) => put(&v.to_le_bytes()),
            }
        }
        while out.len() % 8 != 0 {
            out.push(0);
        }
        out
    }

    fn check(what: &str, e: AclError) -> Result<(), String> {
        if e == 0 {
            Ok(())
        } else {
            Err(format!("{what} failed with aclError {e}"))
        }
    }

    impl Runtime {
        /// Loads `libascendcl` and the aclrtc library of `home`, resolves every
        /// entry point, then `aclInit(NULL)`, `aclrtSetDevice(device)` and
        /// `aclrtCreateStream`.
        ///
        /// # Safety
        /// Loads and runs code from the CANN installation at `home`.
        pub unsafe fn open(home: &Path, device: i32) -> Result<Runtime, String> {
            let rtc_path = super::aclrtc_library(home).ok_or_else(|| format!("{}: no aclrtc library (CANN >= 8.5 needed)", home.display()))?;
            let acl = unsafe { Library::new(home.join("lib64/libascendcl.so")) }.map_err(|e| format!("libascendcl: {e}"))?;
            let rtc = unsafe { Library::new(&rtc_path) }.map_err(|e| format!("{}: {e}", rtc_path.display()))?;
            macro_rules! sym {
                ($lib:expr, $name:literal) => {
                    *unsafe { $lib.get($name) }.map_err(|e| format!("{}: {e}", String::from_utf8_lossy(&$name[..$name.len() - 1])))?
                };
            }
            let api = Api {
                init: sym!(acl, b"aclInit\0"),
                set_device: sym!(acl, b"aclrtSetDevice\0"),
                create_stream: sym!(acl, b"aclrtCreateStream\0"),
                synchronize_stream: sym!(acl, b"aclrtSynchronizeStream\0"),
                malloc: sym!(acl, b"aclrtMalloc\0"),
                free: sym!(acl, b"aclrtFree\0"),
                memcpy: sym!(acl, b"aclrtMemcpy\0"),
                binary_load_from_data: sym!(acl, b"aclrtBinaryLoadFromData\0"),
                binary_get_function: sym!(acl, b"aclrtBinaryGetFunction\0"),
                launch_kernel: sym!(acl, b"aclrtLaunchKernel\0"),
                rtc_create_prog: sym!(rtc, b"aclrtcCreateProg\0"),
                rtc_compile_prog: sym!(rtc, b"aclrtcCompileProg\0"),
                rtc_get_bin_data_size: sym!(rtc, b"aclrtcGetBinDataSize\0"),
                rtc_get_bin_data: sym!(rtc, b"aclrtcGetBinData\0"),
                rtc_get_compile_log_size: sym!(rtc, b"aclrtcGetCompileLogSize\0"),
                rtc_get_compile_log: sym!(rtc, b"aclrtcGetCompileLog\0"),
                rtc_destroy_prog: sym!(rtc, b"aclrtcDestroyProg\0"),
            };
            unsafe {
                // 100002 (ACL_ERROR_REPEAT_INITIALIZE) is fine: someone else initialised ACL.
                let e = (api.init)(std::ptr::null());
                if e != 0 && e != 100002 {
                    return Err(format!("aclInit failed with aclError {e}"));
                }
                check("aclrtSetDevice", (api.set_device)(device))?;
                let mut stream: Handle = std::ptr::null_mut();
                check("aclrtCreateStream", (api.create_stream)(&mut stream))?;
                Ok(Runtime { api, device, stream, _acl: acl, _rtc: rtc })
            }
        }

        /// Compiles one AscendC source with aclrtc for dav-2201 and returns the
        /// device binary. Errors carry the compile log.
        pub fn compile(&self, name: &str, src: &str) -> Result<Vec<u8>, String> {
            let c_src = CString::new(src).map_err(|e| e.to_string())?;
            let c_name = CString::new(name).map_err(|e| e.to_string())?;
            let opts = [CString::new("--npu-arch=dav-2201").unwrap(), CString::new("-O2").unwrap()];
            let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
            unsafe {
                let mut prog: Handle = std::ptr::null_mut();
                check("aclrtcCreateProg", (self.api.rtc_create_prog)(&mut prog, c_src.as_ptr(), c_name.as_ptr(), 0, std::ptr::null(), std::ptr::null()))?;
                let r = (self.api.rtc_compile_prog)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr());
                if r != 0 {
                    let mut n = 0usize;
                    let mut log = String::new();
                    if (self.api.rtc_get_compile_log_size)(prog, &mut n) == 0 && n > 0 {
                        let mut buf = vec![0u8; n];
                        if (self.api.rtc_get_compile_log)(prog, buf.as_mut_ptr() as *mut c_char) == 0 {
                            log = String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string();
                        }
                    }
                    (self.api.rtc_destroy_prog)(&mut prog);
                    return Err(format!("aclrtcCompileProg({name}) failed with aclError {r}:\n{log}"));
                }
                let mut size = 0usize;
                let r = (self.api.rtc_get_bin_data_size)(prog, &mut size);
                let mut bin = vec![0u8; size];
                let r = if r == 0 { (self.api.rtc_get_bin_data)(prog, bin.as_mut_ptr() as *mut c_char) } else { r };
                (self.api.rtc_destroy_prog)(&mut prog);
                check("aclrtcGetBinData", r)?;
                Ok(bin)
            }
        }

        /// Loads a device binary (`aclrtBinaryLoadFromData`, default options).
        pub fn load(&self, bin: &[u8]) -> Result<Binary, String> {
            let mut h: Handle = std::ptr::null_mut();
            check("aclrtBinaryLoadFromData", unsafe { (self.api.binary_load_from_data)(bin.as_ptr() as *const c_void, bin.len(), std::ptr::null(), &mut h) })?;
            Ok(Binary { handle: h })
        }

        /// An entry of a loaded binary (`aclrtBinaryGetFunction`).
        pub fn function(&self, bin: &Binary, entry: &str) -> Result<Function, String> {
            let c = CString::new(entry).map_err(|e| e.to_string())?;
            let mut f: Handle = std::ptr::null_mut();
            check("aclrtBinaryGetFunction", unsafe { (self.api.binary_get_function)(bin.handle, c.as_ptr(), &mut f) })?;
            Ok(Function { handle: f })
        }

        /// A device buffer of `bytes` bytes (`aclrtMalloc`, huge pages first).
        pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer<'_>, String> {
            let mut p: *mut c_void = std::ptr::null_mut();
            check("aclrtMalloc", unsafe { (self.api.malloc)(&mut p, bytes.max(32), ACL_MEM_MALLOC_HUGE_FIRST) })?;
            Ok(DeviceBuffer { rt: self, ptr: p, bytes: bytes.max(32) })
        }

        /// Launches `f` on `blocks` AIV blocks with the packed `args`
        /// (the kernel's parameters, then `programs`) and waits for it.
        ///
        /// # Safety
        /// `args` must match the entry's C signature and point at live buffers.
        pub unsafe fn launch(&self, f: Function, blocks: u32, args: &[KernelArg]) -> Result<(), String> {
            let packed = pack_args(args);
            unsafe {
                check("aclrtSetDevice", (self.api.set_device)(self.device))?;
                check("aclrtLaunchKernel", (self.api.launch_kernel)(f.handle, blocks, packed.as_ptr() as *const c_void, packed.len(), self.stream))?;
                check("aclrtSynchronizeStream", (self.api.synchronize_stream)(self.stream))
            }
        }
    }

    impl DeviceBuffer<'_> {
        /// The `GM_ADDR` argument of this buffer.
        pub fn arg(&self) -> KernelArg {
            KernelArg::Gm(self.ptr)
        }
        /// Host -> device copy of `data` (at most the buffer's size).
        pub fn upload(&mut self, data: &[u8]) -> Result<(), String> {
            if data.len() > self.bytes {
                return Err(format!("upload of {} bytes into a {}-byte buffer", data.len(), self.bytes));
            }
            check("aclrtMemcpy(H2D)", unsafe { (self.rt.api.memcpy)(self.ptr, self.bytes, data.as_ptr() as *const c_void, data.len(), ACL_MEMCPY_HOST_TO_DEVICE) })
        }
        /// Device -> host copy of the first `out.len()` bytes.
        pub fn download(&self, out: &mut [u8]) -> Result<(), String> {
            if out.len() > self.bytes {
                return Err(format!("download of {} bytes from a {}-byte buffer", out.len(), self.bytes));
            }
            check("aclrtMemcpy(D2H)", unsafe { (self.rt.api.memcpy)(out.as_mut_ptr() as *mut c_void, out.len(), self.ptr, out.len(), ACL_MEMCPY_DEVICE_TO_HOST) })
        }
    }

    impl Drop for DeviceBuffer<'_> {
        fn drop(&mut self) {
            unsafe {
                (self.rt.api.free)(self.ptr);
            }
        }
    }
}

/// The Ascend backend. Construction fails with
/// [`ConfigError::BackendUnavailable`] when CANN (libascendcl, aclrtc) is
/// absent or its entry points do not resolve, and, where CANN loads and
/// every kernel source compiles, still fails: the step pipeline (the launch
/// order of `backend::cuda`, on [`acl::Runtime`]) is not wired yet, as the
/// glue could not be run on hardware. [`acl::Runtime`] is usable directly
/// for bring-up (see the ignored test `hardware_compiles_and_launches`).
#[derive(Debug)]
pub struct AscendBackend {
    _rt: acl::Runtime,
}

impl AscendBackend {
    /// Probes for CANN. Errors: [`ConfigError::BackendUnavailable`] with the reason.
    pub fn new() -> Result<AscendBackend, ConfigError> {
        let unavailable = |m: String| ConfigError::BackendUnavailable("ascend", m);
        let Some(home) = cann_home() else {
            return Err(unavailable(
                "no CANN toolkit found (set ASCEND_HOME_PATH or ASCEND_TOOLKIT_HOME to a toolkit holding lib64/libascendcl.so)".into(),
            ));
        };
        if aclrtc_library(&home).is_none() {
            return Err(unavailable(format!("{}: no aclrtc library (CANN >= 8.5 needed)", home.display())));
        }
        let device = std::env::var("ASCEND_DEVICE_ID").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        // SAFETY: loads the CANN libraries found above.
        let rt = unsafe { acl::Runtime::open(&home, device) }.map_err(unavailable)?;
        for (name, src) in sources() {
            let bin = rt.compile(name, src).map_err(unavailable)?;
            rt.load(&bin).map_err(unavailable)?;
        }
        let _ = AscendBackend { _rt: rt };
        Err(unavailable("CANN loaded and every AscendC source compiled, but the step pipeline is not wired to acl::Runtime yet: see docs/ASCEND.md".into()))
    }
}

impl Backend for AscendBackend {
    fn name(&self) -> &'static str {
        "ascend"
    }

    fn run(&mut self, _plan: &StepPlan) -> Result<StepResult, BackendError> {
        Err(BackendError::Device { backend: "ascend", msg: "the step pipeline is not wired for Ascend yet".into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_has_a_source() {
        for k in sampler_kernels::registry::all() {
            assert!(
                k.ascendc.is_some() || k.ascend_opt_out,
                "kernel `{}` has no AscendC source and does not opt out with `#[kernel(ascend = false)]`: {}",
                k.name,
                k.ascendc_skipped.unwrap_or("?")
            );
        }
    }

    #[test]
    fn without_cann_the_backend_is_a_typed_error() {
        if cann_home().is_none() {
            assert!(matches!(AscendBackend::new(), Err(ConfigError::BackendUnavailable("ascend", _))));
        }
    }

    #[test]
    fn sampler_with_backend_ascend_checks_n_then_probes() {
        use crate::sampler::{BackendKind, Sampler, SamplerConfig};
        assert_eq!("ascend".parse::<BackendKind>().unwrap(), BackendKind::Ascend);
        let cfg = |n| SamplerConfig { force_topk: n, backend: BackendKind::Ascend, ..SamplerConfig::new(152064) };
        assert!(matches!(Sampler::new(cfg(8192)), Err(ConfigError::ForceTopkTooLarge { n: 8192, platform: "ascend", limit: 4096 })));
        if cann_home().is_none() {
            assert!(matches!(Sampler::new(cfg(4096)), Err(ConfigError::BackendUnavailable("ascend", _))));
        }
    }

    #[test]
    fn kernel_arguments_pack_at_natural_alignment() {
        use acl::KernelArg::*;
        let p = acl::pack_args(&[Gm(8usize as *mut _), U32(7), U64(9), F32(1.0), U32(3)]);
        assert_eq!(p.len(), 32);
        assert_eq!(&p[0..8], &8u64.to_le_bytes());
        assert_eq!(&p[8..12], &7u32.to_le_bytes());
        assert_eq!(&p[16..24], &9u64.to_le_bytes());
        assert_eq!(&p[24..28], &1.0f32.to_le_bytes());
        assert_eq!(&p[28..32], &3u32.to_le_bytes());
    }

    /// On a machine with CANN and a 910B: compiles `draw`, launches
    /// `draw_t64` on one row and checks the drawn token against the CPU.
    /// `cargo test -p sampler-host hardware_compiles_and_launches -- --ignored`.
    #[test]
    #[ignore = "needs CANN >= 8.5 and an Ascend 910B/910C"]
    fn hardware_compiles_and_launches() {
        let home = cann_home().expect("CANN toolkit");
        let rt = unsafe { acl::Runtime::open(&home, 0) }.unwrap();
        let (_, src) = sources().into_iter().find(|(n, _)| *n == "draw").unwrap();
        let bin = rt.load(&rt.compile("draw", src).unwrap()).unwrap();
        let f = rt.function(&bin, "draw_t64").unwrap();
        let n = 8u32;
        let lp: Vec<f32> = (0..n).map(|i| if i == 5 { 0.0 } else { -80.0 }).collect();
        let ids: Vec<i32> = (0..n as i32).map(|i| 100 + i).collect();
        let mut b_lp = rt.alloc(32).unwrap();
        b_lp.upload(&lp.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>()).unwrap();
        let mut b_ids = rt.alloc(32).unwrap();
        b_ids.upload(&ids.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>()).unwrap();
        let mut b_seed = rt.alloc(8).unwrap();
        b_seed.upload(&1u64.to_le_bytes()).unwrap();
        let mut b_seq = rt.alloc(8).unwrap();
        b_seq.upload(&0u64.to_le_bytes()).unwrap();
        let b_tok = rt.alloc(4).unwrap();
        use acl::KernelArg::*;
        unsafe { rt.launch(f, 1, &[b_lp.arg(), b_ids.arg(), U32(n), b_seed.arg(), b_seq.arg(), b_tok.arg(), U32(1)]) }.unwrap();
        let mut out = [0u8; 4];
        b_tok.download(&mut out).unwrap();
        assert_eq!(i32::from_le_bytes(out), 105);
    }
}
