//! Facts about a kernel body the writer needs before emitting it.

use std::collections::HashSet;

use super::*;

/// Names a statement mentions (deeply).
pub(super) fn stmt_mentions(s: &Stmt) -> HashSet<String> {
    let mut out = HashSet::new();
    pub(super) fn ex(e: &Expr, out: &mut HashSet<String>) {
        match &e.kind {
            ExprKind::Var(id) => {
                out.insert(id.to_string());
            }
            ExprKind::Unary(_, x) | ExprKind::Cast(x, _) => ex(x, out),
            ExprKind::Binary(_, a, b) => {
                ex(a, out);
                ex(b, out);
            }
            ExprKind::If(a, b, c) => {
                ex(a, out);
                ex(b, out);
                ex(c, out);
            }
            ExprKind::Call(_, args) => args.iter().for_each(|a| ex(a, out)),
            _ => {}
        }
    }
    pub(super) fn st(s: &Stmt, out: &mut HashSet<String>) {
        match s {
            Stmt::Let { value, .. } => ex(value, out),
            Stmt::Assign { target, value, .. } => {
                out.insert(target.to_string());
                ex(value, out);
            }
            Stmt::Expr(e) => ex(e, out),
            Stmt::If { cond, then, els, .. } => {
                ex(cond, out);
                then.stmts.iter().for_each(|s| st(s, out));
                if let Some(e) = els {
                    e.stmts.iter().for_each(|s| st(s, out));
                }
            }
            Stmt::For { start, end, body, .. } => {
                ex(start, out);
                ex(end, out);
                body.stmts.iter().for_each(|s| st(s, out));
            }
        }
    }
    st(s, &mut out);
    out
}

/// Names of the GM buffers a kernel body writes (`store`, `store_head`,
/// `store_scalar`, `scatter`).
pub(super) fn written_buffers(b: &Block) -> HashSet<String> {
    pub(super) fn ex(e: &Expr, out: &mut HashSet<String>) {
        match &e.kind {
            ExprKind::Call(op, args) => {
                if matches!(op, Op::Store | Op::StoreHead | Op::StoreScalar | Op::Scatter) {
                    if let Some(ExprKind::Var(id)) = args.first().map(|a| &a.kind) {
                        out.insert(id.to_string());
                    }
                }
                args.iter().for_each(|a| ex(a, out));
            }
            ExprKind::Unary(_, x) | ExprKind::Cast(x, _) => ex(x, out),
            ExprKind::Binary(_, a, c) => {
                ex(a, out);
                ex(c, out);
            }
            ExprKind::If(a, c, d) => {
                ex(a, out);
                ex(c, out);
                ex(d, out);
            }
            _ => {}
        }
    }
    pub(super) fn blk(b: &Block, out: &mut HashSet<String>) {
        for s in &b.stmts {
            match s {
                Stmt::Let { value, .. } | Stmt::Assign { value, .. } => ex(value, out),
                Stmt::Expr(e) => ex(e, out),
                Stmt::If { cond, then, els, .. } => {
                    ex(cond, out);
                    blk(then, out);
                    if let Some(e) = els {
                        blk(e, out);
                    }
                }
                Stmt::For { start, end, body, .. } => {
                    ex(start, out);
                    ex(end, out);
                    blk(body, out);
                }
            }
        }
    }
    let mut out = HashSet::new();
    blk(b, &mut out);
    out
}

/// Whether a block does any work on a pipe other than the scalar unit.
pub(super) fn block_has_pipe_work(b: &Block) -> bool {
    pub(super) fn ex(e: &Expr) -> bool {
        if e.ty.is_tile() || matches!(e.ty, Ty::Tuple(_)) {
            return true;
        }
        match &e.kind {
            ExprKind::Call(op, args) => {
                matches!(op, Op::Store | Op::StoreHead | Op::StoreScalar | Op::Scatter) || args.iter().any(ex)
            }
            ExprKind::Unary(_, x) | ExprKind::Cast(x, _) => ex(x),
            ExprKind::Binary(_, a, b) => ex(a) || ex(b),
            ExprKind::If(a, b, c) => ex(a) || ex(b) || ex(c),
            _ => false,
        }
    }
    b.stmts.iter().any(|s| match s {
        Stmt::Let { value, .. } | Stmt::Assign { value, .. } => ex(value),
        Stmt::Expr(e) => ex(e),
        Stmt::If { cond, then, els, .. } => {
            ex(cond) || block_has_pipe_work(then) || els.as_ref().is_some_and(block_has_pipe_work)
        }
        Stmt::For { start, end, body, .. } => ex(start) || ex(end) || block_has_pipe_work(body),
    })
}
