use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let a = (n, n);
    let b = [n, n];
    let c = x.len;
    store(y, 0u64, load(x, 0u64, n));
}

fn main() {}
