//! Emit Rust: the host (CPU) program and the nvptx entry points.
//!
//! Both targets share one body: tile ops become calls into a tile runtime
//! bound to `__rt` (`rt::cpu` on the host, `rt::gpu` on nvptx), element
//! functions calls into `__m` (`rt::elem`, shared), and every maximal
//! elementwise subtree of tile type fuses into one `__rt::mapK` closure.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};

use crate::ir::*;
use crate::ops::Op;

/// The body of a program, generic over the runtime bound to `__rt`.
pub fn body(k: &Kernel) -> TokenStream {
    block(&k.body)
}

fn block(b: &Block) -> TokenStream {
    let stmts = b.stmts.iter().map(stmt);
    quote! { #(#stmts)* }
}

fn stmt(s: &Stmt) -> TokenStream {
    match s {
        Stmt::Let { names, value, span } => {
            let v = rebound(value);
            let pats = names.iter().map(|(n, m)| if *m { quote!(mut #n) } else { quote!(#n) });
            let l = if names.len() == 1 {
                quote_spanned! {*span=> let #(#pats)* = #v; }
            } else {
                quote_spanned! {*span=> let (#(#pats),*) = #v; }
            };
            // After a cluster op only the cluster's leader goes on (the
            // check allows it only at the top of a cluster kernel's body).
            if matches!(value.kind, ExprKind::Call(Op::TopNCluster, _)) {
                quote_spanned! {*span=> #l if !__rt::cluster_leader(&__ctx) { return; } }
            } else {
                l
            }
        }
        Stmt::Assign { target, value, span, .. } => {
            // `check` has desugared compound assignments.
            let v = rebound(value);
            quote_spanned! {*span=> #target = #v; }
        }
        Stmt::Expr(e) => {
            let v = expr(e);
            quote! { #v; }
        }
        Stmt::If { cond, then, els: None, span } if cond.is_warp_scope() => {
            // `if warp_scope(len) { .. }`: the block runs on the runtime's
            // warp context when `len` fits it (on NVIDIA: warp 0 alone, the
            // tiles held by its lanes, no block barrier), else on the
            // block's; the rest of the block waits for it at the join.
            let ExprKind::Call(_, args) = &cond.kind else { unreachable!("checked by is_warp_scope") };
            let len = expr(&args[0]);
            let t = block(then);
            quote_spanned! {*span=>
                {
                    let __len: u32 = #len;
                    if __rt::warp_fits(&__ctx, __len) {
                        if let Some(__ctx) = __rt::warp_ctx(&__ctx, __len) {
                            #t
                        }
                        __rt::warp_join(&__ctx);
                    } else {
                        #t
                    }
                }
            }
        }
        Stmt::If { cond, then, els, span } => {
            let c = expr(cond);
            let t = block(then);
            match els {
                Some(e) => {
                    let e = block(e);
                    quote_spanned! {*span=> if #c { #t } else { #e } }
                }
                None => quote_spanned! {*span=> if #c { #t } },
            }
        }
        Stmt::For { var, start, end, body, span } => {
            let a = expr(start);
            let b = expr(end);
            let bd = block(body);
            quote_spanned! {*span=> for #var in (#a)..(#b) { #bd } }
        }
    }
}

/// The value of a `let` or assignment: a tile variable is cloned (it stays
/// usable; `rebind::elide` removes the rebindings that need no copy).
fn rebound(e: &Expr) -> TokenStream {
    match &e.kind {
        ExprKind::Var(id) if e.ty.is_tile() => quote_spanned!(e.span=> ::core::clone::Clone::clone(&#id)),
        _ => expr(e),
    }
}

/// Emits an expression (tile-typed elementwise trees become one fused map).
pub fn expr(e: &Expr) -> TokenStream {
    if e.ty.is_tile() && e.is_elementwise() {
        return fused_map(e);
    }
    scalar_or_op(e, &mut |x| expr(x))
}

/// Emits a node with scalar semantics; `sub` emits children.
fn scalar_or_op(e: &Expr, sub: &mut dyn FnMut(&Expr) -> TokenStream) -> TokenStream {
    let span = e.span;
    match &e.kind {
        ExprKind::Lit(l) => lit(l, &e.ty, span),
        ExprKind::Var(id) => quote!(#id),
        ExprKind::Const(Const::Tile) => quote_spanned!(span=> TILE),
        ExprKind::Const(Const::NegInf) => quote_spanned!(span=> f32::NEG_INFINITY),
        ExprKind::Const(Const::PosInf) => quote_spanned!(span=> f32::INFINITY),
        ExprKind::Unary(UnOp::Neg, x) => {
            let x = sub(x);
            quote_spanned!(span=> __m::neg(#x))
        }
        ExprKind::Unary(UnOp::Not, x) => {
            let x = sub(x);
            quote_spanned!(span=> (!#x))
        }
        ExprKind::Binary(op, l, r) => {
            let a = sub(l);
            let b = sub(r);
            binary(*op, a, b, span)
        }
        ExprKind::Cast(x, p) => {
            let x = sub(x);
            let t = format_ident!("{}", p.rust_name());
            quote_spanned!(span=> ((#x) as #t))
        }
        ExprKind::If(c, a, b) => {
            let (c, a, b) = (sub(c), sub(a), sub(b));
            quote_spanned!(span=> (if #c { #a } else { #b }))
        }
        ExprKind::Call(op, args) if op.is_elem() || op.is_scalar_fn() => {
            let f = format_ident!("{}", op.name(), span = span);
            let a: Vec<TokenStream> = args.iter().map(&mut *sub).collect();
            quote_spanned!(span=> __m::#f(#(#a),*))
        }
        ExprKind::Call(op, args) => tile_op(*op, args, span),
    }
}

fn binary(op: BinOp, a: TokenStream, b: TokenStream, span: Span) -> TokenStream {
    match op {
        BinOp::Add => quote_spanned!(span=> __m::add(#a, #b)),
        BinOp::Sub => quote_spanned!(span=> __m::sub(#a, #b)),
        BinOp::Mul => quote_spanned!(span=> __m::mul(#a, #b)),
        BinOp::Div => quote_spanned!(span=> __m::div(#a, #b)),
        BinOp::Rem => quote_spanned!(span=> __m::rem(#a, #b)),
        BinOp::Shl => quote_spanned!(span=> (#a).wrapping_shl((#b) as u32)),
        BinOp::Shr => quote_spanned!(span=> (#a).wrapping_shr((#b) as u32)),
        BinOp::Lt => quote_spanned!(span=> (#a < #b)),
        BinOp::Le => quote_spanned!(span=> (#a <= #b)),
        BinOp::Gt => quote_spanned!(span=> (#a > #b)),
        BinOp::Ge => quote_spanned!(span=> (#a >= #b)),
        BinOp::Eq => quote_spanned!(span=> (#a == #b)),
        BinOp::Ne => quote_spanned!(span=> (#a != #b)),
        BinOp::And => quote_spanned!(span=> (#a && #b)),
        BinOp::Or => quote_spanned!(span=> (#a || #b)),
        BinOp::BitAnd => quote_spanned!(span=> (#a & #b)),
        BinOp::BitOr => quote_spanned!(span=> (#a | #b)),
        BinOp::BitXor => quote_spanned!(span=> (#a ^ #b)),
    }
}

fn lit(l: &Lit, ty: &Ty, span: Span) -> TokenStream {
    match l {
        Lit::Bool(b) => quote_spanned!(span=> #b),
        Lit::Int(v, _) => match ty {
            Ty::Scalar(p) if p.is_float() => {
                let x = proc_macro2::Literal::f64_unsuffixed(*v as f64);
                let t = format_ident!("{}", p.rust_name());
                quote_spanned!(span=> (#x as #t))
            }
            Ty::Scalar(p) => {
                let t = format_ident!("{}", p.rust_name());
                let x = proc_macro2::Literal::u64_unsuffixed(*v);
                quote_spanned!(span=> (#x as #t))
            }
            _ => {
                let x = proc_macro2::Literal::u64_unsuffixed(*v);
                quote_spanned!(span=> #x)
            }
        },
        Lit::Float(v, _) => {
            let x = proc_macro2::Literal::f64_unsuffixed(*v);
            match ty {
                Ty::Scalar(p) => {
                    let t = format_ident!("{}", p.rust_name());
                    quote_spanned!(span=> (#x as #t))
                }
                _ => quote_spanned!(span=> (#x as f32)),
            }
        }
    }
}

/// A tile op: `__rt::op(&__ctx, args..)`; tiles by reference, buffers and scalars by value.
fn tile_op(op: Op, args: &[Expr], span: Span) -> TokenStream {
    let f = format_ident!("{}", op.name(), span = span);
    let a = args.iter().map(|x| {
        let v = expr(x);
        if x.ty.is_tile() {
            quote!(&#v)
        } else {
            v
        }
    });
    quote_spanned!(span=> __rt::#f(&__ctx, #(#a),*))
}

/// One fused map over the tile leaves of an elementwise tree.
fn fused_map(e: &Expr) -> TokenStream {
    let mut leaves: Vec<(TokenStream, String)> = Vec::new(); // (tile expr, dedupe key)
    let mut scalars: Vec<TokenStream> = Vec::new();
    let body = elem_body(e, &mut leaves, &mut scalars);
    let span = e.span;
    if leaves.len() > 4 {
        return quote_spanned!(span=> compile_error!("more than 4 distinct tiles in one elementwise expression: bind part of it with `let`"));
    }
    let map = format_ident!("map{}", leaves.len().max(1));
    let lets_s = scalars.iter().enumerate().map(|(i, s)| {
        let n = format_ident!("__s{}", i);
        quote!(let #n = #s;)
    });
    let lets_t = leaves.iter().enumerate().map(|(i, (t, _))| {
        let n = format_ident!("__t{}", i);
        quote!(let #n = &#t;)
    });
    let ops = (0..leaves.len()).map(|i| format_ident!("__t{}", i));
    let params = (0..leaves.len()).map(|i| format_ident!("__e{}", i));
    quote_spanned! {span=> {
        #(#lets_s)*
        #(#lets_t)*
        __rt::#map(&__ctx, #(#ops),*, move |#(#params),*| #body)
    }}
}

fn elem_body(e: &Expr, leaves: &mut Vec<(TokenStream, String)>, scalars: &mut Vec<TokenStream>) -> TokenStream {
    if !e.ty.is_tile() {
        // A scalar leaf: computed once, captured by the closure.
        if matches!(e.kind, ExprKind::Lit(_) | ExprKind::Const(_) | ExprKind::Var(_)) {
            return expr(e);
        }
        let v = expr(e);
        let n = format_ident!("__s{}", scalars.len());
        scalars.push(v);
        return quote!(#n);
    }
    if !e.is_elementwise() {
        let key = match &e.kind {
            ExprKind::Var(id) => id.to_string(),
            _ => format!("__expr{}", leaves.len()),
        };
        let idx = match leaves.iter().position(|(_, k)| *k == key) {
            Some(i) => i,
            None => {
                leaves.push((expr(e), key));
                leaves.len() - 1
            }
        };
        let n = format_ident!("__e{}", idx);
        return quote!(#n);
    }
    scalar_or_op(e, &mut |x| elem_body(x, leaves, scalars))
}

/// Rust type of a parameter on the host (`Gm<T>` views, scalars; a
/// `Logits` parameter takes anything that converts to `rt::cpu::Logits`, a
/// `Gm<f32>` included).
pub fn host_param_type(p: &Param) -> TokenStream {
    if p.logits {
        return quote!(impl ::core::convert::Into<::sampler_kernels::rt::cpu::Logits>);
    }
    host_ty(&p.ty)
}

fn host_ty(t: &Ty) -> TokenStream {
    match t {
        Ty::Gm(p, _) => {
            let p = format_ident!("{}", p.rust_name());
            quote!(::sampler_kernels::rt::cpu::Gm<#p>)
        }
        Ty::Scalar(p) => {
            let p = format_ident!("{}", p.rust_name());
            quote!(#p)
        }
        _ => quote!(()),
    }
}

/// The parameters of a PTX entry point for a kernel parameter: a raw
/// pointer or a scalar; a `Logits` parameter is two, its pointer (bytes)
/// and its element type code `__dtype_{name}` (`u32`).
pub fn ptx_params(p: &Param) -> TokenStream {
    let n = &p.name;
    if p.logits {
        let d = logits_dtype_ident(p);
        return quote!(#n: *mut u8, #d: u32);
    }
    let t = match &p.ty {
        Ty::Gm(e, _) => {
            let e = format_ident!("{}", e.rust_name());
            quote!(*mut #e)
        }
        other => host_ty(other),
    };
    quote!(#n: #t)
}

/// Name of the element type code parameter of a `Logits` parameter at a PTX entry point.
pub fn logits_dtype_ident(p: &Param) -> Ident {
    format_ident!("__dtype_{}", p.name)
}

/// `Arg` variant name for a parameter (`GmF32`, `U32`, `Logits`, ...).
pub fn arg_variant(p: &Param) -> Ident {
    if p.logits {
        return format_ident!("Logits");
    }
    let (prefix, p) = match &p.ty {
        Ty::Gm(p, _) => ("Gm", *p),
        Ty::Scalar(p) => ("", *p),
        _ => ("", Prim::U32),
    };
    let mut s = p.rust_name().to_string();
    s[..1].make_ascii_uppercase();
    format_ident!("{}{}", prefix, s)
}

/// The kernel's text for parameter `name`: the rest of a doc line
/// `- `name`: ...` (or `- `a`, `name`: ...`), shapes included, if any.
fn param_doc(docs: &[syn::Attribute], name: &str) -> Option<String> {
    let tick = format!("`{name}`");
    for a in docs {
        let syn::Meta::NameValue(nv) = &a.meta else { continue };
        let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &nv.value else { continue };
        let line = s.value();
        let line = line.trim();
        let Some(rest) = line.strip_prefix("- ") else { continue };
        // Several `- `a`: ..; `b`: ..` entries may share a line: take the one naming us.
        for part in rest.split("; ") {
            if let Some((head, text)) = part.split_once(':') {
                if head.split(',').any(|h| h.trim() == tick) {
                    return Some(text.trim().to_string());
                }
            }
        }
    }
    None
}

/// The typed launch arguments of a kernel: `Args<B>`, one named field per
/// parameter in signature order (global buffers as the device's handle type
/// `B`, scalars typed), and `Args::list` giving them as
/// `sampler_kernels::spec::LaunchArg<B>` in launch order. Every device
/// launches through it, so no backend keeps a positional argument list.
pub fn args_struct(k: &Kernel) -> TokenStream {
    let name = k.name.to_string();
    let n = proc_macro2::Literal::usize_unsuffixed(k.params.len());
    let fields = k.params.iter().map(|p| {
        let f = &p.name;
        let (ty, what) = match &p.ty {
            Ty::Gm(..) if p.logits => (
                quote!(B),
                "`Logits` buffer: f32, bf16 or f16 as the device binds it, read as f32 (read only).".to_string(),
            ),
            Ty::Gm(e, w) => (
                quote!(B),
                format!(
                    "`{}` buffer, {} ({}).",
                    e.rust_name(),
                    if *w { "written by the kernel" } else { "read only" },
                    p.ty.describe()
                ),
            ),
            t => {
                let pr = format_ident!("{}", t.prim().unwrap_or(Prim::U32).rust_name());
                (quote!(#pr), format!("`{}` scalar.", t.prim().unwrap_or(Prim::U32).rust_name()))
            }
        };
        let doc = match param_doc(&k.docs, &f.to_string()) {
            Some(d) => format!("{what} {d}"),
            None => what,
        };
        quote! { #[doc = #doc] pub #f: #ty, }
    });
    let items = k.params.iter().map(|p| {
        let f = &p.name;
        match &p.ty {
            Ty::Gm(..) => quote!(::sampler_kernels::spec::LaunchArg::Buf(self.#f)),
            _ => {
                let v = arg_variant(p);
                quote!(::sampler_kernels::spec::LaunchArg::#v(self.#f))
            }
        }
    });
    let doc = format!("Typed launch arguments of `{name}`, one field per parameter of its signature (global buffers as the device's handle type `B`).");
    quote! {
        #[doc = #doc]
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct Args<B> {
            #(#fields)*
        }

        impl<B: Copy> Args<B> {
            /// The arguments in signature (launch) order, matching [`PARAMS`].
            pub fn list(&self) -> [::sampler_kernels::spec::LaunchArg<B>; #n] {
                [#(#items),*]
            }
        }
    }
}
