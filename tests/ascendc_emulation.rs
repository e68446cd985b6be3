//! The generated AscendC kernels, compiled with g++ against our x86
//! emulation of the AscendC subset (sampler-host/ascendc/emu), run kernel by
//! kernel on inputs prepared from the golden cases, and compared with the
//! CPU kernel programs on the same input buffers: ids and statuses
//! identical, floats within |a - b| <= 1e-4 + 1e-5 |b|. Besides the CPU
//! backend's sequence, the kernels only the CUDA backend launches are run
//! too: the fused `process_draw` / `process_prefix_draw` / `token_info_top`,
//! `row_mass`, and the multi-block `topn_chunk` + `topn_merge`. The Ascend
//! step's own launch list (`backend::ascend::step`) runs every golden case
//! end to end under the emulator too. Every run uses the strict numerics
//! mode (`ASCENDC_EMU_NUMERICS=perturb`) on 1-3 emulated cores; planted
//! bugs in generated kernels and the hardware probes are checked here as
//! well (docs/ASCEND.md).
//!
//! Skips (passing) only when g++ is absent.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sampler_host::backend::ascend::step;
use sampler_host::backend::cpu::CpuBackend;
use sampler_host::plan::Backend;
use sampler_host::request::Request;
use sampler_kernels::registry;
use sampler_kernels::rt::cpu::{Arg, Gm};
use sampler_kernels::spec::{KernelSpec, ParamKind, Prim, Variant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn gxx() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    Command::new(&cxx).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| cxx)
}

fn work_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("sampler-ascendc-emu-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn specs() -> Vec<&'static KernelSpec> {
    let mut v: Vec<_> = registry::all().filter(|k| k.ascendc.is_some()).collect();
    v.sort_by_key(|k| k.name);
    v
}

fn emu_variants(k: &KernelSpec) -> Vec<&'static Variant> {
    k.variants.iter().filter(|v| v.tile <= 4096).collect()
}

fn cxx_scalar(p: Prim) -> &'static str {
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
fn driver_source(dir: &Path, kernels: &[&KernelSpec]) -> String {
    let mut s = String::from("#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <vector>\n#include <string>\n");
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
                    ParamKind::Gm(_) | ParamKind::GmMut(_) => format!("gm({i})"),
                    ParamKind::Scalar(pr) => format!("sc<{}>({i})", cxx_scalar(pr)),
                })
                .chain(std::iter::once(format!("sc<uint32_t>({})", k.params.len())))
                .collect();
            s += &format!("    if (name == \"{}\" && tile == {}) {{ found = true; {}({}); }}\n", k.name, v.tile, v.entry, args.join(", "));
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

fn compile(cxx: &str, src: &Path, out: &Path, sanitize: bool) -> Result<(), String> {
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
fn driver() -> Option<&'static PathBuf> {
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
enum Val {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    SU32(u32),
    SI32(i32),
}

fn as_bytes<T: Copy>(v: &[T]) -> Vec<u8> {
    // SAFETY: plain-old-data element types, read as bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)).to_vec() }
}

fn from_bytes<T: Copy + Default>(b: &[u8]) -> Vec<T> {
    let n = b.len() / std::mem::size_of::<T>();
    let mut v = vec![T::default(); n];
    // SAFETY: the destination holds exactly n elements of plain-old-data.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr() as *mut u8, n * std::mem::size_of::<T>()) };
    v
}

impl Val {
    fn arg(&mut self, write: bool) -> Arg {
        match self {
            Val::F32(v) => Arg::GmF32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Val::I32(v) => Arg::GmI32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Val::U32(v) => Arg::GmU32(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Val::U64(v) => Arg::GmU64(if write { Gm::new_mut(v) } else { Gm::new(v) }),
            Val::SU32(x) => Arg::U32(*x),
            Val::SI32(x) => Arg::I32(*x),
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        let (kind, bytes) = match self {
            Val::F32(v) => (0u8, as_bytes(v)),
            Val::I32(v) => (0, as_bytes(v)),
            Val::U32(v) => (0, as_bytes(v)),
            Val::U64(v) => (0, as_bytes(v)),
            Val::SU32(x) => (1, (*x as u64).to_le_bytes().to_vec()),
            Val::SI32(x) => (1, (*x as u32 as u64).to_le_bytes().to_vec()),
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
    fn decode(&mut self, b: &[u8]) {
        match self {
            Val::F32(v) => *v = from_bytes(b),
            Val::I32(v) => *v = from_bytes(b),
            Val::U32(v) => *v = from_bytes(b),
            Val::U64(v) => *v = from_bytes(b),
            _ => {}
        }
    }
    fn f32s(&self) -> &[f32] {
        match self {
            Val::F32(v) => v,
            _ => panic!("not f32"),
        }
    }
    fn i32s(&self) -> &[i32] {
        match self {
            Val::I32(v) => v,
            _ => panic!("not i32"),
        }
    }
    fn u32s(&self) -> &[u32] {
        match self {
            Val::U32(v) => v,
            _ => panic!("not u32"),
        }
    }
    fn u64s(&self) -> &[u64] {
        match self {
            Val::U64(v) => v,
            _ => panic!("not u64"),
        }
    }
}

/// Runs kernel `name` on the CPU (program by program) and under emulation,
/// each on its own copy of `args`; returns (cpu, emulated) buffers after.
fn run_both(name: &str, tile: u32, programs: u32, args: &[Val]) -> Result<(Vec<Val>, Vec<Val>), String> {
    let spec = registry::find(name).ok_or("unknown kernel")?;
    let mut cpu = args.to_vec();
    let dyn_args: Vec<Arg> =
        cpu.iter_mut().zip(spec.params).map(|(v, p)| v.arg(matches!(p.kind, ParamKind::GmMut(_)))).collect();
    for prog in 0..programs {
        // SAFETY: the buffers are sized for the kernel's shapes; one program at a time.
        unsafe { (spec.cpu)(prog, &dyn_args).map_err(|e| e.to_string())? };
    }
    let bin = driver().ok_or("no g++")?;
    let dir = work_dir();
    let tag = format!("{name}-{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    let (fin, fout) = (dir.join(format!("{tag}.in")), dir.join(format!("{tag}.out")));
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&(args.len() as u32 + 1).to_le_bytes());
    for a in args {
        a.encode(&mut bytes);
    }
    Val::SU32(programs).encode(&mut bytes);
    std::fs::write(&fin, bytes).unwrap();
    let blocks = programs.clamp(1, 3);
    // The strict numerics mode: vector Exp/Div off by up to 2 ulp, subnormals
    // flushed; ids and statuses must still equal the CPU's.
    let o = Command::new(bin)
        .arg(name)
        .arg(tile.to_string())
        .arg(blocks.to_string())
        .arg(&fin)
        .arg(&fout)
        .env("ASCENDC_EMU_NUMERICS", "perturb")
        .output()
        .map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!("emulated {name} (tile {tile}) failed: {}\n{}", o.status, String::from_utf8_lossy(&o.stderr)));
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

fn close(a: f32, b: f32) -> bool {
    if b == f32::NEG_INFINITY || a == f32::NEG_INFINITY {
        return a == b;
    }
    (a - b).abs() as f64 <= 1e-4 + 1e-5 * (b.abs() as f64)
}

fn tile_for(name: &str, n: u32) -> u32 {
    let spec = registry::find(name).unwrap();
    if spec.variants.len() == 1 {
        return spec.variants[0].tile;
    }
    Variant::pick(spec.variants, n).map(|v| v.tile).unwrap_or(0)
}

/// Runs one golden case through every kernel; returns a one-line summary.
fn run_case(path: &Path) -> Result<Option<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let case = sampler_host::case::parse_case(&text).map_err(|e| e.to_string())?;
    let v = case.vocab_size;
    let n = if case.force_topk == 0 || case.force_topk >= v { v } else { case.force_topk };
    if n > 4096 {
        return Ok(None);
    }
    let mut reqs: Vec<Request> = Vec::new();
    let mut logits = Vec::new();
    for (r, l) in case.requests.iter().flatten() {
        reqs.push(r.clone());
        logits.extend_from_slice(l);
    }
    let (p, _) = sampler_host::batch::build_plan(v, n, case.nextn, &logits, &reqs).map_err(|e| e.to_string())?;
    let r = p.rows;
    let g = p.groups() as u32;
    let bad = |what: &str, row: usize| format!("{}: {what} differs at {row}", path.display());

    // 1. mask_check (with the raw partial sums of section 10.3 for raw rows)
    let tiles = sampler_host::plan::raw_tiles(v);
    let rt = (r * tiles) as usize;
    let args = vec![
        Val::F32(p.logits.clone()),
        Val::SU32(v),
        Val::U32(p.masks.clone()),
        Val::U32(p.has_mask.clone()),
        Val::U32(p.raw_logprobs.clone()),
        Val::F32(vec![f32::NEG_INFINITY; rt]),
        Val::U64(vec![0; rt]),
        Val::I32(vec![0; r as usize]),
    ];
    let (c, e) = run_both("mask_check", tile_for("mask_check", v), r, &args)?;
    if c[7].i32s() != e[7].i32s() {
        return Err(bad("mask_check status", 0));
    }
    let status = c[7].i32s().to_vec();
    for i in (0..r as usize).filter(|&i| status[i] == 0 && p.raw_logprobs[i] != 0) {
        let s = i * tiles as usize..(i + 1) * tiles as usize;
        // Tile maxima and fixed-point sums exactly: `exp` is the scalar
        // unit's `sk::exp` (the CPU's polynomial), never the vector Exp.
        let (cm, em) = (&c[5].f32s()[s.clone()], &e[5].f32s()[s.clone()]);
        if cm.iter().zip(em).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(format!("{} (cpu {cm:?} emu {em:?})", bad("mask_check raw_max", i)));
        }
        let (cs, es) = (&c[6].u64s()[s.clone()], &e[6].u64s()[s]);
        if cs != es {
            return Err(format!("{} (cpu {cs:?} emu {es:?})", bad("mask_check raw_sum", i)));
        }
    }
    let (raw_max, raw_sum) = (c[5].clone(), c[6].clone());
    let ok_row = |i: usize| status[i] == 0;
    for i in 0..r as usize {
        if ok_row(i) && c[0].f32s()[i * v as usize..(i + 1) * v as usize].iter().map(|x| x.to_bits()).ne(e[0].f32s()[i * v as usize..(i + 1) * v as usize].iter().map(|x| x.to_bits())) {
            return Err(bad("masked logits", i));
        }
    }
    let masked = c[0].clone();

    // 1b. mask_check_chunk + status_merge with one chunk per row (the CPU
    // backend's form): the emulated statuses, masked logits and raw tile sums
    // equal mask_check's on the CPU.
    let ctile = tile_for("mask_check_chunk", 1);
    let clen = v.div_ceil(ctile).max(1) * ctile;
    let args = vec![
        Val::F32(p.logits.clone()),
        Val::SU32(v),
        Val::SU32(clen),
        Val::SU32(1),
        Val::U32(p.masks.clone()),
        Val::U32(p.has_mask.clone()),
        Val::U32(p.raw_logprobs.clone()),
        Val::F32(vec![f32::NEG_INFINITY; rt]),
        Val::U64(vec![0; rt]),
        Val::U32(vec![0; r as usize]),
        Val::U32(vec![0; r as usize]),
    ];
    let (_, ce) = run_both("mask_check_chunk", ctile, r, &args)?;
    let args = vec![ce[9].clone(), ce[10].clone(), Val::SU32(1), Val::I32(vec![0; r as usize])];
    let (_, se) = run_both("status_merge", tile_for("status_merge", 1), r, &args)?;
    if se[3].i32s() != status.as_slice() {
        return Err(format!("{} (mask_check {status:?}, chunked {:?})", bad("mask_check_chunk + status_merge status", 0), se[3].i32s()));
    }
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        let (s, t) = (i * v as usize..(i + 1) * v as usize, i * tiles as usize..(i + 1) * tiles as usize);
        if ce[0].f32s()[s.clone()].iter().map(|x| x.to_bits()).ne(masked.f32s()[s].iter().map(|x| x.to_bits())) {
            return Err(bad("mask_check_chunk masked logits", i));
        }
        if p.raw_logprobs[i] != 0
            && (ce[7].f32s()[t.clone()].iter().map(|x| x.to_bits()).ne(raw_max.f32s()[t.clone()].iter().map(|x| x.to_bits()))
                || ce[8].u64s()[t.clone()] != raw_sum.u64s()[t])
        {
            return Err(bad("mask_check_chunk raw sums", i));
        }
    }
    let nn = n as usize;

    // 2. force_topn
    let args = vec![masked.clone(), Val::SU32(v), Val::SU32(n), Val::F32(vec![0.0; r as usize * nn]), Val::I32(vec![0; r as usize * nn])];
    let (c, e) = run_both("force_topn", tile_for("force_topn", n), r, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        let s = i * nn..(i + 1) * nn;
        if c[4].i32s()[s.clone()] != e[4].i32s()[s.clone()] || c[3].f32s()[s.clone()].iter().zip(&e[3].f32s()[s]).any(|(a, b)| a.to_bits() != b.to_bits() && !(*a == 0.0 && *b == 0.0)) {
            return Err(bad("force_topn", i));
        }
    }
    let (cand, cand_ids) = (c[3].clone(), c[4].clone());

    // 3. process
    let (min_p, order) = (Val::F32(p.min_p.clone()), Val::U32(p.filter_order.clone()));
    let args = vec![
        cand.clone(),
        Val::SU32(n),
        Val::F32(p.temperature.clone()),
        Val::F32(p.top_p.clone()),
        Val::I32(p.top_k.clone()),
        min_p.clone(),
        order.clone(),
        Val::F32(vec![0.0; r as usize * nn]),
    ];
    let (c, e) = run_both("process", tile_for("process", n), r, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        for j in i * nn..(i + 1) * nn {
            if !close(e[7].f32s()[j], c[7].f32s()[j]) {
                return Err(format!("{} (col {}: cpu {} emu {})", bad("process logprobs", i), j - i * nn, c[7].f32s()[j], e[7].f32s()[j]));
            }
        }
    }
    let logprobs = c[7].clone();

    // 4. draw
    let args = vec![logprobs.clone(), cand_ids.clone(), Val::SU32(n), Val::U64(p.seed.clone()), Val::U64(p.seq_draw.clone()), Val::I32(vec![-1; r as usize])];
    let (c, e) = run_both("draw", tile_for("draw", n), r, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        if c[5].i32s()[i] != e[5].i32s()[i] {
            return Err(bad("draw token", i));
        }
    }
    let fresh = c[5].clone();

    // 3-4 fused (process_draw, the CUDA backend's): emulated = CPU, and CPU = process then draw.
    let args = vec![
        cand.clone(),
        cand_ids.clone(),
        Val::SU32(n),
        Val::F32(p.temperature.clone()),
        Val::F32(p.top_p.clone()),
        Val::I32(p.top_k.clone()),
        min_p.clone(),
        order.clone(),
        Val::U64(p.seed.clone()),
        Val::U64(p.seq_draw.clone()),
        Val::F32(vec![0.0; r as usize * nn]),
        Val::I32(vec![-1; r as usize]),
    ];
    let (c, e) = run_both("process_draw", tile_for("process_draw", n), r, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        let s = i * nn..(i + 1) * nn;
        if c[11].i32s()[i] != e[11].i32s()[i] || c[11].i32s()[i] != fresh.i32s()[i] || e[10].f32s()[s.clone()].iter().zip(&c[10].f32s()[s.clone()]).any(|(a, b)| !close(*a, *b)) {
            return Err(bad("process_draw", i));
        }
        if c[10].f32s()[s.clone()].iter().zip(&logprobs.f32s()[s]).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(bad("process_draw (CPU) vs process", i));
        }
    }

    // 3-4 on the prefix path (row_mass + process_prefix_draw) over the same candidates.
    let mchunks = v.div_ceil(16384);
    let args = vec![masked.clone(), Val::SU32(v), Val::SU32(16384), Val::SU32(mchunks), cand.clone(), Val::SU32(n), Val::F32(p.temperature.clone()), Val::U64(vec![0; (r * mchunks) as usize])];
    let (c, e) = run_both("row_mass", tile_for("row_mass", 1), r * mchunks, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        // The weights are the CPU's bits (scalar `sk::exp`, IEEE division,
        // never the vector Exp/Div): the fixed-point sums are identical.
        let s = i * mchunks as usize..(i + 1) * mchunks as usize;
        if c[7].u64s()[s.clone()] != e[7].u64s()[s.clone()] {
            return Err(format!("{} (cpu {:?} emu {:?})", bad("row_mass", i), &c[7].u64s()[s.clone()], &e[7].u64s()[s]));
        }
    }
    // Each side takes its own row_mass (identical, checked above).
    let args = |mass: Val| {
        vec![
            cand.clone(),
            cand_ids.clone(),
            Val::SU32(n),
            Val::SU32(v),
            mass,
            Val::SU32(mchunks),
            Val::F32(p.temperature.clone()),
            Val::F32(p.top_p.clone()),
            Val::I32(p.top_k.clone()),
            min_p.clone(),
            order.clone(),
            Val::U64(p.seed.clone()),
            Val::U64(p.seq_draw.clone()),
            Val::F32(vec![0.0; r as usize * nn]),
            Val::U32(vec![0; r as usize]),
            Val::I32(vec![-1; r as usize]),
        ]
    };
    let (c, _) = run_both("process_prefix_draw", tile_for("process_prefix_draw", n), r, &args(c[7].clone()))?;
    let (_, e) = run_both("process_prefix_draw", tile_for("process_prefix_draw", n), r, &args(e[7].clone()))?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        let s = i * nn..(i + 1) * nn;
        if c[14].u32s()[i] != e[14].u32s()[i] || c[15].i32s()[i] != e[15].i32s()[i] || e[13].f32s()[s.clone()].iter().zip(&c[13].f32s()[s.clone()]).any(|(a, b)| !close(*a, *b)) {
            let lp = |x: &Val| x.f32s()[s.clone()].iter().take(8).copied().collect::<Vec<f32>>();
            return Err(format!(
                "{} (overflow cpu {} emu {}, token cpu {} emu {}, logprobs cpu {:?} emu {:?})",
                bad("process_prefix_draw", i),
                c[14].u32s()[i],
                e[14].u32s()[i],
                c[15].i32s()[i],
                e[15].i32s()[i],
                lp(&c[13]),
                lp(&e[13])
            ));
        }
        // Without force top-k the candidates are all V: the prefix path is the full path.
        if n == v && (c[13].f32s()[s.clone()].iter().zip(&logprobs.f32s()[s]).any(|(a, b)| a.to_bits() != b.to_bits()) || c[15].i32s()[i] != fresh.i32s()[i]) {
            return Err(bad("process_prefix_draw (CPU, n = V) vs process + draw", i));
        }
    }

    // 2 on several blocks per row (topn_chunk + topn_merge), when two chunks hold n each.
    let clen = v.div_ceil(2);
    if v - clen >= n {
        let m = 2 * n;
        let args = vec![masked.clone(), Val::SU32(v), Val::SU32(clen), Val::SU32(2), Val::SU32(n), Val::F32(vec![0.0; (r * m) as usize]), Val::I32(vec![0; (r * m) as usize])];
        let (c, e) = run_both("topn_chunk", tile_for("topn_chunk", n), 2 * r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            // The chunk stage's order is the backend's (ids ascending on the CPU, top_n's on
            // AscendC): compare each chunk as a set of (id, logit bits).
            for ch in 0..2 {
                let s = (2 * i + ch) * nn..(2 * i + ch + 1) * nn;
                let set = |x: &Val, id: &Val| {
                    let mut v: Vec<(i32, u32)> = id.i32s()[s.clone()].iter().zip(&x.f32s()[s.clone()]).map(|(&a, &b)| (a, b.to_bits())).collect();
                    v.sort_unstable();
                    v
                };
                if set(&c[5], &c[6]) != set(&e[5], &e[6]) {
                    return Err(bad("topn_chunk", i));
                }
            }
        }
        let args = vec![e[5].clone(), e[6].clone(), Val::SU32(m), Val::SU32(n), Val::F32(vec![0.0; r as usize * nn]), Val::I32(vec![0; r as usize * nn])];
        let (c, e) = run_both("topn_merge", tile_for("topn_merge", n), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            let s = i * nn..(i + 1) * nn;
            if c[5].i32s()[s.clone()] != e[5].i32s()[s.clone()] || c[5].i32s()[s.clone()] != cand_ids.i32s()[s] {
                return Err(bad("topn_merge (vs force_topn)", i));
            }
        }
    }

    // 5-6. remap_draft + verify
    let mut accept = Val::U32(vec![0; r as usize]);
    let mut residual = Val::I32(vec![-1; r as usize]);
    if p.any_verify {
        let args = vec![
            cand_ids.clone(),
            Val::SU32(n),
            Val::SU32(v),
            Val::I32(p.draft_ids.clone()),
            Val::F32(p.draft_lps.clone()),
            Val::SU32(p.draft_width),
            Val::I32(p.drafts.clone()),
            Val::I32(vec![-1; r as usize * v as usize]),
            Val::F32(vec![0.0; r as usize * nn]),
            Val::I32(vec![-1; r as usize]),
            Val::F32(vec![f32::NEG_INFINITY; r as usize]),
        ];
        let (c, e) = run_both("remap_draft", tile_for("remap_draft", n), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            let s = i * nn..(i + 1) * nn;
            if c[8].f32s()[s.clone()].iter().zip(&e[8].f32s()[s]).any(|(a, b)| a.to_bits() != b.to_bits())
                || c[9].i32s()[i] != e[9].i32s()[i]
                || c[10].f32s()[i].to_bits() != e[10].f32s()[i].to_bits()
            {
                return Err(bad("remap_draft", i));
            }
        }
        let args = vec![
            logprobs.clone(),
            cand_ids.clone(),
            c[8].clone(),
            Val::SU32(n),
            c[9].clone(),
            c[10].clone(),
            Val::U64(p.seed.clone()),
            Val::U64(p.seq_accept.clone()),
            Val::U64(p.seq_residual.clone()),
            Val::U32(vec![0; r as usize]),
            Val::I32(vec![-1; r as usize]),
        ];
        let (c, e) = run_both("verify", tile_for("verify", n), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            if c[9].u32s()[i] != e[9].u32s()[i] || c[10].i32s()[i] != e[10].i32s()[i] {
                return Err(bad("verify", i));
            }
        }
        accept = c[9].clone();
        residual = c[10].clone();
    }

    // 7. finalize
    let args = vec![
        Val::U32(p.group_first.clone()),
        Val::U32(p.group_rows.clone()),
        Val::U32(p.group_kind.clone()),
        Val::I32(p.group_status.clone()),
        Val::I32(status.clone()),
        Val::I32(p.golden.clone()),
        Val::I32(p.drafts.clone()),
        accept,
        residual,
        fresh.clone(),
        Val::I32(vec![-1; r as usize]),
        Val::I32(vec![-1; r as usize]),
        Val::U32(vec![0; g as usize]),
        Val::I32(vec![0; g as usize]),
    ];
    let (c, e) = run_both("finalize", tile_for("finalize", 1), g, &args)?;
    for (k, what) in [(10, "tokens"), (11, "lookup"), (13, "group status")] {
        if c[k].i32s() != e[k].i32s() {
            return Err(bad(what, 0));
        }
    }
    if c[12].u32s() != e[12].u32s() {
        return Err(bad("accepted", 0));
    }
    let (mut tokens, mut lookup) = (c[10].i32s().to_vec(), c[11].clone());

    // 7b. tree_walk (section 11), after finalize
    if p.any_tree {
        let wd = p.draft_width;
        let args = vec![
            Val::U32(p.group_first.clone()),
            Val::U32(p.group_rows.clone()),
            Val::U32(p.group_kind.clone()),
            Val::U32(p.tree_mode.clone()),
            c[13].clone(),
            Val::I32(p.tree_parent.clone()),
            Val::I32(p.tree_token.clone()),
            Val::I32(p.golden.clone()),
            fresh.clone(),
            logprobs.clone(),
            cand_ids.clone(),
            Val::SU32(n),
            Val::SU32(v),
            Val::I32(p.draft_ids.clone()),
            Val::F32(p.draft_lps.clone()),
            Val::SU32(wd),
            Val::I32(vec![-1; if wd > 0 { r as usize * v as usize } else { 1 }]),
            Val::U64(p.seed.clone()),
            Val::U64(p.seq_accept.clone()),
            Val::U64(p.seq_residual.clone()),
            c[10].clone(),
            c[11].clone(),
            c[12].clone(),
            Val::I32(vec![-1; r as usize]),
        ];
        let (c, e) = run_both("tree_walk", tile_for("tree_walk", n.max(wd)), g, &args)?;
        for (k, what) in [(20, "tree_walk tokens"), (21, "tree_walk lookup"), (23, "tree_walk path")] {
            if c[k].i32s() != e[k].i32s() {
                return Err(bad(what, 0));
            }
        }
        if c[22].u32s() != e[22].u32s() {
            return Err(bad("tree_walk accepted", 0));
        }
        tokens = c[20].i32s().to_vec();
        lookup = c[21].clone();
    }

    // 8. token_info
    let args = vec![cand.clone(), cand_ids.clone(), logprobs.clone(), Val::SU32(n), lookup.clone(), Val::F32(vec![0.0; r as usize]), Val::F32(vec![0.0; r as usize])];
    let (c, e) = run_both("token_info", tile_for("token_info", n), r, &args)?;
    for i in (0..r as usize).filter(|&i| ok_row(i)) {
        if !close(e[5].f32s()[i], c[5].f32s()[i]) || !close(e[6].f32s()[i], c[6].f32s()[i]) {
            return Err(bad("token_info", i));
        }
    }
    let token_lp = c[5].clone();

    // 8-9 fused (token_info_top, the CUDA backend's)
    let kk = p.k;
    {
        let kn = kk as usize;
        let args = vec![
            cand.clone(),
            cand_ids.clone(),
            logprobs.clone(),
            Val::SU32(n),
            lookup.clone(),
            Val::SU32(kk),
            Val::F32(vec![0.0; r as usize]),
            Val::F32(vec![0.0; r as usize]),
            Val::I32(vec![-1; r as usize * kn.max(1)]),
            Val::F32(vec![0.0; r as usize * kn.max(1)]),
        ];
        let (c, e) = run_both("token_info_top", tile_for("token_info_top", n), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            if !close(e[6].f32s()[i], c[6].f32s()[i]) || !close(e[7].f32s()[i], c[7].f32s()[i]) {
                return Err(bad("token_info_top", i));
            }
            for j in i * kn..(i + 1) * kn {
                if c[8].i32s()[j] != e[8].i32s()[j] || !close(e[9].f32s()[j], c[9].f32s()[j]) {
                    return Err(bad("token_info_top top logprobs", i));
                }
            }
        }
    }

    // 9. top_logprobs
    let kn = kk as usize;
    let (mut top_ids, mut top_lps) = (Val::I32(vec![-1; r as usize * kn]), Val::F32(vec![f32::NEG_INFINITY; r as usize * kn]));
    if kk > 0 {
        let args = vec![cand_ids.clone(), logprobs.clone(), Val::SU32(n), Val::SU32(kk), Val::I32(vec![-1; r as usize * kn]), Val::F32(vec![0.0; r as usize * kn])];
        let (c, e) = run_both("top_logprobs", tile_for("top_logprobs", n), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i)) {
            for j in i * kn..(i + 1) * kn {
                if c[4].i32s()[j] != e[4].i32s()[j] || !close(e[5].f32s()[j], c[5].f32s()[j]) {
                    return Err(bad("top_logprobs", i));
                }
            }
        }
        (top_ids, top_lps) = (c[4].clone(), c[5].clone());
    }

    // 10. raw_logprobs (section 10.3), when a row asks for them
    if p.any_raw {
        let args = vec![
            masked.clone(),
            Val::SU32(v),
            Val::U32(p.raw_logprobs.clone()),
            raw_max.clone(),
            raw_sum.clone(),
            Val::SU32(tiles),
            lookup.clone(),
            Val::SU32(kk),
            top_ids.clone(),
            token_lp.clone(),
            top_lps.clone(),
        ];
        let (c, e) = run_both("raw_logprobs", tile_for("raw_logprobs", kk.max(1)), r, &args)?;
        for i in (0..r as usize).filter(|&i| ok_row(i) && p.raw_logprobs[i] != 0) {
            if !close(e[9].f32s()[i], c[9].f32s()[i]) {
                return Err(format!("{} (cpu {} emu {})", bad("raw_logprobs token", i), c[9].f32s()[i], e[9].f32s()[i]));
            }
            for j in i * kn..(i + 1) * kn {
                if !close(e[10].f32s()[j], c[10].f32s()[j]) {
                    return Err(bad("raw_logprobs top logprobs", i));
                }
            }
        }
    }
    Ok(Some(format!(
        "{}: V={v} N={n} R={r} groups={g} verify={} tree={} tokens={:?} -> identical",
        path.file_name().unwrap().to_string_lossy(),
        p.any_verify,
        p.any_tree,
        &tokens[..tokens.len().min(8)]
    )))
}

/// Runs the Ascend step's launch lists (`sampler_host::backend::ascend::step`)
/// under the emulator: every launch is one driver run on 1-3 emulated cores,
/// with `ASCENDC_EMU_NUMERICS` set to `numerics` (`"perturb"`: vector
/// Exp/Div off by up to 2 ulp, subnormals flushed; `"exact"`: IEEE results).
struct EmuDevice {
    numerics: &'static str,
}

impl step::Device for EmuDevice {
    fn run(&mut self, bufs: &mut [step::Buf], launches: &[step::Launch]) -> Result<(), String> {
        let bin = driver().ok_or("no g++")?;
        let dir = work_dir();
        for l in launches.iter().filter(|l| l.programs > 0) {
            let tag = format!("{}-{}", l.kernel, std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
            let (fin, fout) = (dir.join(format!("{tag}.in")), dir.join(format!("{tag}.out")));
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&(l.args.len() as u32 + 1).to_le_bytes());
            for a in l.args.iter().copied().chain(std::iter::once(step::Arg::U32(l.programs))) {
                match a {
                    step::Arg::Buf(i) => {
                        let b = bufs[i].bytes();
                        bytes.push(0);
                        bytes.extend_from_slice(&(b.len() as u64).to_le_bytes());
                        bytes.extend_from_slice(b);
                    }
                    step::Arg::U32(x) => Val::SU32(x).encode(&mut bytes),
                    step::Arg::I32(x) => Val::SI32(x).encode(&mut bytes),
                }
            }
            std::fs::write(&fin, bytes).map_err(|e| e.to_string())?;
            let o = Command::new(bin)
                .arg(l.kernel)
                .arg(l.tile.to_string())
                .arg(l.programs.clamp(1, 3).to_string())
                .arg(&fin)
                .arg(&fout)
                .env("ASCENDC_EMU_NUMERICS", self.numerics)
                .output()
                .map_err(|e| e.to_string())?;
            let _ = std::fs::remove_file(&fin);
            if !o.status.success() {
                return Err(format!("emulated {} (tile {}) failed: {}\n{}", l.kernel, l.tile, o.status, String::from_utf8_lossy(&o.stderr)));
            }
            let out = std::fs::read(&fout).map_err(|e| e.to_string())?;
            let _ = std::fs::remove_file(&fout);
            let mut at = 0usize;
            for a in &l.args {
                let len = u64::from_le_bytes(out[at..at + 8].try_into().unwrap()) as usize;
                at += 8;
                if let step::Arg::Buf(i) = *a {
                    bufs[i].bytes_mut().copy_from_slice(&out[at..at + len]);
                }
                at += len;
            }
        }
        Ok(())
    }
}

/// Every golden case with N <= 4096 (landed `next/` cases included) through
/// the Ascend step's launch list (prefix path and its fallback, `tree_walk`,
/// `raw_logprobs` included) under the strict emulator with exact numerics
/// (`golden_cases_match_cpu_under_emulation` runs the kernels perturbed):
/// statuses, tokens, accepted counts, tree paths and top ids identical to
/// the CPU backend, floats within 1e-4 + 1e-5 |cpu|.
#[test]
fn golden_cases_run_the_ascend_step_under_emulation() {
    if gxx().is_none() {
        eprintln!("skipping: g++ not found");
        return;
    }
    let paths = sampler_host::case::golden_files(&Path::new(ROOT).join("../shared/golden"));
    let only = std::env::var("ASCENDC_EMU_CASE").ok();
    let (mut ran, mut failures) = (0, Vec::new());
    for path in &paths {
        if only.as_ref().is_some_and(|o| !path.to_string_lossy().contains(o.as_str())) {
            continue;
        }
        let case = sampler_host::case::parse_case(&std::fs::read_to_string(path).unwrap()).unwrap();
        let v = case.vocab_size;
        let n = if case.force_topk == 0 || case.force_topk >= v { v } else { case.force_topk };
        let mut reqs: Vec<Request> = Vec::new();
        let mut logits = Vec::new();
        for (r, l) in case.requests.iter().flatten() {
            reqs.push(r.clone());
            logits.extend_from_slice(l);
        }
        let Ok((p, _)) = sampler_host::batch::build_plan(v, n, case.nextn, &logits, &reqs) else { continue };
        if p.n > 4096 {
            continue;
        }
        let want = CpuBackend::default().run(&p).unwrap();
        let got = step::run_step(&mut EmuDevice { numerics: "exact" }, &p).map_err(|e| e.to_string()).and_then(|g| step::compare(&g, &want));
        ran += 1;
        if let Err(e) = got {
            eprintln!("FAIL {}: {e}", path.display());
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    eprintln!("{ran} golden cases ran the Ascend step under emulation, {} failed", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran > 40 || only.is_some(), "{ran} cases");
}

/// The Sort32/MrgSort order of NaN, -0.0/+0.0 and ties across lists, end to
/// end through `force_topn` (the same probe `hardware_sort_ties_nan_and_signed_zero`
/// runs on a 910B).
#[test]
fn force_topn_orders_nan_and_signed_zero_as_stated() {
    if gxx().is_none() {
        eprintln!("skipping: g++ not found");
        return;
    }
    let (mut bufs, launch, want) = step::probe::sort_ties();
    step::Device::run(&mut EmuDevice { numerics: "perturb" }, &mut bufs, &[launch]).unwrap();
    assert_eq!(step::probe::ids(&bufs), want);
}

/// The hardware Exp/Div probe compiles against the emulation header, runs
/// on 3 emulated cores without a hazard, and in the numerics mode stays
/// within 3 ulp of `rt::math::exp_f32` (libm's `expf` within 1, plus the
/// mode's 2) and 2 of IEEE division.
#[test]
fn exp_div_probe_runs_under_emulation() {
    let Some(cxx) = gxx() else {
        eprintln!("skipping: g++ not found");
        return;
    };
    let dir = work_dir().join("probe");
    std::fs::create_dir_all(&dir).unwrap();
    let main = dir.join("probe.cpp");
    let n = 5000usize;
    std::fs::write(
        &main,
        format!(
            r#"#include <cstdio>
#include "{}"
int main(int argc, char **argv) {{
  static float x[{n}], y[{n}], e[{n}], d[{n}];
  FILE *f = std::fopen(argv[1], "rb");
  if (!f || std::fread(x, 4, {n}, f) != {n} || std::fread(y, 4, {n}, f) != {n}) return 2;
  std::fclose(f);
  const uint32_t programs = ({n} + 2047) / 2048;
  for (int b = 0; b < 3; ++b) {{
    AscendC::emu::begin_block(b, 3);
    exp_div_probe((GM_ADDR)x, (GM_ADDR)y, (GM_ADDR)e, (GM_ADDR)d, {n}, programs);
    AscendC::emu::end_block();
  }}
  f = std::fopen(argv[2], "wb");
  std::fwrite(e, 4, {n}, f);
  std::fwrite(d, 4, {n}, f);
  std::fclose(f);
  return 0;
}}
"#,
            Path::new(ROOT).join("sampler-host/ascendc/probes/exp_div_probe.cpp").display()
        ),
    )
    .unwrap();
    let bin = dir.join("probe");
    compile(&cxx, &main, &bin, false).unwrap();
    let (x, y) = step::probe::exp_div_inputs(n);
    let mut input: Vec<u8> = x.iter().chain(&y).flat_map(|v| v.to_le_bytes()).collect();
    let fin = dir.join("in.bin");
    std::fs::write(&fin, std::mem::take(&mut input)).unwrap();
    let fout = dir.join("out.bin");
    let o = Command::new(&bin).arg(&fin).arg(&fout).env("ASCENDC_EMU_NUMERICS", "perturb").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: Vec<f32> = std::fs::read(&fout).unwrap().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let (he, hd, worst) = step::probe::ulp_histogram(&x, &y, &out[..n], &out[n..]);
    eprintln!("emulated Exp {he:?}, Div {hd:?}, worst {worst} ulp");
    assert!(worst <= 3 && hd[3] == 0, "Exp {he:?}, Div {hd:?}, worst {worst}");
    assert!(he[4] > 0 && hd[1] + hd[2] > 0, "the numerics mode moves results and flushes subnormals: Exp {he:?}, Div {hd:?}");
}

#[test]
fn every_kernel_has_committed_ascendc_source() {
    let dir = Path::new(ROOT).join("sampler-host/ascendc");
    for name in sampler_kernels::kernels::ALL {
        let spec = registry::find(name).expect("registered");
        let src = spec.ascendc.unwrap_or_else(|| panic!("kernel `{name}` has no AscendC source"));
        let file = dir.join(format!("{name}.cpp"));
        let committed = std::fs::read_to_string(&file).unwrap_or_else(|_| panic!("missing {}: run `cargo run --example regenerate -- --ascendc`", file.display()));
        assert!(committed == src, "{} is stale: run `cargo run --example regenerate -- --ascendc`", file.display());
    }
}

/// Every golden case with N <= 4096 (landed `next/` cases included), kernel
/// by kernel (`run_case`: mask_check with raw sums, mask_check_chunk +
/// status_merge (same outputs as mask_check), force_topn, topn_chunk +
/// topn_merge, process, draw, process_draw, row_mass + process_prefix_draw,
/// remap_draft, verify, finalize, tree_walk, token_info, token_info_top,
/// top_logprobs, raw_logprobs), each on the CPU and under the emulator in the perturbed
/// numerics mode: ids, statuses, tokens, accepted counts and tree paths
/// identical, floats within 1e-4 + 1e-5 |cpu|.
#[test]
fn golden_cases_match_cpu_under_emulation() {
    if gxx().is_none() {
        eprintln!("skipping: g++ not found");
        return;
    }
    let paths: Vec<PathBuf> = sampler_host::case::golden_files(&Path::new(ROOT).join("../shared/golden"));
    assert!(!paths.is_empty(), "golden cases not found beside the repository");
    let only = std::env::var("ASCENDC_EMU_CASE").ok();
    let mut ran = 0;
    let mut failures = Vec::new();
    for p in &paths {
        if only.as_ref().is_some_and(|o| !p.to_string_lossy().contains(o.as_str())) {
            continue;
        }
        match run_case(p) {
            Ok(Some(line)) => {
                ran += 1;
                eprintln!("ok   {line}");
            }
            Ok(None) => eprintln!("skip {} (N > 4096: not an Ascend configuration)", p.file_name().unwrap().to_string_lossy()),
            Err(e) => {
                eprintln!("FAIL {e}");
                failures.push(e);
            }
        }
    }
    eprintln!("{ran} golden cases ran under emulation, {} failed", failures.len());
    assert!(failures.is_empty(), "{} cases differ:\n{}", failures.len(), failures.join("\n"));
    assert!(ran > 0);
}

/// Removes the first `qin.EnQue(t); t = qin.DeQue<T>();` of a kernel body:
/// the tile is still staged through the queue's buffer, but nothing orders
/// the MTE2 copy before the vector pipe's read.
fn drop_enque(src: &str) -> Option<String> {
    drop_line(src, "qin.EnQue(")
}

/// Removes the first line holding `needle`.
fn drop_line(src: &str, needle: &str) -> Option<String> {
    let at = src.find(needle)?;
    let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = at + src[at..].find('\n')?;
    Some(format!("{}{}", &src[..line_start], &src[line_end + 1..]))
}

/// The old lowering of `store_scalar`: the token written into GM by the
/// scalar unit (`GlobalTensor::SetValue`) instead of the staged DMA.
fn scalar_token_store(src: &str) -> Option<String> {
    let at = src.find("AscendC::DataCopyPad(g_token[")?;
    let line_end = at + src[at..].find('\n')?;
    let line = &src[at..line_end];
    let off = line.split("g_token[").nth(1)?.split(']').next()?;
    let ub = line.split(", ").nth(1)?;
    Some(format!("{}g_token.SetValue({off}, {ub}.GetValue(0));{}", &src[..at], &src[line_end..]))
}

/// Runs `kernel` from `bin` on `blocks` emulated cores; (exit code, stderr).
fn run_driver(bin: &Path, dir: &Path, kernel: &str, tile: u32, blocks: u32, args: &[Val], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut input = Vec::new();
    input.extend_from_slice(&(args.len() as u32).to_le_bytes());
    for a in args {
        a.encode(&mut input);
    }
    let fin = dir.join(format!("{kernel}.in"));
    std::fs::write(&fin, input).unwrap();
    let o = Command::new(bin).arg(kernel).arg(tile.to_string()).arg(blocks.to_string()).arg(&fin).arg(dir.join(format!("{kernel}.out"))).envs(env.iter().copied()).output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).to_string())
}

/// Bugs planted in the generated kernels, each of a kind the emulator must
/// catch; the generated kernels pass the same runs:
/// - `process` without its first `qin.EnQue/DeQue`: MTE2 -> V hazard;
/// - `verify` without its `PipeBarrier<PIPE_V>` (Sub then Maxs in place):
///   strict vector pipe, quiet only with `ASCENDC_EMU_AUTO_SYNC=1`;
/// - `draw` writing its token with a scalar `SetValue` into GM: two rows on
///   two cores share a 64-byte DataCache line.
#[test]
fn planted_bugs_in_generated_kernels_are_caught() {
    let Some(cxx) = gxx() else {
        eprintln!("skipping: g++ not found");
        return;
    };
    let good = driver().unwrap();
    let dir = work_dir().join("planted");
    std::fs::create_dir_all(&dir).unwrap();
    let src = |k: &str| registry::find(k).unwrap().ascendc.unwrap();
    assert!(src("process").contains("AscendC::TQue<AscendC::QuePosition::VECIN, 2> qin;"), "process stages its loads through a depth-2 TQue");
    let planted = [
        ("process", drop_enque(src("process")).expect("process stages a row tile through TQue<VECIN> and reads it on V")),
        ("verify", drop_line(src("verify"), "AscendC::PipeBarrier<PIPE_V>();").expect("verify has a V -> V dependency")),
        ("draw", scalar_token_store(src("draw")).expect("draw stores its token by DMA")),
    ];
    let specs: Vec<KernelSpec> =
        planted.iter().map(|(k, s)| KernelSpec { ascendc: Some(Box::leak(s.clone().into_boxed_str())), ..*registry::find(k).unwrap() }).collect();
    let drv = dir.join("driver.cpp");
    std::fs::write(&drv, driver_source(&dir, &specs.iter().collect::<Vec<_>>())).unwrap();
    let bad = dir.join("driver");
    compile(&cxx, &drv, &bad, false).unwrap();

    let (n, rows) = (64u32, 2u32);
    let (nn, ru) = ((n * rows) as usize, rows as usize);
    let logits: Vec<f32> = (0..n * rows).map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.0).collect();
    let process = [
        Val::F32(logits.clone()),
        Val::SU32(n),
        Val::F32(vec![0.7; ru]),
        Val::F32(vec![0.9; ru]),
        Val::I32(vec![-1; ru]),
        Val::F32(vec![0.0; ru]),
        Val::U32(vec![0; ru]),
        Val::F32(vec![0.0; nn]),
        Val::SU32(rows),
    ];
    let lps: Vec<f32> = (0..nn).map(|i| -((i % 64) as f32) * 0.1 - 0.5).collect();
    let verify = [
        Val::F32(lps.clone()),
        Val::I32((0..nn as i32).map(|i| i % 64).collect()),
        Val::F32(lps.iter().map(|x| x - 0.3).collect()),
        Val::SU32(n),
        Val::I32(vec![3; ru]),
        Val::F32(vec![-0.4; ru]),
        Val::U64(vec![7; ru]),
        Val::U64(vec![1; ru]),
        Val::U64(vec![2; ru]),
        Val::U32(vec![0; ru]),
        Val::I32(vec![-1; ru]),
        Val::SU32(rows),
    ];
    let draw = [
        Val::F32(lps),
        Val::I32((0..nn as i32).collect()),
        Val::SU32(n),
        Val::U64(vec![7; ru]),
        Val::U64(vec![1; ru]),
        Val::I32(vec![-1; ru]),
        Val::SU32(rows),
    ];
    let cases: [(&str, &[Val], &str, &str); 3] = [
        ("process", &process, "HAZARD", "written by pipe MTE2"),
        ("verify", &verify, "HAZARD", "without PipeBarrier<PIPE_V>"),
        ("draw", &draw, "CACHE", "written by a scalar SetValue in block 1 and also by block 0"),
    ];
    for (k, args, kind, detail) in cases {
        let (code, err) = run_driver(good, &dir, k, 64, 2, args, &[]);
        assert_eq!(code, Some(0), "the generated {k} must pass: {err}");
        let (code, err) = run_driver(&bad, &dir, k, 64, 2, args, &[]);
        assert_eq!(code, Some(3), "the planted bug in {k} must be caught: {err}");
        assert!(err.contains(&format!("ascendc-emu: {kind}:")) && err.contains(detail), "{k}: {err}");
    }
    // With the compiler's auto-sync, the missing vector barrier is its job.
    let (code, err) = run_driver(&bad, &dir, "verify", 64, 2, &verify, &[("ASCENDC_EMU_AUTO_SYNC", "1")]);
    assert_eq!(code, Some(0), "{err}");
}
