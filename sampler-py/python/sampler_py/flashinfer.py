"""FlashInfer's sampling functions (``flashinfer.sampling``, ``flashinfer.top_k``) on this
project's kernels and contract (SAMPLER.md): the same names, argument order, defaults
(``filter_apply_order="top_k_first"``), return conventions and dtypes, so an engine written
against FlashInfer can switch its import.

Where the contract differs from FlashInfer, each docstring says so in one line. Common to all:

- Random numbers: seeded SplitMix64 per row (SAMPLER.md section 2), not Philox per call. Output
  row ``i`` uses seed ``seed + i`` (a scalar or 1-element ``seed``) or ``seed[i]`` (a ``[B]``
  tensor) at position ``offset`` (or ``offset[i]``): the same seed and offset give the same
  tokens, so advance ``offset`` (or the seed) between calls. ``seed`` and ``offset`` may be
  tensors (as FlashInfer takes them for CUDA-graph capture), but they are read on the host:
  a CUDA tensor is a synchronisation, which a capture does not allow; with ints (or host
  tensors) a CUDA graph captured around ``top_k_top_p_sampling_from_logits`` replays the
  seeds and offsets it was captured with (the kernels take them from the step's metadata).
  Without ``seed``, each row draws 64 random bits from the OS. ``generator`` and
  ``deterministic`` are accepted and unused (every call is deterministic given its seed).
- An invalid row (NaN, a negative probability, nothing allowed) gives token ``-1``
  (``return_valid=True`` also returns the per-row ``valid`` mask); an invalid scalar
  parameter (``top_k=0``, ``top_p=0``, a negative temperature, ``min_p > 1``) raises
  ``ValueError`` naming it.
- Top-p keeps the shortest prefix whose mass *exceeds* ``top_p`` (section 3.7), ties in
  probability broken by lower token id.
- Probability inputs follow SAMPLER.md section 12 (ordered by probability, renormalised on
  the probabilities themselves) and are computed on the host: torch CUDA inputs are copied
  to the host and the results back to their device (a synchronisation; not capturable).
  Logit inputs of ``top_k_top_p_sampling_from_logits`` run on the CUDA kernels in place.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _native

__all__ = [
    "chain_speculative_sampling",
    "min_p_sampling_from_probs",
    "sampling_from_logits",
    "sampling_from_probs",
    "softmax",
    "top_k",
    "top_k_mask_logits",
    "top_k_renorm_probs",
    "top_k_sampling_from_probs",
    "top_k_top_p_sampling_from_logits",
    "top_k_top_p_sampling_from_probs",
    "top_p_renorm_probs",
    "top_p_sampling_from_probs",
]

_ORDERS = {"top_k_first": "top_k_then_top_p", "joint": "top_p_then_top_k"}


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _host(x: Any, dtype=np.float32) -> np.ndarray:
    """A C-contiguous numpy copy (or view) of a numpy array, torch tensor (any device) or list."""
    if _is_torch(x):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if dtype is not None and x.dtype.is_floating_point and dtype == np.float32:
            import torch

            x = x.to(torch.float32)
        return np.ascontiguousarray(x.numpy(), dtype=dtype)
    return np.ascontiguousarray(np.asarray(x), dtype=dtype)


def _like(a: np.ndarray, ref: Any):
    """``a`` as the caller's kind of array: a torch tensor on ``ref``'s device, else numpy."""
    if _is_torch(ref):
        import torch

        return torch.from_numpy(np.ascontiguousarray(a)).to(ref.device)
    return a


def _param(x: Any) -> Any:
    """A per-row parameter for the native calls: scalars as they are, tensors as host arrays."""
    if x is None or isinstance(x, (int, float)):
        return x
    if _is_torch(x):
        return _host(x, dtype=None)
    return x


def _order(filter_apply_order: str) -> str:
    try:
        return _ORDERS[filter_apply_order]
    except (KeyError, TypeError):
        raise ValueError(f'filter_apply_order must be "top_k_first" or "joint", got {filter_apply_order!r}') from None


def _seeds(seed: Any, offset: Any, n: int) -> Tuple[Optional[np.ndarray], Any]:
    """Per-row seeds (``seed + i`` for a scalar or 1-element seed) and positions (the offset)."""
    if seed is None:
        seeds = None
    else:
        s = np.atleast_1d(_host(seed, dtype=None)).astype(np.int64).view(np.uint64)
        if s.size == 1:
            seeds = s[0] + np.arange(n, dtype=np.uint64)  # wraps modulo 2**64
        elif s.size == n:
            seeds = np.ascontiguousarray(s)
        else:
            raise ValueError(f"seed: expected a scalar or {n} values (one per output), got {s.size}")
    if offset is None:
        pos = 0
    elif isinstance(offset, int):
        pos = offset
    else:
        o = np.atleast_1d(_host(offset, dtype=None)).astype(np.int64).view(np.uint64)
        if o.size == 1:
            pos = int(o[0])
        elif o.size == n:
            pos = np.ascontiguousarray(o)
        else:
            raise ValueError(f"offset: expected a scalar or {n} values (one per output), got {o.size}")
    return seeds, pos


def _rows(x: np.ndarray, indices: Any) -> Tuple[np.ndarray, Any]:
    """The rows drawn from: ``x[indices]`` (n samples, any rows), and the output dtype."""
    if indices is None:
        return x, np.int32
    idx = _host(indices, dtype=None)
    if idx.ndim != 1:
        raise ValueError(f"indices: expected 1 dimension, got {idx.ndim}")
    if idx.size and (idx.min() < 0 or idx.max() >= x.shape[0]):
        raise ValueError(f"indices: values must be in 0..{x.shape[0] - 1}")
    return np.ascontiguousarray(x[idx]), idx.dtype


def _check_nan(p: np.ndarray, check_nan: bool, name: str) -> None:
    if check_nan and np.isnan(p).any():
        raise ValueError(f"Input {name} contains NaN.")


def _from_probs(probs, indices, check_nan, seed, offset, return_valid, top_k=None, top_p=None, min_p=None, order="top_k_first"):
    p = _host(probs)
    if p.ndim != 2:
        raise ValueError(f"probs: expected 2 dimensions [batch_size, vocab_size], got {p.ndim}")
    _check_nan(p, check_nan, "probs")
    rows, out_dtype = _rows(p, indices)
    n = rows.shape[0]
    seeds, pos = _seeds(seed, offset, n)
    pk, pp, pm = _param(top_k), _param(top_p), _param(min_p)
    if indices is not None:
        # Per-row parameters belong to the rows of probs: expand them to the outputs.
        idx = _host(indices, dtype=None)
        pk, pp, pm = (x[idx] if isinstance(x, np.ndarray) and x.ndim == 1 else x for x in (pk, pp, pm))
    tokens, valid = _native.probs_sample(rows, pk, pp, pm, filter_order=_order(order), seed=seeds, positions=pos)
    tokens = tokens.astype(out_dtype, copy=False)
    if return_valid:
        return _like(tokens, probs), _like(valid, probs)
    return _like(tokens, probs)


def sampling_from_probs(
    probs,
    indices=None,
    deterministic: bool = True,
    generator=None,
    check_nan: bool = False,
    seed: Optional[Union[int, Any]] = None,
    offset: Optional[Union[int, Any]] = None,
    return_valid: bool = False,
):
    """One token per output from ``probs`` ``[B, V]`` float32 (row ``indices[i]`` for output
    i, else row i): ``[B]`` int32 (the dtype of ``indices`` when given), or ``(samples,
    valid)`` with ``return_valid``. Ours: probabilities need not sum to 1 (section 12)."""
    return _from_probs(probs, indices, check_nan, seed, offset, return_valid)


def top_p_sampling_from_probs(
    probs,
    top_p,
    indices=None,
    deterministic: bool = True,
    generator=None,
    check_nan: bool = False,
    seed=None,
    offset=None,
    return_valid: bool = False,
):
    """Top-p (nucleus) sampling from ``probs`` ``[B, V]``; ``top_p`` a float or ``[B]``.
    Ours: the kept set is the shortest prefix whose mass exceeds top_p (section 3.7)."""
    return _from_probs(probs, indices, check_nan, seed, offset, return_valid, top_p=top_p)


def top_k_sampling_from_probs(
    probs,
    top_k,
    indices=None,
    deterministic: bool = True,
    generator=None,
    check_nan: bool = False,
    seed=None,
    offset=None,
    return_valid: bool = False,
):
    """Top-k sampling from ``probs`` ``[B, V]``; ``top_k`` an int or ``[B]`` (-1 = off).
    Ours: ties at the k-th probability go to the lower token id; top_k=0 raises."""
    return _from_probs(probs, indices, check_nan, seed, offset, return_valid, top_k=top_k)


def min_p_sampling_from_probs(
    probs,
    min_p,
    indices=None,
    deterministic: bool = True,
    generator=None,
    check_nan: bool = False,
    seed=None,
    offset=None,
    return_valid: bool = False,
):
    """Min-p sampling from ``probs`` ``[B, V]``: removes p_i < min_p * max p (``min_p`` a
    float or ``[B]`` in [0, 1]). Ours: the product is rounded to float32 (section 12)."""
    return _from_probs(probs, indices, check_nan, seed, offset, return_valid, min_p=min_p)


def top_k_top_p_sampling_from_probs(
    probs,
    top_k,
    top_p,
    indices=None,
    filter_apply_order: str = "top_k_first",
    deterministic: bool = True,
    generator=None,
    check_nan: bool = False,
    seed=None,
    offset=None,
    return_valid: bool = False,
):
    """Top-k then top-p (``"top_k_first"``: top-p on the top-k renormalised) or both cuts on
    the same probabilities (``"joint"``) from ``probs`` ``[B, V]``. Ours: ``"joint"`` is
    SAMPLER.md's default order (top_p_then_top_k); ``"top_k_first"`` is its 10.2."""
    return _from_probs(probs, indices, check_nan, seed, offset, return_valid, top_k=top_k, top_p=top_p, order=filter_apply_order)


def sampling_from_logits(
    logits,
    indices=None,
    deterministic: bool = True,
    generator=None,
    check_nan: bool = False,
    seed=None,
    offset=None,
):
    """One token per row of ``logits`` ``[B, V]`` from softmax(logits) (no filter), on the
    kernels: ``[B]`` int32 on the logits' device. Ours: SplitMix64 per row (module docstring)."""
    return top_k_top_p_sampling_from_logits(logits, -1, 1.0, indices, "joint", deterministic, generator, check_nan, seed, offset)


def top_k_top_p_sampling_from_logits(
    logits,
    top_k,
    top_p,
    indices=None,
    filter_apply_order: str = "top_k_first",
    deterministic: bool = True,
    generator=None,
    check_nan: bool = False,
    seed=None,
    offset=None,
):
    """Top-k / top-p sampling from ``logits`` ``[B, V]`` (float32, bfloat16 or float16; torch
    CUDA tensors run on the kernels in place, on torch's current stream): ``[B]`` int32 on
    the logits' device. Ours: the filters cut after softmax at temperature 1 (section 3)."""
    order = _order(filter_apply_order)
    x = logits
    out_dtype = None
    if indices is not None:
        if _is_torch(logits):
            import torch

            idx = indices if _is_torch(indices) else torch.as_tensor(np.asarray(indices))
            out_dtype = idx.dtype
            x = logits.index_select(0, idx.to(logits.device, torch.int64))
        else:
            x, out_dtype = _rows(np.asarray(logits), indices)
    if check_nan:
        _check_nan(_host(x), True, "logits")
    n = int(x.shape[0])
    seeds, pos = _seeds(seed, offset, n)
    out = _native.top_k_top_p_sampling_from_logits(
        x, _param(top_k), _param(top_p), filter_order=order, seed=seeds, positions=pos
    )
    if out_dtype is not None:
        out = out.to(out_dtype) if _is_torch(out) else out.astype(out_dtype, copy=False)
    return out


def _renorm(probs, top_k=None, top_p=None):
    p = _host(probs)
    if p.ndim != 2:
        raise ValueError(f"probs: expected 2 dimensions [batch_size, vocab_size], got {p.ndim}")
    if top_k is not None:
        out = _native.top_k_renorm_probs(p, _param(top_k), backend="cpu")
    else:
        out = _native.top_p_renorm_probs(p, _param(top_p), backend="cpu")
    return _like(out, probs)


def top_p_renorm_probs(probs, top_p, is_deterministic: bool = False):
    """``probs`` ``[B, V]`` renormalised over the top-p prefix: ``[B, V]`` float32. Ours:
    an invalid row raises ValueError (FlashInfer returns it unchecked)."""
    return _renorm(probs, top_p=top_p)


def top_k_renorm_probs(probs, top_k):
    """``probs`` ``[B, V]`` renormalised over the ``top_k`` largest probabilities (ties to the
    lower id): ``[B, V]`` float32. Ours: an invalid row raises ValueError."""
    return _renorm(probs, top_k=top_k)


def softmax(logits, temperature=None, enable_pdl=None):
    """``softmax(logits / temperature)`` per row of ``logits`` ``[B, V]`` (``temperature`` a
    float or ``[B]``): ``[B, V]`` float32. Ours: a temperature below 1e-5 is clamped to 1e-5
    (section 1) and an invalid row raises ValueError."""
    x = _host(logits)
    ids, lps = _native.top_k_top_p_renorm_logprobs(x, temperature=_param(temperature), backend="cpu")
    out = np.zeros_like(x)
    np.put_along_axis(out, ids.astype(np.int64), np.exp(lps), axis=1)
    return _like(out, logits)


def top_k_mask_logits(logits, top_k):
    """``logits`` ``[B, V]`` with every token outside the ``top_k`` largest set to -inf (same
    dtype). Ours: ties at the k-th logit go to the lower token id."""
    x = _host(logits)
    ids, lps = _native.top_k_top_p_renorm_logprobs(x, top_k=_param(top_k), backend="cpu")
    keep = np.zeros(x.shape, dtype=bool)
    np.put_along_axis(keep, ids.astype(np.int64), lps > -np.inf, axis=1)
    if _is_torch(logits):
        import torch

        k = torch.from_numpy(keep).to(logits.device)
        return logits.masked_fill(~k, float("-inf"))
    return np.where(keep, logits, np.array(-np.inf, dtype=np.asarray(logits).dtype))


def top_k(input, k: int, sorted: bool = False, deterministic: bool = False, tie_break: int = 0, dsa_graph_safe: bool = False):
    """The ``k`` largest values of each row of ``input`` ``[B, d]`` and their indices:
    ``(values [B, k] of input's dtype, indices [B, k] int64)``. Ours: always sorted
    descending, ties by lower index (so ``sorted`` and ``tie_break`` change nothing)."""
    x = _host(input)
    if x.ndim != 2:
        raise ValueError(f"input: expected 2 dimensions [batch_size, d], got {x.ndim}")
    v = x.shape[1]
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= v:
        raise ValueError(f"k must be an int in 1..={v}, got {k!r}")
    # Force top-k (section 3.3) is the exact top-k set with lower-id ties; off when k == V.
    ids, _ = _native.top_k_top_p_renorm_logprobs(x, force_topk=k if k < v else None, backend="cpu")
    idx = ids[:, :k].astype(np.int64)
    if _is_torch(input):
        import torch

        ti = torch.from_numpy(idx).to(input.device)
        return torch.gather(input, 1, ti), ti
    return np.take_along_axis(np.asarray(input), idx, axis=1), idx


def chain_speculative_sampling(
    draft_probs,
    draft_token_ids,
    target_probs,
    maybe_output_accepted_token_num=None,
    maybe_output_emitted_draft_token_num=None,
    deterministic: bool = True,
    generator=None,
    seed=None,
    offset=None,
):
    """Chain speculative verification (SAMPLER.md section 6 on section 12's probabilities):
    ``draft_probs`` ``[B, D, V]``, ``draft_token_ids`` ``[B, D]``, ``target_probs``
    ``[B, D + 1, V]``. Returns ``(output_token_ids [B, D + 1] int32, -1 after the stop;
    output_accepted_token_num [B] int32: drafts whose acceptance test passes on its own;
    output_emitted_draft_token_num [B] int32)``; the two counts are also added in place to
    the ``maybe_output_*`` tensors when given. Ours: request i's test of draft j uses
    uniform(seed_i, 3 * (offset + 1 + j * 10000019) + 1); a failed request gives -1 tokens."""
    q = _host(draft_probs)
    d = _host(draft_token_ids, dtype=np.int64)
    t = _host(target_probs)
    seeds, pos = _seeds(seed, offset, d.shape[0] if d.ndim == 2 else 0)
    # A decode request's sample position is at least 1 (SAMPLER.md section 2): offset + 1.
    pos = pos + 1 if isinstance(pos, int) else pos + np.uint64(1)
    tokens, independent, accepted = _native.probs_verify(q, d, t, seed=seeds, positions=pos)
    outs = [_like(tokens, target_probs), _like(independent, target_probs), _like(accepted, target_probs)]
    for dst, src in ((maybe_output_accepted_token_num, 1), (maybe_output_emitted_draft_token_num, 2)):
        if dst is not None:
            dst += outs[src] if _is_torch(dst) else np.asarray(outs[src])
            outs[src] = dst
    return tuple(outs)
