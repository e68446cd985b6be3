//! `#[kernel]`: compiles a function written in the sampler tile DSL.
//!
//! A thin shell over `sampler-dsl`, which holds the parser, the tile IR and
//! the emitters so they can be unit-tested on stable Rust. See
//! `docs/DSL.md` for the language.

use proc_macro::TokenStream;

/// Compiles a sampler kernel written in the tile DSL.
///
/// `#[kernel(tile = [1024, 4096], threads = [256, 512])]` on a function whose
/// parameters are `Gm<T>` / `GmMut<T>` global buffers and scalars, and whose
/// body uses the DSL's tile ops. Emits a module of the same name with the
/// host (CPU) program, the nvptx entry points (one per tile variant, when
/// compiled for `nvptx64-nvidia-cuda`), the AscendC source, and an
/// `inventory` registration. Errors are reported together, each on the span
/// of the offending tokens; on an error only the errors are emitted (the
/// user's item is not re-emitted, so rustc adds no errors of its own).
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    sampler_dsl::expand(attr.into(), item.into()).into()
}

/// A helper function of the tile DSL, callable from `#[kernel]`s and
/// other helpers, and inlined into them.
///
/// Parameters are tiles (`Tile<T>`), buffers (`Gm<T>` / `GmMut<T>`, passed
/// as the kernel's buffer parameters) and scalars; it returns nothing, a
/// scalar, a tile or a tuple of them (its last expression). A call stands
/// alone: `let v = h(..);`, `let (a, b) = h(..);`, `x = h(..);` or `h(..);`.
/// Define it above the kernels that call it, in the same module (it
/// expands to a `macro_rules!` of its name). See docs/DSL.md.
#[proc_macro_attribute]
pub fn kernel_fn(attr: TokenStream, item: TokenStream) -> TokenStream {
    sampler_dsl::kfn::expand(attr.into(), item.into()).into()
}

/// Internal to `#[kernel]`: the end of a `#[kernel_fn]` fetch.
#[doc(hidden)]
#[proc_macro]
pub fn __kernel_resolved(input: TokenStream) -> TokenStream {
    sampler_dsl::expand_resolved(input.into()).into()
}
