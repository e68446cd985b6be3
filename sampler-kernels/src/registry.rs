//! The registry of kernels: every `#[kernel]` submits its `KernelSpec`.

use crate::spec::KernelSpec;

inventory::collect!(KernelSpec);

/// Keeps the linker from dropping the submissions (inventory#7): call it
/// before iterating from another crate.
#[inline(never)]
pub fn link() {
    core::hint::black_box(crate::kernels::ALL.len());
}

/// Every registered kernel.
pub fn all() -> impl Iterator<Item = &'static KernelSpec> {
    link();
    inventory::iter::<KernelSpec>.into_iter()
}

/// A registered kernel by name.
pub fn find(name: &str) -> Option<&'static KernelSpec> {
    all().find(|k| k.name == name)
}
