//! Sweeps the multi-block top-N's chunk count (blocks per row) on the GPU for
//! each force-top-k width N, and writes the device's tuning table, which the
//! CUDA backend reads at start (`sampler-host/tuning/<device>.json`, or
//! `SAMPLER_CUDA_TUNING=path`).
//!
//! ```text
//! autotune [--v 129280] [--n 64,128,256,512,1024,2048,4096,8192,16384] [--rows 1,16,64,256,384] [--reps 30]
//!          [--driver STR] [--out sampler-host/tuning/nvidia-h200.json]
//! ```
//! For each N and each valid candidate in `CHUNK_CANDIDATES` it times the
//! whole step as a CUDA-graph replay (median, L2 flushed) at each R and keeps
//! the candidate with the least total time over the R's as the entry's
//! `chunks`; the backend picks per batch the candidate fastest at the
//! measured R nearest its own (`Tuning::chunks_for_rows`, from `graph_us`).
//! Only speed depends on R (SAMPLER.md section 9, decided): every chunk count
//! gives the same bits. The table keeps every candidate's timings, the
//! candidate set's checksum and the driver, one entry per line (human-diffable).
#[allow(dead_code)]
#[path = "benchmark.rs"]
mod bench;

use std::process::ExitCode;

use sampler_host::runtime::device::cuda::{chunks_valid, CudaBackend, CHUNK_CANDIDATES};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn list(s: &str) -> Vec<u32> {
    s.split(',').filter(|x| !x.is_empty()).map(|x| x.trim().parse().expect("a number list")).collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let v: u32 = arg(&args, "--v").map(|s| s.parse().unwrap()).unwrap_or(129_280);
    let ns = list(&arg(&args, "--n").unwrap_or("64,128,256,512,1024,2048,4096,8192,16384".into()));
    let rows = list(&arg(&args, "--rows").unwrap_or("1,16,64,256,384".into()));
    let reps: usize = arg(&args, "--reps").map(|s| s.parse().unwrap()).unwrap_or(30);
    let out = arg(&args, "--out").unwrap_or("sampler-host/tuning/nvidia-h200.json".into());
    let mut cuda = match CudaBackend::new() {
        Ok(b) => b,
        Err(e) => {
            println!("SKIPPED: no CUDA backend: {e}");
            return ExitCode::from(77);
        }
    };
    // Checksum of the candidate set (FNV-1a over the candidates and the kernel set).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{CHUNK_CANDIDATES:?} topn_chunk+topn_merge|force_topn").bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    let total: usize =
        ns.iter().map(|&n| CHUNK_CANDIDATES.iter().filter(|&&c| chunks_valid(v, n, c)).count() * rows.len()).sum();
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("autotune [{bar:40}] {pos}/{len} {msg} ({elapsed}, eta {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut entries = Vec::new();
    for &n in &ns {
        let mut cands = Vec::new();
        for &c in CHUNK_CANDIDATES.iter().filter(|&&c| chunks_valid(v, n, c)) {
            cuda.set_chunks_override(Some(c));
            let mut per_r = Vec::new();
            for &r in &rows {
                bar.set_message(format!("N={n} chunks={c} R={r}"));
                match bench::time_shape(&mut cuda, r, v, n, reps, false) {
                    Ok(j) => per_r.push((r, j["graph_us"].as_f64().unwrap_or(f64::INFINITY))),
                    Err(e) => {
                        bar.println(format!("N={n} chunks={c} R={r}: {e}"));
                        per_r.push((r, f64::INFINITY));
                    }
                }
                bar.inc(1);
            }
            let sum: f64 = per_r.iter().map(|x| x.1).sum();
            cands.push((c, sum, per_r));
        }
        let best = cands.iter().min_by(|a, b| a.1.partial_cmp(&b.1).unwrap()).map(|x| x.0).unwrap_or(1);
        let timings: Vec<String> = cands
            .iter()
            .map(|(c, _, per)| {
                format!(
                    "\"{c}\": {{{}}}",
                    per.iter().map(|(r, t)| format!("\"R{r}\": {t:.1}")).collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        entries.push(format!(
            "    {{\"v\": {v}, \"n\": {n}, \"chunks\": {best}, \"graph_us\": {{{}}}}}",
            timings.join(", ")
        ));
    }
    bar.finish();
    let text = format!(
        "{{\n  \"device\": {:?},\n  \"driver\": {:?},\n  \"candidates\": \"chunks {:?}, rows {:?}, median graph replay us, L2 flushed\",\n  \"candidates_checksum\": \"{h:016x}\",\n  \"entries\": [\n{}\n  ]\n}}\n",
        cuda.device_name(),
        arg(&args, "--driver").unwrap_or_default(),
        CHUNK_CANDIDATES,
        rows,
        entries.join(",\n")
    );
    print!("{text}");
    std::fs::write(&out, text).expect("write the tuning table");
    eprintln!("autotune: wrote {out}");
    ExitCode::SUCCESS
}
