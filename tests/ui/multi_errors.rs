use sampler_macros::kernel;

// Every error of this kernel is reported in one compilation.

#[kernel(tile = [64, 100], threads = [32, 64])]
async fn k(x: Gm<f32>, n: usize, y: Gm<f32>) {
    let v = load(x, 0u64, 4u32);
    while true {}
    let a = 0;
    let m = v.max();
    let q = v / missing + m;
    store(y, 0u64, v);
    reduce_sum(v);
}

fn main() {}
