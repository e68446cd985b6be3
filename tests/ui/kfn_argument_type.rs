use sampler_macros::{kernel, kernel_fn};

#[kernel_fn]
fn scaled(x: Tile<f32>, k: u32) -> Tile<f32> {
    x * (k as f32)
}

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    let w = scaled(v, v);
    store(y, 0u64, w);
}

fn main() {}
