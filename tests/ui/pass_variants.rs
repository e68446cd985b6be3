use sampler_macros::kernel;

/// A kernel on a named variant set (`variants = STREAM`: tiles 256, 1024, 4096).
#[kernel(variants = STREAM)]
pub fn doubled(x: Gm<f32>, n: u32, y: GmMut<f32>) {
    let r = row();
    let off = (r as u64) * (n as u64);
    store(y, off, load(x, off, n) * 2.0);
}

fn main() {
    let got: Vec<(u32, u32)> = doubled::VARIANTS.iter().map(|v| (v.tile, v.threads)).collect();
    assert_eq!(got, [(256, 256), (1024, 512), (4096, 1024)]);
    assert_eq!(doubled::VARIANTS[2].entry, "doubled_t4096");
}
