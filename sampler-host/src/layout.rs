//! Batch metadata: validates each request and lays the step out as flat
//! per-row arrays (SAMPLER.md sections 1, 2, 6 and 7).
//!
//! A bad request never stops the batch: its rows still flow through the
//! kernels (so shapes stay fixed) but its group is marked failed and its
//! outputs are discarded.

use crate::draft::{TreeShape, SIBLING_POSITION_STRIDE};
use crate::error::{BatchError, RequestError};
use crate::params::{FilterOrder, LogprobsMode, ValidParams};
use crate::request::{Request, RequestKind};
use crate::runtime::plan::{
    Logits, StepPlan, GROUP_FRESH, GROUP_NO_DRAW, GROUP_TREE, GROUP_VERIFY, ORDER_TOP_K_FIRST, ORDER_TOP_P_FIRST,
    TREE_FIXED, TREE_WITHOUT_REPLACEMENT, TREE_WITH_REPLACEMENT,
};

/// Seed offset of draft-model draws (tag "mtp", section 2).
pub const DRAFT_SEED_OFFSET: u64 = 1_000_000_007;
use crate::draft::check_draft_dist;
pub use crate::draft::{DRAFT_LOGPROB_SLACK, DRAFT_MASS_SLACK};
/// Stride between the random streams of a decode request's rows (section 2).
pub const ROW_POSITION_STRIDE: u64 = 10_000_019;

/// What the host knows about one request after validation.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    /// First row of the request.
    pub first_row: usize,
    /// Rows owned.
    pub rows: usize,
    /// Validated parameters, or why the request failed before any kernel ran.
    pub params: Result<ValidParams, RequestError>,
}

/// `seq = 3 * position + case` (wrapping, section 2).
pub fn seq(position: u64, case: u64) -> u64 {
    position.wrapping_mul(3).wrapping_add(case)
}

/// The decode `sample_position = seqlen_k - seqlen_q + 1` (wrapping).
pub fn sample_position(seqlen_k: u64, seqlen_q: u64) -> u64 {
    seqlen_k.wrapping_sub(seqlen_q).wrapping_add(1)
}

/// Row metadata of a decode batch (section 6): `row_to_req`, `local_step`,
/// `is_verify` for requests of `seqlen_q` rows each.
pub fn verification_metadata(seqlen_q: &[u32]) -> (Vec<u32>, Vec<u32>, Vec<bool>) {
    let mut row_to_req = Vec::new();
    let mut local_step = Vec::new();
    let mut is_verify = Vec::new();
    for (i, &m) in seqlen_q.iter().enumerate() {
        for j in 0..m {
            row_to_req.push(i as u32);
            local_step.push(j);
            is_verify.push(j + 1 < m);
        }
    }
    (row_to_req, local_step, is_verify)
}

/// Positions of each row of a request (section 2); prompt-logprobs rows draw nothing (0).
pub fn row_positions(kind: &RequestKind) -> Vec<u64> {
    match kind {
        RequestKind::Prefill { seqlen_k } => vec![*seqlen_k],
        RequestKind::Decode { seqlen_k, seqlen_q, .. } => {
            let sp = sample_position(*seqlen_k, *seqlen_q);
            (0..*seqlen_q).map(|j| sp.wrapping_add(j.wrapping_mul(ROW_POSITION_STRIDE))).collect()
        }
        RequestKind::Draft { seqlen_k, seqlen_q, last_valid_offset, rows } => {
            let sp = sample_position(*seqlen_k, *seqlen_q);
            (1..=*rows as u64).map(|i| sp.wrapping_add(*last_valid_offset).wrapping_add(i)).collect()
        }
        RequestKind::PromptLogprobs { targets } => vec![0; targets.len()],
        // Section 11.5: a tree's rows are keyed by depth, not by node
        // ([`tree_position`]); this is the rank-0 position of each row.
        RequestKind::Tree { seqlen_k, tree } => {
            let sp = sample_position(*seqlen_k, tree.nodes() as u64);
            match crate::draft::shape(&tree.parent) {
                Ok(sh) => {
                    sh.depth.iter().map(|&d| sp.wrapping_add((d as u64).wrapping_mul(ROW_POSITION_STRIDE))).collect()
                }
                Err(_) => vec![0; tree.nodes()],
            }
        }
    }
}

/// Section 11.5: `pos(j, k) = sample_position + j * 10000019 + k * 1000000009`.
pub fn tree_position(sample_position: u64, depth: u32, rank: u32) -> u64 {
    sample_position
        .wrapping_add((depth as u64).wrapping_mul(ROW_POSITION_STRIDE))
        .wrapping_add((rank as u64).wrapping_mul(SIBLING_POSITION_STRIDE))
}

fn check_ids(field: &'static str, ids: &[i32], vocab: u32, allow_none: bool) -> Result<(), RequestError> {
    for (i, &t) in ids.iter().enumerate() {
        let ok = (t >= 0 && (t as u32) < vocab) || (allow_none && t == -1);
        if !ok {
            return Err(RequestError::Field {
                field,
                msg: format!(
                    "{field}[{i}] = {t} is not a vocabulary id in 0..{vocab}{}",
                    if allow_none { " or -1" } else { "" }
                ),
            });
        }
    }
    Ok(())
}

/// Validates everything about a request except its logits (checked on the device).
pub(crate) fn validate(req: &Request, vocab: u32, n: u32, nextn: u32) -> Result<ValidParams, RequestError> {
    let vp = req.params.validate(n)?;
    let rows = req.rows();
    // Engine-level fields: at the Sampler level they would silently do nothing.
    if req.params.prompt_logprobs && !matches!(req.kind, RequestKind::PromptLogprobs { .. }) {
        return Err(RequestError::Field {
            field: "prompt_logprobs",
            msg: "= true on a request that is not RequestKind::PromptLogprobs: the Sampler returns prompt logprobs for PromptLogprobs requests (one row per prompt position); the engine layer (EngineRequest) turns this flag into them".into(),
        });
    }
    if !req.params.golden_token_ids.is_empty() {
        return Err(RequestError::Field {
            field: "golden_token_ids",
            msg: format!("has {} ids: at the Sampler level teacher forcing is Request::golden (one id per row of this step); the engine layer maps golden_token_ids to it", req.params.golden_token_ids.len()),
        });
    }
    if let RequestKind::Tree { tree, .. } = &req.kind {
        // Section 11.10; golden is one id per depth (11.7), so checked here.
        let sh = tree.validate(vocab)?;
        if req.golden.len() > sh.max_depth as usize + 1 {
            return Err(RequestError::Field {
                field: "golden",
                msg: format!(
                    "has {} entries for a tree of depth {} (at most one per depth)",
                    req.golden.len(),
                    sh.max_depth
                ),
            });
        }
        check_ids("golden", &req.golden, vocab, true)?;
    } else if !req.golden.is_empty() {
        if req.golden.len() != rows {
            return Err(RequestError::Field {
                field: "golden",
                msg: format!("has {} entries for {rows} rows", req.golden.len()),
            });
        }
        check_ids("golden", &req.golden, vocab, true)?;
    }
    if let Some(masks) = &req.masks {
        let words = vocab.div_ceil(32) as usize;
        let bad = masks.iter().position(|m| m.len() != words);
        if masks.len() != rows || bad.is_some() {
            let detail = match bad {
                Some(i) => format!("; mask {i} has {} words", masks[i].len()),
                None => String::new(),
            };
            return Err(RequestError::BadMask { need: rows, words, got_masks: masks.len(), detail });
        }
    }
    req.check_seqlen()?;
    match &req.kind {
        RequestKind::Decode { drafts, draft_dists, seqlen_q, .. } => {
            // Section 6: m = seqlen_q rows, m - 1 drafts (-1 = placeholder) and draft distributions.
            if *seqlen_q == 0 {
                return Err(RequestError::Field {
                    field: "seqlen_q",
                    msg: "= 0, but a decode request owns at least one row".into(),
                });
            }
            let need = seqlen_q - 1;
            if drafts.len() as u64 != need {
                return Err(RequestError::Field {
                    field: "drafts",
                    msg: format!("has {} ids, but seqlen_q = {seqlen_q} needs seqlen_q - 1 = {need}", drafts.len()),
                });
            }
            if drafts.len() > nextn as usize {
                return Err(RequestError::Field {
                    field: "drafts",
                    msg: format!("has {} ids, more than nextn = {nextn}", drafts.len()),
                });
            }
            check_ids("drafts", drafts, vocab, true)?;
            if draft_dists.len() != drafts.len() {
                return Err(RequestError::Field {
                    field: "draft_dists",
                    msg: format!("has {} entries, but seqlen_q = {seqlen_q} needs {need}", draft_dists.len()),
                });
            }
            for (j, d) in draft_dists.iter().enumerate() {
                check_draft_dist(j, d, vocab)?;
            }
        }
        RequestKind::PromptLogprobs { targets } => check_ids("targets", targets, vocab, true)?,
        RequestKind::Tree { .. } => {}
        RequestKind::Draft { rows, .. } if *rows > nextn => {
            return Err(RequestError::Field {
                field: "rows",
                msg: format!("{rows} draft draws, more than nextn = {nextn}"),
            });
        }
        // `seqlen_q` is the decode request's the drafts are for (section 2),
        // which owns at least one row: 0 would shift every draft position.
        RequestKind::Draft { seqlen_q: 0, .. } => {
            return Err(RequestError::Field {
                field: "seqlen_q",
                msg: "= 0, but the decode request the drafts are for owns at least one row".into(),
            });
        }
        RequestKind::Prefill { .. } | RequestKind::Draft { .. } => {}
    }
    Ok(vp)
}

/// Lays out one step. `n` is the candidate width (V when force top-k is off);
/// `nextn` the most drafts a request may carry (`SamplerConfig::nextn`).
///
/// Errors: [`BatchError`] only for the batch's own shape (logits length);
/// everything about one request lands in its [`RequestInfo::params`].
pub fn build_plan<'a>(
    vocab: u32,
    n: u32,
    nextn: u32,
    logits: impl Into<Logits<'a>>,
    requests: &[Request],
) -> Result<(StepPlan<'a>, Vec<RequestInfo>), BatchError> {
    let logits: Logits<'a> = logits.into();
    let total_rows: usize = requests.iter().fold(0usize, |a, r| a.saturating_add(r.rows()));
    let expected = total_rows.checked_mul(vocab as usize);
    if expected != Some(logits.len()) {
        // A decode request owns `seqlen_q` rows whatever its drafts say
        // (section 6); when that disagrees with its drafts and the logits
        // do not fit, that request is the likely cause: name it.
        for (index, r) in requests.iter().enumerate() {
            if let RequestKind::Decode { seqlen_q, drafts, .. } = &r.kind {
                if *seqlen_q != drafts.len() as u64 + 1 {
                    return Err(BatchError::Rows {
                        index,
                        rows: *seqlen_q,
                        why: format!(
                            "seqlen_q = {seqlen_q} with {} drafts (a decode request owns seqlen_q = drafts + 1 rows); the requests' rows sum to {total_rows}, but logits has {} values for vocab_size = {vocab}",
                            drafts.len(),
                            logits.len()
                        ),
                    });
                }
            }
        }
        return Err(BatchError::LogitsShape {
            got: logits.len(),
            rows: total_rows,
            vocab: vocab as usize,
            expected: expected.unwrap_or(usize::MAX),
        });
    }
    // The metadata plan has no logits ('static): it narrows to 'a.
    let (meta, infos) = build_plan_meta(vocab, n, nextn, requests)?;
    let mut p: StepPlan<'a> = meta;
    p.logits = logits;
    Ok((p, infos))
}

/// [`build_plan`] without the logits: the plan's metadata only
/// (`StepPlan::logits` empty). The vocabulary-parallel step (`crate::dist::vocab`)
/// uses it, since no rank holds a whole `[R, V]` row.
///
/// Errors: [`BatchError::Field`] when the batch has too many rows.
pub fn build_plan_meta(
    vocab: u32,
    n: u32,
    nextn: u32,
    requests: &[Request],
) -> Result<(StepPlan<'static>, Vec<RequestInfo>), BatchError> {
    let total_rows: usize = requests.iter().fold(0usize, |a, r| a.saturating_add(r.rows()));
    if total_rows > u32::MAX as usize / 2 {
        return Err(BatchError::Field {
            field: "requests",
            msg: format!("the requests own {total_rows} rows, more than one step runs ({})", u32::MAX / 2),
        });
    }
    let words = vocab.div_ceil(32) as usize;
    let any_mask = requests.iter().any(|r| r.masks.is_some());
    let wd = requests
        .iter()
        .filter_map(|r| match &r.kind {
            // An empty distribution (an n-gram draft) is one-hot: one column.
            // Valid distributions have at most V ids (`validate`); only valid
            // requests' are copied, so a longer invalid one cannot widen the step.
            RequestKind::Decode { draft_dists, .. } => {
                draft_dists.iter().map(|d| d.ids.len().clamp(1, vocab as usize)).max()
            }
            RequestKind::Tree { tree, .. } => {
                tree.draft_dists.iter().flatten().map(|d| d.ids.len().min(vocab as usize)).max()
            }
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut p = StepPlan { rows: total_rows as u32, vocab, n, draft_width: wd as u32, ..Default::default() };
    if any_mask {
        p.masks = vec![0; total_rows * words];
    }
    p.draft_ids = vec![-1; total_rows * wd];
    p.draft_lps = vec![f32::NEG_INFINITY; total_rows * wd];
    let mut infos = Vec::with_capacity(requests.len());
    let mut row = 0usize;
    for req in requests {
        let rows = req.rows();
        let params = validate(req, vocab, n, nextn);
        let ok = params.is_ok();
        let vp = params.as_ref().ok().copied();
        let positions = row_positions(&req.kind);
        // A valid tree's shape (None when the request failed validation).
        let tree: Option<(&crate::draft::DraftTree, TreeShape, u64)> = match &req.kind {
            RequestKind::Tree { seqlen_k, tree } if ok => {
                tree.validate(vocab).ok().map(|sh| (tree, sh, sample_position(*seqlen_k, tree.nodes() as u64)))
            }
            _ => None,
        };
        let tree_dists: Vec<Option<&crate::request::DraftDist>> =
            tree.as_ref().map(|(t, sh, _)| t.dist_of_node(sh)).unwrap_or_default();
        let (kind, seed) = match &req.kind {
            RequestKind::Tree { .. } => (GROUP_TREE, vp.map_or(0, |v| v.seed)),
            RequestKind::Decode { drafts, .. } if !drafts.is_empty() => (GROUP_VERIFY, vp.map_or(0, |v| v.seed)),
            RequestKind::Draft { .. } => (GROUP_FRESH, vp.map_or(0, |v| v.seed.wrapping_add(DRAFT_SEED_OFFSET))),
            RequestKind::PromptLogprobs { .. } => (GROUP_NO_DRAW, vp.map_or(0, |v| v.seed)),
            _ => (GROUP_FRESH, vp.map_or(0, |v| v.seed)),
        };
        p.group_first.push(row as u32);
        p.group_rows.push(rows as u32);
        p.group_kind.push(kind);
        p.group_status.push(if ok { 0 } else { -1 });
        p.tree_mode.push(match &req.kind {
            RequestKind::Tree { tree: t, .. } if t.draft_dists.as_ref().is_some_and(|d| !d.is_empty()) => {
                if t.without_replacement {
                    TREE_WITHOUT_REPLACEMENT
                } else {
                    TREE_WITH_REPLACEMENT
                }
            }
            _ => TREE_FIXED,
        });
        p.any_tree |= kind == GROUP_TREE;
        for j in 0..rows {
            p.temperature.push(vp.map_or(1.0, |v| v.temperature));
            p.top_p.push(vp.map_or(1.0, |v| v.top_p));
            p.top_k.push(vp.map_or(-1, |v| v.top_k));
            p.log_min_p.push(vp.map_or(f32::NEG_INFINITY, |v| v.log_min_p));
            let top_k_first = vp.is_some_and(|v| v.filter_order == FilterOrder::TopKThenTopP);
            p.filter_order.push(if top_k_first { ORDER_TOP_K_FIRST } else { ORDER_TOP_P_FIRST });
            let raw = vp.is_some_and(|v| v.logprobs_mode == LogprobsMode::Raw);
            p.any_raw |= raw;
            p.raw_logprobs.push(raw as u32);
            p.seed.push(seed);
            let pos = positions.get(j).copied().unwrap_or(0);
            p.seq_draw.push(seq(pos, 0));
            // Tree rows (11.5): the bonus (case 0) and residual (case 2) of
            // node j at pos(depth j, 0); the accept test of node j (case 1,
            // stored at the child's own row) at pos(depth of its parent, its rank).
            match &tree {
                Some((_, sh, sp)) if j > 0 => {
                    p.seq_accept.push(seq(tree_position(*sp, sh.depth[j] - 1, sh.rank[j]), 1))
                }
                _ => p.seq_accept.push(seq(pos, 1)),
            }
            p.seq_residual.push(seq(pos, 2));
            let golden = match &req.kind {
                RequestKind::PromptLogprobs { targets } => targets[j],
                RequestKind::Tree { .. } => match &tree {
                    Some((_, sh, _)) => req.golden.get(sh.depth[j] as usize).copied().unwrap_or(-1),
                    None => -1,
                },
                _ => req.golden.get(j).copied().unwrap_or(-1),
            };
            match &tree {
                Some((t, _, _)) => {
                    p.tree_parent.push(t.parent[j]);
                    p.tree_token.push(if j > 0 { t.tokens[j - 1] } else { -1 });
                }
                None => {
                    p.tree_parent.push(-1);
                    p.tree_token.push(-1);
                }
            }
            p.golden.push(if ok { golden } else { -1 });
            let (draft, dist) = match &req.kind {
                RequestKind::Decode { drafts, draft_dists, .. } if ok && j < drafts.len() => {
                    (drafts[j], Some(&draft_dists[j]))
                }
                // Row j of a tree holds node j's distribution (it proposed node j's children).
                RequestKind::Tree { .. } => (-1, tree_dists.get(j).copied().flatten()),
                _ => (-1, None),
            };
            p.drafts.push(draft);
            if let Some(d) = dist {
                // Chain verify rows run remap_draft + verify; a tree's rows only tree_walk.
                p.any_verify |= !matches!(req.kind, RequestKind::Tree { .. });
                let base = (row + j) * wd;
                if d.ids.is_empty() {
                    // No draft distribution (n-gram or other model-free drafts): q is one-hot
                    // at the draft token (section 6 with q(d) = 1, as 11.3's fixed children).
                    if draft >= 0 {
                        p.draft_ids[base] = draft;
                        p.draft_lps[base] = 0.0;
                    }
                } else {
                    p.draft_ids[base..base + d.ids.len()].copy_from_slice(&d.ids);
                    p.draft_lps[base..base + d.logprobs.len()].copy_from_slice(&d.logprobs);
                }
            }
            match (&req.masks, ok) {
                (Some(m), true) => {
                    p.has_mask.push(1);
                    p.masks[(row + j) * words..(row + j + 1) * words].copy_from_slice(&m[j]);
                }
                _ => p.has_mask.push(0),
            }
        }
        // Section 5: k is the largest top_logprobs among requests with valid
        // *parameters* (section 1). A request that fails later (mask, golden
        // ids, logits) still counts; `validate` checks the parameters first,
        // so any error other than a parameter error means they were valid.
        if !matches!(params, Err(RequestError::Param(_))) {
            p.k = p.k.max(req.params.top_logprobs);
        }
        infos.push(RequestInfo { first_row: row, rows, params });
        row += rows;
    }
    Ok((p, infos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_example_metadata() {
        let (r2q, step, ver) = verification_metadata(&[6, 6, 4]);
        assert_eq!(r2q, [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2]);
        assert_eq!(step, [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3]);
        let t = true;
        let f = false;
        assert_eq!(ver, [t, t, t, t, t, f, t, t, t, t, t, f, t, t, t, f]);
    }

    #[test]
    fn worked_positions() {
        // Prefill of a 41-token prompt: position 41, seq 123.
        assert_eq!(seq(row_positions(&RequestKind::Prefill { seqlen_k: 41 })[0], 0), 123);
        // Decode seqlen_k 55, seqlen_q 6: sample_position 50, row 2 at 20000088.
        let k = RequestKind::Decode {
            seqlen_k: 55,
            seqlen_q: 6,
            drafts: vec![1; 5],
            draft_dists: vec![Default::default(); 5],
        };
        let pos = row_positions(&k);
        assert_eq!(pos[0], 50);
        assert_eq!(pos[2], 20_000_088);
    }
}
