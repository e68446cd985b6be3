use sampler_macros::kernel;

/// Issue 18's example without tile sizes: a kernel without `tile = [..]`
/// works on scalars only.
#[kernel]
pub fn copy_twice(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let a = load(x, 0u64, n);
    let b = a;
    store(y, 0u64, a + b);
}

fn main() {}
