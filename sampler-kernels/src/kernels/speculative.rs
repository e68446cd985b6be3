//! Sections 6-7 and 11: speculative decoding. The draft remap and the
//! accept / residual draw of each verify row (`remap_draft`, `verify`), the
//! per-group decision (`finalize`) and the draft tree walk (`tree_walk`).

use sampler_macros::kernel;

/// Section 6 (force top-k remap): moves each verify row's draft distribution
/// into the target row's candidate columns.
///
/// - `cand_ids`: `[R, n]` target candidate ids; `draft_ids`/`draft_lps`: `[R, wd]`
///   the draft's processed distribution (id -1 = padding).
/// - `draft_tok`: `[R]` i32, the draft token `d_{j+1}` this row verifies (-1 none).
/// - `col_of`: `[R, v]` i32 scratch (any contents).
/// - `q_logprobs`: `[R, n]` f32 out: draft logprob per target column (-inf absent).
/// - `draft_col`: `[R]` i32 out: target column of the draft token, -1 when absent (forces a reject).
/// - `draft_q`: `[R]` f32 out: the draft's logprob of the draft token.
#[kernel(variants = CANDIDATES)]
pub fn remap_draft(
    cand_ids: Gm<i32>,
    n: u32,
    v: u32,
    draft_ids: Gm<i32>,
    draft_lps: Gm<f32>,
    wd: u32,
    draft_tok: Gm<i32>,
    col_of: GmMut<i32>,
    q_logprobs: GmMut<f32>,
    draft_col: GmMut<i32>,
    draft_q: GmMut<f32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let voff = (r as u64) * (v as u64);
    let doff = (r as u64) * (wd as u64);
    let ids = load(cand_ids, off, n);
    scatter(col_of, voff, ids, iota(n) as i32);
    let dids = load(draft_ids, doff, wd);
    let dlps = load(draft_lps, doff, wd);
    let valid = (dids >= 0) & (dids < (v as i32));
    let cols = gather(col_of, voff, select(valid, dids, -1), -1i32);
    // col_of is scratch (stale entries, possibly from a wider step): keep a
    // column only below n and where it maps back to the same id.
    let cols = select(cols < (n as i32), cols, -1);
    let back = gather(cand_ids, off, cols, -1i32);
    let cols = select(valid & (back == dids), cols, -1);
    store(q_logprobs, off, full(n, NEG_INF));
    scatter(q_logprobs, off, cols, dlps);
    let d = load_scalar(draft_tok, r as u64);
    let dc = if d >= 0 && d < (v as i32) { load_scalar(col_of, voff + (d as u64)) } else { -1i32 };
    let dc = if dc >= 0 && dc < (n as i32) && load_scalar(cand_ids, off + (dc as u64)) == d { dc } else { -1i32 };
    store_scalar(draft_col, r as u64, dc);
    store_scalar(draft_q, r as u64, reduce_max(select(dids == d, dlps, NEG_INF)));
}

/// Section 6 steps 2-4 for one verify row: the accept test (case 1) and the
/// residual draw (case 2) used when this row rejects.
///
/// - `logprobs`, `cand_ids`, `q_logprobs`: `[R, n]`; `draft_col`: `[R]` i32; `draft_q`: `[R]` f32.
/// - `seed`, `seq_accept`, `seq_residual`: `[R]` u64.
/// - `accepted`: `[R]` u32 out (1 accept); `residual`: `[R]` i32 out (vocabulary id).
#[kernel(variants = CANDIDATES)]
pub fn verify(
    logprobs: Gm<f32>,
    cand_ids: Gm<i32>,
    q_logprobs: Gm<f32>,
    n: u32,
    draft_col: Gm<i32>,
    draft_q: Gm<f32>,
    seed: Gm<u64>,
    seq_accept: Gm<u64>,
    seq_residual: Gm<u64>,
    accepted: GmMut<u32>,
    residual: GmMut<i32>,
) {
    let r = row();
    let off = (r as u64) * (n as u64);
    let p = exp(load(logprobs, off, n));
    let dc = load_scalar(draft_col, r as u64);
    let pd = if dc >= 0 { exp(load_scalar(logprobs, off + (dc as u64))) } else { 0.0f32 };
    let qd = exp(load_scalar(draft_q, r as u64));
    let s = load_scalar(seed, r as u64);
    let ok = accept(uniform53(s, load_scalar(seq_accept, r as u64)), qd, pd);
    let q = exp(load(q_logprobs, off, n));
    let k2 = uniform53(s, load_scalar(seq_residual, r as u64));
    let c = categorical(to_fixed(max(p - q, 0.0)), k2);
    let c = if c < 0 { categorical(to_fixed(p), k2) } else { c };
    let tok = if c >= 0 { load_scalar(cand_ids, off + (c as u64)) } else { -1i32 };
    store_scalar(accepted, r as u64, if ok { 1u32 } else { 0u32 });
    store_scalar(residual, r as u64, tok);
}

/// Sections 6-7, per request group: walks the group's rows in order and
/// decides each row's output token and the accepted count.
///
/// - `group_first`, `group_rows`: `[G]` u32 first row and row count.
/// - `group_kind`: `[G]` u32: 0 independent fresh rows (sample, draft), 1 verify
///   (rows `0..m-1` verify, the last is fresh), 2 no draw (prompt logprobs),
///   3 a draft tree (rows left at -1 here; `tree_walk` decides them).
/// - `group_status`: `[G]` i32, nonzero = the request already failed on the host.
/// - `row_status`: `[R]` i32 from `mask_check`; any nonzero row fails its group.
/// - `golden`: `[R]` i32 golden token (kind 2: the prompt target); `drafts`,
///   `fresh`, `residual`: `[R]` i32; `accept_flags`: `[R]` u32.
/// - `tokens`: `[R]` i32 out (-1 none); `lookup`: `[R]` i32 out, the token whose
///   logprob the row reports (the output token, or the prompt target);
///   `accepted`: `[G]` u32 out; `status`: `[G]` i32 out (0 ok, else the first bad row status).
#[kernel]
pub fn finalize(
    group_first: Gm<u32>,
    group_rows: Gm<u32>,
    group_kind: Gm<u32>,
    group_status: Gm<i32>,
    row_status: Gm<i32>,
    golden: Gm<i32>,
    drafts: Gm<i32>,
    accept_flags: Gm<u32>,
    residual: Gm<i32>,
    fresh: Gm<i32>,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    status: GmMut<i32>,
) {
    let g = row() as u64;
    let first = load_scalar(group_first, g);
    let m = load_scalar(group_rows, g);
    let kind = load_scalar(group_kind, g);
    let mut st = load_scalar(group_status, g);
    for j in 0..m {
        let rs = load_scalar(row_status, (first + j) as u64);
        if st == 0 && rs != 0 {
            st = rs;
        }
    }
    // GROUP_NO_DRAW (2) and GROUP_TREE (3) draw nothing here; GROUP_VERIFY = 1 (codes.rs).
    let mut stopped = st != 0 || kind >= 2;
    let mut acc = 0u32;
    for j in 0..m {
        let r = (first + j) as u64;
        let gold = load_scalar(golden, r);
        let mut tok = -1i32;
        if !stopped {
            if kind == 1 && j + 1 < m {
                let d = load_scalar(drafts, r);
                if gold >= 0 {
                    tok = gold;
                    if d == gold {
                        acc += 1;
                    } else {
                        stopped = true;
                    }
                } else {
                    if load_scalar(accept_flags, r) != 0 {
                        tok = d;
                        acc += 1;
                    } else {
                        tok = load_scalar(residual, r);
                        stopped = true;
                    }
                }
            } else {
                tok = if gold >= 0 { gold } else { load_scalar(fresh, r) };
            }
        }
        store_scalar(tokens, r, tok);
        store_scalar(lookup, r, if st == 0 && kind == 2 { gold } else { tok });
    }
    store_scalar(accepted, g, acc);
    store_scalar(status, g, st);
}

/// Section 11.4, per request group: walks a draft tree over its rows, already
/// processed (`logprobs`, `cand_ids`) and drawn (`fresh`, the bonus of each
/// node), and writes the tokens of the rows on the accepted path. Runs after
/// `finalize` (which leaves tree rows at -1 and merges the row statuses);
/// groups of other kinds, and failed ones, are left as they are. The draft
/// distribution of a visited node is matched to its row's candidates by
/// token id here (section 11.6), so a tree step needs no other kernel.
///
/// - `group_first`, `group_rows`, `group_kind`: `[G]` u32 (kind 3 = tree);
///   `tree_mode`: `[G]` u32, 0 fixed, 1 with replacement, 2 without (11.3).
/// - `status`: `[G]` i32 from `finalize` (nonzero = failed: the walk skips it).
/// - `tree_parent`: `[R]` i32 local parent of each row's node (-1 root);
///   `tree_token`: `[R]` i32 its draft token (-1 placeholder); `golden`: `[R]`
///   i32 the golden token of the node's depth (-1 none); `fresh`: `[R]` i32.
/// - `logprobs`, `cand_ids`: `[R, n]`; `draft_ids`, `draft_lps`: `[R, wd]` the
///   node's draft distribution (id -1 = padding; read only in modes 1-2);
///   `dpos`: `[R, v]` i32 scratch (any contents; written only in modes 1-2).
/// - `seed`, `seq_accept` (of the child's own row, 11.5), `seq_residual`: `[R]` u64.
/// - `tokens`, `lookup`: `[R]` i32 out (the token emitted at a path row, -1 off
///   the path); `accepted`: `[G]` u32 out (depth of the last accepted node);
///   `path`: `[R]` i32 out, `path[first + j]` = the path node at depth j, -1 after.
#[kernel(variants = CANDIDATES)]
pub fn tree_walk(
    group_first: Gm<u32>,
    group_rows: Gm<u32>,
    group_kind: Gm<u32>,
    tree_mode: Gm<u32>,
    status: Gm<i32>,
    tree_parent: Gm<i32>,
    tree_token: Gm<i32>,
    golden: Gm<i32>,
    fresh: Gm<i32>,
    logprobs: Gm<f32>,
    cand_ids: Gm<i32>,
    n: u32,
    v: u32,
    draft_ids: Gm<i32>,
    draft_lps: Gm<f32>,
    wd: u32,
    dpos: GmMut<i32>,
    seed: Gm<u64>,
    seq_accept: Gm<u64>,
    seq_residual: Gm<u64>,
    tokens: GmMut<i32>,
    lookup: GmMut<i32>,
    accepted: GmMut<u32>,
    path: GmMut<i32>,
) {
    let g = row() as u64;
    let kind = load_scalar(group_kind, g);
    if kind == 3 {
        // GROUP_TREE (codes.rs)
        let first = load_scalar(group_first, g);
        let m = load_scalar(group_rows, g);
        for j in 0..m {
            store_scalar(path, (first + j) as u64, -1i32);
        }
        if load_scalar(status, g) == 0 {
            let mode = load_scalar(tree_mode, g);
            let s = load_scalar(seed, first as u64);
            let mut c = 0u32;
            let mut done = false;
            let mut acc = 0u32;
            // Children have larger indices than their parent, so the current
            // node only moves forward: one pass over the nodes visits the path.
            for node in 0..m {
                if !done && node == c {
                    let r = (first + c) as u64;
                    store_scalar(path, (first + acc) as u64, c as i32);
                    let gold = load_scalar(golden, r);
                    let mut next = 0u32;
                    let mut out = gold;
                    if gold >= 0 {
                        // 11.7: emit the golden token; follow its first child, if any.
                        for ch in (c + 1)..m {
                            let rc = (first + ch) as u64;
                            if next == 0
                                && load_scalar(tree_parent, rc) == (c as i32)
                                && load_scalar(tree_token, rc) == gold
                            {
                                next = ch;
                            }
                        }
                    } else {
                        let off = r * (n as u64);
                        let ids = load(cand_ids, off, n);
                        let p = exp(load(logprobs, off, n));
                        let pfix = reduce_sum(to_fixed(p));
                        // Residual weights w and their mass S (S = 1 exactly until a rejection, 11.4).
                        let mut w = p;
                        let mut sf = 1.0f32;
                        let mut sx = pfix;
                        let mut tried = 0u32;
                        let mut kids = 0u32;
                        for ch in (c + 1)..m {
                            if load_scalar(tree_parent, (first + ch) as u64) == (c as i32) {
                                kids += 1;
                            }
                        }
                        // A leaf reads no draft row (a tree without internal nodes has none).
                        if mode == 0 || kids == 0 {
                            // TREE_FIXED; 1 = TREE_WITH_REPLACEMENT, 2 = TREE_WITHOUT_REPLACEMENT (codes.rs)
                            for ch in (c + 1)..m {
                                let rc = (first + ch) as u64;
                                if next == 0 && load_scalar(tree_parent, rc) == (c as i32) {
                                    tried += 1;
                                    let x = load_scalar(tree_token, rc);
                                    let col = if x >= 0 { first_where(ids == x) } else { -1i32 };
                                    let wx = if col >= 0 { get(w, col as u32) } else { 0.0f32 };
                                    let qx = if x >= 0 { 1.0f32 } else { 0.0f32 };
                                    if accept(uniform53(s, load_scalar(seq_accept, rc)), qx * sf, wx) {
                                        next = ch;
                                    } else {
                                        // Fixed: q is one-hot at x, so only w(x) changes (a scalar update).
                                        if col >= 0 {
                                            w = select(iota(n) == (col as u32), 0.0f32, w);
                                            sx -= to_fixed(wx);
                                        }
                                        if sx == 0 {
                                            w = p;
                                            sf = 1.0f32;
                                            sx = pfix;
                                        } else {
                                            sf = fixed_to_f32(sx);
                                        }
                                    }
                                }
                            }
                        } else {
                            let doff = r * (wd as u64);
                            let voff = r * (v as u64);
                            let dids = load(draft_ids, doff, wd);
                            let dlps = load(draft_lps, doff, wd);
                            // q_c over row c's columns, matched by token id (the
                            // section 6 remap): dpos[id] = the id's draft entry; a
                            // stale scratch entry fails the check that it maps back.
                            let valid = (dids >= 0) & (dids < (v as i32));
                            scatter(dpos, voff, select(valid, dids, -1), iota(wd) as i32);
                            let pos = gather(dpos, voff, ids, -1i32);
                            let pos = select(pos < (wd as i32), pos, -1);
                            let back = gather(draft_ids, doff, pos, -1i32);
                            let pos = select(back == ids, pos, -1);
                            // Without replacement the earlier siblings' columns are
                            // zeroed and the rest renormalised.
                            let mut qrem = exp(gather(draft_lps, doff, pos, NEG_INF));
                            let mut qsum = 0.0f32;
                            for ch in (c + 1)..m {
                                let rc = (first + ch) as u64;
                                if next == 0 && load_scalar(tree_parent, rc) == (c as i32) {
                                    tried += 1;
                                    let x = load_scalar(tree_token, rc);
                                    let col = if x >= 0 { first_where(ids == x) } else { -1i32 };
                                    let wx = if col >= 0 { get(w, col as u32) } else { 0.0f32 };
                                    let qcx =
                                        if x >= 0 { exp(reduce_max(select(dids == x, dlps, NEG_INF))) } else { 0.0f32 };
                                    // Without replacement: x drawn before among its siblings has q = 0.
                                    let mut dup = false;
                                    if mode == 2 {
                                        for e in (c + 1)..ch {
                                            let re = (first + e) as u64;
                                            if x >= 0
                                                && load_scalar(tree_parent, re) == (c as i32)
                                                && load_scalar(tree_token, re) == x
                                            {
                                                dup = true;
                                            }
                                        }
                                    }
                                    let den = 1.0f32 - qsum;
                                    let live = mode == 1 || den > 0.0f32;
                                    let qkx = if mode == 1 {
                                        qcx
                                    } else {
                                        if live && !dup {
                                            qcx / den
                                        } else {
                                            0.0f32
                                        }
                                    };
                                    if accept(uniform53(s, load_scalar(seq_accept, rc)), qkx * sf, wx) {
                                        next = ch;
                                    } else {
                                        if live {
                                            if mode == 1 {
                                                w = max(w - sf * qrem, 0.0f32);
                                            } else {
                                                w = max(w - sf * (qrem / den), 0.0f32);
                                            }
                                        }
                                        sx = reduce_sum(to_fixed(w));
                                        if sx == 0 {
                                            w = p;
                                            sf = 1.0f32;
                                        } else {
                                            sf = fixed_to_f32(sx);
                                        }
                                        if mode == 2 && x >= 0 && !dup {
                                            qsum += qcx;
                                            qrem = select(ids == x, 0.0f32, qrem);
                                        }
                                    }
                                }
                            }
                        }
                        if next != 0 {
                            out = load_scalar(tree_token, (first + next) as u64);
                        } else {
                            if tried == 0 {
                                // A leaf: the bonus draw (case 0 at pos(depth, 0)).
                                out = load_scalar(fresh, r);
                            } else {
                                // Every child rejected: draw from w / S (case 2 at pos(depth, 0)).
                                let k2 = uniform53(s, load_scalar(seq_residual, r));
                                let cc = categorical(to_fixed(w), k2);
                                out = if cc >= 0 { get(ids, cc as u32) } else { -1i32 };
                            }
                        }
                    }
                    store_scalar(tokens, r, out);
                    store_scalar(lookup, r, out);
                    if next != 0 {
                        c = next;
                        acc += 1;
                    } else {
                        done = true;
                    }
                }
            }
            store_scalar(accepted, g, acc);
        }
    }
}
