//! Parse: the user's `syn` function and attribute -> untyped IR.
//!
//! Everything outside the DSL's subset is an error on its own span; errors
//! accumulate in [`Errors`] and are reported together.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;

use crate::ir::*;
use crate::ops::Op;

/// Where an error points: from the first span to the second.
#[derive(Clone, Copy)]
pub struct Where(pub Span, pub Span);

impl From<Span> for Where {
    fn from(s: Span) -> Where {
        Where(s, s)
    }
}

impl From<(Span, Span)> for Where {
    fn from((a, b): (Span, Span)) -> Where {
        Where(a, b)
    }
}

/// The span of the last token of `t` (a group's span covers it whole).
pub fn last_span(t: &impl quote::ToTokens) -> Option<Span> {
    t.to_token_stream().into_iter().last().map(|tt| tt.span())
}

/// The errors of one kernel or helper, collected while parsing and
/// checking it and reported together (the idea of serde_derive's `Ctxt`).
///
/// It must be consumed by [`Errors::check`] (or handed on with
/// [`Errors::append`]): dropping it unchecked panics, so no error can be
/// lost on some early return.
#[derive(Default)]
pub struct Errors {
    errs: Vec<syn::Error>,
    /// Set by `check` / `append`: the errors were taken.
    checked: bool,
    /// Names whose binding was rejected (a bad pattern, a `let` whose value
    /// did not parse): their uses are not reported again as unknown names.
    poisoned: Vec<String>,
    /// Calls of names that are neither ops nor poisoned: `#[kernel_fn]`
    /// helpers to fetch (or, failing that, unknown names rustc reports).
    pub unknown_calls: Vec<(syn::Ident, Span)>,
    /// Names the inliner generated (`__kf{n}_x`): exempt from the
    /// reserved-name check and from the unused-binding warning.
    pub generated: std::collections::HashSet<String>,
    /// Expected types of generated argument bindings: name -> (type, what).
    pub expect: std::collections::HashMap<String, (Ty, String)>,
    /// Warnings (unused bindings): emitted beside a kernel that compiles.
    pub warnings: Vec<(Span, String)>,
}

impl Errors {
    /// Marks a name whose binding already failed with an error.
    pub fn poison(&mut self, name: &syn::Ident) {
        self.poisoned.push(name.to_string());
    }
    /// Whether `name` is a binding that already failed with an error.
    pub fn is_poisoned(&self, name: &str) -> bool {
        self.poisoned.iter().any(|n| n == name)
    }
    /// An error at a span, or over a range `(first, last)` of tokens.
    pub fn push(&mut self, at: impl Into<Where>, msg: impl std::fmt::Display) {
        let Where(a, b) = at.into();
        let (x, y) = (proc_macro2::Ident::new("a", a), proc_macro2::Ident::new("b", b));
        self.errs.push(syn::Error::new_spanned(quote::quote!(#x #y), msg));
    }
    /// An error as `syn` made it.
    pub fn push_err(&mut self, e: syn::Error) {
        self.errs.push(e);
    }
    /// Whether no error was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.errs.is_empty()
    }
    /// Moves the errors of `other` (in order) to the end of these; only
    /// the errors: its warnings and names stay with it.
    pub fn append(&mut self, mut other: Errors) {
        other.checked = true;
        self.errs.append(&mut other.errs);
    }
    /// All errors combined into one (in the order reported), or `Ok`.
    pub fn check(mut self) -> Result<(), syn::Error> {
        self.checked = true;
        let mut it = std::mem::take(&mut self.errs).into_iter();
        match it.next() {
            None => Ok(()),
            Some(mut first) => {
                for e in it {
                    first.combine(e);
                }
                Err(first)
            }
        }
    }
}

impl Drop for Errors {
    fn drop(&mut self) {
        // Not while unwinding: a second panic would abort and hide the first.
        if !self.checked && !std::thread::panicking() {
            panic!("sampler-dsl: an error collector was dropped without `check()` (internal error)");
        }
    }
}

/// The options of `#[kernel(..)]`.
#[derive(Clone, Debug)]
pub struct KernelAttr {
    pub variants: Vec<Variant>,
    pub debug: bool,
    /// `false` with `ascend = false`: no AscendC source is wanted.
    pub ascend: bool,
    /// `cluster = C`: the most CTAs of a thread-block cluster a program
    /// (row) may run on (NVIDIA; 0: not a cluster kernel).
    pub cluster: u32,
}

/// Attribute arguments: `tile = [..], threads = [..]` (or `variants = NAME`,
/// a set of [`crate::variants::SETS`]), `ascend = false`, `cluster = C`, `debug`.
pub fn parse_attr(attr: TokenStream, errs: &mut Errors) -> KernelAttr {
    let mut cluster = 0u32;
    let (variants, debug, ascend) = parse_attr_parts(attr, errs, &mut cluster);
    KernelAttr { variants, debug, ascend, cluster }
}

fn parse_attr_parts(attr: TokenStream, errs: &mut Errors, cluster: &mut u32) -> (Vec<Variant>, bool, bool) {
    let mut tiles: Vec<(u32, Span)> = Vec::new();
    let mut threads: Vec<(u32, Span)> = Vec::new();
    let mut debug = false;
    let mut ascend = true;
    // `variants = NAME`: a named set, instead of `tile` and `threads`.
    let mut set: Option<(&'static crate::variants::VariantSet, Span)> = None;
    // Options already given: a second `tile = [..]` would otherwise be
    // appended to the first (and a second `threads` miscounted).
    let mut seen: Vec<String> = Vec::new();
    let parser = syn::meta::parser(|meta| {
        if let Some(id) = meta.path.get_ident() {
            let name = id.to_string();
            if seen.contains(&name) {
                return Err(meta.error(format!(
                    "kernel option `{name}` is given twice: give it once (`tile = [..]` lists every tile size)"
                )));
            }
            seen.push(name);
        }
        if meta.path.is_ident("debug") {
            if !meta.input.is_empty() && !meta.input.peek(syn::Token![,]) {
                return Err(meta.error("`debug` takes no value: write `debug` to print the IR and the generated Rust"));
            }
            debug = true;
            return Ok(());
        }
        if meta.path.is_ident("ascend") {
            let v: syn::LitBool = meta.value()?.parse()?;
            ascend = v.value;
            return Ok(());
        }
        if meta.path.is_ident("cluster") {
            let lit: syn::LitInt = meta.value()?.parse().map_err(|e| {
                syn::Error::new(e.span(), "expected `cluster = C`, C the most CTAs of a cluster (2, 4, 8 or 16)")
            })?;
            let c = lit.base10_parse::<u32>()?;
            // A cluster kernel even when the size is refused: its cluster op is not reported too.
            *cluster = 16;
            if !matches!(c, 2 | 4 | 8 | 16) {
                return Err(syn::Error::new(
                    lit.span(),
                    format!("`cluster` must be 2, 4, 8 or 16 (CTAs of a thread-block cluster), got {c}"),
                ));
            }
            *cluster = c;
            return Ok(());
        }
        if meta.path.is_ident("variants") {
            let name: syn::Ident = meta.value()?.parse().map_err(|e| {
                syn::Error::new(e.span(), format!("expected a variant set name: {}", crate::variants::names()))
            })?;
            let Some(s) = crate::variants::lookup(&name.to_string()) else {
                return Err(syn::Error::new(
                    name.span(),
                    format!("unknown variant set `{name}`: expected {}", crate::variants::names()),
                ));
            };
            set = Some((s, name.span()));
            return Ok(());
        }
        let (which, what) = if meta.path.is_ident("tile") {
            (&mut tiles, "tile")
        } else if meta.path.is_ident("threads") {
            (&mut threads, "threads")
        } else {
            return Err(meta.error(
                "unknown kernel option: expected `tile = [..]`, `threads = [..]`, `variants = NAME`, `ascend = false`, `cluster = C` or `debug`",
            ));
        };
        let value = meta.value()?;
        let arr: syn::ExprArray = value.parse()?;
        if arr.elems.is_empty() {
            let hint = if what == "tile" {
                "give at least one tile size, or leave `tile` out for a scalar-only kernel"
            } else {
                "give one per tile, one for all, or leave `threads` out for the default"
            };
            return Err(syn::Error::new(arr.bracket_token.span.join(), format!("`{what} = []` is empty: {hint}")));
        }
        for e in arr.elems {
            match &e {
                syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) => match i.base10_parse::<u32>() {
                    Ok(v) => which.push((v, i.span())),
                    Err(err) => return Err(err),
                },
                other => return Err(syn::Error::new(other.span(), "expected an integer literal")),
            }
        }
        Ok(())
    });
    if let Err(e) = syn::parse::Parser::parse2(parser, attr) {
        errs.push_err(e);
        return (Vec::new(), debug, ascend);
    }
    if let Some((s, span)) = set {
        if let Some(&(_, at)) = tiles.first().or(threads.first()) {
            errs.push(
                at,
                format!("`variants = {}` gives the tiles and threads: leave out `tile` and `threads`", s.name),
            );
            return (Vec::new(), debug, ascend);
        }
        tiles = s.tiles.iter().map(|&t| (t, span)).collect();
        threads = s.threads.iter().map(|&t| (t, span)).collect();
    }
    if tiles.is_empty() {
        if let Some(&(_, s)) = threads.first() {
            errs.push(s, "`threads` needs `tile = [..]`: a kernel without tiles runs one thread a program");
            return (Vec::new(), debug, ascend);
        }
        // A kernel without tiles works on scalars only (one thread a program).
        tiles.push((1, Span::call_site()));
    }
    if threads.is_empty() {
        threads = tiles.iter().map(|&(t, s)| (default_threads(t), s)).collect();
    }
    if threads.len() == 1 && tiles.len() > 1 {
        threads = vec![threads[0]; tiles.len()];
    }
    if threads.len() != tiles.len() {
        errs.push(
            threads[0].1,
            format!(
                "`threads` has {} entries but `tile` has {}: give one each, or one for all",
                threads.len(),
                tiles.len()
            ),
        );
        return (Vec::new(), debug, ascend);
    }
    let mut out = Vec::new();
    for (&(tile, ts), &(th, hs)) in tiles.iter().zip(&threads) {
        let mut ok = true;
        if tile == 0 || !tile.is_power_of_two() {
            errs.push(ts, format!("tile size must be a power of two, got {tile}"));
            ok = false;
        }
        if th == 0 || !th.is_power_of_two() || th > 1024 {
            errs.push(hs, format!("threads must be a power of two in 1..=1024, got {th}"));
            ok = false;
        }
        if ok && th > tile {
            errs.push(hs, format!("threads ({th}) must not exceed the tile size ({tile})"));
            ok = false;
        }
        if ok && out.iter().any(|v: &Variant| v.tile == tile) {
            errs.push(ts, format!("tile size {tile} is listed twice"));
            ok = false;
        }
        if ok {
            out.push(Variant { tile, threads: th });
        }
    }
    (out, debug, ascend)
}

/// Default block size for a tile: 1024 threads at most, at least 1 item each
/// (a power of two even when the tile size is not, so a bad tile size is
/// reported once, not also as bad threads).
pub fn default_threads(tile: u32) -> u32 {
    match tile {
        0 => 1,
        t => (1u32 << (31 - t.leading_zeros())).min(1024),
    }
}

/// Parses the function item into an untyped kernel.
pub fn parse_fn(f: &syn::ItemFn, attr: KernelAttr, errs: &mut Errors) -> Kernel {
    let KernelAttr { variants, debug, ascend, cluster } = attr;
    let sig = &f.sig;
    let params = crate::sig::check_sig(f, crate::sig::Item::Kernel, errs).params;
    let docs = f.attrs.iter().filter(|a| a.path().is_ident("doc")).cloned().collect();
    // With a return type (reported above), a tail value is that one
    // mistake, not also an unused value.
    let body = match (&sig.output, f.block.stmts.last()) {
        (syn::ReturnType::Type(..), Some(syn::Stmt::Expr(_, None))) => {
            let mut b = (*f.block).clone();
            b.stmts.pop();
            parse_block(&b, errs)
        }
        _ => parse_block(&f.block, errs),
    };
    Kernel { name: sig.ident.clone(), vis: f.vis.clone(), docs, params, variants, debug, ascend, cluster, body }
}

/// Whether a parameter's Rust type is `Logits`: logits whose element type
/// (f32, bf16, f16) is chosen at launch, read as f32 (a read-only `Gm<f32>`
/// to the checker).
pub fn is_logits_type(t: &syn::Type) -> bool {
    matches!(t, syn::Type::Path(tp) if tp.qself.is_none() && tp.path.segments.len() == 1
        && tp.path.segments[0].ident == "Logits" && tp.path.segments[0].arguments.is_none())
}

/// The DSL type of a kernel parameter's Rust type, if it has one.
pub fn param_type(t: &syn::Type) -> Option<Ty> {
    if is_logits_type(t) {
        return Some(Ty::Gm(Prim::F32, false));
    }
    let syn::Type::Path(tp) = t else { return None };
    if tp.qself.is_some() || tp.path.segments.len() != 1 {
        return None;
    }
    let seg = &tp.path.segments[0];
    let name = seg.ident.to_string();
    match (&seg.arguments, name.as_str()) {
        (syn::PathArguments::None, n) => Prim::from_name(n).map(Ty::Scalar),
        (syn::PathArguments::AngleBracketed(ab), "Gm" | "GmMut") if ab.args.len() == 1 => {
            let syn::GenericArgument::Type(syn::Type::Path(inner)) = &ab.args[0] else { return None };
            let p = Prim::from_name(&inner.path.get_ident()?.to_string())?;
            if p == Prim::Bool {
                return None;
            }
            Some(Ty::Gm(p, name == "GmMut"))
        }
        _ => None,
    }
}

fn parse_block(b: &syn::Block, errs: &mut Errors) -> Block {
    let mut stmts = Vec::new();
    for s in &b.stmts {
        if let Some(st) = parse_stmt(s, errs) {
            stmts.push(st);
        }
    }
    Block { stmts }
}

/// Marks every identifier bound by a rejected pattern (see [`Errors::poison`]).
/// Marks the names a rejected pattern would bind (see [`Errors::poison`]).
pub fn poison_pat(p: &syn::Pat, errs: &mut Errors) {
    match p {
        syn::Pat::Ident(pi) => errs.poison(&pi.ident),
        syn::Pat::Tuple(t) => t.elems.iter().for_each(|e| poison_pat(e, errs)),
        syn::Pat::Type(t) => poison_pat(&t.pat, errs),
        syn::Pat::Paren(p) => poison_pat(&p.pat, errs),
        _ => {}
    }
}

/// Parses one statement (for `#[kernel_fn]` bodies).
pub fn parse_stmt_pub(s: &syn::Stmt, errs: &mut Errors) -> Option<Stmt> {
    parse_stmt(s, errs)
}

fn parse_stmt(s: &syn::Stmt, errs: &mut Errors) -> Option<Stmt> {
    match s {
        syn::Stmt::Local(l) => {
            let span = l.span();
            let Some(names) = parse_let_pat(&l.pat, errs) else {
                poison_pat(&l.pat, errs);
                return None;
            };
            let Some(init) = &l.init else {
                errs.push(span, "`let` needs an initial value");
                poison_pat(&l.pat, errs);
                return None;
            };
            if let Some((_, d)) = &init.diverge {
                errs.push(d.span(), "`let .. else` is not supported in kernels");
            }
            let Some(value) = parse_expr(&init.expr, errs) else {
                poison_pat(&l.pat, errs);
                return None;
            };
            Some(Stmt::Let { names, value, span })
        }
        syn::Stmt::Expr(e, _) => parse_stmt_expr(e, errs),
        syn::Stmt::Item(i) => {
            errs.push(i.span(), "items (fn, const, struct, use ...) cannot be declared inside a kernel");
            None
        }
        syn::Stmt::Macro(m) => {
            errs.push(m.span(), "macros cannot be used inside a kernel");
            None
        }
    }
}

fn parse_let_pat(p: &syn::Pat, errs: &mut Errors) -> Option<Vec<(syn::Ident, bool)>> {
    match p {
        syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
            Some(vec![(pi.ident.clone(), pi.mutability.is_some())])
        }
        syn::Pat::Tuple(t) => {
            let mut out = Vec::new();
            for e in &t.elems {
                match e {
                    syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                        out.push((pi.ident.clone(), pi.mutability.is_some()))
                    }
                    syn::Pat::Wild(w) => {
                        // A value not wanted: bound to a name nobody can write.
                        let id = syn::Ident::new(&format!("__unused{}", errs.generated.len()), w.span());
                        errs.generated.insert(id.to_string());
                        out.push((id, false));
                    }
                    other => {
                        errs.push(other.span(), "expected an identifier or `_` in the tuple pattern");
                        return None;
                    }
                }
            }
            Some(out)
        }
        syn::Pat::Type(pt) => {
            errs.push(pt.ty.span(), "type annotations on `let` are not supported: types are inferred from the ops");
            // Checked as if unannotated, so the name stays bound.
            parse_let_pat(&pt.pat, errs)
        }
        other => {
            errs.push(other.span(), "unsupported pattern: use `let name = ..` or `let (a, b) = ..`");
            None
        }
    }
}

fn parse_stmt_expr(e: &syn::Expr, errs: &mut Errors) -> Option<Stmt> {
    match e {
        syn::Expr::Block(b) => {
            // A bare `{ .. }` statement, not a value: its own message.
            errs.push(b.span(), unsupported_expr(e));
            None
        }
        syn::Expr::Assign(a) => {
            let target = assign_target(&a.left, errs)?;
            let value = parse_expr(&a.right, errs)?;
            Some(Stmt::Assign { target, op: None, value, span: a.span() })
        }
        syn::Expr::Binary(b) if compound_op(&b.op).is_some() => {
            let target = assign_target(&b.left, errs)?;
            let value = parse_expr(&b.right, errs)?;
            Some(Stmt::Assign { target, op: compound_op(&b.op), value, span: b.span() })
        }
        syn::Expr::If(i) => {
            let cond = parse_expr(&i.cond, errs)?;
            let then = parse_block(&i.then_branch, errs);
            let els = match &i.else_branch {
                None => None,
                Some((_, e)) => match &**e {
                    syn::Expr::Block(b) => Some(parse_block(&b.block, errs)),
                    syn::Expr::If(_) => parse_stmt_expr(e, errs).map(|s| Block { stmts: vec![s] }),
                    other => {
                        errs.push(other.span(), "expected a block after `else`");
                        None
                    }
                },
            };
            Some(Stmt::If { cond, then, els, span: i.span() })
        }
        syn::Expr::ForLoop(f) => {
            let var = match &*f.pat {
                syn::Pat::Ident(pi) if pi.mutability.is_none() && pi.by_ref.is_none() => pi.ident.clone(),
                other => {
                    errs.push(other.span(), "the loop variable must be a plain identifier");
                    poison_pat(other, errs);
                    return None;
                }
            };
            if let Some(l) = &f.label {
                errs.push(l.span(), "loop labels are not supported");
            }
            let syn::Expr::Range(r) = &*f.expr else {
                errs.push(f.expr.span(), "a kernel loop must range over scalars: `for i in a..b`");
                errs.poison(&var);
                return None;
            };
            let limits = match &r.limits {
                syn::RangeLimits::HalfOpen(t) => t.spans[0],
                syn::RangeLimits::Closed(t) => t.spans[0],
            };
            if matches!(r.limits, syn::RangeLimits::Closed(_)) {
                errs.push(limits, "use a half-open range `a..b`");
                errs.poison(&var);
                return None;
            }
            let (Some(s), Some(en)) = (&r.start, &r.end) else {
                errs.push(limits, "a kernel loop needs both bounds: `for i in a..b`");
                errs.poison(&var);
                return None;
            };
            let start = parse_expr(s, errs)?;
            let end = parse_expr(en, errs)?;
            let body = parse_block(&f.body, errs);
            Some(Stmt::For { var, start, end, body, span: f.span() })
        }
        syn::Expr::While(w) => {
            errs.push(w.while_token.span, "`while` loops are not supported: use `for i in a..b` with a flag");
            None
        }
        syn::Expr::Loop(l) => {
            errs.push(l.loop_token.span, "`loop` is not supported: use `for i in a..b` with a flag");
            None
        }
        syn::Expr::Return(r) => {
            errs.push(r.span(), "`return` is not supported in kernels: use `if` around the rest");
            None
        }
        syn::Expr::Break(b) => {
            errs.push(b.span(), "`break` is not supported in kernels: use a flag");
            None
        }
        syn::Expr::Continue(c) => {
            errs.push(c.span(), "`continue` is not supported in kernels: use `if`");
            None
        }
        other => parse_expr(other, errs).map(Stmt::Expr),
    }
}

fn assign_target(e: &syn::Expr, errs: &mut Errors) -> Option<syn::Ident> {
    match e {
        syn::Expr::Path(p) if p.path.get_ident().is_some() => p.path.get_ident().cloned(),
        other => {
            errs.push(other.span(), "only local variables can be assigned");
            None
        }
    }
}

fn compound_op(op: &syn::BinOp) -> Option<BinOp> {
    Some(match op {
        syn::BinOp::AddAssign(_) => BinOp::Add,
        syn::BinOp::SubAssign(_) => BinOp::Sub,
        syn::BinOp::MulAssign(_) => BinOp::Mul,
        syn::BinOp::DivAssign(_) => BinOp::Div,
        syn::BinOp::RemAssign(_) => BinOp::Rem,
        syn::BinOp::BitAndAssign(_) => BinOp::BitAnd,
        syn::BinOp::BitOrAssign(_) => BinOp::BitOr,
        syn::BinOp::BitXorAssign(_) => BinOp::BitXor,
        syn::BinOp::ShlAssign(_) => BinOp::Shl,
        syn::BinOp::ShrAssign(_) => BinOp::Shr,
        _ => return None,
    })
}

fn bin_op(op: &syn::BinOp) -> Option<BinOp> {
    Some(match op {
        syn::BinOp::Add(_) => BinOp::Add,
        syn::BinOp::Sub(_) => BinOp::Sub,
        syn::BinOp::Mul(_) => BinOp::Mul,
        syn::BinOp::Div(_) => BinOp::Div,
        syn::BinOp::Rem(_) => BinOp::Rem,
        syn::BinOp::Lt(_) => BinOp::Lt,
        syn::BinOp::Le(_) => BinOp::Le,
        syn::BinOp::Gt(_) => BinOp::Gt,
        syn::BinOp::Ge(_) => BinOp::Ge,
        syn::BinOp::Eq(_) => BinOp::Eq,
        syn::BinOp::Ne(_) => BinOp::Ne,
        syn::BinOp::And(_) => BinOp::And,
        syn::BinOp::Or(_) => BinOp::Or,
        syn::BinOp::BitAnd(_) => BinOp::BitAnd,
        syn::BinOp::BitOr(_) => BinOp::BitOr,
        syn::BinOp::BitXor(_) => BinOp::BitXor,
        syn::BinOp::Shl(_) => BinOp::Shl,
        syn::BinOp::Shr(_) => BinOp::Shr,
        _ => return None,
    })
}

/// Parses an expression of the DSL.
pub fn parse_expr(e: &syn::Expr, errs: &mut Errors) -> Option<Expr> {
    let span = e.span();
    let kind = match e {
        syn::Expr::Paren(p) => return parse_expr(&p.expr, errs),
        syn::Expr::Group(g) => return parse_expr(&g.expr, errs),
        syn::Expr::Lit(l) => ExprKind::Lit(parse_lit(&l.lit, errs)?),
        syn::Expr::Path(p) => {
            if p.qself.is_some() {
                errs.push(span, "qualified paths are not supported");
                return None;
            }
            let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
            match segs.iter().map(|s| s.as_str()).collect::<Vec<_>>().as_slice() {
                ["TILE"] => ExprKind::Const(Const::Tile),
                ["NEG_INF"] | ["f32", "NEG_INFINITY"] => ExprKind::Const(Const::NegInf),
                ["POS_INF"] | ["f32", "INFINITY"] => ExprKind::Const(Const::PosInf),
                [_] => ExprKind::Var(p.path.segments[0].ident.clone()),
                _ => {
                    errs.push(
                        span,
                        "unknown path: the DSL knows local names, parameters, `TILE`, `NEG_INF` and `POS_INF`",
                    );
                    return None;
                }
            }
        }
        syn::Expr::Unary(u) => {
            let op = match u.op {
                syn::UnOp::Neg(_) => UnOp::Neg,
                syn::UnOp::Not(_) => UnOp::Not,
                _ => {
                    errs.push(span, "dereference is not supported in kernels");
                    return None;
                }
            };
            ExprKind::Unary(op, Box::new(parse_expr(&u.expr, errs)?))
        }
        syn::Expr::Binary(b) => {
            let Some(op) = bin_op(&b.op) else {
                errs.push(b.op.span(), "compound assignment is only allowed as a statement");
                return None;
            };
            let l = parse_expr(&b.left, errs);
            let r = parse_expr(&b.right, errs);
            ExprKind::Binary(op, Box::new(l?), Box::new(r?))
        }
        syn::Expr::Cast(c) => {
            let inner = parse_expr(&c.expr, errs)?;
            let p = match &*c.ty {
                syn::Type::Path(tp) => tp.path.get_ident().and_then(|i| Prim::from_name(&i.to_string())),
                _ => None,
            };
            let Some(p) = p else {
                errs.push(c.ty.span(), "casts go to a primitive type: bool, i32, u32, i64, u64, f32, f64");
                return None;
            };
            ExprKind::Cast(Box::new(inner), p)
        }
        syn::Expr::Call(c) => {
            let name = match &*c.func {
                syn::Expr::Path(p) if p.path.get_ident().is_some() => p.path.get_ident().unwrap().to_string(),
                other => {
                    errs.push(other.span(), "only the DSL's ops can be called");
                    return None;
                }
            };
            let Some(op) = Op::from_name(&name) else {
                if errs.is_poisoned(&name) {
                    // A rejected binding (e.g. a closure): already reported.
                    return None;
                }
                if let Some(near) = crate::ops::near_op(&name) {
                    errs.push(
                        c.func.span(),
                        format!("unknown op `{name}`: did you mean `{near}`? (see docs/DSL.md for the op set)"),
                    );
                    return None;
                }
                // Maybe a `#[kernel_fn]` helper: `crate::expand` fetches it.
                let id = match &*c.func {
                    syn::Expr::Path(p) => p.path.get_ident().unwrap().clone(),
                    _ => unreachable!(),
                };
                if !errs.unknown_calls.iter().any(|(n, _)| *n == id) {
                    errs.unknown_calls.push((id, span));
                }
                return None;
            };
            if c.args.len() != op.arity() {
                errs.push(
                    span,
                    format!("`{name}` takes {} argument(s), got {}: {}", op.arity(), c.args.len(), op.signature()),
                );
                return None;
            }
            let mut args = Vec::new();
            let mut bad = false;
            for a in &c.args {
                match parse_expr(a, errs) {
                    Some(x) => args.push(x),
                    None => bad = true,
                }
            }
            if bad {
                return None;
            }
            ExprKind::Call(op, args)
        }
        syn::Expr::If(i) => {
            let cond = parse_expr(&i.cond, errs)?;
            let then = block_value(&i.then_branch, errs)?;
            let Some((_, els)) = &i.else_branch else {
                errs.push(span, "an `if` used as a value needs an `else`");
                return None;
            };
            let els = match &**els {
                syn::Expr::Block(b) => block_value(&b.block, errs)?,
                other => parse_expr(other, errs)?,
            };
            ExprKind::If(Box::new(cond), Box::new(then), Box::new(els))
        }
        syn::Expr::Block(b) if b.block.stmts.len() == 1 => return block_value(&b.block, errs),
        syn::Expr::MethodCall(m) => {
            errs.push(m.method.span(), "method calls are not supported: use the DSL's ops as functions");
            return None;
        }
        syn::Expr::Closure(c) => {
            errs.push(c.span(), "closures are not supported in kernels");
            return None;
        }
        syn::Expr::Index(i) => {
            errs.push(i.span(), "indexing is not supported: use `get(tile, i)` or `load_scalar(buf, i)`");
            return None;
        }
        syn::Expr::Unsafe(u) => {
            errs.push(u.unsafe_token.span, "`unsafe` is not allowed in kernels");
            return None;
        }
        syn::Expr::Macro(m) => {
            errs.push(m.mac.path.span(), "macros cannot be used inside a kernel");
            return None;
        }
        syn::Expr::Field(f) => {
            errs.push(
                f.member.span(),
                "field access is not supported: kernel parameters are plain buffers and scalars",
            );
            return None;
        }
        other => {
            errs.push(other.span(), unsupported_expr(other));
            return None;
        }
    };
    let mut out = Expr::new(kind, span);
    out.end = last_span(e).unwrap_or(span);
    Some(out)
}

fn block_value(b: &syn::Block, errs: &mut Errors) -> Option<Expr> {
    match b.stmts.as_slice() {
        [syn::Stmt::Expr(e, None)] => parse_expr(e, errs),
        _ => {
            errs.push(b.span(), "a branch used as a value must be a single expression");
            None
        }
    }
}

/// The error for Rust syntax outside the DSL: what it is, and what to
/// write instead (docs/DSL.md, "Statements").
fn unsupported_expr(e: &syn::Expr) -> &'static str {
    match e {
        syn::Expr::Match(_) => "`match` is not in the DSL: use `if` / `else if` on scalars, or `select` per element",
        syn::Expr::Tuple(t) if t.elems.is_empty() => "`()` is not a value in the DSL",
        syn::Expr::Tuple(_) => "tuples are not values in the DSL (only a `#[kernel_fn]` tail): bind each part with its own `let`",
        syn::Expr::Array(_) | syn::Expr::Repeat(_) => "arrays are not in the DSL: use a tile (`full`, `iota`, `load`)",
        syn::Expr::Field(_) => "field access is not in the DSL: use the ops as functions (`len(t)` is a tile's length)",
        syn::Expr::Struct(_) => "struct literals are not in the DSL",
        syn::Expr::Try(_) => "`?` is not in the DSL: no op fails",
        syn::Expr::Range(_) => "a range is not a value: it only gives the bounds of a `for` loop",
        syn::Expr::Async(_) | syn::Expr::Await(_) => "`async` / `.await` are not in the DSL",
        syn::Expr::Let(_) => "`let` patterns in conditions (`if let`, `while let`) are not in the DSL: compare instead",
        syn::Expr::Block(_) => "a bare `{ .. }` block is not in the DSL: write its statements directly (`if c { a } else { b }` for a value)",
        _ => "unsupported expression in a kernel (see docs/DSL.md, \"Statements\" and \"Ops\")",
    }
}

fn parse_lit(l: &syn::Lit, errs: &mut Errors) -> Option<Lit> {
    match l {
        syn::Lit::Int(i) => {
            let suffix = i.suffix();
            let p = if suffix.is_empty() { None } else { Prim::from_name(suffix) };
            if !suffix.is_empty() && !p.is_some_and(|p| p.is_int() || p.is_float()) {
                errs.push(
                    i.span(),
                    format!("unsupported literal suffix `{suffix}`: use i32, u32, i64, u64, f32 or f64"),
                );
                return None;
            }
            match i.base10_parse::<u64>() {
                Ok(v) => Some(Lit::Int(v, p)),
                Err(e) => {
                    errs.push_err(e);
                    None
                }
            }
        }
        syn::Lit::Float(f) => {
            let suffix = f.suffix();
            let p = if suffix.is_empty() { None } else { Prim::from_name(suffix) };
            if !suffix.is_empty() && !p.is_some_and(|p| p.is_float()) {
                errs.push(f.span(), format!("unsupported float literal suffix `{suffix}`: use f32 or f64"));
                return None;
            }
            match f.base10_parse::<f64>() {
                Ok(v) => Some(Lit::Float(v, p)),
                Err(e) => {
                    errs.push_err(e);
                    None
                }
            }
        }
        syn::Lit::Bool(b) => Some(Lit::Bool(b.value)),
        other => {
            errs.push(other.span(), "only integer, float and bool literals are supported");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "dropped without `check()`")]
    fn an_unchecked_collector_panics_when_dropped() {
        let mut errs = Errors::default();
        errs.push(Span::call_site(), "lost");
        drop(errs);
    }

    #[test]
    #[should_panic(expected = "dropped without `check()`")]
    fn an_empty_unchecked_collector_panics_too() {
        let _errs = Errors::default();
    }

    #[test]
    fn check_combines_every_error_in_order() {
        let mut errs = Errors::default();
        errs.push(Span::call_site(), "first");
        errs.push((Span::call_site(), Span::call_site()), "second");
        let mut other = Errors::default();
        other.push(Span::call_site(), "third");
        other.warnings.push((Span::call_site(), "a warning, not moved".into()));
        errs.append(other);
        let e = errs.check().unwrap_err();
        let msgs: Vec<String> = e.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(msgs, ["first", "second", "third"]);
        assert!(Errors::default().check().is_ok());
    }

    #[test]
    fn a_kernel_reports_every_error_at_once() {
        // Errors of the signature, the body and the types, in one result.
        let e = crate::compile(
            quote::quote!(tile = [64]),
            quote::quote!(
                fn k<T>(x: Gm<f32>, v: Vec<u8>) -> u32 {
                    while true {}
                    let a = load(x, 0u64, 3.0f32);
                    let b = unknown_name + 1u32;
                }
            ),
        )
        .err()
        .unwrap();
        let msgs: Vec<String> = e.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(msgs.len(), 6, "{msgs:?}");
        assert!(msgs[0].starts_with("a kernel cannot be generic"), "{msgs:?}");
        assert!(msgs[1].starts_with("a kernel returns nothing"), "{msgs:?}");
        assert!(msgs[2].starts_with("unsupported parameter type"), "{msgs:?}");
        assert!(msgs[3].starts_with("`while` loops are not supported"), "{msgs:?}");
        assert!(msgs[4].contains("argument 3 of `load`"), "{msgs:?}");
        assert_eq!(msgs[5], "unknown name `unknown_name`");
    }
}
