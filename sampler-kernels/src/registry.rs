//! The registry of kernels: every `#[kernel]` submits its `KernelSpec`.

extern crate alloc;

use crate::spec::KernelSpec;

inventory::collect!(KernelSpec);

/// Keeps the linker from dropping the submissions (inventory#7): call it
/// before iterating from another crate.
#[inline(never)]
pub fn link() {
    core::hint::black_box(crate::kernels::process::NAME.len());
}

/// Every registered kernel, in name order (the one list: regenerate, the
/// tests and the backends all take it from here).
pub fn all() -> impl Iterator<Item = &'static KernelSpec> {
    link();
    let mut v: alloc::vec::Vec<&'static KernelSpec> = inventory::iter::<KernelSpec>.into_iter().collect();
    v.sort_by_key(|k| k.name);
    v.into_iter()
}

/// A registered kernel by name.
pub fn find(name: &str) -> Option<&'static KernelSpec> {
    all().find(|k| k.name == name)
}
