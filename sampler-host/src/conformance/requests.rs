//! One request of a conformance case, parsed on its own from its JSON
//! value and its logits rows: a [`Request`], or a [`RequestCaseError`]
//! that fails that request only (see [`super::case`]).

use serde_json::{Map, Value};
use thiserror::Error;

use crate::params::{FilterOrder, LogprobsMode, SamplingParams};
use crate::request::{DraftDist, Request, RequestKind};

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

/// Shortened JSON text of a value, for error messages.
pub(super) fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        let t: String = s.chars().take(77).collect();
        format!("{t}...")
    } else {
        s
    }
}

/// A float where `null` = -inf and "nan"/"inf"/"+inf"/"-inf" are accepted.
pub(super) fn float_of(v: &Value) -> Option<f32> {
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

pub(super) fn parse_request(
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
