//! Emitters over the tile IR, and the kernel module that holds their output.

pub mod ascendc;
pub mod rust;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::ir::*;
use crate::parse::Errors;

/// Entry-point name of one tile variant: `{kernel}_t{tile}`.
pub fn entry_name(kernel: &str, tile: u32) -> String {
    format!("{kernel}_t{tile}")
}

/// Target-specific checks that must fail at compile time (for example an
/// AscendC variant whose UB plan does not fit).
pub fn validate_targets(k: &Kernel, errs: &mut Errors) {
    if k.ascend {
        ascendc::validate(k, errs);
    }
}

/// Why a kernel has no AscendC source: its opt-out, or the emitter's reason.
pub fn ascendc_skipped(k: &Kernel) -> Option<String> {
    if !k.ascend {
        return Some("opted out with `#[kernel(ascend = false)]`".into());
    }
    if ascendc::emit(k).is_some() {
        return None;
    }
    Some(ascendc::why_not(k).unwrap_or_else(|| format!("no tile variant of at most {} elements", ascendc::MAX_TILE)))
}

fn prim_tokens(p: Prim) -> TokenStream {
    let v = format_ident!("{}", format!("{:?}", p));
    quote!(::sampler_kernels::spec::Prim::#v)
}

fn param_spec(p: &Param) -> TokenStream {
    let name = p.name.to_string();
    let kind = match &p.ty {
        Ty::Gm(..) if p.logits => quote!(::sampler_kernels::spec::ParamKind::Logits),
        Ty::Gm(e, false) => {
            let e = prim_tokens(*e);
            quote!(::sampler_kernels::spec::ParamKind::Gm(#e))
        }
        Ty::Gm(e, true) => {
            let e = prim_tokens(*e);
            quote!(::sampler_kernels::spec::ParamKind::GmMut(#e))
        }
        t => {
            let e = prim_tokens(t.prim().unwrap_or(Prim::U32));
            quote!(::sampler_kernels::spec::ParamKind::Scalar(#e))
        }
    };
    quote!(::sampler_kernels::spec::ParamSpec { name: #name, kind: #kind })
}

/// Whether a kernel body uses an op that needs the NVIDIA sort buffer.
fn uses_sort(b: &Block) -> bool {
    crate::visit::any_expr(b, |x| matches!(&x.kind, ExprKind::Call(op, _) if op.is_selection()))
}

/// The module a `#[kernel] fn name` expands to.
pub fn kernel_module(k: &Kernel) -> TokenStream {
    let name = &k.name;
    let name_s = name.to_string();
    let vis = &k.vis;
    let docs = &k.docs;
    let body = rust::body(k);
    let max_tile = k.variants.iter().map(|v| v.tile).max().unwrap_or(1);
    let pnames: Vec<_> = k.params.iter().map(|p| p.name.clone()).collect();
    let host_tys: Vec<_> = k.params.iter().map(rust::host_param_type).collect();
    let ptx_params: Vec<_> = k.params.iter().map(rust::ptx_params).collect();
    let specs: Vec<_> = k.params.iter().map(param_spec).collect();
    let sorts = uses_sort(&k.body);
    let variants = k.variants.iter().map(|v| {
        let (t, th) = (v.tile, v.threads);
        let entry = entry_name(&name_s, t);
        let cluster = k.cluster;
        quote!(::sampler_kernels::spec::Variant {
            tile: #t,
            threads: #th,
            entry: #entry,
            shared: ::sampler_kernels::spec::gpu_shared_bytes(#t, #sorts),
            cluster: #cluster,
        })
    });
    let ascendc = match ascendc::emit(k).filter(|_| k.ascend) {
        Some(src) => quote!(Some(#src)),
        None => quote!(None),
    };
    let ascendc_skipped = match ascendc_skipped(k) {
        Some(why) => quote!(Some(#why)),
        None => quote!(None),
    };
    let ascend_opt_out = !k.ascend;
    let nparams = k.params.len();
    let args_struct = rust::args_struct(k);
    // Named views, so the checked CPU mode's panics say which buffer
    // (a `Logits` argument converted to its view first).
    let named = k.params.iter().filter(|p| matches!(p.ty, Ty::Gm(..))).map(|p| {
        let (n, s) = (&p.name, p.name.to_string());
        if p.logits {
            quote!(let #n = ::core::convert::Into::<::sampler_kernels::rt::cpu::Logits>::into(#n).named(NAME, #s);)
        } else {
            quote!(let #n = #n.named(NAME, #s);)
        }
    });
    let dyn_args = k.params.iter().enumerate().map(|(i, p)| {
        let n = &p.name;
        let v = rust::arg_variant(p);
        let want = if p.logits { "Logits".to_string() } else { p.ty.describe() };
        let pname = n.to_string();
        quote! {
            let #n = match __args[#i] {
                __rt::Arg::#v(x) => x,
                ref other => return Err(__rt::ArgError::Type { kernel: #name_s, index: #i, param: #pname, expected: #want, got: other.describe() }),
            };
        }
    });
    // A cluster kernel's `row()` is its cluster's index (`rt::gpu::in_cluster`).
    let gpu_rt =
        if k.cluster > 0 { quote!(::sampler_kernels::rt::gpu::in_cluster) } else { quote!(::sampler_kernels::rt::gpu) };
    let entries = k.variants.iter().map(|v| {
        let entry = format_ident!("{}", entry_name(&name_s, v.tile));
        let tile = v.tile;
        let threads = v.threads as usize;
        let items = (v.tile / v.threads) as usize;
        let wrap = k.params.iter().filter(|p| matches!(p.ty, Ty::Gm(..))).map(|p| {
            let n = &p.name;
            if p.logits {
                let d = rust::logits_dtype_ident(p);
                quote!(let #n = __rt::Logits::from_raw(#n, #d);)
            } else {
                quote!(let #n = __rt::Gm::from_raw(#n);)
            }
        });
        quote! {
            #[cfg(target_arch = "nvptx64")]
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn #entry(#(#ptx_params),*) {
                use #gpu_rt as __rt;
                use ::sampler_kernels::rt::elem as __m;
                // Programmatic dependent launch: the next kernel may start;
                // this one waits for its predecessors (no-ops without it).
                ::sampler_kernels::rt::gpu::grid_dependency_entry();
                #[allow(dead_code)]
                const TILE: u32 = #tile;
                let __ctx = __rt::Ctx::<#threads, #items>::new();
                #(#wrap)*
                #body
            }
        }
    });
    quote! {
        #(#docs)*
        #[allow(unused_variables, unused_mut, unused_parens, unused_braces, non_snake_case, clippy::all)]
        #vis mod #name {
            /// Kernel name (as registered).
            pub const NAME: &str = #name_s;
            /// Parameters in launch order.
            pub const PARAMS: &[::sampler_kernels::spec::ParamSpec] = &[#(#specs),*];
            /// Tile variants, one NVIDIA entry point each.
            pub const VARIANTS: &[::sampler_kernels::spec::Variant] = &[#(#variants),*];
            /// AscendC source of the kernel (all variants that fit), if emitted.
            pub const ASCENDC: Option<&str> = #ascendc;

            #args_struct

            /// The host (CPU) program for one row or request.
            ///
            /// # Safety
            /// Programs of one launch may run concurrently; each must write
            /// only its own elements of the `Gm` buffers (as on the GPU).
            #[cfg(not(target_arch = "nvptx64"))]
            pub unsafe fn cpu(__program: u32, #(#pnames: #host_tys),*) {
                use ::sampler_kernels::rt::cpu as __rt;
                use ::sampler_kernels::rt::elem as __m;
                #[allow(dead_code)]
                const TILE: u32 = #max_tile;
                let __ctx = __rt::Ctx::for_kernel(__program, NAME, TILE);
                #(#named)*
                #body
            }

            /// [`cpu`] with arguments checked against [`PARAMS`] at run time.
            ///
            /// # Safety
            /// As [`cpu`].
            #[cfg(not(target_arch = "nvptx64"))]
            pub unsafe fn cpu_dyn(__program: u32, __args: &[::sampler_kernels::rt::cpu::Arg]) -> Result<(), ::sampler_kernels::rt::cpu::ArgError> {
                use ::sampler_kernels::rt::cpu as __rt;
                if __args.len() != #nparams {
                    return Err(__rt::ArgError::Count { kernel: #name_s, expected: #nparams, got: __args.len() });
                }
                #(#dyn_args)*
                cpu(__program, #(#pnames),*);
                Ok(())
            }

            #[cfg(not(target_arch = "nvptx64"))]
            ::sampler_kernels::inventory::submit! {
                ::sampler_kernels::spec::KernelSpec {
                    name: NAME,
                    params: PARAMS,
                    variants: VARIANTS,
                    ascendc: ASCENDC,
                    ascendc_skipped: #ascendc_skipped,
                    ascend_opt_out: #ascend_opt_out,
                    cpu: cpu_dyn,
                }
            }

            #(#entries)*
        }
    }
}
