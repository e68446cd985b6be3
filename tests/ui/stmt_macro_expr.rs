use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let m = max!(n, 1u32);
    let z = vec![0u32; 4];
    store(y, 0u64, load(x, 0u64, n));
}

fn main() {}
