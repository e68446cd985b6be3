use sampler_macros::{kernel, kernel_fn};

#[kernel_fn]
fn h(x: Tile<f32>) -> Tile<f32> {
    x * 2.0
}

#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let t = load(x, 0u64, n);
    h(t);
    store(y, 0u64, t);
}

fn main() {}
