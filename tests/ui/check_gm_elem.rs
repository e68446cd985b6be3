use sampler_macros::kernel;

#[kernel]
fn k(m: Gm<f32>, x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let ok = mask_bits(m, 0u64, n);
    store(y, 0u64, select(ok, load(x, 0u64, n), NEG_INF));
}

fn main() {}
