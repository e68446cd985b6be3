//! Scalar expressions and the tile ops with a scalar result (reductions, `categorical`, GM scalar reads).

use super::*;

impl Gen {
    /// A C++ expression for a scalar-typed node; tile ops it contains are
    /// emitted first (hoisted out of any `?:`, they are pure).
    pub(super) fn scalar(&mut self, e: &Expr) -> String {
        self.node(e, &mut None)
    }

    pub(super) fn node(&mut self, e: &Expr, ctx: &mut Option<ElemCtx>) -> String {
        let p = e.ty.prim().unwrap_or(Prim::I32);
        match &e.kind {
            ExprKind::Lit(l) => lit(l, p),
            ExprKind::Var(id) => match self.lookup(&id.to_string()) {
                Some(Val::Scalar(c, _)) => c,
                _ => {
                    self.unsupported(format!("`{id}` used as a scalar"));
                    "0".into()
                }
            },
            ExprKind::Const(Const::Tile) => "TILE".into(),
            ExprKind::Const(Const::NegInf) => "sk::bits_f32(0xff800000u)".into(),
            ExprKind::Const(Const::PosInf) => "sk::bits_f32(0x7f800000u)".into(),
            ExprKind::Unary(UnOp::Neg, x) => {
                let a = self.sub(x, ctx);
                format!("sk::neg<{}>({a})", scalar_type(p))
            }
            ExprKind::Unary(UnOp::Not, x) => {
                let a = self.sub(x, ctx);
                if p == Prim::Bool {
                    format!("(!({a}))")
                } else {
                    format!("(({})~({a}))", scalar_type(p))
                }
            }
            ExprKind::Binary(op, l, r) => {
                let lp = l.ty.prim().unwrap_or(p);
                let a = self.sub(l, ctx);
                let b = self.sub(r, ctx);
                binary(*op, lp, &a, &b)
            }
            ExprKind::Cast(x, to) => {
                let from = x.ty.prim().unwrap_or(Prim::I32);
                let a = self.sub(x, ctx);
                cast(from, *to, &a)
            }
            ExprKind::If(c, a, b) => {
                let c = self.sub(c, ctx);
                let a = self.sub(a, ctx);
                let b = self.sub(b, ctx);
                let t = scalar_type(p);
                format!("(({c}) ? ({t})({a}) : ({t})({b}))")
            }
            ExprKind::Call(op, args) if op.is_elem() || op.is_scalar_fn() => {
                let a: Vec<String> = args.iter().map(|x| self.sub(x, ctx)).collect();
                match op {
                    Op::Min | Op::Max => format!("sk::{}<{}>({}, {})", op.name(), scalar_type(p), a[0], a[1]),
                    Op::Select => format!("(({}) ? ({t})({}) : ({t})({}))", a[0], a[1], a[2], t = scalar_type(p)),
                    _ => format!("sk::{}({})", op.name(), a.join(", ")),
                }
            }
            ExprKind::Call(op, args) => {
                if ctx.is_some() {
                    self.unsupported("a tile op inside an elementwise expression");
                    return "0".into();
                }
                self.scalar_op(*op, args, p)
            }
        }
    }

    pub(super) fn sub(&mut self, x: &Expr, ctx: &mut Option<ElemCtx>) -> String {
        if ctx.is_none() {
            return self.node(x, ctx);
        }
        if !x.ty.is_tile() {
            // A scalar operand of an elementwise loop: computed once before it.
            if matches!(x.kind, ExprKind::Lit(_) | ExprKind::Const(_) | ExprKind::Var(_)) {
                return self.node(x, &mut None);
            }
            let v = self.node(x, &mut None);
            let p = x.ty.prim().unwrap_or(Prim::I32);
            let n = self.fresh("s");
            self.line(&format!("const {} {n} = ({})({v});", scalar_type(p), scalar_type(p)));
            return n;
        }
        let is_leaf = !x.is_elementwise() || vec_ok(x);
        if is_leaf {
            let t = if x.is_elementwise() { self.vec(x) } else { self.tile(x) };
            let c = ctx.as_mut().unwrap();
            let i = c.leaves.len();
            c.leaves.push(t.clone());
            let alias = TileV { t: format!("L{i}"), ..t };
            return elem_read(&alias, "i");
        }
        self.node(x, ctx)
    }

    /// Tile ops with a scalar result.
    pub(super) fn scalar_op(&mut self, op: Op, args: &[Expr], p: Prim) -> String {
        match op {
            Op::Row => "prog".into(),
            // A warp scope is an NVIDIA layout: here its block simply runs.
            Op::WarpScope => "true".into(),
            Op::Len => self.tile(&args[0]).n,
            Op::LoadScalar => {
                let Some((g, gp)) = self.gm(&args[0]) else { return "0".into() };
                let i = self.scalar(&args[1]);
                self.sync(Pipe::S, Touch { gm_reads: vec![&g], ..Default::default() });
                self.dcci_if_written(&g, gp);
                format!("g_{g}.GetValue((uint64_t)({i}))")
            }
            Op::Get => {
                let t = self.tile(&args[0]);
                let i = self.scalar(&args[1]);
                self.sync(Pipe::S, Touch { ub_reads: vec![t.slot], ..Default::default() });
                let iv = self.fresh("s");
                self.line(&format!("const uint32_t {iv} = (uint32_t)({i});"));
                let rd = elem_read(&t, &iv);
                format!("({iv} < {} ? ({})({rd}) : ({})0)", t.n, scalar_type(p), scalar_type(p))
            }
            Op::ReduceMax | Op::ReduceMin if p == Prim::F32 => {
                let t = self.tile(&args[0]);
                let max = op == Op::ReduceMax;
                let res = self.fresh("s");
                let init = if max { "sk::bits_f32(0xff800000u)" } else { "sk::bits_f32(0x7f800000u)" };
                self.line(&format!("float {res} = {init};"));
                let dst = self.raw_slot(256);
                let work_floats = (self.tile.div_ceil(64) * 2).div_ceil(64) * 64;
                let work = self.raw_slot(work_floats * 4);
                self.sync(Pipe::V, Touch { ub_reads: vec![t.slot], ub_writes: vec![dst, work], ..Default::default() });
                let saved = self.open_cond(&format!("if ({} > 0)", t.n));
                let f = if max { "ReduceMax" } else { "ReduceMin" };
                self.line(&format!(
                    "AscendC::{f}(ub8[{}].ReinterpretCast<float>(), {}, ub8[{}].ReinterpretCast<float>(), (int32_t){});",
                    dst.off, t.t, work.off, t.n
                ));
                self.sync(Pipe::S, Touch { ub_reads: vec![dst], ..Default::default() });
                self.line(&format!("{res} = ub8[{}].ReinterpretCast<float>().GetValue(0);", dst.off));
                self.close_cond(saved);
                res
            }
            Op::ReduceMax
            | Op::ReduceMin
            | Op::ReduceSum
            | Op::Count
            | Op::Any
            | Op::All
            | Op::FirstWhere
            | Op::LastWhere => {
                let t = self.tile(&args[0]);
                let res = self.fresh("s");
                let ty = scalar_type(p);
                let x = elem_read(&t, "i");
                let (init, body, rev) = match op {
                    Op::ReduceMax => (lowest(p).to_string(), format!("if ({x} > {res}) {res} = {x};"), false),
                    Op::ReduceMin => (highest(p).to_string(), format!("if ({x} < {res}) {res} = {x};"), false),
                    Op::ReduceSum => ("0".into(), format!("{res} = sk::add<{ty}>({res}, {x});"), false),
                    Op::Count => ("0".into(), format!("if ({x}) ++{res};"), false),
                    Op::Any => ("false".into(), format!("if ({x}) {{ {res} = true; break; }}"), false),
                    Op::All => ("true".into(), format!("if (!({x})) {{ {res} = false; break; }}"), false),
                    Op::FirstWhere => ("-1".into(), format!("if ({x}) {{ {res} = (int32_t)i; break; }}"), false),
                    _ => ("-1".into(), format!("if ({x}) {{ {res} = (int32_t)i; break; }}"), true),
                };
                self.line(&format!("{ty} {res} = ({ty})({init});"));
                self.sync(Pipe::S, Touch { ub_reads: vec![t.slot], ..Default::default() });
                let head = if rev {
                    format!("for (uint32_t i = {}; i-- > 0;)", t.n)
                } else {
                    format!("for (uint32_t i = 0; i < {}; ++i)", t.n)
                };
                let saved = self.open_cond(&head);
                self.line(&body);
                self.close_cond(saved);
                res
            }
            Op::Categorical => {
                let w = self.tile(&args[0]);
                let k = self.scalar(&args[1]);
                let res = self.fresh("s");
                let kv = self.fresh("s");
                self.line(&format!("const uint64_t {kv} = (uint64_t)({k});"));
                self.line(&format!("int32_t {res} = -1;"));
                self.sync(Pipe::S, Touch { ub_reads: vec![w.slot], ..Default::default() });
                let t = &w.t;
                let n = &w.n;
                let saved = self.open_cond("");
                self.line(&format!("sk::U128 tot{{0, 0}};\n{0}for (uint32_t i = 0; i < {n}; ++i) tot = sk::add128(tot, {t}.GetValue(i));", "  ".repeat(self.ind)));
                self.line("if (tot.hi != 0 || tot.lo != 0) {");
                self.line(&format!("  sk::U128 thr = sk::mul64({kv}, tot.lo);"));
                self.line(&format!("  thr.hi += {kv} * tot.hi;"));
                self.line("  sk::U128 acc{0, 0};");
                self.line(&format!("  for (uint32_t i = 0; i < {n}; ++i) {{"));
                self.line(&format!("    acc = sk::add128(acc, {t}.GetValue(i));"));
                self.line(&format!("    if (sk::lt128(thr, sk::shl128(acc, 53))) {{ {res} = (int32_t)i; break; }}"));
                self.line("  }");
                self.line(&format!("  if ({res} < 0) for (uint32_t i = {n}; i-- > 0;) if ({t}.GetValue(i) > 0) {{ {res} = (int32_t)i; break; }}"));
                self.line("}");
                self.close_cond(saved);
                res
            }
            other => {
                self.unsupported(format!("`{}` in a scalar position", other.name()));
                "0".into()
            }
        }
    }
}
