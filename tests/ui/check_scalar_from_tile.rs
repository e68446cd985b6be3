use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, kept_count: GmMut<u32>) {
    let v = load(x, 0u64, n);
    store_scalar(kept_count, 0u64, v > 0.0);
    store_scalar(kept_count, 1u64, 1.5f32);
}

fn main() {}
