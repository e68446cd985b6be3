//! The MTP info pool (SAMPLER.md sections 6 and 9): the draft model's
//! processed distribution of every pending draft token, read back by the
//! next step's verification.
//!
//! Layout: `(max_num_seqs + 1) * nextn` rows. Slot `s` (one per running
//! request) owns rows `s * nextn .. (s + 1) * nextn`; row `s * nextn + i - 1`
//! holds the distribution that proposed draft `i`. The extra slot
//! `max_num_seqs` is a scratch slot that is never handed out (the reference
//! points requests without drafts at it).
//!
//! Each row has N f32 processed logprobs, plus N i32 vocabulary ids when
//! force top-k is on (N < V). With force top-k off (N = V) the column is the
//! vocabulary id itself, so no ids are stored.

use crate::request::DraftDist;

use super::EngineError;

/// q = 0 everywhere: one id with logprob -inf. Not an empty `DraftDist`,
/// which the sampler takes as one-hot at the draft token (q = 1, an n-gram
/// draft); a draft verified against this one is always rejected (SAMPLER.md
/// section 6: accept only if q > 0), as a placeholder is.
fn no_mass() -> DraftDist {
    DraftDist { ids: vec![0], logprobs: vec![f32::NEG_INFINITY] }
}

/// `n` zeroed values from `calloc` (pages untouched until written), or
/// `None` when the size overflows or the allocator refuses.
fn zeroed<T: bytemuck::Zeroable>(n: usize) -> Option<Vec<T>> {
    bytemuck::allocation::try_zeroed_slice_box(n).ok().map(Vec::from)
}

/// The MTP info pool.
#[derive(Clone, Debug)]
pub struct MtpInfoPool {
    max_num_seqs: usize,
    nextn: usize,
    n: usize,
    vocab: usize,
    /// `[rows, N]` processed logprobs.
    logprobs: Vec<f32>,
    /// `[rows, N]` vocabulary ids (only when N < V).
    ids: Vec<i32>,
    /// Whether a row was written since its slot was handed out.
    written: Vec<bool>,
    /// Free slots (a stack: the most recently freed slot is reused first).
    free: Vec<usize>,
    in_use: Vec<bool>,
}

/// Bytes of a pool: `(max_num_seqs + 1) * nextn * N * 4`, plus the same again
/// for the i32 ids when force top-k is on (`n < vocab`).
pub fn pool_bytes(max_num_seqs: usize, nextn: usize, n: usize, vocab: usize) -> u64 {
    let rows = (max_num_seqs as u64 + 1) * nextn as u64;
    let per = if n < vocab { 8 } else { 4 };
    rows * n as u64 * per
}

/// Bytes of a pool for draft trees (SAMPLER.md 11.10): one distribution per
/// internal node, `(max_num_seqs + 1) * internal_nodes` rows of N f32, plus
/// N i32 ids when force top-k is on (64 seqs, I = 63: N = 4096 about 134 MB,
/// N = V = 129280 about 2.1 GB). Fixed trees need no pool.
pub fn tree_pool_bytes(max_num_seqs: usize, internal_nodes: usize, n: usize, vocab: usize) -> u64 {
    pool_bytes(max_num_seqs, internal_nodes, n, vocab)
}

impl MtpInfoPool {
    /// A pool for draft trees of at most `internal_nodes` internal nodes
    /// (SAMPLER.md 11.10): slot `s` owns one row per internal node, row `i`
    /// holding the distribution of the tree's i-th internal node in node
    /// order (the order of `DraftTree::draft_dists`); [`Self::write`] and
    /// [`Self::read`] take that index `i`, [`Self::read_tree`] returns a
    /// tree's list. Errors as [`Self::new`].
    pub fn for_tree(
        max_num_seqs: usize,
        internal_nodes: usize,
        n: usize,
        vocab: usize,
    ) -> Result<MtpInfoPool, EngineError> {
        MtpInfoPool::new(max_num_seqs, internal_nodes, n, vocab)
    }

    /// The draft distributions of a tree with `internal` internal nodes
    /// stored in `slot` (rows `0..internal`), in node order: the
    /// `DraftTree::draft_dists` of its next verification.
    pub fn read_tree(&self, slot: usize, internal: usize) -> Vec<DraftDist> {
        (0..internal).map(|i| self.read(slot, i)).collect()
    }

    /// A pool for `max_num_seqs` running requests, `nextn` drafts each, width
    /// `n` (`n >= vocab` means force top-k off: N = V).
    ///
    /// Errors: zero `max_num_seqs` or `vocab`, or a pool too large to address.
    pub fn new(max_num_seqs: usize, nextn: usize, n: usize, vocab: usize) -> Result<MtpInfoPool, EngineError> {
        if max_num_seqs == 0 || vocab == 0 {
            return Err(EngineError::Config(format!(
                "MTP info pool needs max_num_seqs >= 1 and vocab >= 1 (got {max_num_seqs}, {vocab})"
            )));
        }
        let n = n.min(vocab);
        let too_large = || {
            EngineError::Config(format!(
                "MTP info pool too large: (max_num_seqs + 1) * nextn = ({max_num_seqs} + 1) * {nextn} rows of N = {n}"
            ))
        };
        let rows = max_num_seqs.checked_add(1).and_then(|s| s.checked_mul(nextn)).ok_or_else(too_large)?;
        let cells = rows.checked_mul(n).ok_or_else(too_large)?;
        // Zeroed by calloc: untouched pages cost nothing until a row is
        // written. A pool the allocator refuses is an error, not an abort.
        let logprobs = zeroed::<f32>(cells).ok_or_else(too_large)?;
        let ids = if n < vocab { zeroed::<i32>(cells).ok_or_else(too_large)? } else { Vec::new() };
        let mut free = Vec::new();
        free.try_reserve_exact(max_num_seqs).map_err(|_| too_large())?;
        free.extend((0..max_num_seqs).rev());
        Ok(MtpInfoPool {
            max_num_seqs,
            nextn,
            n,
            vocab,
            logprobs,
            ids,
            written: zeroed::<bool>(rows).ok_or_else(too_large)?,
            free,
            in_use: zeroed::<bool>(max_num_seqs).ok_or_else(too_large)?,
        })
    }

    /// Rows `(max_num_seqs + 1) * nextn`.
    pub fn rows(&self) -> usize {
        (self.max_num_seqs + 1) * self.nextn
    }
    /// Width N.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Draft tokens per slot.
    pub fn nextn(&self) -> usize {
        self.nextn
    }
    /// Whether vocabulary ids are stored (force top-k on).
    pub fn has_ids(&self) -> bool {
        self.n < self.vocab
    }
    /// Bytes the pool holds, by the formula of section 9 ([`pool_bytes`]).
    pub fn bytes(&self) -> u64 {
        pool_bytes(self.max_num_seqs, self.nextn, self.n, self.vocab)
    }
    /// The scratch slot (never handed out).
    pub fn scratch_slot(&self) -> usize {
        self.max_num_seqs
    }
    /// Slots in use.
    pub fn slots_in_use(&self) -> usize {
        self.in_use.iter().filter(|u| **u).count()
    }
    /// Hands out a free slot, or `None` when all `max_num_seqs` are in use.
    pub fn alloc(&mut self) -> Option<usize> {
        let s = self.free.pop()?;
        self.in_use[s] = true;
        for i in 0..self.nextn {
            self.written[s * self.nextn + i] = false;
        }
        Some(s)
    }
    /// Returns a slot (a finished request). Freeing a free slot is a no-op.
    pub fn release(&mut self, slot: usize) {
        if slot < self.max_num_seqs && self.in_use[slot] {
            self.in_use[slot] = false;
            self.free.push(slot);
        }
    }
    /// Pool row of draft `i` (0-based) of `slot`.
    pub fn row_index(&self, slot: usize, i: usize) -> usize {
        slot * self.nextn + i
    }

    /// Stores the processed top-N distribution (`ids`, `logprobs`, N columns
    /// each, any order) that proposed draft `i` (0-based) of `slot`.
    pub fn write(&mut self, slot: usize, i: usize, ids: &[i32], logprobs: &[f32]) -> Result<(), EngineError> {
        if slot > self.max_num_seqs || i >= self.nextn || ids.len() != self.n || logprobs.len() != self.n {
            return Err(EngineError::Config(format!(
                "pool write slot {slot} row {i} with {} ids / {} logprobs (pool: {} slots, nextn {}, N {})",
                ids.len(),
                logprobs.len(),
                self.max_num_seqs + 1,
                self.nextn,
                self.n
            )));
        }
        let row = self.row_index(slot, i);
        let (a, b) = (row * self.n, (row + 1) * self.n);
        if self.has_ids() {
            self.ids[a..b].copy_from_slice(ids);
            self.logprobs[a..b].copy_from_slice(logprobs);
        } else {
            // N = V: the column is the vocabulary id.
            let dst = &mut self.logprobs[a..b];
            dst.fill(f32::NEG_INFINITY);
            for (&t, &lp) in ids.iter().zip(logprobs) {
                if t >= 0 && (t as usize) < self.vocab {
                    dst[t as usize] = lp;
                }
            }
        }
        self.written[row] = true;
        Ok(())
    }

    /// The draft distribution `q` stored for draft `i` (0-based) of `slot`,
    /// as the sampler's [`DraftDist`]: only candidates with nonzero mass are
    /// listed (an id not listed has logprob -inf, the same distribution).
    /// A row never written (or out of range) gives q = 0 everywhere (one id
    /// with logprob -inf, never an empty `DraftDist`, which the sampler takes
    /// as one-hot at the draft): a draft verified with it is rejected.
    pub fn read(&self, slot: usize, i: usize) -> DraftDist {
        if slot > self.max_num_seqs || i >= self.nextn || !self.written[self.row_index(slot, i)] {
            return no_mass();
        }
        let row = self.row_index(slot, i);
        let (a, b) = (row * self.n, (row + 1) * self.n);
        let lps = &self.logprobs[a..b];
        let mut d = DraftDist::default();
        for (c, &lp) in lps.iter().enumerate() {
            if lp > f32::NEG_INFINITY {
                d.ids.push(if self.has_ids() { self.ids[a + c] } else { c as i32 });
                d.logprobs.push(lp);
            }
        }
        if d.ids.is_empty() {
            return no_mass();
        }
        d
    }

    /// Raw row (ids, logprobs) of draft `i` of `slot`; ids are `0..N` when
    /// force top-k is off.
    pub fn raw_row(&self, slot: usize, i: usize) -> (Vec<i32>, &[f32]) {
        let row = self.row_index(slot, i);
        let (a, b) = (row * self.n, (row + 1) * self.n);
        let ids = if self.has_ids() { self.ids[a..b].to_vec() } else { (0..self.n as i32).collect() };
        (ids, &self.logprobs[a..b])
    }
}

/// Host form of the reference's `remap_draft_topk` for one draft token: the
/// column of `draft` in the target row's top-N ids `target_ids`, or -1 when
/// the draft is not among them (and -1 forces a reject, section 6). The
/// kernels do the same remap on the device (`remap_draft`); this is for
/// engines and tests that want to see it.
pub fn remap_draft_column(draft: i32, target_ids: &[i32]) -> i32 {
    target_ids.iter().position(|&t| t == draft && draft >= 0).map_or(-1, |c| c as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula() {
        assert_eq!(pool_bytes(64, 5, 4096, 129280), 325 * 4096 * 8);
        assert_eq!(pool_bytes(64, 5, 4096, 129280), 10_649_600);
        assert_eq!(pool_bytes(64, 5, 129280, 129280), 168_064_000);
    }

    #[test]
    fn tree_formula_and_rows() {
        // SAMPLER.md 11.10: 64 seqs, I = 63.
        assert_eq!(tree_pool_bytes(64, 63, 4096, 129280), 65 * 63 * 4096 * 8);
        assert_eq!(tree_pool_bytes(64, 63, 4096, 129280) / 1_000_000, 134);
        assert_eq!(tree_pool_bytes(64, 63, 129280, 129280), 65 * 63 * 129280 * 4);
        assert_eq!(tree_pool_bytes(64, 63, 129280, 129280) / 100_000_000, 21);
        let mut p = MtpInfoPool::for_tree(2, 3, 4, 8).unwrap();
        assert_eq!(p.bytes(), tree_pool_bytes(2, 3, 4, 8));
        let s = p.alloc().unwrap();
        p.write(s, 0, &[5, 1, 2, 3], &[-0.1, -2.5, f32::NEG_INFINITY, f32::NEG_INFINITY]).unwrap();
        p.write(s, 2, &[7, 0, 1, 2], &[0.0, f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY]).unwrap();
        let t = p.read_tree(s, 3);
        assert_eq!(t[0], DraftDist { ids: vec![5, 1], logprobs: vec![-0.1, -2.5] });
        assert_eq!(t[1], no_mass(), "a node row never written: q = 0");
        assert_eq!(t[2], DraftDist { ids: vec![7], logprobs: vec![0.0] });
        assert!(p.write(s, 3, &[0; 4], &[0.0; 4]).is_err(), "only `internal_nodes` rows per slot");
    }
}
