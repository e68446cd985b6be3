//! Launch-shape tuning of the CUDA device: the committed tables of chunk
//! counts by (V, N), and the defaults without one.

use sampler_kernels::codes::MAX_N_NVIDIA;

/// Committed tuning tables, `(file name, JSON)`: the one whose `"device"`
/// equals the device's name is used (`examples/autotune.rs` writes them;
/// `SAMPLER_CUDA_TUNING=path` overrides). Unknown devices: [`default_chunks`].
pub const TUNING_TABLES: &[(&str, &str)] = &[("nvidia-h200.json", include_str!("../../../../tuning/nvidia-h200.json"))];

/// Logits per block of the multi-block mask/bad-value check (a multiple of
/// its tile, 4096, so mask words stay aligned).
pub const MASK_CHUNK: u32 = 16384;

/// Widest N of the fused kernels (`process_draw`, `process_prefix_draw`,
/// `token_info_top`: register tiles only); wider steps run them unfused.
pub const FUSED_MAX: u32 = MAX_N_NVIDIA;

/// Blocks per row of the mask/bad-value check (by V only).
pub fn mask_chunks(v: u32) -> u32 {
    v.div_ceil(MASK_CHUNK).max(1)
}

/// Candidate chunk counts of the multi-block top-N (what autotune sweeps).
pub const CHUNK_CANDIDATES: &[u32] = &[1, 2, 4, 8, 16, 32, 64, 128];

/// Whether `chunks` blocks per row are valid for V = `v`, N = `n`: every
/// chunk (`ceil(v / chunks)` logits, the last one shorter) holds at least N.
pub fn chunks_valid(v: u32, n: u32, chunks: u32) -> bool {
    if chunks <= 1 {
        return true;
    }
    if n > MAX_N_NVIDIA || n == 0 {
        return false;
    }
    let len = v.div_ceil(chunks);
    let last = v as i64 - (chunks as i64 - 1) * len as i64;
    last >= n as i64
}

/// The chunk count without a tuning entry: the most chunks whose candidates
/// (chunks x N) still fit one 16384-key tile of the merge.
pub fn default_chunks(v: u32, n: u32) -> u32 {
    CHUNK_CANDIDATES
        .iter()
        .copied()
        .filter(|&c| c * n.max(1) <= MAX_N_NVIDIA && chunks_valid(v, n, c))
        .max()
        .unwrap_or(1)
}

/// The tuning table of one device: chunk counts by (V, N).
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    /// Where it came from (file name, or "defaults").
    pub source: String,
    entries: Vec<(u32, u32, u32)>,
}

impl Tuning {
    /// Parses a table (`{"device": .., "entries": [{"v":.., "n":.., "chunks":..}, ..]}`).
    pub fn parse(source: &str, text: &str) -> Option<(String, Tuning)> {
        let j: serde_json::Value = serde_json::from_str(text).ok()?;
        let dev = j.get("device")?.as_str()?.to_string();
        let mut entries = Vec::new();
        for e in j.get("entries")?.as_array()? {
            let g = |k: &str| e.get(k).and_then(|x| x.as_u64()).map(|x| x as u32);
            if let (Some(v), Some(n), Some(c)) = (g("v"), g("n"), g("chunks")) {
                entries.push((v, n, c));
            }
        }
        Some((dev, Tuning { source: source.to_string(), entries }))
    }

    /// The table for `device`: `SAMPLER_CUDA_TUNING`, else a committed one, else defaults.
    pub fn for_device(device: &str) -> Tuning {
        if let Ok(path) = std::env::var("SAMPLER_CUDA_TUNING") {
            if let Some((_, t)) = std::fs::read_to_string(&path).ok().and_then(|s| Tuning::parse(&path, &s)) {
                return t;
            }
        }
        for (name, text) in TUNING_TABLES {
            if let Some((dev, t)) = Tuning::parse(name, text) {
                if dev == device {
                    return t;
                }
            }
        }
        Tuning { source: "defaults".into(), entries: Vec::new() }
    }

    /// Chunks for (V, N): the table's entry when valid, else [`default_chunks`]. Never depends on R.
    pub fn chunks(&self, v: u32, n: u32) -> u32 {
        match self.entries.iter().find(|e| e.0 == v && e.1 == n) {
            Some(&(_, _, c)) if chunks_valid(v, n, c) => c,
            _ => default_chunks(v, n),
        }
    }
}
