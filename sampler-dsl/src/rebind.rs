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
use crate::visit::{walk_expr, walk_expr_mut, walk_stmt, Visit, VisitMut};

/// Elides every removable tile rebinding of the kernel.
pub fn elide(k: &mut Kernel) {
    let mut assigned = Assigned(HashSet::new());
    assigned.visit_block(&k.body);
    Elide { assigned: &assigned.0 }.visit_block_mut(&mut k.body);
}

/// Collects the names assigned anywhere.
struct Assigned(HashSet<String>);

impl<'a> Visit<'a> for Assigned {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        if let Stmt::Assign { target, .. } = s {
            self.0.insert(target.to_string());
        }
        walk_stmt(self, s);
    }
}

/// Elides the rebindings of a block, inner blocks first.
struct Elide<'s> {
    assigned: &'s HashSet<String>,
}

impl VisitMut for Elide<'_> {
    fn visit_block_mut(&mut self, b: &mut Block) {
        let mut i = 0;
        while i < b.stmts.len() {
            self.visit_stmt_mut(&mut b.stmts[i]);
            if let Stmt::Let { names, value, .. } = &b.stmts[i] {
                if let ([(to_b, _)], ExprKind::Var(from_a)) = (names.as_slice(), &value.kind) {
                    let (nb, na) = (to_b.to_string(), from_a.to_string());
                    if value.ty.is_tile() && nb != na && !self.assigned.contains(&nb) && !self.assigned.contains(&na) {
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

/// Renames the variable `from` to `to` in an expression.
struct Subst<'n> {
    from: &'n str,
    to: &'n syn::Ident,
}

impl VisitMut for Subst<'_> {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        match &mut e.kind {
            ExprKind::Var(id) if id == self.from => *id = syn::Ident::new(&self.to.to_string(), id.span()),
            _ => walk_expr_mut(self, e),
        }
    }
}

fn subst_expr(e: &mut Expr, from: &str, to: &syn::Ident) {
    Subst { from, to }.visit_expr_mut(e);
}

/// Whether a statement reads `name` or assigns it (deeply).
struct Mentions<'n> {
    name: &'n str,
    hit: bool,
}

impl<'a> Visit<'a> for Mentions<'_> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        if self.hit {
            return;
        }
        if let Stmt::Assign { target, .. } = s {
            if target == self.name {
                self.hit = true;
                return;
            }
        }
        walk_stmt(self, s);
    }
    fn visit_expr(&mut self, e: &'a Expr) {
        if self.hit {
            return;
        }
        match &e.kind {
            ExprKind::Var(id) if id == self.name => self.hit = true,
            _ => walk_expr(self, e),
        }
    }
}

fn mentions(s: &Stmt, name: &str) -> bool {
    let mut m = Mentions { name, hit: false };
    m.visit_stmt(s);
    m.hit
}
