use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let (v, ref w) = top_n(x, 0u64, n, n);
    store(y, 0u64, v);
}

fn main() {}
