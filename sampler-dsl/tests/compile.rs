//! Front-end unit tests: `sampler_dsl::compile` on token streams.
//!
//! Type inference (literal settling, tile vs scalar shapes), the desugaring
//! of compound assignments, elementwise fusion in the emitted Rust, the
//! 4-tile limit of one fused map, attributes and entry names, and error
//! collection. `tests/ui` (facade package) covers every error message
//! through rustc; `snapshots.rs` pins the emitted Rust of small kernels.

use proc_macro2::TokenStream;
use quote::quote;
use sampler_dsl::ir::*;
use sampler_dsl::ops::Op;

fn compile(attr: TokenStream, item: TokenStream) -> Kernel {
    match sampler_dsl::compile(attr, item) {
        Ok(k) => k,
        Err(e) => panic!("unexpected errors: {:?}", e.into_iter().map(|e| e.to_string()).collect::<Vec<_>>()),
    }
}

fn errors(attr: TokenStream, item: TokenStream) -> Vec<String> {
    match sampler_dsl::compile(attr, item) {
        Ok(_) => panic!("expected errors"),
        Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
    }
}

/// The value of the `let` that binds `name` (searched recursively).
fn let_value<'a>(b: &'a Block, name: &str) -> &'a Expr {
    use sampler_dsl::visit::{walk_stmt, Visit};
    struct Find<'a, 'n>(&'n str, Option<&'a Expr>);
    impl<'a> Visit<'a> for Find<'a, '_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            match s {
                _ if self.1.is_some() => {}
                Stmt::Let { names, value, .. } if names.iter().any(|(n, _)| n == self.0) => self.1 = Some(value),
                _ => walk_stmt(self, s),
            }
        }
    }
    let mut f = Find(name, None);
    f.visit_block(b);
    f.1.unwrap_or_else(|| panic!("no `let {name}`"))
}

fn ty_of(k: &Kernel, name: &str) -> Ty {
    let_value(&k.body, name).ty.clone()
}

fn body_string(k: &Kernel) -> String {
    sampler_dsl::emit::rust::body(k).to_string()
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

// ---- type inference -------------------------------------------------------

#[test]
fn tile_and_scalar_shapes() {
    let k = compile(
        quote!(tile = [256]),
        quote! {
            fn k(x: Gm<f32>, ids: Gm<i32>, n: u32, kk: i32, y: GmMut<f32>) {
                let r = row();
                let off = (r as u64) * (n as u64);
                let v = load(x, off, n);
                let m = reduce_max(v);
                let d = v - m;
                let pos = v > 0.0;
                let w = to_fixed(exp(d));
                let total = reduce_sum(w);
                let excl = exclusive_scan(w);
                let keep = (iota(n) < (kk as u32)) | (kk < 0);
                let kept = select(keep, w, 0u64);
                let c = count(pos);
                let first = first_where(pos);
                let (sv, si) = sort_desc(v, load(ids, off, n));
                let lim = min(TILE, n);
                let u = uniform53(7u64, 1u64);
                let lse = ln_fixed(total);
                let g = get(v, 0u32);
                let has = any(pos);
                store(y, off, d - lse);
            }
        },
    );
    use Prim::*;
    assert_eq!(ty_of(&k, "r"), Ty::Scalar(U32));
    assert_eq!(ty_of(&k, "off"), Ty::Scalar(U64));
    assert_eq!(ty_of(&k, "v"), Ty::Tile(F32));
    assert_eq!(ty_of(&k, "m"), Ty::Scalar(F32));
    assert_eq!(ty_of(&k, "d"), Ty::Tile(F32));
    assert_eq!(ty_of(&k, "pos"), Ty::Tile(Bool));
    assert_eq!(ty_of(&k, "w"), Ty::Tile(U64));
    assert_eq!(ty_of(&k, "total"), Ty::Scalar(U64));
    assert_eq!(ty_of(&k, "excl"), Ty::Tile(U64));
    assert_eq!(ty_of(&k, "keep"), Ty::Tile(Bool));
    assert_eq!(ty_of(&k, "kept"), Ty::Tile(U64));
    assert_eq!(ty_of(&k, "c"), Ty::Scalar(U32));
    assert_eq!(ty_of(&k, "first"), Ty::Scalar(I32));
    assert_eq!(ty_of(&k, "sv"), Ty::Tuple(vec![Ty::Tile(F32), Ty::Tile(I32)]));
    assert_eq!(ty_of(&k, "lim"), Ty::Scalar(U32));
    assert_eq!(ty_of(&k, "u"), Ty::Scalar(U64));
    assert_eq!(ty_of(&k, "lse"), Ty::Scalar(F32));
    assert_eq!(ty_of(&k, "g"), Ty::Scalar(F32));
    assert_eq!(ty_of(&k, "has"), Ty::Scalar(Bool));
}

#[test]
fn literals_settle_on_their_partner() {
    let k = compile(
        quote!(tile = [4]),
        quote! {
            fn k(a: u64, b: Gm<f32>, y: GmMut<f32>) {
                let s = a + 1;
                let t = 2 * a;
                let f = load(b, 0u64, 4u32) * 0.5;
                let q = load_scalar(b, 0u64) / 2.0;
                let i = if a > 3 { 1i32 } else { 0 };
                let z = full(4u32, 0.0f32);
                store(y, 0u64, f - z);
            }
        },
    );
    let lit_ty = |name: &str, right: bool| -> Ty {
        match &let_value(&k.body, name).kind {
            ExprKind::Binary(_, l, r) => {
                if right {
                    r.ty.clone()
                } else {
                    l.ty.clone()
                }
            }
            ExprKind::If(_, a, b) => {
                if right {
                    b.ty.clone()
                } else {
                    a.ty.clone()
                }
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(lit_ty("s", true), Ty::Scalar(Prim::U64));
    assert_eq!(lit_ty("t", false), Ty::Scalar(Prim::U64));
    assert_eq!(ty_of(&k, "t"), Ty::Scalar(Prim::U64));
    assert_eq!(lit_ty("f", true), Ty::Scalar(Prim::F32), "a literal beside a tile settles on its element type");
    assert_eq!(ty_of(&k, "f"), Ty::Tile(Prim::F32));
    assert_eq!(lit_ty("q", true), Ty::Scalar(Prim::F32));
    assert_eq!(lit_ty("i", true), Ty::Scalar(Prim::I32));
    // `a > 3`: the literal is a u64 too.
    match &let_value(&k.body, "i").kind {
        ExprKind::If(c, ..) => match &c.kind {
            ExprKind::Binary(BinOp::Gt, _, r) => assert_eq!(r.ty, Ty::Scalar(Prim::U64)),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    // The emitted literal carries the settled type.
    let body = body_string(&k);
    assert!(body.contains("(1 as u64)"), "{body}");
    assert!(body.contains("(0.5 as f32)"), "{body}");
}

#[test]
fn loop_variables_take_the_bound_type() {
    let k = compile(
        quote!(),
        quote! {
            fn k(n: u64, m: u32, y: GmMut<u64>) {
                let mut acc = 0u64;
                for i in 0..n {
                    let a = i;
                    acc += a;
                }
                for j in 0..4 {
                    let b = j;
                }
                store_scalar(y, 0u64, acc);
            }
        },
    );
    assert_eq!(ty_of(&k, "a"), Ty::Scalar(Prim::U64));
    assert_eq!(ty_of(&k, "b"), Ty::Scalar(Prim::U32), "literal bounds default to u32");
}

#[test]
fn unsuffixed_literal_in_let_needs_a_suffix() {
    let e = errors(
        quote!(),
        quote!(
            fn k(y: GmMut<u32>) {
                let a = 0;
                store_scalar(y, 0u64, a);
            }
        ),
    );
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("give the literal bound to `a` a type suffix"), "{e:?}");
}

// ---- desugaring -------------------------------------------------------------

#[test]
fn compound_assignment_desugars() {
    let k = compile(
        quote!(),
        quote! {
            fn k(y: GmMut<u32>) {
                let mut acc = 1u32;
                acc += 2;
                acc <<= 1u32;
                store_scalar(y, 0u64, acc);
            }
        },
    );
    let assigns: Vec<_> = k
        .body
        .stmts
        .iter()
        .filter_map(|s| match s {
            Stmt::Assign { target, op, value, .. } => Some((target.to_string(), *op, value)),
            _ => None,
        })
        .collect();
    assert_eq!(assigns.len(), 2);
    for ((t, op, v), want) in assigns.iter().zip([BinOp::Add, BinOp::Shl]) {
        assert_eq!(t, "acc");
        assert_eq!(*op, None, "the operator moved into the value");
        match &v.kind {
            ExprKind::Binary(o, l, r) => {
                assert_eq!(*o, want);
                assert!(matches!(&l.kind, ExprKind::Var(id) if id == "acc"));
                assert_eq!(l.ty, Ty::Scalar(Prim::U32));
                assert_eq!(r.ty, Ty::Scalar(Prim::U32));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(v.ty, Ty::Scalar(Prim::U32));
    }
    assert!(body_string(&k).contains("acc = __m :: add (acc , (2 as u32))"), "{}", body_string(&k));
}

#[test]
fn compound_assignment_on_tiles() {
    let k = compile(
        quote!(tile = [64]),
        quote! {
            fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                let mut v = load(x, 0u64, n);
                v -= reduce_max(v);
                v *= 2.0;
                store(y, 0u64, v);
            }
        },
    );
    let body = body_string(&k);
    assert_eq!(count(&body, "__rt :: map1"), 2, "{body}");
}

// ---- fusion -----------------------------------------------------------------

fn softmax_like(expr: TokenStream) -> String {
    let k = compile(
        quote!(tile = [256]),
        quote! {
            fn k(x: Gm<f32>, z: Gm<f32>, n: u32, y: GmMut<f32>) {
                let v = load(x, 0u64, n);
                let u = load(z, 0u64, n);
                let m = reduce_max(v);
                let s = 2.0f32;
                store(y, 0u64, #expr);
            }
        },
    );
    body_string(&k)
}

#[test]
fn one_map_per_fused_expression() {
    let body = softmax_like(quote!(exp(v - m) / s));
    assert_eq!(count(&body, "__rt :: map"), 1, "{body}");
    assert!(body.contains("__rt :: map1 (& __ctx , __t0 , move | __e0 |"), "{body}");
    assert!(body.contains("__m :: div (__m :: exp (__m :: sub (__e0 , m)) , s)"), "{body}");
}

#[test]
fn repeated_tile_operands_are_deduplicated() {
    let body = softmax_like(quote!(v * v - exp(v) + select(v > m, v, 0.0)));
    assert_eq!(count(&body, "__rt :: map"), 1, "{body}");
    assert!(body.contains("__rt :: map1"), "{body}");
    let body = softmax_like(quote!(v * u + u - v));
    assert_eq!(count(&body, "__rt :: map"), 1, "{body}");
    assert!(body.contains("__rt :: map2"), "{body}");
}

#[test]
fn scalar_subexpressions_are_computed_once_outside_the_map() {
    let body = softmax_like(quote!(v - reduce_max(u) * 2.0));
    assert_eq!(count(&body, "__rt :: map"), 1, "{body}");
    assert!(body.contains("let __s0 = __m :: mul (__rt :: reduce_max (& __ctx , & u) , (2.0 as f32))"), "{body}");
}

#[test]
fn tile_op_boundaries_split_maps() {
    // exclusive_scan is a tile op: the map inside it and the map around it are separate.
    let k = compile(
        quote!(tile = [256]),
        quote! {
            fn k(x: Gm<f32>, n: u32, y: GmMut<u64>) {
                let v = load(x, 0u64, n);
                store(y, 0u64, exclusive_scan(to_fixed(exp(v))) + to_fixed(v));
            }
        },
    );
    let body = body_string(&k);
    assert_eq!(count(&body, "__rt :: map"), 2, "{body}");
    assert!(body.contains("__rt :: map2"), "{body}");
}

#[test]
fn four_tiles_fuse_five_do_not() {
    let item = |e: TokenStream| {
        quote! {
            fn k(a: Gm<f32>, b: Gm<f32>, c: Gm<f32>, d: Gm<f32>, e: Gm<f32>, n: u32, y: GmMut<f32>) {
                let ta = load(a, 0u64, n);
                let tb = load(b, 0u64, n);
                let tc = load(c, 0u64, n);
                let td = load(d, 0u64, n);
                let te = load(e, 0u64, n);
                store(y, 0u64, #e);
            }
        }
    };
    let k = compile(quote!(tile = [64]), item(quote!(ta * tb + tc * td - ta)));
    let body = body_string(&k);
    assert_eq!(count(&body, "__rt :: map"), 1, "{body}");
    assert!(body.contains("__rt :: map4"), "{body}");
    // A tile op's result counts as an operand too.
    let e = errors(quote!(tile = [64]), item(quote!(ta * tb + tc * td + load(e, 0u64, n))));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("reads 5 distinct tiles, but one fused map takes at most 4"), "{e:?}");
    let e = errors(quote!(tile = [64]), item(quote!(max(ta, tb) + min(tc, td) * te)));
    assert!(e[0].contains("reads 5 distinct tiles"), "{e:?}");
    // Binding part of it with `let` is the fix.
    let k = compile(
        quote!(tile = [64]),
        quote! {
            fn k(a: Gm<f32>, b: Gm<f32>, c: Gm<f32>, d: Gm<f32>, e: Gm<f32>, n: u32, y: GmMut<f32>) {
                let ab = load(a, 0u64, n) * load(b, 0u64, n);
                store(y, 0u64, ab + load(c, 0u64, n) * load(d, 0u64, n) + load(e, 0u64, n));
            }
        },
    );
    assert!(!body_string(&k).contains("compile_error"));
}

// ---- attributes, variants, entry names --------------------------------------

#[test]
fn variants_and_default_threads() {
    let k = compile(
        quote!(tile = [64, 256, 4096]),
        quote!(
            fn k(y: GmMut<u32>) {
                store_scalar(y, 0u64, 1u32);
            }
        ),
    );
    let got: Vec<_> = k.variants.iter().map(|v| (v.tile, v.threads)).collect();
    assert_eq!(got, [(64, 64), (256, 256), (4096, 1024)]);
    let k = compile(
        quote!(tile = [64, 256], threads = [32]),
        quote!(
            fn k(y: GmMut<u32>) {
                store_scalar(y, 0u64, 1u32);
            }
        ),
    );
    let got: Vec<_> = k.variants.iter().map(|v| (v.tile, v.threads)).collect();
    assert_eq!(got, [(64, 32), (256, 32)], "one `threads` entry applies to every tile");
    let k = compile(
        quote!(),
        quote!(
            fn k(y: GmMut<u32>) {
                store_scalar(y, 0u64, 1u32);
            }
        ),
    );
    assert_eq!(k.variants, [Variant { tile: 1, threads: 1 }], "no tile: one scalar variant");
    assert!(!k.debug);
    let k = compile(
        quote!(debug),
        quote!(
            fn k(y: GmMut<u32>) {
                store_scalar(y, 0u64, 1u32);
            }
        ),
    );
    assert!(k.debug);
}

#[test]
fn a_bad_tile_size_is_reported_once() {
    let e = errors(
        quote!(tile = [100]),
        quote!(
            fn k(y: GmMut<u32>) {
                store_scalar(y, 0u64, 1u32);
            }
        ),
    );
    assert_eq!(e, ["tile size must be a power of two, got 100"]);
}

#[test]
fn entry_names() {
    assert_eq!(sampler_dsl::emit::entry_name("draw", 4096), "draw_t4096");
    let k = compile(
        quote!(tile = [64, 1024], threads = [64, 256]),
        quote!(
            pub fn my_kernel(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                store(y, 0u64, load(x, 0u64, n));
            }
        ),
    );
    let m = sampler_dsl::emit::kernel_module(&k).to_string();
    for (tile, threads) in [(64u32, 64u32), (1024, 256)] {
        let entry = format!("my_kernel_t{tile}");
        assert!(m.contains(&format!("fn {entry} (")), "PTX entry point `{entry}`: {m}");
        assert!(m.contains(&format!("tile : {tile}u32 , threads : {threads}u32")), "{m}");
        assert!(m.contains(&format!("entry : \"{entry}\"")), "{m}");
    }
    assert!(m.contains("pub mod my_kernel"), "{m}");
    assert!(m.contains("pub const NAME : & str = \"my_kernel\""), "{m}");
}

// ---- errors -----------------------------------------------------------------

#[test]
fn all_errors_are_reported_together() {
    let e = errors(
        quote!(tile = [64, 96]),
        quote! {
            async fn k(x: Gm<f32>, n: usize, y: Gm<f32>) {
                let v = load(x, 0u64, 4u32);
                while true {}
                let a = 0;
                let b = v / missing;
                store(y, 0u64, v);
            }
        },
    );
    let want = [
        "tile size must be a power of two, got 96",
        "a kernel cannot be `async`",
        "unsupported parameter type",
        "`while` loops are not supported",
        "give the literal bound to `a` a type suffix",
        "unknown name `missing`",
        "`store` writes to a read-only buffer",
    ];
    assert_eq!(e.len(), want.len(), "{e:#?}");
    for (got, want) in e.iter().zip(want) {
        assert!(got.contains(want), "{got:?} should contain {want:?}");
    }
}

#[test]
fn errors_do_not_cascade() {
    // One mistake, one error: names bound to an erroneous value (or a
    // parameter of an unsupported type) are not reported again where used.
    let e = errors(
        quote!(),
        quote! {
            fn k(n: u32, w: usize, y: GmMut<u32>) {
                let a = n + true;
                let b = a * 2u32;
                let mut c = -a;
                c += b;
                if a > b {
                    store_scalar(y, 0u64, (w as u32) + c);
                }
                for i in 0..a {}
                let d = if a > 1u32 { b } else { c };
            }
        },
    );
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(e[0].starts_with("unsupported parameter type"), "{e:?}");
    assert!(e[1].starts_with("mismatched types u32 and bool in `+`"), "{e:?}");
}

#[test]
fn literal_suffixes() {
    let one =
        |lit: TokenStream| errors(quote!(), quote!(fn k(y: GmMut<u32>) { let a = #lit; store_scalar(y, 0u64, 1u32); }));
    assert!(one(quote!(1u8))[0].starts_with("unsupported literal suffix `u8`"));
    assert!(one(quote!(1bool))[0].starts_with("unsupported literal suffix `bool`"));
    assert!(one(quote!(1.5f16))[0].starts_with("unsupported float literal suffix `f16`"));
    // `1f32` is a float literal, as in Rust.
    let k = compile(
        quote!(),
        quote!(
            fn k(y: GmMut<f32>) {
                let a = 1f32;
                store_scalar(y, 0u64, a);
            }
        ),
    );
    assert_eq!(ty_of(&k, "a"), Ty::Scalar(Prim::F32));
}

#[test]
fn expand_emits_only_the_errors() {
    // The user's item is not re-emitted: rustc would add its own errors about it.
    let out = sampler_dsl::expand(
        quote!(tile = [3]),
        quote!(
            fn k(y: GmMut<u32>) {
                store_scalar(y, 0u64, 1u32);
            }
        ),
    )
    .to_string();
    assert!(out.starts_with(":: core :: compile_error ! { \"tile size must be a power of two, got 3\" }"), "{out}");
    assert!(!out.contains("store_scalar"), "{out}");
}

#[test]
fn a_helper_call_fetches_the_helper() {
    // An unknown call (not an op, not a typo of one) asks for a `#[kernel_fn]`.
    let out = sampler_dsl::expand(
        quote!(),
        quote!(
            fn k(y: GmMut<u32>) {
                let a = helper(1u32);
                store_scalar(y, 0u64, a);
            }
        ),
    )
    .to_string();
    assert!(out.starts_with("helper ! { @ sampler_kernel_fn [] []"), "{out}");
    let e = errors(
        quote!(),
        quote!(
            fn k(y: GmMut<u32>) {
                store_scalar(y, 0u64, reduce_summ(1u32));
            }
        ),
    );
    assert!(e[0].starts_with("unknown op `reduce_summ`: did you mean `reduce_sum`?"), "{e:?}");
}

fn helpers(fns: &[TokenStream]) -> std::collections::HashMap<String, sampler_dsl::kfn::KernelFn> {
    let mut errs = sampler_dsl::parse::Errors::default();
    let mut out = std::collections::HashMap::new();
    for f in fns {
        let h = sampler_dsl::kfn::parse(&syn::parse2(f.clone()).unwrap(), &mut errs);
        sampler_dsl::kfn::check(&h, &mut errs);
        out.insert(h.sig.name.to_string(), h);
    }
    if let Err(e) = errs.check() {
        panic!("helper errors: {e}");
    }
    out
}

fn compile_helpers(item: TokenStream, fns: &[TokenStream]) -> Result<Kernel, Vec<String>> {
    match sampler_dsl::compile_with(quote!(tile = [64]), item, &helpers(fns)) {
        Ok(sampler_dsl::Compiled::Kernel(k, _)) => Ok(k),
        Ok(sampler_dsl::Compiled::NeedHelpers(n)) => panic!("needs {n:?}"),
        Err(e) => Err(e.into_iter().map(|e| e.to_string()).collect()),
    }
}

#[test]
fn helpers_are_inlined_and_their_tile_arguments_not_copied() {
    let shifted = quote!(
        fn shifted(x: Tile<f32>, s: f32) -> (Tile<f32>, f32) {
            let m = reduce_max(x) * s;
            (x - m, m)
        }
    );
    let k = compile_helpers(
        quote!(
            fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                let v = load(x, 0u64, n);
                let (d, _) = shifted(v, 2);
                store(y, 0u64, d);
            }
        ),
        &[shifted],
    )
    .unwrap();
    let body = body_string(&k);
    // `let __kf1_x = v;` was elided (`v` used directly), the literal argument settled on f32.
    assert!(!body.contains("__kf1_x"), "{body}");
    assert_eq!(ty_of(&k, "__kf1_s"), Ty::Scalar(Prim::F32));
    assert_eq!(ty_of(&k, "d"), Ty::Tile(Prim::F32));
    assert!(body.contains("reduce_max (& __ctx , & v)"), "{body}");
}

#[test]
fn helper_arguments_are_checked_against_the_parameters() {
    let scaled = quote!(
        fn scaled(x: Tile<f32>, k: u32) -> Tile<f32> {
            x * (k as f32)
        }
    );
    let e = compile_helpers(
        quote!(
            fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                let v = load(x, 0u64, n);
                let w = scaled(v, v);
                store(y, 0u64, w);
            }
        ),
        std::slice::from_ref(&scaled),
    )
    .unwrap_err();
    assert!(
        e[0].starts_with(
            "argument `k` of `scaled` has type u32, but a value of type Tile<f32> was passed: reduce the tile first"
        ),
        "{e:?}"
    );
    let e = compile_helpers(
        quote!(
            fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                store(y, 0u64, scaled(load(x, 0u64, n), 2u32) * 2.0);
            }
        ),
        &[scaled],
    )
    .unwrap_err();
    assert!(e[0].starts_with("a `#[kernel_fn]` call stands alone"), "{e:?}");
}

#[test]
fn a_kernel_without_tiles_cannot_make_one() {
    let e = errors(
        quote!(),
        quote!(
            fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                store(y, 0u64, load(x, 0u64, n));
            }
        ),
    );
    assert!(e[0].starts_with("this kernel has no `tile = [..]`"), "{e:?}");
}

#[test]
fn a_rebound_tile_is_the_same_tile_unless_assigned() {
    let k = compile(
        quote!(tile = [64]),
        quote!(
            fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                let a = load(x, 0u64, n);
                let b = a;
                store(y, 0u64, a + b);
            }
        ),
    );
    let body = body_string(&k);
    assert!(!body.contains("clone"), "elided: {body}");
    let k = compile(
        quote!(tile = [64]),
        quote!(
            fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                let a = load(x, 0u64, n);
                let mut b = a;
                b = b * 2.0;
                store(y, 0u64, a + b);
            }
        ),
    );
    let body = body_string(&k);
    assert!(body.contains("clone"), "copied: {body}");
}

#[test]
fn every_op_has_a_name_signature_and_arity() {
    for (name, op) in sampler_dsl::ops::OPS {
        assert_eq!(Op::from_name(name), Some(*op));
        assert_eq!(op.name(), *name);
        let sig = op.signature();
        assert!(sig.starts_with(&format!("{name}(")), "{sig}");
        let params = sig[name.len() + 1..sig.find(')').unwrap()].split(',').filter(|s| !s.trim().is_empty()).count();
        assert_eq!(params, op.arity(), "{sig}");
        assert_eq!(op.is_elem() as u8 + op.is_scalar_fn() as u8 + op.is_tile_op() as u8, 1);
    }
}

/// A mutable tile (`let mut w = p; w = ..;` in a loop): the host program
/// copies the tile on `let` (so `p` stays usable), and the AscendC writer
/// gives `w` its own UB slot and a mutable length, filled by UB -> UB copies.
#[test]
fn mutable_tiles_copy_on_bind_and_assign() {
    let k = compile(
        quote!(tile = [64]),
        quote! {
            fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                let p = load(x, 0u64, n);
                let mut w = p;
                for i in 0..3u32 {
                    w = max(w - p * 0.25f32, 0.0f32);
                }
                store(y, 0u64, w + p);
            }
        },
    );
    let host = sampler_dsl::emit::rust::body(&k).to_string();
    assert!(host.contains("clone"), "{host}");
    let cpp = sampler_dsl::emit::ascendc::emit(&k).expect("mutable tiles are lowered");
    assert!(cpp.contains("AscendC::DataCopy(") && cpp.contains("uint32_t t"), "{cpp}");
    assert_eq!(sampler_dsl::emit::ascendc::why_not(&k), None);
}

/// A `Logits` parameter: checked as a read-only `Gm<f32>` (loads give
/// `Tile<f32>`, `top_n` takes it, stores to it are refused), emitted as
/// `ParamKind::Logits`, a host view converted from anything `Into`
/// `rt::cpu::Logits`, `Arg::Logits` in `cpu_dyn`, and at the PTX entry its
/// pointer followed by a `u32` element type code.
#[test]
fn logits_parameters() {
    let k = compile(
        quote!(tile = [256]),
        quote! {
            fn k(x: Logits, v: u32, y: GmMut<f32>, ids: GmMut<i32>) {
                let t = load(x, 0u64, v);
                let m = load_scalar(x, 1u64);
                let (a, b) = top_n(x, 0u64, v, 4u32);
                store(y, 0u64, t - m);
                store(ids, 0u64, b);
                store(y, 4u64, a);
            }
        },
    );
    assert!(k.params[0].logits && !k.params[2].logits);
    assert_eq!(k.params[0].ty, Ty::Gm(Prim::F32, false));
    assert_eq!(ty_of(&k, "t"), Ty::Tile(Prim::F32));
    assert_eq!(ty_of(&k, "m"), Ty::Scalar(Prim::F32));
    let m = sampler_dsl::emit::kernel_module(&k).to_string();
    assert!(m.contains("ParamKind :: Logits"), "{m}");
    assert!(m.contains("impl :: core :: convert :: Into < :: sampler_kernels :: rt :: cpu :: Logits >"), "{m}");
    assert!(m.contains("__rt :: Arg :: Logits (x)"), "{m}");
    assert!(m.contains("x : * mut u8 , __dtype_x : u32"), "{m}");
    assert!(m.contains("__rt :: Logits :: from_raw (x , __dtype_x)"), "{m}");
    // Read only: a store to it is the read-only buffer error.
    let e = errors(
        quote!(tile = [256]),
        quote!(
            fn k(x: Logits, v: u32) {
                let t = load(x, 0u64, v);
                store(x, 0u64, t);
            }
        ),
    );
    assert!(e.len() == 1 && e[0].contains("writes to a read-only buffer"), "{e:?}");
}

#[test]
fn literals_must_fit_the_type_they_settle_on() {
    let ok = |body: TokenStream| {
        compile(quote!(tile = [64]), quote!(fn k(c: GmMut<i32>, u: GmMut<u32>, f: GmMut<f32>, n: u32) { #body }));
    };
    let bad = |body: TokenStream| {
        errors(quote!(tile = [64]), quote!(fn k(c: GmMut<i32>, u: GmMut<u32>, f: GmMut<f32>, n: u32) { #body }))
    };
    // The edges of each type are accepted ...
    ok(quote!(store_scalar(c, 0u64, -2147483648); store_scalar(c, 1u64, 2147483647);));
    ok(quote!(store_scalar(u, 0u64, 4294967295); store_scalar(u, 1u64, -0); store_scalar(f, 0u64, -3.4028235e38);));
    // ... one past them is not (Rust rejects these; the emitted code would wrap them).
    assert_eq!(bad(quote!(store_scalar(c, 0u64, -2147483649);)), ["the literal `-2147483649` does not fit in i32"]);
    assert_eq!(bad(quote!(store_scalar(c, 0u64, 2147483648);)), ["the literal `2147483648` does not fit in i32"]);
    assert_eq!(bad(quote!(store_scalar(u, 0u64, n + 4294967296);)), ["the literal `4294967296` does not fit in u32"]);
    assert_eq!(bad(quote!(store_scalar(u, 0u64, -1);)), ["the literal `-1` does not fit in u32"]);
    assert_eq!(bad(quote!(store_scalar(f, 0u64, 1e39);)).len(), 1);
}

#[test]
fn attribute_lists_are_not_empty_nor_repeated() {
    let item = quote!(
        fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
            store(y, 0u64, load(x, 0u64, n));
        }
    );
    assert_eq!(errors(quote!(tile = []), item.clone()).len(), 1);
    assert_eq!(errors(quote!(tile = [64], threads = []), item.clone()).len(), 1);
    let e = errors(quote!(tile = [64], tile = [128]), item.clone());
    assert_eq!(e, ["kernel option `tile` is given twice: give it once (`tile = [..]` lists every tile size)"]);
    assert_eq!(errors(quote!(tile = [64], debug = true), item.clone()).len(), 1);
    assert_eq!(compile(quote!(tile = [64], debug), item).variants.len(), 1);
}

#[test]
fn a_literal_length_above_the_smallest_tile_is_an_error() {
    let item = |n: TokenStream| quote!(fn k(x: Gm<f32>, y: GmMut<f32>) { store(y, 0u64, load(x, 0u64, #n)); });
    compile(quote!(tile = [64, 256]), item(quote!(64)));
    let e = errors(quote!(tile = [64, 256]), item(quote!(65)));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("`load` of 65 elements, but the tile size 64 holds at most 64"), "{e:?}");
}

/// `if warp_scope(len) { .. }`: the Rust body runs the block on the
/// runtime's warp context when `len` fits (then the join), else on the
/// block's, the block's statements emitted once for each; AscendC runs the
/// block as written (`if (true)`).
#[test]
fn a_warp_scope_emits_the_block_on_both_contexts() {
    let k = compile(
        quote!(tile = [256]),
        quote!(
            fn k(x: Gm<f32>, n: u32, head: u32, s: GmMut<u64>) {
                let rest = reduce_sum(to_fixed(exp(load(x, 0u64, n))));
                if warp_scope(head) {
                    let w = to_fixed(exp(load(x, 0u64, head)));
                    store_scalar(s, 0u64, rest + reduce_sum(exclusive_scan(w)) + (len(w) as u64));
                }
            }
        ),
    );
    let body = body_string(&k);
    for f in ["warp_fits", "warp_ctx", "warp_join"] {
        assert_eq!(count(&body, f), 1, "{f}: {body}");
    }
    // The scope's block twice (warp, block), the rest's sum once.
    assert_eq!(count(&body, "exclusive_scan"), 2, "{body}");
    assert_eq!(count(&body, "reduce_sum"), 3, "{body}");
    let cpp = sampler_dsl::emit::ascendc::emit(&k).expect("a warp scope is lowered");
    assert!(cpp.contains("if (true)"), "{cpp}");
}

/// A warp scope's names are scoped as Rust's: a `let` inside a nested block
/// (or a loop variable) does not make an outer name the scope's own, and
/// `TILE` (the block's) is not the scope's.
#[test]
fn a_warp_scope_sees_its_own_names_only() {
    let e = errors(
        quote!(tile = [256]),
        quote!(
            fn k(x: Gm<f32>, n: u32, c: u32, y: GmMut<f32>) {
                let t = load(x, 0u64, n);
                let mut total = 0u32;
                if warp_scope(n) {
                    if c > 0u32 {
                        let mut total = 1u32;
                        let t = load(x, 0u64, n);
                        total = total + len(t);
                    }
                    for i in 0u32..c {
                        total = i;
                    }
                    store(y, 0u64, t);
                    store(y, (TILE as u64), load(x, 0u64, n));
                }
                store(y, 0u64, full(n, total as f32));
            }
        ),
    );
    let has = |s: &str| e.iter().filter(|m| m.contains(s)).count();
    assert_eq!(has("`total` is declared outside this warp scope"), 1, "{e:?}");
    assert_eq!(has("tile `t` is from outside this warp scope"), 1, "{e:?}");
    assert_eq!(has("`TILE` is the block's tile"), 1, "{e:?}");
    assert_eq!(e.len(), 3, "{e:?}");
}
