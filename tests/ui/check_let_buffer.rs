use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let b = x;
    store(y, 0u64, load(b, 0u64, n));
}

fn main() {}
