//! The typed launch arguments `#[kernel]` emits (issue 11 item 3): one field
//! per parameter in signature order, buffers as the device's handle type,
//! scalars typed, docs from the signature and the kernel's `- `name`: ...` lines.

use quote::quote;

#[test]
fn args_struct_has_one_typed_documented_field_per_parameter() {
    let k = sampler_dsl::compile(
        quote!(),
        quote! {
            /// A test kernel.
            ///
            /// - `src`: `[R, n]` f32 input rows.
            /// - `n`: columns; `out`: `[R]` i32 out.
            fn copy_first(src: Gm<f32>, n: u32, out: GmMut<i32>) {
                let r = row();
                store_scalar(out, r as u64, load_scalar(src, (r as u64) * (n as u64)) as i32);
            }
        },
    )
    .expect("a valid kernel");
    let s = sampler_dsl::emit::rust::args_struct(&k).to_string();
    let src = s.find("pub src : B").expect("src is a buffer handle");
    let n = s.find("pub n : u32").expect("n is a typed scalar");
    let out = s.find("pub out : B").expect("out is a buffer handle");
    assert!(src < n && n < out, "signature order: {s}");
    assert!(s.contains("read only") && s.contains("written by the kernel"), "mutability documented: {s}");
    assert!(s.contains("`[R, n]` f32 input rows."), "shape from the kernel docs: {s}");
    assert!(s.contains("`[R]` i32 out."), "a second entry of one doc line: {s}");
    assert!(s.contains("LaunchArg :: Buf (self . src)") && s.contains("LaunchArg :: U32 (self . n)"), "{s}");
    assert!(s.contains("; 3]"), "three arguments: {s}");
}
