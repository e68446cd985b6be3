use sampler_macros::kernel;

#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let mut t = load(x, 0u64, n);
    t = 1.0;
    store(y, 0u64, t);
}

fn main() {}
