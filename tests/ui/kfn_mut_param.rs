use sampler_macros::kernel_fn;

#[kernel_fn]
fn h(mut x: Tile<f32>) -> Tile<f32> {
    x = x * 2.0;
    x
}

fn main() {}
