use sampler_macros::{kernel, kernel_fn};

/// An error inside a helper is reported once, where it is written; the
/// kernels calling it add nothing.
#[kernel_fn]
fn total(x: Tile<f32>) -> f32 {
    reduce_sum(x)
}

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let t = total(load(x, 0u64, n));
    store_scalar(y, 0u64, t);
}

fn main() {}
