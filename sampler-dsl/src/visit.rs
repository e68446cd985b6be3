//! One walk over the tile IR: [`Visit`] (shared borrows) and [`VisitMut`]
//! (rewrites), as `syn::visit` does for Rust syntax.
//!
//! Every default method walks the node's children in source order
//! (statements in order; `if`: condition, then, else; `for`: start, end,
//! body; an expression's operands left to right), so an analysis overrides
//! only the nodes it cares about and calls the `walk_*` function to go on
//! below them. Adding a node kind to [`crate::ir`] means adding it here
//! once, not in every analysis.

use crate::ir::*;

/// A read-only walk over blocks, statements and expressions.
pub trait Visit<'a> {
    fn visit_block(&mut self, b: &'a Block) {
        walk_block(self, b);
    }
    fn visit_stmt(&mut self, s: &'a Stmt) {
        walk_stmt(self, s);
    }
    fn visit_expr(&mut self, e: &'a Expr) {
        walk_expr(self, e);
    }
}

/// Visits the statements of `b` in order.
pub fn walk_block<'a, V: Visit<'a> + ?Sized>(v: &mut V, b: &'a Block) {
    for s in &b.stmts {
        v.visit_stmt(s);
    }
}

/// Visits the expressions and blocks of `s`.
pub fn walk_stmt<'a, V: Visit<'a> + ?Sized>(v: &mut V, s: &'a Stmt) {
    match s {
        Stmt::Let { value, .. } | Stmt::Assign { value, .. } | Stmt::Expr(value) => v.visit_expr(value),
        Stmt::If { cond, then, els, .. } => {
            v.visit_expr(cond);
            v.visit_block(then);
            if let Some(e) = els {
                v.visit_block(e);
            }
        }
        Stmt::For { start, end, body, .. } => {
            v.visit_expr(start);
            v.visit_expr(end);
            v.visit_block(body);
        }
    }
}

/// Visits the operands of `e`, left to right.
pub fn walk_expr<'a, V: Visit<'a> + ?Sized>(v: &mut V, e: &'a Expr) {
    match &e.kind {
        ExprKind::Lit(_) | ExprKind::Var(_) | ExprKind::Const(_) => {}
        ExprKind::Unary(_, x) | ExprKind::Cast(x, _) => v.visit_expr(x),
        ExprKind::Binary(_, l, r) => {
            v.visit_expr(l);
            v.visit_expr(r);
        }
        ExprKind::Call(_, args) => args.iter().for_each(|a| v.visit_expr(a)),
        ExprKind::If(c, a, b) => {
            v.visit_expr(c);
            v.visit_expr(a);
            v.visit_expr(b);
        }
    }
}

/// A walk that may rewrite blocks, statements and expressions in place.
pub trait VisitMut {
    fn visit_block_mut(&mut self, b: &mut Block) {
        walk_block_mut(self, b);
    }
    fn visit_stmt_mut(&mut self, s: &mut Stmt) {
        walk_stmt_mut(self, s);
    }
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        walk_expr_mut(self, e);
    }
}

/// [`walk_block`], mutably.
pub fn walk_block_mut<V: VisitMut + ?Sized>(v: &mut V, b: &mut Block) {
    for s in &mut b.stmts {
        v.visit_stmt_mut(s);
    }
}

/// [`walk_stmt`], mutably.
pub fn walk_stmt_mut<V: VisitMut + ?Sized>(v: &mut V, s: &mut Stmt) {
    match s {
        Stmt::Let { value, .. } | Stmt::Assign { value, .. } | Stmt::Expr(value) => v.visit_expr_mut(value),
        Stmt::If { cond, then, els, .. } => {
            v.visit_expr_mut(cond);
            v.visit_block_mut(then);
            if let Some(e) = els {
                v.visit_block_mut(e);
            }
        }
        Stmt::For { start, end, body, .. } => {
            v.visit_expr_mut(start);
            v.visit_expr_mut(end);
            v.visit_block_mut(body);
        }
    }
}

/// [`walk_expr`], mutably.
pub fn walk_expr_mut<V: VisitMut + ?Sized>(v: &mut V, e: &mut Expr) {
    match &mut e.kind {
        ExprKind::Lit(_) | ExprKind::Var(_) | ExprKind::Const(_) => {}
        ExprKind::Unary(_, x) | ExprKind::Cast(x, _) => v.visit_expr_mut(x),
        ExprKind::Binary(_, l, r) => {
            v.visit_expr_mut(l);
            v.visit_expr_mut(r);
        }
        ExprKind::Call(_, args) => args.iter_mut().for_each(|a| v.visit_expr_mut(a)),
        ExprKind::If(c, a, b) => {
            v.visit_expr_mut(c);
            v.visit_expr_mut(a);
            v.visit_expr_mut(b);
        }
    }
}

/// Finds the first expression (in walk order, a node before its operands)
/// that satisfies a predicate; the walk stops there.
struct Find<'a, F> {
    pred: F,
    found: Option<&'a Expr>,
}

impl<'a, F: FnMut(&'a Expr) -> bool> Visit<'a> for Find<'a, F> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        if self.found.is_none() {
            walk_stmt(self, s);
        }
    }
    fn visit_expr(&mut self, e: &'a Expr) {
        if self.found.is_some() {
            return;
        }
        if (self.pred)(e) {
            self.found = Some(e);
            return;
        }
        walk_expr(self, e);
    }
}

/// The first expression under `b` satisfying `pred` (a node before its operands).
pub fn find_expr<'a>(b: &'a Block, pred: impl FnMut(&'a Expr) -> bool) -> Option<&'a Expr> {
    let mut f = Find { pred, found: None };
    f.visit_block(b);
    f.found
}

/// Whether any expression under `b` satisfies `pred`.
pub fn any_expr<'a>(b: &'a Block, pred: impl FnMut(&'a Expr) -> bool) -> bool {
    find_expr(b, pred).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn kernel() -> Kernel {
        // Every statement and expression kind, nested in each other.
        crate::compile(
            quote!(tile = [64]),
            quote!(
                fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                    let mut a = 1u32;
                    a = a + (2.0f32 as u32);
                    let t = load(x, 0u64, n);
                    let m = if a > 3u32 { -reduce_max(t) } else { NEG_INF };
                    if a < n {
                        store(y, 0u64, t);
                    } else {
                        store_scalar(y, 0u64, m);
                    }
                    for i in 0u32..TILE {
                        a = a + i;
                    }
                    store_scalar(y, 1u64, a as f32);
                }
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Counts every node kind reached.
    #[derive(Default)]
    struct Count(std::collections::BTreeMap<&'static str, usize>);

    impl Count {
        fn hit(&mut self, k: &'static str) {
            *self.0.entry(k).or_default() += 1;
        }
    }

    impl<'a> Visit<'a> for Count {
        fn visit_block(&mut self, b: &'a Block) {
            self.hit("block");
            walk_block(self, b);
        }
        fn visit_stmt(&mut self, s: &'a Stmt) {
            self.hit(match s {
                Stmt::Let { .. } => "let",
                Stmt::Assign { .. } => "assign",
                Stmt::Expr(_) => "stmt expr",
                Stmt::If { .. } => "if",
                Stmt::For { .. } => "for",
            });
            walk_stmt(self, s);
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            self.hit(match &e.kind {
                ExprKind::Lit(_) => "lit",
                ExprKind::Var(_) => "var",
                ExprKind::Const(_) => "const",
                ExprKind::Unary(..) => "unary",
                ExprKind::Binary(..) => "binary",
                ExprKind::Cast(..) => "cast",
                ExprKind::Call(..) => "call",
                ExprKind::If(..) => "if value",
            });
            walk_expr(self, e);
        }
    }

    impl VisitMut for Count {
        fn visit_expr_mut(&mut self, e: &mut Expr) {
            if let ExprKind::Var(id) = &mut e.kind {
                *id = syn::Ident::new(&format!("r_{id}"), id.span());
                self.hit("renamed");
            }
            walk_expr_mut(self, e);
        }
    }

    #[test]
    fn visit_reaches_every_node_kind() {
        let k = kernel();
        let mut c = Count::default();
        c.visit_block(&k.body);
        let got: Vec<(&str, usize)> = c.0.into_iter().collect();
        assert_eq!(
            got,
            [
                ("assign", 2),
                ("binary", 4),
                // The body, `if` then / else, the `for` body.
                ("block", 4),
                ("call", 5),
                ("cast", 2),
                ("const", 2),
                ("for", 1),
                ("if", 1),
                ("if value", 1),
                ("let", 3),
                ("lit", 8),
                ("stmt expr", 3),
                ("unary", 1),
                ("var", 15),
            ]
        );
    }

    #[test]
    fn visit_mut_rewrites_every_expression() {
        let mut k = kernel();
        let mut c = Count::default();
        c.visit_block_mut(&mut k.body);
        assert_eq!(c.0["renamed"], 15);
        // No variable escaped the rewrite.
        assert!(!any_expr(&k.body, |e| matches!(&e.kind, ExprKind::Var(id) if !id.to_string().starts_with("r_"))));
    }

    #[test]
    fn find_expr_stops_at_the_first_in_walk_order() {
        let k = kernel();
        // Pre-order: `a + (2.0 as u32)` is reached before its operands.
        let e = find_expr(&k.body, |e| matches!(e.kind, ExprKind::Binary(..))).unwrap();
        assert!(
            matches!(&e.kind, ExprKind::Binary(BinOp::Add, l, _) if matches!(&l.kind, ExprKind::Var(a) if a == "a"))
        );
        let first_call = find_expr(&k.body, |e| matches!(e.kind, ExprKind::Call(..))).unwrap();
        assert!(matches!(first_call.kind, ExprKind::Call(crate::ops::Op::Load, _)));
        assert!(find_expr(&k.body, |e| matches!(e.kind, ExprKind::Lit(Lit::Bool(_)))).is_none());
    }
}
