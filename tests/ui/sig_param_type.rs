use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: usize, s: &[f32], m: Gm<bool>, y: GmMut<f32>) {
    let v = load(x, 0u64, 4u32);
    store(y, 0u64, v);
}

fn main() {}
