"""Host-only profile of the binding's own work per call at R rows (issue 14 item 6: <= 5 us at R = 64).

Needs the wheel built with the `bench` cargo feature (the `_native._bench_*` hooks; off in the
default wheel): `MATURIN_PEP517_ARGS="--features bench" pip install ./sampler-py`, or
`maturin build --release --features bench -m sampler-py/Cargo.toml` (scripts/gpu/round.sh build does).

    python sampler-py/bench/binding_profile.py [--rows 64] [--vocab 129280] [--json OUT]

No GPU needed. Two parts:

1. Pieces (`_native._bench_binding_pieces`, each timed inside Rust over a loop, minimum of 7
   repeats): everything the CUDA call does besides the Rust API, run on a torch CPU tensor
   (the same functions the CUDA path calls; CUDA-only pieces through the analogue named in
   the row: torch's current-stream lookup by another torch C call, torch's CUDA caching
   allocator by the CPU allocator behind the same `new_empty` call), and the host path's
   DLPack import of a numpy array. Needs torch (pip install torch: the CPU runs it).
2. Whole calls on the host path (CPU backend, V = 1024, force top-k off), each minus the
   Rust API's host time inside that same call (`_native._bench_api_clock`): the Python
   call's binding overhead as the GPU round measures it, here for numpy and torch CPU
   logits. The call dispatch (pyo3 argument parsing) is part of these; the drop of the
   result (the Rust `StepOutput`) is not.
"""

import argparse
import json
import statistics
import time
import timeit

import numpy as np

import sampler_py as sp


def pieces(x, reqs, iters, **fn):
    best = {}
    for _ in range(7):
        for name, ns in sp._native._bench_binding_pieces(x, reqs, iters, **fn):
            best[name] = min(best.get(name, float("inf")), ns)
    return {k: v / 1e3 for k, v in best.items()}


def same_call(f, iters):
    """Median and min over `iters` calls of (call's host us - its own Rust API us). The result
    is held until the time is read: its drop frees the Rust `StepOutput` (about 3 us at R = 64),
    which is the Rust API's own output, not binding work."""
    f()
    sp._native._bench_api_clock(True)
    d = []
    try:
        for _ in range(iters):
            t = time.perf_counter_ns()
            o = f()
            dt = time.perf_counter_ns() - t
            d.append((dt - sp._native._bench_api_ns()) / 1e3)
            del o
    finally:
        sp._native._bench_api_clock(False)
    return {"median": statistics.median(d), "min": min(d)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=129280)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--json")
    a = ap.parse_args()
    r = a.rows
    reqs = [sp.Request.prefill(sp.SamplingParams(temperature=0.7, top_p=0.9, top_k=50, top_logprobs=5, seq_seed=i), 41) for i in range(r)]
    seeds = np.arange(r, dtype=np.uint64)
    fn = dict(top_k=50, top_p=0.9, temperature=0.7, seed=seeds, positions=41)
    out = {"rows": r, "vocab": a.vocab}
    xn = np.zeros((r, a.vocab), np.float32)
    try:
        import torch

        xt = torch.zeros((r, a.vocab), dtype=torch.float32)
        out["torch"] = torch.__version__
        out["pieces_torch"] = pieces(xt, reqs, a.iters, **fn)
    except ImportError:
        xt = None
        out["pieces_torch"] = "torch not installed"
    out["pieces_numpy"] = pieces(xn, reqs, a.iters, **fn)

    # The pyo3 dispatch of a call with Sampler.sample's signature (a no-op), minus an empty loop.
    d = sp._native._bench_dispatch
    base = min(timeit.repeat(lambda: None, number=a.iters * 10, repeat=7))
    for kind, x in (("numpy", xn), ("torch", xt)):
        if x is not None:
            t = min(timeit.repeat(lambda: d(x, reqs, out=None), number=a.iters * 10, repeat=7))
            out[f"pieces_{kind}"]["call dispatch: pyo3 argument parsing of sample(x, reqs, out=...) (timed from Python)"] = (t - base) / (a.iters * 10) * 1e6

    # Whole host-path calls at a cheap step (the step's time is subtracted per call anyway).
    v = 1024
    s = sp.Sampler(v, force_topk=0, backend="cpu")
    small = {"numpy": np.random.default_rng(0).standard_normal((r, v)).astype(np.float32)}
    if xt is not None:
        small["torch CPU"] = torch.from_numpy(small["numpy"])
    calls = {}
    n = max(200, a.iters // 4)
    for kind, x in small.items():
        calls[f"Sampler.sample({kind})"] = same_call(lambda: s.sample(x, reqs), n)
        calls[f"functional({kind}, scalars + [R] seeds)"] = same_call(
            lambda: sp.top_k_top_p_sampling_from_logits(x, 50, 0.9, temperature=0.7, seed=seeds, positions=41, backend="cpu"), n)
    out["same_call_host_path"] = calls

    print(f"Binding pieces at R = {r} (us per call, timed in Rust, min of 7 x {a.iters}):")
    for key in ("pieces_torch", "pieces_numpy"):
        if isinstance(out[key], dict):
            for name, us in out[key].items():
                print(f"  {key[7:]:6s} {name:90s} {us:7.3f}")
    print(f"Whole host-path calls at R = {r}, V = {v}: Python call minus its own Rust API time (us, median / min):")
    for name, d in calls.items():
        print(f"  {name:60s} {d['median']:7.2f} / {d['min']:7.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
