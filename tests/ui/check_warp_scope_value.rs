use sampler_macros::kernel;

#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let w = warp_scope(n);
    if w {
        store(y, 0u64, load(x, 0u64, n));
    }
}

fn main() {}
