use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let a = 1bool;
    let v = load(x, 0u64, n);
    store(y, 0u64, v);
}

fn main() {}
