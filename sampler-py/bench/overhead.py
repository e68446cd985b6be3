"""Binding overhead of sampler_py at R rows (issue 14: at most 5 us per call at R = 64).

    python sampler-py/bench/overhead.py [--rows 64] [--vocab 129280] [--backend cpu|cuda] [--flashinfer] [--json OUT]

Times, on the same inputs, in one run:
- `rust`: the step inside Rust (`_native._bench_rust_step`: no import, no conversion);
- `python`: `Sampler.sample(logits, requests)` from Python, reading tokens, logprobs, top_ids (DLPack import,
  request conversion, GIL release, output arrays); overhead = python - rust;
- `functional`: `top_k_top_p_sampling_from_logits(logits, top_k, top_p, ...)` with [R] tensors;
- `flashinfer` (--flashinfer, CUDA): FlashInfer's `top_k_top_p_sampling_from_logits`
  on torch CUDA tensors of the same values (its own timing, for the side-by-side table).
Medians over --iters calls. Logits are host numpy arrays until the device API is wired
(TODO(engine branch): pass the torch CUDA tensor itself and time a CUDA-graph replay).
"""

import argparse
import json
import statistics
import time

import numpy as np

import sampler_py as sp


def paired(rust_fn, py_fn, iters):
    """Alternates one Rust-timed step and one Python call (so load drift hits
    both alike); returns medians and minima in us and the overhead (python - rust)."""
    rust_fn()
    py_fn()
    ru, py = [], []
    for _ in range(iters):
        ru.append(rust_fn() * 1e6)
        t = time.perf_counter()
        py_fn()
        py.append((time.perf_counter() - t) * 1e6)
    med, lo = statistics.median, min
    return {"rust_us": med(ru), "python_us": med(py), "overhead_us": med(py) - med(ru),
            "rust_min_us": lo(ru), "python_min_us": lo(py), "overhead_min_us": lo(py) - lo(ru)}


def case(r, v, force_topk, backend, iters):
    logits = (np.random.default_rng(0).standard_normal((r, v)) * 3).astype(np.float32)
    s = sp.Sampler(v, force_topk=force_topk, backend=backend)
    reqs = [sp.Request.prefill(sp.SamplingParams(temperature=0.7, top_p=0.9, top_k=50, top_logprobs=5, seq_seed=i), 41) for i in range(r)]
    res = {"rows": r, "vocab": v, "force_topk": force_topk, "backend": s.backend, "iters": iters}
    # Sampler.sample, reading the three arrays an engine reads.
    def py_sample():
        o = s.sample(logits, reqs)
        o.tokens, o.logprobs, o.top_ids
    res["sampler"] = paired(lambda: sp._native._bench_rust_step(s, logits, reqs, 1), py_sample, iters)
    # The functional API on [R] tensors vs the same requests in Rust.
    top_k = np.full(r, 50, np.int64)
    top_p = np.full(r, 0.9, np.float32)
    seeds = np.arange(r, dtype=np.uint64)
    freqs = [sp.Request.prefill(sp.SamplingParams(temperature=0.7, top_p=0.9, top_k=50, seq_seed=i), 41) for i in range(r)]
    res["functional"] = paired(
        lambda: sp._native._bench_rust_step(s, logits, freqs, 1),
        lambda: sp.top_k_top_p_sampling_from_logits(logits, top_k, top_p, temperature=0.7, seed=seeds, positions=41,
                                                    force_topk=force_topk, backend=backend),
        iters)
    return res, logits, top_k, top_p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=129280)
    ap.add_argument("--force-topk", type=int, default=1024)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--flashinfer", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    out = {}
    # Full size: the step as engines run it.
    out["full"], logits, top_k, top_p = case(a.rows, a.vocab, a.force_topk, a.backend, a.iters)
    # V = 32: the step costs ~nothing, so the difference is the binding's own cost with little noise.
    out["binding_only"], _, _, _ = case(a.rows, 32, 0, a.backend, max(a.iters, 500))
    if a.flashinfer:
        import torch
        from flashinfer import sampling as fs

        x = torch.from_numpy(logits).cuda() / 0.7
        tk = torch.from_numpy(top_k.astype(np.int32)).cuda()
        tp = torch.from_numpy(top_p).cuda()

        def fi():
            fs.top_k_top_p_sampling_from_logits(x, tk, tp)
            torch.cuda.synchronize()

        fi()
        ts = []
        for _ in range(a.iters):
            t = time.perf_counter()
            fi()
            ts.append((time.perf_counter() - t) * 1e6)
        out["flashinfer_us"] = statistics.median(ts)
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
