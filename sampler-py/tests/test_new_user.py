"""A new user's bad calls (brief 'newuser'): every error names the argument
or field and its value; one bad request fails only itself."""

import ctypes

import numpy as np
import pytest

import sampler_py as sp

V = 1000


@pytest.mark.parametrize(
    "field, value, exc, text",
    [
        ("top_logprobs", -1, ValueError, "top_logprobs must be in 0..=4294967295, got -1"),
        ("top_logprobs", 2**33, ValueError, "top_logprobs must be in 0..=4294967295, got 8589934592"),
        ("top_k", 2**70, ValueError, "top_k must fit in int64"),
        ("top_k", 5.0, TypeError, "top_k must be an int, got float"),
        ("top_k", True, TypeError, "top_k must be an int, got bool"),
        ("top_logprobs", True, TypeError, "top_logprobs must be an int, got bool"),
        ("seq_seed", False, TypeError, "seq_seed must be an int, got bool"),
        ("seq_seed", -1, ValueError, "seq_seed must be in 0..=18446744073709551615, got -1"),
        ("temperature", "hot", TypeError, "temperature must be a float, got str"),
        ("top_p", None, TypeError, "top_p must be a float, got NoneType"),
        ("min_p", [0.1], TypeError, "min_p must be a float, got list"),
        ("golden_token_ids", [2**40], ValueError, r"golden_token_ids\[0\] = 1099511627776 is not a token id"),
        ("golden_token_ids", "abc", TypeError, "golden_token_ids must be a sequence of ints, got str"),
        ("prompt_logprobs", "yes", TypeError, "prompt_logprobs must be a bool, got str"),
        ("filter_order", "topk", ValueError, "filter_order: .*got \"topk\""),
        ("logprobs_mode", "Raw", ValueError, "logprobs_mode: .*got \"Raw\""),
    ],
)
def test_setters_name_the_field(field, value, exc, text):
    p = sp.SamplingParams(seq_seed=1)
    before = repr(p)
    with pytest.raises(exc, match=text):
        setattr(p, field, value)
    assert repr(p) == before  # unchanged


def test_setters_accept_what_the_constructor_accepts():
    p = sp.SamplingParams()
    p.temperature = 1  # an int is a float
    p.top_p = np.float32(0.5)
    p.top_k = np.int64(7)
    p.top_logprobs = 3
    p.seq_seed = 2**64 - 1
    p.seq_seed = None
    p.golden_token_ids = np.array([1, 2], np.int32)
    p.prompt_logprobs = True
    p.min_p = 0.25
    p.filter_order = "top_k_then_top_p"
    p.logprobs_mode = "raw"
    assert (p.temperature, p.top_p, p.top_k, p.top_logprobs, p.seq_seed) == (1.0, 0.5, 7, 3, None)
    assert (p.golden_token_ids, p.prompt_logprobs, p.min_p, p.filter_order, p.logprobs_mode) == ([1, 2], True, 0.25, "top_k_then_top_p", "raw")
    q = sp.SamplingParams(temperature=1, top_p=0.5, top_k=7, top_logprobs=3, golden_token_ids=[1, 2], prompt_logprobs=True, min_p=0.25, filter_order="top_k_then_top_p", logprobs_mode="raw")
    assert repr(p) == repr(q)
    # Every field shows in the repr (a new user prints params to check them).
    assert "min_p=0.25" in repr(p) and 'filter_order="top_k_then_top_p"' in repr(p) and 'logprobs_mode="raw"' in repr(p) and "golden_token_ids=[1, 2]" in repr(p)


def test_a_set_filter_order_is_used():
    # p = [0.5, 0.3, 0.2], top_k 2, top_p 0.6: the seed's order keeps {0, 1}, vLLM's {0} (SAMPLER.md 10.2).
    logits = np.log(np.array([[0.5, 0.3, 0.2]], np.float32))
    s = sp.Sampler(3, backend="cpu")
    p = sp.SamplingParams(top_k=2, top_p=0.6, top_logprobs=3, seq_seed=1)
    kept = lambda: int((s.sample(logits, [sp.Request.prefill(p, 4)]).top_logprobs[0] > -np.inf).sum())
    assert kept() == 2
    p.filter_order = "top_k_then_top_p"
    assert kept() == 1


@pytest.mark.parametrize(
    "call, text",
    [
        (lambda: sp.MtpInfoPool(-1, 5, 64, V), "max_num_seqs must be in 0..=18446744073709551615, got -1"),
        (lambda: sp.MtpInfoPool(2, -5, 64, V), "nextn must be in .*got -5"),
        (lambda: sp.MtpInfoPool(2, 5, 64, -V), "vocab must be in .*got -1000"),
        (lambda: sp.MtpInfoPool(2**40, 5, 64, V), "MTP info pool too large"),
        (lambda: sp.MtpInfoPool(2, 5, 64, V).read(-1, 0), "slot must be in .*got -1"),
        (lambda: sp.MtpInfoPool(2, 5, 64, V).read(0, -2), "i must be in .*got -2"),
        (lambda: sp.MtpInfoPool(2, 5, 64, V).release(-1), "slot must be in .*got -1"),
        (lambda: sp.MtpInfoPool(2, 5, 64, V).write(-1, 0, list(range(64)), [0.0] * 64), "slot must be in .*got -1"),
        (lambda: sp.DraftTree.parents_from_node_paths(-3, [[0, 1]]), "m must be in .*got -3"),
    ],
)
def test_size_and_index_arguments_are_named(call, text):
    with pytest.raises(ValueError, match=text):
        call()


def test_unwritten_pool_row_rejects_its_draft():
    # The target puts nearly all its mass on the draft; a never-written row is q = 0: rejected.
    s = sp.Sampler(V, force_topk=64, backend="cpu")
    pool = sp.MtpInfoPool(2, 3, 64, V)
    slot = pool.alloc()
    a = np.zeros((2, V), np.float32)
    a[0, 42] = 30.0
    for seed in range(8):
        out = s.sample(a, [sp.Request.verify(sp.SamplingParams(seq_seed=seed), 20, [42], [pool.read(slot, 0)])])
        assert out.errors == [None] and out.accepted[0] == 0


def _other_device(a, device_type):
    """A DLPack producer claiming device `device_type` (host memory behind it)."""

    class Other:
        def __dlpack_device__(self):
            return (device_type, 0)

        def __dlpack__(self, stream=None, max_version=None):
            cap = a.__dlpack__()
            get = ctypes.pythonapi.PyCapsule_GetPointer
            get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
            ctypes.c_int32.from_address(get(cap, b"dltensor") + 8).value = device_type
            return cap

    return Other()


@pytest.mark.parametrize("device_type", [4, 7, 8, 10, 14])  # OpenCL, Vulkan, Metal, ROCm, oneAPI (CUDA host memory, 3, is read as host memory)
def test_logits_on_another_device_raise_naming_it(device_type):
    a = np.zeros((1, V), np.float32)
    s = sp.Sampler(V, backend="cpu")
    with pytest.raises((TypeError, ValueError), match="logits"):
        s.sample(_other_device(a, device_type), [sp.Request.prefill(sp.SamplingParams(seq_seed=1), 3)])
    with pytest.raises((TypeError, ValueError), match="logits"):
        sp.top_k_top_p_sampling_from_logits(_other_device(a, device_type), 5, 0.9, seed=1, backend="cpu")


def test_one_bad_request_among_good_ones():
    rng = np.random.default_rng(3)
    s = sp.Sampler(V, force_topk=64, backend="cpu")
    good = lambda seed: sp.SamplingParams(temperature=0.7, top_p=0.9, top_k=20, top_logprobs=3, seq_seed=seed)
    a = rng.standard_normal((6, V)).astype(np.float32)
    bads = [
        (sp.Request.prefill(sp.SamplingParams(temperature=float("nan")), 5), "temperature must be finite and >= 0, got NaN"),
        (sp.Request.prefill(sp.SamplingParams(top_p=0.0), 5), "top_p must be in (0, 1], got 0.0"),
        (sp.Request.prefill(sp.SamplingParams(top_k=-4), 5), "top_k must be -1 or in 1..=2147483647, got -4"),
        (sp.Request.prefill(sp.SamplingParams(top_logprobs=65), 5), "top_logprobs = 65, N = 64"),
        (sp.Request.prefill(good(1), 5, golden=[V]), "golden[0] = 1000"),
    ]
    reqs = lambda bad: [sp.Request.prefill(good(1), 9), bad, sp.Request.verify(good(2), 30, [3, 4], [sp.DraftDist([], [])] * 2)]
    base = s.sample(np.concatenate([a[:1], a[2:5]]), [reqs(None)[0], reqs(None)[2]])
    for bad, text in bads:
        out = s.sample(a[:5], reqs(bad))
        assert out.errors[0] is None and out.errors[2] is None
        assert text in out.errors[1], out.errors[1]
        assert out.tokens[1] == -1
        np.testing.assert_array_equal(out.tokens[[0, 2, 3, 4]], base.tokens)
        np.testing.assert_array_equal(out.top_ids[[0, 2, 3, 4]], base.top_ids)
    # NaN logits in the bad request's row only.
    b = a[:5].copy()
    b[1, 7] = np.nan
    out = s.sample(b, reqs(sp.Request.prefill(good(3), 5)))
    assert out.errors[1] == "invalid logits (NaN or +inf) in row 0 of the request"
    np.testing.assert_array_equal(out.tokens[[0, 2, 3, 4]], base.tokens)


def test_bools_are_not_ints_here():
    # A bool is an int to Python; `top_k=True` is a mistake (as `temperature=True` already was).
    a = np.zeros((2, V), np.float32)
    with pytest.raises(TypeError, match="top_k must be an int, got bool"):
        sp.top_k_top_p_sampling_from_logits(a, True, 0.9, seed=1, backend="cpu")
    with pytest.raises(TypeError, match="seed must be an int, got bool"):
        sp.top_k_top_p_sampling_from_logits(a, 5, 0.9, seed=True, backend="cpu")
    with pytest.raises(TypeError, match="top_k must be an int, got bool"):
        sp.SamplingParams(top_k=True)
    with pytest.raises(TypeError, match=r"drafts\[0\] must be an int, got bool"):
        sp.Request.verify(sp.SamplingParams(), 10, [True], [sp.DraftDist([], [])])
