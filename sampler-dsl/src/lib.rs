//! The sampler tile DSL compiler, as a plain library.
//!
//! Pipeline: [`parse`] (syn -> untyped IR, spanned errors) -> [`check`]
//! (names, types, shapes) -> [`ir`] (the typed tile IR) -> emitters
//! ([`emit::rust`] for the host and nvptx, [`emit::ascendc`] for Ascend).
//! `sampler-macros` is a thin shell over [`expand`]; tests and
//! `examples/regenerate.rs` call the stages directly on stable Rust.

pub mod check;
pub mod emit;
pub mod ir;
pub mod ops;
pub mod parse;

use proc_macro2::TokenStream;
use quote::quote;

/// Parses and checks a kernel: the attribute's tokens and the function item.
/// All errors are returned together.
pub fn compile(attr: TokenStream, item: TokenStream) -> Result<ir::Kernel, syn::Error> {
    let f: syn::ItemFn = syn::parse2(item)?;
    let mut errs = parse::Errors::default();
    let (variants, debug) = parse::parse_attr(attr, &mut errs);
    let mut k = parse::parse_fn(&f, variants, debug, &mut errs);
    check::check(&mut k, &mut errs);
    if errs.is_empty() {
        emit::validate_targets(&k, &mut errs);
    }
    errs.finish()?;
    Ok(k)
}

/// The `#[kernel]` expansion: the kernel module, or the errors plus the
/// user's item (so editors keep working).
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    match compile(attr, item.clone()) {
        Ok(k) => {
            let out = emit::kernel_module(&k);
            if k.debug || std::env::var_os("SAMPLER_DSL_DEBUG").is_some() {
                eprintln!("// ---- #[kernel] {} IR ----\n{:#?}", k.name, k.body);
                eprintln!("// ---- #[kernel] {} Rust ----\n{}", k.name, out);
            }
            out
        }
        Err(e) => {
            let err = e.to_compile_error();
            quote! { #err #item }
        }
    }
}
