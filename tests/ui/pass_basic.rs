use sampler_macros::kernel;

/// Softmax of each row, written with the DSL's tile ops.
#[kernel(tile = [64, 256], threads = [32, 128])]
pub fn softmax_rows(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let v = load(x, off, n);
    let m = reduce_max(v);
    let w = to_fixed(exp(v - m));
    let total = fixed_to_f32(reduce_sum(w));
    store(y, off, exp(v - m) / total);
}

fn main() {
    assert_eq!(softmax_rows::NAME, "softmax_rows");
    assert_eq!(softmax_rows::VARIANTS.len(), 2);
    assert_eq!(softmax_rows::VARIANTS[1].entry, "softmax_rows_t256");
}
