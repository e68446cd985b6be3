"""The Python API on the CPU with numpy: imports, errors, statuses, GIL, helpers."""

import ctypes
import math
import pathlib
import re
import threading
import time

import numpy as np
import pytest

import sampler_py as sp
from conftest import REPO

V = 1000


def logits(rng, r, v=V):
    return rng.standard_normal((r, v)).astype(np.float32) * 3


def params(**kw):
    base = dict(temperature=0.7, top_p=0.9, top_k=50, top_logprobs=4, seq_seed=7)
    base.update(kw)
    return sp.SamplingParams(**base)


# ---------------------------------------------------------------- README


def test_readme_python_snippet_runs():
    text = (REPO / "README.md").read_text()
    section = text.split("## From Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})


# ---------------------------------------------------------------- DLPack in


def test_zero_copy_import(rng):
    a = logits(rng, 4)
    assert sp._native._dlpack_data_ptr(a) == a.ctypes.data
    # A row slice is still contiguous: the pointer moves by the byte offset, no copy.
    b = a[1:]
    assert sp._native._dlpack_data_ptr(b) == a.ctypes.data + V * 4
    # Read-only arrays come in through versioned DLPack (numpy >= 2.1), still without a copy.
    if tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 1):
        a.flags.writeable = False
        assert sp._native._dlpack_data_ptr(a) == a.ctypes.data
        assert sp.top_k_top_p_sampling_from_logits(a, 5, 0.9, seed=1, backend="cpu").shape == (4,)


def test_bad_logits_raise_naming_the_argument(rng):
    s = sp.Sampler(V, backend="cpu")
    reqs = [sp.Request.prefill(params(), 1)]
    a = logits(rng, 1)
    with pytest.raises(TypeError, match="logits.*__dlpack__.*list"):
        s.sample(a.tolist(), reqs)
    with pytest.raises(TypeError, match="logits: expected float32, bfloat16 or float16, got int32"):
        s.sample(a.astype(np.int32), reqs)
    with pytest.raises(TypeError, match="logits: expected float32, bfloat16 or float16, got float64"):
        s.sample(a.astype(np.float64), reqs)
    with pytest.raises(ValueError, match="logits: expected 2 dimensions, got 1"):
        s.sample(a[0], reqs)
    wide = logits(rng, 1, 2 * V)
    with pytest.raises(ValueError, match="logits: expected a row-major contiguous array"):
        s.sample(wide[:, ::2], reqs)
    # (numpy < 2.1 refuses to export the read-only broadcast view at all: also a ValueError.)
    with pytest.raises(ValueError, match=r"logits: (expected a row-major contiguous array, got shape \[2, 1000\] with strides \[0, 1\]|__dlpack__\(\) failed)"):
        s.sample(np.broadcast_to(a[0], (2, V)), reqs + reqs)
    with pytest.raises(ValueError, match=r"logits: expected shape \[R, vocab_size = 1000\], got \[1, 999\]"):
        s.sample(a[:, :999].copy(), reqs)
    # Rows that do not match the requests: the Rust BatchError text.
    with pytest.raises(ValueError, match=r"logits has 2000 values, expected rows \* vocab_size = 1 \* 1000"):
        s.sample(logits(rng, 2), reqs)
    with pytest.raises(TypeError, match=r"requests\[1\] must be a Request, got int"):
        s.sample(logits(rng, 2), [reqs[0], 3])


def test_bad_calls_raise():
    with pytest.raises(ValueError, match="vocab_size = 0 is out of range"):
        sp.Sampler(0, backend="cpu")
    with pytest.raises(ValueError, match="unknown backend `tpu`"):
        sp.Sampler(V, backend="tpu")
    with pytest.raises(ValueError, match="seq_seed must be in 0..=18446744073709551615, got -1"):
        sp.SamplingParams(seq_seed=-1)
    with pytest.raises(TypeError, match="top_k must be an int, got str"):
        sp.SamplingParams(top_k="50")
    with pytest.raises(TypeError, match="temperature must be a float, got str"):
        sp.SamplingParams(temperature="hot")
    with pytest.raises(TypeError, match="force_topk must be an int, got float"):
        sp.Sampler(V, force_topk=1.5, backend="cpu")
    with pytest.raises(ValueError, match="top_logprobs must be in 0..=4294967295, got -1"):
        sp.top_k_top_p_sampling_from_logits(np.zeros((3, 8), np.float32), 2, 0.5, top_logprobs=-1, backend="cpu")
    with pytest.raises(ValueError, match="top_logprobs must be in"):
        sp.SamplingParams(top_logprobs=-3)
    with pytest.raises(ValueError, match="ids and logprobs differ in length"):
        sp.DraftDist([1, 2], [0.0])
    with pytest.raises(ValueError, match=r"drafts\[0\] = 4294967296 is not a token id"):
        sp.Request.verify(params(), 10, [2**32], [sp.DraftDist([1], [0.0])])
    with pytest.raises(ValueError, match=r"top_p: expected a scalar or 3 values \(one per row\), got 2"):
        sp.top_k_top_p_sampling_from_logits(np.zeros((3, 8), np.float32), 2, [0.5, 0.5], backend="cpu")


def _fake_cuda(a, code=None, seen=None):
    """A DLPack producer claiming kDLCUDA device 0 for numpy array `a` (the
    capsule's device type patched; `code`: its dtype code patched too). The
    memory is host memory: only the checks before any device work can run.
    `seen` collects the `stream` values the consumer asked for."""

    class FakeCuda:
        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, stream=None, max_version=None):
            if seen is not None:
                seen.append(stream)
            cap = a.__dlpack__()
            get = ctypes.pythonapi.PyCapsule_GetPointer
            get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
            addr = get(cap, b"dltensor")
            # DLTensor: data (8), device {type i32, id i32}, ndim (4), dtype {code u8, bits u8, lanes u16}.
            ctypes.c_int32.from_address(addr + 8).value = 2
            if code is not None:
                ctypes.c_uint8.from_address(addr + 20).value = code
            return cap

    return FakeCuda()


def test_cuda_tensors_are_recognised_and_checked(rng):
    seen = []
    t = _fake_cuda(logits(rng, 2), seen=seen)
    assert sp.is_cuda_tensor(t)
    assert not sp.is_cuda_tensor(logits(rng, 2))
    # Imported without a copy (the pointer is the producer's), asked for on the legacy default stream.
    a = logits(rng, 2)
    assert sp._native._dlpack_data_ptr(_fake_cuda(a)) == a.ctypes.data
    reqs = [sp.Request.prefill(params(), 1), sp.Request.prefill(params(), 1)]
    with pytest.raises(ValueError, match="logits: a CUDA tensor needs a sampler on the CUDA backend"):
        sp.Sampler(V, backend="cpu").sample(t, reqs)
    assert seen == [1]
    # The caller's stream is passed to the producer (DLPack's stream handshake).
    sp_t = _fake_cuda(logits(rng, 2), seen=seen)
    with pytest.raises(ValueError, match="CUDA backend"):
        sp.Sampler(V, backend="cpu").sample(sp_t, reqs, stream=12345)
    assert seen[-1] == 12345
    with pytest.raises(ValueError, match="target_logits: a CUDA tensor needs|logits: a CUDA tensor needs"):
        sp.verify(_fake_cuda(logits(rng, 1)), np.zeros((1, 0), np.int32), np.zeros((1, 0, V), np.float32), backend="cpu")
    # Checks on the device tensor, naming the argument.
    with pytest.raises(TypeError, match="logits: expected float32, bfloat16 or float16 logits, got int32"):
        sp.Sampler(V, backend="cpu").sample(_fake_cuda(np.zeros((2, V), np.int32)), reqs)
    with pytest.raises(ValueError, match="logits: expected 2 dimensions, got 1"):
        sp.Sampler(V, backend="cpu").sample(_fake_cuda(np.zeros(V, np.float32)), reqs)
    with pytest.raises(ValueError, match="logits: expected a row-major contiguous array"):
        sp.Sampler(V, backend="cpu").sample(_fake_cuda(np.zeros((V, 2), np.float32).T), reqs)
    with pytest.raises(ValueError, match=r"logits: expected shape \[R, vocab_size = 1000\]"):
        sp.Sampler(V, backend="cpu").sample(_fake_cuda(np.zeros((2, V + 1), np.float32)), reqs)
    with pytest.raises(ValueError, match="stream: given, but logits is not a CUDA tensor"):
        sp.Sampler(V, backend="cpu").sample(logits(rng, 2), reqs, stream=7)
    with pytest.raises(TypeError, match="stream must be an int"):
        sp.Sampler(V, backend="cpu").sample(t, reqs, stream="s")
    # bfloat16 / float16 device logits pass the dtype check (the device step reads them).
    for code, dt in [(4, np.uint16), (2, np.float16)]:
        with pytest.raises(ValueError, match="CUDA backend"):
            sp.top_k_top_p_sampling_from_logits(_fake_cuda(np.zeros((2, V), dt), code=code), 5, 0.9, backend="cpu")


def _as_bfloat16(u16):
    """A DLPack producer of bfloat16: numpy's capsule of a uint16 array with the
    dtype code patched to kDLBfloat (numpy has no bfloat16)."""

    class Bf16:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, stream=None):
            cap = u16.__dlpack__()
            get = ctypes.pythonapi.PyCapsule_GetPointer
            get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
            addr = get(cap, b"dltensor")
            # DLTensor: data (8) + device (8) + ndim (4), then dtype {code u8, bits u8, lanes u16}.
            ctypes.c_uint8.from_address(addr + 20).value = 4
            return cap

    return Bf16()


def test_bf16_and_f16_logits_are_widened_exactly(rng):
    a = logits(rng, 3)
    bf = (a.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bfloat16
    widened = (bf.astype(np.uint32) << 16).view(np.float32)
    s = sp.Sampler(V, backend="cpu")
    reqs = [sp.Request.prefill(params(seq_seed=i), 5) for i in range(3)]
    want = s.sample(widened, reqs)
    got = s.sample(_as_bfloat16(bf), reqs)
    assert np.array_equal(got.tokens, want.tokens)
    assert np.array_equal(got.top_logprobs.view(np.uint32), want.top_logprobs.view(np.uint32))
    h = a.astype(np.float16)
    got16 = s.sample(h, reqs)
    want16 = s.sample(h.astype(np.float32), reqs)
    assert np.array_equal(got16.top_logprobs.view(np.uint32), want16.top_logprobs.view(np.uint32))


# ---------------------------------------------------------------- statuses, GIL


def test_bad_request_is_a_status_and_fails_only_itself(rng):
    s = sp.Sampler(V, backend="cpu")
    a = logits(rng, 3)
    a[2, 5] = np.nan
    good = sp.Request.prefill(params(), 9)
    out = s.sample(a, [good, sp.Request.prefill(params(top_p=1.5), 9), sp.Request.prefill(params(), 9)])
    assert out.errors == [None, "top_p must be in (0, 1], got 1.5", "invalid logits (NaN or +inf) in row 0 of the request"]
    assert out.ok.tolist() == [True, False, False]
    assert out.tokens[1] == -1 and out.tokens[2] == -1 and math.isinf(out.logprobs[1])
    assert (out.top_ids[1] == -1).all() and np.isneginf(out.top_logprobs[1]).all()
    # A wrong draft count (section 6) fails only its request; its rows stay its own.
    two = sp.Request.decode(params(), 60, 3, [1], [sp.DraftDist([1], [0.0])])
    out2 = s.sample(np.concatenate([a[:1], logits(rng, 3)]), [good, two])
    assert out2.errors[0] is None and out2.errors[1] is not None and "drafts" in out2.errors[1]
    assert out2.row_offsets.tolist() == [0, 1, 4] and (out2.tokens[1:] == -1).all()
    alone = s.sample(a[:1], [good])
    assert out.tokens[0] == alone.tokens[0]
    assert np.array_equal(out.top_logprobs[0].view(np.uint32), alone.top_logprobs[0].view(np.uint32))


def test_gil_is_released_during_a_step(rng):
    v = 129280
    s = sp.Sampler(v, backend="cpu")
    # Enough rows for a step of >= 50 ms on this machine (many cores make it fast).
    for r in (16, 64, 256):
        a = rng.standard_normal((r, v)).astype(np.float32)
        reqs = [sp.Request.prefill(params(), 41 + i) for i in range(r)]
        t = time.perf_counter()
        s.sample(a, reqs)
        if time.perf_counter() - t >= 0.05:
            break
    started, done = threading.Event(), threading.Event()
    box = {}

    def step():
        started.set()
        t = time.perf_counter()
        box["out"] = s.sample(a, reqs)
        box["secs"] = time.perf_counter() - t
        done.set()

    th = threading.Thread(target=step)
    th.start()
    started.wait()
    spins = 0
    while not done.is_set():
        spins += 1
    th.join()
    assert box["out"].ok.all()
    # With the GIL held for the whole step this loop would barely run. The step
    # only has to be long enough for 10,000 spins (~1 ms): a 16-core machine
    # ran the 256-row step in 11 ms.
    assert box["secs"] > 0.005, box["secs"]
    assert spins > 10000, (spins, box["secs"])


# ---------------------------------------------------------------- functional API


def test_functional_sampling_matches_sampler_requests(rng):
    a = logits(rng, 5)
    top_k = np.array([50, -1, 3, 10, 1], dtype=np.int64)
    top_p = np.array([0.9, 1.0, 0.5, 0.99, 0.3], dtype=np.float32)
    temp = [0.7, 1.0, 1e-6, 2.0, 0.5]
    seeds = np.array([1, 2, 3, 2**64 - 1, 5], dtype=np.uint64)
    pos = [0, 41, 7, 123456789, 3]
    toks = sp.top_k_top_p_sampling_from_logits(a, top_k, top_p, temperature=temp, seed=seeds, positions=pos, backend="cpu")
    assert toks.dtype == np.int32 and toks.shape == (5,)
    s = sp.Sampler(V, backend="cpu")
    reqs = [sp.Request.prefill(sp.SamplingParams(temperature=temp[i], top_p=float(top_p[i]), top_k=int(top_k[i]),
                                                 seq_seed=int(seeds[i])), pos[i]) for i in range(5)]
    assert np.array_equal(toks, s.sample(a, reqs).tokens)
    # Scalars broadcast; a bad per-row value gives -1 for that row only.
    t1 = sp.top_k_top_p_sampling_from_logits(a, 50, 0.9, temperature=0.7, seed=1, positions=0, backend="cpu")
    t2 = sp.top_k_top_p_sampling_from_logits(a, [50] * 5, [0.9] * 5, temperature=[0.7] * 5, seed=[1] * 5, backend="cpu")
    assert np.array_equal(t1, t2)
    out = sp.top_k_top_p_sampling_from_logits(a, [50, 0, 50, 50, 50], 0.9, seed=1, return_logprobs=True, top_logprobs=3, backend="cpu")
    assert out.tokens[1] == -1 and "top_k must be -1" in out.errors[1]
    assert out.top_ids.shape == (5, 3)


def test_functional_calls_in_a_row_each_match_their_own_requests(rng):
    # The functional call writes its rows' parameters into requests kept from the last call
    # (issue 26): calls of other sizes, parameters, filter orders and min-p, one after the
    # other, must each equal the same rows as Sampler requests made afresh.
    s = sp.Sampler(V, backend="cpu")
    for r, kw in ((6, dict(top_k=50, top_p=0.9, temperature=0.7, seed=1, positions=3)),
                  (2, dict(top_k=[1, 5], top_p=[0.5, 1.0], temperature=[0.5, 2.0], seed=[7, 8], positions=[9, 10])),
                  (9, dict(top_k=-1, top_p=0.95, min_p=0.05, filter_order="top_k_then_top_p", seed=np.arange(9, dtype=np.uint64))),
                  (6, dict(top_k=3, top_p=1.0, temperature=1.0, seed=2, positions=1)),
                  (1, dict(seed=4))):
        a = logits(rng, r)
        out = sp.top_k_top_p_sampling_from_logits(a, backend="cpu", return_logprobs=True, top_logprobs=2, **kw)
        row = lambda name, i, d: (lambda v: d if v is None else (v if np.ndim(v) == 0 else v[i]))(kw.get(name))
        reqs = [sp.Request.prefill(sp.SamplingParams(
            top_k=int(row("top_k", i, -1)), top_p=float(row("top_p", i, 1.0)), temperature=float(row("temperature", i, 1.0)),
            min_p=float(row("min_p", i, 0.0)), filter_order=kw.get("filter_order", "top_p_then_top_k"),
            seq_seed=int(row("seed", i, 0)), top_logprobs=2), int(row("positions", i, 0))) for i in range(r)]
        assert out.result_json() == s.sample(a, reqs).result_json()


def test_renorm_helpers_follow_section_3():
    # SAMPLER.md section 3's worked example.
    p = np.array([[0.50, 0.25, 0.15, 0.06, 0.04]], dtype=np.float32)
    got = sp.top_k_renorm_probs(sp.top_p_renorm_probs(p, 0.8, backend="cpu"), 2, backend="cpu")
    np.testing.assert_allclose(got, [[2 / 3, 1 / 3, 0, 0, 0]], atol=1e-6)
    np.testing.assert_allclose(sp.top_p_renorm_probs(p, 0.8, backend="cpu"), [[0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0, 0]], atol=1e-6)
    ids, lps = sp.top_k_top_p_renorm_logprobs(np.log(p), top_k=2, top_p=0.8, backend="cpu")
    assert ids.tolist() == [[0, 1, 2, 3, 4]]
    np.testing.assert_allclose(np.exp(lps), [[2 / 3, 1 / 3, 0, 0, 0]], atol=1e-6)
    with pytest.raises(ValueError, match=r"^top_p must be in \(0, 1\], got 1.5"):
        sp.top_p_renorm_probs(p, 1.5, backend="cpu")
    with pytest.raises(ValueError, match="probs: row 0: invalid logits"):
        sp.top_k_renorm_probs(-p, 2, backend="cpu")


def test_verify_accepts_drafts_from_the_target_distribution(rng):
    # q = p for every draft: u1 * q < p always holds, so every draft is accepted.
    b, d = 3, 4
    t = logits(rng, b * (d + 1))
    ids, lps = sp.top_k_top_p_renorm_logprobs(t, top_k=20, top_p=0.95, backend="cpu")
    dense = np.full((b * (d + 1), V), -np.inf, dtype=np.float32)
    np.put_along_axis(dense, ids.astype(np.int64), lps, axis=1)
    dense = dense.reshape(b, d + 1, V)
    drafts = np.array([[int(ids[i * (d + 1) + j, 0]) for j in range(d)] for i in range(b)], dtype=np.int32)
    out = sp.verify(t.reshape(b, d + 1, V), drafts, np.ascontiguousarray(dense[:, :d]), top_k=20, top_p=0.95, seed=[1, 2, 3], positions=[10, 20, 30], backend="cpu")
    assert out.accepted.tolist() == [d] * b
    assert [e.tolist()[:d] for e in out.emitted] == drafts.tolist()
    # The same through the Sampler class, with DraftDist objects.
    s = sp.Sampler(V, backend="cpu")
    reqs = []
    for i in range(b):
        dists = [sp.DraftDist(ids[i * (d + 1) + j], lps[i * (d + 1) + j]) for j in range(d)]
        reqs.append(sp.Request.verify(sp.SamplingParams(top_k=20, top_p=0.95, seq_seed=i + 1), [10, 20, 30][i] + d, drafts[i], dists))
    ref = s.sample(t, reqs)
    assert np.array_equal(out.tokens, ref.tokens)
    # Placeholder drafts (-1) are always rejected.
    out = sp.verify(t, np.full((b, d), -1, np.int32), np.ascontiguousarray(dense[:, :d]), top_k=20, top_p=0.95, seed=1, backend="cpu")
    assert out.accepted.tolist() == [0] * b
    # A wrong draft count is a bad call here (shapes), a status in a Request.
    with pytest.raises(ValueError, match=r"target_logits: expected B \* m"):
        sp.verify(t[:-1], drafts, np.ascontiguousarray(dense[:, :d]), backend="cpu")


# ---------------------------------------------------------------- Sampler kinds, masks, pool


def test_masks_kinds_and_pool(rng):
    s = sp.Sampler(V, force_topk=64, nextn=3, backend="cpu")
    w = (V + 31) // 32
    mask = np.zeros((1, w), dtype=np.uint32)
    mask[0, 777 // 32] = 1 << (777 % 32)
    a = logits(rng, 1 + 2 + 3 + 2)
    a[0, 777] = a[0].max() - 5  # allowed by the mask, not the largest
    pool = sp.MtpInfoPool(4, 3, s.n, V)
    slot = pool.alloc()
    reqs = [
        sp.Request.prefill(params(), 41, masks=mask.view(np.int32)),  # int32 words work too
        sp.Request.draft(params(), 55, 6, 3, 2),
        sp.Request.prompt_logprobs(params(), [5, 9, -1]),
        sp.Request.decode(params(), 60, 2, [pool.read(slot, 0).ids[0] if len(pool.read(slot, 0)) else 3], [pool.read(slot, 0)]),
    ]
    out, ids, lps = s.sample_with_processed(a, reqs, [1, 2])
    assert out.errors == [None, None, None, None], out.errors
    assert out.tokens[0] == 777
    assert [len(e) for e in out.emitted] == [1, 2, 0, 1]  # unwritten pool row: q = 0, reject
    assert out.prompt_logprobs[2].shape == (2,) and (out.tokens[3:6] == -1).all()
    assert ids.shape == (2, 64) and lps.shape == (2, 64)
    # Store the draft rows' processed distributions, read them back, verify with them.
    for i in range(2):
        pool.write(slot, i, ids[i], lps[i])
    d0 = pool.read(slot, 0)
    assert sorted(d0.ids) == sorted(int(x) for x, l in zip(ids[0], lps[0]) if l > -np.inf)
    assert pool.rows == 15 and pool.nbytes == 15 * 64 * 8 and pool.scratch_slot == 4
    with pytest.raises(ValueError, match="pool write"):
        pool.write(slot, 5, ids[0], lps[0])
    # A mask with the wrong number of words fails only its request.
    out = s.sample(a[:1], [sp.Request.prefill(params(), 41, masks=[[0] * (w - 1)])])
    assert out.errors[0].startswith("bad mask")


def test_torch_cpu_tensors_in_and_out(rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(logits(rng, 2))
    s = sp.Sampler(V, backend="cpu")
    reqs = [sp.Request.prefill(params(), 3), sp.Request.prefill(params(), 4)]
    out = s.sample(a, reqs)
    assert isinstance(out.tokens, torch.Tensor) and out.tokens.dtype == torch.int32
    assert sp._native._dlpack_data_ptr(a) == a.data_ptr()
    ref = s.sample(a.numpy(), reqs)
    assert out.tokens.numpy().tolist() == ref.tokens.tolist()
    b16 = s.sample(a.to(torch.bfloat16), reqs)
    ref16 = s.sample(a.to(torch.bfloat16).to(torch.float32).numpy(), reqs)
    assert b16.tokens.numpy().tolist() == ref16.tokens.tolist()


def test_torch_cpu_logits_are_read_in_place_through_attributes(rng):
    # Float torch CPU logits skip torch's Python-level __dlpack__ (their attributes are read,
    # as for CUDA tensors): still no copy, the same checks and messages, the same tokens.
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(logits(rng, 3))
    assert sp._native._dlpack_data_ptr(a) == a.data_ptr() == a.numpy().ctypes.data
    assert sp._native._dlpack_data_ptr(a[1:]) == a.data_ptr() + V * 4
    # One C++ call (torch._C._to_dlpack) reads them (issue 26): a dimension of size 1 takes any
    # stride, as before; an empty tensor is read too.
    one = a.as_strided((1, V), (12345, 1), V)
    assert sp._native._dlpack_data_ptr(one) == one.data_ptr() == a.data_ptr() + V * 4
    s = sp.Sampler(V, backend="cpu")
    greedy = [sp.Request.prefill(params(temperature=0.0), 3) for _ in range(3)]
    assert s.sample(one, greedy[:1]).tokens.tolist() == s.sample(a[1:2].numpy(), greedy[:1]).tokens.tolist()
    assert len(s.sample(torch.zeros((0, V)), [])) == 0
    assert s.sample(a.to(torch.float16)[:, :].contiguous(), greedy).tokens.tolist() == s.sample(a.to(torch.float16).numpy(), greedy).tokens.tolist()
    a[1, 17] = 1e4  # written in place after the import above: the step reads the live memory
    assert s.sample(a, greedy).tokens.tolist()[1] == 17
    a[1, 23] = 2e4
    assert s.sample(a, greedy).tokens.tolist()[1] == 23
    assert s.sample(a.requires_grad_(), greedy).tokens.tolist() == s.sample(a.detach().numpy(), greedy).tokens.tolist()
    a = a.detach()
    f = lambda x: sp.top_k_top_p_sampling_from_logits(x, 5, 0.9, seed=np.arange(3, dtype=np.uint64), backend="cpu")
    assert f(a).tolist() == f(a.numpy()).tolist()
    with pytest.raises(ValueError, match=r"logits: expected a row-major contiguous array, got shape \[3, 1000\] with strides \[1, 3\]"):
        s.sample(torch.from_numpy(logits(rng, V, 3)).t(), greedy)
    with pytest.raises(TypeError, match="logits: expected float32, bfloat16 or float16, got int32"):
        s.sample(a.to(torch.int32), greedy)
    with pytest.raises(ValueError, match="logits: expected 2 dimensions, got 1"):
        s.sample(a[0], greedy)
    with pytest.raises(ValueError, match=r"logits: expected shape \[R, vocab_size = 1000\], got \[3, 999\]"):
        s.sample(a[:, :999].contiguous(), greedy)
    # A layout whose attributes torch cannot give (sparse) falls back to DLPack and its error.
    with pytest.raises(ValueError, match="logits: __dlpack__"):
        s.sample(a.to_sparse(), greedy)


@pytest.mark.skipif(not hasattr(sp._native, "_bench_api_clock"), reason="built without the bench feature (bench/overhead.py says how)")
def test_api_clock_times_the_rust_api_inside_a_call(rng):
    # The overhead benchmark's clock: each step records the host time it spent inside the Rust
    # API, so that the Python call minus it is that call's binding overhead.
    a = logits(rng, 64)
    s = sp.Sampler(V, backend="cpu")
    reqs = [sp.Request.prefill(params(seq_seed=i), 3) for i in range(64)]
    sp._native._bench_api_clock(True)
    try:
        for call in (lambda: s.sample(a, reqs), lambda: sp.top_k_top_p_sampling_from_logits(a, 5, 0.9, seed=1, backend="cpu")):
            t = time.perf_counter_ns()
            call()
            total = time.perf_counter_ns() - t
            api = sp._native._bench_api_ns()
            assert 0 < api < total
    finally:
        sp._native._bench_api_clock(False)
    assert sp._native._bench_api_ns() == 0
    s.sample(a, reqs)
    assert sp._native._bench_api_ns() == 0  # off: nothing recorded
    pieces = dict(sp._native._bench_binding_pieces(a, reqs, 3, top_k=5, top_p=0.9, seed=np.arange(64, dtype=np.uint64)))
    assert pieces["requests (64 Request objects): the same objects as the last call (the sampler's cache)"] > 0
    assert pieces["requests (64 Request objects): all new since the last call (cache miss)"] > 0 and pieces["functional parameters and its 64 requests"] > 0
    assert sp._native._bench_dispatch(a, reqs, out=None) is None
    sp._native._bench_slabs(False)  # host steps never use the CUDA output slabs
    try:
        assert s.sample(a, reqs).ok.all()
    finally:
        sp._native._bench_slabs(True)


def test_stub_covers_every_public_name():
    import ast

    stub = pathlib.Path(sp.__file__).with_name("_native.pyi")
    tree = ast.parse(stub.read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.AnnAssign) for t in [n.target]}
    public = {n for n in dir(sp._native) if not n.startswith("__")}
    assert public - defined == set()
    # Methods and properties of each class too.
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        members = {m.name for m in cls.body if isinstance(m, ast.FunctionDef)} | {
            m.target.id for m in cls.body if isinstance(m, ast.AnnAssign)}
        real = {m for m in dir(getattr(sp._native, cls.name)) if not m.startswith("_")}
        assert real - members == set(), cls.name
    assert set(sp.__all__) - {"flashinfer"} <= defined  # flashinfer: a submodule (flashinfer.py)


def test_section_10_parameters():
    # SAMPLER.md 10.2's worked example: p = [0.5, 0.3, 0.2], top_k 2, top_p 0.6.
    logits = np.log(np.array([[0.5, 0.3, 0.2]], np.float32))
    kept = {}
    for order in ("top_p_then_top_k", "top_k_then_top_p"):
        s = sp.Sampler(3, backend="cpu")
        p = sp.SamplingParams(top_k=2, top_p=0.6, top_logprobs=3, seq_seed=1, filter_order=order)
        out = s.sample(logits, [sp.Request.prefill(p, 5)])
        kept[order] = int(np.isfinite(out.top_logprobs[0]).sum())
        assert p.filter_order == order
    assert kept == {"top_p_then_top_k": 2, "top_k_then_top_p": 1}
    with pytest.raises(ValueError, match="filter_order"):
        sp.SamplingParams(filter_order="bogus")
    with pytest.raises(ValueError, match="logprobs_mode"):
        sp.SamplingParams(logprobs_mode="bogus")
    # A bad min_p is a status of its request, not an exception.
    s = sp.Sampler(3, backend="cpu")
    out = s.sample(logits, [sp.Request.prefill(sp.SamplingParams(min_p=1.5, seq_seed=1), 5)])
    assert not out.ok[0] and "min_p" in out.errors[0]


def test_issue_24_temperature_inf_minus_zero_min_p_log_and_draft_dists(rng):
    """SAMPLER.md 1, 6 and 10.1 (decided), with the Rust API's error texts."""
    s = sp.Sampler(V, backend="cpu")
    a = logits(rng, 3)
    a[2] = a[0]
    good = sp.Request.prefill(params(), 9)
    # +inf temperature: an error status naming the field, like NaN; only that request fails.
    out = s.sample(a, [good, sp.Request.prefill(params(temperature=math.inf), 9), good])
    assert out.errors == [None, "temperature must be finite and >= 0, got inf", None]
    assert out.tokens[1] == -1 and out.tokens[0] == out.tokens[2]
    # -0.0 counts as 0: clamped like it (top-p, top-k and min-p off), bitwise the same outputs.
    z = [s.sample(a[:1], [sp.Request.prefill(params(temperature=t, min_p=0.5, top_k=1), 9)]) for t in (-0.0, 0.0)]
    assert z[0].errors == [None] and int(z[0].tokens[0]) == int(z[1].tokens[0])
    assert np.array_equal(z[0].top_logprobs.view(np.uint32), z[1].top_logprobs.view(np.uint32))
    # min-p tests x < f32(ln min_p): with logits [0, f32(-ln 2)] and min_p 0.5, token 1 is kept.
    s2 = sp.Sampler(2, backend="cpu")
    x = np.array([[0.0, -math.log(2.0)]], np.float32)
    out = s2.sample(x, [sp.Request.prefill(sp.SamplingParams(min_p=0.5, top_logprobs=2, seq_seed=3), 4)])
    assert np.isfinite(out.top_logprobs[0]).all()
    below = np.array([[0.0, np.nextafter(np.float32(-math.log(2.0)), np.float32(-1))]], np.float32)
    out = s2.sample(below, [sp.Request.prefill(sp.SamplingParams(min_p=0.5, top_logprobs=2, seq_seed=3), 4)])
    assert np.isfinite(out.top_logprobs[0]).tolist() == [True, False]
    # Draft distributions: repeated ids, a logprob above 1e-6, a total above 1 + 1e-4 fail
    # only their request (naming draft_dists); a truncated one (total .7) is valid.
    t = logits(rng, 2)
    lp = np.log(np.array([0.5, 0.2], np.float32))
    cases = [
        (sp.DraftDist([1, 2], lp), None),
        (sp.DraftDist([1, 1], lp), "bad request field `draft_dists`: draft_dists[0]: repeated ids: 1 again at entry 1"),
        (sp.DraftDist([1], np.array([2e-6], np.float32)), "draft_dists[0]: a logprob that is NaN or above 1e-6"),
        (sp.DraftDist([1, 2], np.log(np.array([0.6, 0.5], np.float32))), "draft_dists[0]: total probability"),
        (sp.DraftDist([1, V], lp), "draft_dists[0]: id 1000 (entry 1) is outside 0..1000"),
    ]
    for dist, err in cases:
        for draft in (1, -1):  # used, and on a placeholder draft
            out = s.sample(np.concatenate([a[:1], t]), [good, sp.Request.verify(params(), 30, [draft], [dist])])
            assert out.errors[0] is None
            if err is None:
                assert out.errors[1] is None
            else:
                assert out.errors[1] is not None and err in out.errors[1], out.errors[1]
                assert (out.tokens[1:] == -1).all()
    # The same rule on a tree's distributions, used or not.
    tree = sp.DraftTree([-1, 0], [3], [sp.DraftDist([3, 3], lp)])
    out = s.sample(t, [sp.Request.tree(params(), 30, tree)])
    assert out.errors[0] is not None and "draft_dists" in out.errors[0] and "repeated ids" in out.errors[0]


# ---------------------------------------------------------------- trees (section 11)


def test_draft_tree_requests_and_converters(rng):
    parent = sp.DraftTree.parents_from_rank_paths([[0], [1], [0, 0]])  # root -> {1, 2}, 1 -> {3}
    assert parent == [-1, 0, 0, 1]
    assert sp.DraftTree.parents_from_dfs_depths([0, 1, 2, 1]) == [-1, 0, 1, 0]
    assert sp.DraftTree.parents_from_first_child_next_sibling([1, 3, -1, -1], [-1, 2, -1, -1]) == parent
    assert sp.DraftTree.parents_from_node_paths(4, [[0, 1, 3], [0, 2, -1]]) == parent
    with pytest.raises(ValueError, match="rank_paths"):
        sp.DraftTree.parents_from_rank_paths([[1]])
    t = sp.DraftTree(parent, [5, 6, 7])
    assert t.nodes == 4 and t.parent == parent and t.tokens == [5, 6, 7]
    # Greedy: row 0's argmax is node 1's token, row 1's is node 3's: the path 0 -> 1 -> 3 is accepted.
    a = logits(rng, 4)
    for row, tok in [(0, 5), (1, 7), (3, 11)]:
        a[row, tok] = 40.0
    s = sp.Sampler(V, backend="cpu")
    req = sp.Request.tree(params(temperature=0.0), 50, t)
    assert req.kind == "tree" and req.rows == 4
    good = sp.Request.prefill(params(), 9)
    out = s.sample(np.concatenate([a, logits(rng, 1)]), [req, good])
    assert out.errors == [None, None]
    assert out.paths[0].tolist() == [0, 1, 3] and out.paths[1] is None
    assert int(out.accepted[0]) == 2 and out.emitted[0].tolist() == [5, 7, 11]
    # A chain tree equals verify; a malformed tree fails only its request.
    chain = sp.DraftTree.chain([5, 7])
    assert chain.parent == [-1, 0, 1]
    bad = sp.Request.tree(params(), 50, sp.DraftTree([0, 0, 1, 1], [5, 6, 7]))
    out2 = s.sample(np.concatenate([a, logits(rng, 1)]), [bad, good])
    assert out2.errors[0] is not None and "parent" in out2.errors[0] and out2.errors[1] is None


def test_functional_argument_fast_paths_agree_with_the_general_ones(rng):
    # Python scalars skip the __dlpack__ probe and contiguous uint64 seeds go through numpy's
    # C API: the same tokens as lists, numpy scalars and the DLPack path; the same errors.
    a = logits(rng, 5)
    f = lambda **kw: sp.top_k_top_p_sampling_from_logits(a, backend="cpu", **kw).tolist()
    want = f(top_k=[5] * 5, top_p=[0.9] * 5, temperature=[0.7] * 5, seed=[0, 2, 4, 6, 8])
    assert f(top_k=5, top_p=0.9, temperature=0.7, seed=np.array([0, 2, 4, 6, 8], dtype=np.uint64)) == want
    assert f(top_k=5, top_p=0.9, temperature=0.7, seed=np.array([0, 2, 4, 6, 8], dtype=np.int64)) == want
    assert f(top_k=np.int64(5), top_p=np.float64(0.9), temperature=np.float32(0.7), seed=np.uint64(3)) == f(top_k=5, top_p=0.9, temperature=0.7, seed=3)
    with pytest.raises(ValueError, match="seed: expected a row-major contiguous array"):
        f(seed=np.arange(10, dtype=np.uint64)[::2])
    with pytest.raises(TypeError, match="temperature must be a float, got bool"):
        f(temperature=True)
    with pytest.raises(ValueError, match="seed: expected values >= 0, got -1"):
        f(seed=np.array([-1, 0, 0, 0, 0], dtype=np.int64))
    # numpy arrays are told apart by numpy's C API: 0-d is a scalar, 1-d one value per row.
    assert f(top_k=np.array(5), top_p=np.array(0.9, dtype=np.float32), temperature=0.7, seed=np.array(3, dtype=np.uint64)) == f(top_k=5, top_p=0.9, temperature=0.7, seed=3)
    assert f(top_k=np.full(5, 5), top_p=np.full(5, 0.9), temperature=np.full(5, 0.7, dtype=np.float32), seed=np.array([0, 2, 4, 6, 8])) == want
    with pytest.raises(ValueError, match=r"top_k: expected a scalar or 5 values \(one per row\), got 2"):
        f(top_k=np.array([5, 5]))
    with pytest.raises(ValueError, match="expected 1 dimensions, got 2"):
        f(top_k=np.full((5, 1), 5))


def test_requests_are_read_in_place_and_stay_valid(rng):
    # The step reads the Request objects' own data (no clone): equal results whether the
    # caller keeps its list, builds a new one, or drops the objects right after the call.
    a = logits(rng, 3)
    s = sp.Sampler(V, backend="cpu")
    mk = lambda: [sp.Request.prefill(sp.SamplingParams(top_k=9, top_logprobs=2, seq_seed=i, golden_token_ids=[1, 2]), 5, golden=[3], masks=None) for i in range(3)]
    reqs = mk()
    first = s.sample(a, reqs)
    assert s.sample(a, tuple(reqs)).result_json() == first.result_json()
    assert s.sample(a, mk()).result_json() == first.result_json()
    for _ in range(50):
        assert s.sample(a, [r for r in mk()]).tokens.tolist() == first.tokens.tolist()
    with pytest.raises(TypeError, match=r"requests\[1\] must be a Request, got int"):
        s.sample(a, [reqs[0], 1, reqs[2]])


def test_sampler_reuses_the_last_calls_requests_only_when_they_are_the_same_objects(rng):
    # Sampler.sample keeps the last call's converted requests (issue 26): an entry is reused
    # when the object at its index is the one of the last call, every other one is converted
    # again. Each call must equal the same call on a new sampler (nothing cached).
    s = sp.Sampler(V, backend="cpu")
    mk = lambda i, **kw: sp.Request.prefill(params(seq_seed=i, **kw), 5 + i)
    reqs = [mk(i) for i in range(6)]
    decode2 = sp.Request.decode(params(seq_seed=40), 9, 2, [-1])  # two rows

    def check(lst, rows=None, same_as=None):
        x = logits(rng, rows if rows is not None else len(lst))
        want = sp.Sampler(V, backend="cpu").sample(x, list(same_as if same_as is not None else lst))
        got = s.sample(x, lst)
        assert got.result_json() == want.result_json()
        assert got.row_offsets.tolist() == want.row_offsets.tolist()
        return got

    check(reqs)
    check(reqs)  # the same list object
    check(list(reqs))  # another list of the same objects
    reqs[2] = mk(2, top_k=1)  # one entry replaced in place
    check(reqs)
    check(reqs[:3])  # shorter
    check(reqs + [mk(7), mk(8)])  # longer
    check(reqs[::-1])  # the same objects at other indices
    check(tuple(reqs))
    check(iter(reqs), rows=6, same_as=reqs)
    check(reqs[:1] + [decode2] + reqs[2:], rows=7)  # a request of another row count
    check(reqs, rows=6)  # and back: row counts follow
    with pytest.raises(TypeError, match=r"requests\[4\] must be a Request, got NoneType"):
        s.sample(logits(rng, 6), reqs[:4] + [None] + reqs[5:])
    with pytest.raises(TypeError, match=r"requests must be a list of Request, got int"):
        s.sample(logits(rng, 6), 3)
    check(reqs)  # the failed calls left the cache usable
    check(reqs[:4] + [mk(9)] + reqs[5:])
    # sample_probs and sample_with_processed share the cache.
    p = np.full((6, V), 1.0 / V, np.float32)
    greedy = [sp.Request.prefill(params(temperature=1.0, seq_seed=i), 3) for i in range(6)]
    assert s.sample_probs(p, greedy).result_json() == sp.Sampler(V, backend="cpu").sample_probs(p, greedy).result_json()
    x = logits(rng, 6)
    o, ids, lps = s.sample_with_processed(x, reqs, [0, 5])
    o2, ids2, lps2 = sp.Sampler(V, backend="cpu").sample_with_processed(x, reqs, [0, 5])
    assert o.result_json() == o2.result_json() and (ids == ids2).all() and np.array_equal(lps, lps2)
    check(reqs)


def test_two_threads_sampling_on_one_sampler_with_different_requests(rng):
    # One thread's host step holds the request cache (GIL released): the other thread's call
    # converts its requests alone, and neither sees the other's.
    s = sp.Sampler(V, backend="cpu")
    x = logits(rng, 16)
    lists = [[sp.Request.prefill(params(seq_seed=100 * t + i, top_k=5 + t), 3) for i in range(16)] for t in range(2)]
    want = [sp.Sampler(V, backend="cpu").sample(x, l).tokens.tolist() for l in lists]
    errors = []

    def run(t):
        try:
            for _ in range(100):
                assert s.sample(x, lists[t]).tokens.tolist() == want[t]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(t,)) for t in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_requests_replaced_by_another_thread_during_a_step(rng):
    # The GIL is released while a host step runs: another thread replacing (and so freeing)
    # the caller's Request objects meanwhile must not change or break the step, which holds them.
    import threading

    a = logits(rng, 4)
    s = sp.Sampler(V, backend="cpu")
    mk = lambda: [sp.Request.prefill(sp.SamplingParams(top_k=9, seq_seed=i, golden_token_ids=list(range(50))), 5) for i in range(4)]
    reqs = mk()
    want = s.sample(a, list(reqs)).tokens.tolist()
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            reqs[:] = mk()

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(200):
            assert s.sample(a, reqs).tokens.tolist() == want
    finally:
        stop.set()
        t.join()


def test_tree_converters_renumber_sglang_and_eagle_layouts():
    # SGLang lists the root's children out of index order: node 2 is drawn before node 1.
    fc, ns = [2, 3, -1, -1], [-1, -1, 1, -1]
    with pytest.raises(ValueError, match="first_child|next_sibling"):
        sp.DraftTree.parents_from_first_child_next_sibling(fc, ns)
    parent, perm = sp.DraftTree.parents_from_first_child_next_sibling(fc, ns, renumber=True)
    assert perm == [0, 2, 1, 3] and parent == [-1, 0, 0, 2]
    # Already in order: the identity, the same parents as without renumber.
    assert sp.DraftTree.parents_from_first_child_next_sibling([1, 3, -1, -1], [-1, 2, -1, -1], renumber=True) == ([-1, 0, 0, 1], [0, 1, 2, 3])
    with pytest.raises(ValueError, match="reached twice"):
        sp.DraftTree.parents_from_first_child_next_sibling([1, -1], [-1, 1], renumber=True)
    # EAGLE-2 retrieve_indices with a child numbered before its parent (node 1 under node 2).
    parent, perm = sp.DraftTree.parents_from_node_paths(4, [[0, 2, 1], [0, 3, -1]], renumber=True)
    assert perm == [0, 2, 1, 3] and parent == [-1, 0, 1, 0]
    # The renumbered tree verifies: the target's argmax path, mapped back through perm.
    v = 8
    old_tokens = {1: 5, 2: 6, 3: 7}
    old_rows = np.full((4, v), -30.0, np.float32)
    old_rows[0, 5] = old_rows[1, 7] = old_rows[2, 1] = old_rows[3, 2] = 30.0
    parent, perm = sp.DraftTree.parents_from_first_child_next_sibling(fc, ns, renumber=True)
    tree = sp.DraftTree(parent, [old_tokens[perm[n]] for n in range(1, 4)])
    out = sp.Sampler(v, nextn=3, backend="cpu").sample(np.ascontiguousarray(old_rows[perm]), [sp.Request.tree(sp.SamplingParams(seq_seed=1), 10, tree)])
    assert out.errors == [None]
    assert [perm[n] for n in out.paths[0].tolist()] == [0, 1, 3]  # old nodes: root, token 5, token 7
    assert out.emitted[0].tolist()[:2] == [5, 7]
