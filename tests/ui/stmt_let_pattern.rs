use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let _ = row();
    let ref r = row();
    let v = load(x, 0u64, n);
    store(y, 0u64, v);
}

fn main() {}
