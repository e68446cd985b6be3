//! Named tile variant sets: `#[kernel(variants = NAME)]` is
//! `#[kernel(tile = [..], threads = [..])]` with the lists of [`SETS`], so
//! kernels of one family share one list (docs/DSL.md, "Variant sets").

/// One named set of tile variants.
#[derive(Clone, Copy, Debug)]
pub struct VariantSet {
    /// The name written in `variants = NAME`.
    pub name: &'static str,
    /// The tile sizes, in order.
    pub tiles: &'static [u32],
    /// The block size of each tile (one each).
    pub threads: &'static [u32],
}

/// Every named set. Changing one changes the PTX entries of every kernel
/// that names it.
pub const SETS: &[VariantSet] = &[
    // Kernels over a row's N candidates, N up to V: register tiles up to
    // 16384, global scratch above (force top-k off).
    VariantSet {
        name: "CANDIDATES",
        tiles: &[64, 256, 1024, 4096, 16384, 131072, 262144, 524288],
        threads: &[64, 256, 512, 512, 1024, 1024, 1024, 1024],
    },
    // The fused kernels (`process_draw`, ..): register tiles only, their
    // values kept in registers across the fused stages.
    VariantSet { name: "REGISTER", tiles: &[64, 256, 1024, 4096, 16384], threads: &[64, 256, 512, 512, 1024] },
    // The chunked top-N (`topn_chunk*`, `topn_merge`).
    VariantSet { name: "CHUNKS", tiles: &[256, 1024, 4096, 16384], threads: &[256, 1024, 1024, 1024] },
    // The one-read streaming top-N (`force_topn_stream`).
    VariantSet { name: "STREAM", tiles: &[256, 1024, 4096], threads: &[256, 512, 1024] },
    // The top-N of a row over the CTAs of a thread-block cluster (`topn_cluster`).
    VariantSet { name: "CLUSTER", tiles: &[256, 1024, 4096], threads: &[256, 1024, 1024] },
    // `topn_cluster` with the draw's tail fused (`topn_cluster_draw_finish`):
    // to N = 1024 (at 4096 its AscendC would not fit the UB).
    VariantSet { name: "CLUSTER_TAIL", tiles: &[256, 1024], threads: &[256, 1024] },
    // Passes over the vocabulary in tiles of 4096 (`mask_check`'s raw-logprob
    // partial sums are per 4096 logits, so this tile is part of the format).
    VariantSet { name: "VOCAB", tiles: &[4096], threads: &[512] },
];

/// The set called `name`.
pub fn lookup(name: &str) -> Option<&'static VariantSet> {
    SETS.iter().find(|s| s.name == name)
}

/// The names of every set, for error messages: "`A`, `B` or `C`".
pub fn names() -> String {
    let n: Vec<String> = SETS.iter().map(|s| format!("`{}`", s.name)).collect();
    match n.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => n.join(""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse_attr, Errors};
    use quote::quote;

    #[test]
    fn every_set_is_valid_and_unique() {
        for (i, s) in SETS.iter().enumerate() {
            assert_eq!(s.tiles.len(), s.threads.len(), "{}: one thread count per tile", s.name);
            assert!(!s.tiles.is_empty(), "{}: empty", s.name);
            assert!(SETS[..i].iter().all(|o| o.name != s.name), "{} is listed twice", s.name);
            let mut errs = Errors::default();
            let tiles = s.tiles.iter().map(|&t| proc_macro2::Literal::u32_unsuffixed(t));
            let threads = s.threads.iter().map(|&t| proc_macro2::Literal::u32_unsuffixed(t));
            let a = parse_attr(quote!(tile = [#(#tiles),*], threads = [#(#threads),*]), &mut errs);
            assert!(errs.check().is_ok(), "{}: the literal form of the set is rejected", s.name);
            assert_eq!(a.variants.len(), s.tiles.len(), "{}", s.name);
        }
    }

    #[test]
    fn a_named_set_gives_its_literal_variants() {
        for s in SETS {
            let name = syn::Ident::new(s.name, proc_macro2::Span::call_site());
            let mut errs = Errors::default();
            let a = parse_attr(quote!(variants = #name), &mut errs);
            assert!(errs.check().is_ok(), "variants = {}", s.name);
            let got: Vec<(u32, u32)> = a.variants.iter().map(|v| (v.tile, v.threads)).collect();
            let want: Vec<(u32, u32)> = s.tiles.iter().copied().zip(s.threads.iter().copied()).collect();
            assert_eq!(got, want, "variants = {}", s.name);
        }
    }

    #[test]
    fn named_sets_mix_with_the_other_options_only() {
        let mut errs = Errors::default();
        let a = parse_attr(quote!(variants = STREAM, ascend = false, debug), &mut errs);
        assert!(errs.check().is_ok());
        assert!(!a.ascend && a.debug && a.variants.len() == 3);
        for bad in [quote!(variants = STREAM, tile = [256]), quote!(threads = [256], variants = STREAM)] {
            let mut errs = Errors::default();
            parse_attr(bad.clone(), &mut errs);
            assert!(errs.check().is_err(), "`{bad}` must be rejected");
        }
        for bad in [quote!(variants = NOPE), quote!(variants = [64]), quote!(variants = "STREAM")] {
            let mut errs = Errors::default();
            let a = parse_attr(bad.clone(), &mut errs);
            assert!(errs.check().is_err() && a.variants.is_empty(), "`{bad}` must be rejected");
        }
    }
}
