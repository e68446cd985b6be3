//! A tile used many times: in two ops, in both branches of `select`, in a
//! loop, and rebound in a loop-carried variable. Each compiles and runs.
use sampler_kernels::rt::cpu::Gm;
use sampler_macros::kernel;

#[kernel(tile = [64])]
pub fn reuse(x: Gm<f32>, n: u32, y: GmMut<f32>, s: GmMut<f32>) {
    let a = load(x, 0u64, n);
    // Two ops.
    let m = reduce_max(a);
    let c = count(a > 1.5);
    // Both branches of `select`.
    let b = select(a > m - 1.0, a, a * 2.0);
    // A loop, and a loop-carried rebinding.
    let mut acc = a;
    for i in 0..3u32 {
        acc = acc + a;
        store_scalar(s, i as u64, reduce_max(a) + (c as f32));
    }
    store(y, 0u64, acc + b);
}

fn main() {
    let x = [1.0f32, 2.0, 3.0];
    let (mut y, mut s) = ([0.0f32; 3], [0.0f32; 3]);
    // SAFETY: one program writing its own outputs.
    unsafe { reuse::cpu(0, Gm::new(&x), 3, Gm::new_mut(&mut y), Gm::new_mut(&mut s)) };
    // acc = 4a; b = a where a > 2, else 2a.
    assert_eq!(y, [4.0 + 2.0, 8.0 + 4.0, 12.0 + 3.0]);
    assert_eq!(s, [5.0; 3]);
}
