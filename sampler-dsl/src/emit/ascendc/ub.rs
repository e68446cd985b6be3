//! The static UB plan and the pipe-hazard tracker of the AscendC writer.
//!
//! UB is planned at emit time: every tile gets a fixed byte range (first
//! fit, 256-byte aligned so Compare/Sort inputs are always legal), freed at
//! its last use. The tracker mirrors what the hardware needs: an access on
//! one pipe of bytes last written (or read) on another pipe gets a
//! `SetFlag/WaitFlag` pair first (RAW, WAR and WAW). Same-pipe pairs need
//! `PipeBarrier<PIPE_{pipe}>`: on V for RAW, WAR and WAW, and on MTE2 (UB)
//! and MTE3 (GM) for write-after-write, since DMAs of one pipe with
//! overlapping destinations are not ordered (PipeBarrier page). GM is
//! tracked per buffer, so two writes of one buffer count as overlapping.

/// Usable UB per AI vector core on dav-2201 (192 KB minus 8 KB kept free).
pub const UB_BUDGET: u32 = 184 * 1024;
/// Alignment of every UB slot (Compare / Sort32 / MrgSort inputs need 256).
pub const SLOT_ALIGN: u32 = 256;
/// Granularity of the hazard tracker.
const BLOCK: u32 = 256;
/// Start of the virtual offsets that name `TQue` buffers in the hazard
/// tracker (they live outside the `TBuf` plan; the plan adds their bytes).
pub const QUEUE_BASE: u32 = 1 << 20;

/// Pipes of an AI vector core that the generated code uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pipe {
    S = 0,
    V = 1,
    Mte2 = 2,
    Mte3 = 3,
}

impl Pipe {
    pub const ALL: [Pipe; 4] = [Pipe::S, Pipe::V, Pipe::Mte2, Pipe::Mte3];
    pub fn event_name(self) -> &'static str {
        match self {
            Pipe::S => "S",
            Pipe::V => "V",
            Pipe::Mte2 => "MTE2",
            Pipe::Mte3 => "MTE3",
        }
    }
}

/// A planned UB range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub id: usize,
    pub off: u32,
    pub bytes: u32,
}

/// First-fit static allocator over UB byte offsets.
#[derive(Default, Debug)]
pub struct Ub {
    live: Vec<Slot>,
    next_id: usize,
    /// Highest byte in use at any point (the UB the variant needs).
    pub peak: u32,
    /// Virtual bytes handed out to queue buffers so far.
    queued: u32,
}

impl Ub {
    /// Allocates `bytes` (rounded up to the slot alignment).
    pub fn alloc(&mut self, bytes: u32) -> Slot {
        let size = bytes.max(1).div_ceil(SLOT_ALIGN) * SLOT_ALIGN;
        let mut spans: Vec<(u32, u32)> = self.live.iter().map(|s| (s.off, s.off + s.bytes)).collect();
        spans.sort_unstable();
        let mut at = 0u32;
        for (a, b) in spans {
            if a >= at.saturating_add(size) {
                break;
            }
            at = at.max(b);
        }
        let s = Slot { id: self.next_id, off: at, bytes: size };
        self.next_id += 1;
        self.live.push(s);
        self.peak = self.peak.max(at.saturating_add(size));
        s
    }
    /// A fresh range naming one use of a `TQue` buffer (not part of the
    /// `TBuf` plan; the queue synchronises its reuse).
    pub fn queue_slot(&mut self, bytes: u32) -> Slot {
        let size = bytes.max(1).div_ceil(SLOT_ALIGN) * SLOT_ALIGN;
        let s = Slot { id: self.next_id, off: QUEUE_BASE + self.queued, bytes: size };
        self.next_id += 1;
        self.queued += size;
        s
    }
    /// Frees a slot (no-op when already free).
    pub fn free(&mut self, id: usize) {
        self.live.retain(|s| s.id != id);
    }
}

#[derive(Clone, Copy, Default, Debug)]
struct Access {
    writer: Option<(Pipe, u64)>,
    reads: [u64; 4],
}

/// Static pipe-hazard tracker over UB blocks and whole GM buffers.
#[derive(Debug)]
pub struct Hazards {
    now: u64,
    ub: Vec<Access>,
    gm: std::collections::HashMap<String, Access>,
    /// `synced[w][p]`: stamp of the last `w -> p` sync.
    pub synced: [[u64; 4]; 4],
    /// `set_at[w][p]`: stamp of the last `sk::sync<w_p>` (a SetFlag on `w`).
    set_at: [[u64; 4]; 4],
}

impl Default for Hazards {
    fn default() -> Self {
        Hazards {
            now: 1,
            ub: vec![Access::default(); (UB_BUDGET / BLOCK + 64) as usize],
            gm: Default::default(),
            synced: [[0; 4]; 4],
            set_at: [[0; 4]; 4],
        }
    }
}

/// What one emitted operation touches.
#[derive(Default)]
pub struct Touch<'a> {
    pub ub_reads: Vec<Slot>,
    pub ub_writes: Vec<Slot>,
    pub gm_reads: Vec<&'a str>,
    pub gm_writes: Vec<&'a str>,
}

impl Hazards {
    fn blocks(&self, s: Slot) -> std::ops::Range<usize> {
        let a = (s.off / BLOCK) as usize;
        let b = (s.off + s.bytes).div_ceil(BLOCK) as usize;
        a..b
    }

    /// A `TQue` `EnQue`/`DeQue` pair: all earlier work of `from` is visible to `to`.
    pub fn queue_sync(&mut self, from: Pipe, to: Pipe) {
        self.synced[from as usize][to as usize] = self.now;
        self.now += 1;
    }

    /// The syncs (`from -> to` pipe pairs) an op on `pipe` needs first, and
    /// records its accesses.
    pub fn access(&mut self, pipe: Pipe, t: &Touch) -> Vec<(Pipe, Pipe)> {
        let end = t.ub_reads.iter().chain(&t.ub_writes).map(|s| self.blocks(*s).end).max().unwrap_or(0);
        if end > self.ub.len() {
            self.ub.resize(end, Access::default());
        }
        let mut need: Vec<(Pipe, Pipe)> = Vec::new();
        let mut dma_waw: Vec<u64> = Vec::new();
        let p = pipe as usize;
        let mut want = |acc: &Access, write: bool, synced: &[[u64; 4]; 4]| {
            // Same-pipe pairs: on V always (vector ops may overlap without
            // PipeBarrier<PIPE_V>); on MTE2/MTE3 for write-after-write
            // (DMAs with overlapping destinations); S runs in order.
            if let Some((w, st)) = acc.writer {
                if w == pipe && write && matches!(pipe, Pipe::Mte2 | Pipe::Mte3) {
                    if st > synced[p][p] {
                        dma_waw.push(st);
                    }
                } else if (w != pipe || pipe == Pipe::V) && st > synced[w as usize][p] && !need.contains(&(w, pipe)) {
                    need.push((w, pipe));
                }
            }
            if write {
                for r in Pipe::ALL {
                    let st = acc.reads[r as usize];
                    if (r != pipe || pipe == Pipe::V) && st > synced[r as usize][p] && !need.contains(&(r, pipe)) {
                        need.push((r, pipe));
                    }
                }
            }
        };
        for s in &t.ub_reads {
            for b in self.blocks(*s) {
                want(&self.ub[b], false, &self.synced);
            }
        }
        for s in &t.ub_writes {
            for b in self.blocks(*s) {
                want(&self.ub[b], true, &self.synced);
            }
        }
        for g in &t.gm_reads {
            if let Some(a) = self.gm.get(*g) {
                want(a, false, &self.synced);
            }
        }
        for g in &t.gm_writes {
            if let Some(a) = self.gm.get(*g) {
                want(a, true, &self.synced);
            }
        }
        // An earlier DMA of this pipe is complete if its pipe handed over to
        // another pipe q after it (a flag waits for the DMA) and q has since
        // handed back (or does so now): MTE2 load, V reads, V -> MTE2, load.
        let sy = &self.synced;
        let done = |st: u64| {
            Pipe::ALL.iter().any(|&q| {
                let q = q as usize;
                q != p && sy[p][q] >= st && (need.contains(&(Pipe::ALL[q], pipe)) || sy[q][p] > sy[p][q])
            })
        };
        if dma_waw.iter().any(|&st| !done(st)) {
            need.push((pipe, pipe));
        }
        for &(w, q) in &need {
            self.synced[w as usize][q as usize] = self.now;
        }
        self.now += 1;
        let now = self.now;
        for s in &t.ub_reads {
            for b in self.blocks(*s) {
                self.ub[b].reads[p] = now;
            }
        }
        for s in &t.ub_writes {
            for b in self.blocks(*s) {
                self.ub[b].writer = Some((pipe, now));
            }
        }
        for g in &t.gm_reads {
            self.gm.entry(g.to_string()).or_default().reads[p] = now;
        }
        for g in &t.gm_writes {
            self.gm.entry(g.to_string()).or_default().writer = Some((pipe, now));
        }
        self.now += 1;
        need
    }

    /// Whether a flag `w -> p` set now could meet the previous one of the
    /// same ID still waiting in `p`'s queue: no `p -> w` sync (or barrier)
    /// since it was set. A wait on S blocks the scalar unit, so `p == S`
    /// never does (SetFlag/WaitFlag and FetchEventID pages).
    pub fn must_drain(&self, w: Pipe, p: Pipe) -> bool {
        p != Pipe::S && w != p && self.set_at[w as usize][p as usize] > self.synced[p as usize][w as usize]
    }

    /// Records an `sk::sync<w_p>` (its SetFlag on `w`).
    pub fn flag_set(&mut self, w: Pipe, p: Pipe) {
        self.set_at[w as usize][p as usize] = self.now;
        self.now += 1;
    }

    /// A `PipeBarrier<PIPE_ALL>`: every earlier access is complete.
    pub fn barrier(&mut self) {
        self.now += 1;
        for row in self.synced.iter_mut() {
            for x in row.iter_mut() {
                *x = self.now;
            }
        }
        self.now += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_reuses_freed_space() {
        let mut ub = Ub::default();
        let a = ub.alloc(1000);
        let b = ub.alloc(100);
        assert_eq!((a.off, a.bytes, b.off), (0, 1024, 1024));
        ub.free(a.id);
        let c = ub.alloc(512);
        assert_eq!(c.off, 0);
        assert_eq!(ub.peak, 1280);
    }

    #[test]
    fn raw_across_pipes_needs_a_sync_once() {
        let mut h = Hazards::default();
        let s = Slot { id: 0, off: 0, bytes: 256 };
        assert!(h.access(Pipe::Mte2, &Touch { ub_writes: vec![s], ..Default::default() }).is_empty());
        let n = h.access(Pipe::V, &Touch { ub_reads: vec![s], ..Default::default() });
        assert_eq!(n, vec![(Pipe::Mte2, Pipe::V)]);
        assert!(h.access(Pipe::V, &Touch { ub_reads: vec![s], ..Default::default() }).is_empty());
        // WAR: MTE2 overwriting what V read.
        let n = h.access(Pipe::Mte2, &Touch { ub_writes: vec![s], ..Default::default() });
        assert_eq!(n, vec![(Pipe::V, Pipe::Mte2)]);
    }

    #[test]
    fn dependent_vector_ops_need_a_pipe_v_barrier() {
        let mut h = Hazards::default();
        let a = Slot { id: 0, off: 0, bytes: 256 };
        let b = Slot { id: 1, off: 256, bytes: 256 };
        assert!(h.access(Pipe::V, &Touch { ub_writes: vec![a], ..Default::default() }).is_empty());
        // RAW on the vector pipe: a barrier (V -> V), once.
        assert_eq!(
            h.access(Pipe::V, &Touch { ub_reads: vec![a], ub_writes: vec![b], ..Default::default() }),
            vec![(Pipe::V, Pipe::V)]
        );
        // In place on b, written by the op before: RAW again.
        assert_eq!(
            h.access(Pipe::V, &Touch { ub_reads: vec![b], ub_writes: vec![b], ..Default::default() }),
            vec![(Pipe::V, Pipe::V)]
        );
        // WAR: overwriting a, read two ops ago before the last barrier: nothing.
        assert!(h.access(Pipe::V, &Touch { ub_writes: vec![a], ..Default::default() }).is_empty());
        // The scalar unit is in order with itself.
        assert!(h.access(Pipe::S, &Touch { ub_writes: vec![b], ..Default::default() }) == vec![(Pipe::V, Pipe::S)]);
        assert!(h.access(Pipe::S, &Touch { ub_reads: vec![b], ..Default::default() }).is_empty());
    }

    #[test]
    fn same_pipe_dma_writes_to_one_buffer_need_a_barrier() {
        let mut h = Hazards::default();
        let s = Slot { id: 0, off: 0, bytes: 256 };
        let t = |g| Touch { ub_reads: vec![s], gm_writes: vec![g], ..Default::default() };
        // MTE3 writes a row, then MTE3 writes into the same GM buffer: PipeBarrier<PIPE_MTE3>.
        assert!(h.access(Pipe::Mte3, &t("q")).is_empty());
        assert_eq!(h.access(Pipe::Mte3, &t("q")), vec![(Pipe::Mte3, Pipe::Mte3)]);
        // Another buffer: nothing; reading the same UB again on MTE3: nothing.
        assert!(h.access(Pipe::Mte3, &t("other")).is_empty());
        // MTE2 loads twice into the same UB bytes: PipeBarrier<PIPE_MTE2>.
        let w =
            Touch { ub_writes: vec![Slot { id: 1, off: 512, bytes: 256 }], gm_reads: vec!["x"], ..Default::default() };
        assert!(h.access(Pipe::Mte2, &w).is_empty());
        assert_eq!(h.access(Pipe::Mte2, &w), vec![(Pipe::Mte2, Pipe::Mte2)]);
        // A PIPE_ALL barrier orders everything.
        h.barrier();
        assert!(h.access(Pipe::Mte3, &t("q")).is_empty());
    }

    #[test]
    fn a_flag_set_twice_needs_the_waiting_pipe_drained_first() {
        let mut h = Hazards::default();
        h.flag_set(Pipe::S, Pipe::Mte3);
        // No MTE3 -> S since: MTE3 may still hold the first WaitFlag.
        assert!(h.must_drain(Pipe::S, Pipe::Mte3));
        h.queue_sync(Pipe::Mte3, Pipe::S);
        assert!(!h.must_drain(Pipe::S, Pipe::Mte3));
        // A wait on S blocks the scalar unit: never a drain.
        h.flag_set(Pipe::V, Pipe::S);
        assert!(!h.must_drain(Pipe::V, Pipe::S));
        h.flag_set(Pipe::S, Pipe::V);
        h.barrier();
        assert!(!h.must_drain(Pipe::S, Pipe::V));
    }

    #[test]
    fn queue_slots_are_tracked_and_synced_by_the_queue() {
        let mut ub = Ub::default();
        let q = ub.queue_slot(4096 * 8);
        assert!(q.off >= QUEUE_BASE);
        assert_eq!(ub.peak, 0);
        let mut h = Hazards::default();
        assert!(h.access(Pipe::Mte2, &Touch { ub_writes: vec![q], ..Default::default() }).is_empty());
        h.queue_sync(Pipe::Mte2, Pipe::V);
        assert!(h.access(Pipe::V, &Touch { ub_reads: vec![q], ..Default::default() }).is_empty());
        // The queue does not order MTE2 before the scalar unit.
        assert_eq!(h.access(Pipe::S, &Touch { ub_reads: vec![q], ..Default::default() }), vec![(Pipe::Mte2, Pipe::S)]);
    }
}
