//! How the vocabulary is split over the ranks ([`ShardLayout`], [`Shard`])
//! and the cuts of masks and logits rows that follow.

use crate::error::ConfigError;

/// How the vocabulary is split across the ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardLayout {
    /// `tp` equal contiguous shards of `ceil(V / tp)` columns: rank r holds
    /// ids `[r * S, (r + 1) * S)`; columns at ids >= V (the padded tail of
    /// the last shards, as a padded LM head produces) are never read or sampled.
    Equal {
        /// Ranks in the group.
        tp: usize,
    },
    /// Explicit `[lo, hi)` column ranges, one per rank (any rank order).
    /// Sorted by `lo` they must tile `[0, X)` with `X >= V`, without gap or
    /// overlap; ids >= V are padding as above.
    Ranges(Vec<(u32, u32)>),
}

/// One rank's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// First global id.
    pub lo: u32,
    /// Columns in the rank's logits rows (padding included): the row stride.
    pub width: u32,
    /// Columns below V (`width` minus padding; may be 0).
    pub real: u32,
}

impl ShardLayout {
    /// The shards for vocabulary `vocab`, in rank order.
    ///
    /// Errors: [`ConfigError::Field`] `layout` for `tp == 0`, an empty range
    /// list, `hi < lo`, or ranges that do not tile `[0, X)` with `X >= V`.
    pub fn shards(&self, vocab: u32) -> Result<Vec<Shard>, ConfigError> {
        let bad = |msg: String| ConfigError::Field { field: "layout", msg };
        let ranges: Vec<(u32, u32)> = match self {
            ShardLayout::Equal { tp: 0 } => return Err(bad("tp = 0 ranks".into())),
            ShardLayout::Equal { tp } => {
                let s = vocab.div_ceil(*tp as u32).max(1);
                (0..*tp as u32).map(|r| (r * s, (r + 1) * s)).collect()
            }
            ShardLayout::Ranges(r) if r.is_empty() => return Err(bad("no ranges".into())),
            ShardLayout::Ranges(r) => r.clone(),
        };
        if let Some((i, &(lo, hi))) = ranges.iter().enumerate().find(|(_, &(lo, hi))| hi < lo) {
            return Err(bad(format!("range {i} = [{lo}, {hi}) has hi < lo")));
        }
        let mut sorted: Vec<(u32, u32)> = ranges.clone();
        sorted.sort();
        let mut at = 0u32;
        for &(lo, hi) in &sorted {
            if lo != at {
                return Err(bad(format!(
                    "ranges {ranges:?} leave a gap or overlap at id {at} (next range starts at {lo})"
                )));
            }
            at = hi;
        }
        if at < vocab {
            return Err(bad(format!("ranges {ranges:?} cover ids 0..{at}, fewer than V = {vocab}")));
        }
        Ok(ranges
            .iter()
            .map(|&(lo, hi)| Shard { lo, width: hi - lo, real: hi.min(vocab).saturating_sub(lo) })
            .collect())
    }
}

/// Rank `shard`'s mask cut from a global mask row (`ceil(V / 32)` words):
/// `ceil(width / 32)` words, bit `j` = global id `lo + j` (0 past the global mask).
pub fn shard_mask(global: &[u32], shard: Shard) -> Vec<u32> {
    bit_slice(global, shard.lo, shard.width)
}

/// Bits `lo .. lo + len` of `words` as `ceil(len / 32)` words (0 past the end).
pub(super) fn bit_slice(words: &[u32], lo: u32, len: u32) -> Vec<u32> {
    let (w0, s) = ((lo / 32) as usize, lo % 32);
    let at = |i: usize| words.get(i).copied().unwrap_or(0);
    let mut out: Vec<u32> = (0..len.div_ceil(32) as usize)
        .map(|i| if s == 0 { at(w0 + i) } else { (at(w0 + i) >> s) | (at(w0 + i + 1) << (32 - s)) })
        .collect();
    if let (Some(last), true) = (out.last_mut(), !len.is_multiple_of(32)) {
        *last &= (1u32 << (len % 32)) - 1;
    }
    out
}

/// Rank `rank`'s `[R, width]` shard of global `[R, V]` logits, padding columns
/// filled with `pad` (tests put NaN there: it must never be read).
pub fn shard_of(logits: &[f32], vocab: u32, shard: Shard, pad: f32) -> Vec<f32> {
    let v = vocab as usize;
    let rows = logits.len().checked_div(v).unwrap_or(0);
    let mut out = Vec::with_capacity(rows * shard.width as usize);
    for i in 0..rows {
        if shard.real > 0 {
            out.extend_from_slice(&logits[i * v + shard.lo as usize..][..shard.real as usize]);
        }
        out.extend(std::iter::repeat_n(pad, (shard.width - shard.real) as usize));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::exchange::{i32s_to_u64, u64_to_i32s};
    use super::*;

    #[test]
    fn layouts() {
        let s = ShardLayout::Equal { tp: 3 }.shards(10).unwrap();
        assert_eq!(
            s,
            vec![
                Shard { lo: 0, width: 4, real: 4 },
                Shard { lo: 4, width: 4, real: 4 },
                Shard { lo: 8, width: 4, real: 2 }
            ]
        );
        // More ranks than ids: the tail shards are all padding.
        let s = ShardLayout::Equal { tp: 8 }.shards(5).unwrap();
        assert_eq!(s[5], Shard { lo: 5, width: 1, real: 0 });
        let s = ShardLayout::Ranges(vec![(6, 12), (0, 6)]).shards(10).unwrap();
        assert_eq!(s[0], Shard { lo: 6, width: 6, real: 4 });
        for bad in [vec![(0, 4), (5, 10)], vec![(0, 6), (4, 10)], vec![(0, 9)], vec![(3, 1)], vec![]] {
            assert!(matches!(ShardLayout::Ranges(bad).shards(10), Err(ConfigError::Field { field: "layout", .. })));
        }
        assert!(ShardLayout::Equal { tp: 0 }.shards(10).is_err());
    }

    #[test]
    fn bit_slices() {
        let g = [0b1011_0000u32 | 1 << 31, 0b101];
        // Bits 4.. of word 0, then word 1.
        assert_eq!(bit_slice(&g, 4, 8), vec![0b1011]);
        assert_eq!(bit_slice(&g, 31, 4), vec![0b1011]);
        assert_eq!(bit_slice(&g, 32, 40), vec![0b101, 0]);
        assert_eq!(
            i32s_to_u64(u64_to_i32s(0xDEAD_BEEF_0123_4567)[0], u64_to_i32s(0xDEAD_BEEF_0123_4567)[1]),
            0xDEAD_BEEF_0123_4567
        );
    }
}
