//! Conformance cases (shared/spec/CONFORMANCE.md): one JSON case in, one
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
use crate::params::{FilterOrder, LogprobsMode, SamplingParams};
use crate::request::{DraftDist, Request, RequestKind, StepOutput};
use crate::sampler::{BackendKind, Sampler, SamplerConfig};

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

/// Why one request of a case could not be turned into a [`Request`]; it gives
/// that request (only) an error status.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum RequestCaseError {
    /// The request is not a JSON object.
    #[error("requests[{index}] is not an object: {value}")]
    NotObject {
        /// Index in `requests`.
        index: usize,
        /// The value as written.
        value: String,
    },
    /// A field the request's kind does not have.
    #[error("unknown field `{field}` = {value} for kind `{kind}`")]
    UnknownField {
        /// The field.
        field: String,
        /// Its value as written.
        value: String,
        /// The request's kind.
        kind: String,
    },
    /// A required field is absent.
    #[error("missing field `{field}` (required for kind `{kind}`)")]
    Missing {
        /// The field.
        field: String,
        /// The request's kind.
        kind: String,
    },
    /// A field has the wrong type or an out-of-range value.
    #[error("bad field `{field}` = {value}: {msg}")]
    Field {
        /// The field.
        field: String,
        /// Its value as written.
        value: String,
        /// What is wrong.
        msg: String,
    },
}

impl RequestCaseError {
    /// The field named by the error (the request's index for `NotObject`).
    pub fn field(&self) -> String {
        match self {
            RequestCaseError::NotObject { index, .. } => format!("requests[{index}]"),
            RequestCaseError::UnknownField { field, .. }
            | RequestCaseError::Missing { field, .. }
            | RequestCaseError::Field { field, .. } => field.clone(),
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

/// Shortened JSON text of a value, for error messages.
fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        let t: String = s.chars().take(77).collect();
        format!("{t}...")
    } else {
        s
    }
}

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

/// A float where `null` = -inf and "nan"/"inf"/"+inf"/"-inf" are accepted.
fn float_of(v: &Value) -> Option<f32> {
    match v {
        Value::Null => Some(f32::NEG_INFINITY),
        Value::Number(n) => n.as_f64().map(|x| x as f32),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "nan" => Some(f32::NAN),
            "inf" | "+inf" | "infinity" | "+infinity" => Some(f32::INFINITY),
            "-inf" | "-infinity" => Some(f32::NEG_INFINITY),
            _ => None,
        },
        _ => None,
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
        if !matches!(k.as_str(), "vocab_size" | "force_topk" | "nextn" | "logits" | "requests")
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
    Ok(Case { vocab_size, force_topk, nextn, rows, requests: out })
}

/// Field access for one request, remembering which fields were used.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    kind: String,
}

type RResult<T> = Result<T, RequestCaseError>;

impl<'a> Fields<'a> {
    fn bad(&self, field: &str, v: &Value, msg: impl Into<String>) -> RequestCaseError {
        RequestCaseError::Field { field: field.into(), value: show(v), msg: msg.into() }
    }
    fn req(&self, field: &str) -> RResult<&'a Value> {
        self.obj.get(field).ok_or_else(|| RequestCaseError::Missing { field: field.into(), kind: self.kind.clone() })
    }
    /// An optional field; `null` counts as absent.
    fn opt(&self, field: &str) -> Option<&'a Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }
    fn u64(&self, field: &str) -> RResult<u64> {
        let v = self.req(field)?;
        v.as_u64().ok_or_else(|| self.bad(field, v, "expected an integer in 0..=18446744073709551615"))
    }
    fn f32(&self, field: &str) -> RResult<f32> {
        let v = self.req(field)?;
        float_of(v)
            .ok_or_else(|| self.bad(field, v, "expected a number (null = -inf, or \"nan\" / \"inf\" / \"-inf\")"))
    }
    fn str(&self, field: &str) -> RResult<&'a str> {
        let v = self.req(field)?;
        v.as_str().ok_or_else(|| self.bad(field, v, "expected a string"))
    }
    fn i32_list(&self, field: &str, v: &Value) -> RResult<Vec<i32>> {
        let a = v.as_array().ok_or_else(|| self.bad(field, v, "expected an array of token ids"))?;
        a.iter()
            .enumerate()
            .map(|(j, x)| {
                x.as_i64()
                    .and_then(|t| i32::try_from(t).ok())
                    .ok_or_else(|| self.bad(&format!("{field}[{j}]"), x, "expected a token id (an i32 integer)"))
            })
            .collect()
    }
}

/// `draft_dists`: `need` objects `{"ids": [...], "logprobs": [...]}` (`what` names the count in messages).
fn parse_dists(f: &Fields<'_>, dv: &Value, need: usize, what: &str) -> RResult<Vec<DraftDist>> {
    let da = dv
        .as_array()
        .ok_or_else(|| f.bad("draft_dists", dv, "expected an array of {\"ids\", \"logprobs\"} objects"))?;
    if da.len() != need {
        return Err(f.bad("draft_dists", dv, format!("has {} entries; need {what} = {need}", da.len())));
    }
    let mut draft_dists = Vec::with_capacity(da.len());
    for (j, d) in da.iter().enumerate() {
        let name = format!("draft_dists[{j}]");
        let o =
            d.as_object().ok_or_else(|| f.bad(&name, d, "expected an object {\"ids\": [...], \"logprobs\": [...]}"))?;
        if let Some((k, x)) = o.iter().find(|(k, _)| k.as_str() != "ids" && k.as_str() != "logprobs") {
            return Err(RequestCaseError::UnknownField {
                field: format!("{name}.{k}"),
                value: show(x),
                kind: f.kind.clone(),
            });
        }
        let ids_v = o
            .get("ids")
            .ok_or_else(|| RequestCaseError::Missing { field: format!("{name}.ids"), kind: f.kind.clone() })?;
        let ids = f.i32_list(&format!("{name}.ids"), ids_v)?;
        let lv = o
            .get("logprobs")
            .ok_or_else(|| RequestCaseError::Missing { field: format!("{name}.logprobs"), kind: f.kind.clone() })?;
        let la = lv.as_array().ok_or_else(|| f.bad(&format!("{name}.logprobs"), lv, "expected an array of floats"))?;
        let logprobs = la
            .iter()
            .enumerate()
            .map(|(c, x)| {
                float_of(x).ok_or_else(|| f.bad(&format!("{name}.logprobs[{c}]"), x, "expected a number (null = -inf)"))
            })
            .collect::<RResult<Vec<f32>>>()?;
        if ids.len() != logprobs.len() {
            return Err(f.bad(&name, d, format!("has {} ids and {} logprobs", ids.len(), logprobs.len())));
        }
        draft_dists.push(DraftDist { ids, logprobs });
    }
    Ok(draft_dists)
}

fn parse_request(
    index: usize,
    v: &Value,
    rows: &[Value],
    first_row: usize,
    vocab: u32,
) -> RResult<(Request, Vec<f32>)> {
    let obj = v.as_object().ok_or_else(|| RequestCaseError::NotObject { index, value: show(v) })?;
    let mut f = Fields { obj, kind: "?".into() };
    let kind = f.str("kind")?.to_string();
    f.kind = kind.clone();
    let common: &[&str] = &[
        "kind",
        "rows",
        "seq_seed",
        "temperature",
        "top_p",
        "top_k",
        "top_logprobs",
        "masks",
        "min_p",
        "filter_order",
        "logprobs_mode",
    ];
    let specific: &[&str] = match kind.as_str() {
        "sample" => &["phase", "seqlen_k", "seqlen_q", "golden"],
        "verify" => &["seqlen_k", "seqlen_q", "drafts", "draft_dists", "golden"],
        "draft" => &["seqlen_k", "seqlen_q", "last_valid_offset"],
        "prompt_logprobs" => &["targets"],
        "tree" => {
            &["seqlen_k", "seqlen_q", "tree_parent", "tree_token", "draft_dists", "without_replacement", "golden"]
        }
        _ => {
            return Err(f.bad(
                "kind",
                &obj["kind"],
                "expected \"sample\", \"verify\", \"draft\", \"prompt_logprobs\" or \"tree\"",
            ))
        }
    };
    if let Some((k, x)) = obj.iter().find(|(k, _)| !common.contains(&k.as_str()) && !specific.contains(&k.as_str())) {
        return Err(RequestCaseError::UnknownField { field: k.clone(), value: show(x), kind });
    }
    let n_rows = f.u64("rows")?;
    if n_rows != rows.len() as u64 {
        // `parse_case` gave this request the rows the others leave.
        return Err(f.bad(
            "rows",
            &obj["rows"],
            format!("the other requests leave {} rows of `logits` for this one", rows.len()),
        ));
    }
    let top_k = {
        let x = f.req("top_k")?;
        x.as_i64().ok_or_else(|| f.bad("top_k", x, "expected an integer in i64 range"))?
    };
    let top_logprobs = {
        let x = f.req("top_logprobs")?;
        x.as_u64()
            .and_then(|t| u32::try_from(t).ok())
            .ok_or_else(|| f.bad("top_logprobs", x, "expected an integer in 0..=4294967295"))?
    };
    // SAMPLER.md section 10: optional, absent = the default (the value is
    // checked by `SamplingParams::validate`; a bad name fails here).
    let min_p = match obj.get("min_p") {
        None => 0.0,
        Some(_) => f.f32("min_p")?,
    };
    let filter_order = match obj.get("filter_order") {
        None => FilterOrder::default(),
        Some(x) => {
            f.str("filter_order")?.parse::<FilterOrder>().map_err(|e| f.bad("filter_order", x, e.to_string()))?
        }
    };
    let logprobs_mode = match obj.get("logprobs_mode") {
        None => LogprobsMode::default(),
        Some(x) => {
            f.str("logprobs_mode")?.parse::<LogprobsMode>().map_err(|e| f.bad("logprobs_mode", x, e.to_string()))?
        }
    };
    let params = SamplingParams {
        temperature: f.f32("temperature")?,
        top_p: f.f32("top_p")?,
        top_k,
        top_logprobs,
        seq_seed: Some(f.u64("seq_seed")?),
        prompt_logprobs: kind == "prompt_logprobs",
        golden_token_ids: Vec::new(),
        min_p,
        filter_order,
        logprobs_mode,
    };
    let need_rows = |what: &str, want: u64| -> RResult<()> {
        if n_rows != want {
            return Err(f.bad("rows", &obj["rows"], format!("must be {what} = {want}")));
        }
        Ok(())
    };
    let kind_v = match kind.as_str() {
        "sample" => {
            need_rows("1 for kind `sample`", 1)?;
            let seqlen_k = f.u64("seqlen_k")?;
            match f.str("phase")? {
                "prefill" => {
                    if let Some(x) = obj.get("seqlen_q") {
                        x.as_u64()
                            .ok_or_else(|| f.bad("seqlen_q", x, "expected an integer in 0..=18446744073709551615"))?;
                    }
                    RequestKind::Prefill { seqlen_k }
                }
                "decode" => {
                    // A plain decode row is a decode request of seqlen_q = 1 (SAMPLER.md 6).
                    let seqlen_q = f.u64("seqlen_q")?;
                    if seqlen_q != 1 {
                        return Err(f.bad(
                            "seqlen_q",
                            &obj["seqlen_q"],
                            "a `sample` decode row has seqlen_q = 1 (use kind `verify` for more rows)",
                        ));
                    }
                    RequestKind::Decode { seqlen_k, seqlen_q, drafts: Vec::new(), draft_dists: Vec::new() }
                }
                _ => return Err(f.bad("phase", &obj["phase"], "expected \"prefill\" or \"decode\"")),
            }
        }
        "verify" => {
            let seqlen_k = f.u64("seqlen_k")?;
            let seqlen_q = f.u64("seqlen_q")?;
            need_rows("seqlen_q", seqlen_q)?;
            let drafts = f.i32_list("drafts", f.req("drafts")?)?;
            if drafts.len() as u64 + 1 != n_rows {
                return Err(f.bad(
                    "drafts",
                    &obj["drafts"],
                    format!("has {} ids; need rows - 1 = {}", drafts.len(), n_rows.saturating_sub(1)),
                ));
            }
            let draft_dists = parse_dists(&f, f.req("draft_dists")?, drafts.len(), "rows - 1")?;
            RequestKind::Decode { seqlen_k, seqlen_q, drafts, draft_dists }
        }
        "tree" => {
            let seqlen_k = f.u64("seqlen_k")?;
            let seqlen_q = f.u64("seqlen_q")?;
            need_rows("seqlen_q", seqlen_q)?;
            let parent = f.i32_list("tree_parent", f.req("tree_parent")?)?;
            if parent.len() as u64 != n_rows {
                return Err(f.bad(
                    "tree_parent",
                    &obj["tree_parent"],
                    format!("has {} nodes for {n_rows} rows (one row per node)", parent.len()),
                ));
            }
            let tokens = f.i32_list("tree_token", f.req("tree_token")?)?;
            // Counts (one per internal node) are the sampler's check (11.10), so parse any number.
            let draft_dists = match f.opt("draft_dists") {
                None => None,
                Some(dv) => Some(parse_dists(&f, dv, dv.as_array().map_or(0, Vec::len), "its length")?),
            };
            let without_replacement = match f.opt("without_replacement") {
                None => false,
                Some(x) => x.as_bool().ok_or_else(|| f.bad("without_replacement", x, "expected a bool"))?,
            };
            RequestKind::Tree {
                seqlen_k,
                tree: crate::draft::DraftTree { parent, tokens, draft_dists, without_replacement },
            }
        }
        "draft" => {
            let rows32 = u32::try_from(n_rows).map_err(|_| f.bad("rows", &obj["rows"], "too many rows"))?;
            RequestKind::Draft {
                seqlen_k: f.u64("seqlen_k")?,
                seqlen_q: f.u64("seqlen_q")?,
                last_valid_offset: f.u64("last_valid_offset")?,
                rows: rows32,
            }
        }
        _ => {
            let targets = f.i32_list("targets", f.req("targets")?)?;
            if targets.len() as u64 != n_rows {
                return Err(f.bad("targets", &obj["targets"], format!("has {} ids for {n_rows} rows", targets.len())));
            }
            RequestKind::PromptLogprobs { targets }
        }
    };
    let golden = match f.opt("golden") {
        None => Vec::new(),
        Some(g) => {
            let g = f.i32_list("golden", g)?;
            // A tree's golden is one id per depth (checked by the sampler).
            if kind != "tree" && g.len() as u64 != n_rows {
                return Err(f.bad("golden", &obj["golden"], format!("has {} ids for {n_rows} rows", g.len())));
            }
            g
        }
    };
    let masks = match f.opt("masks") {
        None => None,
        Some(m) => {
            let a =
                m.as_array().ok_or_else(|| f.bad("masks", m, "expected an array of masks (arrays of u32 words)"))?;
            let mut out = Vec::with_capacity(a.len());
            for (j, row) in a.iter().enumerate() {
                let words = row
                    .as_array()
                    .ok_or_else(|| f.bad(&format!("masks[{j}]"), row, "expected an array of u32 words"))?;
                let w = words
                    .iter()
                    .enumerate()
                    .map(|(c, x)| {
                        x.as_u64()
                            .and_then(|w| u32::try_from(w).ok())
                            .ok_or_else(|| f.bad(&format!("masks[{j}][{c}]"), x, "expected a u32 word"))
                    })
                    .collect::<RResult<Vec<u32>>>()?;
                out.push(w);
            }
            // The number of masks and of words is checked by the sampler (a bad mask error).
            Some(out)
        }
    };
    let mut flat = Vec::with_capacity(rows.len() * vocab as usize);
    for (j, row) in rows.iter().enumerate() {
        let r = first_row + j;
        let a = row.as_array().ok_or_else(|| f.bad(&format!("logits[{r}]"), row, "expected an array of floats"))?;
        if a.len() != vocab as usize {
            return Err(f.bad(&format!("logits[{r}]"), row, format!("has {} values, vocab_size is {vocab}", a.len())));
        }
        for (c, x) in a.iter().enumerate() {
            flat.push(float_of(x).ok_or_else(|| {
                f.bad(&format!("logits[{r}][{c}]"), x, "expected a number, null (-inf), \"nan\", \"inf\" or \"-inf\"")
            })?);
        }
    }
    let req = Request { params, kind: kind_v, golden, masks };
    if req.rows() != rows.len() {
        return Err(f.bad("rows", &obj["rows"], format!("the request's fields make {} rows", req.rows())));
    }
    Ok((req, flat))
}

/// Runs a parsed case on `backend`; the malformed requests get an error
/// status (their rows: token -1, nothing emitted), the others are sampled.
pub fn run_case(case: &Case, backend: BackendKind) -> Result<StepOutput, CaseError> {
    let cfg = SamplerConfig { vocab_size: case.vocab_size, force_topk: case.force_topk, nextn: case.nextn, backend };
    let mut sampler = Sampler::new(cfg)?;
    let (reqs, logits) = case.well_formed();
    let got = sampler.sample(&logits, &reqs)?;
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

/// Prefixes of the cases in `golden/next/` whose spec decisions have landed
/// (issue order): the golden runners read them beside `golden/*.json`.
pub const LANDED_NEXT: &[&str] = &["bug2-", "case-301-", "tree-501-"];

/// Every golden case file under `dir` (`../shared/golden`): `dir/*.json`
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
