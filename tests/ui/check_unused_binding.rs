#![deny(deprecated)]
use sampler_macros::kernel;

/// An unused binding is a warning (denied here to show it).
#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    let unused = reduce_max(v);
    let (_, ids) = top_n(x, 0u64, n, n);
    let _fine = 1u32;
    store(y, 0u64, v);
}

fn main() {}
