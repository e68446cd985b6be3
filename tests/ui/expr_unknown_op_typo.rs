use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    store_scalar(y, 0u64, reduce_maxx(v));
}

fn main() {}
