//! Malformed conformance cases: the runner never panics, errors name the
//! field, a bad request is confined to itself (the other requests of the
//! same case give exactly the results they give without it), and only an
//! unreadable case file is an error of the whole run (non-zero exit).

use std::panic::{catch_unwind, AssertUnwindSafe};

use sampler_host::conformance::case::{exit_code, parse_case, run_case_str, CaseError};
use sampler_host::BackendKind;
use serde_json::{json, Value};

const V: usize = 8;

/// Runs a case, asserting that nothing panics.
fn run(label: &str, text: &str) -> Result<Value, CaseError> {
    match catch_unwind(AssertUnwindSafe(|| run_case_str(text, BackendKind::Cpu))) {
        Ok(r) => r,
        Err(_) => panic!("{label}: run_case_str panicked on {}", &text[..text.len().min(300)]),
    }
}

/// Deterministic logits row `i`.
fn row(i: usize) -> Value {
    Value::Array((0..V).map(|t| json!(((i * 7 + t * 3) % 11) as f64 * 0.37 - 1.0)).collect())
}

/// A request and the logits rows it owns.
#[derive(Clone)]
struct Req {
    v: Value,
    rows: Vec<Value>,
}

fn req(v: Value, first: usize) -> Req {
    let n = v["rows"].as_u64().unwrap() as usize;
    Req { v, rows: (first..first + n).map(row).collect() }
}

fn base(kind: &str) -> Value {
    json!({"kind": kind, "seq_seed": 12345u64, "temperature": 0.8, "top_p": 0.9, "top_k": -1, "top_logprobs": 2})
}

fn with(mut v: Value, fields: Value) -> Value {
    for (k, x) in fields.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn uniform_dist() -> Value {
    json!({"ids": (0..V as i32).collect::<Vec<_>>(), "logprobs": vec![-(V as f64).ln(); V]})
}

/// The good requests: a decode row, a verify request, prompt logprobs, draft draws, a masked golden prefill row.
fn goods() -> Vec<Req> {
    vec![
        req(with(base("sample"), json!({"rows": 1, "phase": "decode", "seqlen_k": 50, "seqlen_q": 1})), 0),
        req(
            with(
                base("verify"),
                json!({"rows": 3, "seqlen_k": 60, "seqlen_q": 3, "drafts": [2, 5], "draft_dists": [uniform_dist(), uniform_dist()]}),
            ),
            1,
        ),
        req(with(base("prompt_logprobs"), json!({"rows": 2, "targets": [3, -1]})), 4),
        req(with(base("draft"), json!({"rows": 2, "seqlen_k": 70, "seqlen_q": 1, "last_valid_offset": 1})), 6),
        req(
            with(
                base("sample"),
                json!({"rows": 1, "phase": "prefill", "seqlen_k": 41, "golden": [4], "masks": [[63]]}),
            ),
            8,
        ),
    ]
}

fn case_text(reqs: &[Req]) -> String {
    let logits: Vec<Value> = reqs.iter().flat_map(|r| r.rows.clone()).collect();
    let requests: Vec<Value> = reqs.iter().map(|r| r.v.clone()).collect();
    json!({"vocab_size": V, "force_topk": 0, "nextn": 5, "logits": logits, "requests": requests}).to_string()
}

/// Per request: (its rows' outputs, its request output).
fn split(out: &Value, reqs: &[Req]) -> Vec<(Vec<Value>, Value)> {
    let rows = out["rows"].as_array().unwrap();
    let outs = out["requests"].as_array().unwrap();
    assert_eq!(rows.len(), reqs.iter().map(|r| r.rows.len()).sum::<usize>(), "row count");
    assert_eq!(outs.len(), reqs.len(), "request count");
    let mut at = 0;
    reqs.iter()
        .zip(outs)
        .map(|(r, o)| {
            let s = rows[at..at + r.rows.len()].to_vec();
            at += r.rows.len();
            (s, o.clone())
        })
        .collect()
}

/// Puts `bad` in the middle of the good requests and checks: no panic, a
/// document, `bad` fails with a status naming `field`, its rows are empty,
/// and every good request's outputs equal those of the batch without `bad`.
fn confined(label: &str, bad: Req, field: &str) {
    let g = goods();
    let reference = split(&run(label, &case_text(&g)).expect("good case runs"), &g);
    for (i, (_, o)) in reference.iter().enumerate() {
        assert_eq!(o["status"], "ok", "good request {i} must be ok: {o}");
    }
    let mut batch = g.clone();
    batch.insert(2, bad.clone());
    let out = run(label, &case_text(&batch)).unwrap_or_else(|e| panic!("{label}: whole case failed: {e}"));
    let got = split(&out, &batch);
    let (bad_rows, bad_out) = &got[2];
    let status = bad_out["status"].as_str().unwrap();
    assert!(status.starts_with("error"), "{label}: expected an error status, got {status:?}");
    assert!(status.contains(field), "{label}: status {status:?} does not name `{field}`");
    assert_eq!(bad_out["accepted"], 0, "{label}");
    assert_eq!(bad_out["emitted"], json!([]), "{label}");
    assert_eq!(bad_out["prompt_logprobs"], json!([]), "{label}");
    for r in bad_rows {
        assert_eq!(r, &json!({"token": -1, "logprob": null, "top_logprobs": [], "sum_smaller_probs": 0.0}), "{label}");
    }
    let others: Vec<_> = got.iter().enumerate().filter(|(i, _)| *i != 2).map(|(_, x)| x.clone()).collect();
    assert_eq!(others.len(), reference.len());
    for (i, (a, b)) in others.iter().zip(&reference).enumerate() {
        assert_eq!(a, b, "{label}: good request {i} changed next to the bad one");
    }
}

fn sample() -> Value {
    with(base("sample"), json!({"rows": 1, "phase": "decode", "seqlen_k": 50, "seqlen_q": 1}))
}

fn verify() -> Value {
    goods()[1].v.clone()
}

fn rows_of(v: Value, n: usize) -> Req {
    Req { v, rows: (100..100 + n).map(row).collect() }
}

#[test]
fn bad_requests_are_confined_and_named() {
    let s = |fields: Value| rows_of(with(sample(), fields), 1);
    let vr = |fields: Value| rows_of(with(verify(), fields), 3);
    let without = |f: &str| {
        let mut v = sample();
        v.as_object_mut().unwrap().remove(f);
        rows_of(v, 1)
    };
    let cases: Vec<(&str, Req, &str)> = vec![
        ("unknown field", s(json!({"tempreature": 1.0})), "tempreature"),
        ("field of another kind", s(json!({"targets": [1]})), "targets"),
        ("temperature string", s(json!({"temperature": "hot"})), "temperature"),
        ("temperature nan", s(json!({"temperature": "nan"})), "temperature"),
        ("temperature null = -inf", s(json!({"temperature": null})), "temperature"),
        ("temperature negative", s(json!({"temperature": -0.5})), "temperature"),
        ("temperature object", s(json!({"temperature": {"a": 1}})), "temperature"),
        ("top_p zero", s(json!({"top_p": 0.0})), "top_p"),
        ("top_p inf", s(json!({"top_p": "inf"})), "top_p"),
        ("top_p nan", s(json!({"top_p": "nan"})), "top_p"),
        ("top_k fraction", s(json!({"top_k": 2.5})), "top_k"),
        ("top_k huge", s(json!({"top_k": 1e30})), "top_k"),
        ("top_k above i64", s(json!({"top_k": u64::MAX})), "top_k"),
        ("top_k above i32", s(json!({"top_k": 1u64 << 31})), "top_k"),
        ("top_k zero", s(json!({"top_k": 0})), "top_k"),
        ("top_k bool", s(json!({"top_k": true})), "top_k"),
        ("top_logprobs negative", s(json!({"top_logprobs": -1})), "top_logprobs"),
        ("top_logprobs above N", s(json!({"top_logprobs": 9})), "top_logprobs"),
        ("top_logprobs above u32", s(json!({"top_logprobs": 1u64 << 40})), "top_logprobs"),
        // SAMPLER.md section 10.
        ("min_p above 1", s(json!({"min_p": 1.5})), "min_p"),
        ("min_p negative", s(json!({"min_p": -0.1})), "min_p"),
        ("min_p nan", s(json!({"min_p": "nan"})), "min_p"),
        ("min_p null = -inf", s(json!({"min_p": null})), "min_p"),
        ("min_p string", s(json!({"min_p": "0.1"})), "min_p"),
        ("filter_order unknown", s(json!({"filter_order": "top_k"})), "filter_order"),
        ("filter_order number", s(json!({"filter_order": 1})), "filter_order"),
        ("logprobs_mode unknown", s(json!({"logprobs_mode": "logits"})), "logprobs_mode"),
        ("logprobs_mode null", s(json!({"logprobs_mode": null})), "logprobs_mode"),
        ("seq_seed negative", s(json!({"seq_seed": -5})), "seq_seed"),
        ("seq_seed float", s(json!({"seq_seed": 1e20})), "seq_seed"),
        ("seq_seed string", s(json!({"seq_seed": "7"})), "seq_seed"),
        ("missing seq_seed", without("seq_seed"), "seq_seed"),
        ("missing temperature", without("temperature"), "temperature"),
        ("missing phase", without("phase"), "phase"),
        ("missing seqlen_k", without("seqlen_k"), "seqlen_k"),
        ("missing kind", without("kind"), "kind"),
        ("bad kind", s(json!({"kind": "bogus"})), "kind"),
        ("kind number", s(json!({"kind": 3})), "kind"),
        ("bad phase", s(json!({"phase": "middle"})), "phase"),
        ("seqlen_k negative", s(json!({"seqlen_k": -1})), "seqlen_k"),
        ("sample with 2 rows", rows_of(with(sample(), json!({"rows": 2})), 2), "rows"),
        ("sample with 0 rows", rows_of(with(sample(), json!({"rows": 0})), 0), "rows"),
        ("negative rows", rows_of(with(sample(), json!({"rows": -1})), 1), "rows"),
        ("rows string", rows_of(with(sample(), json!({"rows": "1"})), 1), "rows"),
        ("rows missing", without("rows"), "rows"),
        ("masks wrong word count", s(json!({"masks": [[1, 2]]})), "mask"),
        ("masks wrong mask count", s(json!({"masks": [[255], [255]]})), "mask"),
        ("masks empty", s(json!({"masks": []})), "mask"),
        ("mask word too big", s(json!({"masks": [[4294967296u64]]})), "masks[0][0]"),
        ("mask word negative", s(json!({"masks": [[-1]]})), "masks[0][0]"),
        ("masks not an array", s(json!({"masks": 7})), "masks"),
        ("mask allows nothing", s(json!({"masks": [[0]]})), "logits"),
        ("golden too long", s(json!({"golden": [1, 2]})), "golden"),
        ("golden out of vocab", s(json!({"golden": [8]})), "golden"),
        ("golden not ids", s(json!({"golden": ["a"]})), "golden"),
        ("drafts out of range", vr(json!({"drafts": [2, 99]})), "drafts"),
        ("drafts negative", vr(json!({"drafts": [-2, 2]})), "drafts"),
        ("sample decode seqlen_q 0", s(json!({"seqlen_q": 0})), "seqlen_q"),
        ("drafts beyond i32", vr(json!({"drafts": [2, 1u64 << 33]})), "drafts"),
        ("drafts too few", vr(json!({"drafts": [2]})), "drafts"),
        ("rows != seqlen_q", vr(json!({"seqlen_q": 4})), "rows"),
        (
            "draft_dists missing",
            rows_of(
                {
                    let mut v = verify();
                    v.as_object_mut().unwrap().remove("draft_dists");
                    v
                },
                3,
            ),
            "draft_dists",
        ),
        ("draft_dists too few", vr(json!({"draft_dists": [uniform_dist()]})), "draft_dists"),
        (
            "draft_dists unknown key",
            vr(json!({"draft_dists": [uniform_dist(), {"ids": [1], "logprobs": [0.0], "p": 1}]})),
            "draft_dists[1].p",
        ),
        (
            "draft_dists lengths differ",
            vr(json!({"draft_dists": [uniform_dist(), {"ids": [1, 2], "logprobs": [0.0]}]})),
            "draft_dists[1]",
        ),
        (
            "draft_dists nan",
            vr(json!({"draft_dists": [uniform_dist(), {"ids": [1], "logprobs": ["nan"]}]})),
            "draft_dists",
        ),
        (
            "draft_dists positive",
            vr(json!({"draft_dists": [uniform_dist(), {"ids": [1], "logprobs": [5.0]}]})),
            "draft_dists",
        ),
        (
            "draft_dists id out of range",
            vr(json!({"draft_dists": [uniform_dist(), {"ids": [100], "logprobs": [0.0]}]})),
            "draft_dists",
        ),
        ("draft_dists not objects", vr(json!({"draft_dists": [1, 2]})), "draft_dists[0]"),
        ("targets mismatch", rows_of(with(base("prompt_logprobs"), json!({"rows": 2, "targets": [1]})), 2), "targets"),
        (
            "targets out of vocab",
            rows_of(with(base("prompt_logprobs"), json!({"rows": 2, "targets": [1, 8]})), 2),
            "targets",
        ),
        ("rows larger than logits", rows_of(with(sample(), json!({"rows": 1_000_000_000_000u64})), 1), "rows"),
        (
            "draft rows huge",
            rows_of(
                with(base("draft"), json!({"rows": u64::MAX, "seqlen_k": 1, "seqlen_q": 1, "last_valid_offset": 0})),
                1,
            ),
            "rows",
        ),
        ("not an object", Req { v: json!(42), rows: vec![row(100)] }, "requests[2]"),
        ("logits row too short", Req { v: sample(), rows: vec![json!([1.0, 2.0])] }, "logits[4]"),
        ("logits row too long", Req { v: sample(), rows: vec![Value::Array(vec![json!(0.5); V + 1])] }, "logits[4]"),
        ("logits row not an array", Req { v: sample(), rows: vec![json!(1.5)] }, "logits[4]"),
        (
            "logits value banana",
            Req { v: sample(), rows: vec![json!([0, 1, 2, "banana", 4, 5, 6, 7])] },
            "logits[4][3]",
        ),
        ("logits value bool", Req { v: sample(), rows: vec![json!([0, 1, 2, true, 4, 5, 6, 7])] }, "logits[4][3]"),
        ("logits nan", Req { v: sample(), rows: vec![json!([0, 1, "nan", 3, 4, 5, 6, 7])] }, "logits"),
        ("logits +inf", Req { v: sample(), rows: vec![json!([0, 1, "inf", 3, 4, 5, 6, 7])] }, "logits"),
        ("logits overflow f32", Req { v: sample(), rows: vec![json!([0, 1, 1e39, 3, 4, 5, 6, 7])] }, "logits"),
        (
            "logits all -inf",
            Req { v: sample(), rows: vec![json!([null, null, null, "-inf", null, null, null, null])] },
            "logits",
        ),
    ];
    let n = cases.len();
    for (label, bad, field) in cases {
        confined(label, bad, field);
    }
    assert!(n >= 60);
}

#[test]
fn huge_but_valid_numbers_are_fine() {
    let mut g = goods();
    g[0].v = with(sample(), json!({"seq_seed": u64::MAX, "seqlen_k": u64::MAX, "seqlen_q": 1, "top_k": i32::MAX}));
    g[3].v = with(g[3].v.clone(), json!({"seqlen_k": u64::MAX, "seqlen_q": u64::MAX, "last_valid_offset": u64::MAX}));
    g[1].rows[0] = json!([1e38, -1e38, 0, 0, 0, 0, 0, 0]);
    let out = run("huge", &case_text(&g)).expect("runs");
    for (i, (_, o)) in split(&out, &g).iter().enumerate() {
        assert_eq!(o["status"], "ok", "request {i}: {o}");
    }
    // tiny temperature, temperature +inf
    g[0].v = with(sample(), json!({"temperature": 1e-30}));
    g[2].v = with(g[2].v.clone(), json!({"temperature": "inf"}));
    let out = run("extreme temperatures", &case_text(&g)).expect("runs");
    for (_, o) in split(&out, &g) {
        assert!(o["status"].is_string());
    }
}

#[test]
fn determinism_and_alone_equals_in_batch() {
    let g = goods();
    let all = run("all", &case_text(&g)).unwrap();
    assert_eq!(all, run("again", &case_text(&g)).unwrap(), "same input, same output");
    let parts = split(&all, &g);
    for (i, r) in g.iter().enumerate() {
        let alone = run("alone", &case_text(std::slice::from_ref(r))).unwrap();
        let (rows, o) = &split(&alone, std::slice::from_ref(r))[0];
        assert_eq!(rows, &parts[i].0, "request {i} rows alone vs in batch");
        assert_eq!(o, &parts[i].1, "request {i} alone vs in batch");
    }
}

fn top_err(label: &str, text: &str, field: &str) {
    match run(label, text) {
        Ok(v) => panic!("{label}: expected a case error naming `{field}`, got a document {v}"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(field), "{label}: error {msg:?} does not name `{field}`");
            assert_ne!(exit_code(&Err(e)), 0, "{label}");
        }
    }
}

#[test]
fn unreadable_cases_are_case_errors() {
    let good = case_text(&goods());
    top_err("truncated", &good[..good.len() / 2], "line");
    top_err("empty text", "", "JSON");
    top_err("not an object", "[1, 2]", "case");
    top_err("deep nesting", &"[".repeat(100_000), "JSON");
    let with_top = |f: &dyn Fn(&mut Value)| {
        let mut v: Value = serde_json::from_str(&good).unwrap();
        f(&mut v);
        v.to_string()
    };
    top_err(
        "missing vocab_size",
        &with_top(&|v| {
            v.as_object_mut().unwrap().remove("vocab_size");
        }),
        "vocab_size",
    );
    top_err("vocab_size negative", &with_top(&|v| v["vocab_size"] = json!(-8)), "vocab_size");
    top_err("vocab_size zero", &with_top(&|v| v["vocab_size"] = json!(0)), "vocab_size");
    top_err("vocab_size huge", &with_top(&|v| v["vocab_size"] = json!(1u64 << 40)), "vocab_size");
    top_err("vocab_size nan", &with_top(&|v| v["vocab_size"] = json!("nan")), "vocab_size");
    top_err("force_topk string", &with_top(&|v| v["force_topk"] = json!("x")), "force_topk");
    top_err("nextn negative", &with_top(&|v| v["nextn"] = json!(-1)), "nextn");
    top_err("logits not an array", &with_top(&|v| v["logits"] = json!({"a": 1})), "logits");
    top_err(
        "missing logits",
        &with_top(&|v| {
            v.as_object_mut().unwrap().remove("logits");
        }),
        "logits",
    );
    top_err("requests not an array", &with_top(&|v| v["requests"] = json!("x")), "requests");
    top_err("unknown top-level field", &with_top(&|v| v["vocab"] = json!(8)), "vocab");
    top_err("an extra logits row", &with_top(&|v| v["logits"].as_array_mut().unwrap().push(row(0))), "logits");
    top_err(
        "a missing logits row",
        &with_top(&|v| {
            v["logits"].as_array_mut().unwrap().pop();
        }),
        "logits",
    );
    top_err(
        "two unknown rows",
        &with_top(&|v| {
            v["requests"][0]["rows"] = json!(-1);
            v["requests"][1]["rows"] = json!("3");
        }),
        "requests[0].rows",
    );
    // A file the runner cannot read at all is also a non-zero exit (the example's path).
    assert_ne!(exit_code(&Err(CaseError::Json { msg: "x".into(), line: 1, column: 1 })), 0);
}

#[test]
fn empty_and_minimal_cases_are_documents() {
    let out = run("no requests", r#"{"vocab_size": 8, "logits": [], "requests": []}"#).expect("empty case is fine");
    assert_eq!(out, json!({"rows": [], "requests": []}));
    assert_eq!(exit_code(&Ok(out)), 0);
    // A zero-row request of a kind that allows it.
    let t = json!({"vocab_size": 8, "logits": [], "requests": [with(base("prompt_logprobs"), json!({"rows": 0, "targets": []}))]}).to_string();
    let out = run("zero rows", &t).expect("runs");
    assert_eq!(out["requests"][0]["status"], "ok");
    // The only request unreadable: a document with its error, exit 0.
    let t = json!({"vocab_size": 8, "logits": [row(0)], "requests": [{"kind": "sample", "rows": 1}]}).to_string();
    let out = run("lone bad request", &t).expect("a document");
    assert!(out["requests"][0]["status"].as_str().unwrap().starts_with("error"));
    assert_eq!(exit_code(&Ok(out)), 0);
    // V = 1.
    let t = json!({"vocab_size": 1, "logits": [[0.5]], "requests": [with(sample(), json!({"top_logprobs": 1}))]})
        .to_string();
    let out = run("V = 1", &t).expect("runs");
    assert_eq!(out["rows"][0]["token"], 0);
    assert_eq!(out["rows"][0]["top_logprobs"], json!([[0, 0.0]]));
}

#[test]
fn input_conventions() {
    // null = -inf and "-inf" are the same; "nan" fails only its request.
    let a = json!({"vocab_size": 4, "logits": [[0.5, null, 1.0, 2.0]], "requests": [with(sample(), json!({"top_logprobs": 4}))]}).to_string();
    let b = a.replace("null", "\"-inf\"");
    let (ra, rb) = (run("null", &a).unwrap(), run("-inf", &b).unwrap());
    assert_eq!(ra, rb);
    assert_eq!(ra["rows"][0]["top_logprobs"][3], json!([1, null]), "removed token reported with null");
    // seeds above i64::MAX parse as u64 (and differ from the i64-wrapped value's draw stream).
    let c = parse_case(&json!({"vocab_size": 4, "logits": [[0, 0, 0, 0]], "requests": [with(sample(), json!({"seq_seed": u64::MAX}))]}).to_string()).unwrap();
    let (r, _) = c.requests[0].as_ref().unwrap();
    assert_eq!(r.params.seq_seed, Some(u64::MAX));
}

/// SplitMix64, for deterministic mutations.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every path (as indices/keys) of a JSON value.
fn paths(v: &Value, here: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    out.push(here.clone());
    match v {
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                here.push(json!(i));
                paths(x, here, out);
                here.pop();
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                here.push(json!(k));
                paths(x, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Value]) -> &'a mut Value {
    path.iter().fold(v, |v, p| match p {
        Value::Number(i) => &mut v[i.as_u64().unwrap() as usize],
        Value::String(k) => &mut v[k.as_str()],
        _ => unreachable!(),
    })
}

#[test]
fn random_mutations_never_panic() {
    let mut seeds: Vec<Value> = vec![serde_json::from_str(&case_text(&goods())).unwrap()];
    let dir = std::path::Path::new(sampler_host::conformance::case::GOLDEN_DIR);
    for name in [
        "bug-verify-zero-target.json",
        "bug-mask-wrong-length.json",
        "bug-param-errors.json",
        "bug-prompt-logprobs-filtered.json",
    ] {
        let t = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name} in {}: {e}", dir.display()));
        let mut v: Value = serde_json::from_str(&t).unwrap();
        v.as_object_mut().unwrap().remove("expected");
        seeds.push(v);
    }
    let pool = [
        json!(null),
        json!(-1),
        json!(0),
        json!(1),
        json!(2.5),
        json!(1e300),
        json!(-1e300),
        json!(u64::MAX),
        json!(i64::MIN),
        json!("nan"),
        json!("inf"),
        json!("-inf"),
        json!("x"),
        json!(true),
        json!([]),
        json!({}),
        json!([null]),
        json!([[0]]),
        json!([4294967295u64]),
        json!({"ids": [0], "logprobs": [0.0]}),
        json!(1u64 << 40),
    ];
    let mut rng = Rng(42);
    let mut runs = 0;
    let mut docs = 0;
    for round in 0..1500 {
        let mut v = seeds[round % seeds.len()].clone();
        for _ in 0..1 + rng.below(3) {
            let mut ps = Vec::new();
            paths(&v, &mut Vec::new(), &mut ps);
            let p = &ps[rng.below(ps.len())];
            if p.is_empty() {
                continue;
            }
            let target = at(&mut v, p);
            match rng.below(4) {
                // delete an object key / array element
                0 => {
                    let (last, parent) = p.split_last().unwrap();
                    let parent = at(&mut v, parent);
                    match (parent, last) {
                        (Value::Object(o), Value::String(k)) => {
                            o.remove(k);
                        }
                        (Value::Array(a), Value::Number(i)) => {
                            a.remove(i.as_u64().unwrap() as usize);
                        }
                        _ => {}
                    }
                }
                // duplicate an array element
                1 if target.is_array() && !target.as_array().unwrap().is_empty() => {
                    let a = target.as_array_mut().unwrap();
                    let x = a[rng.below(a.len())].clone();
                    a.push(x);
                }
                _ => *target = pool[rng.below(pool.len())].clone(),
            }
        }
        let text = v.to_string();
        let res = run(&format!("mutation round {round}"), &text);
        runs += 1;
        if let Ok(doc) = res {
            docs += 1;
            // A document keeps the shape of the case: one row per logits row, one entry per request.
            assert_eq!(
                doc["rows"].as_array().unwrap().len(),
                v["logits"].as_array().unwrap().len(),
                "round {round}: {text}"
            );
            assert_eq!(
                doc["requests"].as_array().unwrap().len(),
                v["requests"].as_array().unwrap().len(),
                "round {round}"
            );
            for q in doc["requests"].as_array().unwrap() {
                let s = q["status"].as_str().unwrap();
                assert!(s == "ok" || s.starts_with("error: "), "round {round}: status {s:?}");
            }
        }
    }
    assert_eq!(runs, 1500);
    assert!(docs > 300, "most mutations should still give a document ({docs})");
}
