use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    for i in 0u32..(n as i32) {
    store(y, 0u64, v);
    }
    for j in 0.0f32..1.0f32 {
    store(y, 0u64, v);
    }
}

fn main() {}
