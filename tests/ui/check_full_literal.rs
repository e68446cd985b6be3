use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let z = full(n, 0);
    store(y, 0u64, load(x, 0u64, n));
}

fn main() {}
