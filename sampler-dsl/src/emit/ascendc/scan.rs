//! Facts about a kernel body the writer needs before emitting it.

use std::collections::HashSet;

use super::*;
use crate::visit::{any_expr, walk_expr, walk_stmt, Visit};

/// Collects the names a statement mentions (variables read, targets assigned).
struct Mentions(HashSet<String>);

impl<'a> Visit<'a> for Mentions {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        if let Stmt::Assign { target, .. } = s {
            self.0.insert(target.to_string());
        }
        walk_stmt(self, s);
    }
    fn visit_expr(&mut self, e: &'a Expr) {
        if let ExprKind::Var(id) = &e.kind {
            self.0.insert(id.to_string());
        }
        walk_expr(self, e);
    }
}

/// Names a statement mentions (deeply).
pub(super) fn stmt_mentions(s: &Stmt) -> HashSet<String> {
    let mut m = Mentions(HashSet::new());
    m.visit_stmt(s);
    m.0
}

/// Collects the buffers written: the first argument of a store.
struct Written(HashSet<String>);

impl<'a> Visit<'a> for Written {
    fn visit_expr(&mut self, e: &'a Expr) {
        if let ExprKind::Call(Op::Store | Op::StoreHead | Op::StoreScalar | Op::Scatter, args) = &e.kind {
            if let Some(ExprKind::Var(id)) = args.first().map(|a| &a.kind) {
                self.0.insert(id.to_string());
            }
        }
        walk_expr(self, e);
    }
}

/// Names of the GM buffers a kernel body writes (`store`, `store_head`,
/// `store_scalar`, `scatter`).
pub(super) fn written_buffers(b: &Block) -> HashSet<String> {
    let mut w = Written(HashSet::new());
    w.visit_block(b);
    w.0
}

/// Whether a block does any work on a pipe other than the scalar unit.
pub(super) fn block_has_pipe_work(b: &Block) -> bool {
    any_expr(b, |e| {
        e.ty.is_tile()
            || matches!(e.ty, Ty::Tuple(_))
            || matches!(e.kind, ExprKind::Call(Op::Store | Op::StoreHead | Op::StoreScalar | Op::Scatter, _))
    })
}
