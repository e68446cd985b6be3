use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    let w = if n > 4 { v } else { exp(v) };
    store(y, 0u64, w);
}

fn main() {}
