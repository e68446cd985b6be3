//! Logits for demos, examples and benchmarks: realistic synthetic rows, or
//! rows read from a safetensors file.

use std::path::Path;

/// A `[rows, vocab]` f32 logits matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Logits {
    pub rows: usize,
    pub vocab: usize,
    /// Row-major values, `rows * vocab`.
    pub data: Vec<f32>,
}

impl Logits {
    /// Row `r` as a slice of `vocab` values.
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.vocab..(r + 1) * self.vocab]
    }
    /// `n` rows taken cyclically from this matrix (to fill a batch from few rows).
    pub fn cycle_rows(&self, n: usize, start: usize) -> Vec<f32> {
        (0..n).flat_map(|i| self.row((start + i) % self.rows).iter().copied()).collect()
    }
}

/// Why a logits file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LogitsError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path} is not a safetensors file: {msg}")]
    Format { path: String, msg: String },
    #[error("{path}: tensor `{name}` {msg}")]
    Tensor { path: String, name: String, msg: String },
}

/// Reads tensor `name` (`[R, V]`, f32, f16 or bf16) from a safetensors file.
///
/// Errors: unreadable file, not safetensors, missing tensor, wrong rank or dtype.
pub fn load_safetensors(path: &Path, name: &str) -> Result<Logits, LogitsError> {
    let p = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| LogitsError::Io { path: p.clone(), source })?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| LogitsError::Format { path: p.clone(), msg: e.to_string() })?;
    let terr = |msg: String| LogitsError::Tensor { path: p.clone(), name: name.to_string(), msg };
    let t = st.tensor(name).map_err(|e| terr(format!("not found ({e})")))?;
    let shape = t.shape();
    if shape.len() != 2 || shape[0] == 0 || shape[1] == 0 {
        return Err(terr(format!("has shape {shape:?}, expected [rows, vocab]")));
    }
    let raw = t.data();
    let data: Vec<f32> = match t.dtype() {
        safetensors::Dtype::F32 => raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        safetensors::Dtype::BF16 => {
            raw.chunks_exact(2).map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16)).collect()
        }
        safetensors::Dtype::F16 => raw.chunks_exact(2).map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect(),
        other => return Err(terr(format!("has dtype {other:?}, expected F32, F16 or BF16"))),
    };
    Ok(Logits { rows: shape[0], vocab: shape[1], data })
}

fn f16_to_f32(h: u16) -> f32 {
    let s = ((h >> 15) as u32) << 31;
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as u32;
    let bits = match e {
        0 if m == 0 => s,
        0 => return f32::from_bits(s) + (if s != 0 { -1.0 } else { 1.0 }) * (m as f32) * 2f32.powi(-24),
        31 => s | 0x7f80_0000 | (m << 13),
        _ => s | (((e - 15 + 127) as u32) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// SplitMix64 stream for reproducible synthetic data (not the sampler's RNG).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        sampler_kernels::rt::math::mix64(self.0)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
    fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.unit().max(1e-300), self.unit());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// LLM-shaped synthetic logits: a N(0, 1) background plus a Zipf-like head
/// of 64 tokens about 8-14 above it, with a random sharpness per row (top
/// token from about 50% to nearly certain at temperature 0.7), as in real models. Deterministic in `seed`.
pub fn synthetic(rows: usize, vocab: usize, seed: u64) -> Logits {
    let mut data = Vec::with_capacity(rows * vocab);
    for r in 0..rows {
        let mut rng = Rng(seed ^ (r as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
        let start = data.len();
        data.extend((0..vocab).map(|_| rng.normal() as f32));
        // Per-row sharpness: some rows nearly certain, others spread over tens of tokens.
        let sharp = 0.2 + 0.8 * rng.unit();
        for i in 0..vocab.min(64) {
            let t = (rng.next() % vocab as u64) as usize;
            data[start + t] = (rng.normal() * 0.3 + 8.0 + sharp * 6.0 / (1.0 + i as f64).powf(0.7)) as f32;
        }
    }
    Logits { rows, vocab, data }
}
