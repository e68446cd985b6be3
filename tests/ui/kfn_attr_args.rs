use sampler_macros::kernel_fn;

#[kernel_fn(tile = [64])]
fn h(x: Tile<f32>) -> Tile<f32> {
    x * 2.0
}

fn main() {}
