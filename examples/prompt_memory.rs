//! One 512-row prompt-logprobs call at V = 129280 on the CPU backend, and
//! its peak resident memory against the size of the logits it was given.
//!
//! The sampler borrows host logits (no copy) and runs large steps in
//! blocks of rows, so its scratch stays bounded: the issue-11 bound is
//! `peak_rss_bytes <= 1.25 * logits_bytes + 64 MiB`.
//!
//! ```sh
//! cargo run --release --example prompt_memory [-- --rows 512 --vocab 129280 --dtype bf16]
//! ```
//! `--dtype bf16` (or `f16`) hands the logits over in half precision: the
//! kernels widen them at load, so no f32 copy is made and the bound holds
//! against the half-precision bytes.
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
    let a: Vec<String> = std::env::args().collect();
    let dtype =
        a.iter().position(|x| x == "--dtype").and_then(|i| a.get(i + 1)).map_or("f32", |s| s.as_str()).to_string();
    if !["f32", "bf16", "f16"].contains(&dtype.as_str()) {
        eprintln!("error: --dtype must be f32, bf16 or f16, got `{dtype}`");
        return ExitCode::FAILURE;
    }
    // Deterministic pseudo-logits (a cheap LCG), written straight into one buffer of the element type.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 12.0 - 6.0
    };
    let (mut l32, mut l16) = (Vec::new(), Vec::new());
    let (mut lh, bytes) = (Vec::new(), if dtype == "f32" { 4 } else { 2 });
    match dtype.as_str() {
        "f32" => l32 = (0..rows * v).map(|_| next()).collect(),
        "bf16" => l16 = (0..rows * v).map(|_| half::bf16::from_f32(next())).collect(),
        _ => lh = (0..rows * v).map(|_| half::f16::from_f32(next())).collect(),
    }
    let targets: Vec<i32> = (0..rows).map(|i| ((i * 7919) % v) as i32).collect();
    let params = SamplingParams { top_logprobs: 5, seq_seed: Some(1), ..Default::default() };
    let req = Request { params, kind: RequestKind::PromptLogprobs { targets }, golden: Vec::new(), masks: None };
    let mut s = match Sampler::new(SamplerConfig {
        vocab_size: v as u32,
        force_topk: 0,
        nextn: 5,
        backend: BackendKind::Cpu,
    }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let t = std::time::Instant::now();
    let res = match dtype.as_str() {
        "f32" => s.sample(&l32, &[req]),
        "bf16" => s.sample(&l16, &[req]),
        _ => s.sample(&lh, &[req]),
    };
    let out = match res {
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
    let l = (rows * v * bytes) as u64;
    println!("peak_rss_bytes={p} logits_bytes={l}");
    let bound = l + l / 4 + (64 << 20);
    eprintln!("{rows} rows x V={v} {dtype}: {got} prompt logprobs in {secs:.2} s; bound 1.25 L + 64 MiB = {bound}");
    if p <= bound && got == rows {
        println!("ok");
        ExitCode::SUCCESS
    } else {
        println!("over");
        ExitCode::FAILURE
    }
}
