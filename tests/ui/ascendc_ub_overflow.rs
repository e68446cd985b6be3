use sampler_macros::kernel;

// Twelve f32 row tiles live at once: at `tile = 4096` that is 12 x 16 KB of
// UB, over the AscendC budget of 184 KB; the `tile = 1024` variant fits.
#[kernel(tile = [1024, 4096])]
fn wide(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let a0 = load(x, 0u64, n);
    let a1 = load(x, 1u64, n);
    let a2 = load(x, 2u64, n);
    let a3 = load(x, 3u64, n);
    let a4 = load(x, 4u64, n);
    let a5 = load(x, 5u64, n);
    let a6 = load(x, 6u64, n);
    let a7 = load(x, 7u64, n);
    let a8 = load(x, 8u64, n);
    let a9 = load(x, 9u64, n);
    let a10 = load(x, 10u64, n);
    let a11 = load(x, 11u64, n);
    let s0 = a0 + a1 + a2 + a3;
    let s1 = a4 + a5 + a6 + a7;
    let s2 = a8 + a9 + a10 + a11;
    store(y, 0u64, s0 + s1 + s2);
}

fn main() {}
