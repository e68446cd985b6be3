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
/// of the offending tokens; the user's item is re-emitted so editors keep working.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    sampler_dsl::expand(attr.into(), item.into()).into()
}
