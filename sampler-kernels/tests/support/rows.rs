//! Rows shared by `tests/stream_select.rs` and `examples/one_pass_rates.rs`:
//! the benchmark's logit distribution and the adversarial families of
//! issue 22 item 4.

#![allow(dead_code)]

use sampler_kernels::rt::math::{mix64, GAMMA};
use sampler_kernels::rt::stream_select::{sample_positions, stream_top_n, Config, Row, RowLogits, Selection};

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix64(self.0)
    }
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// The benchmark's logits: 3 x N(0, 1) from a centred sum of four uniforms (examples/benchmark.rs).
    pub fn bench(&mut self) -> f32 {
        3.0 * 3.0f32.sqrt() * (self.unit() + self.unit() + self.unit() + self.unit() - 2.0)
    }
}

/// A named adversarial row: logits (f32 / bf16 / f16) and an optional mask.
pub struct Case {
    pub name: String,
    pub f32s: Vec<f32>,
    pub half: Option<bool>, // Some(true) bf16, Some(false) f16 (from f32s)
    pub mask: Option<Vec<u32>>,
}

impl Case {
    pub fn plain(name: &str, f32s: Vec<f32>) -> Case {
        Case { name: name.into(), f32s, half: None, mask: None }
    }
    pub fn run(&self, n: usize, cfg: &Config) -> (Selection, Vec<f32>) {
        let bf: Vec<half::bf16>;
        let hf: Vec<half::f16>;
        let logits = match self.half {
            None => RowLogits::F32(&self.f32s),
            Some(true) => {
                bf = self.f32s.iter().map(|&x| half::bf16::from_f32(x)).collect();
                RowLogits::Bf16(&bf)
            }
            Some(false) => {
                hf = self.f32s.iter().map(|&x| half::f16::from_f32(x)).collect();
                RowLogits::F16(&hf)
            }
        };
        let row = Row { logits, mask: self.mask.as_deref() };
        (stream_top_n(row, n, cfg).unwrap(), row.widened())
    }
}

pub const V: usize = 129_280;

pub fn cases(v: usize) -> Vec<Case> {
    let mut g = Rng(11);
    let bench: Vec<f32> = (0..v).map(|_| g.bench()).collect();
    let mut out = vec![
        Case::plain("ascending", (0..v).map(|i| i as f32 * 1e-3).collect()),
        Case::plain("descending", (0..v).map(|i| -(i as f32) * 1e-3).collect()),
        Case::plain("all equal", vec![1.5; v]),
        Case::plain("quantized 5 values", (0..v).map(|i| (mix64(i as u64) % 5) as f32).collect()),
        Case::plain(
            "quantized 2 values, mostly low",
            (0..v).map(|i| mix64(i as u64).is_multiple_of(97) as u32 as f32).collect(),
        ),
        Case::plain("benchmark distribution", bench.clone()),
        Case::plain("id-periodic 64", (0..v).map(|i| (i % 64) as f32).collect()),
        // Period of the sample's stride: the sample sees only one phase.
        Case::plain("id-periodic at the sample stride", (0..v).map(|i| ((i % 252) as f32) * 0.5).collect()),
        Case::plain("signed zeros", (0..v).map(|i| if mix64(i as u64) & 1 == 0 { -0.0 } else { 0.0 }).collect()),
        Case::plain(
            "zeros and a few positives",
            (0..v)
                .map(|i| {
                    if i % 1000 == 3 {
                        1.0
                    } else if i % 2 == 0 {
                        -0.0
                    } else {
                        0.0
                    }
                })
                .collect(),
        ),
        Case::plain(
            "subnormals",
            (0..v)
                .map(|i| {
                    let h = mix64(i as u64 ^ 0xabc);
                    f32::from_bits(((h & 0xff) as u32) | (((h >> 8) & 1) as u32) << 31)
                })
                .collect(),
        ),
        Case::plain("all -inf", vec![f32::NEG_INFINITY; v]),
    ];
    // The top values in one small region (8 KB = 2048 logits), and in a gap between sampled sectors.
    let mut r = bench.clone();
    r[70_000.min(v / 2)..(70_000.min(v / 2) + 2048).min(v)].iter_mut().for_each(|x| *x += 20.0);
    out.push(Case::plain("top values in one 8 KB region", r));
    let pos = sample_positions(v, 512, 8);
    let mut r = bench.clone();
    if let Some(w) = pos.windows(2).find(|w| w[1] - w[0] > 100) {
        for x in &mut r[w[0] + 1..w[1]] {
            *x += 30.0;
        }
    }
    out.push(Case::plain("top values between sampled sectors", r));
    // The sample sees only large values: few keys pass T (F1 must run for N > the sampled survivors).
    let mut r: Vec<f32> = (0..v).map(|i| (i % 13) as f32).collect();
    for &p in &pos {
        r[p] = 1000.0 + p as f32;
    }
    out.push(Case::plain("sample-adversarial (F1)", r));
    // NaN / +inf rows.
    let mut r = bench.clone();
    for (j, sp) in [f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001), f32::from_bits(0xffff_ffff)].iter().enumerate() {
        r[(j * 7919 + 5) % v] = *sp;
    }
    out.push(Case::plain("NaNs", r));
    let mut r = bench.clone();
    r[v / 3] = f32::INFINITY;
    out.push(Case::plain("+inf", r));
    let mut r = vec![f32::NEG_INFINITY; v];
    r[v - 1] = f32::NAN;
    out.push(Case::plain("-inf and one NaN", r));
    // Grammar masks: at most 10 allowed (spread, clustered), none allowed.
    let words = v.div_ceil(32);
    for (name, ids) in [
        ("mask: 10 allowed, spread", (0..10).map(|j| (j * 12_911 + 17) % v).collect::<Vec<_>>()),
        ("mask: 10 allowed, clustered", (0..10).map(|j| (v / 2 + j) % v).collect()),
        ("mask: 1 allowed", vec![v - 1]),
        ("mask: none allowed", vec![]),
    ] {
        let mut m = vec![0u32; words];
        for i in ids {
            m[i / 32] |= 1 << (i % 32);
        }
        out.push(Case { name: name.into(), f32s: bench.clone(), half: None, mask: Some(m) });
    }
    // Half precision: read in place, widened exactly (bf16 quantises heavily: many ties).
    out.push(Case { name: "bf16 benchmark".into(), f32s: bench.clone(), half: Some(true), mask: None });
    out.push(Case { name: "f16 benchmark".into(), f32s: bench.clone(), half: Some(false), mask: None });
    let mut m = vec![u32::MAX; words];
    m.iter_mut().step_by(3).for_each(|w| *w = 0);
    out.push(Case { name: "bf16, a third masked".into(), f32s: bench, half: Some(true), mask: Some(m) });
    out
}
