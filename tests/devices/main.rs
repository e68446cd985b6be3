//! The devices: CUDA (skipped without a GPU), host logits dtypes, the prefix path.
//! One test binary; each module is a former `tests/<name>.rs`.

#[path = "../common/mod.rs"]
mod common;

mod cuda_backend;
mod cuda_counts;
mod host_logits;
mod prefix_path;
