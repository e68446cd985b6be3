//! Run-time glue over CANN's C API, loaded with `libloading` (no link-time
//! dependency on CANN). Written from the public ACL / aclrtc documentation
//! and **untested here** (no Ascend device in CI): the call sequence is
//! `aclInit` -> `aclrtSetDevice` -> `aclrtCreateStream`, per source
//! `aclrtcCreateProg` -> `aclrtcCompileProg(--npu-arch=dav-2201)` ->
//! `aclrtcGetBinDataSize` / `aclrtcGetBinData` -> `aclrtBinaryLoadFromData`
//! -> `aclrtBinaryGetFunction("{kernel}_t{tile}")`, then per launch
//! `aclrtLaunchKernelWithHostArgs(func, blocks, stream, NULL, packed args,
//! size, NULL, 0)` and `aclrtSynchronizeStream`.
//!
//! The launch takes the argument block from host memory
//! (`aclrtLaunchKernelWithHostArgs`): `aclrtLaunchKernel` expects it in
//! device memory (hicann/runtime `docs/api_docs/aclrtLaunchKernel.md`).

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
    /// `aclrtLaunchKernelWithHostArgs(funcHandle, numBlocks, stream, cfg,
    /// hostArgs, argsSize, placeHolderArray, placeHolderNum)`.
    launch_kernel:
        unsafe extern "C" fn(Handle, u32, Handle, *mut c_void, *mut c_void, usize, *mut c_void, usize) -> AclError,
    rtc_create_prog: unsafe extern "C" fn(
        *mut Handle,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> AclError,
    rtc_compile_prog: unsafe extern "C" fn(Handle, c_int, *const *const c_char) -> AclError,
    rtc_get_bin_data_size: unsafe extern "C" fn(Handle, *mut usize) -> AclError,
    rtc_get_bin_data: unsafe extern "C" fn(Handle, *mut c_char) -> AclError,
    rtc_get_compile_log_size: unsafe extern "C" fn(Handle, *mut usize) -> AclError,
    rtc_get_compile_log: unsafe extern "C" fn(Handle, *mut c_char) -> AclError,
    rtc_destroy_prog: unsafe extern "C" fn(*mut Handle) -> AclError,
    /// `aclrtFunctionGetParamCount(func, &count)` and
    /// `aclrtFunctionGetParamInfo(func, index, &offset, &size)` (hicann/runtime
    /// `acl_rt.h`); absent from older CANN, so optional.
    param_count: Option<unsafe extern "C" fn(*const c_void, *mut usize) -> AclError>,
    param_info: Option<unsafe extern "C" fn(*const c_void, usize, *mut usize, *mut usize) -> AclError>,
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
        while !out.len().is_multiple_of(a) {
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
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
    out
}

/// The aclrtc options: dav-2201 (910B/910C AI vector cores), `-O2`,
/// `--cce-auto-sync=on|off` stated explicitly (its default is documented
/// only for `<<<>>>` builds; the generated code emits its own barriers, so
/// both must work: a hardware check), and `-ffp-contract=off` (the scalar
/// `sk::exp`, `ln_fixed` and IEEE divisions must not be fused into FMAs,
/// or they stop matching the CPU bit for bit). aclrtc adds the AscendC
/// language switch (`-xasc`) itself.
pub fn compile_options(auto_sync: bool) -> [&'static str; 4] {
    [
        "--npu-arch=dav-2201",
        "-O2",
        if auto_sync { "--cce-auto-sync=on" } else { "--cce-auto-sync=off" },
        "-ffp-contract=off",
    ]
}

/// `SAMPLER_ASCEND_AUTO_SYNC=off` compiles without the compiler's auto-sync
/// (the hardware check that the emitted barriers suffice); default on.
pub fn auto_sync_from_env() -> bool {
    std::env::var("SAMPLER_ASCEND_AUTO_SYNC").map_or(true, |v| v != "off")
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
        let rtc_path = super::aclrtc_library(home)
            .ok_or_else(|| format!("{}: no aclrtc library (CANN >= 8.5 needed)", home.display()))?;
        let acl =
            unsafe { Library::new(home.join("lib64/libascendcl.so")) }.map_err(|e| format!("libascendcl: {e}"))?;
        let rtc = unsafe { Library::new(&rtc_path) }.map_err(|e| format!("{}: {e}", rtc_path.display()))?;
        macro_rules! sym {
            ($lib:expr, $name:literal) => {
                *unsafe { $lib.get($name) }
                    .map_err(|e| format!("{}: {e}", String::from_utf8_lossy(&$name[..$name.len() - 1])))?
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
            launch_kernel: sym!(acl, b"aclrtLaunchKernelWithHostArgs\0"),
            rtc_create_prog: sym!(rtc, b"aclrtcCreateProg\0"),
            rtc_compile_prog: sym!(rtc, b"aclrtcCompileProg\0"),
            rtc_get_bin_data_size: sym!(rtc, b"aclrtcGetBinDataSize\0"),
            rtc_get_bin_data: sym!(rtc, b"aclrtcGetBinData\0"),
            rtc_get_compile_log_size: sym!(rtc, b"aclrtcGetCompileLogSize\0"),
            rtc_get_compile_log: sym!(rtc, b"aclrtcGetCompileLog\0"),
            rtc_destroy_prog: sym!(rtc, b"aclrtcDestroyProg\0"),
            param_count: unsafe { acl.get(b"aclrtFunctionGetParamCount\0") }.ok().map(|f| *f),
            param_info: unsafe { acl.get(b"aclrtFunctionGetParamInfo\0") }.ok().map(|f| *f),
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
    /// device binary, with [`compile_options`] and the headers of
    /// [`super::HEADERS`] passed in memory. Errors carry the compile log.
    pub fn compile(&self, name: &str, src: &str) -> Result<Vec<u8>, String> {
        let c_src = CString::new(src).map_err(|e| e.to_string())?;
        let c_name = CString::new(name).map_err(|e| e.to_string())?;
        let opts: Vec<CString> =
            compile_options(auto_sync_from_env()).iter().map(|o| CString::new(*o).unwrap()).collect();
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let hdr_src: Vec<CString> = super::HEADERS.iter().map(|(_, s)| CString::new(*s).unwrap()).collect();
        let hdr_name: Vec<CString> = super::HEADERS.iter().map(|(n, _)| CString::new(*n).unwrap()).collect();
        let hs: Vec<*const c_char> = hdr_src.iter().map(|h| h.as_ptr()).collect();
        let hn: Vec<*const c_char> = hdr_name.iter().map(|h| h.as_ptr()).collect();
        unsafe {
            let mut prog: Handle = std::ptr::null_mut();
            check(
                "aclrtcCreateProg",
                (self.api.rtc_create_prog)(
                    &mut prog,
                    c_src.as_ptr(),
                    c_name.as_ptr(),
                    hs.len() as c_int,
                    hs.as_ptr(),
                    hn.as_ptr(),
                ),
            )?;
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
        check("aclrtBinaryLoadFromData", unsafe {
            (self.api.binary_load_from_data)(bin.as_ptr() as *const c_void, bin.len(), std::ptr::null(), &mut h)
        })?;
        Ok(Binary { handle: h })
    }

    /// An entry of a loaded binary (`aclrtBinaryGetFunction`).
    pub fn function(&self, bin: &Binary, entry: &str) -> Result<Function, String> {
        let c = CString::new(entry).map_err(|e| e.to_string())?;
        let mut f: Handle = std::ptr::null_mut();
        check("aclrtBinaryGetFunction", unsafe { (self.api.binary_get_function)(bin.handle, c.as_ptr(), &mut f) })?;
        Ok(Function { handle: f })
    }

    /// The runtime's view of an entry's parameters: `(offset, size)` in
    /// bytes per parameter (`aclrtFunctionGetParamCount/GetParamInfo`), to
    /// compare with [`pack_args`]. Errors: the entry points are absent (older
    /// CANN) or fail.
    pub fn param_layout(&self, f: Function) -> Result<Vec<(usize, usize)>, String> {
        let (Some(count), Some(info)) = (self.api.param_count, self.api.param_info) else {
            return Err("aclrtFunctionGetParamCount/GetParamInfo not in this CANN".into());
        };
        let mut n = 0usize;
        check("aclrtFunctionGetParamCount", unsafe { count(f.handle, &mut n) })?;
        (0..n)
            .map(|i| {
                let (mut off, mut size) = (0usize, 0usize);
                check("aclrtFunctionGetParamInfo", unsafe { info(f.handle, i, &mut off, &mut size) })
                    .map(|_| (off, size))
            })
            .collect()
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
        check("aclrtMemcpy(H2D)", unsafe {
            (self.api.memcpy)(dst, dst_bytes, src.as_ptr() as *const c_void, src.len(), ACL_MEMCPY_HOST_TO_DEVICE)
        })
    }

    /// Device -> host copy of `out.len()` bytes from `src`.
    ///
    /// # Safety
    /// `src` is a live device buffer holding at least `out.len()` bytes.
    pub unsafe fn copy_d2h(&self, out: &mut [u8], src: *const c_void) -> Result<(), String> {
        check("aclrtMemcpy(D2H)", unsafe {
            (self.api.memcpy)(out.as_mut_ptr() as *mut c_void, out.len(), src, out.len(), ACL_MEMCPY_DEVICE_TO_HOST)
        })
    }

    /// A device buffer of `bytes` bytes (`aclrtMalloc`, huge pages first).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer<'_>, String> {
        let mut p: *mut c_void = std::ptr::null_mut();
        check("aclrtMalloc", unsafe { (self.api.malloc)(&mut p, bytes.max(32), ACL_MEM_MALLOC_HUGE_FIRST) })?;
        Ok(DeviceBuffer { rt: self, ptr: p, bytes: bytes.max(32) })
    }

    /// Launches `f` on `blocks` AIV blocks with the packed `args`
    /// (the kernel's parameters, then `programs`) and waits for it. The
    /// argument block stays in host memory (`aclrtLaunchKernelWithHostArgs`
    /// copies it).
    ///
    /// # Safety
    /// `args` must match the entry's C signature and point at live buffers.
    pub unsafe fn launch(&self, f: Function, blocks: u32, args: &[KernelArg]) -> Result<(), String> {
        let mut packed = pack_args(args);
        unsafe {
            check("aclrtSetDevice", (self.api.set_device)(self.device))?;
            let e = (self.api.launch_kernel)(
                f.handle,
                blocks,
                self.stream,
                std::ptr::null_mut(),
                packed.as_mut_ptr() as *mut c_void,
                packed.len(),
                std::ptr::null_mut(),
                0,
            );
            check("aclrtLaunchKernelWithHostArgs", e)?;
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
        check("aclrtMemcpy(H2D)", unsafe {
            (self.rt.api.memcpy)(
                self.ptr,
                self.bytes,
                data.as_ptr() as *const c_void,
                data.len(),
                ACL_MEMCPY_HOST_TO_DEVICE,
            )
        })
    }
    /// Device -> host copy of the first `out.len()` bytes.
    pub fn download(&self, out: &mut [u8]) -> Result<(), String> {
        if out.len() > self.bytes {
            return Err(format!("download of {} bytes from a {}-byte buffer", out.len(), self.bytes));
        }
        check("aclrtMemcpy(D2H)", unsafe {
            (self.rt.api.memcpy)(
                out.as_mut_ptr() as *mut c_void,
                out.len(),
                self.ptr,
                out.len(),
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        })
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        unsafe {
            (self.rt.api.free)(self.ptr);
        }
    }
}
