//! The AscendC emulation harness, for any kernel's test: the generated
//! AscendC of every registered kernel, compiled with g++ against our x86
//! emulation of the AscendC subset (sampler-host/ascendc/emu), and run
//! beside the CPU program on the same buffers.
//!
//! ```ignore
//! mod common;
//! use common::ascendc_emu::{gxx, run_both, Val};
//! // my_filter(x: Gm<f32>, n: u32, y: GmMut<f32>), 2 rows of 64:
//! let args = [Val::F32(x), Val::SU32(64), Val::F32(vec![0.0; 128])];
//! let (cpu, emu) = run_both("my_filter", 64, 2, &args)?; // (tile, programs)
//! assert_eq!(cpu[2].f32s(), emu[2].f32s());
//! ```
//!
//! [`run_both`] fails with a message naming the kernel; callers skip
//! (passing) when [`gxx`] is `None` (no g++).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sampler_kernels::registry;
use sampler_kernels::rt::cpu::{Arg, Gm};
use sampler_kernels::spec::{KernelSpec, ParamKind, Prim, Variant};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

pub fn gxx() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    Command::new(&cxx).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| cxx)
}

/// This process's build directory for the emulation drivers, under the
/// target's scratch folder (not /tmp, where every run used to leave ~10 MB):
/// `ascendc-emu-<pid>`, with the folders of finished processes removed.
pub fn work_dir() -> PathBuf {
    scratch_dir("ascendc-emu")
}

/// `<CARGO_TARGET_TMPDIR>/<stem>-<pid>`, created; folders `<stem>-<pid>` of
/// processes no longer running are removed first.
pub fn scratch_dir(stem: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if let Ok(entries) = std::fs::read_dir(&root) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix(stem).and_then(|r| r.strip_prefix('-')).and_then(|p| p.parse::<u32>().ok());
            let gone = |p: u32| Path::new("/proc/self").exists() && !Path::new(&format!("/proc/{p}")).exists();
            if pid.is_some_and(|p| p != std::process::id() && gone(p)) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let d = root.join(format!("{stem}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn specs() -> Vec<&'static KernelSpec> {
    let mut v: Vec<_> = registry::all().filter(|k| k.ascendc.is_some()).collect();
    v.sort_by_key(|k| k.name);
    v
}

pub fn emu_variants(k: &KernelSpec) -> Vec<&'static Variant> {
    k.variants.iter().filter(|v| v.tile <= 4096).collect()
}

pub fn cxx_scalar(p: Prim) -> &'static str {
    match p {
        Prim::Bool => "bool",
        Prim::I32 => "int32_t",
        Prim::U32 => "uint32_t",
        Prim::I64 => "int64_t",
        Prim::U64 => "uint64_t",
        Prim::F32 => "float",
        Prim::F64 => "double",
    }
}

/// The emulation driver: every kernel source, and a `main` that loads the
/// arguments from a file, runs `blocks` cores in turn and writes the GM buffers back.
pub fn driver_source(dir: &Path, kernels: &[&KernelSpec]) -> String {
    let mut s = String::from(
        "#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <vector>\n#include <string>\n",
    );
    for k in kernels {
        let f = dir.join(format!("{}.cpp", k.name));
        std::fs::write(&f, k.ascendc.unwrap()).unwrap();
        s += &format!("#include \"{}\"\n", f.display());
    }
    s += r#"
// GM buffers 512-byte aligned with exact lengths (ASan still sees overruns),
// as aclrtMalloc's: two buffers never share a 64-byte DataCache line.
static std::vector<uint8_t *> B;
static std::vector<uint64_t> L;
static std::vector<uint64_t> S;
static GM_ADDR gm(size_t i) { return L[i] == 0 ? nullptr : B[i]; }
template <typename T> static T sc(size_t i) { T v; uint64_t b = S[i]; std::memcpy(&v, &b, sizeof(T)); return v; }
int main(int argc, char **argv) {
  if (argc != 6) { std::fprintf(stderr, "usage: driver KERNEL TILE BLOCKS IN OUT\n"); return 2; }
  std::string name = argv[1];
  unsigned tile = (unsigned)std::atoi(argv[2]);
  int blocks = std::atoi(argv[3]);
  FILE *f = std::fopen(argv[4], "rb");
  if (!f) return 2;
  uint32_t nargs = 0;
  if (std::fread(&nargs, 4, 1, f) != 1) return 2;
  B.assign(nargs, nullptr); L.assign(nargs, 0); S.resize(nargs);
  for (uint32_t i = 0; i < nargs; ++i) {
    uint8_t kind; uint64_t len;
    if (std::fread(&kind, 1, 1, f) != 1 || std::fread(&len, 8, 1, f) != 1) return 2;
    if (kind == 0) {
      L[i] = len;
      if (len) { void *p = nullptr; if (posix_memalign(&p, 512, len) != 0) return 2; B[i] = (uint8_t *)p; }
      if (len && std::fread(B[i], 1, len, f) != len) return 2;
    }
    else { if (std::fread(&S[i], 8, 1, f) != 1) return 2; }
  }
  std::fclose(f);
  bool found = false;
  for (int b = 0; b < blocks; ++b) {
    AscendC::emu::begin_block(b, blocks);
"#;
    for k in kernels {
        for v in emu_variants(k) {
            let args: Vec<String> = k
                .params
                .iter()
                .enumerate()
                .map(|(i, p)| match p.kind {
                    // A `Logits` parameter is an f32 `GM_ADDR` in AscendC.
                    ParamKind::Gm(_) | ParamKind::GmMut(_) | ParamKind::Logits => format!("gm({i})"),
                    ParamKind::Scalar(pr) => format!("sc<{}>({i})", cxx_scalar(pr)),
                })
                .chain(std::iter::once(format!("sc<uint32_t>({})", k.params.len())))
                .collect();
            s += &format!(
                "    if (name == \"{}\" && tile == {}) {{ found = true; {}({}); }}\n",
                k.name,
                v.tile,
                v.entry,
                args.join(", ")
            );
        }
    }
    s += r#"    AscendC::emu::end_block();
    if (!found) { std::fprintf(stderr, "no entry %s tile %u\n", name.c_str(), tile); return 2; }
  }
  f = std::fopen(argv[5], "wb");
  if (!f) return 2;
  for (uint32_t i = 0; i < nargs; ++i) { uint64_t len = L[i]; std::fwrite(&len, 8, 1, f); if (len) std::fwrite(B[i], 1, len, f); std::free(B[i]); }
  std::fclose(f);
  return 0;
}
"#;
    s
}

pub fn compile(cxx: &str, src: &Path, out: &Path, sanitize: bool) -> Result<(), String> {
    let emu = Path::new(ROOT).join("sampler-host/ascendc/emu");
    let mut c = Command::new(cxx);
    c.args(["-std=c++17", "-g", "-ffp-contract=off", "-Wall", "-Wno-unused-variable", "-Wno-unused-but-set-variable"]);
    if sanitize {
        c.args(["-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]);
    } else {
        c.arg("-O0");
    }
    let include = Path::new(ROOT).join("sampler-host/ascendc/include");
    c.arg("-I").arg(&emu).arg("-I").arg(&include).arg("-o").arg(out).arg(src);
    let o = c.output().map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).chars().take(6000).collect());
    }
    Ok(())
}

/// The sanitized emulation binary of every kernel (built once per test run).
pub fn driver() -> Option<&'static PathBuf> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        let cxx = gxx()?;
        let dir = work_dir();
        let src = dir.join("driver.cpp");
        std::fs::write(&src, driver_source(&dir, &specs())).unwrap();
        let bin = dir.join("driver");
        if let Err(e) = compile(&cxx, &src, &bin, true) {
            panic!("g++ failed on the generated AscendC sources:\n{e}");
        }
        Some(bin)
    })
    .as_ref()
}

// ---------------- buffers shared by both sides ----------------

#[derive(Clone, Debug)]
pub enum Val {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    SU32(u32),
    SI32(i32),
    SF32(f32),
}

pub fn as_bytes<T: Copy>(v: &[T]) -> Vec<u8> {
    // SAFETY: plain-old-data element types, read as bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)).to_vec() }
}

pub fn from_bytes<T: Copy + Default>(b: &[u8]) -> Vec<T> {
    let n = b.len() / std::mem::size_of::<T>();
    let mut v = vec![T::default(); n];
    // SAFETY: the destination holds exactly n elements of plain-old-data.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr() as *mut u8, n * std::mem::size_of::<T>()) };
    v
}

impl Val {
    pub fn arg(&mut self, write: bool) -> Arg {
        match self {
            Val::F32(v) => Arg::GmF32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Val::I32(v) => Arg::GmI32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Val::U32(v) => Arg::GmU32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Val::U64(v) => Arg::GmU64(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Val::SU32(x) => Arg::U32(*x),
            Val::SI32(x) => Arg::I32(*x),
            Val::SF32(x) => Arg::F32(*x),
        }
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (kind, bytes) = match self {
            Val::F32(v) => (0u8, as_bytes(v)),
            Val::I32(v) => (0, as_bytes(v)),
            Val::U32(v) => (0, as_bytes(v)),
            Val::U64(v) => (0, as_bytes(v)),
            Val::SU32(x) => (1, (*x as u64).to_le_bytes().to_vec()),
            Val::SI32(x) => (1, (*x as u32 as u64).to_le_bytes().to_vec()),
            Val::SF32(x) => (1, (x.to_bits() as u64).to_le_bytes().to_vec()),
        };
        out.push(kind);
        if kind == 0 {
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(&bytes);
        } else {
            out.extend_from_slice(&8u64.to_le_bytes());
            out.extend_from_slice(&bytes);
        }
    }
    pub fn decode(&mut self, b: &[u8]) {
        match self {
            Val::F32(v) => *v = from_bytes(b),
            Val::I32(v) => *v = from_bytes(b),
            Val::U32(v) => *v = from_bytes(b),
            Val::U64(v) => *v = from_bytes(b),
            _ => {}
        }
    }
    pub fn f32s(&self) -> &[f32] {
        match self {
            Val::F32(v) => v,
            _ => panic!("not f32"),
        }
    }
    pub fn i32s(&self) -> &[i32] {
        match self {
            Val::I32(v) => v,
            _ => panic!("not i32"),
        }
    }
    pub fn u32s(&self) -> &[u32] {
        match self {
            Val::U32(v) => v,
            _ => panic!("not u32"),
        }
    }
    pub fn u64s(&self) -> &[u64] {
        match self {
            Val::U64(v) => v,
            _ => panic!("not u64"),
        }
    }
}

/// The emulator's numerics mode (`ASCENDC_EMU_NUMERICS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Numerics {
    /// IEEE results (libm `expf`, exact division).
    Exact,
    /// Vector Exp/Div off by up to 2 ulp, subnormals flushed: ids and
    /// statuses must still equal the CPU's.
    Perturb,
}

impl Numerics {
    pub fn env(self) -> &'static str {
        match self {
            Numerics::Exact => "exact",
            Numerics::Perturb => "perturb",
        }
    }
}

/// `a` as the CPU takes it for a parameter of kind `kind`: f32 buffers for
/// a `Logits` parameter as f32 logits (the AscendC kernels read f32 logits).
pub fn logits_arg(kind: ParamKind, a: Arg) -> Arg {
    match (kind, a) {
        (ParamKind::Logits, Arg::GmF32(g)) => Arg::Logits(g.into()),
        (_, a) => a,
    }
}

/// Runs kernel `name` on the CPU (program by program) and under emulation
/// (exact numerics), each on its own copy of `args`; returns (cpu,
/// emulated) buffers after.
pub fn run_both(name: &str, tile: u32, programs: u32, args: &[Val]) -> Result<(Vec<Val>, Vec<Val>), String> {
    run_both_in(Numerics::Exact, name, tile, programs, args)
}

/// [`run_both`] in the given numerics mode, on `min(programs, 3)` emulated cores.
pub fn run_both_in(
    numerics: Numerics,
    name: &str,
    tile: u32,
    programs: u32,
    args: &[Val],
) -> Result<(Vec<Val>, Vec<Val>), String> {
    let spec = registry::find(name).ok_or("unknown kernel")?;
    let mut cpu = args.to_vec();
    let dyn_args: Vec<Arg> = cpu
        .iter_mut()
        .zip(spec.params)
        .map(|(v, p)| logits_arg(p.kind, v.arg(matches!(p.kind, ParamKind::GmMut(_)))))
        .collect();
    for prog in 0..programs {
        // SAFETY: the buffers are sized for the kernel's shapes; one program at a time.
        unsafe { (spec.cpu)(prog, &dyn_args).map_err(|e| e.to_string())? };
    }
    let bin = driver().ok_or("no g++")?;
    let dir = work_dir();
    let tag =
        format!("{name}-{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    let (fin, fout) = (dir.join(format!("{tag}.in")), dir.join(format!("{tag}.out")));
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&(args.len() as u32 + 1).to_le_bytes());
    for a in args {
        a.encode(&mut bytes);
    }
    Val::SU32(programs).encode(&mut bytes);
    std::fs::write(&fin, bytes).unwrap();
    let blocks = programs.clamp(1, 3);
    let o = Command::new(bin)
        .arg(name)
        .arg(tile.to_string())
        .arg(blocks.to_string())
        .arg(&fin)
        .arg(&fout)
        .env("ASCENDC_EMU_NUMERICS", numerics.env())
        .output()
        .map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!(
            "emulated {name} (tile {tile}) failed: {}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let out = std::fs::read(&fout).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&fin);
    let _ = std::fs::remove_file(&fout);
    let mut emu = args.to_vec();
    let mut at = 0usize;
    for v in emu.iter_mut().chain(std::iter::once(&mut Val::SU32(0))) {
        let len = u64::from_le_bytes(out[at..at + 8].try_into().unwrap()) as usize;
        at += 8;
        v.decode(&out[at..at + len]);
        at += len;
    }
    Ok((cpu, emu))
}

pub fn close(a: f32, b: f32) -> bool {
    if b == f32::NEG_INFINITY || a == f32::NEG_INFINITY {
        return a == b;
    }
    (a - b).abs() as f64 <= 1e-4 + 1e-5 * (b.abs() as f64)
}

pub fn tile_for(name: &str, n: u32) -> u32 {
    let spec = registry::find(name).unwrap();
    if spec.variants.len() == 1 {
        return spec.variants[0].tile;
    }
    Variant::pick(spec.variants, n).map(|v| v.tile).unwrap_or(0)
}

/// Runs `kernel` from `bin` on `blocks` emulated cores; (exit code, stderr).
pub fn run_driver(
    bin: &Path,
    dir: &Path,
    kernel: &str,
    tile: u32,
    blocks: u32,
    args: &[Val],
    env: &[(&str, &str)],
) -> (Option<i32>, String) {
    let mut input = Vec::new();
    input.extend_from_slice(&(args.len() as u32).to_le_bytes());
    for a in args {
        a.encode(&mut input);
    }
    let fin = dir.join(format!("{kernel}.in"));
    std::fs::write(&fin, input).unwrap();
    let o = Command::new(bin)
        .arg(kernel)
        .arg(tile.to_string())
        .arg(blocks.to_string())
        .arg(&fin)
        .arg(dir.join(format!("{kernel}.out")))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).to_string())
}
