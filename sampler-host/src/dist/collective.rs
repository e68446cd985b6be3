//! Context parallelism (SAMPLER.md section 9, the seed's follower rank).
//!
//! Only the driver rank samples. A follower rank runs the same schedule and
//! takes part in every collective the driver's step performs (a barrier
//! standing for the prompt-logprobs gather, then the broadcast of the step's
//! sampled tokens and drafts), applies what it receives so its request state
//! stays identical, and returns an empty step output.
//!
//! [`LocalCollective`] runs ranks as threads of one process (channels); it is
//! what the tests use. [`NcclCollective`] is the multi-GPU path: NCCL
//! through cudarc's bindings loaded at run time (`examples/cp_nccl.rs` runs
//! two ranks on two GPUs; see docs/bench/run3/NOTES.md for its run).

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
    Peer {
        /// The rank.
        rank: usize,
        /// What happened.
        msg: String,
    },
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
    /// All-gather: rank r contributes `send` (`counts[r]` values; every rank
    /// passes the same `counts`, `world_size()` of them) and every rank gets
    /// all contributions concatenated in rank order. The vocabulary-parallel
    /// step (`crate::dist::vocab`) exchanges its candidates with it. The default runs
    /// one broadcast per rank. Errors: a peer failure, or a contribution
    /// whose length is not its `counts` entry.
    fn all_gather_i32(&mut self, send: &[i32], counts: &[usize]) -> Result<Vec<i32>, CollectiveError> {
        check_counts(self.rank(), self.world_size(), send, counts)?;
        let mut out = Vec::with_capacity(counts.iter().sum());
        #[allow(clippy::needless_range_loop)]
        for root in 0..self.world_size() {
            let mut buf = if root == self.rank() { send.to_vec() } else { Vec::new() };
            self.broadcast_i32(&mut buf, root)?;
            if buf.len() != counts[root] {
                return Err(CollectiveError::Peer {
                    rank: root,
                    msg: format!("all-gather: sent {} values, counts says {}", buf.len(), counts[root]),
                });
            }
            out.extend_from_slice(&buf);
        }
        Ok(out)
    }
}

/// `counts` has one entry per rank and this rank's entry is `send.len()`.
fn check_counts(rank: usize, world: usize, send: &[i32], counts: &[usize]) -> Result<(), CollectiveError> {
    if counts.len() != world || counts.get(rank) != Some(&send.len()) {
        return Err(CollectiveError::Peer {
            rank,
            msg: format!(
                "all-gather: {} counts for {world} ranks, this rank sends {} values",
                counts.len(),
                send.len()
            ),
        });
    }
    Ok(())
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
        let mut senders: Vec<Vec<Option<Sender<Vec<i32>>>>> =
            (0..world).map(|_| (0..world).map(|_| None).collect()).collect();
        let mut receivers: Vec<Vec<Option<Receiver<Vec<i32>>>>> =
            (0..world).map(|_| (0..world).map(|_| None).collect()).collect();
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
                    return Err(CollectiveError::Peer {
                        rank: r,
                        msg: "collective order mismatch (expected barrier)".into(),
                    });
                }
            }
            for r in 1..self.world_size() {
                self.send(r, vec![TAG])?;
            }
        } else {
            self.send(0, vec![TAG])?;
            if self.recv(0)? != [TAG] {
                return Err(CollectiveError::Peer {
                    rank: 0,
                    msg: "collective order mismatch (expected barrier)".into(),
                });
            }
        }
        Ok(())
    }
    fn all_gather_i32(&mut self, send: &[i32], counts: &[usize]) -> Result<Vec<i32>, CollectiveError> {
        self.calls.push("all_gather");
        check_counts(self.rank, self.world_size(), send, counts)?;
        for r in (0..self.world_size()).filter(|&r| r != self.rank) {
            self.send(r, send.to_vec())?;
        }
        let mut out = Vec::with_capacity(counts.iter().sum());
        #[allow(clippy::needless_range_loop)]
        for r in 0..self.world_size() {
            if r == self.rank {
                out.extend_from_slice(send);
                continue;
            }
            let got = self.recv(r)?;
            if got.len() != counts[r] {
                return Err(CollectiveError::Peer {
                    rank: r,
                    msg: format!(
                        "all-gather: sent {} values, counts says {} (collective order mismatch?)",
                        got.len(),
                        counts[r]
                    ),
                });
            }
            out.extend_from_slice(&got);
        }
        Ok(out)
    }
}

/// The NCCL path: the collectives between GPUs of one host through cudarc's
/// NCCL bindings, loaded at run time (no NCCL or CUDA needed to build).
///
/// Rank 0 creates the id with [`NcclCollective::unique_id`] and shares its
/// 128 bytes with the other ranks out of band; each rank then joins with
/// [`NcclCollective::new`] on its own GPU. A broadcast sends the length
/// first, then the values; a barrier is an all-reduce of one value.
/// Without the CUDA driver or libnccl both return [`CollectiveError::Unavailable`].
pub struct NcclCollective {
    comm: SendComm,
    stream: std::sync::Arc<cudarc::driver::CudaStream>,
    /// Collectives performed (broadcasts, barriers), for tests.
    pub calls: Vec<&'static str>,
}

impl std::fmt::Debug for NcclCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclCollective")
            .field("rank", &self.comm.rank())
            .field("world", &self.comm.world_size())
            .finish()
    }
}

/// An NCCL communicator owned by one rank's thread.
struct SendComm(cudarc::nccl::Comm);

// SAFETY: a communicator may be used from any thread as long as calls on it
// are not concurrent; a rank's collective is owned (and called) by one thread.
unsafe impl Send for SendComm {}

impl std::ops::Deref for SendComm {
    type Target = cudarc::nccl::Comm;
    fn deref(&self) -> &cudarc::nccl::Comm {
        &self.0
    }
}

/// The 128-byte NCCL unique id that rank 0 shares with the other ranks.
pub type NcclId = [core::ffi::c_char; 128];

fn nccl_present() -> Result<(), CollectiveError> {
    // SAFETY: the probes only try to open the shared libraries.
    let driver = unsafe { cudarc::driver::sys::is_culib_present() };
    let nccl = driver && unsafe { cudarc::nccl::sys::is_culib_present() };
    if !driver {
        return Err(CollectiveError::Unavailable("nccl", "no CUDA driver found".into()));
    }
    if !nccl {
        return Err(CollectiveError::Unavailable("nccl", "libnccl not found".into()));
    }
    Ok(())
}

fn nccl_err(rank: usize, what: &str, e: impl std::fmt::Debug) -> CollectiveError {
    CollectiveError::Peer { rank, msg: format!("{what}: {e:?}") }
}

impl NcclCollective {
    /// A new NCCL unique id (on rank 0).
    pub fn unique_id() -> Result<NcclId, CollectiveError> {
        nccl_present()?;
        let id = cudarc::nccl::Id::new().map_err(|e| nccl_err(0, "ncclGetUniqueId", e))?;
        Ok(*id.internal())
    }

    /// Number of CUDA devices (0 without a driver).
    pub fn device_count() -> usize {
        if nccl_present().is_err() {
            return 0;
        }
        cudarc::driver::CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
    }

    /// Joins the communicator of `world` ranks as `rank`, on GPU `ordinal`.
    /// Blocks until every rank has joined (call from one thread or process per rank).
    pub fn new(rank: usize, world: usize, ordinal: usize, id: &NcclId) -> Result<NcclCollective, CollectiveError> {
        nccl_present()?;
        let ctx = cudarc::driver::CudaContext::new(ordinal).map_err(|e| nccl_err(rank, "CUDA context", e))?;
        let stream = ctx.new_stream().map_err(|e| nccl_err(rank, "CUDA stream", e))?;
        let comm = cudarc::nccl::Comm::from_rank(stream.clone(), rank, world, cudarc::nccl::Id::uninit(*id))
            .map_err(|e| nccl_err(rank, "ncclCommInitRank", e))?;
        Ok(NcclCollective { comm: SendComm(comm), stream, calls: Vec::new() })
    }

    /// Median seconds of `reps` device-resident all-gathers of `count` i32
    /// per rank (buffers on this rank's GPU, no host staging, after one
    /// warm-up): the exchange cost an engine with device-resident payloads
    /// pays. Every rank must call it with the same arguments. For benchmarks
    /// (`examples/vocab_parallel.rs`).
    pub fn time_all_gather_device(&mut self, count: usize, reps: usize) -> Result<f64, CollectiveError> {
        let (rank, world) = (self.comm.rank(), self.comm.world_size());
        let send = self.stream.alloc_zeros::<i32>(count.max(1)).map_err(|e| nccl_err(rank, "alloc", e))?;
        let mut recv = self.stream.alloc_zeros::<i32>(count.max(1) * world).map_err(|e| nccl_err(rank, "alloc", e))?;
        let mut times = Vec::with_capacity(reps);
        for i in 0..=reps {
            let t = std::time::Instant::now();
            self.comm.all_gather(&send, &mut recv).map_err(|e| nccl_err(rank, "ncclAllGather", e))?;
            self.stream.synchronize().map_err(|e| nccl_err(rank, "synchronize", e))?;
            if i > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        times.sort_by(f64::total_cmp);
        Ok(times.get(times.len() / 2).copied().unwrap_or(0.0))
    }

    fn bcast(&mut self, host: &mut Vec<i32>, root: usize) -> Result<(), CollectiveError> {
        let rank = self.comm.rank();
        let mut dev = if rank == root {
            self.stream.clone_htod(host).map_err(|e| nccl_err(rank, "upload", e))?
        } else {
            self.stream.alloc_zeros::<i32>(host.len()).map_err(|e| nccl_err(rank, "alloc", e))?
        };
        self.comm.broadcast_in_place(&mut dev, root as i32).map_err(|e| nccl_err(rank, "ncclBroadcast", e))?;
        *host = self.stream.clone_dtoh(&dev).map_err(|e| nccl_err(rank, "download", e))?;
        Ok(())
    }
}

impl Collective for NcclCollective {
    fn rank(&self) -> usize {
        self.comm.rank()
    }
    fn world_size(&self) -> usize {
        self.comm.world_size()
    }
    fn broadcast_i32(&mut self, buf: &mut Vec<i32>, root: usize) -> Result<(), CollectiveError> {
        let mut len = vec![buf.len() as i32];
        self.bcast(&mut len, root)?;
        if self.comm.rank() != root {
            *buf = vec![0; len[0].max(0) as usize];
        }
        if !buf.is_empty() {
            self.bcast(buf, root)?;
        }
        self.calls.push("broadcast");
        Ok(())
    }
    fn barrier(&mut self) -> Result<(), CollectiveError> {
        let rank = self.comm.rank();
        let mut one = self.stream.clone_htod(&[1i32]).map_err(|e| nccl_err(rank, "upload", e))?;
        self.comm
            .all_reduce_in_place(&mut one, &cudarc::nccl::ReduceOp::Sum)
            .map_err(|e| nccl_err(rank, "ncclAllReduce", e))?;
        let sum = self.stream.clone_dtoh(&one).map_err(|e| nccl_err(rank, "download", e))?;
        if sum[0] as usize != self.comm.world_size() {
            return Err(nccl_err(
                rank,
                "barrier",
                format!("all-reduce gave {} for {} ranks", sum[0], self.comm.world_size()),
            ));
        }
        self.calls.push("barrier");
        Ok(())
    }
    /// One `ncclAllGather` of `max(counts)` values per rank (shorter
    /// contributions padded), through device buffers on this rank's stream.
    fn all_gather_i32(&mut self, send: &[i32], counts: &[usize]) -> Result<Vec<i32>, CollectiveError> {
        let (rank, world) = (self.comm.rank(), self.comm.world_size());
        check_counts(rank, world, send, counts)?;
        let max = counts.iter().copied().max().unwrap_or(0);
        if max > 0 {
            let mut padded = send.to_vec();
            padded.resize(max, 0);
            let sbuf = self.stream.clone_htod(&padded).map_err(|e| nccl_err(rank, "upload", e))?;
            let mut rbuf = self.stream.alloc_zeros::<i32>(max * world).map_err(|e| nccl_err(rank, "alloc", e))?;
            self.comm.all_gather(&sbuf, &mut rbuf).map_err(|e| nccl_err(rank, "ncclAllGather", e))?;
            let all = self.stream.clone_dtoh(&rbuf).map_err(|e| nccl_err(rank, "download", e))?;
            self.calls.push("all_gather");
            return Ok(counts
                .iter()
                .enumerate()
                .flat_map(|(r, &c)| all[r * max..r * max + c].iter().copied())
                .collect());
        }
        self.calls.push("all_gather");
        Ok(Vec::new())
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
