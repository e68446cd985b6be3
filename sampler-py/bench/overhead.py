"""Binding overhead of sampler_py at R rows (issue 14: at most 5 us per call at R = 64).

Needs the wheel built with the `bench` cargo feature (the `_native._bench_*` hooks; off in the
default wheel): `MATURIN_PEP517_ARGS="--features bench" pip install ./sampler-py`, or
`maturin build --release --features bench -m sampler-py/Cargo.toml` (scripts/gpu/round.sh build does).

    python sampler-py/bench/overhead.py [--rows 64] [--vocab 129280] [--backend cpu|cuda] [--torch] [--flashinfer] [--json OUT]

Times, on the same inputs, in one run:
- `rust`: the step inside Rust (`_native._bench_rust_step`: no import, no conversion);
- `python`: `Sampler.sample(logits, requests)` from Python, reading tokens, logprobs, top_ids (DLPack import,
  request conversion, GIL release, output arrays); overhead = python - rust;
- `functional`: `top_k_top_p_sampling_from_logits(logits, top_k, top_p, ...)` with [R] tensors;
- `flashinfer` (--flashinfer, CUDA): FlashInfer's `top_k_top_p_sampling_from_logits`
  on torch CUDA tensors of the same values (its own timing, for the side-by-side table).
- `--torch` (CUDA): the logits as a torch CUDA tensor, the device path. HOST time of each
  call (the device is synchronised between calls, untimed): `rust` = `sample_async` on the
  caller's stream inside Rust (`_native._bench_rust_step_cuda`), `python` = `Sampler.sample`
  (torch import by attributes, current stream, request conversion, the output buffer written
  by the kernels, the stream join; the result is dropped, so its buffer is reused by the next
  call, `reuse_outputs`), `python_out` = the same with `out=`, `python_held` = the same while
  the last 4 results are held (a new buffer from torch's allocator every call),
  `python_tokens` = the functional call returning tokens only (its parameters converted per
  call); overhead = python - rust. Beside them the
  end-to-end time (call + synchronize) and a CUDA-graph replay of ours and of FlashInfer's call.
Medians over --iters calls.

The issue's figure (`OVERHEAD-SAME-CALL` lines): with the bench-only API clock on
(`_native._bench_api_clock`), every step records the host time it spent inside the Rust API
(the same span `_bench_rust_step_cuda` times: the logits handle, `sample_async_into` less our
output-allocation callback, the caller-stream join; on the host `Sampler::sample`), and the
binding overhead of a call is its host time minus that of the SAME call: fresh output
(`Sampler.sample`: a range of the output slab, or torch's allocator once per slab; the same
Request objects every call, whose conversion the sampler keeps; "new Request objects each call":
the same call on two lists of distinct Request objects alternately, so that nothing is reused), `out=`, and
the functional call, median and min over --iters; with `_native._bench_slabs` the fresh and
functional calls again with the slabs off (torch allocates per call and the dropped result
frees it: the figure before the slabs), in the same run. The older `OVERHEAD` lines subtract a separate
Rust-timed step (call-to-call noise of several us on the H200 host: run 13 read +7.6 and
+15.5 us for the same `out=` call).
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
    fn_call = lambda: sp.top_k_top_p_sampling_from_logits(logits, top_k, top_p, temperature=0.7, seed=seeds, positions=41,
                                                          force_topk=force_topk, backend=backend)
    res["functional"] = paired(lambda: sp._native._bench_rust_step(s, logits, freqs, 1), fn_call, iters)
    if has_clock():
        # The host path has no out=: "out" repeats the plain call (the same figure).
        sp._native._bench_api_clock(True)
        tot = {"fresh": [], "functional": []}
        api = {"fresh": [], "functional": []}
        for _ in range(iters):
            for key, f in (("fresh", lambda: s.sample(logits, reqs)), ("functional", fn_call)):
                t = time.perf_counter()
                o = f()  # held while timed: its drop frees the Rust StepOutput (the API's own output)
                tot[key].append((time.perf_counter() - t) * 1e6)
                api[key].append(sp._native._bench_api_ns() / 1e3)
                del o
        sp._native._bench_api_clock(False)
        res["same_call_us"] = {k: same_call(tot[k], api[k]) for k in tot}
        res["same_call_us"]["out"] = res["same_call_us"]["fresh"]
    return res, logits, top_k, top_p


def host_us(fn, api=None):
    """Host time of one call in us, the device idle before and synchronised after (untimed).
    `api`: a list that gets the Rust API's host us of that same call (the API clock)."""
    import torch

    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    dt = (time.perf_counter() - t) * 1e6
    if api is not None:
        api.append(sp._native._bench_api_ns() / 1e3)
    torch.cuda.synchronize()
    return dt


def same_call(total, api):
    """Binding overhead per call from the API clock: each call's host time minus the Rust
    API's host time inside THAT call (no call-to-call noise); median and min, us."""
    d = [t - a for t, a in zip(total, api)]
    return {"median": statistics.median(d), "min": min(d), "api_median": statistics.median(api)}


def has_clock():
    return hasattr(sp._native, "_bench_api_clock")


def total_us(fn, iters):
    """Median of call + synchronize (host and device), us."""
    import torch

    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e6)
    return statistics.median(ts)


def graph_us(fn, iters):
    """Median of a CUDA-graph replay of `fn` + synchronize, us (None when the capture fails)."""
    import torch

    try:
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
    except Exception as e:  # noqa: BLE001 - reported, the rest of the table still runs
        return f"capture failed: {e}"
    return total_us(g.replay, iters)


def torch_case(r, v, force_topk, iters, flashinfer):
    import torch

    med = statistics.median
    x = torch.from_numpy((np.random.default_rng(0).standard_normal((r, v)) * 3).astype(np.float32)).cuda()
    s = sp.Sampler(v, force_topk=force_topk, backend="cuda")
    reqs = [sp.Request.prefill(sp.SamplingParams(temperature=0.7, top_p=0.9, top_k=50, top_logprobs=5, seq_seed=i), 41) for i in range(r)]
    seeds = np.arange(r, dtype=np.uint64)
    res = {"rows": r, "vocab": v, "force_topk": force_topk, "iters": iters}
    rust_fn = lambda: sp._native._bench_rust_step_cuda(s, x, reqs, 1)[0] * 1e6
    py_fn = lambda: s.sample(x, reqs)
    # New Request objects every call (an engine that rebuilds them each step): the sampler's
    # cache of the last call's requests (issue 26) never hits; two lists alternate, on a sampler
    # of their own (on `s` they would evict `reqs` from its cache before the other calls).
    s_new = sp.Sampler(v, force_topk=force_topk, backend="cuda")
    new_lists = [[sp.Request.prefill(sp.SamplingParams(temperature=0.7, top_p=0.9, top_k=50, top_logprobs=5, seq_seed=i), 41) for i in range(r)] for _ in range(2)]
    turn = [0]

    def py_new():
        turn[0] ^= 1
        return s_new.sample(x, new_lists[turn[0]])
    prev = s.sample(x, reqs)
    py_out = lambda: s.sample(x, reqs, out=prev)
    py_read = lambda: s.sample(x, reqs).tokens
    held = []

    def py_held():  # results held: the buffer cannot be reused, torch allocates
        held.append(s.sample(x, reqs))
        del held[:-4]
    fn_fn = lambda: sp.top_k_top_p_sampling_from_logits(x, 50, 0.9, temperature=0.7, seed=seeds, positions=41, force_topk=force_topk)
    # The output pool (off by default since run 13): the dropped result's buffer comes back.
    s_pool = sp.Sampler(v, force_topk=force_topk, backend="cuda", reuse_outputs=True)
    py_pool = lambda: s_pool.sample(x, reqs)
    for f in (rust_fn, py_fn, py_read, fn_fn, py_out, py_held, py_pool, py_new):
        f()
    clock = has_clock()
    if clock:
        sp._native._bench_api_clock(True)
    ru, py, pr, fu, po, ph, pp = [], [], [], [], [], [], []
    a_py, a_fu, a_po, a_pp = ([] if clock else None for _ in range(4))
    # A/B of the output slabs (fresh outputs as ranges of a shared buffer): off, torch allocates per call.
    ab = hasattr(sp._native, "_bench_slabs")
    py_ns, fu_ns, a_py_ns, a_fu_ns = [], [], [], []
    pn, a_pn = [], ([] if clock else None)
    for _ in range(iters):  # alternated, so drift hits all alike
        torch.cuda.synchronize()
        ru.append(rust_fn())
        py.append(host_us(py_fn, a_py))
        pr.append(host_us(py_read))
        fu.append(host_us(fn_fn, a_fu))
        po.append(host_us(py_out, a_po))
        ph.append(host_us(py_held))
        pp.append(host_us(py_pool, a_pp))
        pn.append(host_us(py_new, a_pn))
        if ab and clock:
            sp._native._bench_slabs(False)
            try:
                py_ns.append(host_us(py_fn, a_py_ns))
                fu_ns.append(host_us(fn_fn, a_fu_ns))
            finally:
                sp._native._bench_slabs(True)
    if clock:
        sp._native._bench_api_clock(False)
        # The figure: the Python call minus the Rust API's host time of the same call.
        res["same_call_us"] = {"fresh": same_call(py, a_py), "out": same_call(po, a_po), "functional": same_call(fu, a_fu),
                               "pool": same_call(pp, a_pp), "new_requests": same_call(pn, a_pn)}
        if py_ns:
            res["same_call_us"]["fresh_no_slab"] = same_call(py_ns, a_py_ns)
            res["same_call_us"]["functional_no_slab"] = same_call(fu_ns, a_fu_ns)
    res["host_us"] = {"rust": med(ru), "python": med(py), "python_read_tokens": med(pr), "python_tokens": med(fu), "python_out": med(po), "python_held": med(ph),
                      "rust_min": min(ru), "python_min": min(py), "python_tokens_min": min(fu)}
    res["overhead_us"] = med(py) - med(ru)
    res["overhead_tokens_us"] = med(fu) - med(ru)
    res["overhead_out_us"] = med(po) - med(ru)
    res["overhead_held_us"] = med(ph) - med(ru)
    held.clear()
    res["end_to_end_us"] = {"python": total_us(py_fn, iters), "python_tokens": total_us(fn_fn, iters)}
    res["graph_replay_us"] = {"python": graph_us(py_fn, iters), "python_tokens": graph_us(fn_fn, iters)}
    if flashinfer:
        try:
            from flashinfer import sampling as fs

            xt = x / 0.7
            tk = torch.full((r,), 50, dtype=torch.int32, device="cuda")
            tp = torch.full((r,), 0.9, dtype=torch.float32, device="cuda")
            fi = lambda: fs.top_k_top_p_sampling_from_logits(xt, tk, tp)
            fi()
            res["flashinfer"] = {"host_us": med([host_us(fi) for _ in range(iters)]), "end_to_end_us": total_us(fi, iters),
                                 "graph_replay_us": graph_us(fi, iters)}
        except Exception as e:  # noqa: BLE001
            res["flashinfer"] = f"failed: {e}"
    return res


def overhead_lines(out):
    """The lines the runs' NOTES.md (docs/bench/<run>/) record: binding overhead (python - rust, median us) per call."""
    lines = []
    for name, r in out.items():
        if not isinstance(r, dict):
            continue
        if "same_call_us" in r:  # the API clock: each call minus its own Rust API time
            sc = r["same_call_us"]
            dev = "torch CUDA" if "overhead_us" in r else r.get("backend", "")
            lines.append(f"OVERHEAD-SAME-CALL {name} R={r['rows']} V={r['vocab']} {dev}: Rust API {sc['fresh']['api_median']:.1f} us; "
                         f"binding (Python call minus its own Rust API time, median / min): "
                         f"fresh output +{sc['fresh']['median']:.1f} / +{sc['fresh']['min']:.1f} us, "
                         f"out= +{sc['out']['median']:.1f} / +{sc['out']['min']:.1f} us, "
                         f"functional +{sc['functional']['median']:.1f} / +{sc['functional']['min']:.1f} us (target <= 5 us)"
                         + (f"; reuse_outputs=True +{sc['pool']['median']:.1f} / +{sc['pool']['min']:.1f} us" if "pool" in sc else "")
                         + (f"; new Request objects each call +{sc['new_requests']['median']:.1f} / +{sc['new_requests']['min']:.1f} us" if "new_requests" in sc else "")
                         + (f"; slabs off (torch allocates per call): fresh +{sc['fresh_no_slab']['median']:.1f} / +{sc['fresh_no_slab']['min']:.1f} us, "
                            f"functional +{sc['functional_no_slab']['median']:.1f} / +{sc['functional_no_slab']['min']:.1f} us" if "fresh_no_slab" in sc else ""))
        if "overhead_us" in r:  # --torch
            h = r["host_us"]
            lines.append(f"OVERHEAD {name} R={r['rows']} V={r['vocab']} torch CUDA: Rust API {h['rust']:.1f} us; "
                         f"Sampler.sample +{r['overhead_us']:.1f} us, out= +{r['overhead_out_us']:.1f} us, "
                         f"results held (torch allocates) +{r['overhead_held_us']:.1f} us, "
                         f"functional tokens +{r['overhead_tokens_us']:.1f} us (target <= 5 us)")
        elif "sampler" in r:
            lines.append(f"OVERHEAD {name} R={r['rows']} V={r['vocab']} {r['backend']}: Rust API {r['sampler']['rust_us']:.1f} us; "
                         f"Sampler.sample +{r['sampler']['overhead_us']:.1f} us (min-based +{r['sampler']['overhead_min_us']:.1f}), "
                         f"functional +{r['functional']['overhead_us']:.1f} us (min-based +{r['functional']['overhead_min_us']:.1f}) (target <= 5 us)")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=129280)
    ap.add_argument("--force-topk", type=int, default=1024)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--flashinfer", action="store_true")
    ap.add_argument("--torch", action="store_true", help="the torch CUDA tensor path (host time per call)")
    ap.add_argument("--json")
    a = ap.parse_args()
    out = {}
    if a.torch:
        out["torch_full"] = torch_case(a.rows, a.vocab, a.force_topk, a.iters, a.flashinfer)
        # V = 1024, force top-k off: a cheap step, the binding's own cost with little noise.
        out["torch_binding_only"] = torch_case(a.rows, 1024, 0, max(a.iters, 200), False)
        print(json.dumps(out, indent=1))
        print("\n".join(overhead_lines(out)))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        return
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
    print("\n".join(overhead_lines(out)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
