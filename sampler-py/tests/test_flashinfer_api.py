"""sampler_py.flashinfer against FlashInfer's documented API and behaviour (its sampling
docs: signatures, defaults, return conventions, dtypes), written by us. Every function runs
on numpy (CI), and on torch CPU / torch CUDA tensors when torch / a CUDA device is present
(the GPU round, scripts/gpu/round.sh python)."""

import inspect

import numpy as np
import pytest

import sampler_py as sp

fi = sp.flashinfer

try:
    import torch
except ImportError:  # CI: numpy only
    torch = None

KINDS = ["numpy"]
if torch is not None:
    KINDS.append("torch")
    if torch.cuda.is_available():
        KINDS.append("cuda")


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


def arr(x, kind, dtype=np.float32):
    a = np.ascontiguousarray(np.asarray(x, dtype=dtype))
    if kind == "numpy":
        return a
    t = torch.from_numpy(a)
    return t.cuda() if kind == "cuda" else t


def host(x):
    if torch is not None and isinstance(x, torch.Tensor):
        return x.cpu().numpy()
    return np.asarray(x)


def check_kind(x, kind):
    """The output is the caller's kind of array, on the input's device."""
    if kind == "numpy":
        assert isinstance(x, np.ndarray)
    else:
        assert isinstance(x, torch.Tensor) and x.is_cuda == (kind == "cuda")


def same_ln_pair():
    """a < b (adjacent float32) with float32 ln a == ln b, and c = 1 - a - b."""
    a = np.float32(0.1)
    while np.log(a) != np.log(np.nextafter(a, np.float32(1))):
        a = np.nextafter(a, np.float32(1))
    b = np.nextafter(a, np.float32(1))
    assert a < b and np.log(a) == np.log(b)
    return a, b, np.float32(1) - a - b


P3 = [0.5, 0.3, 0.2]  # SAMPLER.md 10.2's example


def test_signatures_and_defaults_are_flashinfers():
    sig = lambda f: list(inspect.signature(f).parameters)
    common = ["indices", "deterministic", "generator", "check_nan", "seed", "offset"]
    assert sig(fi.sampling_from_probs) == ["probs"] + common + ["return_valid"]
    assert sig(fi.sampling_from_logits) == ["logits"] + common
    assert sig(fi.top_p_sampling_from_probs) == ["probs", "top_p"] + common + ["return_valid"]
    assert sig(fi.top_k_sampling_from_probs) == ["probs", "top_k"] + common + ["return_valid"]
    assert sig(fi.min_p_sampling_from_probs) == ["probs", "min_p"] + common + ["return_valid"]
    assert sig(fi.top_k_top_p_sampling_from_probs) == ["probs", "top_k", "top_p", "indices", "filter_apply_order"] + common[1:] + ["return_valid"]
    assert sig(fi.top_k_top_p_sampling_from_logits) == ["logits", "top_k", "top_p", "indices", "filter_apply_order"] + common[1:]
    for f in (fi.top_k_top_p_sampling_from_probs, fi.top_k_top_p_sampling_from_logits):
        assert inspect.signature(f).parameters["filter_apply_order"].default == "top_k_first"
    assert sig(fi.softmax) == ["logits", "temperature", "enable_pdl"]
    assert sig(fi.top_p_renorm_probs)[:2] == ["probs", "top_p"] and sig(fi.top_k_renorm_probs) == ["probs", "top_k"]
    assert sig(fi.top_k_mask_logits) == ["logits", "top_k"]
    assert sig(fi.chain_speculative_sampling)[:5] == ["draft_probs", "draft_token_ids", "target_probs", "maybe_output_accepted_token_num", "maybe_output_emitted_draft_token_num"]
    assert sig(fi.top_k)[:3] == ["input", "k", "sorted"]
    assert set(fi.__all__) == {n for n in dir(fi) if not n.startswith("_") and inspect.isfunction(getattr(fi, n)) and getattr(fi, n).__module__ == fi.__name__}


def test_sampling_from_probs(kind):
    p = arr([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], kind)
    s = fi.sampling_from_probs(p, seed=1, offset=0)
    check_kind(s, kind)
    assert host(s).dtype == np.int32 and host(s).tolist() == [1, 2, 0]
    # Same seed and offset: same draws; another offset: other draws (a coin per row).
    coin = arr([[0.5, 0.5]] * 400, kind)
    a, b = host(fi.sampling_from_probs(coin, seed=7, offset=3)), host(fi.sampling_from_probs(coin, seed=7, offset=3))
    assert np.array_equal(a, b) and 120 < a.sum() < 280  # a scalar seed gives each row its own seed
    assert not np.array_equal(a, host(fi.sampling_from_probs(coin, seed=7, offset=4)))
    # Seeds and offsets as tensors (CUDA-graph style): [1] or one per row.
    assert np.array_equal(a, host(fi.sampling_from_probs(coin, seed=arr([7], kind, np.int64), offset=arr([3], kind, np.int64))))
    per = arr(7 + np.arange(400), kind, np.int64)
    assert np.array_equal(a, host(fi.sampling_from_probs(coin, seed=per, offset=3)))


def test_indices_draw_n_samples_from_one_row(kind):
    p = arr([[0.25, 0.75], [1.0, 0.0]], kind)
    idx = arr(np.zeros(2000, np.int64), kind, np.int64)
    s = fi.sampling_from_probs(p, indices=idx, seed=11)
    assert host(s).dtype == np.int64  # the dtype of indices, as FlashInfer
    frac = host(s).mean()
    assert 0.70 < frac < 0.80
    s = host(fi.sampling_from_probs(p, indices=arr([1, 0, 1], kind, np.int32), seed=1))
    assert s.dtype == np.int32 and s[0] == 0 and s[2] == 0


def test_return_valid_and_invalid_rows(kind):
    p = arr([[0.2, 0.8], [np.nan, 1.0], [0.0, 0.0], [-0.5, 1.0]], kind)
    s, valid = fi.sampling_from_probs(p, seed=1, return_valid=True)
    assert host(valid).tolist() == [True, False, False, False] and host(valid).dtype == np.bool_
    assert host(s).tolist()[1:] == [-1, -1, -1]  # ours: -1 for an invalid row
    with pytest.raises(ValueError, match="Input probs contains NaN"):
        fi.sampling_from_probs(p, check_nan=True)


def test_top_p_top_k_min_p_sampling_from_probs(kind):
    p = arr([P3] * 3000, kind)
    # top_p 0.6 keeps {0, 1} (0.5 does not exceed 0.6).
    s = host(fi.top_p_sampling_from_probs(p, 0.6, seed=3))
    assert set(s.tolist()) == {0, 1} and abs((s == 0).mean() - 0.625) < 0.04
    # top_k 1: always the largest.
    assert set(host(fi.top_k_sampling_from_probs(p, 1, seed=3)).tolist()) == {0}
    # min_p 0.5: removes p < 0.25, keeps {0, 1}.
    s = host(fi.min_p_sampling_from_probs(p, 0.5, seed=3))
    assert set(s.tolist()) == {0, 1}
    # Per-row parameters as tensors.
    k = arr(np.tile([1, 2, 3], 1000), kind, np.int32)
    s = host(fi.top_k_sampling_from_probs(p, k, seed=4))
    assert set(s[0::3].tolist()) == {0} and set(s[1::3].tolist()) == {0, 1} and set(s[2::3].tolist()) == {0, 1, 2}


def test_filter_apply_order_top_k_first_is_flashinfers(kind):
    # p = [0.5, 0.3, 0.2], top_k 2, top_p 0.6: FlashInfer's default (top-k, then top-p on the
    # renormalised [0.625, 0.375]) keeps {0}; "joint" cuts both on the same p and keeps {0, 1}.
    p = arr([P3] * 2000, kind)
    first = host(fi.top_k_top_p_sampling_from_probs(p, 2, 0.6, seed=5))
    assert set(first.tolist()) == {0}
    joint = host(fi.top_k_top_p_sampling_from_probs(p, 2, 0.6, filter_apply_order="joint", seed=5))
    assert set(joint.tolist()) == {0, 1}
    logits = arr(np.log(np.array([P3] * 2000, np.float32)), kind)
    first = fi.top_k_top_p_sampling_from_logits(logits, 2, 0.6, seed=5)
    check_kind(first, kind)
    assert host(first).dtype == np.int32 and set(host(first).tolist()) == {0}
    joint = host(fi.top_k_top_p_sampling_from_logits(logits, 2, 0.6, filter_apply_order="joint", seed=5))
    assert set(joint.tolist()) == {0, 1}
    with pytest.raises(ValueError, match="filter_apply_order"):
        fi.top_k_top_p_sampling_from_probs(p, 2, 0.6, filter_apply_order="top_p_first")


def test_sampling_from_logits(kind):
    x = np.array([[-np.inf, 0.0, -np.inf], np.log([0.25, 0.25, 0.5])] * 500, np.float32)
    s = fi.sampling_from_logits(arr(x, kind), seed=2)
    check_kind(s, kind)
    s = host(s)
    assert s.dtype == np.int32 and set(s[0::2].tolist()) == {1} and set(s[1::2].tolist()) == {0, 1, 2}
    assert abs((s[1::2] == 2).mean() - 0.5) < 0.08


def test_top_k_top_p_sampling_from_logits_indices_and_seeds(kind):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32) * 3
    logits = arr(x, kind)
    a = host(fi.top_k_top_p_sampling_from_logits(logits, 10, 0.9, seed=9, offset=2))
    assert np.array_equal(a, host(fi.top_k_top_p_sampling_from_logits(logits, 10, 0.9, seed=9, offset=2)))
    # The same draws as the top-level call with per-row seeds seed + i at position offset.
    want = sp.top_k_top_p_sampling_from_logits(x, 10, 0.9, filter_order="top_k_then_top_p", seed=9 + np.arange(4, dtype=np.uint64), positions=2, backend="cpu")
    assert np.array_equal(a, want)
    idx = arr([3, 3, 0], kind, np.int64)
    s = host(fi.top_k_top_p_sampling_from_logits(logits, 1, 1.0, indices=idx, seed=1))
    assert s.dtype == np.int64 and s.tolist() == [int(np.argmax(x[3]))] * 2 + [int(np.argmax(x[0]))]


def test_renorm_probs_keep_flashinfers_sets(kind):
    a, b, c = same_ln_pair()
    # Two probabilities sharing one float32 ln: top_k 2 keeps the two largest probabilities.
    got = host(fi.top_k_renorm_probs(arr([[a, b, c]], kind), 2))
    assert got[0, 0] == 0 and got[0, 1] > 0 and got[0, 2] > 0
    np.testing.assert_allclose(got[0, 1:], np.array([b, c]) / (b + c), rtol=1e-6)
    got = fi.top_p_renorm_probs(arr([[0.50, 0.25, 0.15, 0.06, 0.04]], kind), 0.8)
    check_kind(got, kind)
    np.testing.assert_allclose(host(got), [[0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0, 0]], atol=1e-6)
    # The top-level functions follow the same section 12.
    assert np.array_equal(sp.top_k_renorm_probs(np.array([[a, b, c]], np.float32), 2, backend="cpu") > 0, [[False, True, True]])


def test_probability_tie_row_in_every_probs_sampler():
    a, b, c = same_ln_pair()
    p = np.array([[a, b, c]] * 500, np.float32)
    for s in (fi.top_k_sampling_from_probs(p, 2, seed=1), fi.top_k_top_p_sampling_from_probs(p, 2, 1.0, seed=1)):
        assert 0 not in set(np.asarray(s).tolist())
    # min_p = 1 keeps only the largest probability (c), never the equal-ln pair.
    q = np.array([[a, b, np.float32(0.05)]] * 200, np.float32)
    assert set(fi.min_p_sampling_from_probs(q, 1.0, seed=2).tolist()) == {1}


def test_softmax(kind):
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, np.log(2.0)]], np.float32)
    got = fi.softmax(arr(x, kind), 2.0)
    check_kind(got, kind)
    want = np.exp(x / 2) / np.exp(x / 2).sum(1, keepdims=True)
    np.testing.assert_allclose(host(got), want, rtol=1e-5)
    np.testing.assert_allclose(host(fi.softmax(arr(x, kind))), np.exp(x) / np.exp(x).sum(1, keepdims=True), rtol=1e-5)
    per = host(fi.softmax(arr(x, kind), arr([1.0, 0.5], kind)))
    np.testing.assert_allclose(per[1], np.exp(x[1] / 0.5) / np.exp(x[1] / 0.5).sum(), rtol=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        fi.softmax(arr(x, kind), -1.0)


def test_top_k_mask_logits(kind):
    x = np.array([[1.0, 3.0, 3.0, 2.0], [4.0, -1.0, 0.0, 5.0]], np.float32)
    got = fi.top_k_mask_logits(arr(x, kind), 2)
    check_kind(got, kind)
    ninf = -np.inf
    assert host(got).tolist() == [[ninf, 3.0, 3.0, ninf], [4.0, ninf, ninf, 5.0]]
    assert host(got).dtype == np.float32


def test_top_k_values_and_indices(kind):
    x = np.array([[1.0, 3.0, 3.0, 2.0], [4.0, -1.0, 0.0, 5.0]], np.float32)
    vals, idx = fi.top_k(arr(x, kind), 3)
    check_kind(vals, kind)
    assert host(idx).dtype == np.int64 and host(vals).dtype == np.float32
    assert host(idx).tolist() == [[1, 2, 3], [3, 0, 2]]  # descending, ties by lower index
    assert host(vals).tolist() == [[3.0, 3.0, 2.0], [5.0, 4.0, 0.0]]
    vals, idx = fi.top_k(arr(x, kind), 4)
    assert host(idx).tolist()[1] == [3, 0, 2, 1]
    with pytest.raises(ValueError, match="k must be"):
        fi.top_k(arr(x, kind), 0)


def test_chain_speculative_sampling(kind):
    # FlashInfer's documented example: draft 2 is accepted (p = 0.6 >= q = 0.3), draft 1 is
    # rejected (p = 0), the residual max(p - q, 0) = [0.8, 0, 0, 0] gives 0, then -1 padding.
    dp = arr([[[0.1, 0.2, 0.3, 0.4], [0.2, 0.3, 0.4, 0.1]]], kind)
    di = arr([[2, 1]], kind, np.int32)
    tp = arr([[[0.0, 0.1, 0.6, 0.3], [1.0, 0.0, 0.0, 0.0], [0.7, 0.1, 0.1, 0.1]]], kind)
    out, acc, emitted = fi.chain_speculative_sampling(dp, di, tp, seed=1)
    check_kind(out, kind)
    assert host(out).tolist() == [[2, 0, -1]] and host(out).dtype == np.int32
    assert host(acc).tolist() == [1] and host(emitted).tolist() == [1]
    # The counts are added in place to given tensors.
    a0, e0 = arr([10], kind, np.int32), arr([20], kind, np.int32)
    _, a1, e1 = fi.chain_speculative_sampling(dp, di, tp, a0, e0, seed=1)
    assert host(a1).tolist() == [11] and host(e1).tolist() == [21]
    # q = p: every draft accepted, plus the bonus token.
    p = np.full((2, 4, 5), 0.2, np.float32)
    d = np.array([[1, 2, 3], [4, 0, 1]], np.int32)
    out, acc, emitted = fi.chain_speculative_sampling(arr(p[:, :3], kind), arr(d, kind, np.int32), arr(p, kind), seed=3)
    assert host(emitted).tolist() == [3, 3] and host(acc).tolist() == [3, 3]
    assert host(out)[:, :3].tolist() == d.tolist() and (host(out)[:, 3] >= 0).all()


def test_chain_acceptance_counts_each_draft_on_its_own():
    # Draft 0 always rejected (p = 0), drafts 1.. always accepted (p >= q): FlashInfer's
    # accepted count ignores the stop, the emitted count does not.
    v, d = 4, 3
    tp = np.full((1, d + 1, v), 0.25, np.float32)
    tp[0, 0] = [0.0, 0.5, 0.25, 0.25]
    dp = np.full((1, d, v), 0.25, np.float32)
    out, acc, emitted = fi.chain_speculative_sampling(dp, np.array([[0, 1, 2]], np.int32), tp, seed=4)
    assert emitted.tolist() == [0] and acc.tolist() == [2]
    assert out[0, 1:].tolist() == [-1, -1, -1] and out[0, 0] in (1, 2, 3)


def test_invalid_scalars_raise(kind):
    p = arr([P3] * 2, kind)
    logits = arr(np.log(np.array([P3] * 2, np.float32)), kind)
    for call, match in [
        (lambda: fi.top_k_sampling_from_probs(p, 0), "top_k"),
        (lambda: fi.top_p_sampling_from_probs(p, 0.0), "top_p"),
        (lambda: fi.min_p_sampling_from_probs(p, 1.5), "min_p"),
        (lambda: fi.top_k_top_p_sampling_from_logits(logits, 0, 0.9), "top_k"),
        (lambda: fi.top_k_top_p_sampling_from_logits(logits, 5, 0.0), "top_p"),
        (lambda: fi.top_k_renorm_probs(p, 0), "top_k"),
        (lambda: fi.top_p_renorm_probs(p, 0.0), "top_p"),
        (lambda: fi.top_k_mask_logits(logits, 0), "top_k"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()


def test_top_level_calls_raise_on_invalid_scalars_and_take_filter_order():
    x = np.log(np.array([P3] * 4, np.float32))
    f = sp.top_k_top_p_sampling_from_logits
    for kw, match in [(dict(top_k=0), "top_k"), (dict(top_p=0.0), "top_p"), (dict(temperature=-1.0), "temperature"),
                      (dict(temperature=float("inf")), "temperature"), (dict(min_p=2.0), "min_p")]:
        with pytest.raises(ValueError, match=match):
            f(x, seed=1, backend="cpu", **kw)
    with pytest.raises(ValueError, match="filter_order"):
        f(x, 2, 0.6, filter_order="top_k_first", backend="cpu")
    # A bad value inside a per-row array still fails only its row.
    assert f(x, [2, 0, 2, 2], 0.6, seed=1, backend="cpu").tolist()[1] == -1
    rows = np.repeat(x[:1], 500, 0)
    default = set(f(rows, 2, 0.6, seed=np.arange(500, dtype=np.uint64), backend="cpu").tolist())
    hf = set(f(rows, 2, 0.6, filter_order="top_k_then_top_p", seed=np.arange(500, dtype=np.uint64), backend="cpu").tolist())
    assert default == {0, 1} and hf == {0}
    # min_p on the top-level call.
    assert set(f(rows, min_p=0.5, seed=np.arange(500, dtype=np.uint64), backend="cpu").tolist()) == {0, 1}


def test_verify_takes_seven_drafts():
    # EAGLE-style 7 drafts: the cached sampler is built for them (it used to stop at nextn = 5).
    rng = np.random.default_rng(1)
    b, d, v = 3, 7, 32
    t = (rng.standard_normal((b, d + 1, v)) * 2).astype(np.float32)
    lp = t - np.log(np.exp(t).sum(-1, keepdims=True))
    drafts = lp[:, :d].argmax(-1).astype(np.int32)
    out = sp.verify(t, drafts, np.ascontiguousarray(lp[:, :d]), seed=[1, 2, 3], positions=[5, 6, 7], backend="cpu")
    assert out.errors == [None] * b
    assert out.accepted.tolist() == [7, 7, 7]  # q = p: every draft is accepted
    assert [len(e) for e in out.emitted] == [8, 8, 8]
    out = sp.verify(t, drafts, np.ascontiguousarray(lp[:, :d]), seed=1, nextn=9, backend="cpu")
    assert out.accepted.tolist() == [7, 7, 7]
    with pytest.raises(ValueError, match="nextn"):
        sp.verify(t, drafts, np.ascontiguousarray(lp[:, :d]), seed=1, nextn=5, backend="cpu")


def test_case_runner_reads_probability_rows():
    import json

    a, b, c = same_ln_pair()
    case = {"vocab_size": 3, "input": "probs", "logits": [[float(a), float(b), float(c)]],
            "requests": [{"kind": "sample", "phase": "prefill", "rows": 1, "seqlen_k": 4, "seq_seed": 7,
                          "temperature": 1.0, "top_p": 1.0, "top_k": 2, "top_logprobs": 3}]}
    doc = json.loads(sp.run_case_json(json.dumps(case)))
    assert [x[0] for x in doc["rows"][0]["top_logprobs"]] == [2, 1, 0]
    assert doc["rows"][0]["top_logprobs"][2][1] is None  # removed: -inf
    assert doc["rows"][0]["token"] in (1, 2)


def test_sampler_sample_probs_equals_the_case_runner():
    import json

    a, b, c = same_ln_pair()
    case = {"vocab_size": 3, "input": "probs", "logits": [[float(a), float(b), float(c)], [0.5, 0.25, 0.25], [0.0, 0.0, 0.0]],
            "requests": [{"kind": "sample", "phase": "prefill", "rows": 1, "seqlen_k": 4, "seq_seed": 7,
                          "temperature": 1.0, "top_p": 1.0, "top_k": 2, "top_logprobs": 3},
                         {"kind": "sample", "phase": "prefill", "rows": 1, "seqlen_k": 9, "seq_seed": 8,
                          "temperature": 1.0, "top_p": 0.6, "top_k": -1, "top_logprobs": 2, "min_p": 0.5},
                         {"kind": "sample", "phase": "prefill", "rows": 1, "seqlen_k": 9, "seq_seed": 8,
                          "temperature": 1.0, "top_p": 1.0, "top_k": -1, "top_logprobs": 0}]}
    from conftest import canon, run_case_python

    out, doc = run_case_python(case)
    assert canon(doc) == canon(json.loads(sp.run_case_json(json.dumps(case))))
    assert out.errors[:2] == [None, None] and "no allowed token" in out.errors[2]
    s = sp.Sampler(3, backend="cpu")
    # A temperature fails only its request (the rows take none, section 12).
    bad = s.sample_probs(np.array([[0.5, 0.5, 0.0]], np.float32), [sp.Request.prefill(sp.SamplingParams(temperature=0.5), 1)])
    assert "temperature" in bad.errors[0] and bad.tokens.tolist() == [-1]


def test_verify_default_sample_position_is_one():
    # A decode request's sample position is seqlen_k - seqlen_q + 1 >= 1: the default is 1
    # (position 0 would be seqlen_k < seqlen_q, an error status on every request), 0 raises.
    rng = np.random.default_rng(2)
    t = (rng.standard_normal((2, 3, 16)) * 2).astype(np.float32)
    lp = t - np.log(np.exp(t).sum(-1, keepdims=True))
    drafts = lp[:, :2].argmax(-1).astype(np.int32)
    out = sp.verify(t, drafts, np.ascontiguousarray(lp[:, :2]), seed=1, backend="cpu")
    assert out.errors == [None, None] and (out.tokens >= 0).sum() == 6
    same = sp.verify(t, drafts, np.ascontiguousarray(lp[:, :2]), seed=1, positions=1, backend="cpu")
    assert out.tokens.tolist() == same.tokens.tolist()
    with pytest.raises(ValueError, match="positions"):
        sp.verify(t, drafts, np.ascontiguousarray(lp[:, :2]), seed=1, positions=[3, 0], backend="cpu")
