//! The distributed layers: the collectives ([`collective`]: in-process
//! threads, NCCL) and vocabulary-parallel sampling ([`vocab`]: each rank
//! holds a slice of every logits row).

pub mod collective;
pub mod raw_nccl;
pub mod vocab;

pub use collective::{Collective, CollectiveError, LocalCollective, NcclCollective, SoloCollective};
pub use raw_nccl::RawNcclCollective;
