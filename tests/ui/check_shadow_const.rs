use sampler_macros::kernel;

#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let TILE = 3u32;
    store_scalar(y, 0u64, TILE as f32);
}

fn main() {}
