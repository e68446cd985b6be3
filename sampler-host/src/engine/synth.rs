//! A synthetic model for tests and `examples/engine_loop.rs`: target logits
//! with a realistic (Zipf-like) shape that depend on the request and the
//! index of the predicted token, and draft logits that agree with the
//! target to a tunable degree.
//!
//! Target row for `(request, predicts)`: a fixed decreasing profile
//! `-1.1 * ln(1 + rank)` (plus a little fixed noise) laid over the
//! vocabulary by a permutation `rank -> (a * rank + b) mod V` chosen by a hash
//! of `(seed, request, predicts)`. Alternatively the rows of a real logits
//! file, one picked per `(request, predicts)`.
//!
//! Draft row: the target row plus `(1 - agreement) * noise_scale` times
//! uniform noise in [-1, 1) per token. With `agreement = 1` the draft equals
//! the target at the same predicted index, so every draft is accepted
//! (p == q); lower agreement lowers the acceptance rate.

use super::{LogitsSource, RowQuery};

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    z ^ (z >> 31)
}

fn hash(a: u64, b: u64, c: u64) -> u64 {
    mix64(mix64(mix64(a ^ 0x9E3779B97F4A7C15).wrapping_add(b)).wrapping_add(c))
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Where target rows come from.
#[derive(Clone, Debug)]
enum Source {
    Zipf { profile: Vec<f32> },
    Rows { rows: Vec<f32>, count: usize },
}

/// The synthetic model (see the module docs).
#[derive(Clone, Debug)]
pub struct SyntheticModel {
    vocab: usize,
    seed: u64,
    /// 0..=1: how closely the draft follows the target.
    pub agreement: f32,
    /// Noise amplitude (logit units) at agreement 0.
    pub noise_scale: f32,
    /// Added to chosen token ids' logits in every row (e.g. favour EOS or closing brackets).
    pub bias: Vec<(i32, f32)>,
    source: Source,
    /// Rows asked so far: (target, draft).
    pub rows_asked: (usize, usize),
}

impl SyntheticModel {
    /// Zipf-shaped rows over `vocab` tokens.
    pub fn new(vocab: usize, seed: u64, agreement: f32) -> SyntheticModel {
        let profile = (0..vocab)
            .map(|r| {
                -1.1 * ((1 + r) as f32).ln() + 0.05 * ((hash(seed, r as u64, 7) >> 40) as f32 / (1u64 << 24) as f32)
            })
            .collect();
        SyntheticModel {
            vocab,
            seed,
            agreement,
            noise_scale: 4.0,
            bias: Vec::new(),
            source: Source::Zipf { profile },
            rows_asked: (0, 0),
        }
    }

    /// Rows of a real `[count, vocab]` logits tensor.
    pub fn from_rows(rows: Vec<f32>, vocab: usize, seed: u64, agreement: f32) -> SyntheticModel {
        let count = rows.len() / vocab.max(1);
        SyntheticModel {
            vocab,
            seed,
            agreement,
            noise_scale: 4.0,
            bias: Vec::new(),
            source: Source::Rows { rows, count },
            rows_asked: (0, 0),
        }
    }

    /// Vocabulary size V.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The target row for `(request, predicts)`.
    pub fn target_row(&self, request: u64, predicts: u64, out: &mut [f32]) {
        let v = self.vocab as u64;
        let h = hash(self.seed, request, predicts);
        match &self.source {
            Source::Zipf { profile } => {
                let mut a = ((h >> 32) % v) | 1;
                while gcd(a, v) != 1 {
                    a += 2;
                }
                let b = h % v;
                for (r, &x) in profile.iter().enumerate() {
                    out[((a * r as u64 + b) % v) as usize] = x;
                }
            }
            Source::Rows { rows, count } => {
                let i = (h % (*count).max(1) as u64) as usize;
                out.copy_from_slice(&rows[i * self.vocab..(i + 1) * self.vocab]);
            }
        }
        for &(t, b) in &self.bias {
            if t >= 0 && (t as usize) < self.vocab {
                out[t as usize] += b;
            }
        }
    }
}

impl LogitsSource for SyntheticModel {
    fn target_logits(&mut self, rows: &[RowQuery]) -> Vec<f32> {
        self.rows_asked.0 += rows.len();
        let mut out = vec![0f32; rows.len() * self.vocab];
        for (q, o) in rows.iter().zip(out.chunks_mut(self.vocab)) {
            self.target_row(q.request, q.predicts, o);
        }
        out
    }
    fn draft_logits(&mut self, rows: &[RowQuery]) -> Vec<f32> {
        self.rows_asked.1 += rows.len();
        let mut out = vec![0f32; rows.len() * self.vocab];
        let amp = (1.0 - self.agreement.clamp(0.0, 1.0)) * self.noise_scale;
        for (q, o) in rows.iter().zip(out.chunks_mut(self.vocab)) {
            self.target_row(q.request, q.predicts, o);
            if amp > 0.0 {
                let h = hash(self.seed ^ 0xD1A5, q.request, q.predicts);
                for (t, x) in o.iter_mut().enumerate() {
                    let u = (mix64(h.wrapping_add(t as u64)) >> 40) as f32 / (1u64 << 24) as f32;
                    *x += amp * (2.0 * u - 1.0);
                }
            }
        }
        out
    }
}
