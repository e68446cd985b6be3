//! Validate: names, types and shapes (scalar / tile / buffer) of every node.
//!
//! Fills `Expr::ty`. Conditions and loop bounds are scalars, so control flow
//! is uniform across a program's threads or vector lanes on every target.

use std::collections::HashMap;

use proc_macro2::Span;

use crate::ir::*;
use crate::ops::{arg_kinds, elem_allowed, result_type, ArgKind, Op};
use crate::parse::Errors;
use crate::visit::{walk_block, walk_expr, walk_stmt, Visit};

#[derive(Clone)]
struct Binding {
    ty: Ty,
    mutable: bool,
    is_param: bool,
}

struct Scopes {
    stack: Vec<HashMap<String, Binding>>,
    /// Local bindings of each scope in order, and whether each was read.
    track: Vec<Vec<(syn::Ident, bool)>>,
}

impl Scopes {
    /// Looks a name up (and marks its binding read).
    fn get(&mut self, name: &str) -> Option<&Binding> {
        if let Some(e) = self.track.iter_mut().rev().find_map(|s| s.iter_mut().rev().find(|(n, _)| n == name)) {
            e.1 = true;
        }
        self.stack.iter().rev().find_map(|s| s.get(name))
    }
    fn bind(&mut self, name: &syn::Ident, b: Binding) {
        if !b.is_param {
            if let Some(t) = self.track.last_mut() {
                t.push((name.clone(), false));
            }
        }
        self.stack.last_mut().unwrap().insert(name.to_string(), b);
    }
    fn push(&mut self) {
        self.stack.push(HashMap::new());
        self.track.push(Vec::new());
    }
    /// Closes a scope: its bindings never read are warned about.
    fn pop(&mut self, errs: &mut Errors) {
        self.stack.pop();
        for (n, used) in self.track.pop().unwrap_or_default() {
            let s = n.to_string();
            if !used && !s.starts_with('_') && !errs.generated.contains(&s) {
                errs.warnings.push((n.span(), format!("unused binding `{s}`: remove it, or name it `_{s}`")));
            }
        }
    }
}

/// Type-checks the kernel in place.
pub fn check(k: &mut Kernel, errs: &mut Errors) {
    let mut seen = HashMap::new();
    let mut top = HashMap::new();
    for p in &k.params {
        let n = p.name.to_string();
        if seen.insert(n.clone(), ()).is_some() {
            errs.push(p.span, format!("parameter `{n}` is declared twice"));
        }
        if n.starts_with("__") {
            errs.push(p.span, "names starting with `__` are reserved for generated code");
        }
        shadows_const(&p.name, errs);
        top.insert(n, Binding { ty: p.ty.clone(), mutable: false, is_param: true });
    }
    let mut scopes = Scopes { stack: vec![top], track: vec![Vec::new()] };
    check_block(&mut k.body, &mut scopes, errs);
    literal_ranges(&k.body, errs);
    if let Some(min) = k.variants.iter().map(|v| v.tile).min().filter(|&t| t > 1) {
        literal_lengths(&k.body, min, errs);
    }
    Fusion { errs }.visit_block(&k.body);
    cluster_ops(k, errs);
    warp_scopes(&k.body, errs);
}

/// `if warp_scope(len) { .. }` (docs/DSL.md, "Warp scopes"): on NVIDIA its
/// block may run on one warp, every tile held by its lanes, while the rest
/// of the block waits at the join. So `warp_scope` is only the whole
/// condition of an `if` without `else`, scopes do not nest, the block's
/// results leave it through stores only (no tile from outside is read, no
/// variable from outside is assigned), and it calls no op that needs the
/// whole block (selection, sorting).
fn warp_scopes(b: &Block, errs: &mut Errors) {
    // Calls of `warp_scope` anywhere but as a scope's condition.
    struct Stray<'e> {
        errs: &'e mut Errors,
    }
    impl<'a> Visit<'a> for Stray<'_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            match s {
                Stmt::If { cond, then, els, .. } if cond.is_warp_scope() => {
                    if let Some(e) = els {
                        self.errs.push(
                            cond.range(),
                            "a warp scope has no `else`: its block always runs (on one warp when `len` fits, else on the block)",
                        );
                        self.visit_block(e);
                    }
                    if let ExprKind::Call(_, args) = &cond.kind {
                        self.visit_expr(&args[0]);
                    }
                    scope_body(then, self.errs);
                    self.visit_block(then);
                }
                _ => walk_stmt(self, s),
            }
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            if matches!(e.kind, ExprKind::Call(Op::WarpScope, _)) {
                self.errs.push(
                    e.range(),
                    "`warp_scope(len)` is the whole condition of an `if` without `else` (`if warp_scope(len) { .. }`), not a value",
                );
            }
            walk_expr(self, e);
        }
    }
    Stray { errs }.visit_block(b);
}

/// The rules inside one warp scope's block (see [`warp_scopes`]).
fn scope_body(b: &Block, errs: &mut Errors) {
    struct Inner<'e> {
        errs: &'e mut Errors,
        /// Names bound inside the scope, one frame per open block.
        bound: Vec<Vec<String>>,
    }
    impl Inner<'_> {
        fn is_bound(&self, name: &str) -> bool {
            self.bound.iter().any(|f| f.iter().any(|n| n == name))
        }
        fn bind(&mut self, name: String) {
            self.bound.last_mut().expect("a frame per open block").push(name);
        }
    }
    impl<'a> Visit<'a> for Inner<'_> {
        fn visit_block(&mut self, b: &'a Block) {
            self.bound.push(Vec::new());
            walk_block(self, b);
            self.bound.pop();
        }
        fn visit_stmt(&mut self, s: &'a Stmt) {
            match s {
                Stmt::Let { names, .. } => {
                    // The value first: it may read an outer tile of the same name.
                    walk_stmt(self, s);
                    for (n, _) in names {
                        self.bind(n.to_string());
                    }
                    return;
                }
                Stmt::For { var, start, end, body, .. } => {
                    self.visit_expr(start);
                    self.visit_expr(end);
                    // The variable is bound in the body only.
                    self.bound.push(vec![var.to_string()]);
                    self.visit_block(body);
                    self.bound.pop();
                    return;
                }
                Stmt::Assign { target, span, .. } if !self.is_bound(&target.to_string()) => self.errs.push(
                    *span,
                    format!("`{target}` is declared outside this warp scope: a warp scope's results leave it through stores only (on NVIDIA one warp runs it)"),
                ),
                Stmt::If { cond, .. } if cond.is_warp_scope() => {
                    self.errs.push(cond.range(), "warp scopes do not nest");
                }
                _ => {}
            }
            walk_stmt(self, s);
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            match &e.kind {
                ExprKind::Var(id) if e.ty.is_tile() && !self.is_bound(&id.to_string()) => self.errs.push(
                    e.range(),
                    format!("tile `{id}` is from outside this warp scope: load or compute it inside (on NVIDIA the scope's tiles live in one warp's lanes)"),
                ),
                ExprKind::Const(Const::Tile) => self.errs.push(
                    e.range(),
                    "`TILE` is the block's tile, not a warp scope's: inside a scope use the lengths of its own tiles",
                ),
                ExprKind::Call(op, _) if op.is_selection() => self.errs.push(
                    e.range(),
                    format!("`{}` needs the whole block: call it outside the warp scope", op.name()),
                ),
                _ => {}
            }
            walk_expr(self, e);
        }
    }
    Inner { errs, bound: Vec::new() }.visit_block(b);
}

/// `top_n_cluster` runs on every CTA of a thread-block cluster and only the
/// leader goes on after it: a cluster kernel calls it exactly once, as the
/// value of a `let` at the top level of its body; a plain kernel never does.
fn cluster_ops(k: &Kernel, errs: &mut Errors) {
    struct Calls<'a>(Vec<&'a Expr>);
    impl<'a> Visit<'a> for Calls<'a> {
        fn visit_expr(&mut self, e: &'a Expr) {
            if matches!(e.kind, ExprKind::Call(Op::TopNCluster, _)) {
                self.0.push(e);
            }
            walk_expr(self, e);
        }
    }
    let mut calls = Calls(Vec::new());
    calls.visit_block(&k.body);
    let top: Vec<*const Expr> = k
        .body
        .stmts
        .iter()
        .filter_map(|s| match s {
            Stmt::Let { value, .. } if matches!(value.kind, ExprKind::Call(Op::TopNCluster, _)) => {
                Some(value as *const Expr)
            }
            _ => None,
        })
        .collect();
    if k.cluster == 0 {
        for c in &calls.0 {
            errs.push(
                c.range(),
                "`top_n_cluster` runs on the CTAs of a thread-block cluster: only a `#[kernel(cluster = C)]` kernel calls it",
            );
        }
        return;
    }
    if calls.0.is_empty() {
        errs.push(
            k.name.span(),
            "a `cluster` kernel runs each row on several CTAs: it selects with `top_n_cluster` (`let (x, id, bad, finite) = top_n_cluster(..);`)",
        );
    }
    let mut firsts = 0;
    for c in &calls.0 {
        if !top.contains(&(*c as *const Expr)) {
            errs.push(c.range(), "`top_n_cluster` must be the value of a `let` at the top of the kernel body (not inside `if`, `for` or another expression): every CTA of the cluster calls it, and only the leader goes on after it");
        } else {
            firsts += 1;
            if firsts > 1 {
                errs.push(
                    c.range(),
                    "`top_n_cluster` is called once a kernel: only the cluster's leader goes on after the first call",
                );
            }
        }
    }
}

/// Most distinct tile operands of one fused elementwise map (`rt::map1..map4`).
pub const MAX_MAP_TILES: usize = 4;

/// Reports fused elementwise expressions over more than [`MAX_MAP_TILES`]
/// distinct tiles (the emitter fuses each maximal elementwise tile subtree
/// into one map; a variable read twice counts once).
struct Fusion<'e> {
    errs: &'e mut Errors,
}

impl<'a> Visit<'a> for Fusion<'_> {
    fn visit_expr(&mut self, e: &'a Expr) {
        if !(e.ty.is_tile() && e.is_elementwise()) {
            return walk_expr(self, e);
        }
        let mut leaves = Leaves { fusion: self, leaves: Vec::new() };
        walk_expr(&mut leaves, e);
        let n = leaves.leaves.len();
        if n > MAX_MAP_TILES {
            self.errs.push(
                e.span,
                format!(
                    "this elementwise expression reads {n} distinct tiles, but one fused map takes at most {MAX_MAP_TILES}: bind part of it with `let`"
                ),
            );
        }
    }
}

/// The distinct tile leaves of one fused map (visiting its operands).
struct Leaves<'f, 'e> {
    fusion: &'f mut Fusion<'e>,
    leaves: Vec<String>,
}

impl<'a> Visit<'a> for Leaves<'_, '_> {
    fn visit_expr(&mut self, c: &'a Expr) {
        if !c.ty.is_tile() {
            // A scalar operand: computed before the map (its own maps, if any).
            self.fusion.visit_expr(c);
        } else if c.is_elementwise() {
            walk_expr(self, c);
        } else {
            let key = match &c.kind {
                ExprKind::Var(id) => id.to_string(),
                _ => format!("#{}", self.leaves.len()),
            };
            if !self.leaves.contains(&key) {
                self.leaves.push(key);
            }
            self.fusion.visit_expr(c);
        }
    }
}

fn check_block(b: &mut Block, sc: &mut Scopes, errs: &mut Errors) {
    sc.push();
    for s in &mut b.stmts {
        check_stmt(s, sc, errs);
    }
    sc.pop(errs);
}

fn check_stmt(s: &mut Stmt, sc: &mut Scopes, errs: &mut Errors) {
    match s {
        Stmt::Let { names, value, span } => {
            let mut ty = expr(value, sc, errs);
            // An argument of an inlined `#[kernel_fn]`: the parameter's type.
            if let [(name, _)] = names.as_slice() {
                if let Some((want, what)) = errs.expect.get(&name.to_string()).cloned() {
                    // `want` is `()` for a helper parameter already rejected where the helper is defined.
                    if (ty != Ty::Unit || returns_unit(value)) && want != Ty::Unit {
                        settle_literal(value, &want);
                        let got = value.ty.clone();
                        let ok = got == want
                            || (matches!(got, Ty::IntLit)
                                && want.prim().is_some_and(|p| p.is_int() || p.is_float())
                                && !want.is_tile())
                            || (matches!(got, Ty::FloatLit)
                                && want.prim().is_some_and(|p| p.is_float())
                                && !want.is_tile());
                        if ok {
                            value.ty = want.clone();
                            ty = want;
                        } else {
                            errs.push(
                                value.range(),
                                format!(
                                    "{what} has type {}, but a value of type {} was passed{}",
                                    want.describe(),
                                    got.describe(),
                                    scalar_hint(&got, &want)
                                ),
                            );
                            sc.bind(name, Binding { ty: Ty::Unit, mutable: false, is_param: false });
                            return;
                        }
                    }
                }
            }
            if ty == Ty::Unit && !returns_unit(value) {
                // An error was reported inside the value: bind the names as
                // errors so their uses are not reported again.
                for (name, m) in names.iter() {
                    sc.bind(name, Binding { ty: Ty::Unit, mutable: *m, is_param: false });
                }
                return;
            }
            let tys: Vec<Ty> = match (&ty, names.len()) {
                (Ty::Tuple(v), n) if v.len() == n => v.clone(),
                (Ty::Tuple(v), n) => {
                    errs.push(*span, format!("this op returns {} values but the pattern binds {n}", v.len()));
                    vec![Ty::Unit; n]
                }
                (_, 1) => vec![ty.clone()],
                (t, n) => {
                    errs.push(*span, format!("cannot destructure {} into {n} names", t.describe()));
                    vec![Ty::Unit; n]
                }
            };
            for ((name, m), t) in names.iter().zip(tys) {
                let t = match t {
                    Ty::IntLit | Ty::FloatLit => {
                        errs.push(
                            value.range(),
                            format!("give the literal bound to `{name}` a type suffix, e.g. `0u32` or `0.0f32`"),
                        );
                        // Bound as an error, so its uses are not reported again.
                        Ty::Unit
                    }
                    Ty::Unit if !returns_unit(value) => Ty::Unit, // an error reported above
                    Ty::Unit => {
                        errs.push(value.range(), format!("`{name}` would be bound to `()`: this op returns nothing"));
                        sc.bind(name, Binding { ty: Ty::Unit, mutable: *m, is_param: false });
                        continue;
                    }
                    Ty::Gm(..) => {
                        errs.push(value.range(), "global buffers cannot be rebound: use the parameter directly");
                        sc.bind(name, Binding { ty: Ty::Unit, mutable: *m, is_param: false });
                        continue;
                    }
                    t => t,
                };
                if name.to_string().starts_with("__") && !errs.generated.contains(&name.to_string()) {
                    errs.push(name.span(), "names starting with `__` are reserved for generated code");
                }
                shadows_const(name, errs);
                sc.bind(name, Binding { ty: t, mutable: *m, is_param: false });
            }
        }
        Stmt::Assign { target, op, value, span } => {
            let vt = expr(value, sc, errs);
            let Some(b) = sc.get(&target.to_string()).cloned() else {
                if !errs.is_poisoned(&target.to_string()) {
                    errs.push(target.span(), format!("unknown name `{target}`"));
                }
                return;
            };
            if b.ty == Ty::Unit {
                return; // bound as an error: already reported where it was declared
            }
            if b.is_param {
                errs.push(target.span(), format!("`{target}` is a parameter and cannot be assigned"));
                return;
            }
            if !b.mutable {
                errs.push(target.span(), format!("`{target}` is not mutable: declare it with `let mut`"));
                return;
            }
            let vt = match op {
                Some(o) => {
                    // Desugar `a op= e` into `a = a op e` so emitters see one form.
                    let t = if b.ty == Ty::Unit || vt == Ty::Unit {
                        Ty::Unit
                    } else {
                        binary_type(*o, &b.ty, &vt, (target.span(), value.end), errs)
                    };
                    let mut lhs = Expr::new(ExprKind::Var(target.clone()), target.span());
                    lhs.ty = b.ty.clone();
                    settle_literal(value, &b.ty);
                    let rhs = std::mem::replace(value, Expr::new(ExprKind::Lit(Lit::Bool(false)), *span));
                    let end = rhs.end;
                    *value = Expr {
                        kind: ExprKind::Binary(*o, Box::new(lhs), Box::new(rhs)),
                        ty: t.clone(),
                        span: *span,
                        end,
                    };
                    *op = None;
                    t
                }
                None => {
                    settle_literal(value, &b.ty);
                    vt
                }
            };
            if vt != Ty::Unit && b.ty != Ty::Unit && unify_assign(&b.ty, &vt).is_none() {
                let hint = if b.ty.is_tile() && !vt.is_tile() {
                    format!(": a scalar is not broadcast, write `{target} = full(len({target}), ..)`")
                } else {
                    String::new()
                };
                errs.push(
                    value.range(),
                    format!("cannot assign {} to `{target}` of type {}{hint}", vt.describe(), b.ty.describe()),
                );
            }
        }
        Stmt::Expr(e) => {
            let t = expr(e, sc, errs);
            if t != Ty::Unit {
                errs.push(e.range(), "this value is unused: bind it with `let` or remove it");
            }
        }
        Stmt::If { cond, then, els, .. } => {
            let ct = expr(cond, sc, errs);
            expect_scalar_bool(&ct, cond.range(), "an `if` condition", errs);
            check_block(then, sc, errs);
            if let Some(e) = els {
                check_block(e, sc, errs);
            }
        }
        Stmt::For { var, start, end, body, .. } => {
            let a = expr(start, sc, errs);
            let b = expr(end, sc, errs);
            let t = match unify_prims(&a, &b) {
                Some(Ty::Scalar(p)) if p.is_int() => Ty::Scalar(p),
                Some(Ty::IntLit) => Ty::Scalar(Prim::U32),
                _ if a == Ty::Unit || b == Ty::Unit => Ty::Scalar(Prim::U32),
                _ => {
                    errs.push(
                        start.range(),
                        format!(
                            "loop bounds must be scalar integers of one type, got {} and {}",
                            a.describe(),
                            b.describe()
                        ),
                    );
                    Ty::Scalar(Prim::U32)
                }
            };
            start.ty = t.clone();
            end.ty = t.clone();
            sc.push();
            shadows_const(var, errs);
            sc.bind(var, Binding { ty: t, mutable: false, is_param: false });
            check_block(body, sc, errs);
            sc.pop(errs);
        }
    }
}

/// Reports a binding named like a DSL constant: its uses would still read
/// the constant (and in the emitted Rust `let TILE = ..` is a pattern on
/// the constant, which rustc rejects).
fn shadows_const(name: &syn::Ident, errs: &mut Errors) {
    let n = name.to_string();
    if matches!(n.as_str(), "TILE" | "NEG_INF" | "POS_INF") {
        errs.push(name.span(), format!("`{n}` is a constant of the DSL: give the binding another name"));
    }
}

/// A hint for a tile passed where a scalar is wanted: how to get one.
fn scalar_hint(got: &Ty, want: &Ty) -> &'static str {
    if got.is_tile() && want.is_scalarish() {
        ": reduce the tile first (`reduce_sum`, `reduce_max`, `count`, `any`) or take one element with `get(tile, i)`"
    } else {
        ""
    }
}

fn expect_scalar_bool(t: &Ty, span: (Span, Span), what: &str, errs: &mut Errors) {
    match t {
        // `()`: an error already reported inside the condition.
        Ty::Scalar(Prim::Bool) | Ty::Unit => {}
        Ty::Tile(_) => errs.push(
            span,
            format!("{what} must be a scalar `bool`, not a tile: use `any`/`all` to reduce, or `select` per element"),
        ),
        other => errs.push(span, format!("{what} must be a scalar `bool`, got {}", other.describe())),
    }
}

/// Unifies element types of two scalar/tile/literal types, ignoring shape.
fn unify_prims(a: &Ty, b: &Ty) -> Option<Ty> {
    use Ty::*;
    let pa = prim_or_lit(a)?;
    let pb = prim_or_lit(b)?;
    let p = match (pa, pb) {
        (PL::P(x), PL::P(y)) if x == y => PL::P(x),
        (PL::P(x), PL::Int) | (PL::Int, PL::P(x)) if x.is_int() || x.is_float() => PL::P(x),
        (PL::P(x), PL::Float) | (PL::Float, PL::P(x)) if x.is_float() => PL::P(x),
        (PL::Int, PL::Int) => PL::Int,
        (PL::Float, PL::Float) | (PL::Int, PL::Float) | (PL::Float, PL::Int) => PL::Float,
        _ => return None,
    };
    let tile = a.is_tile() || b.is_tile();
    Some(match (p, tile) {
        (PL::P(x), true) => Tile(x),
        (PL::P(x), false) => Scalar(x),
        (PL::Int, true) => Tile(Prim::I32),
        (PL::Float, true) => Tile(Prim::F32),
        (PL::Int, false) => IntLit,
        (PL::Float, false) => FloatLit,
    })
}

#[derive(Clone, Copy, PartialEq)]
enum PL {
    P(Prim),
    Int,
    Float,
}

fn prim_or_lit(t: &Ty) -> Option<PL> {
    match t {
        Ty::Scalar(p) | Ty::Tile(p) => Some(PL::P(*p)),
        Ty::IntLit => Some(PL::Int),
        Ty::FloatLit => Some(PL::Float),
        _ => None,
    }
}

fn unify_assign(target: &Ty, v: &Ty) -> Option<()> {
    let u = unify_prims(target, v)?;
    // A scalar is not broadcast into a tile variable (that would need a
    // length): `t = full(len(t), v)` says which.
    if u.is_tile() != target.is_tile() || v.is_tile() != target.is_tile() {
        return None;
    }
    (u.prim() == target.prim()).then_some(())
}

fn binary_type(op: BinOp, l: &Ty, r: &Ty, span: (Span, Span), errs: &mut Errors) -> Ty {
    if matches!(l, Ty::Gm(..) | Ty::Tuple(_) | Ty::Unit) || matches!(r, Ty::Gm(..) | Ty::Tuple(_) | Ty::Unit) {
        errs.push(span, format!("`{}` needs scalars or tiles, got {} and {}", op.symbol(), l.describe(), r.describe()));
        return Ty::Unit;
    }
    if matches!(op, BinOp::Shl | BinOp::Shr) {
        let ok = matches!(l.prim(), Some(p) if p.is_int()) && matches!(r.prim(), Some(p) if p.is_int());
        if !ok || l.is_tile() || r.is_tile() {
            errs.push(span, "shifts take scalar integers");
        }
        return match l {
            Ty::IntLit => Ty::Scalar(Prim::U64),
            t => t.clone(),
        };
    }
    if op.is_logic() && (l.is_tile() || r.is_tile()) {
        errs.push(span, format!("`{}` works on scalar bools; use `&` / `|` on tiles of bool", op.symbol()));
        return Ty::Unit;
    }
    let Some(u) = unify_prims(l, r) else {
        errs.push(
            span,
            format!(
                "mismatched types {} and {} in `{}`: convert one with `as`",
                l.describe(),
                r.describe(),
                op.symbol()
            ),
        );
        return Ty::Unit;
    };
    let p = u.prim().unwrap();
    let tile = u.is_tile();
    if op.is_compare() {
        return if tile { Ty::Tile(Prim::Bool) } else { Ty::Scalar(Prim::Bool) };
    }
    if op.is_logic() {
        if p != Prim::Bool {
            errs.push(span, format!("`{}` needs bools", op.symbol()));
        }
        return Ty::Scalar(Prim::Bool);
    }
    if op.is_arith() && p == Prim::Bool {
        errs.push(span, format!("`{}` is not defined on bools", op.symbol()));
    }
    if matches!(op, BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor) && p.is_float() {
        errs.push(span, format!("`{}` is not defined on floats", op.symbol()));
    }
    u
}

fn expr(e: &mut Expr, sc: &mut Scopes, errs: &mut Errors) -> Ty {
    let t = expr_inner(e, sc, errs);
    e.ty = t.clone();
    t
}

fn expr_inner(e: &mut Expr, sc: &mut Scopes, errs: &mut Errors) -> Ty {
    let span = e.range();
    match &mut e.kind {
        ExprKind::Lit(Lit::Int(_, Some(p))) => Ty::Scalar(*p),
        ExprKind::Lit(Lit::Int(_, None)) => Ty::IntLit,
        ExprKind::Lit(Lit::Float(_, Some(p))) => Ty::Scalar(*p),
        ExprKind::Lit(Lit::Float(_, None)) => Ty::FloatLit,
        ExprKind::Lit(Lit::Bool(_)) => Ty::Scalar(Prim::Bool),
        ExprKind::Const(Const::Tile) => Ty::Scalar(Prim::U32),
        ExprKind::Const(_) => Ty::Scalar(Prim::F32),
        ExprKind::Var(id) => match sc.get(&id.to_string()) {
            Some(b) => b.ty.clone(),
            None => {
                if !errs.is_poisoned(&id.to_string()) {
                    errs.push(id.span(), format!("unknown name `{id}`"));
                }
                Ty::Unit
            }
        },
        ExprKind::Unary(op, x) => {
            let t = expr(x, sc, errs);
            let op = *op;
            if t == Ty::Unit {
                return Ty::Unit;
            }
            match (op, t.prim()) {
                (UnOp::Neg, Some(p)) if p != Prim::Bool && !matches!(t, Ty::Gm(..)) => t,
                (UnOp::Not, Some(p)) if (p == Prim::Bool || p.is_int()) && !matches!(t, Ty::Gm(..)) => t,
                _ => {
                    errs.push(
                        span,
                        format!("cannot apply `{}` to {}", if op == UnOp::Neg { "-" } else { "!" }, t.describe()),
                    );
                    Ty::Unit
                }
            }
        }
        ExprKind::Binary(op, l, r) => {
            let lt = expr(l, sc, errs);
            let rt = expr(r, sc, errs);
            if lt == Ty::Unit || rt == Ty::Unit {
                return Ty::Unit;
            }
            let t = binary_type(*op, &lt, &rt, span, errs);
            // Settle literal operands on the other side's type.
            settle_literal(l, &rt);
            settle_literal(r, &lt);
            t
        }
        ExprKind::Cast(x, p) => {
            let t = expr(x, sc, errs);
            if *p == Prim::Bool {
                errs.push(span, "cannot cast to bool: compare instead (`x != 0`)");
            }
            match t {
                Ty::Scalar(_) | Ty::IntLit | Ty::FloatLit => Ty::Scalar(*p),
                Ty::Tile(_) => Ty::Tile(*p),
                Ty::Unit => Ty::Unit,
                other => {
                    errs.push(span, format!("cannot cast {}", other.describe()));
                    Ty::Unit
                }
            }
        }
        ExprKind::If(c, a, b) => {
            let ct = expr(c, sc, errs);
            expect_scalar_bool(&ct, c.range(), "an `if` condition", errs);
            let at = expr(a, sc, errs);
            let bt = expr(b, sc, errs);
            if ct == Ty::Unit || at == Ty::Unit || bt == Ty::Unit {
                return Ty::Unit;
            }
            if at.is_tile() || bt.is_tile() {
                errs.push(span, "an `if` value cannot be a tile: use `select(cond, a, b)`");
                return Ty::Unit;
            }
            match unify_prims(&at, &bt) {
                Some(t) => {
                    settle_literal(a, &t);
                    settle_literal(b, &t);
                    t
                }
                None => {
                    errs.push(
                        span,
                        format!("`if` branches have different types: {} and {}", at.describe(), bt.describe()),
                    );
                    Ty::Unit
                }
            }
        }
        ExprKind::Call(op, args) => {
            let op = *op;
            let tys: Vec<Ty> = args.iter_mut().map(|a| expr(a, sc, errs)).collect();
            if tys.contains(&Ty::Unit) {
                return Ty::Unit;
            }
            if op.is_elem() {
                elem_call(op, args, &tys, span, errs)
            } else {
                op_call(op, args, &tys, span, errs)
            }
        }
    }
}

/// Whether `e` is a call of an op that returns nothing (a store): its type
/// `()` is its real type, not the mark of an error reported inside it.
fn returns_unit(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Call(op, _) if matches!(op, Op::Store | Op::StoreHead | Op::StoreScalar | Op::Scatter))
        && e.ty == Ty::Unit
}

/// Gives an unsuffixed literal the concrete type of its partner.
fn settle_literal(e: &mut Expr, partner: &Ty) {
    if matches!(e.ty, Ty::IntLit | Ty::FloatLit) {
        if let Some(p) = partner.prim() {
            if !matches!(partner, Ty::IntLit | Ty::FloatLit) {
                e.ty = Ty::Scalar(p);
            }
        }
    }
}

fn elem_call(op: Op, args: &mut [Expr], tys: &[Ty], span: (Span, Span), errs: &mut Errors) -> Ty {
    let tile = tys.iter().any(|t| t.is_tile());
    if tys.iter().any(|t| !(t.is_tile() || t.is_scalarish())) {
        errs.push(span, format!("`{}` takes scalars or tiles: {}", op.name(), op.signature()));
        return Ty::Unit;
    }
    let shape = |p: Prim| if tile { Ty::Tile(p) } else { Ty::Scalar(p) };
    match op {
        Op::Exp | Op::IsNan | Op::IsPosInf | Op::IsNegInf | Op::Abs | Op::ToFixed => {
            if !matches!(tys[0].prim(), Some(Prim::F32)) && tys[0] != Ty::FloatLit {
                errs.push(span, format!("`{}` takes f32, got {}", op.name(), tys[0].describe()));
            }
            settle_literal(&mut args[0], &Ty::Scalar(Prim::F32));
            match op {
                Op::Exp | Op::Abs => shape(Prim::F32),
                Op::ToFixed => shape(Prim::U64),
                _ => shape(Prim::Bool),
            }
        }
        Op::Min | Op::Max => match unify_prims(&tys[0], &tys[1]) {
            Some(t) => {
                settle_literal(&mut args[0], &t);
                settle_literal(&mut args[1], &t);
                t
            }
            None => {
                errs.push(
                    span,
                    format!(
                        "`{}` needs two values of one type, got {} and {}",
                        op.name(),
                        tys[0].describe(),
                        tys[1].describe()
                    ),
                );
                Ty::Unit
            }
        },
        Op::Select => {
            if tys[0].prim() != Some(Prim::Bool) {
                errs.push(args[0].range(), format!("`select` needs a bool condition, got {}", tys[0].describe()));
            }
            match unify_prims(&tys[1], &tys[2]) {
                Some(t) => {
                    let (p1, p2) = (tys[1].clone(), tys[2].clone());
                    settle_literal(&mut args[1], &p2);
                    settle_literal(&mut args[2], &p1);
                    let p = t.prim().unwrap();
                    let p = if matches!(t, Ty::IntLit) {
                        Prim::I32
                    } else if matches!(t, Ty::FloatLit) {
                        Prim::F32
                    } else {
                        p
                    };
                    if tile {
                        Ty::Tile(p)
                    } else {
                        t
                    }
                }
                None => {
                    errs.push(
                        span,
                        format!(
                            "`select` branches have different types: {} and {}",
                            tys[1].describe(),
                            tys[2].describe()
                        ),
                    );
                    Ty::Unit
                }
            }
        }
        _ => unreachable!("not an element function"),
    }
}

fn op_call(op: Op, args: &mut [Expr], tys: &[Ty], span: (Span, Span), errs: &mut Errors) -> Ty {
    let kinds = arg_kinds(op);
    let mut elem: Option<Prim> = None;
    // Which argument bound `elem`, for messages (`the element type of kept_count`).
    let mut elem_of = String::new();
    let mut ok = true;
    for (i, (k, t)) in kinds.iter().zip(tys).enumerate() {
        let a = &mut args[i];
        let good = match *k {
            ArgKind::Gm { write, elem: want } => match t {
                Ty::Gm(p, w) => {
                    if !matches!(a.kind, ExprKind::Var(_)) {
                        errs.push(a.range(), "pass a buffer parameter directly");
                    }
                    if write && !*w {
                        errs.push(
                            a.range(),
                            format!(
                                "`{}` writes to a read-only buffer: declare the parameter `GmMut<{}>`",
                                op.name(),
                                p.rust_name()
                            ),
                        );
                    }
                    if let Some(w) = want {
                        if w != *p {
                            errs.push(
                                a.range(),
                                format!("`{}` needs Gm<{}>, got {}", op.name(), w.rust_name(), t.describe()),
                            );
                        }
                    }
                    elem = Some(*p);
                    elem_of = arg_name(a, i);
                    true
                }
                _ => false,
            },
            ArgKind::Scalar(p) => {
                let ok = match t {
                    Ty::Scalar(q) => *q == p,
                    Ty::IntLit => p.is_int(),
                    Ty::FloatLit => p.is_float(),
                    _ => false,
                };
                if ok {
                    a.ty = Ty::Scalar(p);
                }
                ok
            }
            ArgKind::ScalarAny => {
                match t {
                    Ty::Scalar(p) => {
                        elem = Some(*p);
                        elem_of = arg_name(a, i);
                        true
                    }
                    Ty::IntLit | Ty::FloatLit => {
                        errs.push(a.range(), format!("give this literal a type suffix (e.g. `0u32`, `0.0f32`): `{}` takes a value of any type", op.name()));
                        ok = false;
                        true
                    }
                    _ => false,
                }
            }
            ArgKind::ScalarOfElem => {
                let want = elem.unwrap_or(Prim::F32);
                let ok = match t {
                    Ty::Scalar(q) => *q == want,
                    Ty::IntLit => want.is_int(),
                    Ty::FloatLit => want.is_float(),
                    _ => false,
                };
                if ok {
                    a.ty = Ty::Scalar(want);
                }
                ok
            }
            ArgKind::Tile(want) => match t {
                Ty::Tile(p) => {
                    if elem.is_none() {
                        elem = Some(*p);
                        elem_of = arg_name(a, i);
                    }
                    want.is_none_or(|w| w == *p)
                }
                _ => false,
            },
            ArgKind::TileOfElem => matches!(t, Ty::Tile(p) if Some(*p) == elem),
        };
        if !good {
            ok = false;
            let want = match *k {
                ArgKind::ScalarOfElem => {
                    format!("{}, the element type of {elem_of}", elem.unwrap_or(Prim::F32).rust_name())
                }
                ArgKind::TileOfElem => {
                    format!("Tile<{}>, the element type of {elem_of}", elem.unwrap_or(Prim::F32).rust_name())
                }
                ArgKind::Scalar(p) => p.rust_name().to_string(),
                ArgKind::Tile(Some(p)) => format!("Tile<{}>", p.rust_name()),
                ArgKind::Tile(None) => "a tile".into(),
                ArgKind::ScalarAny => "a scalar".into(),
                ArgKind::Gm { .. } => "a buffer parameter".into(),
            };
            let hint = if t.is_tile() && matches!(k, ArgKind::Scalar(_) | ArgKind::ScalarOfElem | ArgKind::ScalarAny) {
                ": reduce the tile first (`reduce_sum`, `reduce_max`, `count`, `any`) or take one element with `get(tile, i)`"
            } else {
                ""
            };
            errs.push(
                a.range(),
                format!(
                    "argument {} of `{}` has type {}: expected {want}{hint} ({})",
                    i + 1,
                    op.name(),
                    t.describe(),
                    op.signature()
                ),
            );
        }
    }
    if !ok {
        return Ty::Unit;
    }
    if let Some(p) = elem {
        if !elem_allowed(op, p) {
            errs.push(span, format!("`{}` is not defined on {}: {}", op.name(), p.rust_name(), op.signature()));
            return Ty::Unit;
        }
    }
    result_type(op, elem)
}

/// How an argument is named in messages: `` `x` `` for a variable, else its position.
fn arg_name(a: &Expr, i: usize) -> String {
    match &a.kind {
        ExprKind::Var(id) => format!("`{id}`"),
        _ => format!("argument {}", i + 1),
    }
}

/// Reports integer literals that do not fit the type they settled on
/// (`5000000000` as a `u32`, `-1` as a `u32`, `get(t, -1)`) and float
/// literals beyond `f32::MAX` as an `f32`: rustc rejects these in Rust, and
/// the emitted code would silently wrap them (or give `inf`).
fn literal_ranges(b: &Block, errs: &mut Errors) {
    LiteralRanges { errs }.visit_block(b);
}

/// See [`literal_ranges`].
struct LiteralRanges<'e> {
    errs: &'e mut Errors,
}

impl<'a> Visit<'a> for LiteralRanges<'_> {
    fn visit_expr(&mut self, e: &'a Expr) {
        fn fits(v: u64, neg: bool, p: Prim) -> bool {
            let max: u64 = match p {
                Prim::I32 => i32::MAX as u64,
                Prim::U32 => u32::MAX as u64,
                Prim::I64 => i64::MAX as u64,
                Prim::U64 => u64::MAX,
                _ => return true,
            };
            match (neg, p.is_signed()) {
                (false, _) => v <= max,
                (true, true) => v <= max + 1,
                (true, false) => v == 0,
            }
        }
        let errs = &mut *self.errs;
        let prim = match &e.ty {
            Ty::Scalar(p) | Ty::Tile(p) => Some(*p),
            _ => None,
        };
        match &e.kind {
            // A negated literal settles as a whole: its type is on the negation.
            ExprKind::Unary(UnOp::Neg, x) if matches!(x.kind, ExprKind::Lit(Lit::Int(..) | Lit::Float(..))) => {
                match (&x.kind, prim) {
                    (ExprKind::Lit(Lit::Int(v, _)), Some(p)) if !fits(*v, true, p) => {
                        errs.push(e.range(), format!("the literal `-{v}` does not fit in {}", p.rust_name()));
                    }
                    (ExprKind::Lit(Lit::Float(v, _)), _)
                        if v.is_infinite() || (prim == Some(Prim::F32) && (*v as f32).is_infinite()) =>
                    {
                        let p = prim.map_or("f64", |p| p.rust_name());
                        errs.push(
                            e.range(),
                            format!("this literal is beyond the lowest {p}: write `NEG_INF` for an infinity"),
                        );
                    }
                    _ => {}
                }
                // Not the literal again on its own.
                return;
            }
            ExprKind::Lit(Lit::Int(v, _)) => {
                if let Some(p) = prim.filter(|p| !fits(*v, false, *p)) {
                    errs.push(e.range(), format!("the literal `{v}` does not fit in {}", p.rust_name()));
                }
            }
            ExprKind::Lit(Lit::Float(v, _))
                if v.is_infinite() || (prim == Some(Prim::F32) && (*v as f32).is_infinite()) =>
            {
                let p = prim.map_or("f64", |p| p.rust_name());
                errs.push(
                    e.range(),
                    format!("this literal is beyond the largest {p}: write `POS_INF` / `NEG_INF` for an infinity"),
                );
            }
            _ => {}
        }
        walk_expr(self, e);
    }
}

/// Reports a literal element count above the smallest tile size (`load(x,
/// off, 65)` with `tile = [64]`): a tile holds at most `TILE` elements, so
/// the variant would read past it (a panic in the checked CPU mode, a
/// fault or garbage on a device).
fn literal_lengths(b: &Block, min_tile: u32, errs: &mut Errors) {
    LiteralLengths { min_tile, errs }.visit_block(b);
}

/// See [`literal_lengths`].
struct LiteralLengths<'e> {
    min_tile: u32,
    errs: &'e mut Errors,
}

impl<'a> Visit<'a> for LiteralLengths<'_> {
    fn visit_expr(&mut self, e: &'a Expr) {
        if let ExprKind::Call(op, args) = &e.kind {
            let at = match op {
                Op::Load | Op::MaskBits => Some(2),
                Op::Full | Op::Iota => Some(0),
                Op::TopN
                | Op::TopNSet
                | Op::TopNCounted
                | Op::TopNSetCounted
                | Op::TopNStreamCounted
                | Op::TopNCluster => Some(3),
                _ => None,
            };
            if let Some(a) = at.and_then(|i| args.get(i)) {
                if let ExprKind::Lit(Lit::Int(v, _)) = a.kind {
                    let min_tile = self.min_tile;
                    if v > min_tile as u64 {
                        self.errs.push(a.range(), format!("`{}` of {v} elements, but the tile size {min_tile} holds at most {min_tile} (`TILE`): list a larger tile size, or split the row", op.name()));
                    }
                }
            }
        }
        walk_expr(self, e);
    }
}
