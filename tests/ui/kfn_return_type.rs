use sampler_macros::kernel_fn;

#[kernel_fn]
fn biggest(x: Tile<u32>) -> f32 {
    reduce_max(x)
}

fn main() {}
