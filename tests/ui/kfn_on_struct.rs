use sampler_macros::kernel_fn;

#[kernel_fn]
struct H;

fn main() {}
