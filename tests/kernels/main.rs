//! The kernels: their CPU programs, registry and codes, and authoring new ones (kernels defined here
//! join the registry, so the PTX checks, which walk it, are a binary of their own: tests/ptx).
//! One test binary; each module is a former `tests/<name>.rs`.

#[path = "../common/mod.rs"]
mod common;

mod author_kernels;
mod codes;
mod fused_kernels;
mod kernel_example;
mod registry;
