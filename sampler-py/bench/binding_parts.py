"""The binding's own argument handling at R rows, without a step (CPU, numpy; low noise).

Needs the wheel built with the `bench` cargo feature (the `_native._bench_*` hooks; off in the
default wheel): `MATURIN_PEP517_ARGS="--features bench" pip install ./sampler-py`, or
`maturin build --release --features bench -m sampler-py/Cargo.toml` (scripts/gpu/round.sh build does).

    python sampler-py/bench/binding_parts.py [--rows 64]

`overhead.py` on a loaded CPU machine drowns these microseconds in the step's jitter, so each
part is timed here up to the point where the call raises before any step runs (the raise
costs the same in every build; compare builds, not absolute values):
- `Sampler.sample` up to the request conversion (R Requests then a bad one: TypeError);
- the functional call's parameters (scalars and an [R] uint64 seed array; unknown backend: ValueError);
- `_native._bench_convert_requests`: the conversion of R requests, timed inside Rust.
Minimum over 7 repeats of 3000 calls, us per call.
"""

import argparse
import timeit

import numpy as np

import sampler_py as sp


def per_call_us(f, n=3000):
    def g():
        try:
            f()
        except (TypeError, ValueError):
            pass

    return min(timeit.repeat(g, number=n, repeat=7)) / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    r = ap.parse_args().rows
    v = 32
    logits = (np.random.default_rng(0).standard_normal((r, v)) * 3).astype(np.float32)
    s = sp.Sampler(v, force_topk=0, backend="cpu")
    reqs = [sp.Request.prefill(sp.SamplingParams(temperature=0.7, top_p=0.9, top_k=50, top_logprobs=5, seq_seed=i), 41) for i in range(r)]
    bad = reqs + [None]
    seeds = np.arange(r, dtype=np.uint64)
    if hasattr(sp._native, "_bench_convert_requests"):
        conv = min(sp._native._bench_convert_requests(reqs, 3000) for _ in range(7)) * 1e6
        print(f"convert {r} requests (timed in Rust): {conv:.2f} us")
    print(f"Sampler.sample up to the request conversion ({r} + a bad one, raises): {per_call_us(lambda: s.sample(logits, bad)):.2f} us")
    f = sp.top_k_top_p_sampling_from_logits
    print(f"functional parameters, scalars + [R] uint64 seeds (raises at backend): "
          f"{per_call_us(lambda: f(logits, 50, 0.9, temperature=0.7, seed=seeds, positions=41, backend='nope')):.2f} us")
    print(f"functional parameters, all scalars (raises at backend): "
          f"{per_call_us(lambda: f(logits, 50, 0.9, temperature=0.7, seed=7, positions=41, backend='nope')):.2f} us")


if __name__ == "__main__":
    main()
