use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let a = 18446744073709551616u64;
    store(y, 0u64, load(x, 0u64, n));
}

fn main() {}
