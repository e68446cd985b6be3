use sampler_macros::{kernel, kernel_fn};

/// A helper called inside the scope: its locals are the scope's own.
#[kernel_fn]
fn weights(x: Gm<f32>, off: u64, n: u32) -> Tile<u64> {
    to_fixed(exp(load(x, off, n) - load_scalar(x, off)))
}

#[kernel(tile = [64, 256])]
fn k(x: Gm<f32>, ids: Gm<i32>, n: u32, head: u32, y: GmMut<f32>, tok: GmMut<i32>, s: GmMut<u64>) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let rest = reduce_sum(to_fixed(exp(load(x, off, n) - load_scalar(x, off))));
    if warp_scope(head) {
        let w = weights(x, off, head);
        let keep = exclusive_scan(w) <= rest;
        let c = categorical(select(keep, w, 0u64), 12345u64);
        let first = first_where(keep);
        store(y, off, select(keep, load(x, off, head), NEG_INF));
        store_scalar(tok, r as u64, if c >= 0 { get(load(ids, off, head), c as u32) } else { first });
        store_scalar(s, r as u64, rest + reduce_sum(w) + (len(w) as u64));
    }
}

fn main() {}
