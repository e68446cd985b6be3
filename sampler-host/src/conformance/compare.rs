//! The comparison rule of CONFORMANCE.md between two result documents.
//!
//! ids exactly; a `status` by whether it starts with `"error"`; every float
//! `b` expected and `a` produced within `|a - b| <= 1e-4 + 1e-5 * |b|`
//! (`logprob`, `top_logprobs` values, `sum_smaller_probs`,
//! `prompt_logprobs`), and `null` (-inf) exactly where `null` is expected.
//! Every other value (ids, `accepted`, `emitted`, unknown keys) must be
//! equal. Keys must match on both sides.

use serde_json::Value;

/// Absolute tolerance of the float rule.
pub const ATOL: f64 = 1e-4;
/// Relative tolerance of the float rule (relative to the expected value).
pub const RTOL: f64 = 1e-5;

/// Whether produced `a` matches expected `b` under the float rule.
pub fn float_close(a: f64, b: f64) -> bool {
    (a - b).abs() <= ATOL + RTOL * b.abs()
}

/// Differences between an expected and an actual result document, one
/// line each (`path: what`); empty when they match.
pub fn compare_results(expected: &Value, actual: &Value) -> Vec<String> {
    let mut diffs = Vec::new();
    walk(expected, actual, "$", Ctx::Exact, &mut diffs);
    diffs
}

#[derive(Clone, Copy, PartialEq)]
enum Ctx {
    /// Compare exactly (ids, counts, unknown values).
    Exact,
    /// A float of the document (null = -inf).
    Float,
    /// A list of floats.
    FloatList,
    /// `top_logprobs`: a list of `[id, float]` pairs.
    TopList,
    /// One `[id, float]` pair.
    TopPair,
    /// A `status` string.
    Status,
}

fn ctx_of_key(key: &str) -> Ctx {
    match key {
        "logprob" | "sum_smaller_probs" => Ctx::Float,
        "prompt_logprobs" | "emitted_logprobs" => Ctx::FloatList,
        "top_logprobs" => Ctx::TopList,
        "status" => Ctx::Status,
        _ => Ctx::Exact,
    }
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 {
        format!("{}...", &s[..s.char_indices().nth(117).map_or(s.len(), |(i, _)| i)])
    } else {
        s
    }
}

fn walk(e: &Value, a: &Value, path: &str, ctx: Ctx, d: &mut Vec<String>) {
    match ctx {
        Ctx::Float => float(e, a, path, d),
        Ctx::Status => match (e.as_str(), a.as_str()) {
            (Some(es), Some(as_)) => {
                if es.starts_with("error") != as_.starts_with("error") {
                    d.push(format!("{path}: status expected {es:?}, got {as_:?}"));
                }
            }
            _ => d.push(format!("{path}: status expected {}, got {}", show(e), show(a))),
        },
        Ctx::FloatList | Ctx::TopList | Ctx::TopPair => match (e.as_array(), a.as_array()) {
            (Some(ea), Some(aa)) => {
                if ea.len() != aa.len() {
                    d.push(format!(
                        "{path}: expected {} entries, got {} (expected {}, got {})",
                        ea.len(),
                        aa.len(),
                        show(e),
                        show(a)
                    ));
                    return;
                }
                for (i, (x, y)) in ea.iter().zip(aa).enumerate() {
                    let sub = match ctx {
                        Ctx::FloatList => Ctx::Float,
                        Ctx::TopList => Ctx::TopPair,
                        _ if i == 1 => Ctx::Float,
                        _ => Ctx::Exact,
                    };
                    walk(x, y, &format!("{path}[{i}]"), sub, d);
                }
            }
            _ => d.push(format!("{path}: expected {}, got {}", show(e), show(a))),
        },
        Ctx::Exact => match (e, a) {
            (Value::Object(eo), Value::Object(ao)) => {
                for (k, ev) in eo {
                    match ao.get(k) {
                        Some(av) => walk(ev, av, &format!("{path}.{k}"), ctx_of_key(k), d),
                        None => d.push(format!("{path}.{k}: missing (expected {})", show(ev))),
                    }
                }
                for (k, av) in ao {
                    if !eo.contains_key(k) {
                        d.push(format!("{path}.{k}: unexpected key (got {})", show(av)));
                    }
                }
            }
            (Value::Array(ea), Value::Array(aa)) => {
                if ea.len() != aa.len() {
                    d.push(format!("{path}: expected {} entries, got {}", ea.len(), aa.len()));
                }
                for (i, (x, y)) in ea.iter().zip(aa).enumerate() {
                    walk(x, y, &format!("{path}[{i}]"), Ctx::Exact, d);
                }
            }
            (Value::Number(x), Value::Number(y)) => {
                let same = match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
                    (Some(p), Some(q), _, _) => p == q,
                    (_, _, Some(p), Some(q)) => p == q,
                    _ => x.as_f64() == y.as_f64() && x.is_f64() == y.is_f64(),
                };
                if !same {
                    d.push(format!("{path}: expected {x}, got {y}"));
                }
            }
            _ if e == a => {}
            _ => d.push(format!("{path}: expected {}, got {}", show(e), show(a))),
        },
    }
}

fn float(e: &Value, a: &Value, path: &str, d: &mut Vec<String>) {
    match (e, a) {
        (Value::Null, Value::Null) => {}
        (Value::Number(x), Value::Number(y)) => {
            let (b, v) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
            if !float_close(v, b) {
                d.push(format!("{path}: expected {b}, got {v} (|diff| = {:.3e})", (v - b).abs()));
            }
        }
        (Value::String(x), Value::String(y)) if x == y => {}
        _ => d.push(format!("{path}: expected {}, got {}", show(e), show(a))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rule() {
        let e = json!({"rows": [{"token": 1, "logprob": -0.4, "top_logprobs": [[1, -0.4], [4, null]], "sum_smaller_probs": 1.0}],
                       "requests": [{"status": "error: x", "accepted": 0, "emitted": [1], "prompt_logprobs": [null, -1.0]}]});
        let a = json!({"rows": [{"token": 1, "logprob": -0.40005, "top_logprobs": [[1, -0.4], [4, null]], "sum_smaller_probs": 1.0}],
                       "requests": [{"status": "error: y", "accepted": 0, "emitted": [1], "prompt_logprobs": [null, -1.00001]}]});
        assert!(compare_results(&e, &a).is_empty(), "{:?}", compare_results(&e, &a));
        let b = json!({"rows": [{"token": 2, "logprob": -0.5, "top_logprobs": [[1, -0.4], [4, -50.0]], "sum_smaller_probs": 1.0}],
                       "requests": [{"status": "ok", "accepted": 0, "emitted": [1], "prompt_logprobs": [-3.0, -1.0], "x": 1}]});
        let d = compare_results(&e, &b);
        assert_eq!(d.len(), 6, "{d:#?}");
        assert!(d.iter().any(|x| x.starts_with("$.rows[0].token:")), "{d:#?}");
        assert!(d.iter().any(|x| x.starts_with("$.requests[0].x: unexpected")), "{d:#?}");
        // null must be null exactly, and 0 ints vs floats are compared as floats only where floats live.
        assert!(!compare_results(&json!({"logprob": null}), &json!({"logprob": -1e30})).is_empty());
        assert!(compare_results(&json!({"sum_smaller_probs": 0}), &json!({"sum_smaller_probs": 0.0})).is_empty());
        // tolerance at b = 1000 is 1e-4 + 1e-2
        assert!(float_close(1000.0 + 0.0100, 1000.0));
        assert!(!float_close(1000.0 + 0.0102, 1000.0));
    }
}
