//! Removes tile rebindings `let b = a;` from the typed IR.
//!
//! A tile may be used any number of times, so `let b = a;` is valid DSL
//! (and every `#[kernel_fn]` argument that is a tile variable leaves one).
//! When neither name is ever assigned, `b` is `a`: later uses of `b` are
//! renamed `a` and the `let` goes, so no target copies the tile (the
//! AscendC UB plan stays as without the rebinding). Otherwise the `let`
//! stays and the Rust emitter clones the tile.

use std::collections::HashSet;

use crate::ir::*;

/// Elides every removable tile rebinding of the kernel.
pub fn elide(k: &mut Kernel) {
    let mut assigned = HashSet::new();
    assigned_in(&k.body, &mut assigned);
    block(&mut k.body, &assigned);
}

fn assigned_in(b: &Block, out: &mut HashSet<String>) {
    for s in &b.stmts {
        match s {
            Stmt::Assign { target, .. } => {
                out.insert(target.to_string());
            }
            Stmt::If { then, els, .. } => {
                assigned_in(then, out);
                if let Some(e) = els {
                    assigned_in(e, out);
                }
            }
            Stmt::For { body, .. } => assigned_in(body, out),
            _ => {}
        }
    }
}

fn block(b: &mut Block, assigned: &HashSet<String>) {
    let mut i = 0;
    while i < b.stmts.len() {
        match &mut b.stmts[i] {
            Stmt::If { then, els, .. } => {
                block(then, assigned);
                if let Some(e) = els {
                    block(e, assigned);
                }
            }
            Stmt::For { body, .. } => block(body, assigned),
            _ => {}
        }
        if let Stmt::Let { names, value, .. } = &b.stmts[i] {
            if let ([(to_b, _)], ExprKind::Var(from_a)) = (names.as_slice(), &value.kind) {
                let (nb, na) = (to_b.to_string(), from_a.to_string());
                if value.ty.is_tile() && nb != na && !assigned.contains(&nb) && !assigned.contains(&na) {
                    let a = from_a.clone();
                    let mut rest = b.stmts[i + 1..].to_vec();
                    if subst_stmts(&mut rest, &nb, &a) {
                        b.stmts.truncate(i);
                        b.stmts.extend(rest);
                        continue;
                    }
                }
            }
        }
        i += 1;
    }
}

/// Renames uses of `from` to `to` in statements (one scope); false when a
/// rebinding of `to` would capture a later use of `from`.
fn subst_stmts(stmts: &mut [Stmt], from: &str, to: &syn::Ident) -> bool {
    let ts = to.to_string();
    for i in 0..stmts.len() {
        let (head, tail) = stmts.split_at_mut(i + 1);
        match &mut head[i] {
            Stmt::Let { names, value, .. } => {
                subst_expr(value, from, to);
                let binds = |n: &str| names.iter().any(|(x, _)| x == n);
                if binds(from) {
                    return true;
                }
                if binds(&ts) {
                    return !tail.iter().any(|s| mentions(s, from));
                }
            }
            Stmt::Assign { value, .. } | Stmt::Expr(value) => subst_expr(value, from, to),
            Stmt::If { cond, then, els, .. } => {
                subst_expr(cond, from, to);
                if !subst_stmts(&mut then.stmts, from, to) {
                    return false;
                }
                if let Some(e) = els {
                    if !subst_stmts(&mut e.stmts, from, to) {
                        return false;
                    }
                }
            }
            Stmt::For { var, start, end, body, .. } => {
                subst_expr(start, from, to);
                subst_expr(end, from, to);
                if var == from {
                    continue;
                }
                if *var == ts {
                    if body.stmts.iter().any(|s| mentions(s, from)) {
                        return false;
                    }
                    continue;
                }
                if !subst_stmts(&mut body.stmts, from, to) {
                    return false;
                }
            }
        }
    }
    true
}

fn subst_expr(e: &mut Expr, from: &str, to: &syn::Ident) {
    match &mut e.kind {
        ExprKind::Var(id) if id == from => *id = syn::Ident::new(&to.to_string(), id.span()),
        ExprKind::Lit(_) | ExprKind::Var(_) | ExprKind::Const(_) => {}
        ExprKind::Unary(_, x) | ExprKind::Cast(x, _) => subst_expr(x, from, to),
        ExprKind::Binary(_, l, r) => {
            subst_expr(l, from, to);
            subst_expr(r, from, to);
        }
        ExprKind::Call(_, args) => args.iter_mut().for_each(|a| subst_expr(a, from, to)),
        ExprKind::If(c, a, b) => {
            subst_expr(c, from, to);
            subst_expr(a, from, to);
            subst_expr(b, from, to);
        }
    }
}

fn expr_mentions(e: &Expr, name: &str) -> bool {
    match &e.kind {
        ExprKind::Var(id) => id == name,
        ExprKind::Lit(_) | ExprKind::Const(_) => false,
        ExprKind::Unary(_, x) | ExprKind::Cast(x, _) => expr_mentions(x, name),
        ExprKind::Binary(_, l, r) => expr_mentions(l, name) || expr_mentions(r, name),
        ExprKind::Call(_, args) => args.iter().any(|a| expr_mentions(a, name)),
        ExprKind::If(c, a, b) => expr_mentions(c, name) || expr_mentions(a, name) || expr_mentions(b, name),
    }
}

fn mentions(s: &Stmt, name: &str) -> bool {
    match s {
        Stmt::Let { value, .. } | Stmt::Expr(value) => expr_mentions(value, name),
        Stmt::Assign { target, value, .. } => target == name || expr_mentions(value, name),
        Stmt::If { cond, then, els, .. } => {
            expr_mentions(cond, name)
                || then.stmts.iter().any(|s| mentions(s, name))
                || els.as_ref().is_some_and(|e| e.stmts.iter().any(|s| mentions(s, name)))
        }
        Stmt::For { start, end, body, .. } => {
            expr_mentions(start, name) || expr_mentions(end, name) || body.stmts.iter().any(|s| mentions(s, name))
        }
    }
}
