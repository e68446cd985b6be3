use sampler_macros::kernel;

// A cluster kernel runs each row on several CTAs: without the cluster op
// every CTA would do the whole row.
#[kernel(tile = [256], cluster = 8)]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let v = load(x, 0u64, n);
    store(y, 0u64, v);
}

fn main() {}
