//! Engine: context parallelism (SAMPLER.md section 9). Two ranks as two
//! threads of one process: only the driver samples, the follower joins every
//! collective and returns an empty output, and both end with the same tokens.
//! The NCCL path (several GPUs) is not exercised here: it is untested.

use std::sync::{Arc, Mutex};

use sampler_host::dist::collective::{Collective, CollectiveError, LocalCollective, NcclCollective, Role};
use sampler_host::engine::{Engine, EngineConfig, EngineError, EngineRequest, Finished, NoModel, SyntheticModel};
use sampler_host::{BackendKind, Sampler, SamplerConfig, SamplingParams};

/// The backend under test: `SAMPLER_ENGINE_BACKEND=cuda` runs these tests on
/// the GPU (the GPU suite); the default is the CPU.
fn test_backend() -> BackendKind {
    std::env::var("SAMPLER_ENGINE_BACKEND").ok().and_then(|s| s.parse().ok()).unwrap_or(BackendKind::Cpu)
}

/// Records the collectives a rank performs.
struct Logged {
    inner: LocalCollective,
    log: Arc<Mutex<Vec<String>>>,
}

impl Collective for Logged {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn broadcast_i32(&mut self, buf: &mut Vec<i32>, root: usize) -> Result<(), CollectiveError> {
        self.inner.broadcast_i32(buf, root)?;
        self.log.lock().unwrap().push(format!("broadcast {}", buf.len()));
        Ok(())
    }
    fn barrier(&mut self) -> Result<(), CollectiveError> {
        self.inner.barrier()?;
        self.log.lock().unwrap().push("barrier".into());
        Ok(())
    }
}

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

fn rank(c: Logged, role: Role) -> (Vec<usize>, Vec<Finished>) {
    let s = Sampler::new(SamplerConfig { vocab_size: V, force_topk: 64, nextn: 4, backend: test_backend() }).unwrap();
    let cfg = EngineConfig { max_num_seqs: 2, nextn: 4, prefill_chunk: 16, role, ..Default::default() };
    let mut e = Engine::with_collective(s, cfg, Box::new(c)).unwrap();
    for r in requests() {
        e.add_request(r).unwrap();
    }
    let mut model = SyntheticModel::new(V as usize, 8, 0.6);
    let mut sizes = Vec::new();
    while e.pending() > 0 {
        let r = match role {
            Role::Driver => e.step(&mut model).unwrap(),
            Role::Follower => e.step(&mut NoModel).unwrap(),
        };
        sizes.push(r.requests.len());
    }
    let mut fin = e.take_finished();
    fin.sort_by_key(|f| f.id);
    (sizes, fin)
}

#[test]
fn two_ranks_driver_samples_follower_returns_empty() {
    let mut group = LocalCollective::group(2).into_iter();
    let (c0, c1) = (group.next().unwrap(), group.next().unwrap());
    let (log0, log1) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let (l0, l1) = (log0.clone(), log1.clone());
    let d = std::thread::spawn(move || rank(Logged { inner: c0, log: l0 }, Role::Driver));
    let f = std::thread::spawn(move || rank(Logged { inner: c1, log: l1 }, Role::Follower));
    let (dsizes, dfin) = d.join().unwrap();
    let (fsizes, ffin) = f.join().unwrap();
    assert_eq!(dsizes.len(), fsizes.len(), "same number of steps");
    assert!(dsizes.iter().all(|&n| n > 0));
    assert!(fsizes.iter().all(|&n| n == 0), "the follower returns an empty output every step");
    // Every collective the driver performs, the follower performs too, in order.
    let (l0, l1) = (log0.lock().unwrap().clone(), log1.lock().unwrap().clone());
    assert_eq!(l0, l1);
    assert!(l0.iter().any(|c| c == "barrier"), "prompt-logprobs steps have a barrier");
    assert_eq!(l0.iter().filter(|c| c.starts_with("broadcast")).count(), dsizes.len());
    // Both ranks see the same tokens.
    assert_eq!(dfin.len(), 3);
    for (a, b) in dfin.iter().zip(&ffin) {
        assert_eq!(a.id, b.id);
        assert!(a.status.is_ok());
        assert_eq!(a.output, b.output);
        assert_eq!(
            a.output_logprobs.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            b.output_logprobs.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(a.accepted, b.accepted);
    }
    assert_eq!(dfin[0].prompt_logprobs.len(), 40, "prompt logprobs are valid on the driver only");
    assert!(ffin[0].prompt_logprobs.is_empty());
    assert_eq!(&dfin[1].output[..10], &(700..710).collect::<Vec<_>>()[..]);
    // The driver's tokens equal a single-rank run's.
    let s = Sampler::new(SamplerConfig { vocab_size: V, force_topk: 64, nextn: 4, backend: test_backend() }).unwrap();
    let mut solo =
        Engine::new(s, EngineConfig { max_num_seqs: 2, nextn: 4, prefill_chunk: 16, ..Default::default() }).unwrap();
    for r in requests() {
        solo.add_request(r).unwrap();
    }
    solo.run_to_completion(&mut SyntheticModel::new(V as usize, 8, 0.6), 1000).unwrap();
    let mut sfin = solo.take_finished();
    sfin.sort_by_key(|f| f.id);
    for (a, b) in dfin.iter().zip(&sfin) {
        assert_eq!(a.output, b.output);
    }
}

#[test]
fn roles_and_nccl_stub() {
    let s = || Sampler::new(SamplerConfig { vocab_size: V, force_topk: 0, nextn: 1, backend: test_backend() }).unwrap();
    let mut g = LocalCollective::group(2);
    let c1 = g.pop().unwrap();
    // Rank 1 cannot be the driver.
    let e =
        Engine::with_collective(s(), EngineConfig { role: Role::Driver, nextn: 1, ..Default::default() }, Box::new(c1));
    assert!(matches!(&e, Err(EngineError::Config(m)) if m.contains("rank 1")), "{e:?}");
    // Without a CUDA driver (or libnccl) NCCL is a typed error, no panic.
    if !sampler_host::runtime::device::cuda::driver_present() {
        assert!(matches!(NcclCollective::unique_id(), Err(CollectiveError::Unavailable("nccl", _))));
        assert!(matches!(NcclCollective::new(0, 2, 0, &[0; 128]), Err(CollectiveError::Unavailable("nccl", _))));
    } else {
        eprintln!("roles_and_nccl_stub: a CUDA driver is present; the two-GPU NCCL run is examples/cp_nccl.rs");
    }
    // A peer that went away is an error, not a hang.
    let mut g = LocalCollective::group(2);
    drop(g.pop());
    let mut c0 = g.pop().unwrap();
    assert!(c0.barrier().is_err());
}
