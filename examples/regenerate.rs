//! Regenerates the committed device code from the kernels' DSL source.
//!
//! ```text
//! cargo run --example regenerate                 # every part: writes the files, prints what changed
//! cargo run --example regenerate -- --ptx        # only the PTX part
//! cargo run --example regenerate -- --check      # compare only; exit 1 when stale (tests/ptx/fresh.rs)
//! ```
//!
//! Parts (one module each, so more targets can sit beside them):
//! - [`ptx`]: builds `sampler-kernels` for `nvptx64-nvidia-cuda` with the
//!   nightly toolchain (DESIGN.md's recipe: `-Zbuild-std=core`,
//!   `--emit=asm`, `-C target-cpu=sm_90`, `-Cpanic=immediate-abort`) and
//!   writes `sampler-host/ptx/sampler_kernels.ptx`, which the CUDA backend
//!   embeds. Fails if the PTX has any `.extern .func` or misses an expected
//!   `.entry` (one per registered tile variant).
//!
//! - `ascendc`: the AscendC sources (see that module).
//!
//! Set `PTXAS=/path/to/ptxas` to also assemble the PTX for sm_90 (fails on
//! ptxas errors, reports spills); `SAMPLER_PTX_TARGET_DIR` moves the nvptx
//! build directory (default `target/ptx`).
//!
//! Exit codes: 0 ok (fresh, or written), 1 stale (`--check`) or a check
//! failed, 77 the toolchain is missing (nightly with rust-src), so nothing
//! could be built.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Why a part could not produce its output.
#[derive(Debug)]
pub enum Fail {
    /// The toolchain the part needs is not installed and cannot be.
    Toolchain(String),
    /// Anything else (build failure, a check of the output).
    Other(String),
}

/// Outcome of a part.
pub enum Outcome {
    Unchanged,
    Written(String),
    Stale(String),
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A short summary of how two texts differ (line counts, first differing lines).
fn diff_summary(old: &str, new: &str) -> String {
    let (a, b): (Vec<_>, Vec<_>) = (old.lines().collect(), new.lines().collect());
    let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    let mut s = format!(
        "{} -> {} lines, {} -> {} bytes; first difference at line {}",
        a.len(),
        b.len(),
        old.len(),
        new.len(),
        first + 1
    );
    for (tag, v) in [("-", &a), ("+", &b)] {
        if let Some(l) = v.get(first) {
            s.push_str(&format!("\n    {tag} {}", l.chars().take(120).collect::<String>()));
        }
    }
    s
}

pub mod ptx {
    use super::*;

    /// Where the committed PTX lives.
    pub fn committed_path() -> PathBuf {
        workspace_root().join("sampler-host/ptx/sampler_kernels.ptx")
    }

    /// `rustc +nightly --version`, or why nightly with rust-src is unusable.
    pub fn nightly() -> Result<String, Fail> {
        let out = Command::new("rustc")
            .args(["+nightly", "--version"])
            .env_remove("RUSTUP_TOOLCHAIN")
            .output()
            .map_err(|e| Fail::Toolchain(format!("cannot run rustc +nightly: {e}")))?;
        if !out.status.success() {
            return Err(Fail::Toolchain(format!(
                "no nightly toolchain: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let sysroot = Command::new("rustc")
            .args(["+nightly", "--print", "sysroot"])
            .env_remove("RUSTUP_TOOLCHAIN")
            .output()
            .map_err(|e| Fail::Toolchain(e.to_string()))?;
        let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
        let src = sysroot.join("lib/rustlib/src/rust/library/core");
        if !src.is_dir() {
            eprintln!(
                "regenerate: rust-src missing for nightly; trying `rustup component add rust-src --toolchain nightly`"
            );
            let ok = Command::new("rustup")
                .args(["component", "add", "rust-src", "--toolchain", "nightly"])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok || !src.is_dir() {
                return Err(Fail::Toolchain("nightly has no rust-src component and it could not be installed".into()));
            }
        }
        Ok(version)
    }

    /// The nvptx build directory (`SAMPLER_PTX_TARGET_DIR`, default `target/ptx`).
    pub fn target_dir() -> PathBuf {
        std::env::var_os("SAMPLER_PTX_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target/ptx"))
    }

    /// Builds the kernel crate for nvptx64 and returns the raw PTX.
    fn build() -> Result<String, Fail> {
        build_at(&workspace_root(), &target_dir())
    }

    /// The finished PTX (as committed) of the workspace at `root` (a copy,
    /// for tests), built in `target_dir`.
    pub fn build_finished_at(root: &Path, target_dir: &Path) -> Result<String, Fail> {
        let version = nightly()?;
        finish(&build_at(root, target_dir)?, &version)
    }

    fn build_at(root: &Path, target_dir: &Path) -> Result<String, Fail> {
        let root = root.to_path_buf();
        let target_dir = target_dir.to_path_buf();
        std::fs::create_dir_all(&target_dir).map_err(|e| Fail::Other(format!("{}: {e}", target_dir.display())))?;
        let out_file = target_dir.join("sampler_kernels.ptx");
        let cargo = |args: &[&str], extra: &[String]| -> Result<(), Fail> {
            let mut cmd = Command::new("cargo");
            cmd.current_dir(&root).arg("+nightly").args(args).arg("--target-dir").arg(&target_dir).args(extra);
            // A nested cargo must not inherit the outer (stable) build's settings.
            for v in [
                "RUSTUP_TOOLCHAIN",
                "RUSTC",
                "RUSTC_WRAPPER",
                "RUSTFLAGS",
                "CARGO_ENCODED_RUSTFLAGS",
                "CARGO_TARGET_DIR",
                "CARGO_BUILD_TARGET",
            ] {
                cmd.env_remove(v);
            }
            eprintln!("regenerate: {cmd:?}");
            let st = cmd.status().map_err(|e| Fail::Other(format!("cannot run cargo +nightly: {e}")))?;
            if st.success() {
                Ok(())
            } else {
                Err(Fail::Other(format!("cargo +nightly {} failed ({st})", args.join(" "))))
            }
        };
        let build_args =
            ["rustc", "-p", "sampler-kernels", "--release", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core"];
        let rustc_args: Vec<String> = [
            "--",
            "-C",
            "target-cpu=sm_90",
            "-C",
            "target-feature=+ptx80",
            "-Zunstable-options",
            "-Cpanic=immediate-abort",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("--emit=asm={}", out_file.display())])
        .collect();
        cargo(&build_args, &rustc_args)?;
        if !out_file.is_file() {
            // cargo found the crate fresh but the PTX file is gone: rebuild the crate.
            cargo(&["clean", "-p", "sampler-kernels", "--release", "--target", "nvptx64-nvidia-cuda"], &[])?;
            cargo(&build_args, &rustc_args)?;
        }
        std::fs::read_to_string(&out_file).map_err(|e| Fail::Other(format!("{}: {e}", out_file.display())))
    }

    /// Every entry point the kernels register, with its block size.
    pub fn expected_entries() -> Vec<(&'static str, u32)> {
        let mut v: Vec<_> =
            sampler_kernels::registry::all().flat_map(|k| k.variants.iter().map(|v| (v.entry, v.threads))).collect();
        v.sort();
        v
    }

    /// The name of the function a PTX line opens (`.entry` or `.func`), if any.
    fn opens_function(line: &str) -> Option<&str> {
        let rest = line
            .strip_prefix(".visible .entry ")
            .or_else(|| line.strip_prefix(".visible .func "))
            .or_else(|| line.strip_prefix(".func "))?;
        // `.func (.param .b64 func_retval0) name(`: the name is the last word before `(`.
        let rest = if rest.starts_with('(') { &rest[rest.find(')')? + 1..] } else { rest };
        let name = rest.split('(').next()?.trim();
        (!name.is_empty()).then_some(name)
    }

    /// Renames LLVM's block labels `$L__BB{function number}_{block}` to
    /// `$L__BB_{function name}_{block}`: the function number counts the
    /// functions before it, so adding a kernel renumbered the labels of
    /// every entry after it; the name keeps each entry's text stable.
    pub fn renumber_labels(ptx: &str) -> String {
        let mut out = String::with_capacity(ptx.len() + ptx.len() / 8);
        let mut func = String::new();
        for line in ptx.split_inclusive('\n') {
            if let Some(n) = opens_function(line) {
                func = n.to_string();
            }
            let mut rest = line;
            while let Some(at) = rest.find("$L__BB") {
                out.push_str(&rest[..at]);
                let after = &rest[at + 6..];
                let digits = after.bytes().take_while(|b| b.is_ascii_digit()).count();
                if digits > 0 && after.as_bytes().get(digits) == Some(&b'_') && !func.is_empty() {
                    out.push_str("$L__BB_");
                    out.push_str(&func);
                    rest = &after[digits..];
                } else {
                    out.push_str("$L__BB");
                    rest = after;
                }
            }
            out.push_str(rest);
        }
        out
    }

    /// The text of every `.entry` of a PTX module, by name (from its
    /// `.visible .entry` line to its closing `}`).
    pub fn entries(ptx: &str) -> std::collections::BTreeMap<String, String> {
        let mut out = std::collections::BTreeMap::new();
        let mut cur: Option<(String, String)> = None;
        for line in ptx.lines() {
            if let Some(rest) = line.strip_prefix(".visible .entry ") {
                let name = rest.split('(').next().unwrap_or("").trim().to_string();
                cur = Some((name, String::new()));
            }
            if let Some((_, text)) = cur.as_mut() {
                text.push_str(line);
                text.push('\n');
                if line == "}" {
                    let (n, t) = cur.take().unwrap();
                    out.insert(n, t);
                }
            }
        }
        out
    }

    /// One line per kernel: whether its entries are unchanged, new or changed.
    pub fn per_kernel(old: &str, new: &str, check: bool) -> Vec<String> {
        let (eo, en) = (entries(old), entries(new));
        let mut lines = Vec::new();
        for k in sampler_kernels::registry::all() {
            let names: Vec<&str> = k.variants.iter().map(|v| v.entry).collect();
            let state = if names.iter().all(|e| eo.get(*e) == en.get(*e)) {
                "unchanged".to_string()
            } else if names.iter().all(|e| !eo.contains_key(*e)) {
                (if check { "stale (new kernel)" } else { "generated (new)" }).to_string()
            } else {
                let changed: Vec<&str> = names.iter().copied().filter(|e| eo.get(*e) != en.get(*e)).collect();
                format!("{} ({})", if check { "stale" } else { "generated" }, changed.join(", "))
            };
            lines.push(format!("ptx      {:<22} {state}", k.name));
        }
        lines
    }

    /// Adds the provenance header and each entry's `.maxntid` (its block
    /// size, so ptxas fits the registers to it: rustc has no launch-bounds
    /// attribute for `extern "ptx-kernel"` functions), and names the labels
    /// after their function ([`renumber_labels`]).
    fn finish(raw: &str, version: &str) -> Result<String, Fail> {
        let raw = &renumber_labels(raw);
        let entries = expected_entries();
        let mut out = String::with_capacity(raw.len() + 4096);
        out.push_str("// sampler-kernels PTX: generated by `cargo run --example regenerate` (do not edit)\n");
        out.push_str(&format!("// toolchain: {version}\n"));
        let mut in_entry: Option<u32> = None;
        for line in raw.lines() {
            out.push_str(line);
            out.push('\n');
            if let Some(rest) = line.strip_prefix(".visible .entry ") {
                let name = rest.split('(').next().unwrap_or("").trim();
                in_entry = entries.iter().find(|(e, _)| *e == name).map(|&(_, t)| t);
                if line.trim_end().ends_with(')') {
                    if let Some(t) = in_entry.take() {
                        out.push_str(&format!(".maxntid {t}, 1, 1\n"));
                    }
                }
            } else if in_entry.is_some() && line.trim() == ")" {
                let t = in_entry.take().unwrap();
                out.push_str(&format!(".maxntid {t}, 1, 1\n"));
            }
        }
        Ok(out)
    }

    /// The checks every PTX must pass (also used on the committed file).
    pub fn check_ptx(ptx: &str) -> Result<(), String> {
        let mut errs = Vec::new();
        for l in ptx.lines().filter(|l| l.contains(".extern .func")) {
            errs.push(format!(
                "PTX calls an external function (a panic or libm path reached the kernels): {}",
                l.trim()
            ));
        }
        for (e, t) in expected_entries() {
            let head = format!(".visible .entry {e}(");
            match ptx.find(&head) {
                None => errs.push(format!("missing .entry {e}")),
                Some(at) => {
                    let body = &ptx[at..ptx[at..].find('{').map_or(ptx.len(), |i| at + i)];
                    if !body.contains(&format!(".maxntid {t}, 1, 1")) {
                        errs.push(format!(".entry {e} has no `.maxntid {t}, 1, 1`"));
                    }
                }
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("\n"))
        }
    }

    /// Optional: assemble with `$PTXAS` (e.g. the one in Triton's wheel) and fail on errors.
    fn ptxas(path: &Path) -> Result<(), Fail> {
        let Some(ptxas) = std::env::var_os("PTXAS") else { return Ok(()) };
        let out = Command::new(&ptxas)
            .args(["-arch=sm_90", "-v", "-o", "/dev/null"])
            .arg(path)
            .output()
            .map_err(|e| Fail::Other(format!("PTXAS: {e}")))?;
        let log = String::from_utf8_lossy(&out.stderr);
        let spills =
            log.lines().filter(|l| l.contains("bytes spill stores") && !l.contains(" 0 bytes spill stores")).count();
        eprintln!("regenerate: ptxas ok={} ({} entries with spills)", out.status.success(), spills);
        if !out.status.success() {
            return Err(Fail::Other(format!("ptxas failed:\n{log}")));
        }
        Ok(())
    }

    pub fn run(check_only: bool) -> Result<Outcome, Fail> {
        let version = nightly()?;
        let raw = build()?;
        let new = finish(&raw, &version)?;
        check_ptx(&new).map_err(Fail::Other)?;
        let path = committed_path();
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        let tmp = std::env::temp_dir().join(format!("sampler_kernels_{}.ptx", std::process::id()));
        std::fs::write(&tmp, &new).map_err(|e| Fail::Other(e.to_string()))?;
        let asm = ptxas(&tmp);
        let _ = std::fs::remove_file(&tmp);
        asm?;
        let n = expected_entries().len();
        for l in per_kernel(&old, &new, check_only) {
            println!("{l}");
        }
        if old == new {
            eprintln!("regenerate: PTX unchanged ({n} entries, {} bytes)", new.len());
            return Ok(Outcome::Unchanged);
        }
        let summary = diff_summary(&old, &new);
        let header = |t: &str| t.lines().nth(1).unwrap_or("").to_string();
        if check_only && header(&old) != header(&new) {
            check_ptx(&old).map_err(|e| Fail::Other(format!("committed PTX: {e}")))?;
            return Err(Fail::Toolchain(format!(
                "the committed PTX was built by another toolchain ({:?}; here {version:?}): \
                 LLVM output differs between nightlies, so it cannot be compared byte for byte \
                 (its structure checks pass; regenerate with that nightly, or regenerate and commit)",
                header(&old)
            )));
        }
        if check_only {
            return Ok(Outcome::Stale(format!("{}: stale: {summary}", path.display())));
        }
        std::fs::create_dir_all(path.parent().unwrap()).map_err(|e| Fail::Other(e.to_string()))?;
        std::fs::write(&path, &new).map_err(|e| Fail::Other(format!("{}: {e}", path.display())))?;
        Ok(Outcome::Written(format!("{}: written ({n} entries): {summary}", path.display())))
    }
}

/// The AscendC part: one source per kernel under `sampler-host/ascendc/`,
/// written by `sampler_host::runtime::device::ascend::write_sources` from the
/// sources the DSL's AscendC emitter embeds in each kernel module.
mod ascendc {
    use super::*;

    pub fn dir() -> PathBuf {
        workspace_root().join("sampler-host/ascendc")
    }

    pub fn run(check: bool) -> Result<Outcome, Fail> {
        let mut changed = Vec::new();
        // One line per kernel: generated, unchanged, or skipped and why.
        for k in sampler_kernels::registry::all() {
            let Some(src) = k.ascendc else {
                println!("ascendc  {:<22} skipped: {}", k.name, k.ascendc_skipped.unwrap_or("no AscendC source"));
                continue;
            };
            let p = dir().join(format!("{}.cpp", k.name));
            let old = std::fs::read_to_string(&p).unwrap_or_default();
            let state = if old == src {
                "unchanged"
            } else if old.is_empty() {
                if check {
                    "stale (missing)"
                } else {
                    "generated (new)"
                }
            } else if check {
                "stale"
            } else {
                "generated"
            };
            println!("ascendc  {:<22} {state}", k.name);
            if old != src {
                changed.push(format!("{}.cpp: {}", k.name, diff_summary(&old, src)));
            }
        }
        if changed.is_empty() {
            return Ok(Outcome::Unchanged);
        }
        if check {
            return Ok(Outcome::Stale(changed.join("\n    ")));
        }
        sampler_host::runtime::device::ascend::write_sources(&dir())
            .map_err(|e| Fail::Other(format!("{}: {e}", dir().display())))?;
        Ok(Outcome::Written(changed.join("\n    ")))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.iter().any(|a| a == "--check");
    let only_ptx = args.iter().any(|a| a == "--ptx");
    let only_ascendc = args.iter().any(|a| a == "--ascendc");
    if let Some(bad) = args.iter().find(|a| !matches!(a.as_str(), "--check" | "--ptx" | "--ascendc")) {
        eprintln!("regenerate: unknown argument `{bad}` (expected --check, --ptx, --ascendc)");
        return ExitCode::from(2);
    }
    let mut code = 0u8;
    // ---- AscendC part (sampler-host/ascendc/*.cpp) ----
    if !only_ptx {
        match ascendc::run(check) {
            Ok(Outcome::Unchanged) => println!("ascendc: unchanged"),
            Ok(Outcome::Written(s)) => println!("ascendc: {s}"),
            Ok(Outcome::Stale(s)) => {
                println!("ascendc: {s}\n     run `cargo run --example regenerate -- --ascendc` and commit the result");
                code = 1;
            }
            Err(Fail::Toolchain(m)) | Err(Fail::Other(m)) => {
                println!("ascendc: FAILED: {m}");
                code = 1;
            }
        }
    }
    if only_ascendc {
        return ExitCode::from(code);
    }
    // ---- PTX part ----
    match ptx::run(check) {
        Ok(Outcome::Unchanged) => println!("ptx: unchanged"),
        Ok(Outcome::Written(s)) => println!("ptx: {s}"),
        Ok(Outcome::Stale(s)) => {
            println!("ptx: {s}\n     run `cargo run --example regenerate` and commit the result");
            code = 1;
        }
        Err(Fail::Toolchain(m)) => {
            println!("ptx: SKIPPED: {m}");
            code = code.max(77);
        }
        Err(Fail::Other(m)) => {
            println!("ptx: FAILED: {m}");
            code = 1;
        }
    }
    ExitCode::from(code)
}
