use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let mut c = 0u32;
    c = 1.5f32;
    let mut t = load(x, 0u64, n);
    t = 0.0f32;
    store(y, 0u64, t);
}

fn main() {}
