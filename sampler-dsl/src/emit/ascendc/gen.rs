//! The writer core: output lines, syncs and barriers, UB slots, blocks and statements.

use super::*;

impl Gen {
    pub(super) fn new(tile: u32) -> Gen {
        Gen {
            tile,
            out: String::new(),
            ind: 2,
            ub: Ub::default(),
            hz: Hazards::default(),
            tmp: 0,
            scopes: Vec::new(),
            unsupported: None,
            temps: Vec::new(),
            uses_top_n: false,
            qin_bytes: 0,
            qout_bytes: 0,
            qin_live: 0,
            qtiles: HashMap::new(),
            written: HashSet::new(),
        }
    }

    pub(super) fn line(&mut self, s: &str) {
        for _ in 0..self.ind {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    pub(super) fn fresh(&mut self, base: &str) -> String {
        self.tmp += 1;
        format!("{base}{}", self.tmp)
    }

    pub(super) fn unsupported(&mut self, why: impl Into<String>) {
        if self.unsupported.is_none() {
            self.unsupported = Some(why.into());
        }
    }

    pub(super) fn lookup(&self, name: &str) -> Option<Val> {
        self.scopes.iter().rev().find_map(|s| s.get(name).cloned())
    }

    // ---------- pipes and syncs ----------

    /// Emits the syncs an op on `pipe` needs before it, and records it.
    pub(super) fn sync(&mut self, pipe: Pipe, t: Touch) {
        for (w, p) in self.hz.access(pipe, &t) {
            self.emit_sync(w, p);
        }
    }

    /// One `w -> p` ordering: `PipeBarrier<PIPE_{w}>` on one pipe, else an
    /// `sk::sync` flag pair (an ID from the pipe's pool; TQue holds IDs of
    /// the same pool). `FetchEventID` returns the same ID each time, so a
    /// flag whose previous WaitFlag may still sit in `p`'s queue is preceded
    /// by a `p -> w` sync (SetFlag twice in a row is undefined).
    pub(super) fn emit_sync(&mut self, w: Pipe, p: Pipe) {
        if w == p {
            self.line(&format!("AscendC::PipeBarrier<PIPE_{}>();", w.event_name()));
            return;
        }
        if self.hz.must_drain(w, p) {
            self.line(&format!("sk::sync<AscendC::HardEvent::{}_{}>();", p.event_name(), w.event_name()));
            self.hz.flag_set(p, w);
            self.hz.queue_sync(p, w);
        }
        self.line(&format!("sk::sync<AscendC::HardEvent::{}_{}>();", w.event_name(), p.event_name()));
        self.hz.flag_set(w, p);
    }

    /// Before a scalar read of GM that this kernel also writes (by DMA):
    /// drop the DataCache lines, which may hold the bytes from before.
    pub(super) fn dcci_if_written(&mut self, g: &str, p: Prim) {
        if self.written.contains(g) {
            self.line(&format!(
                "AscendC::DataCacheCleanAndInvalid<{}, AscendC::CacheLine::ENTIRE_DATA_CACHE, AscendC::DcciDst::CACHELINE_OUT>(g_{g});",
                ub_type(p)
            ));
        }
    }

    pub(super) fn barrier(&mut self) {
        self.line("AscendC::PipeBarrier<PIPE_ALL>();");
        self.hz.barrier();
    }

    /// Opens a run-time conditional: syncs done inside it may not happen.
    pub(super) fn open_cond(&mut self, head: &str) -> [[u64; 4]; 4] {
        self.line(&format!("{head} {{"));
        self.ind += 1;
        self.hz.synced
    }

    pub(super) fn close_cond(&mut self, saved: [[u64; 4]; 4]) {
        self.ind -= 1;
        self.line("}");
        self.hz.synced = saved;
    }

    // ---------- UB slots ----------

    pub(super) fn alloc_tile(&mut self, prim: Prim, elems: u32, owned: bool) -> TileV {
        let bytes = elems.max(1) * ub_elem_bytes(prim);
        let slot = self.ub.alloc(bytes);
        if owned {
            self.temps.push(slot.id);
        }
        let t = self.fresh("t");
        let n = format!("{t}_n");
        let ty = ub_type(prim);
        self.line(&format!("AscendC::LocalTensor<{ty}> {t} = ub8[{}].ReinterpretCast<{ty}>();", slot.off));
        TileV { t, n, prim, slot, owned }
    }

    /// A GM -> UB staging tile: a `qin` tensor (`AllocTensor`) while fewer
    /// than [`QUEUE_DEPTH`] are outstanding, else a planned `TBuf` slot
    /// (synchronised with flags). Returns the tile and whether it is queued.
    pub(super) fn alloc_in(&mut self, prim: Prim, elems: u32) -> (TileV, bool) {
        if self.qin_live >= QUEUE_DEPTH {
            return (self.alloc_tile(prim, elems, true), false);
        }
        let bytes = elems.max(1) * ub_elem_bytes(prim);
        let slot = self.ub.queue_slot(bytes);
        self.qin_bytes = self.qin_bytes.max(slot.bytes);
        self.qin_live += 1;
        self.temps.push(slot.id);
        let t = self.fresh("t");
        let n = format!("{t}_n");
        let ty = ub_type(prim);
        self.line(&format!("AscendC::LocalTensor<{ty}> {t} = qin.AllocTensor<{ty}>();"));
        self.qtiles.insert(slot.id, (t.clone(), "qin"));
        (TileV { t, n, prim, slot, owned: true }, true)
    }

    /// `EnQue` + `DeQue` of a staged tile: the MTE2 -> V synchronisation.
    pub(super) fn enque_in(&mut self, t: &TileV) {
        self.line(&format!("qin.EnQue({0}); {0} = qin.DeQue<{1}>();", t.t, ub_type(t.prim)));
        self.hz.queue_sync(Pipe::Mte2, Pipe::V);
    }

    /// Frees a slot; a queue tensor is handed back with `FreeTensor`.
    pub(super) fn free_slot(&mut self, id: usize) {
        if let Some((t, q)) = self.qtiles.remove(&id) {
            self.line(&format!("{q}.FreeTensor({t});"));
            if q == "qin" {
                self.qin_live -= 1;
            }
        }
        self.ub.free(id);
    }

    pub(super) fn raw_slot(&mut self, bytes: u32) -> Slot {
        let s = self.ub.alloc(bytes);
        self.temps.push(s.id);
        s
    }

    // ---------- blocks and statements ----------

    pub(super) fn block(&mut self, b: &Block) {
        self.scopes.push(HashMap::new());
        let mentions: Vec<HashSet<String>> = b.stmts.iter().map(stmt_mentions).collect();
        let mut frees: Vec<Vec<usize>> = vec![Vec::new(); b.stmts.len()];
        for (i, s) in b.stmts.iter().enumerate() {
            let bound = self.stmt(s);
            for id in std::mem::take(&mut self.temps) {
                self.free_slot(id);
            }
            for (name, slot) in bound {
                let mut last = i;
                for (j, st) in b.stmts.iter().enumerate().skip(i + 1) {
                    if mentions[j].contains(&name) {
                        last = j;
                    }
                    if let Stmt::Let { names, .. } = st {
                        if names.iter().any(|(n, _)| *n == name) {
                            break;
                        }
                    }
                }
                frees[last].push(slot);
            }
            for id in std::mem::take(&mut frees[i]) {
                self.free_slot(id);
            }
        }
        self.scopes.pop();
    }

    /// Emits a statement; returns the owned tiles it binds (name, slot id).
    pub(super) fn stmt(&mut self, s: &Stmt) -> Vec<(String, usize)> {
        match s {
            Stmt::Let { names, value, .. } => {
                let mut bound = Vec::new();
                if names.len() > 1 {
                    let (tiles, scalars) = self.tuple(value);
                    let nt = tiles.len();
                    for ((name, _), tv) in names.iter().zip(tiles) {
                        bound.extend(self.bind_tile(name, tv));
                    }
                    // The counted top-N's u32 counts (C++ variables the call wrote).
                    for ((name, m), v) in names.iter().skip(nt).zip(scalars) {
                        let cname = self.fresh(&format!("v_{name}_"));
                        let c = if *m { "" } else { "const " };
                        self.line(&format!("{c}uint32_t {cname} = {v};"));
                        self.scopes.last_mut().unwrap().insert(name.to_string(), Val::Scalar(cname, Prim::U32));
                    }
                    return bound;
                }
                let (name, m) = &names[0];
                if value.ty.is_tile() {
                    let tv = self.tile(value);
                    if *m {
                        // A mutable tile owns its slot (assignments copy into it)
                        // and a mutable length, so it never aliases its initial value.
                        let dst = self.alloc_tile(tv.prim, self.tile, true);
                        self.line(&format!("uint32_t {} = 0;", dst.n));
                        self.copy_into(&dst, &tv);
                        return self.bind_tile(name, dst);
                    }
                    return self.bind_tile(name, tv);
                }
                let p = value.ty.prim().unwrap_or(Prim::U32);
                let v = self.scalar(value);
                let cname = self.fresh(&format!("v_{name}_"));
                let c = if *m { "" } else { "const " };
                self.line(&format!("{c}{} {cname} = ({})({v});", scalar_type(p), scalar_type(p)));
                self.scopes.last_mut().unwrap().insert(name.to_string(), Val::Scalar(cname, p));
                bound
            }
            Stmt::Assign { target, value, .. } => {
                match self.lookup(&target.to_string()) {
                    Some(Val::Scalar(c, p)) => {
                        let v = self.scalar(value);
                        self.line(&format!("{c} = ({})({v});", scalar_type(p)));
                    }
                    Some(Val::Tile(dst)) => {
                        let v = self.tile(value);
                        self.copy_into(&dst, &v);
                    }
                    _ => self.unsupported(format!("assignment to `{target}` (tile or unknown)")),
                }
                Vec::new()
            }
            Stmt::Expr(e) => {
                self.effect(e);
                Vec::new()
            }
            Stmt::If { cond, then, els, .. } => {
                let piped = block_has_pipe_work(then) || els.as_ref().is_some_and(block_has_pipe_work);
                let c = self.scalar(cond);
                if piped {
                    self.barrier();
                }
                let saved = self.open_cond(&format!("if ({c})"));
                self.cond_body(then, piped);
                if let Some(e) = els {
                    self.ind -= 1;
                    self.line("} else {");
                    self.ind += 1;
                    self.hz.synced = saved;
                    self.cond_body(e, piped);
                }
                self.close_cond(saved);
                if piped {
                    self.barrier();
                }
                Vec::new()
            }
            Stmt::For { var, start, end, body, .. } => {
                let piped = block_has_pipe_work(body);
                let p = start.ty.prim().unwrap_or(Prim::U32);
                let ty = scalar_type(p);
                let a = self.scalar(start);
                let b = self.scalar(end);
                let endv = self.fresh("end");
                let cv = self.fresh(&format!("v_{var}_"));
                self.line(&format!("const {ty} {endv} = ({ty})({b});"));
                if piped {
                    self.barrier();
                }
                let saved = self.open_cond(&format!("for ({ty} {cv} = ({ty})({a}); {cv} < {endv}; ++{cv})"));
                self.scopes.push(HashMap::from([(var.to_string(), Val::Scalar(cv, p))]));
                self.cond_body(body, piped);
                self.scopes.pop();
                self.close_cond(saved);
                if piped {
                    self.barrier();
                }
                Vec::new()
            }
        }
    }

    pub(super) fn cond_body(&mut self, b: &Block, piped: bool) {
        if piped {
            self.barrier();
        }
        self.block(b);
        if piped {
            self.barrier();
        }
    }

    /// `dst = src` for a mutable tile: a UB -> UB copy (V pipe, whole 32-byte
    /// blocks, as the store's CopyOut) and the length.
    pub(super) fn copy_into(&mut self, dst: &TileV, src: &TileV) {
        if dst.slot == src.slot {
            return;
        }
        let ty = ub_type(src.prim);
        self.line(&format!("{} = {};", dst.n, src.n));
        self.sync(Pipe::V, Touch { ub_reads: vec![src.slot], ub_writes: vec![dst.slot], ..Default::default() });
        let saved = self.open_cond(&format!("if ({} > 0)", dst.n));
        self.line(&format!(
            "AscendC::DataCopy({}, {}, AscendC::DataCopyParams{{1, (uint16_t)(({} * sizeof({ty}) + 31) / 32), 0, 0}});",
            dst.t, src.t, dst.n
        ));
        self.close_cond(saved);
    }

    pub(super) fn bind_tile(&mut self, name: &syn::Ident, tv: TileV) -> Vec<(String, usize)> {
        let owned = tv.owned;
        let id = tv.slot.id;
        self.temps.retain(|&x| x != id);
        let tv = TileV { owned: false, ..tv };
        self.scopes.last_mut().unwrap().insert(name.to_string(), Val::Tile(tv));
        if owned {
            vec![(name.to_string(), id)]
        } else {
            Vec::new()
        }
    }
}
