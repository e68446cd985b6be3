"""Binding overhead of sampler_py at R rows (issue 14: at most 5 us per call at R = 64).

    python sampler-py/bench/overhead.py [--rows 64] [--vocab 129280] [--backend cpu|cuda] [--flashinfer] [--json OUT]

Times, on the same inputs, in one run:
- `rust`: the step inside Rust (`_native._bench_rust_step`: no import, no conversion);
- `python`: `Sampler.sample(logits, requests)` from Python (DLPack import,
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


def median_us(fn, iters):
    fn()
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


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
    r, v = a.rows, a.vocab
    logits = (np.random.default_rng(0).standard_normal((r, v)) * 3).astype(np.float32)
    s = sp.Sampler(v, force_topk=a.force_topk, backend=a.backend)
    params = [sp.SamplingParams(temperature=0.7, top_p=0.9, top_k=50, top_logprobs=5, seq_seed=i) for i in range(r)]
    reqs = [sp.Request.prefill(p, 41) for p in params]
    res = {"rows": r, "vocab": v, "force_topk": a.force_topk, "backend": s.backend, "iters": a.iters}
    # Alternate the two so drift (other load) hits both alike.
    rust, py = [], []
    for _ in range(a.iters):
        rust.append(sp._native._bench_rust_step(s, logits, reqs, 1) * 1e6)
        t = time.perf_counter()
        s.sample(logits, reqs)
        py.append((time.perf_counter() - t) * 1e6)
    res["rust_us"] = statistics.median(rust)
    res["python_us"] = statistics.median(py)
    res["overhead_us"] = res["python_us"] - res["rust_us"]
    top_k = np.full(r, 50, np.int64)
    top_p = np.full(r, 0.9, np.float32)
    seeds = np.arange(r, dtype=np.uint64)
    res["functional_us"] = median_us(lambda: sp.top_k_top_p_sampling_from_logits(
        logits, top_k, top_p, temperature=0.7, seed=seeds, force_topk=a.force_topk, backend=a.backend), a.iters)
    # The binding's own fixed cost: a step of one tiny row (kernel time ~ 0).
    tiny = np.zeros((1, 32), np.float32)
    ts = sp.Sampler(32, backend=a.backend)
    treq = [sp.Request.prefill(params[0], 1)]
    res["tiny_python_us"] = median_us(lambda: ts.sample(tiny, treq), max(a.iters, 200))
    res["tiny_rust_us"] = sp._native._bench_rust_step(ts, tiny, treq, 2000) * 1e6
    if a.flashinfer:
        import torch
        from flashinfer import sampling as fs

        x = torch.from_numpy(logits).cuda() / 0.7
        tk = torch.from_numpy(top_k.astype(np.int32)).cuda()
        tp = torch.from_numpy(top_p).cuda()

        def fi():
            fs.top_k_top_p_sampling_from_logits(x, tk, tp)
            torch.cuda.synchronize()

        res["flashinfer_us"] = median_us(fi, a.iters)
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
