use sampler_macros::{kernel, kernel_fn};

#[kernel_fn]
fn h(y: GmMut<f32>, x: Tile<f32>) {
    store(y, 0u64, x);
}

#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let t = load(x, 0u64, n);
    let u = h(y, t);
}

fn main() {}
