use sampler_macros::kernel;

#[kernel(tile = [256, 1024, 256])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    store(y, 0u64, v);
}

fn main() {}
