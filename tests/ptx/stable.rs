//! Adding a kernel changes only the new kernel's PTX entries: the text of
//! every existing entry stays byte for byte (issue 18; labels are named
//! after their function, `regenerate::ptx::renumber_labels`).
//!
//! Copies the workspace to a temporary directory, appends a throwaway
//! kernel to `sampler-kernels/src/kernels/mod.rs`, builds its PTX with
//! nightly and compares every entry with the committed PTX. Needs nightly
//! with rust-src; skips, loudly, without them (or when the committed PTX was
//! built by another nightly, whose LLVM output cannot be compared).

use crate::regenerate;

use std::path::Path;

use regenerate::{ptx, Fail};

fn skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "\n{0}\n!!! SKIPPED: {msg}\n{0}", "!".repeat(78));
}

/// Copies `from` into `to`, leaving out build output and git metadata.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let name = e.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        let (src, dst) = (e.path(), to.join(&name));
        if e.file_type()?.is_dir() {
            copy_tree(&src, &dst)?;
        } else if e.file_type()?.is_file() {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

const THROWAWAY: &str = r#"

// kernels/mod.rs holds only the family modules: the kernel brings its import.
use sampler_macros::kernel;

/// A throwaway kernel added by tests/ptx/stable.rs.
#[kernel(tile = [256], threads = [128])]
pub fn zz_throwaway(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let v = load(x, off, n);
    store(y, off, v * 2.0 - reduce_max(v));
}
"#;

#[test]
fn adding_a_kernel_changes_no_existing_entry() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = std::fs::read_to_string(ptx::committed_path()).expect("committed PTX");
    let version = match ptx::nightly() {
        Ok(v) => v,
        Err(Fail::Toolchain(m)) | Err(Fail::Other(m)) => return skip(&format!("PTX stability not checked: {m}")),
    };
    if committed.lines().nth(1) != Some(&format!("// toolchain: {version}")) {
        return skip(&format!(
            "PTX stability not checked: the committed PTX was built by another nightly ({:?}; here {version:?})",
            committed.lines().nth(1).unwrap_or("")
        ));
    }
    let tmp = std::env::temp_dir().join(format!("sampler-ptx-stable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    copy_tree(root, &tmp).expect("copy the workspace");
    let kernels = tmp.join("sampler-kernels/src/kernels/mod.rs");
    let mut src = std::fs::read_to_string(&kernels).unwrap();
    src.push_str(THROWAWAY);
    std::fs::write(&kernels, src).unwrap();
    // Its own build directory: a shared one could hand back the other tree's PTX.
    let built = ptx::build_finished_at(&tmp, &root.join("target/ptx-stable"));
    let _ = std::fs::remove_dir_all(&tmp);
    let new = match built {
        Ok(p) => p,
        Err(Fail::Toolchain(m)) => return skip(&format!("PTX stability not checked: {m}")),
        Err(Fail::Other(m)) => panic!("building the PTX with a throwaway kernel failed: {m}"),
    };
    let (old_e, new_e) = (ptx::entries(&committed), ptx::entries(&new));
    assert!(new_e.contains_key("zz_throwaway_t256"), "the throwaway kernel's entry is missing");
    let mut changed = Vec::new();
    for (name, text) in &old_e {
        match new_e.get(name) {
            Some(t) if t == text => {}
            Some(t) => {
                let line = text.lines().zip(t.lines()).position(|(a, b)| a != b).unwrap_or(0);
                changed.push(format!(
                    "{name} (first difference at line {} of the entry: {:?} -> {:?})",
                    line + 1,
                    text.lines().nth(line).unwrap_or(""),
                    t.lines().nth(line).unwrap_or("")
                ));
            }
            None => changed.push(format!("{name} (gone)")),
        }
    }
    assert!(
        changed.is_empty(),
        "adding a kernel changed {} existing entries:\n  {}",
        changed.len(),
        changed.join("\n  ")
    );
    assert_eq!(new_e.len(), old_e.len() + 1, "only the throwaway entry is new");
}
