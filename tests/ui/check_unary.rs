use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    let a = -true;
    let b = !1.5f32;
    store(y, 0u64, v);
}

fn main() {}
