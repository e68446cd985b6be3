//! Conformance cases (docs/spec/CONFORMANCE.md): one JSON case in, one
//! JSON result document out.
//!
//! Parsing is in two levels so that bad input never panics and stays confined:
//! - the top level (`vocab_size`, `force_topk`, `nextn`, `logits`,
//!   `requests`, and which logits rows each request owns) must be readable,
//!   else the whole case fails with a [`CaseError`] naming the field and value;
//! - each request is then parsed on its own from its `serde_json::Value`
//!   (with its own logits rows): any problem (unknown field, wrong type,
//!   missing field, rows inconsistent with the kind, a logits row of the
//!   wrong length, ...) becomes a [`RequestCaseError`] and an error status of
//!   that request only. Such a request is left out of the sampler's batch and
//!   its outputs are spliced in exactly as the sampler writes a failed
//!   request (token -1, logprob -inf, no top logprobs, sum 0; nothing
//!   emitted). Batch invariance (SAMPLER.md section 9) makes the other
//!   requests' outputs the same as with a failed request in the batch.
//!
//! Numbers: `null` is -inf wherever a float is expected; the strings `"nan"`,
//! `"inf"`, `"+inf"` and `"-inf"` are accepted for every float (CONFORMANCE.md
//! only requires them in `logits`).

use serde_json::{Map, Value};
use thiserror::Error;

use crate::error::{BatchError, ConfigError};
use crate::request::{Request, StepOutput};
use crate::sampler::{BackendKind, Sampler, SamplerConfig};

pub use super::requests::RequestCaseError;
use super::requests::{parse_request, show};

/// A case that cannot be run at all (the file itself is unreadable).
#[derive(Clone, Debug, Error, PartialEq)]
pub enum CaseError {
    /// Not JSON.
    #[error("case is not valid JSON: {msg} (line {line}, column {column})")]
    Json {
        /// The parser's message.
        msg: String,
        /// Line (1-based).
        line: usize,
        /// Column (1-based).
        column: usize,
    },
    /// A top-level field is missing, of the wrong type or out of range.
    #[error("bad case field `{field}` = {value}: {msg}")]
    Field {
        /// The field.
        field: String,
        /// Its value as written.
        value: String,
        /// What is wrong.
        msg: String,
    },
    /// The sampler refused the configuration (`vocab_size`, `force_topk`, backend).
    #[error("bad case configuration: {0}")]
    Config(#[from] ConfigError),
    /// The sampler refused the batch (should not happen for a parsed case).
    #[error("the sampler refused the batch: {0}")]
    Batch(#[from] BatchError),
}

impl CaseError {
    /// The field named by the error, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            CaseError::Field { field, .. } => Some(field),
            CaseError::Config(ConfigError::VocabSize(_)) => Some("vocab_size"),
            CaseError::Config(ConfigError::ForceTopkTooLarge { .. }) => Some("force_topk"),
            CaseError::Config(ConfigError::Field { field, .. }) => Some(field),
            _ => None,
        }
    }
}

/// A parsed case: the configuration, and per request either a [`Request`]
/// with its logits rows or why it is malformed.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Vocabulary size V.
    pub vocab_size: u32,
    /// Force top-k width (0 = off).
    pub force_topk: u32,
    /// Most drafts per request.
    pub nextn: u32,
    /// `"input": "probs"`: `logits` holds probability rows (SAMPLER.md section 12).
    pub probs: bool,
    /// Per request: rows owned (attributed from `rows`).
    pub rows: Vec<usize>,
    /// Per request: the request and its `[rows, V]` logits, or its error.
    pub requests: Vec<Result<(Request, Vec<f32>), RequestCaseError>>,
}

impl Case {
    /// Candidate width N of the case (V when force top-k is off).
    pub fn width(&self) -> u32 {
        if self.force_topk == 0 || self.force_topk >= self.vocab_size {
            self.vocab_size
        } else {
            self.force_topk
        }
    }

    /// The readable requests in order and their `[R, V]` logits, concatenated
    /// (malformed requests left out): what a `Sampler` step takes.
    pub fn well_formed(&self) -> (Vec<Request>, Vec<f32>) {
        let mut reqs = Vec::new();
        let mut logits = Vec::new();
        for (req, l) in self.requests.iter().flatten() {
            reqs.push(req.clone());
            logits.extend_from_slice(l);
        }
        (reqs, logits)
    }
}

/// Top-level keys besides the configuration that a case file may carry and the runner ignores.
const IGNORED_TOP: &[&str] = &["expected", "name", "description", "comment"];

fn top_err(field: &str, value: &Value, msg: impl Into<String>) -> CaseError {
    CaseError::Field { field: field.into(), value: show(value), msg: msg.into() }
}

fn top_uint(obj: &Map<String, Value>, field: &str, default: Option<u32>) -> Result<u32, CaseError> {
    match obj.get(field) {
        None => default.ok_or_else(|| top_err(field, &Value::Null, "missing (required)")),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| top_err(field, v, "expected an integer in 0..=4294967295")),
    }
}

/// Parses a case file's text. Only top-level problems are errors; a bad
/// request is an `Err` entry of [`Case::requests`].
pub fn parse_case(json: &str) -> Result<Case, CaseError> {
    let top: Value = serde_json::from_str(json).map_err(|e| CaseError::Json {
        msg: e.to_string(),
        line: e.line(),
        column: e.column(),
    })?;
    let obj = top.as_object().ok_or_else(|| top_err("(case)", &top, "a case must be a JSON object"))?;
    for (k, v) in obj {
        if !matches!(k.as_str(), "vocab_size" | "force_topk" | "nextn" | "input" | "logits" | "requests")
            && !IGNORED_TOP.contains(&k.as_str())
        {
            return Err(top_err(k, v, "unknown top-level field"));
        }
    }
    let vocab_size = top_uint(obj, "vocab_size", None)?;
    if vocab_size == 0 || vocab_size > crate::sampler::MAX_VOCAB {
        return Err(top_err(
            "vocab_size",
            &obj["vocab_size"],
            format!("out of range 1..={}", crate::sampler::MAX_VOCAB),
        ));
    }
    let force_topk = top_uint(obj, "force_topk", Some(0))?;
    let nextn = top_uint(obj, "nextn", Some(5))?;
    let probs = match obj.get("input") {
        None => false,
        Some(Value::String(s)) if s == "logits" => false,
        Some(Value::String(s)) if s == "probs" => true,
        Some(v) => return Err(top_err("input", v, "expected \"logits\" or \"probs\"")),
    };
    let logits = match obj.get("logits") {
        None => return Err(top_err("logits", &Value::Null, "missing (required)")),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(top_err("logits", v, "expected an array of rows")),
    };
    let reqs = match obj.get("requests") {
        None => return Err(top_err("requests", &Value::Null, "missing (required)")),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(top_err("requests", v, "expected an array of request objects")),
    };
    let total = logits.len();
    // Rows owned: from each request's `rows`; a single request whose `rows`
    // is unreadable (or larger than all of `logits`) gets what the others
    // leave, and fails with an error naming `rows`.
    let declared: Vec<Option<usize>> = reqs
        .iter()
        .map(|r| r.get("rows").and_then(Value::as_u64).and_then(|x| usize::try_from(x).ok()).filter(|&x| x <= total))
        .collect();
    let unknown: Vec<usize> = (0..reqs.len()).filter(|&i| declared[i].is_none()).collect();
    let mut known_sum: usize = 0;
    for (i, d) in declared.iter().enumerate() {
        if let Some(d) = d {
            known_sum = known_sum.checked_add(*d).filter(|&s| s <= total).ok_or_else(|| {
                top_err(
                    &format!("requests[{i}].rows"),
                    &reqs[i]["rows"],
                    format!("the requests' rows exceed the {total} rows of `logits`"),
                )
            })?;
        }
    }
    let rows: Vec<usize> = match unknown.as_slice() {
        [] if known_sum == total => declared.iter().map(|d| d.unwrap_or(0)).collect(),
        [] => {
            return Err(top_err(
                "logits",
                &Value::from(total),
                format!("logits has {total} rows but the requests' rows sum to {known_sum}"),
            ))
        }
        [one] => declared
            .iter()
            .enumerate()
            .map(|(i, d)| if i == *one { total - known_sum } else { d.unwrap_or(0) })
            .collect(),
        [a, ..] => {
            let v = reqs[*a].get("rows").cloned().unwrap_or(Value::Null);
            return Err(top_err(
                &format!("requests[{a}].rows"),
                &v,
                format!("not a row count in 0..={total}, and the rows of more than one request are unknown"),
            ));
        }
    };
    let mut out = Vec::with_capacity(reqs.len());
    let mut first = 0usize;
    for (i, r) in reqs.iter().enumerate() {
        let own = &logits[first..first + rows[i]];
        out.push(parse_request(i, r, own, first, vocab_size));
        first += rows[i];
    }
    Ok(Case { vocab_size, force_topk, nextn, probs, rows, requests: out })
}

/// Runs a parsed case on `backend`; the malformed requests get an error
/// status (their rows: token -1, nothing emitted), the others are sampled.
pub fn run_case(case: &Case, backend: BackendKind) -> Result<StepOutput, CaseError> {
    let cfg = SamplerConfig { vocab_size: case.vocab_size, force_topk: case.force_topk, nextn: case.nextn, backend };
    let mut sampler = Sampler::new(cfg)?;
    let (reqs, logits) = case.well_formed();
    let got = if case.probs {
        // Section 12: probability rows are computed on the host whatever the backend.
        crate::probs::sample(case.vocab_size, sampler.n(), case.nextn, &logits, &reqs)?.0
    } else {
        sampler.sample(&logits, &reqs)?
    };
    // Splice the malformed requests back in, in order.
    let mut rows = Vec::new();
    let mut outs = Vec::new();
    let (mut gi, mut ri) = (0usize, 0usize);
    for (i, r) in case.requests.iter().enumerate() {
        match r {
            Ok((req, _)) => {
                let n = req.rows();
                let at = rows.len();
                rows.extend_from_slice(&got.rows[ri..ri + n]);
                let mut o = got.requests[gi].clone();
                o.rows = at..at + n;
                outs.push(o);
                ri += n;
                gi += 1;
            }
            Err(e) => {
                let at = rows.len();
                rows.extend((0..case.rows[i]).map(|_| crate::request::RowOutput {
                    token: -1,
                    logprob: f32::NEG_INFINITY,
                    top_logprobs: Vec::new(),
                    sum_smaller_probs: 0.0,
                }));
                outs.push(crate::request::RequestOutput {
                    status: Err(crate::error::RequestError::Malformed { field: e.field(), msg: e.to_string() }),
                    accepted: 0,
                    path: None,
                    emitted: Vec::new(),
                    emitted_logprobs: Vec::new(),
                    prompt_logprobs: Vec::new(),
                    rows: at..at + case.rows[i],
                    top_logprobs_width: 0,
                });
            }
        }
    }
    Ok(StepOutput { rows, requests: outs, top_logprobs_width: got.top_logprobs_width })
}

/// A float of the result document: `null` for -inf, `"nan"` / `"inf"` for
/// the values JSON cannot hold (the sampler never outputs them).
pub fn float_value(x: f32) -> Value {
    if x == f32::NEG_INFINITY {
        Value::Null
    } else if x.is_nan() {
        Value::from("nan")
    } else if x == f32::INFINITY {
        Value::from("inf")
    } else {
        Value::from(x as f64)
    }
}

/// The result document of CONFORMANCE.md for a step's outputs.
pub fn result_document(out: &StepOutput) -> Value {
    let rows: Vec<Value> = out
        .rows
        .iter()
        .map(|r| {
            let top: Vec<Value> =
                r.top_logprobs.iter().map(|&(id, lp)| Value::Array(vec![Value::from(id), float_value(lp)])).collect();
            serde_json::json!({
                "token": r.token,
                "logprob": float_value(r.logprob),
                "top_logprobs": top,
                "sum_smaller_probs": float_value(r.sum_smaller_probs),
            })
        })
        .collect();
    let reqs: Vec<Value> = out
        .requests
        .iter()
        .map(|q| {
            let status = match &q.status {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("error: {e}"),
            };
            let mut doc = serde_json::json!({
                "status": status,
                "accepted": q.accepted,
                "emitted": q.emitted,
                "prompt_logprobs": q.prompt_logprobs.iter().map(|&x| float_value(x)).collect::<Vec<_>>(),
            });
            if let Some(path) = &q.path {
                doc["path"] = Value::from(path.clone());
            }
            doc
        })
        .collect();
    serde_json::json!({ "rows": rows, "requests": reqs })
}

/// Parses a case (CONFORMANCE.md), runs it on `backend` and returns the
/// result document. Errors only when the case itself cannot be run.
pub fn run_case_str(json: &str, backend: BackendKind) -> Result<Value, CaseError> {
    let case = parse_case(json)?;
    Ok(result_document(&run_case(&case, backend)?))
}

/// The exit code of the conformance runner for a run: 0 when a document was
/// produced (even with request errors), 2 when the case could not be run.
pub fn exit_code(res: &Result<Value, CaseError>) -> i32 {
    match res {
        Ok(_) => 0,
        Err(_) => 2,
    }
}

/// The repository's own copy of the conformance cases, `conformance/golden`
/// (absolute, from this crate's source directory): `*.json` plus `next/`,
/// refreshed from `../shared/golden` by `scripts/sync-golden.sh`. Every
/// golden runner reads it, so a clone runs every case without `../shared`.
pub const GOLDEN_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../conformance/golden");

/// Prefixes of the cases in `golden/next/` whose spec decisions have landed
/// (issue order): the golden runners read them beside `golden/*.json`.
pub const LANDED_NEXT: &[&str] = &["bug2-", "case-301-", "tree-501-", "decide3-"];

/// Every golden case file under `dir` ([`GOLDEN_DIR`]): `dir/*.json`
/// plus the landed cases of `dir/next/` ([`LANDED_NEXT`]), sorted by name.
/// Empty when `dir` does not exist.
pub fn golden_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let list = |d: &std::path::Path, keep: &dyn Fn(&str) -> bool| -> Vec<std::path::PathBuf> {
        let Ok(rd) = std::fs::read_dir(d) else { return Vec::new() };
        rd.filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter(|p| p.file_name().and_then(|f| f.to_str()).is_some_and(keep))
            .collect()
    };
    let mut files = list(dir, &|_| true);
    files.extend(list(&dir.join("next"), &|f| LANDED_NEXT.iter().any(|p| f.starts_with(p))));
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    files
}
