"""H200 round (scripts/gpu/round.sh python): skipped without torch + a CUDA device.

- The golden cases through the CUDA backend from Python with host numpy
  logits equal the Rust CPU runner bitwise.
- The golden cases through torch CUDA tensors (float32, bfloat16, float16)
  equal the CPU on the same (dtype-rounded) values bitwise; the outputs are
  torch tensors on the device.
- Zero copy, checked by data pointers (torch path and the generic DLPack
  path) and by writing the logits in place between calls.
- The caller's stream: the sampler waits for the caller's work on it, and
  the caller's later work sees the outputs.
- CUDA-graph capture of a Python call (`torch.cuda.graph`, global capture
  mode: any host sync or forbidden call fails the capture); a replay repeats
  the captured step even after other eager steps.
"""

import json

import numpy as np
import pytest

import sampler_py as sp
from conftest import build_request, canon, case_logits, fval, golden_paths, run_case_python

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

PATHS = golden_paths()
NOT_TREE = [p for p in PATHS if '"tree"' not in p.read_text()]
# Probability cases (SAMPLER.md section 12) are computed on the host: not CUDA logits.
LOGIT_CASES = [p for p in PATHS if json.loads(p.read_text()).get("input", "logits") == "logits"]


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_golden_cuda_backend_from_python(path):
    text = path.read_text()
    rust_cpu = json.loads(sp.run_case_json(text, "cpu"))
    _, doc = run_case_python(json.loads(text), backend="cuda")
    assert canon(doc) == canon(rust_cpu)


def host_doc(out, case):
    """The comparable part of a host StepOutput: rows and outputs of ok requests."""
    offs = out.row_offsets.tolist()
    prompt = lambda q: [fval(x) for x in np.asarray(out.prompt_logprobs[q])]
    paths = [None if p is None else np.asarray(p).tolist() for p in out.paths]
    return _doc(offs, [e is None for e in out.errors], np.asarray(out.tokens), np.asarray(out.logprobs),
                np.asarray(out.top_ids), np.asarray(out.top_logprobs), np.asarray(out.sum_smaller_probs),
                np.asarray(out.accepted), case, prompt, paths)


def device_doc(out, case):
    """The same from a CudaStepOutput (torch CUDA tensors, read back once)."""
    c = lambda t: t.cpu().numpy()
    offs, lps = out.row_offsets, c(out.logprobs)
    # As sampler_host's `assemble`: prompt logprobs are the logprobs of the rows with a target.
    prompt = lambda q: [fval(lps[offs[q] + j]) for j, t in enumerate(case["requests"][q]["targets"]) if t >= 0]
    acc, ok = c(out.accepted), (c(out.status) == 0).tolist()
    paths = []
    for q, p in enumerate(out.paths):
        if p is None:
            paths.append(None)
            continue
        p = c(p).tolist()
        n = int(acc[q]) + 1 if ok[q] else 0
        assert all(x == -1 for x in p[n:]), p  # the rows past the path hold -1
        paths.append(p[:n] if ok[q] else None)
    return _doc(offs, ok, c(out.tokens), lps, c(out.top_ids),
                c(out.top_logprobs), c(out.sum_smaller_probs), acc, case, prompt, paths)


def _doc(offs, ok, tokens, lps, top_ids, top_lps, ssp, accepted, case, prompt_of, paths):
    # As sampler_host's `assemble`: a row without a token has logprob -inf and sum_smaller_probs 0.
    rows, reqs = [], []
    for q, r in enumerate(case["requests"]):
        if not ok[q]:
            reqs.append({"ok": False})
            continue
        emitted = []
        for i in range(offs[q], offs[q + 1]):
            t = int(tokens[i])
            rows.append({"token": t, "logprob": fval(lps[i]) if t >= 0 else None, "sum_smaller_probs": fval(ssp[i]) if t >= 0 else 0.0,
                         "top": [[int(a), fval(b)] for a, b in zip(top_ids[i], top_lps[i])]})
            if t >= 0:
                emitted.append(t)
        prompt = prompt_of(q) if r["kind"] == "prompt_logprobs" else []
        reqs.append({"ok": True, "accepted": int(accepted[q]), "emitted": emitted, "prompt_logprobs": prompt,
                     "path": paths[q]})
    return {"rows": rows, "requests": reqs}


def _sampler(case):
    return sp.Sampler(case["vocab_size"], force_topk=case.get("force_topk", 0), nextn=case.get("nextn", 5), backend="cuda")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_golden_torch_cuda_tensors(dtype):
    tdt = getattr(torch, dtype)
    # Tree requests too: their paths come back on the device (CudaStepOutput.paths).
    assert len(LOGIT_CASES) >= 80 and len(PATHS) > len(NOT_TREE)
    for path in LOGIT_CASES:
        case = json.loads(path.read_text())
        x = torch.from_numpy(case_logits(case)).to(tdt)
        # Reference: the CPU on the dtype-rounded values widened to float32.
        ref_case = dict(case, logits=x.float().numpy().tolist())
        want, _ = run_case_python(ref_case)
        reqs = [build_request(r) for r in case["requests"]]
        xd = x.cuda()
        out = _sampler(case).sample(xd, reqs)
        assert isinstance(out, sp.CudaStepOutput)
        assert out.tokens.is_cuda and out.tokens.device == xd.device and out.tokens.dtype == torch.int32
        assert canon(device_doc(out, case)) == canon(host_doc(want, case)), path.name
        # Host-rejected requests have status -1 and a `check` text; the CPU agrees on which.
        st = out.status.cpu().tolist()
        s = _sampler(case)
        for q, r in enumerate(reqs):
            assert (st[q] == -1) == (s.check(r) is not None), (path.name, q)
            assert (st[q] != 0) == (want.errors[q] is not None), (path.name, q)


def test_zero_copy_cuda_by_data_pointer():
    x = torch.randn(6, 1024, device="cuda")
    assert sp._native._dlpack_data_ptr(x) == x.data_ptr()
    view = x[2:]  # a contiguous view at an offset
    assert sp._native._dlpack_data_ptr(view) == view.data_ptr() == x.data_ptr() + 2 * 1024 * 4
    h = x.to(torch.bfloat16)
    assert sp._native._dlpack_data_ptr(h) == h.data_ptr()

    class Generic:  # any DLPack kDLCUDA producer (no torch fast path)
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None, max_version=None):
            return self.t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    assert sp._native._dlpack_data_ptr(Generic(x)) == x.data_ptr()
    # The sampler reads the caller's memory itself: a write in place changes the next step.
    v = 1024
    s = sp.Sampler(v, backend="cuda")
    reqs = [sp.Request.prefill(sp.SamplingParams(temperature=0.0, seq_seed=i), 3) for i in range(4)]
    logits = torch.zeros(4, v, device="cuda")
    logits[:, 7] = 50.0
    assert s.sample(logits, reqs).tokens.tolist() == [7] * 4
    logits[:, 7] = 0.0
    logits[:, 901] = 50.0
    assert s.sample(logits, reqs).tokens.tolist() == [901] * 4
    g = s.sample(Generic(logits), reqs)  # the generic path gives the same
    torch.cuda.synchronize()
    assert g.tokens.tolist() == [901] * 4


def test_outputs_are_one_device_buffer_and_checked_inputs():
    v = 4096
    s = sp.Sampler(v, force_topk=1024, backend="cuda")
    x = torch.randn(3, v, device="cuda") * 3
    reqs = [sp.Request.prefill(sp.SamplingParams(top_k=40, top_logprobs=4, seq_seed=i), 9) for i in range(3)]
    out = s.sample(x, reqs)
    assert out.buffer.dtype == torch.uint8 and out.buffer.is_cuda
    lo, hi = out.buffer.data_ptr(), out.buffer.data_ptr() + out.buffer.numel()
    for t in (out.tokens, out.logprobs, out.top_ids, out.top_logprobs, out.sum_smaller_probs, out.accepted, out.status):
        assert t.is_cuda and lo <= t.data_ptr() < hi
    assert out.top_ids.shape == (3, 4) and out.top_logprobs.dtype == torch.float32
    assert out.ok.tolist() == [True] * 3 and out.row_offsets == [0, 1, 2, 3]
    # `out=`: the same buffer written again, no allocation.
    want = s.sample(x * 0.5, reqs).tokens.clone()
    again = s.sample(x * 0.5, reqs, out=out)
    assert again is out and again.buffer.data_ptr() == lo and torch.equal(out.tokens, want)
    with pytest.raises(ValueError, match="out: a CudaStepOutput of R = 3"):
        s.sample(x[:2], reqs[:2], out=out)
    # Host logits never write `out`: an error, not an `out` silently left as it was.
    with pytest.raises(ValueError, match="out: a CudaStepOutput is written only by a step on CUDA logits"):
        s.sample(x.cpu(), reqs, out=out)
    with pytest.raises(ValueError, match="logits: expected a row-major contiguous array"):
        s.sample(torch.randn(v, 3, device="cuda").t(), reqs)
    with pytest.raises(TypeError, match="logits: expected float32, bfloat16 or float16 logits, got torch.int32"):
        s.sample(torch.zeros(3, v, dtype=torch.int32, device="cuda"), reqs)
    with pytest.raises(ValueError, match=r"logits: expected shape \[R, vocab_size = 4096\]"):
        s.sample(torch.randn(3, v + 1, device="cuda"), reqs)
    with pytest.raises(ValueError, match="logits: a CUDA tensor needs a sampler on the CUDA backend"):
        sp.Sampler(v, backend="cpu").sample(x, reqs)
    # A bad request is a status, on the device too.
    bad = s.sample(x, [reqs[0], sp.Request.prefill(sp.SamplingParams(top_p=1.5), 9), reqs[2]])
    assert bad.status.tolist()[1] == -1 and bad.ok.tolist() == [True, False, True]
    assert s.check(sp.Request.prefill(sp.SamplingParams(top_p=1.5), 9)) == "top_p must be in (0, 1], got 1.5"


def test_functional_and_verify_on_cuda_tensors_equal_cpu():
    r, v = 16, 129280
    a = (np.random.default_rng(5).standard_normal((r, v)) * 3).astype(np.float32)
    x = torch.from_numpy(a).cuda()
    kw = dict(temperature=0.7, seed=np.arange(r, dtype=np.uint64), positions=41, force_topk=1024)
    t = sp.top_k_top_p_sampling_from_logits(x, 50, 0.9, **kw)
    h = sp.top_k_top_p_sampling_from_logits(a, 50, 0.9, backend="cpu", **kw)
    assert t.is_cuda and t.dtype == torch.int32 and t.cpu().numpy().tolist() == h.tolist()
    # Per-row parameters as CUDA tensors are read on the host (FlashInfer's convention).
    t2 = sp.top_k_top_p_sampling_from_logits(x, torch.full((r,), 50, device="cuda"), torch.full((r,), 0.9, device="cuda"), **kw)
    assert t2.cpu().numpy().tolist() == h.tolist()
    o = sp.top_k_top_p_sampling_from_logits(x, 50, 0.9, return_logprobs=True, top_logprobs=3, **kw)
    ho = sp.top_k_top_p_sampling_from_logits(a, 50, 0.9, return_logprobs=True, top_logprobs=3, backend="cpu", **kw)
    assert np.array_equal(o.top_logprobs.cpu().numpy().view(np.uint32), ho.top_logprobs.view(np.uint32))
    # verify: 4 requests x (3 drafts + 1) rows.
    b, m = 4, 4
    ids = np.random.default_rng(6).integers(0, v, (b, m - 1))
    dl = np.full((b, m - 1, 2), -np.inf, np.float32)
    dl[..., 0] = -0.1
    di = np.zeros((b, m - 1, 2), np.int64)
    di[..., 0] = ids
    di[..., 1] = (ids + 1) % v
    args = dict(draft_dist_ids=di, temperature=0.7, seed=np.arange(b, dtype=np.uint64), positions=77, force_topk=1024)
    dv = sp.verify(x[: b * m], ids, dl, 50, 0.9, **args)
    hv = sp.verify(a[: b * m], ids, dl, 50, 0.9, backend="cpu", **args)
    assert dv.accepted.cpu().tolist() == hv.accepted.tolist()
    assert dv.tokens.cpu().numpy().tolist() == hv.tokens.tolist()


def test_caller_stream_ordering():
    r, v = 8, 32768
    s = sp.Sampler(v, force_topk=1024, backend="cuda")
    reqs = [sp.Request.prefill(sp.SamplingParams(temperature=0.8, top_k=100, seq_seed=i), 5) for i in range(r)]
    y = torch.randn(r, v, device="cuda") * 4
    ref = s.sample(y, reqs).tokens.cpu()
    x = torch.zeros(r, v, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # the logits are written late on the caller's stream...
        x.copy_(y)
        out = s.sample(x, reqs)  # ...and the sampler must wait for them
        got = out.tokens.clone()  # the caller's next work must see the outputs
    torch.cuda.synchronize()
    assert torch.equal(got.cpu(), ref)
    # The same with the stream passed explicitly from another current stream.
    x.zero_()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        x.copy_(y)
    out2 = s.sample(x, reqs, stream=side)
    with torch.cuda.stream(side):
        got2 = out2.tokens.clone()
    torch.cuda.synchronize()
    assert torch.equal(got2.cpu(), ref)


def test_cuda_graph_capture_of_a_python_call():
    v, r = 129280, 64
    x = torch.randn(r, v, device="cuda") * 3
    x2 = torch.randn(r, v, device="cuda") * 3
    s = sp.Sampler(v, force_topk=1024, backend="cuda")
    reqs_a = [sp.Request.prefill(sp.SamplingParams(temperature=0.7, top_p=0.9, top_k=50, top_logprobs=2, seq_seed=i), 41) for i in range(r)]
    reqs_b = [sp.Request.prefill(sp.SamplingParams(temperature=0.7, top_p=0.9, top_k=50, top_logprobs=2, seq_seed=1000 + i), 41) for i in range(r)]
    fkw = dict(temperature=0.7, seed=np.arange(r, dtype=np.uint64), positions=41, force_topk=1024)
    s.sample(x, reqs_a)  # warm-up: buffers sized, kernels loaded, capture pool reserved
    sp.top_k_top_p_sampling_from_logits(x, 50, 0.9, **fkw)  # (the functional API's own sampler)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    # Global capture mode (the default): a host sync or an allocation of ours would fail it.
    with torch.cuda.graph(g):
        out = s.sample(x, reqs_a)
        tok = sp.top_k_top_p_sampling_from_logits(x, 50, 0.9, **fkw)
    eager_a = s.sample(x, reqs_a).tokens.clone()
    eager_b = s.sample(x, reqs_b).tokens.clone()  # another step's metadata since the capture
    assert not torch.equal(eager_a, eager_b)
    out.tokens.fill_(-7)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.tokens, eager_a), "a replay repeats the captured step"
    assert out.top_ids.shape == (r, 2)
    assert torch.equal(tok, eager_a)  # same seeds and positions through the functional API
    # New logits through the captured (static) input.
    x.copy_(x2)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.tokens, s.sample(x2, reqs_a).tokens)
    # A second capture of another shape; both graphs replay their own step.
    s.sample(x[:16], reqs_a[:16])
    torch.cuda.synchronize()
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2):
        out16 = s.sample(x[:16], reqs_b[:16])
    g.replay()
    g2.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.tokens, s.sample(x, reqs_a).tokens)
    assert torch.equal(out16.tokens, s.sample(x[:16], reqs_b[:16]).tokens)


def test_readme_python_snippets_run_on_the_gpu():
    import re

    from conftest import REPO

    section = (REPO / "README.md").read_text().split("## From Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    env = {}
    for code in blocks:  # the second continues the first
        exec(compile(code, "README.md", "exec"), env)
    assert env["tokens"].is_cuda and env["out"].tokens.is_cuda


# Last: a failed capture must not disturb the tests before it.
def test_capture_without_warm_up_is_an_error_not_a_broken_graph():
    v = 8192
    s = sp.Sampler(v, backend="cuda")
    x = torch.randn(4, v, device="cuda")
    reqs = [sp.Request.prefill(sp.SamplingParams(seq_seed=i), 1) for i in range(4)]
    g = torch.cuda.CUDAGraph()
    with pytest.raises(Exception):
        with torch.cuda.graph(g):
            s.sample(x, reqs)


def test_output_buffer_reused_only_when_nothing_refers_to_it():
    v = 4096
    s = sp.Sampler(v, force_topk=1024, backend="cuda", reuse_outputs=True)
    x = torch.randn(4, v, device="cuda") * 3
    reqs = lambda seed: [sp.Request.prefill(sp.SamplingParams(top_k=40, top_logprobs=4, seq_seed=seed + i), 9) for i in range(4)]
    ref = [s.sample(x, reqs(k), out=None) for k in (0, 100, 200)]
    want = [o.tokens.clone() for o in ref]
    del ref
    # A dropped result: its buffer is written by the next step of the same size.
    a = s.sample(x, reqs(0))
    pa = a.buffer.data_ptr()
    del a
    b = s.sample(x, reqs(100))
    assert b.buffer.data_ptr() == pa and torch.equal(b.tokens, want[1])
    # A held result, or only a view of it, is never overwritten.
    tok_b = b.tokens
    del b
    c = s.sample(x, reqs(200))
    assert c.tokens.data_ptr() != tok_b.data_ptr()
    assert torch.equal(tok_b, want[1]) and torch.equal(c.tokens, want[2])
    d = s.sample(x, reqs(0))
    assert torch.equal(tok_b, want[1]) and torch.equal(c.tokens, want[2]) and torch.equal(d.tokens, want[0])
    assert len({t.data_ptr() for t in (tok_b, c.tokens, d.tokens)}) == 3
    # Once the view is gone, its buffer comes back.
    pb = tok_b.data_ptr()
    del tok_b, c, d
    ptrs = {s.sample(x, reqs(0)).tokens.data_ptr() for _ in range(3)}
    assert pb in ptrs or len(ptrs) == 1
    # The functional call: tokens it returned and the caller holds are never overwritten.
    t1 = sp.top_k_top_p_sampling_from_logits(x, 40, None, seed=[0, 1, 2, 3], positions=9, force_topk=1024)
    k1 = t1.clone()
    t2 = sp.top_k_top_p_sampling_from_logits(x, 40, None, seed=[9, 8, 7, 6], positions=9, force_topk=1024)
    assert t1.data_ptr() != t2.data_ptr() and torch.equal(t1, k1)
    del t1
    t3 = sp.top_k_top_p_sampling_from_logits(x, 40, None, seed=[0, 1, 2, 3], positions=9, force_topk=1024)
    assert torch.equal(t3, k1) and t3.data_ptr() != t2.data_ptr()
    # Off: every step has a buffer of its own while results are held, as before.
    s2 = sp.Sampler(v, force_topk=1024, backend="cuda", reuse_outputs=False)
    assert torch.equal(s2.sample(x, reqs(0)).tokens, want[0])


def test_fresh_outputs_are_slab_ranges_never_written_again():
    # Fresh results (no out=, no pool) are ranges of a shared slab: each one held keeps its
    # values while later steps fill the rest of the slab and the next ones (R = 64, k = 8:
    # 12 results a slab, so 40 cross three slabs).
    v, r = 4096, 64
    s = sp.Sampler(v, force_topk=1024, backend="cuda")
    x = torch.randn(r, v, device="cuda") * 3
    reqs = lambda seed: [sp.Request.prefill(sp.SamplingParams(top_k=40, top_logprobs=8, seq_seed=seed + i), 9) for i in range(r)]
    host = sp.Sampler(v, force_topk=1024, backend="cpu")
    held = [s.sample(x, reqs(100 * k)) for k in range(40)]
    xc = x.cpu().numpy()
    for k, o in enumerate(held):
        ref = host.sample(xc, reqs(100 * k))
        assert o.tokens.tolist() == ref.tokens.tolist() and o.top_ids.tolist() == ref.top_ids.tolist()
        assert o.tokens.shape == (r,) and o.tokens.dtype == torch.int32 and o.tokens.is_contiguous()
        assert o.top_logprobs.shape == (r, 8) and o.top_logprobs.dtype == torch.float32
        assert o.tokens.device == x.device and o.buffer.dtype == torch.uint8
        lo, hi = o.buffer.data_ptr(), o.buffer.data_ptr() + o.buffer.numel()
        for t in (o.tokens, o.logprobs, o.top_ids, o.top_logprobs, o.sum_smaller_probs, o.accepted, o.status):
            assert lo <= t.data_ptr() and t.data_ptr() + t.numel() * 4 <= hi
    spans = sorted((o.buffer.data_ptr(), o.buffer.data_ptr() + o.buffer.numel()) for o in held)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "two results share bytes"
    assert len({o.buffer.numel() for o in held}) == 1
    assert held[1].buffer.untyped_storage().nbytes() > held[1].buffer.numel()  # a slab's range
    if hasattr(sp._native, "_bench_slabs"):  # the bench wheel: slabs off, a buffer of its own, same values
        sp._native._bench_slabs(False)
        try:
            own = s.sample(x, reqs(0))
            assert own.buffer.untyped_storage().nbytes() == own.buffer.numel() == held[0].buffer.numel()
            assert torch.equal(own.tokens, held[0].tokens) and torch.equal(own.top_logprobs, held[0].top_logprobs)
        finally:
            sp._native._bench_slabs(True)
    # The functional call's tokens: held ones keep their values, each its own [R] int32 range.
    seeds = lambda k: list(range(k, k + r))
    toks = [sp.top_k_top_p_sampling_from_logits(x, 40, None, seed=seeds(k), positions=9, force_topk=1024) for k in range(300)]
    for k in (0, 1, 150, 299):
        assert torch.equal(toks[k], sp.top_k_top_p_sampling_from_logits(x, 40, None, seed=seeds(k), positions=9, force_topk=1024))
    assert all(t.shape == (r,) and t.dtype == torch.int32 and t.is_contiguous() for t in toks)
    assert len({t.data_ptr() for t in toks}) == len(toks)
    # A view resized past the slab moves its storage: later steps must not write the old memory.
    o = s.sample(x, reqs(0))
    keep = o.tokens.clone()
    try:
        o.buffer.resize_(1 << 22)
    except RuntimeError:
        return  # this torch does not resize a view's storage: nothing can move it
    after = [s.sample(x, reqs(100 * k)) for k in range(30)]
    assert torch.equal(o.tokens, keep)
    assert all(torch.equal(a.tokens, h.tokens) for a, h in zip(after, held))


def test_tree_paths_through_torch_cuda_tensors():
    # CudaStepOutput.paths: each tree request's rows of the device path buffer, equal to the
    # host's path then -1; a failed tree request's rows are all -1, also when no tree request
    # of the step passed the host checks (no tree walk ran); other requests give None.
    v = 64
    rng = np.random.default_rng(5)
    good = sp.DraftTree([-1, 0, 0, 1], [5, 6, 7])
    bad = sp.DraftTree([-1, 2, 0, 1], [5, 6, 7])  # parent[1] = 2 > 1: fails its own request
    p = sp.SamplingParams(seq_seed=3)
    for reqs in ([sp.Request.prefill(p, 4), sp.Request.tree(p, 10, good), sp.Request.tree(p, 10, bad)],
                 [sp.Request.prefill(p, 4), sp.Request.tree(p, 10, bad)]):
        r = sum(q.rows for q in reqs)
        x = (rng.standard_normal((r, v)) * 3).astype(np.float32)
        want = sp.Sampler(v, nextn=8, backend="cpu").sample(x, reqs)
        out = sp.Sampler(v, nextn=8, backend="cuda").sample(torch.from_numpy(x).cuda(), reqs)
        assert out.paths[0] is None and want.paths[0] is None
        for q in range(1, len(reqs)):
            dev = out.paths[q]
            assert dev.is_cuda and dev.dtype == torch.int32
            dev = dev.cpu().tolist()
            if want.errors[q] is None:
                n = len(want.paths[q])
                assert dev[:n] == np.asarray(want.paths[q]).tolist() and all(t == -1 for t in dev[n:])
            else:
                assert want.paths[q] is None and dev == [-1] * reqs[q].rows
        assert torch.equal(out.tokens.cpu(), torch.from_numpy(np.asarray(want.tokens)))


def test_one_cuda_sampler_across_changing_requests():
    # The sampler keeps its last call's converted requests (issue 26): on CUDA logits too, each
    # call equals a new CPU sampler's, whether the list repeats, changes an entry, changes its
    # row counts or gains / loses a tree request (the paths segment follows), fresh or out=.
    v = 64
    rng = np.random.default_rng(9)
    p = sp.SamplingParams(seq_seed=3, top_logprobs=2)
    tree = sp.Request.tree(p, 10, sp.DraftTree([-1, 0, 0, 1], [5, 6, 7]))
    base = [sp.Request.prefill(sp.SamplingParams(seq_seed=i, top_logprobs=2), 4 + i) for i in range(5)]
    s = sp.Sampler(v, nextn=8, backend="cuda")
    lists = [base, base, base[:2] + [tree] + base[3:], base[:2] + [tree] + base[3:], base[::-1],
             base[:1] + [sp.Request.decode(p, 9, 2, [-1])] + base[2:], base]
    prev = None
    for reqs in lists:
        r = sum(q.rows for q in reqs)
        x = (rng.standard_normal((r, v)) * 3).astype(np.float32)
        want = sp.Sampler(v, nextn=8, backend="cpu").sample(x, reqs)
        xc = torch.from_numpy(x).cuda()
        outs = [s.sample(xc, reqs)]
        if prev is not None and prev.tokens.shape[0] == r and len(prev) == len(reqs):
            outs.append(s.sample(xc, reqs, out=prev))
        for out in outs:
            assert out.tokens.cpu().tolist() == np.asarray(want.tokens).tolist()
            assert out.row_offsets == want.row_offsets.tolist()
            assert [q is None for q in out.paths] == [q is None for q in want.paths]
        prev = outs[0]
