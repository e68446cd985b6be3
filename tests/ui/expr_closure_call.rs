use sampler_macros::kernel;

/// A rejected binding is reported once: its call is not "unknown op `f`".
#[kernel(tile = [64])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let f = |a: f32| a;
    store(y, 0u64, f(load(x, 0u64, n)));
}

fn main() {}
