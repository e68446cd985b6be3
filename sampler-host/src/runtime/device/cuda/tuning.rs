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

/// The tuning table of one device: chunk counts by (V, N), and by the
/// batch's row count R where the table measured several (SAMPLER.md section
/// 9, decided: configuration may depend on R where results cannot; every
/// chunk count gives the same bits, `tests/devices/cuda_counts.rs`).
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    /// Where it came from (file name, or "defaults").
    pub source: String,
    entries: Vec<TuningEntry>,
}

/// One (V, N) line of a [`Tuning`] table.
#[derive(Debug, Clone, Default)]
struct TuningEntry {
    v: u32,
    n: u32,
    /// The least total time over the table's R (the R-independent choice).
    chunks: u32,
    /// `(R, the fastest chunk count at that R)`, ascending R, from `graph_us`.
    by_rows: Vec<(u32, u32)>,
}

impl Tuning {
    /// Parses a table (`{"device": .., "entries": [{"v":.., "n":.., "chunks":..,
    /// "graph_us": {"<chunks>": {"R<rows>": us, ..}, ..}}, ..]}`); `graph_us` is optional.
    pub fn parse(source: &str, text: &str) -> Option<(String, Tuning)> {
        let j: serde_json::Value = serde_json::from_str(text).ok()?;
        let dev = j.get("device")?.as_str()?.to_string();
        let mut entries = Vec::new();
        for e in j.get("entries")?.as_array()? {
            let g = |k: &str| e.get(k).and_then(|x| x.as_u64()).map(|x| x as u32);
            if let (Some(v), Some(n), Some(chunks)) = (g("v"), g("n"), g("chunks")) {
                // Per R: the chunk count with the least finite time (ties: fewer chunks).
                let mut best: Vec<(u32, u32, f64)> = Vec::new();
                for (c, per) in e.get("graph_us").and_then(|x| x.as_object()).into_iter().flatten() {
                    let Ok(c) = c.parse::<u32>() else { continue };
                    for (r, t) in per.as_object().into_iter().flatten() {
                        let (Some(r), Some(t)) = (r.strip_prefix('R').and_then(|r| r.parse::<u32>().ok()), t.as_f64())
                        else {
                            continue;
                        };
                        if !t.is_finite() || !chunks_valid(v, n, c) {
                            continue;
                        }
                        match best.iter_mut().find(|b| b.0 == r) {
                            Some(b) if t < b.2 || (t == b.2 && c < b.1) => *b = (r, c, t),
                            Some(_) => {}
                            None => best.push((r, c, t)),
                        }
                    }
                }
                best.sort_by_key(|b| b.0);
                entries.push(TuningEntry { v, n, chunks, by_rows: best.into_iter().map(|b| (b.0, b.1)).collect() });
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

    /// Chunks for (V, N) at every R: the table's entry when valid, else [`default_chunks`].
    pub fn chunks(&self, v: u32, n: u32) -> u32 {
        match self.entries.iter().find(|e| e.v == v && e.n == n) {
            Some(e) if chunks_valid(v, n, e.chunks) => e.chunks,
            _ => default_chunks(v, n),
        }
    }

    /// Chunks for (V, N) at `rows` rows: the fastest count measured at the
    /// table's R nearest to `rows` (on a log scale; the lower on a tie), else
    /// [`Self::chunks`]. Only the speed depends on R: every count gives the
    /// same results.
    pub fn chunks_for_rows(&self, v: u32, n: u32, rows: u32) -> u32 {
        let Some(e) = self.entries.iter().find(|e| e.v == v && e.n == n) else { return self.chunks(v, n) };
        let dist = |r: u32| ((r.max(1) as f64).ln() - (rows.max(1) as f64).ln()).abs();
        let near = e.by_rows.iter().min_by(|a, b| dist(a.0).total_cmp(&dist(b.0)).then(a.0.cmp(&b.0)));
        match near {
            Some(&(_, c)) if chunks_valid(v, n, c) => c,
            _ => self.chunks(v, n),
        }
    }
}

#[cfg(test)]
mod tuning_tests {
    use super::Tuning;

    const TABLE: &str = r#"{"device": "D", "entries": [
        {"v": 129280, "n": 1024, "chunks": 4, "graph_us": {"4": {"R1": 76.6, "R64": 137.8, "R256": 463.0},
            "8": {"R1": 62.3, "R64": 146.6, "R256": 506.0}, "16": {"R1": 59.8, "R64": 171.5, "R256": null}}},
        {"v": 129280, "n": 4096, "chunks": 4}
    ]}"#;

    #[test]
    fn the_chunk_count_follows_the_nearest_measured_row_count() {
        let (_, t) = Tuning::parse("t", TABLE).unwrap();
        assert_eq!(t.chunks(129280, 1024), 4);
        // On a log scale R = 7 is nearest the R1 column (16 chunks fastest there), R = 9 the R64 one.
        assert_eq!(t.chunks_for_rows(129280, 1024, 1), 16);
        assert_eq!(t.chunks_for_rows(129280, 1024, 7), 16);
        assert_eq!(t.chunks_for_rows(129280, 1024, 9), 4);
        assert_eq!(t.chunks_for_rows(129280, 1024, 64), 4);
        // A missing (null) time is skipped, not taken as 0.
        assert_eq!(t.chunks_for_rows(129280, 1024, 384), 4);
        // No per-R timings: the R-independent choice; no entry: the default.
        assert_eq!(t.chunks_for_rows(129280, 4096, 1), 4);
        assert_eq!(t.chunks_for_rows(1000, 64, 1), super::default_chunks(1000, 64));
    }
}
