//! The request-side classes: `SamplingParams`, `DraftDist`, `DraftTree`, `Request`.

use super::*;

/// Per-request sampling parameters (SAMPLER.md section 1), as an engine
/// receives them. Values are validated when the step runs: a bad value gives
/// the request an error status, not an exception (only wrong types raise,
/// naming the field, in the constructor and when an attribute is set).
#[pyclass(name = "SamplingParams", module = "sampler_py")]
#[derive(Clone)]
pub(crate) struct PySamplingParams {
    /// Softmax temperature (f32); error status if negative, NaN or +inf (-0.0 is 0); below 1e-5 = greedy-like clamp.
    #[pyo3(get)]
    pub(crate) temperature: f32,
    /// Nucleus mass in (0, 1] (f32); 1 = off.
    #[pyo3(get)]
    pub(crate) top_p: f32,
    /// Top-k; -1 = off; 0, below -1 or above 2**31-1 is an error status.
    #[pyo3(get)]
    pub(crate) top_k: i64,
    /// How many top logprobs to return (error status if above N).
    #[pyo3(get)]
    pub(crate) top_logprobs: u32,
    /// Seed of the request's random streams (u64); None = 64 random bits per step.
    #[pyo3(get)]
    pub(crate) seq_seed: Option<u64>,
    /// Prompt logprobs wanted (section 8; `Request.prompt_logprobs` sets it).
    #[pyo3(get)]
    pub(crate) prompt_logprobs: bool,
    /// Teacher forcing: the output the request must follow (section 7; the
    /// engine turns it into per-step `golden` rows).
    #[pyo3(get)]
    pub(crate) golden_token_ids: Vec<i32>,
    /// min-p (SAMPLER.md 10.1): 0 = off; outside [0, 1] or NaN is an error status.
    #[pyo3(get)]
    pub(crate) min_p: f32,
    /// `"top_p_then_top_k"` (the seed's order) or `"top_k_then_top_p"` (vLLM/HF, 10.2); another string raises ValueError.
    #[pyo3(get)]
    pub(crate) filter_order: String,
    /// `"processed"` or `"raw"` logprobs (10.3); another string raises ValueError.
    #[pyo3(get)]
    pub(crate) logprobs_mode: String,
}

#[pymethods]
impl PySamplingParams {
    #[new]
    #[pyo3(signature = (*, temperature=None, top_p=None, top_k=None, top_logprobs=None, seq_seed=None, prompt_logprobs=false, golden_token_ids=None, min_p=None, filter_order=None, logprobs_mode=None))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        temperature: Option<&Bound<'_, PyAny>>,
        top_p: Option<&Bound<'_, PyAny>>,
        top_k: Option<&Bound<'_, PyAny>>,
        top_logprobs: Option<&Bound<'_, PyAny>>,
        seq_seed: Option<&Bound<'_, PyAny>>,
        prompt_logprobs: bool,
        golden_token_ids: Option<&Bound<'_, PyAny>>,
        min_p: Option<&Bound<'_, PyAny>>,
        filter_order: Option<String>,
        logprobs_mode: Option<String>,
    ) -> PyResult<Self> {
        // Unknown strings are a bad call (ValueError naming the argument).
        let filter_order = filter_order.unwrap_or_else(|| "top_p_then_top_k".into());
        filter_order.parse::<FilterOrder>().map_err(|e| value_err(format!("filter_order: {e}")))?;
        let logprobs_mode = logprobs_mode.unwrap_or_else(|| "processed".into());
        logprobs_mode.parse::<LogprobsMode>().map_err(|e| value_err(format!("logprobs_mode: {e}")))?;
        // Our own conversions, so every message names the argument on every Python version.
        let tl = top_logprobs.map(|x| i64_arg(x, "top_logprobs")).transpose()?.unwrap_or(0);
        Ok(PySamplingParams {
            temperature: temperature.map(|x| f32_arg(x, "temperature")).transpose()?.unwrap_or(1.0),
            top_p: top_p.map(|x| f32_arg(x, "top_p")).transpose()?.unwrap_or(1.0),
            top_k: top_k.map(|x| i64_arg(x, "top_k")).transpose()?.unwrap_or(-1),
            top_logprobs: u32::try_from(tl)
                .map_err(|_| value_err(format!("top_logprobs must be in 0..=4294967295, got {tl}")))?,
            seq_seed: seq_seed.filter(|s| !s.is_none()).map(|s| u64_arg(s, "seq_seed")).transpose()?,
            prompt_logprobs,
            golden_token_ids: golden_token_ids
                .map(|g| ids_list(g, "golden_token_ids"))
                .transpose()?
                .unwrap_or_default(),
            min_p: min_p.map(|x| f32_arg(x, "min_p")).transpose()?.unwrap_or(0.0),
            filter_order,
            logprobs_mode,
        })
    }
    // Setters convert as the constructor does, so a wrong type or an
    // out-of-range int raises an error naming the field (pyo3's own
    // conversions name nothing: "out of range integral type conversion").
    #[setter]
    pub(crate) fn set_temperature(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.temperature = f32_arg(v, "temperature")?;
        Ok(())
    }
    #[setter]
    pub(crate) fn set_top_p(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.top_p = f32_arg(v, "top_p")?;
        Ok(())
    }
    #[setter]
    pub(crate) fn set_top_k(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.top_k = i64_arg(v, "top_k")?;
        Ok(())
    }
    #[setter]
    pub(crate) fn set_top_logprobs(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.top_logprobs = u32_opt(Some(v), "top_logprobs", 0)?;
        Ok(())
    }
    #[setter]
    pub(crate) fn set_seq_seed(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.seq_seed = if v.is_none() { None } else { Some(u64_arg(v, "seq_seed")?) };
        Ok(())
    }
    #[setter]
    pub(crate) fn set_prompt_logprobs(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.prompt_logprobs = v
            .extract::<bool>()
            .map_err(|_| PyTypeError::new_err(format!("prompt_logprobs must be a bool, got {}", type_name(v))))?;
        Ok(())
    }
    #[setter]
    pub(crate) fn set_golden_token_ids(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.golden_token_ids = ids_list(v, "golden_token_ids")?;
        Ok(())
    }
    #[setter]
    pub(crate) fn set_min_p(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.min_p = f32_arg(v, "min_p")?;
        Ok(())
    }
    #[setter]
    pub(crate) fn set_filter_order(&mut self, v: String) -> PyResult<()> {
        v.parse::<FilterOrder>().map_err(|e| value_err(format!("filter_order: {e}")))?;
        self.filter_order = v;
        Ok(())
    }
    #[setter]
    pub(crate) fn set_logprobs_mode(&mut self, v: String) -> PyResult<()> {
        v.parse::<LogprobsMode>().map_err(|e| value_err(format!("logprobs_mode: {e}")))?;
        self.logprobs_mode = v;
        Ok(())
    }
    pub(crate) fn __repr__(&self) -> String {
        format!(
            "SamplingParams(temperature={:?}, top_p={:?}, top_k={}, top_logprobs={}, seq_seed={}, prompt_logprobs={}, golden_token_ids={:?}, min_p={:?}, filter_order={:?}, logprobs_mode={:?})",
            self.temperature,
            self.top_p,
            self.top_k,
            self.top_logprobs,
            self.seq_seed.map_or("None".into(), |s| s.to_string()),
            if self.prompt_logprobs { "True" } else { "False" },
            self.golden_token_ids,
            self.min_p,
            self.filter_order,
            self.logprobs_mode
        )
    }
}

impl PySamplingParams {
    pub(crate) fn to_rust(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            top_logprobs: self.top_logprobs,
            seq_seed: self.seq_seed,
            prompt_logprobs: self.prompt_logprobs,
            golden_token_ids: self.golden_token_ids.clone(),
            // Checked when the object was built or the attribute set.
            min_p: self.min_p,
            filter_order: self.filter_order.parse().unwrap_or_default(),
            logprobs_mode: self.logprobs_mode.parse().unwrap_or_default(),
        }
    }
}

// ---------------------------------------------------------------- DraftDist, Request

/// The draft model's processed distribution that proposed one draft token
/// (section 6): `ids` int32 and their processed logprobs (natural log);
/// ids not listed have logprob -inf.
#[pyclass(name = "DraftDist", module = "sampler_py", frozen)]
pub(crate) struct PyDraftDist {
    pub(crate) inner: DraftDist,
}

#[pymethods]
impl PyDraftDist {
    #[new]
    pub(crate) fn new(ids: &Bound<'_, PyAny>, logprobs: &Bound<'_, PyAny>) -> PyResult<Self> {
        let ids = ids_list(ids, "ids")?;
        let logprobs = f32_list(logprobs, "logprobs")?;
        if ids.len() != logprobs.len() {
            return Err(value_err(format!("ids and logprobs differ in length: {} != {}", ids.len(), logprobs.len())));
        }
        Ok(PyDraftDist { inner: DraftDist { ids, logprobs } })
    }
    /// `[n]` int32 ids.
    #[getter]
    pub(crate) fn ids(&self) -> Vec<i32> {
        self.inner.ids.clone()
    }
    /// `[n]` float32 processed logprobs.
    #[getter]
    pub(crate) fn logprobs(&self) -> Vec<f32> {
        self.inner.logprobs.clone()
    }
    pub(crate) fn __len__(&self) -> usize {
        self.inner.ids.len()
    }
    pub(crate) fn __repr__(&self) -> String {
        format!("DraftDist(n={})", self.inner.ids.len())
    }
}

pub(crate) fn draft_dists_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<DraftDist>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(Vec::new()) };
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("draft_dists must be a list of DraftDist, got {}", type_name(obj))))?
        .collect::<PyResult<_>>()?;
    items
        .iter()
        .enumerate()
        .map(|(j, d)| {
            if let Ok(d) = d.cast::<PyDraftDist>() {
                return Ok(d.get().inner.clone());
            }
            let (ids, lps): (Bound<'_, PyAny>, Bound<'_, PyAny>) = d.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "draft_dists[{j}] must be a DraftDist or an (ids, logprobs) pair, got {}",
                    type_name(d)
                ))
            })?;
            let ids = ids_list(&ids, &format!("draft_dists[{j}].ids"))?;
            let logprobs = f32_list(&lps, &format!("draft_dists[{j}].logprobs"))?;
            if ids.len() != logprobs.len() {
                return Err(value_err(format!("draft_dists[{j}]: {} ids but {} logprobs", ids.len(), logprobs.len())));
            }
            Ok(DraftDist { ids, logprobs })
        })
        .collect()
}

/// A draft tree of one decode request (SAMPLER.md 11.1): `parent` `[M]`
/// (`parent[0] = -1`, `0 <= parent[n] < n`, siblings in draw order),
/// `tokens` `[M - 1]` (node n's draft token at `tokens[n - 1]`, -1 =
/// placeholder), `draft_dists`: one `DraftDist` per internal node in node
/// order (None = fixed children, 11.3), `without_replacement` (11.4). A
/// malformed tree fails only its request when the step runs (11.10); the
/// static converters raise ValueError naming their argument.
#[pyclass(name = "DraftTree", module = "sampler_py", frozen)]
pub(crate) struct PyDraftTree {
    pub(crate) inner: sampler_host::DraftTree,
}

pub(crate) fn tree_err(e: impl std::fmt::Display) -> PyErr {
    value_err(e.to_string())
}

/// Renumbers a rooted tree (node 0 the root; `children[c]` in draw order) in
/// depth-first preorder: `(parent, perm)` with new node n = input node `perm[n]`,
/// so every child follows its parent and siblings keep their order (11.1).
pub(crate) fn preorder(children: &[Vec<usize>]) -> (Vec<i32>, Vec<i32>) {
    let m = children.len();
    let (mut perm, mut new_of, mut parent) = (Vec::with_capacity(m), vec![0usize; m], Vec::with_capacity(m));
    let mut stack = vec![(0usize, -1i32)];
    while let Some((old, par)) = stack.pop() {
        new_of[old] = perm.len();
        perm.push(old as i32);
        parent.push(par);
        for &c in children[old].iter().rev() {
            stack.push((c, new_of[old] as i32));
        }
    }
    (parent, perm)
}

pub(crate) fn u32_lists(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<Vec<u32>>> {
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("{arg} must be a list of lists of ints, got {}", type_name(obj))))?
        .collect::<PyResult<_>>()?;
    items
        .iter()
        .enumerate()
        .map(|(i, p)| {
            i64_list(p, &format!("{arg}[{i}]"))?
                .into_iter()
                .map(|x| {
                    u32::try_from(x).map_err(|_| value_err(format!("{arg}[{i}]: {x} is not a rank (0..=4294967295)")))
                })
                .collect()
        })
        .collect()
}

#[pymethods]
impl PyDraftTree {
    #[new]
    #[pyo3(signature = (parent, tokens, draft_dists=None, without_replacement=false))]
    pub(crate) fn new(
        parent: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
        draft_dists: Option<&Bound<'_, PyAny>>,
        without_replacement: bool,
    ) -> PyResult<Self> {
        let draft_dists = match draft_dists.filter(|d| !d.is_none()) {
            None => None,
            Some(d) => Some(draft_dists_arg(Some(d))?),
        };
        Ok(PyDraftTree {
            inner: sampler_host::DraftTree {
                parent: ids_list(parent, "parent")?,
                tokens: ids_list(tokens, "tokens")?,
                draft_dists,
                without_replacement,
            },
        })
    }
    /// A chain (section 6's verify as a tree): node i+1 is `drafts[i]`, child of node i.
    #[staticmethod]
    #[pyo3(signature = (drafts, draft_dists=None))]
    pub(crate) fn chain(drafts: &Bound<'_, PyAny>, draft_dists: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let d = draft_dists.filter(|d| !d.is_none()).map(|d| draft_dists_arg(Some(d))).transpose()?;
        Ok(PyDraftTree { inner: sampler_host::DraftTree::chain(ids_list(drafts, "drafts")?, d) })
    }
    /// `[M]` parents.
    #[getter]
    pub(crate) fn parent(&self) -> Vec<i32> {
        self.inner.parent.clone()
    }
    /// `[M - 1]` draft tokens.
    #[getter]
    pub(crate) fn tokens(&self) -> Vec<i32> {
        self.inner.tokens.clone()
    }
    /// Whether children were drawn without replacement.
    #[getter]
    pub(crate) fn without_replacement(&self) -> bool {
        self.inner.without_replacement
    }
    /// Nodes M (= rows of its request).
    #[getter]
    pub(crate) fn nodes(&self) -> usize {
        self.inner.nodes()
    }
    /// Parents from first-child / next-sibling arrays (`[M]` each, -1 = none;
    /// SGLang `retrive_next_token` / `retrive_next_sibling`). Without
    /// `renumber`: nodes must already be in 11.1's order (every child after its
    /// parent, a sibling list in increasing index), else ValueError. With
    /// `renumber=True`, any numbering and sibling order (the list order is the
    /// draw order) is accepted and `(parent, perm)` is returned: new node n is
    /// input node `perm[n]` (identity when the input was in order; else nodes in
    /// depth-first preorder, siblings in list order). Reorder the request's
    /// logits rows and `tokens` by `perm` (row n = input row `perm[n]`), and map
    /// `StepOutput.paths` back through it.
    #[staticmethod]
    #[pyo3(signature = (first_child, next_sibling, *, renumber=false))]
    pub(crate) fn parents_from_first_child_next_sibling(
        py: Python<'_>,
        first_child: &Bound<'_, PyAny>,
        next_sibling: &Bound<'_, PyAny>,
        renumber: bool,
    ) -> PyResult<Py<PyAny>> {
        let fc = ids_list(first_child, "first_child")?;
        let ns = ids_list(next_sibling, "next_sibling")?;
        let strict = sampler_host::DraftTree::parents_from_first_child_next_sibling(&fc, &ns);
        if !renumber {
            return Ok(strict.map_err(tree_err)?.into_pyobject(py)?.into_any().unbind());
        }
        if let Ok(parent) = strict {
            let perm: Vec<i32> = (0..parent.len() as i32).collect();
            return Ok((parent, perm).into_pyobject(py)?.into_any().unbind());
        }
        let m = fc.len();
        if ns.len() != m {
            return Err(value_err(format!("next_sibling: has {} entries, first_child has {m}", ns.len())));
        }
        if m == 0 {
            return Err(value_err("first_child: is empty; a tree has at least its root"));
        }
        if ns[0] != -1 {
            return Err(value_err(format!("next_sibling: next_sibling[0] = {} (the root has no sibling)", ns[0])));
        }
        // Children in list order, each node reached exactly once from the root.
        let mut children = vec![Vec::new(); m];
        let mut seen = vec![false; m];
        seen[0] = true;
        let mut queue = vec![0usize];
        while let Some(c) = queue.pop() {
            let (mut x, mut field) = (fc[c], "first_child");
            while x != -1 {
                if x <= 0 || x as usize >= m {
                    return Err(value_err(format!("{field}: node {x} (a child of {c}) is not a node in 1..{m}")));
                }
                if seen[x as usize] {
                    return Err(value_err(format!("{field}: node {x} is reached twice (a child of {c})")));
                }
                seen[x as usize] = true;
                children[c].push(x as usize);
                queue.push(x as usize);
                field = "next_sibling";
                x = ns[x as usize];
            }
        }
        if let Some(n) = seen.iter().position(|&s| !s) {
            return Err(value_err(format!("first_child: node {n} is not reached from the root")));
        }
        Ok(preorder(&children).into_pyobject(py)?.into_any().unbind())
    }
    /// Parents from rank paths (vLLM `speculative_token_tree`, Medusa / EAGLE-1 choices), root excluded.
    #[staticmethod]
    pub(crate) fn parents_from_rank_paths(paths: &Bound<'_, PyAny>) -> PyResult<Vec<i32>> {
        sampler_host::DraftTree::parents_from_rank_paths(&u32_lists(paths, "rank_paths")?).map_err(tree_err)
    }
    /// Parents of nodes `0..m` from root-to-leaf node paths (EAGLE-2
    /// `retrieve_indices`; -1 padded). Without `renumber` the nodes must be in
    /// 11.1's order; with `renumber=True` any numbering is accepted and
    /// `(parent, perm)` is returned as by `parents_from_first_child_next_sibling`
    /// (siblings keep their input index order).
    #[staticmethod]
    #[pyo3(signature = (m, paths, *, renumber=false))]
    pub(crate) fn parents_from_node_paths(
        py: Python<'_>,
        m: &Bound<'_, PyAny>,
        paths: &Bound<'_, PyAny>,
        renumber: bool,
    ) -> PyResult<Py<PyAny>> {
        let m = usize_arg(m, "m")?;
        let items: Vec<Bound<'_, PyAny>> = paths.try_iter()?.collect::<PyResult<_>>()?;
        let p: Vec<Vec<i32>> =
            items.iter().enumerate().map(|(i, x)| ids_list(x, &format!("node_paths[{i}]"))).collect::<PyResult<_>>()?;
        let strict = sampler_host::DraftTree::parents_from_node_paths(m, &p);
        if !renumber {
            return Ok(strict.map_err(tree_err)?.into_pyobject(py)?.into_any().unbind());
        }
        if let Ok(parent) = strict {
            let perm: Vec<i32> = (0..parent.len() as i32).collect();
            return Ok((parent, perm).into_pyobject(py)?.into_any().unbind());
        }
        if m == 0 {
            return Err(value_err("node_paths: a tree has at least its root (m >= 1)"));
        }
        let mut parent = vec![-2i64; m];
        parent[0] = -1;
        for (i, path) in p.iter().enumerate() {
            let len = path.iter().position(|&x| x == -1).unwrap_or(path.len());
            if path[len..].iter().any(|&x| x != -1) || len == 0 || path[0] != 0 {
                return Err(value_err(format!(
                    "node_paths: node_paths[{i}] = {path:?} must start at the root 0, -1 padded"
                )));
            }
            for j in 1..len {
                let (a, b) = (path[j - 1] as i64, path[j]);
                if b <= 0 || b as usize >= m {
                    return Err(value_err(format!("node_paths: node_paths[{i}][{j}] = {b} is not a node in 1..{m}")));
                }
                let cur = &mut parent[b as usize];
                if *cur != -2 && *cur != a {
                    return Err(value_err(format!(
                        "node_paths: node {b} has parent {} in one path and {a} in node_paths[{i}]",
                        *cur
                    )));
                }
                *cur = a;
            }
        }
        if let Some(n) = parent.iter().position(|&x| x == -2) {
            return Err(value_err(format!("node_paths: node {n} lies on no path")));
        }
        let mut children = vec![Vec::new(); m];
        for (n, &a) in parent.iter().enumerate().skip(1) {
            children[a as usize].push(n); // increasing input index
        }
        Ok(preorder(&children).into_pyobject(py)?.into_any().unbind())
    }
    /// Parents from depths in DFS order (FlexFlow).
    #[staticmethod]
    pub(crate) fn parents_from_dfs_depths(depths: &Bound<'_, PyAny>) -> PyResult<Vec<i32>> {
        let d: Vec<u32> = i64_list(depths, "dfs_depths")?
            .into_iter()
            .map(|x| u32::try_from(x).map_err(|_| value_err(format!("dfs_depths: {x} is not a depth"))))
            .collect::<PyResult<_>>()?;
        sampler_host::DraftTree::parents_from_dfs_depths(&d).map_err(tree_err)
    }
    /// One distribution per internal node from per-child table rows (TensorRT-LLM `draftProbIndices`).
    #[staticmethod]
    pub(crate) fn dists_from_child_rows(
        parent: &Bound<'_, PyAny>,
        child_row: &Bound<'_, PyAny>,
        table: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<PyDraftDist>> {
        let t = draft_dists_arg(Some(table))?;
        let d = sampler_host::DraftTree::dists_from_child_rows(
            &ids_list(parent, "parent")?,
            &ids_list(child_row, "child_row")?,
            &t,
        )
        .map_err(tree_err)?;
        Ok(d.into_iter().map(|inner| PyDraftDist { inner }).collect())
    }
    pub(crate) fn __repr__(&self) -> String {
        format!(
            "DraftTree(nodes={}, proposal={})",
            self.inner.nodes(),
            if self.inner.draft_dists.is_some() { "drafted" } else { "fixed" }
        )
    }
}

/// One request of a step; it owns consecutive rows of the logits. Build it
/// with the static constructors (`prefill`, `decode`, `verify`, `draft`,
/// `prompt_logprobs`).
#[pyclass(name = "Request", module = "sampler_py", frozen)]
pub(crate) struct PyRequest {
    pub(crate) inner: Request,
}

pub(crate) fn finish(
    mut r: Request,
    golden: Option<&Bound<'_, PyAny>>,
    masks: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyRequest> {
    if let Some(g) = golden.filter(|g| !g.is_none()) {
        r.golden = ids_list(g, "golden")?;
    }
    if let Some(m) = masks.filter(|m| !m.is_none()) {
        r.masks = Some(masks_arg(m, "masks")?);
    }
    Ok(PyRequest { inner: r })
}

#[pymethods]
impl PyRequest {
    /// One prefill row at position `seqlen_k` (prompt length after this chunk).
    /// `golden`: `[1]` teacher-forced token (-1 none); `masks`: `[1, ceil(V/32)]` bit mask.
    #[staticmethod]
    #[pyo3(signature = (params, seqlen_k, *, golden=None, masks=None))]
    pub(crate) fn prefill(
        params: PyRef<'_, PySamplingParams>,
        seqlen_k: &Bound<'_, PyAny>,
        golden: Option<&Bound<'_, PyAny>>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        finish(Request::prefill(params.to_rust(), u64_arg(seqlen_k, "seqlen_k")?), golden, masks)
    }

    /// A decode request owning `seqlen_q` rows: row j verifies `drafts[j]`
    /// (-1 = placeholder), the last row is fresh (section 6). `drafts` and
    /// `draft_dists` need `seqlen_q - 1` entries (else an error status).
    #[staticmethod]
    #[pyo3(signature = (params, seqlen_k, seqlen_q=None, drafts=None, draft_dists=None, *, golden=None, masks=None))]
    pub(crate) fn decode(
        params: PyRef<'_, PySamplingParams>,
        seqlen_k: &Bound<'_, PyAny>,
        seqlen_q: Option<&Bound<'_, PyAny>>,
        drafts: Option<&Bound<'_, PyAny>>,
        draft_dists: Option<&Bound<'_, PyAny>>,
        golden: Option<&Bound<'_, PyAny>>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let drafts = drafts.filter(|d| !d.is_none()).map(|d| ids_list(d, "drafts")).transpose()?.unwrap_or_default();
        let r = Request::decode(
            params.to_rust(),
            u64_arg(seqlen_k, "seqlen_k")?,
            seqlen_q.map_or(Ok(1), |q| u64_arg(q, "seqlen_q"))?,
            drafts,
            draft_dists_arg(draft_dists)?,
        );
        finish(r, golden, masks)
    }

    /// A verify request: `decode` with `seqlen_q = len(drafts) + 1`.
    #[staticmethod]
    #[pyo3(signature = (params, seqlen_k, drafts, draft_dists, *, golden=None, masks=None))]
    pub(crate) fn verify(
        params: PyRef<'_, PySamplingParams>,
        seqlen_k: &Bound<'_, PyAny>,
        drafts: &Bound<'_, PyAny>,
        draft_dists: &Bound<'_, PyAny>,
        golden: Option<&Bound<'_, PyAny>>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let drafts = ids_list(drafts, "drafts")?;
        let q = drafts.len() as u64 + 1;
        let r = Request::decode(
            params.to_rust(),
            u64_arg(seqlen_k, "seqlen_k")?,
            q,
            drafts,
            draft_dists_arg(Some(draft_dists))?,
        );
        finish(r, golden, masks)
    }

    /// Draft-model draws, one per row (`rows`): row i-1 draws draft i at
    /// position `sample_position + last_valid_offset + i`, seed `seq_seed + 1000000007`.
    #[staticmethod]
    #[pyo3(signature = (params, seqlen_k, seqlen_q, last_valid_offset, rows, *, masks=None))]
    pub(crate) fn draft(
        params: PyRef<'_, PySamplingParams>,
        seqlen_k: &Bound<'_, PyAny>,
        seqlen_q: &Bound<'_, PyAny>,
        last_valid_offset: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rows_v = u64_arg(rows, "rows")?;
        let rows =
            u32::try_from(rows_v).map_err(|_| value_err(format!("rows must be in 0..=4294967295, got {rows_v}")))?;
        let kind = RequestKind::Draft {
            seqlen_k: u64_arg(seqlen_k, "seqlen_k")?,
            seqlen_q: u64_arg(seqlen_q, "seqlen_q")?,
            last_valid_offset: u64_arg(last_valid_offset, "last_valid_offset")?,
            rows,
        };
        finish(Request { params: params.to_rust(), kind, golden: Vec::new(), masks: None }, None, masks)
    }

    /// Prompt logprobs (section 8): one row per prompt position; `targets[i]`
    /// is the next prompt token (-1 = none). No token is drawn.
    #[staticmethod]
    #[pyo3(signature = (params, targets, *, masks=None))]
    pub(crate) fn prompt_logprobs(
        params: PyRef<'_, PySamplingParams>,
        targets: &Bound<'_, PyAny>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut p = params.to_rust();
        p.prompt_logprobs = true;
        let kind = RequestKind::PromptLogprobs { targets: ids_list(targets, "targets")? };
        finish(Request { params: p, kind, golden: Vec::new(), masks: None }, None, masks)
    }

    /// A decode request verifying a draft tree (section 11): one row per
    /// node; `seqlen_k` counts the M tree nodes; `golden`: one id per depth
    /// (11.7). The accepted path is `StepOutput.paths`.
    #[staticmethod]
    #[pyo3(signature = (params, seqlen_k, tree, *, golden=None, masks=None))]
    pub(crate) fn tree(
        params: PyRef<'_, PySamplingParams>,
        seqlen_k: &Bound<'_, PyAny>,
        tree: PyRef<'_, PyDraftTree>,
        golden: Option<&Bound<'_, PyAny>>,
        masks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        finish(Request::tree(params.to_rust(), u64_arg(seqlen_k, "seqlen_k")?, tree.inner.clone()), golden, masks)
    }

    /// Rows of the logits this request owns.
    #[getter]
    pub(crate) fn rows(&self) -> usize {
        self.inner.rows()
    }
    /// `"prefill"`, `"decode"`, `"draft"`, `"prompt_logprobs"` or `"tree"`.
    #[getter]
    pub(crate) fn kind(&self) -> &'static str {
        match self.inner.kind {
            RequestKind::Prefill { .. } => "prefill",
            RequestKind::Decode { .. } => "decode",
            RequestKind::Draft { .. } => "draft",
            RequestKind::PromptLogprobs { .. } => "prompt_logprobs",
            RequestKind::Tree { .. } => "tree",
        }
    }
    pub(crate) fn __repr__(&self) -> String {
        format!("Request(kind={:?}, rows={})", self.kind(), self.rows())
    }
}
