//! One 512-row prompt-logprobs call at V = 129280 on the CPU backend, and
//! its peak resident memory against the size of the logits it was given.
//!
//! The sampler borrows host logits (no copy) and runs large steps in
//! blocks of rows, so its scratch stays bounded: the issue-11 bound is
//! `peak_rss_bytes <= 1.25 * logits_bytes + 64 MiB`.
//!
//! ```sh
//! cargo run --release --example prompt_memory [-- --rows 512 --vocab 129280]
//! ```
//! Prints one line `peak_rss_bytes=P logits_bytes=L`, then `ok` or `over`
//! (exit code 1 when over the bound, or where /proc is missing).

use std::process::ExitCode;

use sampler_host::request::{Request, RequestKind};
use sampler_host::{BackendKind, Sampler, SamplerConfig, SamplingParams};

/// Peak resident set (`VmHWM` of /proc/self/status), bytes.
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn arg(name: &str, default: usize) -> usize {
    let a: Vec<String> = std::env::args().collect();
    a.iter().position(|x| x == name).and_then(|i| a.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() -> ExitCode {
    let (rows, v) = (arg("--rows", 512), arg("--vocab", 129280));
    // Deterministic pseudo-logits (a cheap LCG), written straight into one buffer.
    let mut logits = vec![0f32; rows * v];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for l in logits.iter_mut() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *l = ((x >> 40) as f32 / (1u64 << 24) as f32) * 12.0 - 6.0;
    }
    let targets: Vec<i32> = (0..rows).map(|i| ((i * 7919) % v) as i32).collect();
    let params = SamplingParams { top_logprobs: 5, seq_seed: Some(1), ..Default::default() };
    let req = Request { params, kind: RequestKind::PromptLogprobs { targets }, golden: Vec::new(), masks: None };
    let mut s = match Sampler::new(SamplerConfig { vocab_size: v as u32, force_topk: 0, nextn: 5, backend: BackendKind::Cpu }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let t = std::time::Instant::now();
    let out = match s.sample(&logits, &[req]) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let secs = t.elapsed().as_secs_f64();
    let got = out.requests[0].prompt_logprobs.len();
    let Some(p) = peak_rss() else {
        eprintln!("error: no /proc/self/status VmHWM on this system");
        return ExitCode::FAILURE;
    };
    let l = (logits.len() * 4) as u64;
    println!("peak_rss_bytes={p} logits_bytes={l}");
    let bound = l + l / 4 + (64 << 20);
    eprintln!("{rows} rows x V={v}: {got} prompt logprobs in {secs:.2} s; bound 1.25 L + 64 MiB = {bound}");
    if p <= bound && got == rows {
        println!("ok");
        ExitCode::SUCCESS
    } else {
        println!("over");
        ExitCode::FAILURE
    }
}
