//! `#[kernel_fn]` helpers: tiles, scalars, buffers and tuples in and out,
//! a helper calling a helper, calls in branches and loops.
use sampler_kernels::rt::cpu::Gm;
use sampler_macros::{kernel, kernel_fn};

/// `x - max(x)` and its max.
#[kernel_fn]
fn shifted(x: Tile<f32>) -> (Tile<f32>, f32) {
    let m = reduce_max(x);
    (x - m, m)
}

/// Twice the shifted row (calls `shifted`).
#[kernel_fn]
fn twice_shifted(x: Tile<f32>, k: f32) -> Tile<f32> {
    let (d, _) = shifted(x);
    d * k
}

/// Writes `v` at `off` of `y`.
#[kernel_fn]
fn put(y: GmMut<f32>, off: u64, v: Tile<f32>) {
    store(y, off, v);
}

#[kernel(tile = [64])]
pub fn helpers(x: Gm<f32>, n: u32, y: GmMut<f32>, m: GmMut<f32>) {
    let a = load(x, 0u64, n);
    let (d, mx) = shifted(a);
    store_scalar(m, 0u64, mx);
    if mx > 100.0 {
        put(y, 0u64, d);
    } else {
        let t = twice_shifted(a, 2.0);
        put(y, 0u64, t);
    }
    let mut acc = 0.0f32;
    for _i in 0..2u32 {
        let (e, s) = shifted(a);
        acc = acc + s + get(e, 0u32);
    }
    store_scalar(m, 1u64, acc);
}

fn main() {
    let x = [1.0f32, 4.0, 3.0];
    let mut y = [0.0f32; 3];
    let mut m = [0.0f32; 2];
    // SAFETY: one program writing its own outputs.
    unsafe { helpers::cpu(0, Gm::new(&x), 3, Gm::new_mut(&mut y), Gm::new_mut(&mut m)) };
    assert_eq!(y, [-6.0, 0.0, -2.0]);
    assert_eq!(m, [4.0, 2.0 * (4.0 - 3.0)]);
}
