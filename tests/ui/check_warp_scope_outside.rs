use sampler_macros::kernel;

#[kernel(tile = [256])]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>, s: GmMut<u64>) {
    let t = load(x, 0u64, n);
    let mut total = 0u64;
    if warp_scope(n) {
        let w = to_fixed(exp(t));
        total = reduce_sum(w);
        let (v, id) = top_n(x, 0u64, n, 8u32);
        store(y, 0u64, v);
        if warp_scope(n) {
            store_scalar(s, 0u64, 1u64);
        }
    }
    store_scalar(s, 1u64, total);
}

fn main() {}
