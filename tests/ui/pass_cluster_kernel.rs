use sampler_macros::kernel;

// A cluster kernel: the op first, then what the leader does with the row.
#[kernel(tile = [256, 1024], threads = [256, 1024], cluster = 16)]
fn k(x: Gm<f32>, v: u32, n: u32, y: GmMut<f32>, st: GmMut<u32>) {
    let r = row();
    let (vals, ids, bad, finite, _) = top_n_cluster(x, (r as u64) * (v as u64), v, n, 8u32);
    store(y, (r as u64) * (n as u64), vals);
    let first = get(ids, 0u32);
    store_scalar(st, r as u64, bad + finite + (first as u32));
}

fn main() {
    assert_eq!(k::VARIANTS[0].cluster, 16);
}
