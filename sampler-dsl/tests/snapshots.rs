//! Snapshots of the emitted Rust (the program body shared by the host and
//! nvptx builds) of small kernels, in `tests/snapshots/*.rs.txt`.
//!
//! After an intended change of the emitter, regenerate with
//! `UPDATE_SNAPSHOTS=1 cargo test -p sampler-dsl --test snapshots` and
//! review the diff.

use proc_macro2::TokenStream;
use quote::quote;

/// One statement a line, indented by brace depth (enough to review a diff).
fn pretty(ts: &TokenStream) -> String {
    let s = ts.to_string();
    let mut out = String::new();
    let mut depth = 0usize;
    let mut line = String::new();
    let flush = |line: &mut String, out: &mut String, depth: usize| {
        let t = line.trim();
        if !t.is_empty() {
            out.push_str(&"    ".repeat(depth));
            out.push_str(t);
            out.push('\n');
        }
        line.clear();
    };
    let mut toks = s.split(' ').peekable();
    while let Some(tok) = toks.next() {
        match tok {
            "{" => {
                line.push_str(" {");
                flush(&mut line, &mut out, depth);
                depth += 1;
            }
            "}" => {
                flush(&mut line, &mut out, depth);
                depth = depth.saturating_sub(1);
                line.push('}');
                if !matches!(toks.peek(), Some(&("else" | ")" | ";" | ","))) {
                    flush(&mut line, &mut out, depth);
                }
            }
            ";" => {
                line.push(';');
                flush(&mut line, &mut out, depth);
            }
            t => {
                if !line.is_empty() {
                    line.push(' ');
                }
                line.push_str(t);
            }
        }
    }
    flush(&mut line, &mut out, depth);
    out
}

fn check(name: &str, attr: TokenStream, item: TokenStream) {
    let k = sampler_dsl::compile(attr, item).unwrap_or_else(|e| panic!("{e}"));
    let got = pretty(&sampler_dsl::emit::rust::body(&k));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(format!("{name}.rs.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing {}: run with UPDATE_SNAPSHOTS=1", path.display()));
    assert!(
        got == want,
        "emitted Rust of `{name}` changed (UPDATE_SNAPSHOTS=1 to accept):\n--- want\n{want}\n--- got\n{got}"
    );
}

#[test]
fn softmax_rows() {
    check(
        "softmax_rows",
        quote!(tile = [64, 256], threads = [32, 128]),
        quote! {
            fn softmax_rows(x: Gm<f32>, n: u32, y: GmMut<f32>) {
                let r = row();
                let off = (r as u64) * (n as u64);
                let v = load(x, off, n);
                let m = reduce_max(v);
                let w = to_fixed(exp(v - m));
                let total = fixed_to_f32(reduce_sum(w));
                store(y, off, exp(v - m) / total);
            }
        },
    );
}

#[test]
fn scalar_control_flow() {
    check(
        "scalar_control_flow",
        quote!(),
        quote! {
            fn count_flags(flags: Gm<u32>, first: Gm<u32>, rows: Gm<u32>, out: GmMut<u32>) {
                let g = row() as u64;
                let f = load_scalar(first, g);
                let m = load_scalar(rows, g);
                let mut acc = 0u32;
                let mut stopped = false;
                for j in 0..m {
                    if !stopped {
                        if load_scalar(flags, (f + j) as u64) != 0 {
                            acc += 1;
                        } else {
                            stopped = true;
                        }
                    }
                }
                store_scalar(out, g, if stopped { acc } else { acc + 100 });
            }
        },
    );
}
