use sampler_macros::kernel;

#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>, c: GmMut<u32>) {
    let t = load(x, 0u64, n);
    store_scalar(c, 0u64, 5000000000);
    store_scalar(c, 1u64, -1);
    store_scalar(y, 0u64, get(t, -1));
    store_scalar(y, 1u64, 1e40f32);
    store_scalar(y, 2u64, -1e39);
}

fn main() {}
