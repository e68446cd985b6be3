use sampler_macros::kernel;

#[kernel(tile = [64, 256])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let t = load(x, 0u64, 128);
    let (v, _) = top_n(x, 0u64, n, 100u32);
    store(y, 0u64, t + v);
    store(y, 0u64, full(64u32, 1.0f32));
}

fn main() {}
