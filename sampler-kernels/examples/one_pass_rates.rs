//! Rates of the one-pass selection model (`rt::stream_select`, issue 22
//! item 4; numbers in docs/ONE_PASS.md):
//!
//! `cargo run --release -p sampler-kernels --example one_pass_rates [rows]`
//!
//! 1. The benchmark's rows (V = 129280, 3 x N(0, 1) from a centred sum of
//!    four uniforms, examples/benchmark.rs): fallback rate, survivors / N
//!    (logits at or above the sampled threshold), compactions per split.
//! 2. Every adversarial family of the tests: survivors / N, compactions, F1.
//! 3. The force-top-k-off bound (perf-design 3.4 E) at T 0.7, top-p 0.9,
//!    top-k 50: rows decided at w = 64 and w = max(256, 4 top-k) = 256.
//!
//! Every selection is also checked bitwise against `host_algo::top_keys`.

#[path = "../tests/support/rows.rs"]
mod rows;

use rows::{cases, Rng, V};
use sampler_kernels::rt::host_algo::top_keys;
use sampler_kernels::rt::math::key_logit;
use sampler_kernels::rt::stream_select::{stream_top_n, total_bound, CapScope, Config, Row, Threshold, Visit};

fn quantiles(mut x: Vec<f64>) -> String {
    x.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let q = |p: f64| x[((x.len() - 1) as f64 * p).round() as usize];
    format!("min {:.2} p1 {:.2} p50 {:.2} p99 {:.2} max {:.2}", q(0.0), q(0.01), q(0.5), q(0.99), q(1.0))
}

fn main() {
    let rows: usize = std::env::args().nth(1).map(|s| s.parse().expect("rows: a number")).unwrap_or(300);
    let mut g = Rng(2026);
    let data: Vec<Vec<f32>> = (0..rows).map(|_| (0..V).map(|_| g.bench()).collect()).collect();
    let d = Config::default();
    let nofloor = Config { min_rank: 1, cap_min: 0, ..d };
    let splits = [
        ("C=1, cap 2.5N per CTA", Config { ..d }),
        ("C=1, cap 2.5N per CTA, no floors", nofloor),
        ("C=2, cap 2.5N per CTA", Config { ctas: 2, ..d }),
        ("C=16, cap 2.5N per CTA", Config { ctas: 16, visit: Visit::Shuffled { seed: 1, within: true }, ..d }),
        (
            "C=16, cap 2.5N per row",
            Config { ctas: 16, scope: CapScope::PerRow, visit: Visit::Shuffled { seed: 1, within: true }, ..d },
        ),
        ("C=2, cap 2.0N per row", Config { ctas: 2, scope: CapScope::PerRow, cap_num: 2, cap_den: 1, ..d }),
        ("C=1, cap 1.5N per CTA", Config { cap_num: 3, cap_den: 2, ..d }),
        (
            "C=16, S mode (1024 bins of 1/64), cap per row",
            Config {
                ctas: 16,
                scope: CapScope::PerRow,
                threshold: Threshold::Histogram { bins: 1024, per_unit: 64 },
                ..d
            },
        ),
    ];
    let hist_at = splits.len() - 1;
    let mut mismatches = 0usize;
    println!("## 1. Benchmark rows: {rows} rows, V = {V}, sample 512 x 8, target 2N\n");
    println!("Floors: rank >= 16 in the sample, cap >= 1024 keys (the defaults); no floors: rank >= 1, cap 2.5N.");
    println!("S mode: the resident histogram instead of the sample (survivors = bins up to the N-th's).\n");
    println!("| N | threshold | rank in sample | fallbacks | survivors / N (>= T) |");
    println!("|--:|---|--:|--:|---|");
    let mut comp_table = Vec::new();
    for n in [1usize, 50, 1024, 4096, 16384] {
        let (mut fb, mut surv, mut rank) = ([0; 3], [Vec::new(), Vec::new(), Vec::new()], [0; 3]);
        let mut comps = vec![(0u32, 0u32, 0u32); splits.len()]; // (total, rows with any, max peak / N * 100)
        for x in &data {
            let want = top_keys(x, n);
            for (si, (_, cfg)) in splits.iter().enumerate() {
                let s = stream_top_n(Row::f32(x), n, cfg).unwrap();
                mismatches += (s.keys != want) as usize;
                let slot = if si == hist_at { Some(2) } else { (si < 2).then_some(si) };
                if let Some(i) = slot {
                    fb[i] += s.stats.fallback as u32;
                    surv[i].push(s.stats.above_t as f64 / n as f64);
                    rank[i] = s.stats.rank;
                }
                comps[si].0 += s.stats.compactions;
                comps[si].1 += (s.stats.compactions > 0) as u32;
                comps[si].2 = comps[si].2.max((s.stats.peak as u64 * 100 / n as u64) as u32);
            }
        }
        for (i, f) in ["sampled, floors", "sampled, no floors", "S mode histogram"].iter().enumerate() {
            let r = if i == 2 { "-".to_string() } else { rank[i].to_string() };
            println!("| {n} | {f} | {r} | {} / {rows} | {} |", fb[i], quantiles(surv[i].clone()));
        }
        comp_table.push((n, comps));
    }
    println!("\nCompactions (total over the rows / rows with any / largest buffer fill as a multiple of N):\n");
    print!("| split |");
    comp_table.iter().for_each(|(n, _)| print!(" N = {n} |"));
    println!();
    print!("|---|");
    comp_table.iter().for_each(|_| print!("--:|"));
    println!();
    for (si, (name, _)) in splits.iter().enumerate() {
        print!("| {name} |");
        for (_, c) in &comp_table {
            print!(" {} / {} / {:.2} |", c[si].0, c[si].1, c[si].2 as f64 / 100.0);
        }
        println!();
    }

    println!("\n## 2. Adversarial families, V = {V} (default floors; C=1 cap per CTA | C=16 cap per row, shuffled)\n");
    println!("| family | N | T | survivors / N | compactions C=1 | compactions C=16 row | F1 | S mode: survivors / N, compactions |");
    println!("|---|--:|---|--:|--:|--:|---|--:|");
    let c16 = splits[4].1;
    let smode = splits[hist_at].1;
    for case in cases(V) {
        for n in [1usize, 50, 1024, 4096] {
            let (a, x) = case.run(n, &d);
            let (b, _) = case.run(n, &c16);
            let (h, _) = case.run(n, &smode);
            let want = top_keys(&x, n);
            mismatches += (a.keys != want) as usize + (b.keys != want) as usize + (h.keys != want) as usize;
            let t = match a.stats.threshold {
                None => "-inf".to_string(),
                Some(t) => format!("{:e}", key_logit((t as u64) << 32)),
            };
            println!(
                "| {} | {n} | {t} | {:.2} | {} | {} | {} | {:.2}, {} |",
                case.name,
                a.stats.above_t as f64 / n as f64,
                a.stats.compactions,
                b.stats.compactions,
                if a.stats.fallback || b.stats.fallback { "yes" } else { "no" },
                h.stats.above_t as f64 / n as f64,
                h.stats.compactions
            );
        }
    }

    println!("\n## 3. Force top-k off: the total-mass bound at T 0.7, top-p 0.9, top-k 50 ({rows} benchmark rows)\n");
    println!("| w | decided | max excl_prefix(k-1) / frac_floor(S_w, 0.9) | p50 |");
    println!("|--:|--:|--:|--:|");
    for w in [64usize, 256] {
        let (mut dec, mut ratio) = (0, Vec::new());
        for x in &data {
            let cand: Vec<f32> = top_keys(x, w).iter().map(|&k| key_logit(k)).collect();
            let b = total_bound(&cand, V as u32, 0.7, 0.9, 50, 0.0, 0);
            dec += b.decided as u32;
            ratio.push(b.excl_last as f64 / b.thr_low as f64);
        }
        ratio.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("| {w} | {dec} / {rows} | {:.3} | {:.3} |", ratio[ratio.len() - 1], ratio[ratio.len() / 2]);
    }
    println!("\nOther temperatures and top-p (top-k 50, w = 64 | 256; decided rows of {rows}):\n");
    println!("| T | top-p | w = 64 | w = 256 | max ratio at 256 |");
    println!("|--:|--:|--:|--:|--:|");
    let cands: Vec<Vec<f32>> = data.iter().map(|x| top_keys(x, 256).iter().map(|&k| key_logit(k)).collect()).collect();
    for (t, tp) in [(0.3f32, 0.9f32), (1.0, 0.9), (1.5, 0.9), (0.7, 0.95), (1.0, 0.99), (1.5, 0.99)] {
        let (mut d64, mut d256, mut worst) = (0, 0, 0f64);
        for c in &cands {
            d64 += total_bound(&c[..64], V as u32, t, tp, 50, 0.0, 0).decided as u32;
            let b = total_bound(c, V as u32, t, tp, 50, 0.0, 0);
            d256 += b.decided as u32;
            worst = worst.max(b.excl_last as f64 / b.thr_low as f64);
        }
        println!("| {t} | {tp} | {d64} | {d256} | {worst:.3} |");
    }
    println!("\nSelections differing from top_keys: {mismatches}");
    assert_eq!(mismatches, 0);
}
