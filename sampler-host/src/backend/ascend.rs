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

use sampler_kernels::spec::LaunchArg;

use crate::error::{BackendError, ConfigError};
use crate::pipeline::{Buf, Caps, Device, HostSlice, HostSliceMut, Launch};
use crate::plan::{Backend, StepPlan, StepResult};

pub use sampler_kernels::codes::MAX_N_ASCEND;

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
        /// A device buffer address.
        Gm(*mut c_void),
        /// A `uint32_t`.
        U32(u32),
        /// An `int32_t`.
        I32(i32),
        /// A `uint64_t`.
        U64(u64),
        /// A `float`.
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

        /// `aclrtMalloc` of `bytes` bytes (at least 32), owned by the caller
        /// ([`Runtime::free_raw`]).
        pub fn alloc_raw(&self, bytes: usize) -> Result<*mut c_void, String> {
            let mut p: *mut c_void = std::ptr::null_mut();
            check("aclrtMalloc", unsafe { (self.api.malloc)(&mut p, bytes.max(32), ACL_MEM_MALLOC_HUGE_FIRST) })?;
            Ok(p)
        }

        /// Frees a buffer of [`Runtime::alloc_raw`].
        ///
        /// # Safety
        /// `p` came from `alloc_raw` of this runtime and is not used after.
        pub unsafe fn free_raw(&self, p: *mut c_void) {
            unsafe { (self.api.free)(p) };
        }

        /// Host -> device copy into `dst` (a buffer of `dst_bytes` bytes).
        ///
        /// # Safety
        /// `dst` is a live device buffer of at least `dst_bytes` bytes.
        pub unsafe fn copy_h2d(&self, dst: *mut c_void, dst_bytes: usize, src: &[u8]) -> Result<(), String> {
            check("aclrtMemcpy(H2D)", unsafe { (self.api.memcpy)(dst, dst_bytes, src.as_ptr() as *const c_void, src.len(), ACL_MEMCPY_HOST_TO_DEVICE) })
        }

        /// Device -> host copy of `out.len()` bytes from `src`.
        ///
        /// # Safety
        /// `src` is a live device buffer holding at least `out.len()` bytes.
        pub unsafe fn copy_d2h(&self, out: &mut [u8], src: *const c_void) -> Result<(), String> {
            check("aclrtMemcpy(D2H)", unsafe { (self.api.memcpy)(out.as_mut_ptr() as *mut c_void, out.len(), src, out.len(), ACL_MEMCPY_DEVICE_TO_HOST) })
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

/// AIV cores a launch spreads its programs over when `ASCEND_AIV_CORES` is
/// unset (910B4; other parts have up to 48: set the variable).
pub const DEFAULT_AIV_CORES: u32 = 40;

/// The arguments of `l` as its AscendC entry takes them: the kernel's
/// parameters in signature order (buffers as `GM_ADDR` from `addr`), then
/// `uint32_t programs` (the launch's grid). Errors: a scalar type the
/// AscendC entries do not take.
pub fn launch_args(l: &Launch, addr: &dyn Fn(Buf) -> *mut std::ffi::c_void) -> Result<Vec<acl::KernelArg>, BackendError> {
    use acl::KernelArg as K;
    let mut out = Vec::with_capacity(l.args.len() + 1);
    for a in &l.args {
        out.push(match *a {
            LaunchArg::Buf(b) => K::Gm(addr(b)),
            LaunchArg::U32(x) => K::U32(x),
            LaunchArg::I32(x) => K::I32(x),
            LaunchArg::U64(x) => K::U64(x),
            LaunchArg::F32(x) => K::F32(x),
            other => return Err(BackendError::Device { backend: "ascend", msg: format!("kernel `{}`: argument {other:?} has no AscendC form", l.spec.name) }),
        });
    }
    out.push(K::U32(l.grid));
    Ok(out)
}

/// The launch list's capabilities on Ascend: one program per row for the
/// mask check and the top-N (`Sort32` + `MrgSort` over N <= 4096), fused
/// kernels up to [`MAX_N_ASCEND`].
pub fn ascend_caps() -> Caps {
    Caps { mask_chunk: None, topn_chunks: 1, fused_max: MAX_N_ASCEND }
}

/// Ascend through CANN as a pipeline [`Device`]: every kernel source
/// compiled by aclrtc at start, one device buffer per [`Buf`] (grown, never
/// shrunk), synchronous copies and launches. Written from the public ACL
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
        let cores = std::env::var("ASCEND_AIV_CORES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_AIV_CORES);
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
    fn caps(&self, _v: u32, _n: u32) -> Caps {
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
        let f = *self.funcs.get(l.variant.entry).ok_or_else(|| ae(format!("no AscendC entry `{}`", l.variant.entry)))?;
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
        unsafe { self.rt.copy_d2h(&mut bytes, (p as *const u8).add(offset * w) as *const std::ffi::c_void) }.map_err(ae)?;
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

/// The Ascend backend: the shared launch list ([`crate::pipeline`]) on an
/// [`AscendDevice`]. Construction fails with [`ConfigError::BackendUnavailable`]
/// when CANN (libascendcl, aclrtc) is absent, its entry points do not
/// resolve, or a kernel source does not compile. Untested on hardware.
#[derive(Debug)]
pub struct AscendBackend {
    dev: AscendDevice,
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
        Ok(AscendBackend { dev: AscendDevice::new(rt).map_err(unavailable)? })
    }
}

impl Backend for AscendBackend {
    fn name(&self) -> &'static str {
        "ascend"
    }

    fn run(&mut self, plan: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        crate::pipeline::run_step(&mut self.dev, plan, false)
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

    /// Every launch of the shared list maps to its AscendC entry's C
    /// arguments: one per parameter (buffers as `GM_ADDR`), then `programs`,
    /// and every entry it names exists in the kernel's AscendC variants.
    #[test]
    fn pipeline_launches_map_to_ascendc_entries() {
        use crate::plan::build_plan;
        use crate::request::Request;
        use crate::params::SamplingParams;
        let v = 3000u32;
        let p = SamplingParams { top_k: 50, top_p: 0.9, top_logprobs: 3, seq_seed: Some(1), ..Default::default() };
        let logits = vec![0.1f32; 3 * v as usize];
        let reqs = [Request::prefill(p.clone(), 5), Request::decode(p, 10, 2, vec![7], vec![Default::default()])];
        for n in [1024, v] {
            let (plan, _) = build_plan(v, n, 5, &logits, &reqs).unwrap();
            for prefix in [None, plan.prefix_width()] {
                let prog = crate::pipeline::build(&plan, prefix, &ascend_caps()).unwrap();
                for l in &prog.launches {
                    let args = launch_args(l, &|b| (b as usize * 16 + 16) as *mut std::ffi::c_void).unwrap();
                    assert_eq!(args.len(), l.spec.params.len() + 1, "{}", l.spec.name);
                    assert!(matches!(args.last(), Some(acl::KernelArg::U32(g)) if *g == l.grid));
                    for (a, p) in args.iter().zip(l.spec.params) {
                        let gm = matches!(p.kind, sampler_kernels::spec::ParamKind::Gm(_) | sampler_kernels::spec::ParamKind::GmMut(_));
                        assert_eq!(matches!(a, acl::KernelArg::Gm(_)), gm, "{}.{}", l.spec.name, p.name);
                    }
                    assert!(l.variant.tile <= MAX_N_ASCEND, "{} tile {}", l.spec.name, l.variant.tile);
                    assert!(l.spec.ascendc.is_some_and(|s| s.contains(l.variant.entry)), "{} has no AscendC entry {}", l.spec.name, l.variant.entry);
                }
            }
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
