//! Context parallelism over NCCL: two ranks (threads) on GPUs 0 and 1.
//!
//! The driver samples (CPU backend, so the check is about the collectives),
//! the follower joins every collective over NCCL and returns empty outputs;
//! both must end with identical tokens, equal to a single-rank run.
//! Prints `SKIPPED` and exits 0 without a driver, libnccl or two GPUs.
//!
//! ```text
//! cargo run --release --example cp_nccl
//! ```

use sampler_host::dist::collective::{Collective, NcclCollective, Role};
use sampler_host::engine::{Engine, EngineConfig, EngineRequest, Finished, NoModel, SyntheticModel};
use sampler_host::{BackendKind, Sampler, SamplerConfig, SamplingParams};

const V: u32 = 800;

fn requests() -> Vec<EngineRequest> {
    let golden: Vec<i32> = (0..10).map(|i| 700 + i).collect();
    vec![
        EngineRequest::new(
            1,
            (0..41).collect(),
            SamplingParams { seq_seed: Some(1), prompt_logprobs: true, ..Default::default() },
            12,
        ),
        EngineRequest::new(
            2,
            vec![5, 6, 7],
            SamplingParams { seq_seed: Some(2), golden_token_ids: golden, ..Default::default() },
            15,
        ),
        EngineRequest::new(
            3,
            vec![9; 20],
            SamplingParams { seq_seed: Some(3), temperature: 0.7, top_k: 50, ..Default::default() },
            20,
        ),
    ]
}

fn config(role: Role) -> EngineConfig {
    EngineConfig { max_num_seqs: 2, nextn: 4, prefill_chunk: 16, role, ..Default::default() }
}

fn sampler() -> Sampler {
    Sampler::new(SamplerConfig { vocab_size: V, force_topk: 64, nextn: 4, backend: BackendKind::Cpu })
        .expect("CPU sampler")
}

/// Runs one rank to completion; returns (requests per step, finished requests, collectives).
#[allow(clippy::type_complexity)]
fn rank(c: NcclCollective, role: Role) -> Result<(Vec<usize>, Vec<Finished>, Vec<&'static str>), String> {
    let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let logged = Logged { inner: c, calls: calls.clone() };
    let mut e = Engine::with_collective(sampler(), config(role), Box::new(logged)).map_err(|e| e.to_string())?;
    for r in requests() {
        e.add_request(r).map_err(|e| e.to_string())?;
    }
    let mut model = SyntheticModel::new(V as usize, 8, 0.6);
    let mut sizes = Vec::new();
    while e.pending() > 0 {
        let r = match role {
            Role::Driver => e.step(&mut model),
            Role::Follower => e.step(&mut NoModel),
        }
        .map_err(|e| e.to_string())?;
        sizes.push(r.requests.len());
    }
    let mut fin = e.take_finished();
    fin.sort_by_key(|f| f.id);
    let calls = calls.lock().unwrap().clone();
    Ok((sizes, fin, calls))
}

struct Logged {
    inner: NcclCollective,
    calls: std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>,
}

impl Collective for Logged {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn broadcast_i32(
        &mut self,
        buf: &mut Vec<i32>,
        root: usize,
    ) -> Result<(), sampler_host::dist::collective::CollectiveError> {
        self.inner.broadcast_i32(buf, root)?;
        self.calls.lock().unwrap().push("broadcast");
        Ok(())
    }
    fn barrier(&mut self) -> Result<(), sampler_host::dist::collective::CollectiveError> {
        self.inner.barrier()?;
        self.calls.lock().unwrap().push("barrier");
        Ok(())
    }
}

fn main() {
    let id = match NcclCollective::unique_id() {
        Ok(id) => id,
        Err(e) => {
            println!("cp_nccl: SKIPPED ({e})");
            return;
        }
    };
    let gpus = NcclCollective::device_count();
    if gpus < 2 {
        println!("cp_nccl: SKIPPED (needs 2 GPUs, found {gpus})");
        return;
    }
    let spawn = |r: usize, role: Role| {
        std::thread::spawn(move || {
            let c = NcclCollective::new(r, 2, r, &id).map_err(|e| e.to_string())?;
            rank(c, role)
        })
    };
    let d = spawn(0, Role::Driver);
    let f = spawn(1, Role::Follower);
    let (d, f) = (d.join().expect("driver thread"), f.join().expect("follower thread"));
    let ((dsizes, dfin, dcalls), (fsizes, ffin, fcalls)) = match (d, f) {
        (Ok(d), Ok(f)) => (d, f),
        (d, f) => {
            println!("cp_nccl: FAILED driver {:?} follower {:?}", d.err(), f.err());
            std::process::exit(1);
        }
    };
    let mut solo = Engine::new(sampler(), config(Role::Driver)).expect("engine");
    for r in requests() {
        solo.add_request(r).expect("request");
    }
    solo.run_to_completion(&mut SyntheticModel::new(V as usize, 8, 0.6), 1000).expect("solo run");
    let mut sfin = solo.take_finished();
    sfin.sort_by_key(|f| f.id);
    let checks = [
        ("same number of steps", dsizes.len() == fsizes.len()),
        ("follower output empty every step", fsizes.iter().all(|&n| n == 0)),
        ("same collectives in the same order", dcalls == fcalls && !dcalls.is_empty()),
        ("a barrier was performed", dcalls.contains(&"barrier")),
        (
            "same tokens on both ranks",
            dfin.iter().zip(&ffin).all(|(a, b)| a.output == b.output && a.accepted == b.accepted)
                && dfin.len() == ffin.len(),
        ),
        (
            "driver equals a single-rank run",
            dfin.iter().zip(&sfin).all(|(a, b)| a.output == b.output) && dfin.len() == sfin.len(),
        ),
    ];
    println!(
        "cp_nccl: 2 ranks over NCCL on GPUs 0 and 1: {} steps, {} collectives per rank",
        dsizes.len(),
        dcalls.len()
    );
    let mut ok = true;
    for (what, pass) in checks {
        println!("  {} {what}", if pass { "ok  " } else { "FAIL" });
        ok &= pass;
    }
    std::process::exit(if ok { 0 } else { 1 });
}
