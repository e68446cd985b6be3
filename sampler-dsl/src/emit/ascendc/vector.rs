//! f32 elementwise trees on the vector unit, and the scalar-unit loop for every other elementwise tree.

use super::*;

impl Gen {
    /// A vector-eligible f32 tree as count-form vector calls.
    pub(super) fn vec(&mut self, e: &Expr) -> TileV {
        if !e.is_elementwise() {
            return self.tile(e);
        }
        let tile = self.tile;
        match &e.kind {
            ExprKind::Binary(op, l, r) => {
                let (lt, rt) = (l.ty.is_tile(), r.ty.is_tile());
                if lt && rt {
                    let a = self.vec(l);
                    let b = self.vec(r);
                    let d = self.dest(&[&a, &b], tile);
                    self.line(&format!("const uint32_t {} = sk::min<uint32_t>({}, {});", d.n, a.n, b.n));
                    let f = match op {
                        BinOp::Add => "Add",
                        BinOp::Sub => "Sub",
                        _ => "Mul",
                    };
                    self.vop(&d, &[&a, &b], &format!("AscendC::{f}({}, {}, {}, (int32_t){});", d.t, a.t, b.t, d.n));
                    return d;
                }
                let (t, s, tile_left) = if lt { (l, r, true) } else { (r, l, false) };
                let a = self.vec(t);
                let sv = self.scalar(s);
                let sn = self.fresh("s");
                self.line(&format!("const float {sn} = (float)({sv});"));
                let d = self.dest(&[&a], tile);
                self.line(&format!("const uint32_t {} = {};", d.n, a.n));
                match (op, tile_left) {
                    (BinOp::Add, _) => {
                        self.vop(&d, &[&a], &format!("AscendC::Adds({}, {}, {sn}, (int32_t){});", d.t, a.t, d.n))
                    }
                    (BinOp::Mul, _) => {
                        self.vop(&d, &[&a], &format!("AscendC::Muls({}, {}, {sn}, (int32_t){});", d.t, a.t, d.n))
                    }
                    // x - s == x + (-s) exactly in IEEE arithmetic.
                    (BinOp::Sub, true) => {
                        self.vop(&d, &[&a], &format!("AscendC::Adds({}, {}, -{sn}, (int32_t){});", d.t, a.t, d.n))
                    }
                    (BinOp::Sub, false) => {
                        self.vop(&d, &[&a], &format!("AscendC::Muls({}, {}, -1.0f, (int32_t){});", d.t, a.t, d.n));
                        self.vop(&d, &[&d], &format!("AscendC::Adds({}, {}, {sn}, (int32_t){});", d.t, d.t, d.n));
                    }
                    // Division never reaches here (`vec_ok`): it is IEEE division on the scalar unit.
                    _ => self.unsupported("a vector division"),
                }
                d
            }
            ExprKind::Unary(UnOp::Neg, x) => {
                let a = self.vec(x);
                let d = self.dest(&[&a], tile);
                self.line(&format!("const uint32_t {} = {};", d.n, a.n));
                self.vop(&d, &[&a], &format!("AscendC::Muls({}, {}, -1.0f, (int32_t){});", d.t, a.t, d.n));
                d
            }
            ExprKind::Call(Op::Abs, args) => {
                let a = self.vec(&args[0]);
                let d = self.dest(&[&a], tile);
                self.line(&format!("const uint32_t {} = {};", d.n, a.n));
                self.vop(&d, &[&a], &format!("AscendC::Abs({}, {}, (int32_t){});", d.t, a.t, d.n));
                d
            }
            ExprKind::Call(op @ (Op::Max | Op::Min), args) => {
                let f = if *op == Op::Max { "Max" } else { "Min" };
                let (lt, rt) = (args[0].ty.is_tile(), args[1].ty.is_tile());
                if lt && rt {
                    let a = self.vec(&args[0]);
                    let b = self.vec(&args[1]);
                    let d = self.dest(&[&a, &b], tile);
                    self.line(&format!("const uint32_t {} = sk::min<uint32_t>({}, {});", d.n, a.n, b.n));
                    self.vop(&d, &[&a, &b], &format!("AscendC::{f}({}, {}, {}, (int32_t){});", d.t, a.t, b.t, d.n));
                    return d;
                }
                let (t, s) = if lt { (&args[0], &args[1]) } else { (&args[1], &args[0]) };
                let a = self.vec(t);
                let sv = self.scalar(s);
                let d = self.dest(&[&a], tile);
                self.line(&format!("const uint32_t {} = {};", d.n, a.n));
                self.vop(&d, &[&a], &format!("AscendC::{f}s({}, {}, (float)({sv}), (int32_t){});", d.t, a.t, d.n));
                d
            }
            _ => {
                self.unsupported("a vector expression of this form");
                self.alloc_tile(Prim::F32, 1, true)
            }
        }
    }

    /// The destination of a vector op: an owned 4-byte operand in place, or a new slot.
    pub(super) fn dest(&mut self, srcs: &[&TileV], tile: u32) -> TileV {
        if let Some(s) = srcs.iter().find(|s| s.owned && ub_elem_bytes(s.prim) == 4) {
            let t = self.fresh("t");
            self.line(&format!("AscendC::LocalTensor<float> {t} = {}.ReinterpretCast<float>();", s.t));
            return TileV { t: t.clone(), n: format!("{t}_n"), prim: Prim::F32, slot: s.slot, owned: true };
        }
        self.alloc_tile(Prim::F32, tile, true)
    }

    pub(super) fn vop(&mut self, d: &TileV, srcs: &[&TileV], code: &str) {
        self.sync(
            Pipe::V,
            Touch { ub_reads: srcs.iter().map(|s| s.slot).collect(), ub_writes: vec![d.slot], ..Default::default() },
        );
        self.line(code);
    }

    /// A non-vector elementwise tree as one scalar-unit loop.
    pub(super) fn elem_loop(&mut self, e: &Expr) -> TileV {
        let p = e.ty.prim().unwrap_or(Prim::F32);
        let mut ctx = Some(ElemCtx { leaves: Vec::new() });
        let body = self.node(e, &mut ctx);
        let leaves = ctx.unwrap().leaves;
        let tile = self.tile;
        let d = match leaves.iter().find(|l| l.owned && ub_elem_bytes(l.prim) == ub_elem_bytes(p)) {
            Some(l) => {
                let t = self.fresh("t");
                let ty = ub_type(p);
                self.line(&format!("AscendC::LocalTensor<{ty}> {t} = {}.ReinterpretCast<{ty}>();", l.t));
                TileV { t: t.clone(), n: format!("{t}_n"), prim: p, slot: l.slot, owned: true }
            }
            None => self.alloc_tile(p, tile, true),
        };
        let n = match leaves.len() {
            0 => "TILE".to_string(),
            1 => leaves[0].n.clone(),
            _ => leaves.iter().skip(1).fold(leaves[0].n.clone(), |a, l| format!("sk::min<uint32_t>({a}, {})", l.n)),
        };
        self.line(&format!("const uint32_t {} = {n};", d.n));
        self.sync(
            Pipe::S,
            Touch { ub_reads: leaves.iter().map(|l| l.slot).collect(), ub_writes: vec![d.slot], ..Default::default() },
        );
        let saved = self.open_cond("");
        for (i, l) in leaves.iter().enumerate() {
            self.line(&format!("const AscendC::LocalTensor<{}> &L{i} = {};", ub_type(l.prim), l.t));
        }
        self.line(&format!("for (uint32_t i = 0; i < {}; ++i) {}.SetValue(i, ({})({body}));", d.n, d.t, ub_type(p)));
        self.close_cond(saved);
        d
    }
}

/// Whether a tile node is a vector-unit f32 tree (not a leaf).
pub(super) fn vec_ok(e: &Expr) -> bool {
    if e.ty != Ty::Tile(Prim::F32) || !e.is_elementwise() {
        return false;
    }
    let operand = |x: &Expr| -> bool {
        if x.ty.is_tile() {
            x.ty == Ty::Tile(Prim::F32) && (!x.is_elementwise() || vec_ok(x))
        } else {
            matches!(x.ty.prim(), Some(Prim::F32)) || matches!(x.ty, Ty::FloatLit)
        }
    };
    // No `Div` or `Exp`: the vector unit's are documented only within 1 ulp
    // (subnormals flushed), and decisions are taken on their results; they
    // run on the scalar unit as IEEE division and `sk::exp` (rt::math::exp_f32).
    match &e.kind {
        ExprKind::Binary(BinOp::Add | BinOp::Sub | BinOp::Mul, l, r) => operand(l) && operand(r),
        ExprKind::Unary(UnOp::Neg, x) => x.ty.is_tile() && operand(x),
        ExprKind::Call(Op::Abs, a) => a[0].ty.is_tile() && operand(&a[0]),
        ExprKind::Call(Op::Max | Op::Min, a) => operand(&a[0]) && operand(&a[1]),
        _ => false,
    }
}
