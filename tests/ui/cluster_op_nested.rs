use sampler_macros::kernel;

// Every CTA of the cluster calls the op and only the leader goes on after
// it: a call inside `if` (or twice) is refused.
#[kernel(tile = [256], cluster = 8)]
fn k(x: Gm<f32>, v: u32, n: u32, y: GmMut<f32>) {
    if n > 0u32 {
        let (vals, _, _, _, _) = top_n_cluster(x, 0u64, v, n, n);
        store(y, 0u64, vals);
    }
    let (a, _, _, _, _) = top_n_cluster(x, 0u64, v, n, n);
    let (b, _, _, _, _) = top_n_cluster(x, 0u64, v, n, n);
    store(y, 0u64, a);
    store(y, 0u64, b);
}

fn main() {}
