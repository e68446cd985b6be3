use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    let s = reduce_sum(v);
    let c = inclusive_scan(v);
    store(y, 0u64, v / s);
}

fn main() {}
