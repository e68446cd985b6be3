use sampler_macros::kernel_fn;

#[kernel_fn]
fn h(x: Tile<f32>) {
    x * 2.0
}

fn main() {}
