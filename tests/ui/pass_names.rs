//! Names an author may well pick that the generated code also uses
//! (`program`, `ctx`, `args`, `core`, `std`, raw identifiers, an op's name
//! as a local, a kernel named like a generated item), and literals at the
//! edges of their types: all compile.
use sampler_macros::kernel;

#[kernel(tile = [64])]
pub fn names(ctx: Gm<f32>, program: u32, core: u32, std: u32, r#loop: u32, args: GmMut<f32>) {
    let exp = 3.0f32;
    let r#fn = r#loop + core + std + program;
    let t = load(ctx, 0u64, r#fn);
    store(args, 0u64, exp(t) * exp);
}

#[kernel(tile = [64])]
pub fn cpu(x: Gm<f32>, n: u32, y: GmMut<f32>, c: GmMut<i32>, u: GmMut<u32>) {
    store(y, 0u64, load(x, 0u64, n));
    store_scalar(c, 0u64, -2147483648);
    store_scalar(u, 0u64, 4294967295);
    store_scalar(u, 1u64, -0);
    store_scalar(y, 0u64, 3.4028235e38);
    store_scalar(y, 1u64, 5000000000 as f32);
    store_scalar(y, 2u64, -3.4028235e38);
}

fn main() {}
