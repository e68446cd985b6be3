use sampler_macros::kernel;

#[kernel]
fn k(a: Gm<f32>, b: Gm<f32>, c: Gm<f32>, d: Gm<f32>, e: Gm<f32>, n: u32, y: GmMut<f32>) {
    let ta = load(a, 0u64, n);
    let tb = load(b, 0u64, n);
    let tc = load(c, 0u64, n);
    let td = load(d, 0u64, n);
    // Four distinct tiles fuse into one map (repeats count once).
    store(y, 0u64, ta * tb + tc * td - ta);
    // A fifth does not: bind part of the expression with `let`.
    store(y, 0u64, ta * tb + tc * td + load(e, 0u64, n));
}

fn main() {}
