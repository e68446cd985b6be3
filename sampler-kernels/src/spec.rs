//! Kernel descriptions emitted by `#[kernel]` (no_std: used on every target).

/// Element types of kernel parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prim {
    Bool,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

/// How a parameter is passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A read-only global buffer of this element type.
    Gm(Prim),
    /// A writable global buffer of this element type.
    GmMut(Prim),
    /// A scalar passed by value.
    Scalar(Prim),
}

/// One kernel parameter.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
}

/// One tile variant: its tile size, its NVIDIA block size and PTX entry name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub tile: u32,
    pub threads: u32,
    pub entry: &'static str,
}

/// A registered kernel (host builds only).
#[cfg(not(target_arch = "nvptx64"))]
#[derive(Clone, Copy)]
pub struct KernelSpec {
    pub name: &'static str,
    pub params: &'static [ParamSpec],
    pub variants: &'static [Variant],
    /// AscendC source, when the AscendC emitter supports this kernel.
    pub ascendc: Option<&'static str>,
    /// The host program with run-time checked arguments.
    pub cpu: unsafe fn(u32, &[crate::rt::cpu::Arg]) -> Result<(), crate::rt::cpu::ArgError>,
}

#[cfg(not(target_arch = "nvptx64"))]
impl core::fmt::Debug for KernelSpec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KernelSpec").field("name", &self.name).field("params", &self.params).field("variants", &self.variants).finish()
    }
}

impl Variant {
    /// The smallest variant whose tile holds `n` elements.
    pub fn pick(variants: &'static [Variant], n: u32) -> Option<&'static Variant> {
        variants.iter().filter(|v| v.tile >= n).min_by_key(|v| v.tile)
    }
}
