//! Drafts: the draft model's distributions ([`DraftDist`], section 6) and
//! draft trees (SAMPLER.md section 11): the request's tree, its validation
//! (11.10), the per-node metadata the walk needs (depth, sibling rank), and
//! converters from the encodings engines already produce.
//!
//! The canonical form is 11.1's: `parent` (M entries, `parent[0] = -1`,
//! `0 <= parent[n] < n`), `tokens` (M - 1 draft ids, -1 = placeholder),
//! optional draft distributions (one per internal node, in node order) and
//! the without-replacement flag. Converters validate and never reorder
//! nodes: the sibling order (increasing node index) must be the order in
//! which the children were drawn.

use thiserror::Error;

use crate::error::RequestError;

/// The draft model's processed distribution that proposed one draft token
/// (ids not listed have logprob -inf). SAMPLER.md section 6.
///
/// Drafts without a distribution (n-gram lookup, prompt lookup, any
/// model-free proposer) pass an empty `DraftDist` (`DraftDist::default()`):
/// it counts as one-hot at the draft token, so the draft is accepted with
/// probability `p(d)` and a rejection draws from the target with `d` removed.
///
/// Checked (section 6, decided) for every distribution a verify or tree
/// request carries, used or not: the ids distinct and in 0..V-1, each
/// logprob finite or -inf and at most 1e-6, the total probability at most
/// 1 + 1e-4 (below 1 is a truncated draft, used as given); anything else
/// fails only that request, `RequestError::Field` naming `draft_dists`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DraftDist {
    /// Vocabulary ids.
    pub ids: Vec<i32>,
    /// Processed logprobs of `ids` (natural log).
    pub logprobs: Vec<f32>,
}

/// How far above 0 a draft distribution's logprob may lie (SAMPLER.md 6,
/// decided): the processed logprob of a sole or dominant token is 0 up to
/// rounding (the golden generator's float64 evaluation writes e.g.
/// 1.1e-16). The kernels use `q = exp(logprob)`, which these values leave
/// at 1 or a hair above; the accept test and the residual `max(p - q, 0)`
/// stay well defined.
pub const DRAFT_LOGPROB_SLACK: f32 = 1e-6;
/// How far above 1 a draft distribution's total probability (the f64 sum
/// of `exp(logprob)`) may lie (SAMPLER.md 6, decided); a total below 1 is
/// a truncated draft (zero mass outside its ids) and valid.
pub const DRAFT_MASS_SLACK: f64 = 1e-4;

/// Section 6 (decided): checks draft distribution `j` of a request for
/// vocabulary `vocab`: as many logprobs as ids, at most `vocab` ids, each
/// id in 0..V-1 and none repeated, each logprob finite or -inf and at most
/// [`DRAFT_LOGPROB_SLACK`], the total probability at most 1 +
/// [`DRAFT_MASS_SLACK`]. Used for every distribution a verify or tree
/// request carries, whether the step uses it or not.
///
/// Errors: `RequestError::Field` naming `draft_dists`, with `draft_dists[j]` and the value.
pub(crate) fn check_draft_dist(j: usize, d: &DraftDist, vocab: u32) -> Result<(), RequestError> {
    let err = |msg: String| Err(RequestError::Field { field: "draft_dists", msg: format!("draft_dists[{j}]: {msg}") });
    if d.ids.len() != d.logprobs.len() {
        return err(format!("has {} ids and {} logprobs", d.ids.len(), d.logprobs.len()));
    }
    // More ids than V must repeat one; the step's draft arrays are as wide
    // as the widest distribution, so one would widen every row's.
    if d.ids.len() > vocab as usize {
        return err(format!("has {} ids, more than vocab_size = {vocab}", d.ids.len()));
    }
    let mut seen = vec![0u64; if d.ids.len() > 16 { vocab.div_ceil(64) as usize } else { 0 }];
    for (i, &t) in d.ids.iter().enumerate() {
        if t < 0 || t as u32 >= vocab {
            return err(format!("id {t} (entry {i}) is outside 0..{vocab}"));
        }
        let repeated = if seen.is_empty() {
            d.ids[..i].contains(&t)
        } else {
            let (w, b) = (t as usize / 64, 1u64 << (t % 64));
            let old = seen[w];
            seen[w] |= b;
            old & b != 0
        };
        if repeated {
            return err(format!("repeated ids: {t} again at entry {i}"));
        }
    }
    if let Some((i, x)) = d.logprobs.iter().enumerate().find(|(_, x)| x.is_nan() || **x > DRAFT_LOGPROB_SLACK) {
        return err(format!(
            "a logprob that is NaN or above {DRAFT_LOGPROB_SLACK:e}: {x:?} (entry {i}; must be <= 0 up to rounding, or -inf)"
        ));
    }
    let total: f64 = d.logprobs.iter().map(|&x| (x as f64).exp()).sum();
    if total > 1.0 + DRAFT_MASS_SLACK {
        return err(format!("total probability {total} above 1 + {DRAFT_MASS_SLACK:e}"));
    }
    Ok(())
}

/// Most nodes of a tree, root included (11.10, decided).
pub const MAX_TREE_NODES: usize = 256;
/// Largest depth of a tree (11.10, decided).
pub const MAX_TREE_DEPTH: usize = 64;
/// Position stride between the siblings of one node (11.5): prime, above `64 * 10000019`.
pub const SIBLING_POSITION_STRIDE: u64 = 1_000_000_009;

/// A draft tree of one decode request (SAMPLER.md 11.1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DraftTree {
    /// `[M]` parent node of each node: `parent[0] = -1` (the root), `0 <= parent[n] < n`.
    /// Siblings are tried in increasing node index, which must be their draw order.
    pub parent: Vec<i32>,
    /// `[M - 1]` draft token of node n at `tokens[n - 1]` (vocabulary id, -1 = placeholder).
    pub tokens: Vec<i32>,
    /// One draft-model processed distribution per internal node (node with a
    /// child), in node order, from which that node's children were drawn;
    /// `None` = fixed children (11.3, target-only verification).
    pub draft_dists: Option<Vec<DraftDist>>,
    /// Only with `draft_dists`: each child was drawn with its earlier siblings removed.
    pub without_replacement: bool,
}

/// A malformed tree or tree encoding; names the field and the bad value.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum TreeError {
    /// A field of the tree or of an encoding is malformed.
    #[error("bad tree field `{field}`: {msg}")]
    Field {
        /// The field (`tree.parent`, `tree.tokens`, ...).
        field: &'static str,
        /// What is wrong, with the bad value.
        msg: String,
    },
}

fn bad(field: &'static str, msg: impl Into<String>) -> TreeError {
    TreeError::Field { field, msg: msg.into() }
}

impl From<TreeError> for RequestError {
    fn from(e: TreeError) -> RequestError {
        match e {
            TreeError::Field { field, msg } => RequestError::Field { field, msg },
        }
    }
}

/// Per-node metadata of a valid tree (what the walk and the plan need).
#[derive(Clone, Debug, PartialEq)]
pub struct TreeShape {
    /// `[M]` depth of each node (root 0).
    pub depth: Vec<u32>,
    /// `[M]` sibling rank of each node among its parent's children (root 0).
    pub rank: Vec<u32>,
    /// `[M]` whether the node has a child.
    pub internal: Vec<bool>,
    /// Largest depth D.
    pub max_depth: u32,
}

impl TreeShape {
    /// Number of internal nodes I (= the draft distributions needed).
    pub fn internal_count(&self) -> usize {
        self.internal.iter().filter(|&&x| x).count()
    }
}

/// Checks the topology alone (11.10): `parent[0] = -1`, `0 <= parent[n] < n`,
/// `M <= 256`, `D <= 64`. Errors name `tree_parent`.
pub fn shape(parent: &[i32]) -> Result<TreeShape, TreeError> {
    let m = parent.len();
    if m == 0 {
        return Err(bad("tree_parent", "is empty; a tree has at least its root (tree_parent = [-1])"));
    }
    if m > MAX_TREE_NODES {
        return Err(bad("tree_parent", format!("has {m} nodes, more than {MAX_TREE_NODES}")));
    }
    if parent[0] != -1 {
        return Err(bad("tree_parent", format!("tree_parent[0] = {} (the root's parent must be -1)", parent[0])));
    }
    let mut depth = vec![0u32; m];
    let mut rank = vec![0u32; m];
    let mut kids = vec![0u32; m];
    let mut internal = vec![false; m];
    for n in 1..m {
        let p = parent[n];
        if p < 0 || p as usize >= n {
            return Err(bad("tree_parent", format!("tree_parent[{n}] = {p} is not a node before {n} (in 0..{n})")));
        }
        let p = p as usize;
        depth[n] = depth[p] + 1;
        rank[n] = kids[p];
        kids[p] += 1;
        internal[p] = true;
        if depth[n] as usize > MAX_TREE_DEPTH {
            return Err(bad("tree_parent", format!("node {n} has depth {}, deeper than {MAX_TREE_DEPTH}", depth[n])));
        }
    }
    let max_depth = depth.iter().copied().max().unwrap_or(0);
    Ok(TreeShape { depth, rank, internal, max_depth })
}

impl DraftTree {
    /// A fixed tree (no draft distributions) from parents and tokens.
    pub fn fixed(parent: Vec<i32>, tokens: Vec<i32>) -> DraftTree {
        DraftTree { parent, tokens, draft_dists: None, without_replacement: false }
    }

    /// A chain of drafts `d_1..d_{m-1}` as a tree (11.8): `parent = [-1, 0, .., m-2]`.
    pub fn chain(drafts: Vec<i32>, draft_dists: Option<Vec<DraftDist>>) -> DraftTree {
        let parent = (0..=drafts.len() as i32).map(|n| n - 1).collect();
        DraftTree { parent, tokens: drafts, draft_dists, without_replacement: false }
    }

    /// Nodes M (root included) = rows the request owns.
    pub fn nodes(&self) -> usize {
        self.parent.len()
    }

    /// Validates the tree for vocabulary `vocab` (11.10) and returns its
    /// shape. Errors name the field: `tree_parent`, `tree_token`,
    /// `draft_dists`, `draft_dists.ids`, `draft_dists.logprobs`, `without_replacement`.
    pub fn validate(&self, vocab: u32) -> Result<TreeShape, TreeError> {
        let sh = shape(&self.parent)?;
        let m = self.parent.len();
        if self.tokens.len() + 1 != m {
            return Err(bad(
                "tree_token",
                format!(
                    "has {} ids; tree_token needs one vocabulary id or -1 per non-root node ({})",
                    self.tokens.len(),
                    m - 1
                ),
            ));
        }
        for (i, &t) in self.tokens.iter().enumerate() {
            if t != -1 && (t < 0 || t as u32 >= vocab) {
                return Err(bad(
                    "tree_token",
                    format!("tree_token[{i}] = {t} is not a vocabulary id in 0..{vocab} or -1"),
                ));
            }
        }
        match &self.draft_dists {
            None if self.without_replacement => {
                return Err(bad(
                    "without_replacement",
                    "= true needs draft_dists (fixed children have no proposal law to renormalise)",
                ));
            }
            None => {}
            Some(d) => {
                let need = sh.internal_count();
                if d.len() != need {
                    return Err(bad(
                        "draft_dists",
                        format!("has {} distributions; the tree has {need} internal nodes", d.len()),
                    ));
                }
                // Section 6's rules, for every distribution (used or not).
                for (j, dd) in d.iter().enumerate() {
                    if let Err(RequestError::Field { field, msg }) = check_draft_dist(j, dd, vocab) {
                        return Err(bad(field, msg));
                    }
                }
            }
        }
        Ok(sh)
    }

    /// The draft distribution of each node (`None` for leaves and for fixed trees).
    pub fn dist_of_node(&self, sh: &TreeShape) -> Vec<Option<&DraftDist>> {
        let mut it = self.draft_dists.iter().flatten();
        sh.internal.iter().map(|&i| if i { it.next() } else { None }).collect()
    }

    /// Converts first-child / next-sibling arrays (SGLang `retrive_next_token` /
    /// `retrive_next_sibling`, TensorRT-LLM, MLC; `[M]` each, -1 = none, node 0
    /// the root) to parents. Every node 1..M-1 must be reached exactly once,
    /// every child after its parent, and sibling lists in increasing index
    /// (the draw order); nothing is renumbered. Errors name `first_child` or
    /// `next_sibling`.
    pub fn parents_from_first_child_next_sibling(
        first_child: &[i32],
        next_sibling: &[i32],
    ) -> Result<Vec<i32>, TreeError> {
        let m = first_child.len();
        if next_sibling.len() != m {
            return Err(bad("next_sibling", format!("has {} entries, first_child has {m}", next_sibling.len())));
        }
        if m == 0 {
            return Err(bad("first_child", "is empty; a tree has at least its root"));
        }
        if next_sibling[0] != -1 {
            return Err(bad(
                "next_sibling",
                format!("next_sibling[0] = {} (the root has no sibling)", next_sibling[0]),
            ));
        }
        let mut parent = vec![-2i32; m];
        parent[0] = -1;
        #[allow(clippy::needless_range_loop)]
        for c in 0..m {
            let mut x = first_child[c];
            let mut prev = c as i32;
            let mut field = "first_child";
            while x != -1 {
                if x <= prev || x as usize >= m {
                    return Err(bad(field, format!("node {x} (a child of {c}) must be a node after {prev} in 1..{m}")));
                }
                if parent[x as usize] != -2 {
                    return Err(bad(
                        field,
                        format!("node {x} is reached twice (children of {} and {c})", parent[x as usize]),
                    ));
                }
                parent[x as usize] = c as i32;
                prev = x;
                field = "next_sibling";
                x = next_sibling[x as usize];
            }
        }
        if let Some(n) = parent.iter().position(|&p| p == -2) {
            return Err(bad("first_child", format!("node {n} is not reached from the root")));
        }
        Ok(parent)
    }

    /// Converts rank paths (vLLM `speculative_token_tree`, Medusa / EAGLE-1
    /// choices): `paths[n - 1]` is node n's path of sibling ranks from the
    /// root (the root's empty path is not passed). A node's parent path must
    /// be an earlier node's, and its last rank must equal the count of its
    /// earlier siblings. Errors name `rank_paths`.
    pub fn parents_from_rank_paths(paths: &[Vec<u32>]) -> Result<Vec<i32>, TreeError> {
        let mut index: std::collections::HashMap<&[u32], usize> = std::collections::HashMap::new();
        index.insert(&[], 0);
        let mut kids = vec![0u32; paths.len() + 1];
        let mut parent = vec![-1i32];
        for (i, p) in paths.iter().enumerate() {
            let n = i + 1;
            let Some((&last, head)) = p.split_last() else {
                return Err(bad("rank_paths", format!("rank_paths[{i}] is empty (the root is implicit)")));
            };
            let Some(&par) = index.get(head) else {
                return Err(bad(
                    "rank_paths",
                    format!("rank_paths[{i}] = {p:?}: its parent path {head:?} is not an earlier node"),
                ));
            };
            if last != kids[par] {
                return Err(bad(
                    "rank_paths",
                    format!("rank_paths[{i}] = {p:?}: rank {last}, but node {par} has {} earlier children", kids[par]),
                ));
            }
            kids[par] += 1;
            if index.insert(p.as_slice(), n).is_some() {
                return Err(bad("rank_paths", format!("rank_paths[{i}] = {p:?} appears twice")));
            }
            parent.push(par as i32);
        }
        Ok(parent)
    }

    /// Converts root-to-leaf node paths (EAGLE-2 `retrieve_indices`,
    /// TensorRT-LLM `paths`; -1 padded) over nodes `0..m` to parents: every
    /// path starts at the root 0, the parent of `path[i]` is `path[i-1]` in
    /// every path, and every node 1..m-1 lies on some path. Errors name `node_paths`.
    pub fn parents_from_node_paths(m: usize, paths: &[Vec<i32>]) -> Result<Vec<i32>, TreeError> {
        if m == 0 {
            return Err(bad("node_paths", "a tree has at least its root (m >= 1)"));
        }
        let mut parent = vec![-2i32; m];
        parent[0] = -1;
        for (i, p) in paths.iter().enumerate() {
            let len = p.iter().position(|&x| x == -1).unwrap_or(p.len());
            if p[len..].iter().any(|&x| x != -1) {
                return Err(bad("node_paths", format!("node_paths[{i}] = {p:?} has a node after its -1 padding")));
            }
            if len == 0 || p[0] != 0 {
                return Err(bad("node_paths", format!("node_paths[{i}] = {p:?} does not start at the root 0")));
            }
            for j in 1..len {
                let (a, b) = (p[j - 1], p[j]);
                if b <= 0 || b as usize >= m {
                    return Err(bad("node_paths", format!("node_paths[{i}][{j}] = {b} is not a node in 1..{m}")));
                }
                let cur = &mut parent[b as usize];
                if *cur != -2 && *cur != a {
                    return Err(bad(
                        "node_paths",
                        format!("node {b} has parent {} in one path and {a} in node_paths[{i}]", *cur),
                    ));
                }
                *cur = a;
            }
        }
        if let Some(n) = parent.iter().position(|&p| p == -2) {
            return Err(bad("node_paths", format!("node {n} lies on no path")));
        }
        shape(&parent).map_err(|e| match e {
            TreeError::Field { msg, .. } => bad("node_paths", msg),
        })?;
        Ok(parent)
    }

    /// Converts per-child draft rows (TensorRT-LLM `draftProbs` + `draftProbIndices`:
    /// a table of distributions and, for each node n >= 1, the table row its
    /// token was drawn from; `child_row[0]`, the root's, is ignored) to 11.1's
    /// one distribution per internal node, in node order: an internal node's
    /// distribution is the row of its first child. Siblings drawn from
    /// different rows (MLC's per-child storage) are not one proposal law per
    /// node: an error naming `child_row`, as is a row outside the table.
    pub fn dists_from_child_rows(
        parent: &[i32],
        child_row: &[i32],
        table: &[DraftDist],
    ) -> Result<Vec<DraftDist>, TreeError> {
        let sh = shape(parent)?;
        if child_row.len() != parent.len() {
            return Err(bad("child_row", format!("has {} entries for {} nodes", child_row.len(), parent.len())));
        }
        let mut row_of: Vec<Option<i32>> = vec![None; parent.len()];
        for n in 1..parent.len() {
            let (p, r) = (parent[n] as usize, child_row[n]);
            if r < 0 || r as usize >= table.len() {
                return Err(bad(
                    "child_row",
                    format!("child_row[{n}] = {r} is not a row of the {}-row table", table.len()),
                ));
            }
            match row_of[p] {
                Some(first) if first != r => {
                    return Err(bad("child_row", format!("children of node {p} come from rows {first} and {r}; siblings must share their parent's distribution")));
                }
                _ => row_of[p] = Some(r),
            }
        }
        Ok((0..parent.len()).filter(|&c| sh.internal[c]).map(|c| table[row_of[c].unwrap() as usize].clone()).collect())
    }

    /// Converts depths in DFS order (FlexFlow): `depths[0] = 0` is the root,
    /// and each later node's parent is the latest earlier node one level up
    /// (so `depths[n] <= depths[n-1] + 1`). Errors name `dfs_depths`.
    pub fn parents_from_dfs_depths(depths: &[u32]) -> Result<Vec<i32>, TreeError> {
        if depths.first() != Some(&0) {
            return Err(bad("dfs_depths", format!("must start with the root's depth 0, got {:?}", depths.first())));
        }
        let mut stack: Vec<usize> = vec![0];
        let mut parent = vec![-1i32];
        for (n, &d) in depths.iter().enumerate().skip(1) {
            if d == 0 || d as usize > stack.len() {
                return Err(bad(
                    "dfs_depths",
                    format!("dfs_depths[{n}] = {d} after depth {} (must be in 1..={})", depths[n - 1], stack.len()),
                ));
            }
            stack.truncate(d as usize);
            parent.push(stack[d as usize - 1] as i32);
            stack.push(n);
        }
        Ok(parent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_errors() {
        let s = shape(&[-1, 0, 0, 2]).unwrap();
        assert_eq!(s.depth, [0, 1, 1, 2]);
        assert_eq!(s.rank, [0, 0, 1, 0]);
        assert_eq!(s.internal, [true, false, true, false]);
        assert_eq!(s.max_depth, 2);
        for bad in [&[0, 0][..], &[-1, 1], &[-1, 0, 3, 0], &[-1, -1], &[]] {
            assert!(matches!(shape(bad), Err(TreeError::Field { field: "tree_parent", .. })), "{bad:?}");
        }
        let deep: Vec<i32> = (0..66).map(|n| n - 1).collect();
        assert!(shape(&deep).is_err());
        assert!(shape(&deep[..65]).is_ok());
        let wide: Vec<i32> = std::iter::once(-1).chain(std::iter::repeat_n(0, 256)).collect();
        assert!(shape(&wide).is_err());
        assert!(shape(&wide[..256]).is_ok());
    }

    #[test]
    fn validate_fields() {
        let t = DraftTree::fixed(vec![-1, 0, 0, 2], vec![0, 1, 3]);
        assert!(t.validate(4).is_ok());
        let field = |t: &DraftTree| match t.validate(4) {
            Err(TreeError::Field { field, .. }) => field,
            Ok(_) => "ok",
        };
        assert_eq!(field(&DraftTree { tokens: vec![0, 1], ..t.clone() }), "tree_token");
        assert_eq!(field(&DraftTree { tokens: vec![0, 4, 1], ..t.clone() }), "tree_token");
        assert_eq!(field(&DraftTree { tokens: vec![0, -1, 1], ..t.clone() }), "ok");
        assert_eq!(field(&DraftTree { without_replacement: true, ..t.clone() }), "without_replacement");
        let d = DraftDist { ids: vec![0], logprobs: vec![0.0] };
        assert_eq!(field(&DraftTree { draft_dists: Some(vec![d.clone()]), ..t.clone() }), "draft_dists");
        assert_eq!(field(&DraftTree { draft_dists: Some(vec![d.clone(), d.clone()]), ..t.clone() }), "ok");
        let bad_id = DraftDist { ids: vec![9], logprobs: vec![0.0] };
        assert_eq!(field(&DraftTree { draft_dists: Some(vec![d.clone(), bad_id]), ..t.clone() }), "draft_dists");
        // Section 6 (decided): repeated ids, a logprob above 1e-6, a total
        // above 1 + 1e-4 fail; a total below 1 (truncated) does not.
        for (ids, lps, ok) in [
            (vec![1, 1], vec![-1.0f32, -1.0], false),
            (vec![1], vec![2e-6], false),
            (vec![1], vec![1e-6], true),
            (vec![1], vec![f32::INFINITY], false),
            (vec![1, 2], vec![-0.7, -0.6], false),
            (vec![1, 2], vec![-std::f32::consts::LN_2, -std::f32::consts::LN_2], true),
            (vec![1, 2], vec![-1.0, f32::NEG_INFINITY], true),
        ] {
            let dd = DraftDist { ids: ids.clone(), logprobs: lps.clone() };
            let want = if ok { "ok" } else { "draft_dists" };
            assert_eq!(
                field(&DraftTree { draft_dists: Some(vec![d.clone(), dd]), ..t.clone() }),
                want,
                "{ids:?} {lps:?}"
            );
        }
    }

    #[test]
    fn converters_agree() {
        // The 11.11 tree: root -> A (1), B (2); B -> C (3).
        let want = vec![-1, 0, 0, 2];
        assert_eq!(DraftTree::parents_from_first_child_next_sibling(&[1, -1, 3, -1], &[-1, 2, -1, -1]).unwrap(), want);
        assert_eq!(DraftTree::parents_from_rank_paths(&[vec![0], vec![1], vec![1, 0]]).unwrap(), want);
        assert_eq!(DraftTree::parents_from_node_paths(4, &[vec![0, 1, -1], vec![0, 2, 3]]).unwrap(), want);
        assert_eq!(DraftTree::parents_from_dfs_depths(&[0, 1, 1, 2]).unwrap(), want);
        assert_eq!(DraftTree::chain(vec![5, 6], None).parent, vec![-1, 0, 1]);
        // TensorRT-LLM per-child rows: nodes 1, 2 from row 1, node 3 from row 0.
        let table = vec![
            DraftDist { ids: vec![3], logprobs: vec![0.0] },
            DraftDist { ids: vec![0, 1], logprobs: vec![-0.5, -1.0] },
        ];
        let d = DraftTree::dists_from_child_rows(&want, &[-1, 1, 1, 0], &table).unwrap();
        assert_eq!(d, vec![table[1].clone(), table[0].clone()]);
        assert!(
            DraftTree::dists_from_child_rows(&want, &[-1, 1, 0, 0], &table).is_err(),
            "siblings from different rows"
        );
        assert!(DraftTree::dists_from_child_rows(&want, &[-1, 1, 1, 2], &table).is_err(), "row outside the table");
    }

    #[test]
    fn converters_reject() {
        // Sibling list not increasing, a node reached twice, a node unreached.
        assert!(DraftTree::parents_from_first_child_next_sibling(&[2, -1, -1], &[-1, -1, 1]).is_err());
        assert!(DraftTree::parents_from_first_child_next_sibling(&[1, 2, -1], &[-1, 2, -1]).is_err());
        assert!(DraftTree::parents_from_first_child_next_sibling(&[1, -1, -1], &[-1, -1, -1]).is_err());
        // Rank out of order, unknown parent path.
        assert!(DraftTree::parents_from_rank_paths(&[vec![1]]).is_err());
        assert!(DraftTree::parents_from_rank_paths(&[vec![0, 0], vec![0]]).is_err());
        // Inconsistent parents, a node on no path, not from the root.
        assert!(DraftTree::parents_from_node_paths(3, &[vec![0, 1, 2], vec![0, 2, -1]]).is_err());
        assert!(DraftTree::parents_from_node_paths(3, &[vec![0, 1]]).is_err());
        assert!(DraftTree::parents_from_node_paths(2, &[vec![1]]).is_err());
        // A jump of two levels, a second root.
        assert!(DraftTree::parents_from_dfs_depths(&[0, 2]).is_err());
        assert!(DraftTree::parents_from_dfs_depths(&[0, 1, 0]).is_err());
    }
}
