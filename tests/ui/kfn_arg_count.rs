use sampler_macros::{kernel, kernel_fn};

#[kernel_fn]
fn h(x: Tile<f32>, s: f32) -> Tile<f32> {
    x * s
}

#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let t = load(x, 0u64, n);
    let u = h(t);
    store(y, 0u64, u);
}

fn main() {}
