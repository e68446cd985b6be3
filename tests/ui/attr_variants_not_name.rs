use sampler_macros::kernel;

#[kernel(variants = [256, 1024])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    store(y, 0u64, load(x, 0u64, n));
}

fn main() {}
