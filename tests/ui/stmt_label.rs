use sampler_macros::kernel;

#[kernel]
fn k(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    'rows: for i in 0..n {
    store(y, i as u64, load(x, 0u64, n));
    }
}

fn main() {}
