//! Effects: `store`, `store_head`, `store_scalar`, `scatter` (every GM write is a byte-exact DMA).

use super::*;

impl Gen {
    pub(super) fn effect(&mut self, e: &Expr) {
        let ExprKind::Call(op, args) = &e.kind else {
            let _ = self.scalar(e);
            return;
        };
        match op {
            Op::Store | Op::StoreHead => {
                let Some((g, p)) = self.gm(&args[0]) else { return };
                let off = self.scalar(&args[1]);
                let t = self.tile(&args[2]);
                let n = if *op == Op::StoreHead {
                    let k = self.scalar(&args[3]);
                    format!("sk::min<uint32_t>({}, (uint32_t)({k}))", t.n)
                } else {
                    t.n.clone()
                };
                let nv = self.fresh("n");
                let offv = self.fresh("off");
                self.line(&format!("const uint32_t {nv} = {n};"));
                self.line(&format!("const uint64_t {offv} = (uint64_t)({off});"));
                // Classic CopyOut: the tile is copied (V pipe, whole 32-byte
                // blocks) into a `qout` tensor, EnQue/DeQue hands it to MTE3.
                let ty = ub_type(p);
                let q = self.ub.queue_slot(self.tile * ub_elem_bytes(p));
                self.qout_bytes = self.qout_bytes.max(q.bytes);
                let o = self.fresh("o");
                self.line(&format!("AscendC::LocalTensor<{ty}> {o} = qout.AllocTensor<{ty}>();"));
                self.sync(Pipe::V, Touch { ub_reads: vec![t.slot], ub_writes: vec![q], ..Default::default() });
                let saved = self.open_cond(&format!("if ({nv} > 0)"));
                self.line(&format!(
                    "AscendC::DataCopy({o}, {}, AscendC::DataCopyParams{{1, (uint16_t)(({nv} * sizeof({ty}) + 31) / 32), 0, 0}});",
                    t.t
                ));
                self.close_cond(saved);
                self.line(&format!("qout.EnQue({o}); {o} = qout.DeQue<{ty}>();"));
                self.hz.queue_sync(Pipe::V, Pipe::Mte3);
                self.sync(Pipe::Mte3, Touch { ub_reads: vec![q], gm_writes: vec![&g], ..Default::default() });
                let saved = self.open_cond(&format!("if ({nv} > 0)"));
                self.line(&format!(
                    "AscendC::DataCopyPad(g_{g}[{offv}], {o}, AscendC::DataCopyExtParams{{1, (uint32_t)({nv} * sizeof({ty})), 0, 0, 0}});"
                ));
                self.close_cond(saved);
                self.line(&format!("qout.FreeTensor({o});"));
            }
            Op::StoreScalar => {
                // Staged in UB and written by DMA, byte-exact: a scalar
                // `SetValue` into GM writes back a whole 64-byte DataCache
                // line and would clobber rows of other cores.
                let Some((g, p)) = self.gm(&args[0]) else { return };
                let i = self.scalar(&args[1]);
                let v = self.scalar(&args[2]);
                let ty = ub_type(p);
                let st = self.raw_slot(32);
                let iv = self.fresh("off");
                self.line(&format!("const uint64_t {iv} = (uint64_t)({i});"));
                self.sync(Pipe::S, Touch { ub_writes: vec![st], ..Default::default() });
                self.line(&format!("ub8[{}].ReinterpretCast<{ty}>().SetValue(0, ({ty})({v}));", st.off));
                self.sync(Pipe::Mte3, Touch { ub_reads: vec![st], gm_writes: vec![&g], ..Default::default() });
                self.line(&format!(
                    "AscendC::DataCopyPad(g_{g}[{iv}], ub8[{}].ReinterpretCast<{ty}>(), AscendC::DataCopyExtParams{{1, (uint32_t)sizeof({ty}), 0, 0, 0}});",
                    st.off
                ));
            }
            Op::Scatter => {
                let Some((g, p)) = self.gm(&args[0]) else { return };
                let off = self.scalar(&args[1]);
                let idx = self.tile(&args[2]);
                let vals = self.tile(&args[3]);
                let offv = self.fresh("off");
                self.line(&format!("const uint64_t {offv} = (uint64_t)({off});"));
                // One byte-exact DMA per element through a UB staging slot
                // (never a scalar SetValue into GM: see StoreScalar).
                let ty = ub_type(p);
                let st = self.raw_slot(32);
                self.sync(
                    Pipe::S,
                    Touch { ub_reads: vec![idx.slot, vals.slot], ub_writes: vec![st], ..Default::default() },
                );
                // The loop's own S_MTE3 covers the staging slot, so no S -> MTE3
                // before it (a second SetFlag of that ID while MTE3 may still
                // hold the first WaitFlag is undefined); an earlier MTE3 write of
                // the buffer (a bulk row store) needs PipeBarrier<PIPE_MTE3>.
                for (w, p) in
                    self.hz.access(Pipe::Mte3, &Touch { ub_reads: vec![st], gm_writes: vec![&g], ..Default::default() })
                {
                    if (w, p) != (Pipe::S, Pipe::Mte3) {
                        self.emit_sync(w, p);
                    }
                }
                if self.hz.must_drain(Pipe::S, Pipe::Mte3) {
                    self.emit_sync(Pipe::Mte3, Pipe::S);
                    self.hz.queue_sync(Pipe::Mte3, Pipe::S);
                }
                let rd = elem_read(&vals, "i");
                let saved =
                    self.open_cond(&format!("for (uint32_t i = 0; i < sk::min<uint32_t>({}, {}); ++i)", idx.n, vals.n));
                self.line(&format!("const int32_t j = {}.GetValue(i);", idx.t));
                self.line("if (j < 0) continue;");
                self.line(&format!("ub8[{}].ReinterpretCast<{ty}>().SetValue(0, ({ty})({rd}));", st.off));
                self.line("sk::sync<AscendC::HardEvent::S_MTE3>();");
                self.line(&format!(
                    "AscendC::DataCopyPad(g_{g}[{offv} + (uint64_t)j], ub8[{}].ReinterpretCast<{ty}>(), AscendC::DataCopyExtParams{{1, (uint32_t)sizeof({ty}), 0, 0, 0}});",
                    st.off
                ));
                self.line("sk::sync<AscendC::HardEvent::MTE3_S>();");
                self.close_cond(saved);
                // Every DMA of the loop was followed by MTE3 -> S.
                self.hz.flag_set(Pipe::S, Pipe::Mte3);
                self.hz.queue_sync(Pipe::Mte3, Pipe::S);
            }
            _ => {
                let _ = self.scalar(e);
            }
        }
    }

    pub(super) fn gm(&mut self, e: &Expr) -> Option<(String, Prim)> {
        if let ExprKind::Var(id) = &e.kind {
            if let Some(Val::Gm(n, p)) = self.lookup(&id.to_string()) {
                return Some((n, p));
            }
        }
        self.unsupported("a buffer argument that is not a parameter");
        None
    }
}
