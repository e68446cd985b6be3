//! One body per kernel, shared by its tile variants.
//!
//! The variants of a kernel are the same code with different numbers (the
//! tile, its UB plan's offsets and sizes). Each body is split into tokens;
//! bodies whose tokens agree except for plain integer literals become one
//! `template <typename K> __aicore__ inline void {kernel}_body(...)` with
//! those literals read from `K` into local `constexpr` values (`TILE`,
//! `U0`, `U1`, ...: not type-dependent, so no `template` disambiguators are
//! needed), and each entry is a `struct {kernel}_k{tile}` of constants plus
//! a call. A variant whose code differs otherwise keeps its own body.

use std::fmt::Write as _;

use super::VariantCode;

/// The entry's declaration: `__global__ __vector__` (AIV only) as the
/// runnable aclrtc samples of asc-devkit mark theirs (`rtc_hello_world`,
/// `rtc_template_add`). `KERNEL_TASK_TYPE_DEFAULT` expands to nothing
/// outside the operator-project builds, so it cannot set the kernel type
/// under aclrtc (docs/ASCEND.md, "Entries").
pub(super) const ENTRY: &str = "extern \"C\" __global__ __vector__";

/// A token: `(text, plain)`, plain for a decimal literal standing alone
/// (not part of an identifier, a suffixed or a floating literal).
fn tokens(s: &str) -> Vec<(String, bool)> {
    let b = s.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.';
    let mut out: Vec<(String, bool)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        if word(b[i]) {
            while i < b.len() && word(b[i]) {
                i += 1;
            }
        } else {
            i += 1;
        }
        let t = &s[start..i];
        out.push((t.to_string(), t.bytes().all(|c| c.is_ascii_digit())));
    }
    out
}

/// The source of every entry of one kernel, sharing bodies where it can.
pub(super) fn entries(kernel: &str, vs: &[VariantCode]) -> String {
    let toks: Vec<Vec<(String, bool)>> = vs.iter().map(|v| tokens(&v.body)).collect();
    let shape = |t: &[(String, bool)]| {
        t.iter().map(|(s, plain)| if *plain { "#" } else { s.as_str() }).collect::<Vec<_>>().join("")
    };
    // Groups of variants with the same shape, in variant order.
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let sh = shape(t);
        match groups.iter_mut().find(|g| g.0 == sh) {
            Some(g) => g.1.push(i),
            None => groups.push((sh, vec![i])),
        }
    }
    let mut s = String::new();
    let mut named = 0;
    for (_, members) in &groups {
        if members.len() == 1 {
            let v = &vs[members[0]];
            let _ = writeln!(s, "\n{ENTRY} void {kernel}_t{}({}) {{", v.tile, v.sig);
            let _ = writeln!(s, "  const uint32_t TILE = {};", v.tile);
            let _ = writeln!(s, "{}}}", v.body);
            continue;
        }
        let body_name = if named == 0 { format!("{kernel}_body") } else { format!("{kernel}_body{named}") };
        named += 1;
        // Constants: one per distinct column of differing literals; the tile itself is `TILE`.
        let first = &toks[members[0]];
        let mut consts: Vec<(String, Vec<String>)> = Vec::new();
        let mut body = String::new();
        for (j, (text, plain)) in first.iter().enumerate() {
            let col: Vec<String> = members.iter().map(|&m| toks[m][j].0.clone()).collect();
            if !*plain || col.iter().all(|c| c == text) {
                body.push_str(text);
                continue;
            }
            let name = if members.iter().zip(&col).all(|(&m, c)| *c == vs[m].tile.to_string()) {
                "TILE".to_string()
            } else if let Some((n, _)) = consts.iter().find(|(_, c)| *c == col) {
                n.clone()
            } else {
                let n = format!("U{}", consts.len());
                consts.push((n.clone(), col));
                n
            };
            body.push_str(&name);
        }
        let tiles: Vec<String> = members.iter().map(|&m| vs[m].tile.to_string()).collect();
        let _ = writeln!(s, "\n// The body of tiles {}; `K` holds the numbers of one tile's UB plan.", tiles.join("/"));
        let _ = writeln!(s, "template <typename K>\n__aicore__ inline void {body_name}({}) {{", vs[members[0]].sig);
        let names: Vec<String> =
            std::iter::once("TILE".to_string()).chain(consts.iter().map(|(n, _)| n.clone())).collect();
        let _ = writeln!(
            s,
            "  constexpr uint32_t {};",
            names.iter().map(|n| format!("{n} = K::{n}")).collect::<Vec<_>>().join(", ")
        );
        let _ = writeln!(s, "{body}}}");
        for (mi, &m) in members.iter().enumerate() {
            let v = &vs[m];
            let mut fields = vec![format!("TILE = {}", v.tile)];
            fields.extend(consts.iter().map(|(n, col)| format!("{n} = {}", col[mi])));
            let _ = writeln!(
                s,
                "\nstruct {kernel}_k{} {{\n  static constexpr uint32_t {};\n}};",
                v.tile,
                fields.join(", ")
            );
            let _ = writeln!(s, "{ENTRY} void {kernel}_t{}({}) {{", v.tile, v.sig);
            let _ = writeln!(s, "  {body_name}<{kernel}_k{}>({});\n}}", v.tile, v.args);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::tokens;

    #[test]
    fn only_standalone_decimal_literals_are_plain() {
        let t = tokens("ub8[4096].x(t12, 1.0f, 5ull, 0xffu) + 64;");
        let plain: Vec<&str> = t.iter().filter(|(_, p)| *p).map(|(s, _)| s.as_str()).collect();
        assert_eq!(plain, ["4096", "64"]);
    }
}
