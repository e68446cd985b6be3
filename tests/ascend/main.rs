//! The AscendC sources under the emulator (slow: `cargo test --test ascend`).
//! One test binary; each module is a former `tests/<name>.rs`.

#[path = "../common/mod.rs"]
mod common;

mod emu_selftest;
mod emulation;
