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
use crate::runtime::plan::{StepPlan, StepResult};

pub use sampler_kernels::codes::MAX_N_ASCEND;

/// The AscendC source of every registered kernel that has one, as
/// `(kernel name, C++ source)`, in name order.
pub fn sources() -> Vec<(&'static str, &'static str)> {
    sampler_kernels::registry::all().filter_map(|k| k.ascendc.map(|s| (k.name, s))).collect()
}

/// The hand-written headers the generated sources include, as
/// `(include name, contents)`: passed to aclrtc in memory and written beside
/// the sources by [`write_sources`].
pub const HEADERS: &[(&str, &str)] = &[
    ("sampler_prelude.h", include_str!("../../../../ascendc/include/sampler_prelude.h")),
    ("sampler_top_n.h", include_str!("../../../../ascendc/include/sampler_top_n.h")),
];

/// Writes one `<kernel>.cpp` per kernel into `dir` (created if needed),
/// and the [`HEADERS`] into `dir/include`.
///
/// Returns the paths written. Errors: any I/O error creating or writing.
pub fn write_sources(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::new();
    std::fs::create_dir_all(dir.join("include"))?;
    for (name, text) in HEADERS {
        let p = dir.join("include").join(name);
        std::fs::write(&p, text)?;
        out.push(p);
    }
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
    candidates.into_iter().find(|c| c.join("lib64/libascendcl.so").exists())
}

/// The aclrtc library of a toolkit (`libacl_rtc.so` or `libaclrtc.so`).
pub fn aclrtc_library(home: &Path) -> Option<PathBuf> {
    ["lib64/libacl_rtc.so", "lib64/libaclrtc.so"].iter().map(|l| home.join(l)).find(|p| p.exists())
}

pub mod acl;
mod device;
pub mod probe;

pub use device::{ascend_caps, launch_args, AscendDevice};

/// AI vector cores a launch uses at most (`SAMPLER_ASCEND_BLOCKS`, default
/// 40: a 910B3/910B4 has 40 AIV cores, a 910B1/910B2 48). Each launch runs on
/// `min(programs, this)` blocks; `SAMPLER_ASCEND_BLOCKS=1` runs every
/// program on one core (the first hardware check).
pub fn max_blocks() -> u32 {
    std::env::var("SAMPLER_ASCEND_BLOCKS").ok().and_then(|v| v.parse().ok()).filter(|&b: &u32| b > 0).unwrap_or(40)
}

/// The Ascend backend: the shared launch list ([`crate::runtime::pipeline`]) on an
/// [`AscendDevice`]. Construction fails with [`ConfigError::BackendUnavailable`]
/// when CANN (libascendcl, aclrtc) is absent, its entry points do not
/// resolve, or a kernel source does not compile or load. **Not yet run on
/// hardware** (docs/ASCEND.md lists the first-run commands).
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

impl AscendBackend {
    /// Short name.
    pub fn name(&self) -> &'static str {
        "ascend"
    }

    /// Runs one step through the shared pipeline. Errors: device failures.
    pub fn run(&mut self, plan: &StepPlan<'_>) -> Result<StepResult, BackendError> {
        crate::runtime::pipeline::run_step(&mut self.dev, plan, false)
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
        assert_eq!(sources().len(), sampler_kernels::registry::all().filter(|k| k.ascendc.is_some()).count());
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
        assert!(matches!(
            Sampler::new(cfg(8192)),
            Err(ConfigError::ForceTopkTooLarge { n: 8192, platform: "ascend", limit: 4096 })
        ));
        if cann_home().is_none() {
            assert!(matches!(Sampler::new(cfg(4096)), Err(ConfigError::BackendUnavailable("ascend", _))));
        }
    }

    /// Every launch of the shared list maps to its AscendC entry's C
    /// arguments: one per parameter (buffers as `GM_ADDR`), then `programs`,
    /// and every entry it names exists in the kernel's AscendC variants.
    #[test]
    fn pipeline_launches_map_to_ascendc_entries() {
        use crate::layout::build_plan;
        use crate::params::SamplingParams;
        use crate::request::Request;
        let v = 3000u32;
        let p = SamplingParams { top_k: 50, top_p: 0.9, top_logprobs: 3, seq_seed: Some(1), ..Default::default() };
        let logits = vec![0.1f32; 3 * v as usize];
        let reqs = [Request::prefill(p.clone(), 5), Request::decode(p, 10, 2, vec![7], vec![Default::default()])];
        for n in [1024, v] {
            let (plan, _) = build_plan(v, n, 5, &logits, &reqs).unwrap();
            for prefix in [None, plan.prefix_width()] {
                let prog = crate::runtime::pipeline::build(&plan, prefix, &ascend_caps()).unwrap();
                for l in &prog.launches {
                    let args = launch_args(l, &|b| (b as usize * 16 + 16) as *mut std::ffi::c_void).unwrap();
                    assert_eq!(args.len(), l.spec.params.len() + 1, "{}", l.spec.name);
                    assert!(matches!(args.last(), Some(acl::KernelArg::U32(g)) if *g == l.grid));
                    for (a, p) in args.iter().zip(l.spec.params) {
                        use sampler_kernels::spec::ParamKind;
                        let gm = matches!(p.kind, ParamKind::Gm(_) | ParamKind::GmMut(_) | ParamKind::Logits);
                        assert_eq!(matches!(a, acl::KernelArg::Gm(_)), gm, "{}.{}", l.spec.name, p.name);
                    }
                    assert!(l.variant.tile <= MAX_N_ASCEND, "{} tile {}", l.spec.name, l.variant.tile);
                    assert!(
                        l.spec.ascendc.is_some_and(|s| s.contains(l.variant.entry)),
                        "{} has no AscendC entry {}",
                        l.spec.name,
                        l.variant.entry
                    );
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

    /// On a 910B: every golden case with N <= 4096 through the launch list
    /// on the NPU (the shared pipeline on an [`AscendDevice`]): ids and statuses
    /// identical to the CPU backend, floats within 1e-4 + 1e-5 |b|.
    /// Run with `SAMPLER_ASCEND_BLOCKS=1`, then `40`; and with
    /// `SAMPLER_ASCEND_AUTO_SYNC=off` (docs/ASCEND.md):
    /// `cargo test --release -p sampler-host --features conformance --lib hardware_ -- --ignored`.
    #[test]
    #[cfg(feature = "conformance")]
    #[ignore = "needs CANN >= 8.5 and an Ascend 910B/910C"]
    fn hardware_golden_cases_match_cpu() {
        let mut backend = AscendBackend::new().expect("CANN and a device");
        let dir = std::path::Path::new(crate::conformance::case::GOLDEN_DIR);
        let only = std::env::var("ASCEND_CASE").ok();
        let (mut ran, mut bad) = (0, Vec::new());
        for f in crate::conformance::case::golden_files(dir) {
            if only.as_ref().is_some_and(|o| !f.to_string_lossy().contains(o.as_str())) {
                continue;
            }
            let case = crate::conformance::case::parse_case(&std::fs::read_to_string(&f).unwrap()).unwrap();
            let (v, n) = (case.vocab_size, case.width());
            let (reqs, logits) = case.well_formed();
            let Ok((p, _)) = crate::layout::build_plan(v, n, case.nextn, &logits, &reqs) else { continue };
            if p.n > MAX_N_ASCEND {
                continue;
            }
            let want = crate::runtime::device::cpu::CpuBackend::default().run(&p).unwrap();
            let t = std::time::Instant::now();
            let got = backend.run(&p);
            let verdict = got.map_err(|e| e.to_string()).and_then(|g| probe::compare(&g, &want));
            eprintln!(
                "{} {} ({:.1} ms)",
                if verdict.is_ok() { "ok  " } else { "FAIL" },
                f.display(),
                t.elapsed().as_secs_f64() * 1e3
            );
            if let Err(e) = verdict {
                bad.push(format!("{}: {e}", f.display()));
            }
            ran += 1;
        }
        eprintln!("{ran} golden cases on the NPU (blocks {}), {} differ", max_blocks(), bad.len());
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// On a 910B: ulp histogram of the vector `Exp`/`Div` over 2^24 inputs
    /// against `rt::math::exp_f32` and IEEE division (printed; the sampler's
    /// decisions do not use them, this sizes the float tolerance).
    #[test]
    #[ignore = "needs CANN >= 8.5 and an Ascend 910B/910C"]
    fn hardware_exp_div_ulp_histogram() {
        let home = cann_home().expect("CANN toolkit");
        let rt = unsafe { acl::Runtime::open(&home, 0) }.unwrap();
        let bin = rt.load(&rt.compile("exp_div_probe", probe::EXP_DIV_SOURCE).unwrap()).unwrap();
        let f = rt.function(&bin, "exp_div_probe").unwrap();
        let n = 1usize << 24;
        let (x, y) = probe::exp_div_inputs(n);
        let up = |v: &[f32]| {
            let b: Vec<u8> = v.iter().flat_map(|a| a.to_le_bytes()).collect();
            let mut d = rt.alloc(b.len()).unwrap();
            d.upload(&b).unwrap();
            d
        };
        let (bx, by, be, bd) = (up(&x), up(&y), up(&vec![0.0; n]), up(&vec![0.0; n]));
        let programs = (n / 2048) as u32;
        use acl::KernelArg::U32;
        unsafe {
            rt.launch(
                f,
                programs.min(max_blocks()),
                &[bx.arg(), by.arg(), be.arg(), bd.arg(), U32(n as u32), U32(programs)],
            )
        }
        .unwrap();
        let down = |d: &acl::DeviceBuffer| {
            let mut b = vec![0u8; n * 4];
            d.download(&mut b).unwrap();
            b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<f32>>()
        };
        let (he, hd, worst) = probe::ulp_histogram(&x, &y, &down(&be), &down(&bd));
        eprintln!("Exp ulp histogram [0, 1, 2, 3+, flushed]: {he:?}\nDiv ulp histogram [0, 1, 2, 3+, flushed]: {hd:?}\nworst {worst} ulp");
    }

    /// On a 910B: Sort32/MrgSort order of NaN, -0.0/+0.0 and ties across
    /// lists, as the emulator states it ([`probe::sort_ties`]).
    #[test]
    #[ignore = "needs CANN >= 8.5 and an Ascend 910B/910C"]
    fn hardware_sort_ties_nan_and_signed_zero() {
        let home = cann_home().expect("CANN toolkit");
        let rt = unsafe { acl::Runtime::open(&home, 0) }.unwrap();
        let (_, src) = sources().into_iter().find(|(n, _)| *n == "force_topn").unwrap();
        let bin = rt.load(&rt.compile("force_topn", src).unwrap()).unwrap();
        let t = probe::sort_ties();
        let f = rt.function(&bin, &format!("force_topn_t{}", t.tile)).unwrap();
        let mut b_lg = rt.alloc(t.logits.len() * 4).unwrap();
        b_lg.upload(&t.logits.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>()).unwrap();
        let b_cand = rt.alloc(t.n as usize * 4).unwrap();
        let b_ids = rt.alloc(t.n as usize * 4).unwrap();
        use acl::KernelArg::U32;
        unsafe { rt.launch(f, 1, &[b_lg.arg(), U32(t.v), U32(t.n), b_cand.arg(), b_ids.arg(), U32(1)]) }.unwrap();
        let mut out = vec![0u8; t.n as usize * 4];
        b_ids.download(&mut out).unwrap();
        let ids: Vec<i32> = out.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(ids, t.want);
    }

    /// On a 910B, the first launch to run: the argument layout. Prints the
    /// runtime's parameter offsets of `abi_probe` (where
    /// `aclrtFunctionGetParamInfo` exists) beside [`acl::pack_args`]'s, then
    /// launches it; it echoes its scalars, which sit at different offsets
    /// under natural alignment and under 8-byte slots ([`probe::abi_layouts`]).
    /// `cargo test --release -p sampler-host --lib hardware_argument_layout -- --ignored --nocapture`.
    #[test]
    #[ignore = "needs CANN >= 8.5 and an Ascend 910B/910C"]
    fn hardware_argument_layout_matches_pack_args() {
        let home = cann_home().expect("CANN toolkit");
        let rt = unsafe { acl::Runtime::open(&home, 0) }.unwrap();
        let bin = rt.load(&rt.compile("abi_probe", probe::ABI_SOURCE).unwrap()).unwrap();
        let f = rt.function(&bin, "abi_probe").unwrap();
        let out = rt.alloc(32).unwrap();
        let args = probe::abi_launch_args(out.arg());
        let packed = acl::pack_args(&args);
        match rt.param_layout(f) {
            Ok(l) => eprintln!(
                "runtime parameter (offset, size): {l:?}\npack_args offsets: 0, 8, 12, 16, 24, 28, 32 ({} bytes)",
                packed.len()
            ),
            Err(e) => eprintln!("no parameter info: {e}"),
        }
        unsafe { rt.launch(f, 1, &args) }.unwrap();
        let mut b = [0u8; 32];
        out.download(&mut b).unwrap();
        let echo: Vec<u32> = b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        let rule =
            probe::abi_layouts(&packed).into_iter().find(|(_, w)| w[..] == echo[..]).map_or("neither rule", |r| r.0);
        eprintln!("abi_probe echoed {echo:x?}: {rule}");
        assert_eq!(echo, probe::abi_expected(), "the launch read the arguments as {rule}");
    }

    /// On a 910B: the scalar unit's f32 `+ - * /`, `sk::exp`, u64 <-> f32
    /// conversions and the fixed-point helpers, bit for bit against the CPU
    /// over 2^20 inputs ([`probe::scalar_inputs`]); prints each op that differs.
    /// `cargo test --release -p sampler-host --lib hardware_scalar_numerics -- --ignored --nocapture`.
    #[test]
    #[ignore = "needs CANN >= 8.5 and an Ascend 910B/910C"]
    fn hardware_scalar_numerics_match_cpu_bit_for_bit() {
        let home = cann_home().expect("CANN toolkit");
        let rt = unsafe { acl::Runtime::open(&home, 0) }.unwrap();
        let bin = rt.load(&rt.compile("scalar_probe", probe::SCALAR_SOURCE).unwrap()).unwrap();
        let f = rt.function(&bin, "scalar_probe").unwrap();
        let n = 1usize << 20;
        let (x, y, u) = probe::scalar_inputs(n);
        let up = |b: Vec<u8>| {
            let mut d = rt.alloc(b.len()).unwrap();
            d.upload(&b).unwrap();
            d
        };
        let bx = up(x.iter().flat_map(|v| v.to_le_bytes()).collect());
        let by = up(y.iter().flat_map(|v| v.to_le_bytes()).collect());
        let bu = up(u.iter().flat_map(|v| v.to_le_bytes()).collect());
        let (bf, bq) = (rt.alloc(n * 32).unwrap(), rt.alloc(n * 16).unwrap());
        let programs = n.div_ceil(probe::SCALAR_CHUNK) as u32;
        use acl::KernelArg::U32;
        unsafe {
            rt.launch(
                f,
                programs.min(max_blocks()),
                &[bx.arg(), by.arg(), bu.arg(), bf.arg(), bq.arg(), U32(n as u32), U32(programs)],
            )
        }
        .unwrap();
        let mut b = vec![0u8; n * 32];
        bf.download(&mut b).unwrap();
        let fw: Vec<u32> = b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        let mut b = vec![0u8; n * 16];
        bq.download(&mut b).unwrap();
        let qw: Vec<u64> = b.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let bad = probe::scalar_mismatches(&x, &y, &u, &fw, &qw);
        for (op, count, first) in &bad {
            eprintln!("{op}: {count} of {n} differ; first: {first}");
        }
        assert!(bad.is_empty(), "scalar numerics differ from the CPU in {} ops", bad.len());
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
        unsafe { rt.launch(f, 1, &[b_lp.arg(), b_ids.arg(), U32(n), b_seed.arg(), b_seq.arg(), b_tok.arg(), U32(1)]) }
            .unwrap();
        let mut out = [0u8; 4];
        b_tok.download(&mut out).unwrap();
        assert_eq!(i32::from_le_bytes(out), 105);
    }
}
