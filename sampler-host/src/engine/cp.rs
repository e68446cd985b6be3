//! Context parallelism (SAMPLER.md section 9, the seed's follower rank).
//!
//! Only the driver rank samples. A follower rank runs the same schedule and
//! takes part in every collective the driver's step performs (a barrier
//! standing for the prompt-logprobs gather, then the broadcast of the step's
//! sampled tokens and drafts), applies what it receives so its request state
//! stays identical, and returns an empty step output.
//!
//! [`LocalCollective`] runs ranks as threads of one process (channels); it is
//! what the tests use. [`NcclCollective`] is the multi-GPU path: it would
//! broadcast with NCCL through cudarc's bindings loaded at run time; in this
//! build it is a documented stub that returns
//! [`CollectiveError::Unavailable`] (the NCCL path is untested).

use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use thiserror::Error;

/// A rank's role in the step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// Samples and broadcasts (rank 0).
    #[default]
    Driver,
    /// Joins the collectives, returns empty outputs.
    Follower,
}

/// A collective failed.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum CollectiveError {
    /// The backend is not available in this build or on this machine.
    #[error("collective backend `{0}` is not available: {1}")]
    Unavailable(&'static str, String),
    /// A peer went away or did not answer in time.
    #[error("rank {rank}: {msg}")]
    Peer { rank: usize, msg: String },
}

/// The collectives the engine's step uses.
pub trait Collective: Send {
    /// This rank.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn world_size(&self) -> usize;
    /// Broadcast from `root`: on `root` `buf` is sent, on the others it is
    /// replaced by what `root` sent (any length).
    fn broadcast_i32(&mut self, buf: &mut Vec<i32>, root: usize) -> Result<(), CollectiveError>;
    /// Every rank waits until all have arrived.
    fn barrier(&mut self) -> Result<(), CollectiveError>;
}

/// A rank of an in-process group (threads and channels).
#[derive(Debug)]
pub struct LocalCollective {
    rank: usize,
    to: Vec<Sender<Vec<i32>>>,
    from: Vec<Receiver<Vec<i32>>>,
    timeout: Duration,
    /// Collectives performed (broadcasts, barriers), for tests.
    pub calls: Vec<&'static str>,
}

impl LocalCollective {
    /// `world` connected ranks (move each to its thread).
    pub fn group(world: usize) -> Vec<LocalCollective> {
        // chans[i][j]: i -> j.
        let mut senders: Vec<Vec<Option<Sender<Vec<i32>>>>> = (0..world).map(|_| (0..world).map(|_| None).collect()).collect();
        let mut receivers: Vec<Vec<Option<Receiver<Vec<i32>>>>> = (0..world).map(|_| (0..world).map(|_| None).collect()).collect();
        for i in 0..world {
            for j in 0..world {
                let (s, r) = channel();
                senders[i][j] = Some(s);
                receivers[j][i] = Some(r);
            }
        }
        senders
            .into_iter()
            .zip(receivers)
            .enumerate()
            .map(|(rank, (s, r))| LocalCollective {
                rank,
                to: s.into_iter().map(Option::unwrap).collect(),
                from: r.into_iter().map(Option::unwrap).collect(),
                timeout: Duration::from_secs(60),
                calls: Vec::new(),
            })
            .collect()
    }
    fn send(&self, to: usize, v: Vec<i32>) -> Result<(), CollectiveError> {
        self.to[to].send(v).map_err(|_| CollectiveError::Peer { rank: to, msg: "peer hung up".into() })
    }
    fn recv(&self, from: usize) -> Result<Vec<i32>, CollectiveError> {
        self.from[from].recv_timeout(self.timeout).map_err(|e| CollectiveError::Peer {
            rank: from,
            msg: match e {
                RecvTimeoutError::Timeout => "timed out waiting for a collective".into(),
                RecvTimeoutError::Disconnected => "peer hung up".into(),
            },
        })
    }
}

impl Collective for LocalCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.to.len()
    }
    fn broadcast_i32(&mut self, buf: &mut Vec<i32>, root: usize) -> Result<(), CollectiveError> {
        self.calls.push("broadcast");
        if self.rank == root {
            for r in (0..self.world_size()).filter(|&r| r != root) {
                self.send(r, buf.clone())?;
            }
        } else {
            *buf = self.recv(root)?;
        }
        Ok(())
    }
    fn barrier(&mut self) -> Result<(), CollectiveError> {
        self.calls.push("barrier");
        const TAG: i32 = i32::MIN + 7;
        if self.rank == 0 {
            for r in 1..self.world_size() {
                if self.recv(r)? != [TAG] {
                    return Err(CollectiveError::Peer { rank: r, msg: "collective order mismatch (expected barrier)".into() });
                }
            }
            for r in 1..self.world_size() {
                self.send(r, vec![TAG])?;
            }
        } else {
            self.send(0, vec![TAG])?;
            if self.recv(0)? != [TAG] {
                return Err(CollectiveError::Peer { rank: 0, msg: "collective order mismatch (expected barrier)".into() });
            }
        }
        Ok(())
    }
}

/// The NCCL path: broadcast of sampled tokens between GPUs of one host via
/// cudarc's NCCL bindings loaded at run time. Not built in this crate yet:
/// [`NcclCollective::new`] returns [`CollectiveError::Unavailable`].
/// **Untested**: no multi-GPU run has exercised it.
#[derive(Debug)]
pub struct NcclCollective {
    rank: usize,
    world: usize,
}

impl NcclCollective {
    /// Joins an NCCL communicator (`unique_id` from rank 0). Always
    /// [`CollectiveError::Unavailable`] in this build.
    pub fn new(rank: usize, world: usize, _unique_id: &[u8]) -> Result<NcclCollective, CollectiveError> {
        let _ = NcclCollective { rank, world };
        Err(CollectiveError::Unavailable("nccl", "this build has no NCCL bindings (cudarc NCCL is loaded at run time by the CUDA backend; untested)".into()))
    }
}

impl Collective for NcclCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn broadcast_i32(&mut self, _buf: &mut Vec<i32>, _root: usize) -> Result<(), CollectiveError> {
        Err(CollectiveError::Unavailable("nccl", "not built".into()))
    }
    fn barrier(&mut self) -> Result<(), CollectiveError> {
        Err(CollectiveError::Unavailable("nccl", "not built".into()))
    }
}

/// A single-rank group (no communication): the default for a driver alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct SoloCollective;

impl Collective for SoloCollective {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn broadcast_i32(&mut self, _buf: &mut Vec<i32>, _root: usize) -> Result<(), CollectiveError> {
        Ok(())
    }
    fn barrier(&mut self) -> Result<(), CollectiveError> {
        Ok(())
    }
}
