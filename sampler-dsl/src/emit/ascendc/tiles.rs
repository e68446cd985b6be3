//! Tile-valued ops: loads, `iota`, `full`, gathers, scans and `top_n`.

use super::*;

impl Gen {
    pub(super) fn tile(&mut self, e: &Expr) -> TileV {
        let p = e.ty.prim().unwrap_or(Prim::F32);
        if let ExprKind::Var(id) = &e.kind {
            if let Some(Val::Tile(t)) = self.lookup(&id.to_string()) {
                return t;
            }
            self.unsupported(format!("`{id}` is not a tile"));
            return self.alloc_tile(p, 1, true);
        }
        if e.is_elementwise() {
            if vec_ok(e) {
                return self.vec(e);
            }
            return self.elem_loop(e);
        }
        let ExprKind::Call(op, args) = &e.kind else {
            self.unsupported("a tile-valued expression of this form");
            return self.alloc_tile(p, 1, true);
        };
        let tile = self.tile;
        match op {
            Op::Load => {
                let Some((g, gp)) = self.gm(&args[0]) else { return self.alloc_tile(p, 1, true) };
                let off = self.scalar(&args[1]);
                let n = self.scalar(&args[2]);
                let (t, queued) = self.alloc_in(gp, tile);
                let offv = self.fresh("off");
                self.line(&format!("const uint32_t {} = sk::min<uint32_t>((uint32_t)({n}), TILE);", t.n));
                self.line(&format!("const uint64_t {offv} = (uint64_t)({off});"));
                self.sync(Pipe::Mte2, Touch { ub_writes: vec![t.slot], gm_reads: vec![&g], ..Default::default() });
                let saved = self.open_cond(&format!("if ({} > 0)", t.n));
                self.line(&format!(
                    "AscendC::DataCopyPad({}, g_{g}[{offv}], AscendC::DataCopyExtParams{{1, (uint32_t)({} * sizeof({})), 0, 0, 0}}, AscendC::DataCopyPadExtParams<{}>{{false, 0, 0, 0}});",
                    t.t, t.n, ub_type(gp), ub_type(gp)
                ));
                self.close_cond(saved);
                if queued {
                    self.enque_in(&t);
                }
                t
            }
            Op::MaskBits => {
                let Some((g, _)) = self.gm(&args[0]) else { return self.alloc_tile(p, 1, true) };
                let off = self.scalar(&args[1]);
                let n = self.scalar(&args[2]);
                let (words, queued) = self.alloc_in(Prim::U32, tile.div_ceil(32) + 8);
                let t = self.alloc_tile(Prim::Bool, tile, true);
                let offv = self.fresh("off");
                self.line(&format!("const uint32_t {} = sk::min<uint32_t>((uint32_t)({n}), TILE);", t.n));
                self.line(&format!("const uint32_t {} = ({} + 31) / 32;", words.n, t.n));
                self.line(&format!("const uint64_t {offv} = (uint64_t)({off});"));
                self.sync(Pipe::Mte2, Touch { ub_writes: vec![words.slot], gm_reads: vec![&g], ..Default::default() });
                let saved = self.open_cond(&format!("if ({} > 0)", words.n));
                self.line(&format!(
                    "AscendC::DataCopyPad({}, g_{g}[{offv}], AscendC::DataCopyExtParams{{1, (uint32_t)({} * 4), 0, 0, 0}}, AscendC::DataCopyPadExtParams<uint32_t>{{false, 0, 0, 0}});",
                    words.t, words.n
                ));
                self.close_cond(saved);
                if queued {
                    self.enque_in(&words);
                }
                self.sync(Pipe::S, Touch { ub_reads: vec![words.slot], ub_writes: vec![t.slot], ..Default::default() });
                let saved = self.open_cond(&format!("for (uint32_t i = 0; i < {}; ++i)", t.n));
                self.line(&format!("{}.SetValue(i, (uint8_t)(({}.GetValue(i / 32) >> (i % 32)) & 1u));", t.t, words.t));
                self.close_cond(saved);
                t
            }
            Op::Iota => {
                let n = self.scalar(&args[0]);
                let t = self.alloc_tile(Prim::U32, tile, true);
                self.line(&format!("const uint32_t {} = sk::min<uint32_t>((uint32_t)({n}), TILE);", t.n));
                self.sync(Pipe::V, Touch { ub_writes: vec![t.slot], ..Default::default() });
                self.line(&format!(
                    "AscendC::CreateVecIndex({}.ReinterpretCast<int32_t>(), (int32_t)0, {});",
                    t.t, t.n
                ));
                t
            }
            Op::Full => {
                let n = self.scalar(&args[0]);
                let v = self.scalar(&args[1]);
                let vp = args[1].ty.prim().unwrap_or(p);
                let t = self.alloc_tile(vp, tile, true);
                self.line(&format!("const uint32_t {} = sk::min<uint32_t>((uint32_t)({n}), TILE);", t.n));
                if matches!(vp, Prim::F32 | Prim::I32 | Prim::U32) {
                    self.sync(Pipe::V, Touch { ub_writes: vec![t.slot], ..Default::default() });
                    self.line(&format!("AscendC::Duplicate({}, ({})({v}), (int32_t){});", t.t, ub_type(vp), t.n));
                } else {
                    let sv = self.fresh("s");
                    self.line(&format!("const {} {sv} = ({})({v});", ub_type(vp), ub_type(vp)));
                    self.sync(Pipe::S, Touch { ub_writes: vec![t.slot], ..Default::default() });
                    self.line(&format!("for (uint32_t i = 0; i < {}; ++i) {}.SetValue(i, {sv});", t.n, t.t));
                }
                t
            }
            Op::Gather => {
                let Some((g, gp)) = self.gm(&args[0]) else { return self.alloc_tile(p, 1, true) };
                let off = self.scalar(&args[1]);
                let idx = self.tile(&args[2]);
                let fb = self.scalar(&args[3]);
                let t = self.alloc_tile(gp, tile, true);
                let offv = self.fresh("off");
                self.line(&format!("const uint32_t {} = {};", t.n, idx.n));
                self.line(&format!("const uint64_t {offv} = (uint64_t)({off});"));
                self.sync(
                    Pipe::S,
                    Touch {
                        ub_reads: vec![idx.slot],
                        ub_writes: vec![t.slot],
                        gm_reads: vec![&g],
                        ..Default::default()
                    },
                );
                self.dcci_if_written(&g, gp);
                let saved = self.open_cond(&format!("for (uint32_t i = 0; i < {}; ++i)", t.n));
                self.line(&format!("const int32_t j = {}.GetValue(i);", idx.t));
                self.line(&format!(
                    "{}.SetValue(i, j < 0 ? ({ty})({fb}) : ({ty})g_{g}.GetValue({offv} + (uint64_t)j));",
                    t.t,
                    ty = ub_type(gp)
                ));
                self.close_cond(saved);
                t
            }
            Op::ExclusiveScan | Op::InclusiveScan => {
                let src = self.tile(&args[0]);
                let ty = ub_type(src.prim);
                let t = if src.owned { src.clone() } else { self.alloc_tile(src.prim, tile, true) };
                if !src.owned {
                    self.line(&format!("const uint32_t {} = {};", t.n, src.n));
                }
                self.sync(Pipe::S, Touch { ub_reads: vec![src.slot], ub_writes: vec![t.slot], ..Default::default() });
                let saved = self.open_cond("");
                self.line(&format!("{ty} acc = 0;"));
                self.line(&format!("for (uint32_t i = 0; i < {}; ++i) {{", src.n));
                self.line(&format!("  const {ty} x = {}.GetValue(i);", src.t));
                if *op == Op::ExclusiveScan {
                    self.line(&format!("  {}.SetValue(i, acc);", t.t));
                    self.line(&format!("  acc = sk::add<{ty}>(acc, x);"));
                } else {
                    self.line(&format!("  acc = sk::add<{ty}>(acc, x);"));
                    self.line(&format!("  {}.SetValue(i, acc);", t.t));
                }
                self.line("}");
                self.close_cond(saved);
                t
            }
            other => {
                self.unsupported(format!("tile op `{}`", other.name()));
                self.alloc_tile(p, 1, true)
            }
        }
    }

    /// Ops returning two tiles (`top_n`), and for the counted forms two u32
    /// scalars after them (C++ variables holding `bad` and `finite`).
    pub(super) fn tuple(&mut self, e: &Expr) -> (Vec<TileV>, Vec<String>) {
        // top_n_set: top_n's order also keeps equal logits in ascending id order,
        // which is all its consumers (topn_merge) rely on.
        let ExprKind::Call(
            op @ (Op::TopN
            | Op::TopNSet
            | Op::TopNCounted
            | Op::TopNSetCounted
            | Op::TopNStreamCounted
            | Op::TopNChunkStream
            | Op::TopNMergeStream
            | Op::TopNCluster),
            args,
        ) = &e.kind
        else {
            self.unsupported("a tuple-valued op other than `top_n`");
            return (vec![self.alloc_tile(Prim::F32, 1, true), self.alloc_tile(Prim::I32, 1, true)], Vec::new());
        };
        // The cluster form: a program is a whole row on an AI core (no cluster), so its exact selection.
        let counted = matches!(
            op,
            Op::TopNCounted | Op::TopNSetCounted | Op::TopNStreamCounted | Op::TopNChunkStream | Op::TopNCluster
        );
        // The streaming form's fifth value: this lowering never falls back (0).
        let stream = matches!(op, Op::TopNStreamCounted | Op::TopNCluster);
        let tile = self.tile;
        if tile < 64 {
            self.unsupported("top_n needs TILE >= 64 (Sort32 runs of 32)");
        }
        self.uses_top_n = true;
        // The streaming forms over several blocks per row lower to the exact
        // selection: the chunk's top n (positions in the chunk), and the
        // row's top n re-read from the logits (what both stages compute).
        let (src, off, v, n) = match op {
            Op::TopNChunkStream => {
                let (row, start) = (self.scalar(&args[1]), self.scalar(&args[3]));
                (
                    &args[0],
                    format!("(uint64_t)({row}) + (uint64_t)({start})"),
                    self.scalar(&args[4]),
                    self.scalar(&args[5]),
                )
            }
            Op::TopNMergeStream => (&args[7], self.scalar(&args[8]), self.scalar(&args[9]), self.scalar(&args[10])),
            _ => (&args[0], self.scalar(&args[1]), self.scalar(&args[2]), self.scalar(&args[3])),
        };
        let Some((g, _)) = self.gm(src) else { return (vec![], vec![]) };
        let x = self.alloc_tile(Prim::F32, tile, true);
        let id = self.alloc_tile(Prim::I32, tile, true);
        // Scratch: run (TILE pairs), merged (1.5 TILE pairs), a and b (TILE/2 pairs each).
        let run = self.raw_slot(tile * 8);
        let merged = self.raw_slot(tile * 12);
        let a = self.raw_slot(tile * 4);
        let b = self.raw_slot(tile * 4);
        self.barrier();
        let f = |s: Slot| format!("ub8[{}].ReinterpretCast<float>()", s.off);
        // The counted forms: the routine counts each chunk as it lands in UB.
        let counts = counted.then(|| (self.fresh("s"), self.fresh("s")));
        if let Some((bad, fin)) = &counts {
            self.line(&format!("uint32_t {bad} = 0, {fin} = 0;"));
        }
        let extra = counts.as_ref().map_or(String::new(), |(bad, fin)| format!(", &{bad}, &{fin}"));
        self.line(&format!(
            "const uint32_t {} = sk::top_n<{tile}>(g_{g}, (uint64_t)({off}), (uint32_t)({v}), (uint32_t)({n}), {}, {}, {}, {}, {}, {}.ReinterpretCast<uint32_t>(){extra});",
            x.n,
            f(run),
            f(merged),
            f(a),
            f(b),
            x.t,
            id.t
        ));
        self.line(&format!("const uint32_t {} = {};", id.n, x.n));
        self.barrier();
        let mut scalars = counts.map_or(Vec::new(), |(bad, fin)| vec![bad, fin]);
        if stream {
            // The stream form never falls back here (0); the cluster form's row is one AI core's (1).
            let fb = self.fresh("s");
            let v = if matches!(op, Op::TopNCluster) { 1 } else { 0 };
            self.line(&format!("const uint32_t {fb} = {v};"));
            scalars.push(fb);
        }
        (vec![x, id], scalars)
    }
}
