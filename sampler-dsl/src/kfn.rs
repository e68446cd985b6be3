//! `#[kernel_fn]` helpers: DSL functions a kernel (or another helper) calls.
//!
//! A helper is inlined into its caller before the caller is parsed: each
//! call `let v = h(a, b);` becomes `let __kfN_p = a; let __kfN_q = b;`, the
//! helper's statements with every local renamed `__kfN_x`, then
//! `let v = <tail>;`. Buffer parameters are substituted by the caller's
//! buffer. The checker checks each argument binding against the parameter's
//! type ([`crate::parse::Errors::expect`]), and [`crate::rebind`] removes the
//! tile rebindings the arguments leave, so the emitters see one plain kernel
//! and need no construct of their own.
//!
//! Rust macros cannot see another item's tokens, so `#[kernel_fn] fn h`
//! expands to a `macro_rules! h` holding its own tokens; a kernel that calls
//! `h` expands to `h! { @sampler_kernel_fn .. }`, which hands the tokens to
//! `sampler_macros::__kernel_resolved!` (see [`crate::expand_resolved`]).

use std::collections::HashMap;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;

use crate::ir::*;
use crate::parse::Errors;

/// The most nested helper calls (a deeper chain is taken for recursion).
pub const MAX_DEPTH: usize = 16;

/// The signature of a `#[kernel_fn]`.
#[derive(Clone, Debug)]
pub struct Sig {
    pub name: syn::Ident,
    pub params: Vec<(syn::Ident, Ty)>,
    /// Return values: empty for `()`, one, or a tuple's elements.
    pub ret: Vec<Ty>,
}

/// A helper's definition: its signature, statements and tail values.
#[derive(Clone)]
pub struct KernelFn {
    pub sig: Sig,
    pub stmts: Vec<syn::Stmt>,
    pub tail: Vec<syn::Expr>,
}

/// Parses a helper's item (errors on their spans).
pub fn parse(f: &syn::ItemFn, errs: &mut Errors) -> KernelFn {
    let sig = &f.sig;
    let checked = crate::sig::check_sig(f, crate::sig::Item::KernelFn, errs);
    let params: Vec<(syn::Ident, Ty)> = checked.params.into_iter().map(|p| (p.name, p.ty)).collect();
    let ret = checked.ret;
    let mut stmts = f.block.stmts.clone();
    let mut tail = Vec::new();
    if !ret.is_empty() {
        match stmts.last() {
            Some(syn::Stmt::Expr(e, None)) => {
                let e = e.clone();
                stmts.pop();
                match e {
                    syn::Expr::Tuple(t) if ret.len() > 1 => tail.extend(t.elems),
                    syn::Expr::Paren(p) if ret.len() == 1 => tail.push(*p.expr),
                    other if ret.len() == 1 => tail.push(other),
                    other => errs.push(
                        other.span(),
                        format!("this helper returns {} values: end it with a tuple `(a, b, ..)`", ret.len()),
                    ),
                }
                if !tail.is_empty() && tail.len() != ret.len() {
                    errs.push(
                        sig.output.span(),
                        format!("the signature returns {} values but the tail has {}", ret.len(), tail.len()),
                    );
                }
            }
            Some(syn::Stmt::Expr(e, Some(semi)))
                if !matches!(e, syn::Expr::If(_) | syn::Expr::ForLoop(_) | syn::Expr::Assign(_)) =>
            {
                // `x * 2.0;` as the last line: one error at the `;` (the
                // value is taken as the tail, not reported again as unused).
                errs.push(semi.span(), "a `#[kernel_fn]` with a return type ends with its value: remove this `;`");
                match e.clone() {
                    syn::Expr::Tuple(t) if ret.len() > 1 && t.elems.len() == ret.len() => tail.extend(t.elems),
                    other if ret.len() == 1 => tail.push(other),
                    _ => {}
                }
                stmts.pop();
            }
            _ => errs.push(
                f.block.span(),
                "a `#[kernel_fn]` with a return type ends with its value (an expression without `;`)",
            ),
        }
    }
    KernelFn { sig: Sig { name: sig.ident.clone(), params, ret }, stmts, tail }
}

/// Checks a helper on its own (when it calls no other helper): its body
/// with the parameters bound to their declared types, and its tail values
/// against the return type.
pub fn check(h: &KernelFn, errs: &mut Errors) {
    let mut local = Errors::default();
    let mut stmts: Vec<Stmt> = h.stmts.iter().filter_map(|s| crate::parse::parse_stmt_pub(s, &mut local)).collect();
    let mut tails = Vec::new();
    for (i, t) in h.tail.iter().enumerate() {
        let name = format_ident!("__kf_ret{}", i, span = t.span());
        local.generated.insert(name.to_string());
        if let Some(v) = crate::parse::parse_expr(t, &mut local) {
            tails.push(i);
            stmts.push(Stmt::Let { names: vec![(name, false)], value: v, span: t.span() });
        }
    }
    if !local.unknown_calls.is_empty() {
        // It calls other helpers: checked where a kernel inlines it.
        errs.append(local);
        return;
    }
    let mut k = Kernel {
        name: h.sig.name.clone(),
        vis: syn::Visibility::Inherited,
        docs: Vec::new(),
        params: h
            .sig
            .params
            .iter()
            .map(|(n, t)| Param { name: n.clone(), ty: t.clone(), span: n.span(), logits: false })
            .collect(),
        variants: Vec::new(),
        debug: false,
        ascend: false,
        cluster: 0,
        body: Block { stmts },
    };
    crate::check::check(&mut k, &mut local);
    let clean = local.is_empty();
    errs.append(local);
    if !clean {
        return;
    }
    let n = k.body.stmts.len();
    for (j, &i) in tails.iter().enumerate() {
        let Stmt::Let { value, .. } = &k.body.stmts[n - tails.len() + j] else { continue };
        let want = &h.sig.ret[i];
        let got = &value.ty;
        let ok = got == want
            || (matches!(got, Ty::IntLit)
                && !want.is_tile()
                && want.prim().is_some_and(|p| p.is_int() || p.is_float()))
            || (matches!(got, Ty::FloatLit) && !want.is_tile() && want.prim().is_some_and(|p| p.is_float()));
        // `()` from a parameter already rejected (bound as the error type).
        let rejected = *got == Ty::Unit && h.sig.params.iter().any(|(_, t)| *t == Ty::Unit);
        if !ok && !rejected {
            errs.push(
                value.span,
                format!(
                    "this value has type {}, but `{}` returns {} here",
                    got.describe(),
                    h.sig.name,
                    want.describe()
                ),
            );
        }
    }
}

/// Gives every token `Span::call_site()`'s hygiene at its own location, so
/// the tokens of a kernel and of its helpers (which reach the proc macro
/// through `macro_rules!` expansions) resolve in one context.
pub fn respan(ts: TokenStream) -> TokenStream {
    ts.into_iter()
        .map(|tt| match tt {
            TokenTree::Group(g) => {
                let mut n = proc_macro2::Group::new(g.delimiter(), respan(g.stream()));
                n.set_span(Span::call_site().located_at(g.span()));
                TokenTree::Group(n)
            }
            mut other => {
                let s = Span::call_site().located_at(other.span());
                other.set_span(s);
                other
            }
        })
        .collect()
}

/// `#[kernel_fn]`'s expansion: the helper's errors, or a `macro_rules!` of
/// its name that hands its tokens to the kernel expansion asking for it.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let f: syn::ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => return e.to_compile_error(),
    };
    let mut errs = Errors::default();
    if !attr.is_empty() {
        errs.push(attr.span(), "`#[kernel_fn]` takes no options");
    }
    let h = parse(&f, &mut errs);
    check(&h, &mut errs);
    let name = &f.sig.ident;
    let docs: Vec<_> = f.attrs.iter().filter(|a| a.path().is_ident("doc")).collect();
    if let Err(e) = errs.check() {
        // The errors only, and a macro that swallows the kernels calling
        // it: they would only repeat these errors.
        let err = e.to_compile_error();
        return quote! {
            #err
            #[allow(unused_macros)]
            macro_rules! #name { ($($t:tt)*) => {}; }
        };
    }
    let mut bare = f.clone();
    bare.attrs.clear();
    let tokens = quote!(#bare);
    let vis = match &f.vis {
        syn::Visibility::Inherited => quote!(),
        _ => quote!(pub(crate)),
    };
    quote! {
        #(#docs)*
        #[allow(unused_macros)]
        macro_rules! #name {
            (@sampler_kernel_fn [$($done:tt)*] [$next:ident $($rest:ident)*] $($tail:tt)*) => {
                $next! { @sampler_kernel_fn [$($done)* { #tokens }] [$($rest)*] $($tail)* }
            };
            (@sampler_kernel_fn [$($done:tt)*] [] $($tail:tt)*) => {
                ::sampler_macros::__kernel_resolved! { [$($done)* { #tokens }] $($tail)* }
            };
        }
        #[allow(unused_imports)]
        #vis use #name;
    }
}

/// The call that fetches the helpers `names` for a kernel (attribute
/// tokens `attr`, item `item`), the helpers already fetched in `done`.
pub fn fetch(
    names: &[syn::Ident],
    done: &[TokenStream],
    attr: &TokenStream,
    item: &TokenStream,
    at: Span,
) -> TokenStream {
    // The macro names resolve where the kernel stands (after its helpers).
    let names: Vec<syn::Ident> =
        names.iter().map(|n| syn::Ident::new(&n.to_string(), at.located_at(n.span()))).collect();
    let first = &names[0];
    let rest = &names[1..];
    quote_spanned! {at=>
        #first! { @sampler_kernel_fn [#({ #done })*] [#(#rest)*] (#attr) { #item } }
    }
}

/// Whether an expression is a call of a helper in `helpers`.
fn helper_call<'a>(e: &'a syn::Expr, helpers: &HashMap<String, KernelFn>) -> Option<(&'a syn::ExprCall, String)> {
    if let syn::Expr::Call(c) = e {
        if let syn::Expr::Path(p) = &*c.func {
            if let Some(id) = p.path.get_ident() {
                let n = id.to_string();
                if helpers.contains_key(&n) {
                    return Some((c, n));
                }
            }
        }
    }
    None
}

/// Finds helper calls inside an expression (where they may not stand).
struct FindCalls<'a> {
    helpers: &'a HashMap<String, KernelFn>,
    found: Vec<(String, (Span, Span))>,
}

impl<'ast> Visit<'ast> for FindCalls<'_> {
    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if let Some((_, n)) = helper_call(&syn::Expr::Call(c.clone()), self.helpers) {
            self.found.push((n, (c.func.span(), crate::parse::last_span(c).unwrap_or_else(|| c.func.span()))));
        }
        syn::visit::visit_expr_call(self, c);
    }
}

/// Renames a helper's locals `x` -> `__kfN_x` and substitutes parameters.
struct Rename<'a> {
    prefix: String,
    subst: &'a HashMap<String, syn::Ident>,
    errs: &'a mut Errors,
}

impl Rename<'_> {
    fn fresh(&mut self, id: &syn::Ident) -> syn::Ident {
        let n = format!("{}{}", self.prefix, id);
        self.errs.generated.insert(n.clone());
        syn::Ident::new(&n, id.span())
    }
}

impl VisitMut for Rename<'_> {
    fn visit_pat_ident_mut(&mut self, p: &mut syn::PatIdent) {
        p.ident = self.fresh(&p.ident);
    }
    fn visit_expr_call_mut(&mut self, c: &mut syn::ExprCall) {
        // The callee is an op or helper name, not a local.
        for a in c.args.iter_mut() {
            self.visit_expr_mut(a);
        }
    }
    fn visit_expr_path_mut(&mut self, p: &mut syn::ExprPath) {
        let Some(id) = p.path.get_ident().cloned() else { return };
        let n = id.to_string();
        if matches!(n.as_str(), "TILE" | "NEG_INF" | "POS_INF") {
            return;
        }
        let new = match self.subst.get(&n) {
            Some(s) => syn::Ident::new(&s.to_string(), id.span()),
            None => self.fresh(&id),
        };
        p.path.segments[0].ident = new;
    }
    fn visit_type_mut(&mut self, _: &mut syn::Type) {}
}

/// Inlines the calls of `helpers` in a kernel item.
pub struct Inliner<'a> {
    pub helpers: &'a HashMap<String, KernelFn>,
    /// The kernel's buffer parameters and their types.
    pub buffers: HashMap<String, Ty>,
    pub n: usize,
}

impl Inliner<'_> {
    pub fn block(&mut self, b: &syn::Block, depth: usize, errs: &mut Errors) -> syn::Block {
        syn::Block { brace_token: b.brace_token, stmts: self.stmts(&b.stmts, depth, errs) }
    }

    fn no_calls_in(&self, e: &syn::Expr, errs: &mut Errors) {
        let mut f = FindCalls { helpers: self.helpers, found: Vec::new() };
        f.visit_expr(e);
        for (n, s) in f.found {
            errs.push(s, format!("a `#[kernel_fn]` call stands alone: bind it first (`let v = {n}(..);`, `{n}(..);` or `x = {n}(..);`)"));
        }
    }

    fn stmts(&mut self, stmts: &[syn::Stmt], depth: usize, errs: &mut Errors) -> Vec<syn::Stmt> {
        let mut out = Vec::new();
        for s in stmts {
            match s {
                syn::Stmt::Local(l)
                    if l.init
                        .as_ref()
                        .is_some_and(|i| i.diverge.is_none() && helper_call(&i.expr, self.helpers).is_some()) =>
                {
                    let init = l.init.as_ref().unwrap();
                    let (c, name) = helper_call(&init.expr, self.helpers).unwrap();
                    let Some((body, tails)) = self.call(c, &name, depth, errs) else {
                        // The call was reported: its names are not reported again where used.
                        crate::parse::poison_pat(&l.pat, errs);
                        continue;
                    };
                    out.extend(body);
                    let pat = match &l.pat {
                        syn::Pat::Type(pt) => &*pt.pat,
                        p => p,
                    };
                    match (pat, tails.len()) {
                        (syn::Pat::Tuple(t), n) if t.elems.len() == n && n > 1 => {
                            for (p, v) in t.elems.iter().zip(&tails) {
                                if !matches!(p, syn::Pat::Wild(_)) {
                                    out.push(syn::parse_quote_spanned!(p.span()=> let #p = #v;));
                                }
                            }
                        }
                        (p, 1) if !matches!(p, syn::Pat::Tuple(_)) => {
                            let v = &tails[0];
                            out.push(syn::parse_quote_spanned!(l.span()=> let #p = #v;));
                        }
                        (_, 0) => {
                            errs.push(
                                l.span(),
                                format!("`{name}` returns nothing: call it as a statement `{name}(..);`"),
                            );
                            crate::parse::poison_pat(&l.pat, errs);
                        }
                        (_, n) => {
                            errs.push(
                                l.pat.span(),
                                format!("`{name}` returns {n} value(s): the pattern must bind as many"),
                            );
                            crate::parse::poison_pat(&l.pat, errs);
                        }
                    }
                }
                syn::Stmt::Expr(e, semi) => match e {
                    e if helper_call(e, self.helpers).is_some() => {
                        let (c, name) = helper_call(e, self.helpers).unwrap();
                        let Some((body, tails)) = self.call(c, &name, depth, errs) else { continue };
                        out.extend(body);
                        if !tails.is_empty() {
                            errs.push(e.span(), format!("the value of `{name}(..)` is unused: bind it with `let`"));
                        }
                    }
                    syn::Expr::Assign(a) if helper_call(&a.right, self.helpers).is_some() => {
                        let (c, name) = helper_call(&a.right, self.helpers).unwrap();
                        self.no_calls_in(&a.left, errs);
                        let Some((body, tails)) = self.call(c, &name, depth, errs) else { continue };
                        out.extend(body);
                        if tails.len() == 1 {
                            let (left, v) = (&a.left, &tails[0]);
                            out.push(syn::parse_quote_spanned!(a.span()=> #left = #v;));
                        } else {
                            errs.push(
                                a.span(),
                                format!(
                                    "`{name}` returns {} values: bind them with `let (..) = {name}(..);`",
                                    tails.len()
                                ),
                            );
                        }
                    }
                    syn::Expr::If(i) => {
                        let ni = self.if_expr(i, depth, errs);
                        out.push(syn::Stmt::Expr(syn::Expr::If(ni), *semi));
                    }
                    syn::Expr::ForLoop(f) => {
                        self.no_calls_in(&f.expr, errs);
                        let mut nf = f.clone();
                        nf.body = self.block(&f.body, depth, errs);
                        out.push(syn::Stmt::Expr(syn::Expr::ForLoop(nf), *semi));
                    }
                    other => {
                        self.no_calls_in(other, errs);
                        out.push(s.clone());
                    }
                },
                syn::Stmt::Local(l) => {
                    if let Some(i) = &l.init {
                        self.no_calls_in(&i.expr, errs);
                    }
                    out.push(s.clone());
                }
                other => out.push(other.clone()),
            }
        }
        out
    }

    fn if_expr(&mut self, i: &syn::ExprIf, depth: usize, errs: &mut Errors) -> syn::ExprIf {
        self.no_calls_in(&i.cond, errs);
        let mut ni = i.clone();
        ni.then_branch = self.block(&i.then_branch, depth, errs);
        if let Some((t, e)) = &i.else_branch {
            let ne = match &**e {
                syn::Expr::Block(b) => {
                    let mut nb = b.clone();
                    nb.block = self.block(&b.block, depth, errs);
                    syn::Expr::Block(nb)
                }
                syn::Expr::If(ei) => syn::Expr::If(self.if_expr(ei, depth, errs)),
                other => other.clone(),
            };
            ni.else_branch = Some((*t, Box::new(ne)));
        }
        ni
    }

    /// One call: the statements it expands to and its tail values.
    fn call(
        &mut self,
        c: &syn::ExprCall,
        name: &str,
        depth: usize,
        errs: &mut Errors,
    ) -> Option<(Vec<syn::Stmt>, Vec<syn::Expr>)> {
        if depth >= MAX_DEPTH {
            errs.push(
                c.func.span(),
                format!("`#[kernel_fn]` calls nest more than {MAX_DEPTH} deep here: a helper cannot call itself"),
            );
            return None;
        }
        let h = self.helpers[name].clone();
        if c.args.len() != h.sig.params.len() {
            let want: Vec<String> = h.sig.params.iter().map(|(n, t)| format!("{n}: {}", t.describe())).collect();
            errs.push(
                c.span(),
                format!(
                    "`{name}` takes {} argument(s), got {}: {name}({})",
                    h.sig.params.len(),
                    c.args.len(),
                    want.join(", ")
                ),
            );
            return None;
        }
        self.n += 1;
        let prefix = format!("__kf{}_", self.n);
        let mut out: Vec<syn::Stmt> = Vec::new();
        let mut subst = HashMap::new();
        let mut ok = true;
        for ((p, ty), a) in h.sig.params.iter().zip(&c.args) {
            self.no_calls_in(a, errs);
            let what = format!("argument `{p}` of `{name}`");
            if let Ty::Gm(want, write) = ty {
                // Buffers are substituted: they cannot be rebound.
                let id = match a {
                    syn::Expr::Path(ep) => ep.path.get_ident(),
                    _ => None,
                };
                match id.map(|i| (i, self.buffers.get(&i.to_string()))) {
                    Some((i, Some(Ty::Gm(got, w)))) => {
                        if got != want || (*write && !w) {
                            errs.push(
                                a.span(),
                                format!(
                                    "{what} has type {}, but `{i}` is {}",
                                    ty.describe(),
                                    Ty::Gm(*got, *w).describe()
                                ),
                            );
                            ok = false;
                        }
                        subst.insert(p.to_string(), i.clone());
                    }
                    _ => {
                        errs.push(
                            a.span(),
                            format!(
                                "{what} is a buffer ({}): pass a buffer parameter of the kernel directly",
                                ty.describe()
                            ),
                        );
                        ok = false;
                    }
                }
                continue;
            }
            let g = syn::Ident::new(&format!("{prefix}{p}"), Span::call_site().located_at(a.span()));
            errs.generated.insert(g.to_string());
            errs.expect.insert(g.to_string(), (ty.clone(), what));
            out.push(syn::parse_quote_spanned!(a.span()=> let #g = #a;));
            subst.insert(p.to_string(), g);
        }
        if !ok {
            return None;
        }
        let mut r = Rename { prefix, subst: &subst, errs };
        let mut body = h.stmts.clone();
        for s in body.iter_mut() {
            r.visit_stmt_mut(s);
        }
        let mut tails = h.tail.clone();
        for t in tails.iter_mut() {
            r.visit_expr_mut(t);
        }
        out = [out, self.stmts(&body, depth + 1, errs)].concat();
        // A tail that is itself a helper call: bind its values first.
        if tails.len() == 1 {
            if let Some((c2, n2)) = helper_call(&tails[0], self.helpers) {
                let c2 = c2.clone();
                let (b2, t2) = self.call(&c2, &n2, depth + 1, errs)?;
                out.extend(b2);
                tails = t2;
            }
        }
        for t in &tails {
            self.no_calls_in(t, errs);
        }
        Some((out, tails))
    }
}
