//! The sampler tile DSL compiler, as a plain library.
//!
//! Pipeline: [`parse`] (syn -> untyped IR, spanned errors) -> [`check`]
//! (names, types, shapes) -> [`ir`] (the typed tile IR) -> emitters
//! ([`emit::rust`] for the host and nvptx, [`emit::ascendc`] for Ascend).
//! [`sig`] checks the signature of kernels and helpers alike, [`visit`] is
//! the one walk over the IR the analyses share, and every stage pushes its
//! errors to one [`parse::Errors`] collector, which must be checked.
//! `sampler-macros` is a thin shell over [`expand`]; tests and
//! `examples/regenerate.rs` call the stages directly on stable Rust.

pub mod check;
pub mod emit;
pub mod ir;
pub mod kfn;
pub mod ops;
pub mod parse;
pub mod rebind;
pub mod sig;
pub mod variants;
pub mod visit;

use std::collections::HashMap;

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use quote::quote;

/// What compiling a kernel gives when no error stops it.
pub enum Compiled {
    /// The kernel, and its warnings (span, message).
    Kernel(ir::Kernel, Vec<(Span, String)>),
    /// It calls these names, neither ops nor helpers already given: the
    /// `#[kernel_fn]` helpers to fetch.
    NeedHelpers(Vec<syn::Ident>),
}

/// Parses and checks a kernel: the attribute's tokens and the function item.
/// All errors are returned together. Calls of `#[kernel_fn]` helpers are
/// errors here (see [`compile_with`]).
pub fn compile(attr: TokenStream, item: TokenStream) -> Result<ir::Kernel, syn::Error> {
    match compile_with(attr, item, &HashMap::new())? {
        Compiled::Kernel(k, _) => Ok(k),
        Compiled::NeedHelpers(names) => {
            let mut errs = parse::Errors::default();
            for n in names {
                errs.push(
                    n.span(),
                    format!("unknown op `{n}`: not an op of the DSL (see docs/DSL.md) nor a `#[kernel_fn]` given"),
                );
            }
            errs.check()?;
            unreachable!("names were given")
        }
    }
}

/// [`compile`] with the `#[kernel_fn]` helpers the kernel may call
/// (inlined into it first, [`kfn`]).
pub fn compile_with(
    attr: TokenStream,
    item: TokenStream,
    helpers: &HashMap<String, kfn::KernelFn>,
) -> Result<Compiled, syn::Error> {
    let mut f: syn::ItemFn = syn::parse2(item)?;
    let mut errs = parse::Errors::default();
    let attr = parse::parse_attr(attr, &mut errs);
    if !helpers.is_empty() {
        let buffers = f
            .sig
            .inputs
            .iter()
            .filter_map(|a| match a {
                syn::FnArg::Typed(pt) => match (&*pt.pat, parse::param_type(&pt.ty)) {
                    (syn::Pat::Ident(pi), Some(t @ ir::Ty::Gm(..))) => Some((pi.ident.to_string(), t)),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        let mut inl = kfn::Inliner { helpers, buffers, n: 0 };
        *f.block = inl.block(&f.block, 0, &mut errs);
    }
    let mut k = parse::parse_fn(&f, attr, &mut errs);
    if !errs.unknown_calls.is_empty() {
        let names = std::mem::take(&mut errs.unknown_calls).into_iter().map(|(n, _)| n).collect();
        // Other errors first: the unknown calls may be helpers.
        errs.check()?;
        return Ok(Compiled::NeedHelpers(names));
    }
    check::check(&mut k, &mut errs);
    if errs.is_empty() && k.variants.iter().all(|v| v.tile == 1) {
        if let Some(e) = first_tile(&k.body) {
            errs.push(e.range(), "this kernel has no `tile = [..]`, so it works on scalars only (TILE = 1): give it tile sizes, e.g. `#[kernel(tile = [1024])]`");
        }
    }
    if errs.is_empty() {
        rebind::elide(&mut k);
        emit::validate_targets(&k, &mut errs);
    }
    let warnings = std::mem::take(&mut errs.warnings);
    errs.check()?;
    Ok(Compiled::Kernel(k, warnings))
}

/// Warnings on stable Rust: a use of a deprecated item, on the span.
fn warning(span: Span, msg: &str) -> TokenStream {
    quote::quote_spanned! {span=>
        const _: () = {
            #[deprecated(note = #msg)]
            #[allow(non_camel_case_types)]
            struct kernel_warning;
            let _ = kernel_warning;
        };
    }
}

/// The first expression making a tile (for kernels without tiles).
fn first_tile(b: &ir::Block) -> Option<&ir::Expr> {
    use ir::Ty;
    visit::find_expr(b, |e| e.ty.is_tile() || matches!(&e.ty, Ty::Tuple(v) if v.iter().any(|t| t.is_tile())))
}

fn emit_kernel(k: &ir::Kernel, warnings: &[(Span, String)]) -> TokenStream {
    let mut out = emit::kernel_module(k);
    for (span, msg) in warnings {
        out.extend(warning(*span, msg));
    }
    if k.debug || std::env::var_os("SAMPLER_DSL_DEBUG").is_some() {
        eprintln!("// ---- #[kernel] {} IR ----\n{:#?}", k.name, k.body);
        eprintln!("// ---- #[kernel] {} Rust ----\n{}", k.name, out);
    }
    out
}

/// Where the macros fetching helpers resolve: the kernel's name.
fn kernel_site(item: &TokenStream) -> Span {
    syn::parse2::<syn::ItemFn>(item.clone()).map(|f| f.sig.ident.span()).unwrap_or_else(|_| Span::call_site())
}

/// The `#[kernel]` expansion: the kernel module, the errors only (the
/// user's item is not re-emitted, so rustc adds no errors of its own), or
/// the fetch of the `#[kernel_fn]` helpers it calls.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    match compile_with(attr.clone(), item.clone(), &HashMap::new()) {
        Ok(Compiled::Kernel(k, w)) => emit_kernel(&k, &w),
        Ok(Compiled::NeedHelpers(names)) => kfn::fetch(&names, &[], &attr, &item, kernel_site(&item)),
        Err(e) => e.to_compile_error(),
    }
}

/// `__kernel_resolved! { [{helper fn}..] (attr) {item} }`: the end of a
/// helper fetch (see [`kfn`]): compiles the kernel with the helpers, or
/// fetches the ones the helpers call in turn.
pub fn expand_resolved(input: TokenStream) -> TokenStream {
    let toks: Vec<TokenTree> = input.into_iter().collect();
    let (done, attr, item) = match toks.as_slice() {
        [TokenTree::Group(d), TokenTree::Group(a), TokenTree::Group(i)]
            if d.delimiter() == Delimiter::Bracket
                && a.delimiter() == Delimiter::Parenthesis
                && i.delimiter() == Delimiter::Brace =>
        {
            (d.stream(), a.stream(), i.stream())
        }
        _ => {
            return quote!(compile_error!("sampler_macros::__kernel_resolved!: malformed input (internal to #[kernel])");)
        }
    };
    let mut helpers = HashMap::new();
    let mut done_groups = Vec::new();
    let mut errs = parse::Errors::default();
    for g in done {
        let TokenTree::Group(g) = g else { continue };
        done_groups.push(g.stream());
        if let Ok(f) = syn::parse2::<syn::ItemFn>(kfn::respan(g.stream())) {
            let h = kfn::parse(&f, &mut errs);
            helpers.insert(h.sig.name.to_string(), h);
        }
    }
    // Their errors were reported by their own `#[kernel_fn]` expansions.
    let _ = errs.check();
    // Errors and warnings at the user's tokens, not inside this expansion
    // (rustc would add "in this macro invocation" notes).
    let site = kernel_site(&item);
    match compile_with(kfn::respan(attr.clone()), kfn::respan(item.clone()), &helpers) {
        Ok(Compiled::Kernel(k, w)) => {
            let w: Vec<(Span, String)> = w.into_iter().map(|(s, m)| (site.located_at(s), m)).collect();
            emit_kernel(&k, &w)
        }
        Ok(Compiled::NeedHelpers(names)) => {
            let fresh: Vec<syn::Ident> = names.into_iter().filter(|n| !helpers.contains_key(&n.to_string())).collect();
            if fresh.is_empty() {
                return quote!(compile_error!("#[kernel]: a helper could not be inlined (internal error)"););
            }
            kfn::fetch(&fresh, &done_groups, &attr, &item, site)
        }
        Err(e) => rehome(e.to_compile_error(), site),
    }
}

/// Gives every token `site`'s hygiene and expansion at its own location.
fn rehome(ts: TokenStream, site: Span) -> TokenStream {
    ts.into_iter()
        .map(|tt| match tt {
            TokenTree::Group(g) => {
                let mut n = proc_macro2::Group::new(g.delimiter(), rehome(g.stream(), site));
                n.set_span(site.located_at(g.span()));
                TokenTree::Group(n)
            }
            mut other => {
                let s = site.located_at(other.span());
                other.set_span(s);
                other
            }
        })
        .collect()
}
