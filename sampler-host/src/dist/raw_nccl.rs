//! A [`Collective`] over an NCCL communicator the engine already has (its
//! tensor-parallel group's raw `ncclComm_t`), so the vocabulary-parallel
//! step needs no second communicator. NCCL and the CUDA driver are loaded
//! at run time through cudarc, as for [`crate::dist::collective::NcclCollective`].

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nccl::{result, sys};

use crate::dist::collective::{Collective, CollectiveError};

/// The engine's NCCL communicator, used on the engine's CUDA stream.
///
/// Collectives stage through device buffers on `stream` and synchronise it
/// before returning (the host reads the result). A broadcast sends the
/// length first, then the values; a barrier is an all-reduce of one value;
/// an all-gather is one `ncclAllGather` of the largest contribution.
pub struct RawNcclCollective {
    comm: sys::ncclComm_t,
    stream: Arc<CudaStream>,
    rank: usize,
    world: usize,
}

// SAFETY: the communicator is used by one thread at a time (`&mut self`);
// `new`'s contract forbids concurrent use from elsewhere.
unsafe impl Send for RawNcclCollective {}

impl std::fmt::Debug for RawNcclCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawNcclCollective").field("rank", &self.rank).field("world", &self.world).finish()
    }
}

fn err(rank: usize, what: &str, e: impl std::fmt::Debug) -> CollectiveError {
    CollectiveError::Peer { rank, msg: format!("{what}: {e:?}") }
}

impl RawNcclCollective {
    /// Wraps `comm`; its rank and size are read from NCCL.
    ///
    /// Errors: [`CollectiveError::Unavailable`] without a CUDA driver or
    /// libnccl; a `Peer` error when NCCL refuses the communicator.
    ///
    /// # Safety
    /// `comm` is a live, initialised communicator whose device is
    /// `stream`'s; it outlives the returned value, which is its only user
    /// while a collective runs (NCCL communicators are not thread-safe).
    pub unsafe fn new(comm: sys::ncclComm_t, stream: Arc<CudaStream>) -> Result<Self, CollectiveError> {
        // SAFETY: the probes only try to open the shared libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } || !unsafe { sys::is_culib_present() } {
            return Err(CollectiveError::Unavailable("nccl", "no CUDA driver or libnccl found".into()));
        }
        // SAFETY: `comm` is live (contract).
        let world = unsafe { result::comm_count(comm) }.map_err(|e| err(0, "ncclCommCount", e))? as usize;
        let rank = unsafe { result::comm_user_rank(comm) }.map_err(|e| err(0, "ncclCommUserRank", e))? as usize;
        Ok(RawNcclCollective { comm, stream, rank, world })
    }

    fn upload(&self, h: &[i32]) -> Result<CudaSlice<i32>, CollectiveError> {
        if h.is_empty() {
            return self.stream.alloc_zeros::<i32>(1).map_err(|e| err(self.rank, "alloc", e));
        }
        self.stream.clone_htod(h).map_err(|e| err(self.rank, "upload", e))
    }
    fn download(&self, d: &CudaSlice<i32>, len: usize) -> Result<Vec<i32>, CollectiveError> {
        let mut v = self.stream.clone_dtoh(d).map_err(|e| err(self.rank, "download", e))?;
        v.truncate(len);
        Ok(v)
    }
    fn bcast(&mut self, host: &mut Vec<i32>, root: usize) -> Result<(), CollectiveError> {
        let len = host.len();
        let mut d = self.upload(host)?;
        let cs = self.stream.cu_stream();
        {
            let (p, _g) = d.device_ptr_mut(&self.stream);
            // SAFETY: `d` holds `len` i32 on this communicator's device; in-place broadcast.
            unsafe {
                result::broadcast(p as _, p as _, len, sys::ncclDataType_t::ncclInt32, root as i32, self.comm, cs as _)
            }
            .map_err(|e| err(self.rank, "ncclBroadcast", e))?;
        }
        *host = self.download(&d, len)?;
        Ok(())
    }
}

impl Collective for RawNcclCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn broadcast_i32(&mut self, buf: &mut Vec<i32>, root: usize) -> Result<(), CollectiveError> {
        let mut len = vec![buf.len() as i32];
        self.bcast(&mut len, root)?;
        if self.rank != root {
            *buf = vec![0; len[0].max(0) as usize];
        }
        if !buf.is_empty() {
            self.bcast(buf, root)?;
        }
        Ok(())
    }
    fn barrier(&mut self) -> Result<(), CollectiveError> {
        let mut one = self.upload(&[1])?;
        let cs = self.stream.cu_stream();
        {
            let (p, _g) = one.device_ptr_mut(&self.stream);
            // SAFETY: one i32 on this device, reduced in place.
            unsafe {
                result::all_reduce(
                    p as _,
                    p as _,
                    1,
                    sys::ncclDataType_t::ncclInt32,
                    sys::ncclRedOp_t::ncclSum,
                    self.comm,
                    cs as _,
                )
            }
            .map_err(|e| err(self.rank, "ncclAllReduce", e))?;
        }
        let sum = self.download(&one, 1)?;
        if sum[0] as usize != self.world {
            return Err(err(self.rank, "barrier", format!("all-reduce gave {} for {} ranks", sum[0], self.world)));
        }
        Ok(())
    }
    fn all_gather_i32(&mut self, send: &[i32], counts: &[usize]) -> Result<Vec<i32>, CollectiveError> {
        if counts.len() != self.world || counts.get(self.rank) != Some(&send.len()) {
            return Err(err(
                self.rank,
                "all-gather",
                format!("{} counts for {} ranks, this rank sends {}", counts.len(), self.world, send.len()),
            ));
        }
        let max = counts.iter().copied().max().unwrap_or(0);
        if max == 0 {
            return Ok(Vec::new());
        }
        let mut padded = send.to_vec();
        padded.resize(max, 0);
        let s = self.upload(&padded)?;
        let mut r = self.stream.alloc_zeros::<i32>(max * self.world).map_err(|e| err(self.rank, "alloc", e))?;
        let cs = self.stream.cu_stream();
        {
            let (sp, _g1) = s.device_ptr(&self.stream);
            let (rp, _g2) = r.device_ptr_mut(&self.stream);
            // SAFETY: `s` holds `max` i32 and `r` `max * world` on this device.
            unsafe { result::all_gather(sp as _, rp as _, max, sys::ncclDataType_t::ncclInt32, self.comm, cs as _) }
                .map_err(|e| err(self.rank, "ncclAllGather", e))?;
        }
        let all = self.download(&r, max * self.world)?;
        Ok(counts.iter().enumerate().flat_map(|(q, &c)| all[q * max..q * max + c].iter().copied()).collect())
    }
}
