use sampler_macros::kernel;

#[kernel]
fn k(__x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let __v = load(__x, 0u64, n);
    store(y, 0u64, __v);
}

fn main() {}
