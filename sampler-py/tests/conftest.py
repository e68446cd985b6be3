"""Shared helpers of the sampler_py tests (CPU, numpy)."""

import json
import math
import os
import pathlib

import numpy as np
import pytest

import sampler_py as sp

REPO = pathlib.Path(__file__).resolve().parents[2]
# The repository's own copy, conformance/golden (SAMPLER_GOLDEN_DIR overrides).
GOLDEN_DIR = pathlib.Path(os.environ.get("SAMPLER_GOLDEN_DIR", REPO / "conformance" / "golden"))


def golden_paths():
    return [pathlib.Path(p) for p in sp.golden_files(str(GOLDEN_DIR))]


def num(x):
    """A case float: null = -inf, "nan" / "inf" / "-inf" strings (CONFORMANCE.md)."""
    if x is None:
        return -math.inf
    if isinstance(x, str):
        return {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "infinity": math.inf, "+infinity": math.inf,
                "-inf": -math.inf, "-infinity": -math.inf}[x.lower()]
    return float(x)


def masks_of(m):
    """Rectangular masks as a uint32 array (the DLPack path), ragged ones as lists."""
    if m is None:
        return None
    if len(m) > 0 and len({len(r) for r in m}) == 1:
        return np.array(m, dtype=np.uint32).reshape(len(m), len(m[0]))
    return [list(r) for r in m]


def build_request(r):
    """A conformance-case request (CONFORMANCE.md) as a sampler_py.Request."""
    extra = {k: r[k] for k in ("filter_order", "logprobs_mode") if k in r}
    if "min_p" in r:
        extra["min_p"] = num(r["min_p"])
    params = sp.SamplingParams(temperature=num(r["temperature"]), top_p=num(r["top_p"]), top_k=r["top_k"],
                               top_logprobs=r["top_logprobs"], seq_seed=r["seq_seed"], **extra)
    masks = masks_of(r.get("masks"))
    golden = r.get("golden")
    kind = r["kind"]
    if kind == "sample":
        if r["phase"] == "prefill":
            return sp.Request.prefill(params, r["seqlen_k"], golden=golden, masks=masks)
        return sp.Request.decode(params, r["seqlen_k"], r["seqlen_q"], golden=golden, masks=masks)
    if kind == "verify":
        dists = [sp.DraftDist(np.array(d["ids"], dtype=np.int32), np.array([num(x) for x in d["logprobs"]], dtype=np.float32))
                 for d in r["draft_dists"]]
        return sp.Request.decode(params, r["seqlen_k"], r["seqlen_q"], np.array(r["drafts"], dtype=np.int64), dists,
                                 golden=golden, masks=masks)
    if kind == "tree":
        dists = None
        if "draft_dists" in r:
            dists = [sp.DraftDist(np.array(d["ids"], dtype=np.int32), np.array([num(x) for x in d["logprobs"]], dtype=np.float32))
                     for d in r["draft_dists"]]
        tree = sp.DraftTree(r["tree_parent"], r["tree_token"], dists, r.get("without_replacement", False))
        return sp.Request.tree(params, r["seqlen_k"], tree, golden=golden, masks=masks)
    if kind == "draft":
        return sp.Request.draft(params, r["seqlen_k"], r["seqlen_q"], r["last_valid_offset"], r["rows"], masks=masks)
    assert kind == "prompt_logprobs", kind
    return sp.Request.prompt_logprobs(params, r["targets"], masks=masks)


def case_logits(case):
    """The case's logits as a float32 `[R, V]` array."""
    v = case["vocab_size"]
    return np.array([[num(x) for x in row] for row in case["logits"]], dtype=np.float32).reshape(-1, v)


def run_case_python(case, logits_dtype=np.float32, backend="cpu", convert=None):
    """Runs a case through the Python API and returns (StepOutput, document).
    `convert` turns the float32 logits into what is passed (e.g. a torch tensor)."""
    sampler = sp.Sampler(case["vocab_size"], force_topk=case.get("force_topk", 0), nextn=case.get("nextn", 5), backend=backend)
    logits = case_logits(case)
    if logits_dtype != np.float32:
        logits = logits.astype(logits_dtype)
    if convert is not None:
        logits = convert(logits)
    reqs = [build_request(r) for r in case["requests"]]
    # `"input": "probs"` (CONFORMANCE.md): the rows are probabilities (SAMPLER.md section 12).
    out = sampler.sample_probs(logits, reqs) if case.get("input", "logits") == "probs" else sampler.sample(logits, reqs)
    return out, document(out)


def fval(x):
    x = float(x)
    if x == -math.inf:
        return None
    if math.isnan(x):
        return "nan"
    if x == math.inf:
        return "inf"
    return x


def _np(x):
    """numpy view of an output array (torch tensors are moved to the host)."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return x


def document(out):
    """The CONFORMANCE.md result document built from the output arrays."""
    offs = _np(out.row_offsets).tolist()
    tokens, lps, ssp = _np(out.tokens), _np(out.logprobs), _np(out.sum_smaller_probs)
    top_ids, top_lps, accepted = _np(out.top_ids), _np(out.top_logprobs), _np(out.accepted)
    rows = []
    for q in range(len(out.errors)):
        for i in range(offs[q], offs[q + 1]):
            top = [] if out.errors[q] is not None else [[int(a), fval(b)] for a, b in zip(top_ids[i], top_lps[i])]
            rows.append({"token": int(tokens[i]), "logprob": fval(lps[i]), "top_logprobs": top,
                         "sum_smaller_probs": fval(ssp[i])})
    reqs = [{"status": "ok" if e is None else "error: " + e, "accepted": int(accepted[q]),
             "emitted": [int(t) for t in _np(out.emitted[q])], "prompt_logprobs": [fval(x) for x in _np(out.prompt_logprobs[q])]}
            for q, e in enumerate(out.errors)]
    # Tree requests that did not fail: the accepted path (section 11.9).
    for q, path in enumerate(out.paths):
        if path is not None:
            reqs[q]["path"] = [int(n) for n in _np(path)]
    return {"rows": rows, "requests": reqs}


def f32_bits(x):
    return int(np.array(x, dtype=np.float32).view(np.uint32))


def canon(v):
    """Floats -> their f32 bit pattern, null -> -inf's: bitwise comparison of documents."""
    if isinstance(v, dict):
        return {k: canon(x) for k, x in v.items()}
    if isinstance(v, list):
        return [canon(x) for x in v]
    if v is None:
        return ("f32", f32_bits(-math.inf))
    if isinstance(v, float):
        return ("f32", f32_bits(v))
    return v


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
