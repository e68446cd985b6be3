use sampler_macros::{kernel, kernel_fn};

#[kernel_fn]
fn twice(x: Tile<f32>) -> Tile<f32> {
    x + x
}

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    store(y, 0u64, twice(load(x, 0u64, n)) * 2.0);
}

fn main() {}
