use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    let a = 1.0f32 << 2u32;
    let t = iota(n) << 2u32;
    store(y, 0u64, v);
}

fn main() {}
