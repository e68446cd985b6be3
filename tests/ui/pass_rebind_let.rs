//! A tile bound twice (`let b = a;`) is the same tile: it compiles and runs.
use sampler_kernels::rt::cpu::Gm;
use sampler_macros::kernel;

#[kernel(tile = [64])]
pub fn copy_twice(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let a = load(x, 0u64, n);
    let b = a;
    store(y, 0u64, a + b);
}

/// A mutable rebinding that is then assigned: a copy, `a` unchanged.
#[kernel(tile = [64])]
pub fn copy_then_change(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let a = load(x, 0u64, n);
    let mut b = a;
    b = b * 3.0;
    store(y, 0u64, a + b);
}

fn main() {
    let x = [1.0f32, 2.0, 3.0];
    let mut y = [0.0f32; 3];
    // SAFETY: one program; `y` is written only by it.
    unsafe { copy_twice::cpu(0, Gm::new(&x), 3, Gm::new_mut(&mut y)) };
    assert_eq!(y, [2.0, 4.0, 6.0]);
    unsafe { copy_then_change::cpu(0, Gm::new(&x), 3, Gm::new_mut(&mut y)) };
    assert_eq!(y, [4.0, 8.0, 12.0]);
}
