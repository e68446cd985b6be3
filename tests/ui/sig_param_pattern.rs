use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, mut n: u32, (a, b): (u32, u32), y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    store(y, 0u64, v);
}

fn main() {}
