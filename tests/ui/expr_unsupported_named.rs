use sampler_macros::kernel;

#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let a = match n { 0 => 1u32, _ => 2u32 };
    let b = 0u32..n;
    {
        store(y, 0u64, load(x, 0u64, n));
    }
    if let 0 = n {
        store(y, 0u64, load(x, 0u64, n));
    }
    let c = (n, n).0;
}

fn main() {}
