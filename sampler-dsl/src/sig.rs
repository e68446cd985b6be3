//! The signature check shared by `#[kernel]` and `#[kernel_fn]`: what the
//! function may be (no `const`, `async`, `unsafe`, generics, `extern`,
//! variadics, `self`), its parameters and their types, its return type and
//! the attributes beside it. The two differ only in the types they allow
//! (a helper also takes tiles and returns values; a kernel returns nothing)
//! and in the wording of some messages.

use syn::spanned::Spanned;

use crate::ir::*;
use crate::parse::{is_logits_type, param_type, poison_pat, Errors};

/// Which item a signature belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// A `#[kernel]`: buffers, `Logits` and scalars in, nothing out.
    Kernel,
    /// A `#[kernel_fn]` helper: tiles too, and scalars / tiles out.
    KernelFn,
}

impl Item {
    /// The item in messages: "a kernel", "a `#[kernel_fn]`".
    fn what(self) -> &'static str {
        match self {
            Item::Kernel => "a kernel",
            Item::KernelFn => "a `#[kernel_fn]`",
        }
    }
    /// The attribute: `#[kernel]`, `#[kernel_fn]`.
    fn attr(self) -> &'static str {
        match self {
            Item::Kernel => "#[kernel]",
            Item::KernelFn => "#[kernel_fn]",
        }
    }
}

/// A checked signature: the parameters (a parameter whose type was
/// rejected is kept as the error type `()`, so its uses are not reported
/// again) and the return values (empty for a kernel or `()`).
pub struct Signature {
    pub params: Vec<Param>,
    pub ret: Vec<Ty>,
}

/// The types of a `#[kernel_fn]`'s parameters and return values.
const HELPER_TYPES: &str =
    "expected `Tile<T>`, `Gm<T>`, `GmMut<T>` or a scalar (`u32`, `i32`, `u64`, `i64`, `f32`, `f64`, `bool`)";

/// The DSL type of a helper's parameter or return type: a kernel
/// parameter's, or a tile `Tile<T>`.
fn helper_type(t: &syn::Type) -> Option<Ty> {
    if let syn::Type::Path(tp) = t {
        if let Some(seg) = tp.path.segments.last().filter(|_| tp.path.segments.len() == 1) {
            if seg.ident == "Tile" {
                if let syn::PathArguments::AngleBracketed(ab) = &seg.arguments {
                    if let [syn::GenericArgument::Type(syn::Type::Path(inner))] =
                        ab.args.iter().collect::<Vec<_>>().as_slice()
                    {
                        return inner.path.get_ident().and_then(|i| Prim::from_name(&i.to_string())).map(Ty::Tile);
                    }
                }
                return None;
            }
        }
    }
    param_type(t)
}

/// Checks the signature and attributes of `f` as `item` (errors on their
/// spans, all of them).
pub fn check_sig(f: &syn::ItemFn, item: Item, errs: &mut Errors) -> Signature {
    let sig = &f.sig;
    let what = item.what();
    if let Some(c) = &sig.constness {
        errs.push(c.span(), format!("{what} cannot be `const`"));
    }
    if let Some(a) = &sig.asyncness {
        errs.push(a.span(), format!("{what} cannot be `async`"));
    }
    if let Some(u) = &sig.unsafety {
        errs.push(u.span(), format!("{what} cannot be `unsafe`: the DSL has no unsafe operations"));
    }
    if let Some(g) = sig.generics.params.first() {
        let why = match item {
            Item::Kernel => ": use tile variants instead",
            Item::KernelFn => "",
        };
        errs.push(g.span(), format!("{what} cannot be generic{why}"));
    }
    if let Some(w) = &sig.generics.where_clause {
        errs.push(w.span(), format!("{what} cannot have a `where` clause: it is not generic"));
    }
    if let Some(abi) = &sig.abi {
        let why = match item {
            Item::Kernel => "the emitters give each target its own entry points",
            Item::KernelFn => "it is inlined into its callers",
        };
        errs.push(abi.span(), format!("{what} is a plain `fn`, without `extern`: {why}"));
    }
    if let Some(v) = &sig.variadic {
        errs.push(v.span(), format!("{what} cannot be variadic: list its parameters"));
    }
    match item {
        Item::Kernel => {
            if let syn::ReturnType::Type(_, t) = &sig.output {
                errs.push(t.span(), "a kernel returns nothing: write results with `store` / `store_scalar`");
            }
        }
        Item::KernelFn => {
            let name = sig.ident.to_string();
            if crate::ops::Op::from_name(&name).is_some() {
                errs.push(sig.ident.span(), format!("`{name}` is an op of the DSL: give the helper another name"));
            } else if let Some(near) = crate::ops::near_op(&name) {
                errs.push(sig.ident.span(), format!("`{name}` is too close to the op `{near}` (a call of it would be reported as a typo): give the helper another name"));
            }
        }
    }
    let mut params = Vec::new();
    for arg in &sig.inputs {
        let pt = match arg {
            syn::FnArg::Receiver(r) => {
                errs.push(r.span(), format!("{what} cannot take `self`"));
                continue;
            }
            syn::FnArg::Typed(pt) => pt,
        };
        let name = match &*pt.pat {
            syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.mutability.is_none() && pi.subpat.is_none() => {
                pi.ident.clone()
            }
            other => {
                match item {
                    Item::Kernel => {
                        errs.push(other.span(), "kernel parameters must be plain identifiers");
                        poison_pat(other, errs);
                    }
                    Item::KernelFn => {
                        errs.push(other.span(), "`#[kernel_fn]` parameters must be plain identifiers (not `mut`: bind a copy with `let mut`)");
                        // `mut x` / `ref x`: still bound (as the error type), so its uses are not reported again.
                        if let syn::Pat::Ident(pi) = other {
                            params.push(Param { name: pi.ident.clone(), ty: Ty::Unit, span: pt.span(), logits: false });
                        }
                    }
                }
                continue;
            }
        };
        let ty = match item {
            Item::Kernel => param_type(&pt.ty),
            Item::KernelFn => helper_type(&pt.ty),
        };
        match ty {
            Some(ty) => {
                let logits = item == Item::Kernel && is_logits_type(&pt.ty);
                params.push(Param { name, ty, span: pt.span(), logits });
            }
            None => {
                let msg = match item {
                    Item::Kernel => "unsupported parameter type: expected `Gm<T>`, `GmMut<T>`, `Logits` or a scalar (`u32`, `i32`, `u64`, `i64`, `f32`, `f64`, `bool`)".to_string(),
                    Item::KernelFn => format!("unsupported parameter type: {HELPER_TYPES}"),
                };
                errs.push(pt.ty.span(), msg);
                // Still bound (as the error type `()`), so its uses are not reported again.
                params.push(Param { name, ty: Ty::Unit, span: pt.span(), logits: false });
            }
        }
    }
    let mut ret = Vec::new();
    if let (Item::KernelFn, syn::ReturnType::Type(_, t)) = (item, &sig.output) {
        let elems: Vec<&syn::Type> = match &**t {
            syn::Type::Tuple(tt) => tt.elems.iter().collect(),
            other => vec![other],
        };
        for e in elems {
            match helper_type(e) {
                Some(Ty::Gm(..)) | None => {
                    errs.push(e.span(), "a `#[kernel_fn]` returns scalars, tiles or a tuple of them")
                }
                Some(t) => ret.push(t),
            }
        }
    }
    let attr = item.attr();
    for a in &f.attrs {
        if !a.path().is_ident("doc") && !a.path().is_ident("allow") {
            errs.push(a.path().span(), format!("only doc comments and `#[allow]` may stand beside `{attr}`"));
        }
    }
    Signature { params, ret }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn sig(item: Item, f: proc_macro2::TokenStream) -> (Vec<Ty>, Vec<Ty>, Vec<String>) {
        let f: syn::ItemFn = syn::parse2(f).unwrap();
        let mut errs = Errors::default();
        let s = check_sig(&f, item, &mut errs);
        let msgs = match errs.check() {
            Ok(()) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        };
        (s.params.into_iter().map(|p| p.ty).collect(), s.ret, msgs)
    }

    #[test]
    fn both_items_refuse_the_same_forms_in_their_own_words() {
        let f = quote!(
            const unsafe fn h<T>(x: u32)
            where
                T: Copy,
            {
            }
        );
        let (_, _, k) = sig(Item::Kernel, f.clone());
        let (_, _, h) = sig(Item::KernelFn, f);
        assert_eq!(
            k,
            [
                "a kernel cannot be `const`",
                "a kernel cannot be `unsafe`: the DSL has no unsafe operations",
                "a kernel cannot be generic: use tile variants instead",
                "a kernel cannot have a `where` clause: it is not generic",
            ]
        );
        assert_eq!(
            h,
            [
                "a `#[kernel_fn]` cannot be `const`",
                "a `#[kernel_fn]` cannot be `unsafe`: the DSL has no unsafe operations",
                "a `#[kernel_fn]` cannot be generic",
                "a `#[kernel_fn]` cannot have a `where` clause: it is not generic",
            ]
        );
    }

    #[test]
    fn tiles_and_return_values_are_for_helpers_only() {
        let f = quote!(
            fn h(t: Tile<f32>, x: Gm<f32>, n: u32) -> (Tile<f32>, u32) {
                (t, n)
            }
        );
        let (p, r, e) = sig(Item::KernelFn, f.clone());
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(p, [Ty::Tile(Prim::F32), Ty::Gm(Prim::F32, false), Ty::Scalar(Prim::U32)]);
        assert_eq!(r, [Ty::Tile(Prim::F32), Ty::Scalar(Prim::U32)]);
        let (p, r, e) = sig(Item::Kernel, f);
        // The tile parameter is kept as the error type.
        assert_eq!(p, [Ty::Unit, Ty::Gm(Prim::F32, false), Ty::Scalar(Prim::U32)]);
        assert!(r.is_empty());
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("a kernel returns nothing"), "{e:?}");
        assert!(e[1].starts_with("unsupported parameter type"), "{e:?}");
        // A helper named like an op, and a buffer returned.
        let (_, _, e) = sig(
            Item::KernelFn,
            quote!(
                fn exp(x: Gm<f32>) -> Gm<f32> {
                    x
                }
            ),
        );
        assert_eq!(
            e,
            [
                "`exp` is an op of the DSL: give the helper another name",
                "a `#[kernel_fn]` returns scalars, tiles or a tuple of them",
            ]
        );
    }
}
