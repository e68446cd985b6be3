use sampler_macros::kernel_fn;

#[kernel_fn]
fn h<T>(x: Tile<f32>) -> Tile<f32> {
    x
}

fn main() {}
