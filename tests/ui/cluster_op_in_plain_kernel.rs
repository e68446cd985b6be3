use sampler_macros::kernel;

// `top_n_cluster` needs the CTAs of a cluster: a plain kernel cannot call it.
#[kernel(tile = [256])]
fn k(x: Gm<f32>, v: u32, n: u32, y: GmMut<f32>) {
    let (vals, _, _, _, _) = top_n_cluster(x, 0u64, v, n, n);
    store(y, 0u64, vals);
}

fn main() {}
