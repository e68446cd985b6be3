use sampler_macros::kernel;

#[kernel(tile = [64])]
fn inner(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    store(y, 0u64, load(x, 0u64, n));
}

#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    inner(x, n, y);
}

fn main() {}
