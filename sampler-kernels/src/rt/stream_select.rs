//! CPU model of the one-pass exact top-N selection (issue 22 item 2 and 4,
//! perf-design sections 3.1-3.4): the algorithm a fused GPU kernel runs, in
//! the form of a future `top_n_stream` composite op's CPU lowering.
//!
//! Per row (`V` logits, widened to f32 and grammar-masked as the existing
//! ops do, `N`):
//! 1. **P1**: a threshold `T` on the 32-bit order bits ([`order_bits`]) from a
//!    fixed sample (`sectors` x `sector_len` logits at fixed positions):
//!    the sample's `max(ceil(target * N * S / V), min_rank)`-th largest, so
//!    that about `target * N` logits pass it.
//! 2. **P2**: the row split into `C` slices (cluster CTAs), each streamed in
//!    segments in an arbitrary order ([`Visit`]). A logit survives when its
//!    unique key `(order_bits << 32) | !id` ([`order_key`]) is above the
//!    buffer's 64-bit running threshold (`T << 32` less one at first). When a
//!    buffer reaches its cap, its `N` largest keys are kept and the running
//!    threshold rises to the `N`-th ([`CapScope`]: one buffer per CTA, or one
//!    per row shared by its CTAs). The same pass takes the row status, the
//!    bad / -inf counts and the NaN-propagating max (SAMPLER.md section 3.2).
//! 3. **P3**: the slices' survivors merged (DSMEM on the GPU); fewer than `N`
//!    (a sample that misjudged the row) runs **F1**: the pass again from
//!    `T = -inf`, with the running threshold.
//! 4. **P4**: the exact `N`-th key of the merged survivors by MSB-first 8-bit
//!    radix passes ([`nth_largest`]); the kept set is the keys at or above it.
//!
//! Exactness (docs/ONE_PASS.md): a key dropped by a running threshold or a
//! compaction has `N` larger keys of the same row seen before it, so it is not
//! in the top `N`; every survivor has order bits `>= T`, above every key the
//! sample threshold dropped, so when at least `N` survive, those dropped keys
//! are below `N` survivors too. Hence the top `N` of the survivors is the
//! top `N` of the row, for any sample, cap, split and visiting order; it is
//! bitwise [`super::host_algo::top_keys`].
//!
//! The force-top-k-off bound of perf-design 3.4 E is [`total_bound`].

extern crate alloc;
use alloc::vec::Vec;

use super::host_algo::Counts;
use super::math::{
    exp_f32, frac_floor, key_id, mix64, order_bits, order_is_bad, order_key, to_fixed, GAMMA, NEG_INF_ORDER,
};

/// One row of logits as stored: f32, bf16 or f16, read as f32 (exact widening).
#[derive(Clone, Copy, Debug)]
pub enum RowLogits<'a> {
    F32(&'a [f32]),
    Bf16(&'a [half::bf16]),
    F16(&'a [half::f16]),
}

impl RowLogits<'_> {
    /// Number of logits (`V`).
    pub fn len(&self) -> usize {
        match self {
            RowLogits::F32(s) => s.len(),
            RowLogits::Bf16(s) => s.len(),
            RowLogits::F16(s) => s.len(),
        }
    }
    /// Whether the row is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    #[inline(always)]
    fn get(&self, i: usize) -> f32 {
        match self {
            RowLogits::F32(s) => s[i],
            RowLogits::Bf16(s) => s[i].to_f32(),
            RowLogits::F16(s) => s[i].to_f32(),
        }
    }
}

/// A row as the selection reads it: logits and an optional grammar mask
/// (`ceil(V / 32)` u32 words, bit `t % 32` of word `t / 32` = token `t`
/// allowed; a disallowed logit reads as -inf, SAMPLER.md section 3.1).
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    pub logits: RowLogits<'a>,
    pub mask: Option<&'a [u32]>,
}

impl<'a> Row<'a> {
    /// An unmasked f32 row.
    pub fn f32(x: &'a [f32]) -> Self {
        Row { logits: RowLogits::F32(x), mask: None }
    }
    /// Logit `i` widened and masked.
    #[inline(always)]
    pub fn at(&self, i: usize) -> f32 {
        match self.mask {
            Some(m) if (m[i / 32] >> (i % 32)) & 1 == 0 => f32::NEG_INFINITY,
            _ => self.logits.get(i),
        }
    }
    /// The widened, masked row (what `mask_check` writes to `masked`).
    pub fn widened(&self) -> Vec<f32> {
        (0..self.logits.len()).map(|i| self.at(i)).collect()
    }
}

/// The order in which each CTA visits its slice: segments of
/// [`Config::segment`] logits, and the logits inside a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// Segments and logits in ascending id order.
    Forward,
    /// Segments and logits in descending id order.
    Backward,
    /// A pseudo-random permutation of the segments (per CTA, from `seed`),
    /// and with `within` of the logits inside each segment too (the order
    /// in which warps' atomics append survivors).
    Shuffled { seed: u64, within: bool },
}

/// How P1 sets the first filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    /// Modes M and L: order bits from the fixed sample ([`Config::sectors`] x [`Config::sector_len`]).
    Sampled,
    /// Mode S (the slice resident in shared memory): the row's max `m`
    /// (a cluster max through DSMEM), then a histogram of
    /// `bin(x) = min(floor((m - x) * per_unit), bins - 1)` over the row
    /// (merged over the cluster); survivors are the logits whose bin is at
    /// most the bin of the N-th largest. `bin` is non-increasing in `x`
    /// (IEEE subtraction and multiplication round monotonically), so at
    /// least N survive and every survivor is above every dropped logit.
    /// A row whose max is NaN, +inf or -inf is not filtered (the running
    /// threshold still bounds the buffer).
    Histogram { bins: u32, per_unit: u32 },
}

/// Where the survivor cap applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapScope {
    /// One buffer of `cap` keys per CTA, each with its own running threshold.
    PerCta,
    /// One buffer of `cap` keys per row, shared by its CTAs (distributed
    /// shared memory); each CTA reads the shared running threshold at the
    /// start of each segment (a stale, lower threshold only keeps more).
    /// The CTAs' segments interleave in a pseudo-random schedule.
    PerRow,
}

/// Parameters of the model (perf-design section 3.2 P1-P4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// CTAs per row (cluster size `C`), 1..=16.
    pub ctas: u32,
    /// Sampled sectors per row (P1), at least 1.
    pub sectors: u32,
    /// Logits per sampled sector (8 f32 = one 32-byte sector), at least 1.
    pub sector_len: u32,
    /// Survivors aimed at, as a multiple of `N` (2: rank `ceil(2 N S / V)`), at least 1.
    pub target: u32,
    /// Smallest rank taken in the sample (a rank of 1-4 at small N misjudges
    /// the row often: 22 of 300 benchmark rows fall back at N = 50 with no floor).
    pub min_rank: u32,
    /// Buffer cap `max(ceil(N * cap_num / cap_den), cap_min, N + 1)` keys.
    pub cap_num: u32,
    /// Denominator of the cap factor, at least 1.
    pub cap_den: u32,
    /// Smallest cap (room for a small N's rank floor without compactions).
    pub cap_min: u32,
    /// Per CTA or per row.
    pub scope: CapScope,
    /// Logits per visited segment (512 threads x 8 on the GPU), at least 1.
    pub segment: u32,
    /// Visiting order.
    pub visit: Visit,
    /// Sampled threshold or the resident histogram.
    pub threshold: Threshold,
}

impl Default for Config {
    /// The design point: 1 CTA, 512 x 8 sample, target 2N (rank at least
    /// 16), cap max(2.5N, 1024) per CTA, segments of 4096 in order.
    fn default() -> Self {
        Config {
            ctas: 1,
            sectors: 512,
            sector_len: 8,
            target: 2,
            min_rank: 16,
            cap_num: 5,
            cap_den: 2,
            cap_min: 1024,
            scope: CapScope::PerCta,
            segment: 4096,
            visit: Visit::Forward,
            threshold: Threshold::Sampled,
        }
    }
}

/// A [`Config`] or row the model cannot run, naming the field and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectError {
    /// `ctas` not in 1..=16.
    Ctas(u32),
    /// A count that must be at least 1 (`sectors`, `sector_len`, `target`, `cap_den`, `segment`) is 0.
    Zero(&'static str),
    /// Histogram `per_unit` not in 1..=2^24.
    PerUnit(u32),
    /// `cap_num / cap_den` below 1.
    Cap { num: u32, den: u32 },
    /// The mask has `words` words, the row needs `need`.
    MaskLen { words: usize, need: usize },
    /// More logits than u32 ids.
    Vocab(usize),
}

impl core::fmt::Display for SelectError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SelectError::Ctas(c) => write!(f, "ctas = {c}: must be in 1..=16"),
            SelectError::Zero(name) => write!(f, "{name} = 0: must be at least 1"),
            SelectError::PerUnit(p) => write!(f, "per_unit = {p}: must be in 1..=2^24"),
            SelectError::Cap { num, den } => write!(f, "cap_num / cap_den = {num}/{den}: must be at least 1"),
            SelectError::MaskLen { words, need } => write!(f, "mask has {words} words, the row needs {need}"),
            SelectError::Vocab(v) => write!(f, "row length {v}: ids must fit in u32"),
        }
    }
}

impl Config {
    fn check(&self) -> Result<(), SelectError> {
        if !(1..=16).contains(&self.ctas) {
            return Err(SelectError::Ctas(self.ctas));
        }
        for (name, v) in [
            ("sectors", self.sectors),
            ("sector_len", self.sector_len),
            ("target", self.target),
            ("cap_den", self.cap_den),
            ("segment", self.segment),
        ] {
            if v == 0 {
                return Err(SelectError::Zero(name));
            }
        }
        if let Threshold::Histogram { bins, per_unit } = self.threshold {
            if bins == 0 {
                return Err(SelectError::Zero("bins"));
            }
            if per_unit == 0 || per_unit > 1 << 24 {
                return Err(SelectError::PerUnit(per_unit));
            }
        }
        if self.cap_num < self.cap_den {
            return Err(SelectError::Cap { num: self.cap_num, den: self.cap_den });
        }
        Ok(())
    }

    /// The buffer cap for `n` kept keys (always more than `n`, so a compaction frees room).
    pub fn cap(&self, n: usize) -> usize {
        let c = (n as u64 * self.cap_num as u64).div_ceil(self.cap_den as u64) as usize;
        c.max(self.cap_min as usize).max(n + 1)
    }
}

/// What one row's selection did (the instrumentation of issue 22 item 4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// P1's threshold on order bits; `None` = -inf (every logit passes:
    /// `target * N` reaches the sample) or the histogram mode.
    pub threshold: Option<u32>,
    /// The histogram mode's boundary bin (`None`: sampled, or a row left unfiltered).
    pub hist_bin: Option<u32>,
    /// Logits sampled, and the rank (from the top) of the threshold in the sample.
    pub sample: u32,
    pub rank: u32,
    /// Logits with order bits `>= T` (what a pass without cap would keep).
    pub above_t: u64,
    /// Keys appended to buffers in the first pass (fewer than `above_t` once a running threshold rose).
    pub appended: u64,
    /// Keys in the merged buffers after the first pass (P3's input).
    pub merged: u32,
    /// Compactions (buffer full: cut to N, threshold raised), all CTAs, both passes.
    pub compactions: u32,
    /// Whether F1 ran (fewer than N survived the first pass).
    pub fallback: bool,
    /// The largest fill of any buffer.
    pub peak: u32,
    /// Radix passes of P4.
    pub radix_passes: u32,
}

/// One row's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// The `min(N, V)` largest order keys, in descending key order
    /// (SAMPLER.md section 3.6): bitwise [`super::host_algo::top_keys`] of the widened, masked row.
    pub keys: Vec<u64>,
    /// Bad (NaN or +inf) and -inf counts of the masked row, from the first pass.
    pub counts: Counts,
    /// Section 3.2: 1 a bad logit, else 2 all -inf, else 0 (from `counts`).
    pub status: i32,
    /// NaN-propagating max of the masked row (NaN if any logit is NaN); the
    /// sign of a zero maximum is unspecified (the tail takes `m` from the first key).
    pub max: f32,
    pub stats: Stats,
}

impl Selection {
    /// The kept keys in ascending id order (as `top_n_set` gives them).
    pub fn keys_by_id(&self) -> Vec<u64> {
        let mut k = self.keys.clone();
        k.sort_unstable_by_key(|&k| key_id(k));
        k
    }
}

/// `max.NaN.f32`: NaN if either operand is NaN, else the larger.
#[inline(always)]
pub fn max_nan(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if b > a {
        b
    } else {
        a
    }
}

/// Section 3.2's status from a NaN-propagating max (perf-design 3.1):
/// NaN or +inf -> 1, -inf (every logit -inf) -> 2, else 0.
pub fn status_of_max(m: f32) -> i32 {
    if m.is_nan() || m == f32::INFINITY {
        1
    } else if m == f32::NEG_INFINITY {
        2
    } else {
        0
    }
}

/// Positions of P1's sample: `sectors` runs of `sector_len` logits, each
/// starting at `floor(s V / sectors)` rounded down to a multiple of
/// `sector_len` (disjoint, in the row); the whole row when it is shorter
/// than the sample.
pub fn sample_positions(v: usize, sectors: u32, sector_len: u32) -> Vec<usize> {
    let (sec, len) = (sectors as usize, sector_len as usize);
    if v <= sec * len {
        return (0..v).collect();
    }
    let mut out = Vec::with_capacity(sec * len);
    for s in 0..sec {
        let start = ((s as u64 * v as u64 / sec as u64) as usize) / len * len;
        out.extend(start..start + len);
    }
    out
}

/// P1: the threshold on order bits (`None` = -inf), the sample size and the rank.
fn sampled_threshold(row: &Row, n: usize, cfg: &Config) -> (Option<u32>, u32, u32) {
    let v = row.logits.len();
    let pos = sample_positions(v, cfg.sectors, cfg.sector_len);
    let s = pos.len();
    let rank = (cfg.target as u128 * n as u128 * s as u128).div_ceil(v as u128).max(cfg.min_rank as u128);
    if rank > s as u128 {
        return (None, s as u32, rank.min(u32::MAX as u128) as u32);
    }
    let mut ords: Vec<u32> = pos.iter().map(|&i| order_bits(row.at(i))).collect();
    let r = rank as usize;
    let (_, &mut t, _) = ords.select_nth_unstable_by(r - 1, |a, b| b.cmp(a));
    (if t == 0 { None } else { Some(t) }, s as u32, r as u32)
}

/// P1's first filter.
#[derive(Clone, Copy, Debug)]
enum Filter {
    All,
    Order(u32),
    Bin { m: f32, per_unit: f32, last: u32, b: u32 },
}

impl Filter {
    #[inline(always)]
    fn admits(&self, x: f32, o: u32) -> bool {
        match *self {
            Filter::All => true,
            Filter::Order(t) => o >= t,
            Filter::Bin { m, per_unit, last, b } => bin_of(x, m, per_unit, last) <= b,
        }
    }
    /// The 64-bit running threshold it starts (keys with order bits `>= T` pass).
    fn start(&self) -> Option<u64> {
        match *self {
            Filter::Order(t) => Some(((t as u64) << 32) - 1),
            _ => None,
        }
    }
}

/// [`Threshold::Histogram`]'s bin of `x` below the max `m` (finite).
#[inline(always)]
fn bin_of(x: f32, m: f32, per_unit: f32, last: u32) -> u32 {
    let y = ((m - x) * per_unit).floor();
    if y >= last as f32 {
        last
    } else if y > 0.0 {
        y as u32
    } else {
        0
    }
}

/// Mode S's filter: the bin of the `n`-th largest logit.
fn hist_threshold(row: &Row, n: usize, bins: u32, per_unit: u32) -> (Filter, Option<u32>) {
    let v = row.logits.len();
    let m = (0..v).fold(f32::NEG_INFINITY, |m, i| max_nan(m, row.at(i)));
    if m.is_nan() || m.is_infinite() {
        return (Filter::All, None);
    }
    let (pu, last) = (per_unit as f32, bins - 1);
    let mut hist = alloc::vec![0u32; bins as usize];
    (0..v).for_each(|i| hist[bin_of(row.at(i), m, pu, last) as usize] += 1);
    let (mut acc, mut b) = (0usize, 0u32);
    while acc + (hist[b as usize] as usize) < n {
        acc += hist[b as usize] as usize;
        b += 1;
    }
    (Filter::Bin { m, per_unit: pu, last, b }, Some(b))
}

/// A running threshold: a key passes when it is above it (`None`: every key).
#[inline(always)]
fn passes(key: u64, t64: Option<u64>) -> bool {
    match t64 {
        None => true,
        Some(t) => key > t,
    }
}

/// Keeps the `n` largest of the unique keys in `buf` (`n < buf.len()`),
/// returning the `n`-th largest (the new running threshold).
fn compact(buf: &mut Vec<u64>, n: usize) -> u64 {
    let (_, &mut nth, _) = buf.select_nth_unstable_by(n - 1, |a, b| b.cmp(a));
    buf.truncate(n);
    nth
}

/// The logits of each CTA's slice as visited: `(cta, segment ids)` in
/// visiting order. Slice `c` is `[c V / C, (c + 1) V / C)`.
fn segments(v: usize, cfg: &Config) -> Vec<Vec<Vec<u32>>> {
    let c = cfg.ctas as usize;
    let seg = cfg.segment as usize;
    (0..c)
        .map(|k| {
            let (lo, hi) = (k * v / c, (k + 1) * v / c);
            let mut segs: Vec<Vec<u32>> =
                (lo..hi).step_by(seg).map(|s| (s as u32..(s + seg).min(hi) as u32).collect()).collect();
            match cfg.visit {
                Visit::Forward => {}
                Visit::Backward => {
                    segs.reverse();
                    segs.iter_mut().for_each(|s| s.reverse());
                }
                Visit::Shuffled { seed, within } => {
                    let mut st = mix64(seed ^ (k as u64 + 1).wrapping_mul(GAMMA));
                    shuffle(&mut segs, &mut st);
                    if within {
                        segs.iter_mut().for_each(|s| shuffle(s, &mut st));
                    }
                }
            }
            segs
        })
        .collect()
}

/// Fisher-Yates with SplitMix64.
fn shuffle<T>(x: &mut [T], st: &mut u64) {
    for i in (1..x.len()).rev() {
        *st = st.wrapping_add(GAMMA);
        let j = (mix64(*st) % (i as u64 + 1)) as usize;
        x.swap(i, j);
    }
}

/// The status part of a pass: counts and max.
struct StatusAcc {
    counts: Counts,
    max: f32,
}

impl StatusAcc {
    #[inline(always)]
    fn add(&mut self, x: f32, o: u32) {
        self.max = max_nan(self.max, x);
        self.counts.bad += order_is_bad(o) as u32;
        self.counts.neg_inf += (o == NEG_INF_ORDER) as u32;
    }
}

/// P2: one pass over the row from P1's filter; returns the merged
/// survivors (P3). With `acc`, also takes the status.
fn pass(
    row: &Row,
    n: usize,
    cfg: &Config,
    filter: Filter,
    st: &mut Stats,
    mut acc: Option<&mut StatusAcc>,
) -> Vec<u64> {
    let v = row.logits.len();
    let cap = cfg.cap(n);
    let segs = segments(v, cfg);
    let first = acc.is_some();
    let t0 = filter.start();
    let mut visit = |i: u32, t64: Option<u64>, buf: &mut Vec<u64>, st: &mut Stats| -> bool {
        let x = row.at(i as usize);
        let o = order_bits(x);
        if let Some(a) = acc.as_deref_mut() {
            a.add(x, o);
        }
        let admit = filter.admits(x, o);
        if first && admit {
            st.above_t += 1;
        }
        let key = order_key(x, i);
        if admit && passes(key, t64) {
            buf.push(key);
            if first {
                st.appended += 1;
            }
            return true;
        }
        false
    };
    match cfg.scope {
        CapScope::PerCta => {
            let mut merged = Vec::new();
            for cta in &segs {
                let (mut buf, mut t64) = (Vec::with_capacity(cap), t0);
                for seg in cta {
                    for &i in seg {
                        if visit(i, t64, &mut buf, st) && buf.len() == cap {
                            st.peak = st.peak.max(cap as u32);
                            t64 = Some(compact(&mut buf, n));
                            st.compactions += 1;
                        }
                    }
                }
                st.peak = st.peak.max(buf.len() as u32);
                merged.extend_from_slice(&buf); // DSMEM gather to the row leader
            }
            merged
        }
        CapScope::PerRow => {
            // The CTAs' segments interleave: a seeded pick among those with segments left.
            let seed = match cfg.visit {
                Visit::Shuffled { seed, .. } => seed,
                _ => 0,
            };
            let mut s = mix64(seed ^ 0x5e1e_c7ed);
            let mut next = alloc::vec![0usize; segs.len()];
            let (mut buf, mut shared) = (Vec::with_capacity(cap), t0);
            loop {
                let live: Vec<usize> = (0..segs.len()).filter(|&c| next[c] < segs[c].len()).collect();
                if live.is_empty() {
                    break;
                }
                s = s.wrapping_add(GAMMA);
                let c = live[(mix64(s) % live.len() as u64) as usize];
                let mut local = shared; // read once per segment: may go stale
                for &i in &segs[c][next[c]] {
                    if visit(i, local, &mut buf, st) && buf.len() == cap {
                        st.peak = st.peak.max(cap as u32);
                        shared = Some(compact(&mut buf, n));
                        local = shared;
                        st.compactions += 1;
                    }
                }
                next[c] += 1;
            }
            st.peak = st.peak.max(buf.len() as u32);
            buf
        }
    }
}

/// P4: the `n`-th largest of the unique `keys` (`1 <= n <= keys.len()`) by
/// MSB-first 8-bit radix passes (a 256-bin histogram of the keys that
/// match the digits chosen so far); stops early when the chosen bin holds
/// one key. Returns the key and the passes made.
pub fn nth_largest(keys: &[u64], n: usize) -> (u64, u32) {
    assert!(n >= 1 && n <= keys.len(), "nth_largest: n = {n} of {} keys", keys.len());
    let (mut prefix, mut mask, mut need) = (0u64, 0u64, n as u32);
    let mut passes = 0;
    for d in (0..8u32).rev() {
        let shift = d * 8;
        let mut hist = [0u32; 256];
        for &k in keys.iter().filter(|&&k| k & mask == prefix) {
            hist[((k >> shift) & 255) as usize] += 1;
        }
        passes += 1;
        let mut b = 255usize;
        while need > hist[b] {
            need -= hist[b];
            b -= 1;
        }
        prefix |= (b as u64) << shift;
        mask |= 255u64 << shift;
        if hist[b] == 1 {
            let k = keys.iter().copied().find(|&k| k & mask == prefix).expect("the bin's key");
            return (k, passes);
        }
    }
    (prefix, passes)
}

/// The one-pass selection of one row: the `min(n, V)` largest keys of the
/// widened, masked row, its status, counts and max, and what it took.
///
/// Errors: a bad [`Config`], a mask shorter than `ceil(V / 32)` words, a row
/// longer than u32 ids.
pub fn stream_top_n(row: Row, n: usize, cfg: &Config) -> Result<Selection, SelectError> {
    cfg.check()?;
    let v = row.logits.len();
    if v > u32::MAX as usize {
        return Err(SelectError::Vocab(v));
    }
    if let Some(m) = row.mask {
        if m.len() < v.div_ceil(32) {
            return Err(SelectError::MaskLen { words: m.len(), need: v.div_ceil(32) });
        }
    }
    let n = n.min(v);
    let mut st = Stats::default();
    let mut acc = StatusAcc { counts: Counts::default(), max: f32::NEG_INFINITY };
    let mut merged = if n == 0 {
        // Nothing to keep: the pass only takes the status.
        (0..v).for_each(|i| {
            let x = row.at(i);
            acc.add(x, order_bits(x))
        });
        Vec::new()
    } else {
        let filter = match cfg.threshold {
            Threshold::Sampled => {
                let (t, s, r) = sampled_threshold(&row, n, cfg);
                (st.threshold, st.sample, st.rank) = (t, s, r);
                t.map_or(Filter::All, Filter::Order)
            }
            Threshold::Histogram { bins, per_unit } => {
                let (f, b) = hist_threshold(&row, n, bins, per_unit);
                st.hist_bin = b;
                f
            }
        };
        let m = pass(&row, n, cfg, filter, &mut st, Some(&mut acc));
        st.merged = m.len() as u32;
        if m.len() < n {
            // F1: only reachable with a sampled T > -inf (from -inf every key
            // is seen and at most compacted to n; the histogram keeps >= n).
            st.fallback = true;
            pass(&row, n, cfg, Filter::All, &mut st, None)
        } else {
            m
        }
    };
    if n > 0 {
        let (nth, passes) = nth_largest(&merged, n);
        st.radix_passes = passes;
        merged.retain(|&k| k >= nth);
    }
    merged.sort_unstable_by(|a, b| b.cmp(a));
    let status = if acc.counts.bad > 0 {
        1
    } else if acc.counts.neg_inf as usize == v {
        2
    } else {
        0
    };
    Ok(Selection { keys: merged, counts: acc.counts, status, max: acc.max, stats: st })
}

/// Perf-design 3.4 E: whether `process_prefix_draw`'s outputs (logprobs,
/// overflow flag, token) on a row's first `w` candidates are the same for
/// every row total `>= S_w` (the prefix's own mass), so that the full-row
/// `row_mass` pass can be skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TotalBound {
    /// The bound decides: no output depends on the total.
    pub decided: bool,
    /// `S_w`: the fixed-point mass of the `w` candidates (a lower bound of the total).
    pub s_w: u64,
    /// The exclusive prefix mass before the last candidate min-p and top-k keep (`excl_prefix(k - 1)`).
    pub excl_last: u64,
    /// `frac_floor(S_w, top_p)`: top-p's threshold at the smallest possible total.
    pub thr_low: u64,
}

/// [`TotalBound`] of one row: `cand` its first `w` candidates (`[w]` f32 in
/// the order of section 3.6, `1 <= w`), `v` its vocabulary size, and the
/// row's sampling parameters as `process_prefix_draw` reads them
/// (`temperature`, `top_p`, `top_k` -1 off, `min_p`, `order` 0 top-p first
/// / 1 top-k first).
///
/// The rule (`order` 0): every candidate min-p and top-k keep passes top-p
/// at the smallest total (`excl_prefix(last) <= frac_floor(S_w, top_p)`;
/// `frac_floor` is monotone in the total, and total `>= S_w`), and the
/// prefix mask ends inside `w` (top-k `<= w`, or min-p drops the last
/// column), so the overflow flag is 0 whatever the total. With `order` 1
/// top-p's base is the prefix's own mass when the prefix ends inside `w`.
/// `w >= v` (the whole row): the total is `S_w`, always decided.
pub fn total_bound(
    cand: &[f32],
    v: u32,
    temperature: f32,
    top_p: f32,
    top_k: i32,
    min_p: f32,
    order: u32,
) -> TotalBound {
    let w = cand.len();
    let m = cand[0];
    let x: Vec<f32> = cand.iter().map(|&c| (c - m) / temperature).collect();
    let wt: Vec<u64> = x.iter().map(|&x| to_fixed(exp_f32(x))).collect();
    let s_w: u64 = wt.iter().sum();
    // prefix_mask of the kernels: min-p and top-k.
    let minp_keeps = |x: f32| exp_f32(x) >= min_p && (x == 0.0 || min_p < 1.0);
    let pre = |j: usize| minp_keeps(x[j]) && (top_k < 0 || j < top_k as usize);
    let (mut excl, mut excl_last) = (0u64, 0u64);
    for (j, &wj) in wt.iter().enumerate() {
        if pre(j) {
            excl_last = excl;
        }
        excl += wj;
    }
    let thr_low = frac_floor(s_w, top_p);
    let k_inside = (top_k > 0 && top_k as usize <= w) || !minp_keeps(x[w - 1]);
    let decided = w as u64 >= v as u64 || (k_inside && if order != 0 { true } else { excl_last <= thr_low });
    TotalBound { decided, s_w, excl_last, thr_low }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_largest_equals_a_sort() {
        let mut s = 3u64;
        for len in [1usize, 2, 5, 300, 5000] {
            let mut keys: Vec<u64> = (0..len as u32)
                .map(|i| {
                    s = mix64(s.wrapping_add(GAMMA));
                    // Few distinct order bits: ties resolved by the id half.
                    order_key(((s >> 61) as f32) - 2.0, i)
                })
                .collect();
            keys.sort_unstable();
            keys.dedup();
            for n in [1, 2, len / 3 + 1, len].into_iter().filter(|&n| n <= len) {
                let mut d = keys.clone();
                d.sort_unstable_by(|a, b| b.cmp(a));
                assert_eq!(nth_largest(&keys, n).0, d[n - 1], "len {len}, n {n}");
            }
        }
    }

    #[test]
    fn sample_positions_are_disjoint_and_in_the_row() {
        for v in [1usize, 100, 4096, 4097, 129_280, 128_256, 151_936, 4103] {
            let p = sample_positions(v, 512, 8);
            assert!(p.windows(2).all(|w| w[0] < w[1]), "v {v}");
            assert!(p.iter().all(|&i| i < v), "v {v}");
            assert_eq!(p.len(), v.min(4096), "v {v}");
        }
    }

    #[test]
    fn bad_configs_are_typed_errors() {
        let x = [1.0f32; 10];
        let e = |c: Config| stream_top_n(Row::f32(&x), 3, &c).unwrap_err();
        assert_eq!(e(Config { ctas: 0, ..Default::default() }), SelectError::Ctas(0));
        assert_eq!(e(Config { ctas: 17, ..Default::default() }), SelectError::Ctas(17));
        assert_eq!(e(Config { segment: 0, ..Default::default() }), SelectError::Zero("segment"));
        assert_eq!(e(Config { cap_num: 1, cap_den: 2, ..Default::default() }), SelectError::Cap { num: 1, den: 2 });
        let hist = |bins, per_unit| Config { threshold: Threshold::Histogram { bins, per_unit }, ..Default::default() };
        assert_eq!(e(hist(0, 64)), SelectError::Zero("bins"));
        assert_eq!(e(hist(1024, 0)), SelectError::PerUnit(0));
        assert_eq!(e(hist(1024, (1 << 24) + 1)), SelectError::PerUnit((1 << 24) + 1));
        assert!(stream_top_n(Row::f32(&x), 3, &hist(1, 1)).is_ok());
        let m = [0u32; 0];
        let r = Row { logits: RowLogits::F32(&x), mask: Some(&m) };
        assert_eq!(stream_top_n(r, 3, &Config::default()).unwrap_err(), SelectError::MaskLen { words: 0, need: 1 });
    }
}
