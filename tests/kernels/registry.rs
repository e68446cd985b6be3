//! The kernel registry: every `#[kernel]` of `sampler_kernels::kernels`
//! is registered once, with its parameters and tile variants, and its
//! run-time checked host entry (`cpu_dyn`) rejects bad arguments with a
//! typed `ArgError` instead of panicking.

use sampler_kernels::registry;
use sampler_kernels::rt::cpu::{Arg, ArgError, Gm};
use sampler_kernels::spec::{KernelSpec, ParamKind, Prim};

fn specs() -> Vec<&'static KernelSpec> {
    let mut v: Vec<_> = registry::all().collect();
    v.sort_by_key(|k| k.name);
    v
}

#[test]
fn registry_lists_every_kernel_once() {
    let names: Vec<_> = specs().iter().map(|k| k.name).collect();
    let mut dedup = names.clone();
    dedup.dedup();
    assert_eq!(names, dedup, "a kernel is registered twice");
    // The pipeline's kernels are all there (the registry is the only list).
    for name in [
        "mask_check",
        "force_topn",
        "process",
        "draw",
        "process_draw",
        "process_prefix_draw",
        "verify",
        "finalize",
        "token_info_top",
        "process_draw_head",
        "finalize_info_top",
        "process_draw_finish",
        "prefix_draw_finish",
    ] {
        assert_eq!(registry::find(name).map(|k| k.name), Some(name), "kernel `{name}` is not registered");
    }
    for k in specs() {
        assert_eq!(registry::find(k.name).map(|s| s.name), Some(k.name));
    }
    assert!(registry::find("no_such_kernel").is_none());
}

#[test]
fn every_kernel_has_params_and_variants() {
    for k in specs() {
        assert!(!k.params.is_empty(), "{}: no parameters", k.name);
        assert!(k.params.iter().any(|p| matches!(p.kind, ParamKind::GmMut(_))), "{}: writes no buffer", k.name);
        let mut pnames: Vec<_> = k.params.iter().map(|p| p.name).collect();
        pnames.sort();
        pnames.dedup();
        assert_eq!(pnames.len(), k.params.len(), "{}: duplicate parameter names", k.name);
        assert!(!k.variants.is_empty(), "{}: no variants", k.name);
        let mut tiles: Vec<_> = k.variants.iter().map(|v| v.tile).collect();
        for v in k.variants {
            assert!(v.tile.is_power_of_two(), "{}: tile {}", k.name, v.tile);
            assert!(
                v.threads.is_power_of_two() && v.threads <= 1024 && v.threads <= v.tile,
                "{}: threads {}",
                k.name,
                v.threads
            );
            assert_eq!(v.entry, format!("{}_t{}", k.name, v.tile));
        }
        tiles.dedup();
        assert_eq!(tiles.len(), k.variants.len(), "{}: duplicate tiles", k.name);
    }
}

#[test]
fn kernel_modules_match_their_registration() {
    use sampler_kernels::kernels as ks;
    let modules: &[(&str, &[sampler_kernels::spec::ParamSpec], &[sampler_kernels::spec::Variant])] = &[
        (ks::mask_check::NAME, ks::mask_check::PARAMS, ks::mask_check::VARIANTS),
        (ks::force_topn::NAME, ks::force_topn::PARAMS, ks::force_topn::VARIANTS),
        (ks::process::NAME, ks::process::PARAMS, ks::process::VARIANTS),
        (ks::draw::NAME, ks::draw::PARAMS, ks::draw::VARIANTS),
        (ks::finalize::NAME, ks::finalize::PARAMS, ks::finalize::VARIANTS),
    ];
    for (name, params, variants) in modules {
        let k = registry::find(name).unwrap();
        assert_eq!(k.params.len(), params.len());
        for (a, b) in k.params.iter().zip(params.iter()) {
            assert_eq!((a.name, a.kind), (b.name, b.kind));
        }
        assert_eq!(k.variants, *variants);
    }
    // Spot checks against the kernel sources.
    let p = registry::find("process").unwrap();
    assert_eq!(p.params[0].name, "cand");
    assert_eq!(p.params[0].kind, ParamKind::Gm(Prim::F32));
    assert_eq!(p.params[1].kind, ParamKind::Scalar(Prim::U32));
    assert_eq!(p.params.last().unwrap().kind, ParamKind::GmMut(Prim::F32));
    let f = registry::find("finalize").unwrap();
    assert_eq!(f.variants.len(), 1, "finalize has no tiles: one scalar variant");
    assert_eq!((f.variants[0].tile, f.variants[0].threads, f.variants[0].entry), (1, 1, "finalize_t1"));
}

/// A well-typed argument for a parameter, over `buf` (unused: every call
/// below fails its check before the kernel runs).
fn good_arg(kind: ParamKind, bufs: &mut Bufs) -> Arg {
    match kind {
        ParamKind::Gm(p) | ParamKind::GmMut(p) => match p {
            Prim::Bool => Arg::GmBool(Gm::new_mut(&mut bufs.b)),
            Prim::I32 => Arg::GmI32(Gm::new_mut(&mut bufs.i32)),
            Prim::U32 => Arg::GmU32(Gm::new_mut(&mut bufs.u32)),
            Prim::I64 => Arg::GmI64(Gm::new_mut(&mut bufs.i64)),
            Prim::U64 => Arg::GmU64(Gm::new_mut(&mut bufs.u64)),
            Prim::F32 => Arg::GmF32(Gm::new_mut(&mut bufs.f32)),
            Prim::F64 => Arg::GmF64(Gm::new_mut(&mut bufs.f64)),
        },
        ParamKind::Logits => Arg::Logits(Gm::new_mut(&mut bufs.f32).into()),
        ParamKind::Scalar(p) => match p {
            Prim::Bool => Arg::Bool(false),
            Prim::I32 => Arg::I32(0),
            Prim::U32 => Arg::U32(0),
            Prim::I64 => Arg::I64(0),
            Prim::U64 => Arg::U64(0),
            Prim::F32 => Arg::F32(0.0),
            Prim::F64 => Arg::F64(0.0),
        },
    }
}

/// A wrong argument for a parameter, and how `ArgError` describes it.
fn wrong_arg(kind: ParamKind, bufs: &mut Bufs) -> (Arg, &'static str) {
    match kind {
        // A scalar where a buffer is expected.
        ParamKind::Gm(_) | ParamKind::GmMut(_) | ParamKind::Logits => (Arg::U64(7), "u64"),
        // A buffer where a scalar is expected.
        ParamKind::Scalar(_) => (Arg::GmBool(Gm::new_mut(&mut bufs.b)), "Gm<bool>"),
    }
}

fn describe(kind: ParamKind) -> String {
    let p = |p: Prim| format!("{p:?}").to_lowercase();
    match kind {
        ParamKind::Gm(e) => format!("Gm<{}>", p(e)),
        ParamKind::GmMut(e) => format!("GmMut<{}>", p(e)),
        ParamKind::Scalar(e) => p(e),
        ParamKind::Logits => "Logits".into(),
    }
}

#[derive(Default)]
struct Bufs {
    b: Vec<bool>,
    i32: Vec<i32>,
    u32: Vec<u32>,
    i64: Vec<i64>,
    u64: Vec<u64>,
    f32: Vec<f32>,
    f64: Vec<f64>,
}

#[test]
fn cpu_dyn_rejects_a_wrong_argument_count() {
    let mut bufs = Bufs::default();
    for k in specs() {
        let args: Vec<Arg> = k.params.iter().map(|p| good_arg(p.kind, &mut bufs)).collect();
        for n in [0, args.len() - 1, args.len() + 1] {
            let mut a = args.clone();
            a.resize(n, Arg::U32(0));
            // SAFETY: the argument check fails before the kernel touches a buffer.
            let r = unsafe { (k.cpu)(0, &a) };
            assert_eq!(r, Err(ArgError::Count { kernel: k.name, expected: args.len(), got: n }));
            assert_eq!(
                r.unwrap_err().to_string(),
                format!("kernel `{}` takes {} arguments, got {n}", k.name, args.len())
            );
        }
    }
}

#[test]
fn cpu_dyn_rejects_a_wrong_argument_type() {
    let mut bufs = Bufs::default();
    for k in specs() {
        for (i, p) in k.params.iter().enumerate() {
            let mut args: Vec<Arg> = k.params.iter().map(|p| good_arg(p.kind, &mut bufs)).collect();
            let (bad, got) = wrong_arg(p.kind, &mut bufs);
            args[i] = bad;
            // SAFETY: the argument check fails before the kernel touches a buffer.
            let r = unsafe { (k.cpu)(0, &args) };
            let expected = describe(p.kind);
            match r {
                Err(ArgError::Type { kernel, index, param, expected: e, got: g }) => {
                    assert_eq!((kernel, index, param, g), (k.name, i, p.name, got), "{}", k.name);
                    assert_eq!(e, expected, "{}.{}", k.name, p.name);
                }
                other => panic!("{}: argument {i} (`{}`): expected a type error, got {other:?}", k.name, p.name),
            }
        }
        // A buffer of the wrong element type is rejected too.
        if let Some(i) =
            k.params.iter().position(|p| matches!(p.kind, ParamKind::Gm(Prim::F32) | ParamKind::GmMut(Prim::F32)))
        {
            let mut args: Vec<Arg> = k.params.iter().map(|p| good_arg(p.kind, &mut bufs)).collect();
            args[i] = Arg::GmF64(Gm::new_mut(&mut bufs.f64));
            // SAFETY: as above.
            let r = unsafe { (k.cpu)(0, &args) };
            assert!(matches!(r, Err(ArgError::Type { index, got: "Gm<f64>", .. }) if index == i), "{}: {r:?}", k.name);
        }
        // A `Logits` parameter takes `Arg::Logits` only: f32 logits as a plain `Gm<f32>` are refused.
        if let Some(i) = k.params.iter().position(|p| p.kind == ParamKind::Logits) {
            let mut args: Vec<Arg> = k.params.iter().map(|p| good_arg(p.kind, &mut bufs)).collect();
            args[i] = Arg::GmF32(Gm::new_mut(&mut bufs.f32));
            // SAFETY: as above.
            let r = unsafe { (k.cpu)(0, &args) };
            assert!(
                matches!(r, Err(ArgError::Type { index, expected: "Logits", got: "Gm<f32>", .. }) if index == i),
                "{}: {r:?}",
                k.name
            );
        }
    }
}

/// Every library kernel keeps the variants it had before the named sets
/// (`#[kernel(variants = NAME)]`): pinned here as literals, and checked
/// both ways against the committed PTX (each entry's `.maxntid` is its
/// block size), so a changed set or a dropped variant fails.
#[test]
fn every_kernel_keeps_its_variants() {
    /// (tiles, threads).
    type Pinned = (&'static [u32], &'static [u32]);
    const WIDE: Pinned =
        (&[64, 256, 1024, 4096, 16384, 131072, 262144, 524288], &[64, 256, 512, 512, 1024, 1024, 1024, 1024]);
    const FUSED: Pinned = (&[64, 256, 1024, 4096, 16384], &[64, 256, 512, 512, 1024]);
    const CHUNK: Pinned = (&[256, 1024, 4096, 16384], &[256, 1024, 1024, 1024]);
    const STREAM: Pinned = (&[256, 1024, 4096], &[256, 512, 1024]);
    const VOCAB: Pinned = (&[4096], &[512]);
    const CLUSTER: Pinned = (&[256, 1024, 4096], &[256, 1024, 1024]);
    const CLUSTER_TAIL: Pinned = (&[256, 1024], &[256, 1024]);
    const SCALAR: Pinned = (&[1], &[1]);
    let want: &[(&str, Pinned)] = &[
        ("draw", WIDE),
        ("finalize", SCALAR),
        ("finalize_info_top", FUSED),
        ("force_topn", WIDE),
        ("force_topn_counted", WIDE),
        ("force_topn_stream", STREAM),
        ("mask_check", VOCAB),
        ("mask_check_chunk", VOCAB),
        ("process", WIDE),
        ("process_draw", FUSED),
        ("process_draw_finish", FUSED),
        ("process_draw_head", FUSED),
        ("prefix_draw_finish", FUSED),
        ("process_prefix_draw", FUSED),
        ("raw_logprobs", WIDE),
        ("remap_draft", WIDE),
        ("row_mass", VOCAB),
        ("row_mass_bounded", VOCAB),
        ("status_merge", SCALAR),
        ("token_info", WIDE),
        ("token_info_top", FUSED),
        ("top_logprobs", WIDE),
        ("topn_chunk", CHUNK),
        ("topn_chunk_counted", CHUNK),
        ("topn_chunk_stream", STREAM),
        ("topn_cluster", CLUSTER),
        ("topn_cluster_draw_finish", CLUSTER_TAIL),
        ("topn_merge", CHUNK),
        ("topn_merge_stream", STREAM),
        ("tree_walk", WIDE),
        ("verify", WIDE),
    ];
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/sampler-host/ptx/sampler_kernels.ptx");
    let ptx = std::fs::read_to_string(path).expect("committed PTX");
    // (entry, .maxntid) of every entry in the committed PTX.
    let mut in_ptx = std::collections::BTreeMap::new();
    let mut cur: Option<&str> = None;
    for line in ptx.lines() {
        if let Some(rest) = line.strip_prefix(".visible .entry ") {
            cur = rest.split('(').next();
        } else if let (Some(e), Some(t)) = (cur, line.strip_prefix(".maxntid ")) {
            in_ptx.insert(e.to_string(), t.split(',').next().unwrap().trim().parse::<u32>().unwrap());
            cur = None;
        }
    }
    let mut expected = std::collections::BTreeMap::new();
    for &(name, (tiles, threads)) in want {
        let k = registry::find(name).unwrap_or_else(|| panic!("kernel `{name}` is not registered"));
        let got: Vec<(u32, u32)> = k.variants.iter().map(|v| (v.tile, v.threads)).collect();
        let pinned: Vec<(u32, u32)> = tiles.iter().copied().zip(threads.iter().copied()).collect();
        assert_eq!(got, pinned, "{name}: its variants changed");
        for &(t, h) in &pinned {
            expected.insert(format!("{name}_t{t}"), h);
        }
    }
    assert_eq!(in_ptx, expected, "the committed PTX's entries and block sizes are not the pinned variants");
}
