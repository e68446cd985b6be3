// Shared harness of the selection-only anchors (issue 12, "How it is measured"): CUB's
// DeviceBatchedTopK and DeepSelect's fp32 top-k, beside our sampler on the H200.
//
// Each driver times one library call that selects the k largest of each row of fp32 logits
// `[R, V]` (V = 129280, row-major, contiguous) and nothing else. Timing follows our benchmark
// (scripts/gpu/round.sh speed, examples/benchmark): the L2 is flushed before every repetition by a 256 MiB
// cudaMemsetAsync, the call is bracketed by CUDA events, and the median of `reps` repetitions is
// reported in microseconds. Bandwidth is R * V * 4 bytes (one read of the logits) over that median.
// Each shape is timed twice: replaying a CUDA graph of the call ("graph", the primary number, as our
// benchmark does) and calling it eagerly ("eager", host-side dispatch included).
//
// Correctness is checked on every shape against an exact host reference for two rows (the first
// and the last), and on a separate row full of ties at the k-th value:
//   - "set_ok":   the selected values, as a multiset, equal the k largest values of the row;
//   - "lowid_ok": the selected ids equal the ids chosen by (value desc, id asc), our tie rule
//                 (SAMPLER.md); on the tie row this tells whether the library keeps that rule.
// Output: one JSON object per line on stdout (the device script collects them into anchors.json).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#define ANCHOR_CHECK(call)                                                                            \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__,     \
                         __LINE__, cudaGetErrorString(e_));                                           \
            std::exit(2);                                                                             \
        }                                                                                             \
    } while (0)

namespace anchor {

constexpr uint32_t kVocab = 129280;
constexpr size_t kFlushBytes = 256ull << 20;

// Deterministic logits with our benchmark's distribution (examples/benchmark.rs `bench_inputs`):
// 3 x N(0, 1) made as a centred sum of four uniforms times 3 * sqrt(3), here from a hash instead of
// its host RNG; ties are rare. The tie row rounds them to multiples of 1/4, so hundreds of logits
// share the value at the k-th place (about 220 at k = 1024, 750 at k = 4096).
__device__ __forceinline__ uint32_t mix(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

__global__ void fill_logits(float* out, size_t n, uint32_t seed, int quantize) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = mix((uint32_t)i * 4u + seed);
        float s = 0.f;
        for (int j = 0; j < 4; ++j) {
            h = mix(h + 0x9e3779b9U * (j + 1));
            s += (h >> 8) * (1.0f / 16777216.0f);
        }
        float v = (s - 2.0f) * 5.196152f;
        if (quantize) v = rintf(v * 4.0f) / 4.0f;
        out[i] = v;
    }
}

inline std::vector<int> parse_list(const char* s) {
    std::vector<int> v;
    std::string str(s);
    size_t p = 0;
    while (p < str.size()) {
        size_t q = str.find(',', p);
        if (q == std::string::npos) q = str.size();
        if (q > p) v.push_back(std::atoi(str.substr(p, q - p).c_str()));
        p = q + 1;
    }
    return v;
}

struct Options {
    std::vector<int> rows{1, 16, 64, 256, 384};
    int reps = 30;
    int warmup = 3;
};

inline Options parse_options(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--rows")) o.rows = parse_list(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--reps")) o.reps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--warmup")) o.warmup = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "unknown option %s (expected --rows LIST, --reps N, --warmup N)\n", argv[i]);
            std::exit(2);
        }
    }
    return o;
}

// The exact host reference: ids of the k largest of `row` by (value desc, id asc).
inline std::vector<int> reference_ids(const std::vector<float>& row, int k) {
    std::vector<int> ids(row.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (int)i;
    auto better = [&](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
    std::nth_element(ids.begin(), ids.begin() + k, ids.end(), better);
    ids.resize(k);
    std::sort(ids.begin(), ids.end());
    return ids;
}

struct Check {
    bool set_ok = true;    // values as a multiset equal the exact top-k values
    bool lowid_ok = true;  // ids equal the (value desc, id asc) choice
    bool ids_valid = true; // every id in [0, V) and distinct
};

// Checks one row: `got_ids` are the ids the library returned for it (any order).
inline Check check_row(const std::vector<float>& row, std::vector<int> got_ids, int k) {
    Check c;
    std::vector<int> ref = reference_ids(row, k);
    std::sort(got_ids.begin(), got_ids.end());
    for (size_t i = 0; i < got_ids.size(); ++i) {
        if (got_ids[i] < 0 || got_ids[i] >= (int)row.size() || (i > 0 && got_ids[i] == got_ids[i - 1])) {
            c.ids_valid = false;
        }
    }
    if (!c.ids_valid) { c.set_ok = false; c.lowid_ok = false; return c; }
    c.lowid_ok = got_ids == ref;
    std::vector<float> gv, rv;
    for (int i : got_ids) gv.push_back(row[i]);
    for (int i : ref) rv.push_back(row[i]);
    std::sort(gv.begin(), gv.end());
    std::sort(rv.begin(), rv.end());
    c.set_ok = gv == rv;
    return c;
}

inline double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    if (n == 0) return NAN;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `launch(stream)` `reps` times, each after a 256 MiB memset that evicts the logits from L2.
// With `graph`, the call is captured once into a CUDA graph and the graph is replayed; a capture
// failure returns NAN (the caller reports it) instead of aborting the other shapes.
template <typename Launch>
double time_median_us(Launch&& launch, cudaStream_t stream, void* flush, int reps, int warmup, bool graph,
                      std::string* why) {
    cudaGraphExec_t exec = nullptr;
    if (graph) {
        cudaGraph_t g = nullptr;
        if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
            *why = "begin capture failed";
            return NAN;
        }
        cudaError_t le = launch(stream);
        cudaError_t ce = cudaStreamEndCapture(stream, &g);
        if (le != cudaSuccess || ce != cudaSuccess || g == nullptr) {
            *why = std::string("capture failed: ") + cudaGetErrorString(le != cudaSuccess ? le : ce);
            (void)cudaGetLastError();
            if (g) cudaGraphDestroy(g);
            return NAN;
        }
        if (cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
            *why = "graph instantiate failed";
            (void)cudaGetLastError();
            cudaGraphDestroy(g);
            return NAN;
        }
        cudaGraphDestroy(g);
    }
    auto run = [&]() -> cudaError_t { return graph ? cudaGraphLaunch(exec, stream) : launch(stream); };
    cudaEvent_t a, b;
    ANCHOR_CHECK(cudaEventCreate(&a));
    ANCHOR_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < warmup; ++i) ANCHOR_CHECK(run());
    ANCHOR_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
        ANCHOR_CHECK(cudaMemsetAsync(flush, i & 0xff, kFlushBytes, stream));
        ANCHOR_CHECK(cudaEventRecord(a, stream));
        ANCHOR_CHECK(run());
        ANCHOR_CHECK(cudaEventRecord(b, stream));
        ANCHOR_CHECK(cudaEventSynchronize(b));
        float t = 0.f;
        ANCHOR_CHECK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (exec) cudaGraphExecDestroy(exec);
    return median(ms) * 1000.0;
}

inline void print_result(const char* anchor, const char* variant, const char* tie_rule, int rows, int k,
                         double graph_us, double eager_us, const Check& first, const Check& last,
                         const Check* tie, const std::string& note) {
    double bytes = (double)rows * kVocab * 4.0;
    double us = std::isnan(graph_us) ? eager_us : graph_us;
    auto b = [](bool x) { return x ? "true" : "false"; };
    std::printf("{\"anchor\": \"%s\", \"variant\": \"%s\", \"tie_rule\": \"%s\", \"V\": %u, \"R\": %d, \"k\": %d, "
                "\"us\": %.2f, \"graph_us\": %.2f, \"eager_us\": %.2f, \"gbps\": %.1f, "
                "\"set_ok\": %s, \"lowid_ok\": %s, \"tie_row_set_ok\": %s, \"tie_row_lowid_ok\": %s, \"note\": \"%s\"}\n",
                anchor, variant, tie_rule, kVocab, rows, k, us, std::isnan(graph_us) ? -1.0 : graph_us,
                std::isnan(eager_us) ? -1.0 : eager_us, std::isnan(us) ? 0.0 : bytes / (us * 1e3),
                b(first.set_ok && last.set_ok && first.ids_valid && last.ids_valid),
                b(first.lowid_ok && last.lowid_ok), tie ? b(tie->set_ok) : "null", tie ? b(tie->lowid_ok) : "null",
                note.c_str());
    std::fflush(stdout);
}

// A shape whose first call failed: one line with the error, so the other shapes still run.
inline void print_failure(const char* anchor, const char* variant, int rows, int k, cudaError_t e) {
    std::printf("{\"anchor\": \"%s\", \"variant\": \"%s\", \"V\": %u, \"R\": %d, \"k\": %d, \"error\": \"%s: %s\"}\n",
                anchor, variant, kVocab, rows, k, cudaGetErrorName(e), cudaGetErrorString(e));
    std::fflush(stdout);
}

// Runs `launch` once and waits: the error of the call or of the kernel, if any.
template <typename Launch>
cudaError_t try_once(Launch&& launch, cudaStream_t stream) {
    cudaError_t e = launch(stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    return e;
}

// Device buffers shared by the drivers: logits for the largest R, the flush buffer, a tie row.
struct Buffers {
    float* logits = nullptr; // [max_rows, V]
    float* tie = nullptr;    // [1, V], quantized
    void* flush = nullptr;
    size_t max_rows = 0;

    explicit Buffers(size_t rows) : max_rows(rows) {
        ANCHOR_CHECK(cudaMalloc(&logits, rows * kVocab * sizeof(float)));
        ANCHOR_CHECK(cudaMalloc(&tie, kVocab * sizeof(float)));
        ANCHOR_CHECK(cudaMalloc(&flush, kFlushBytes));
        fill_logits<<<1024, 256>>>(logits, rows * kVocab, 12345u, 0);
        fill_logits<<<1024, 256>>>(tie, kVocab, 777u, 1);
        ANCHOR_CHECK(cudaGetLastError());
        ANCHOR_CHECK(cudaDeviceSynchronize());
    }
    ~Buffers() {
        cudaFree(logits);
        cudaFree(tie);
        cudaFree(flush);
    }
    std::vector<float> row(const float* base, size_t r) const {
        std::vector<float> h(kVocab);
        ANCHOR_CHECK(cudaMemcpy(h.data(), base + r * kVocab, kVocab * sizeof(float), cudaMemcpyDeviceToHost));
        return h;
    }
};

inline std::vector<int> download_ids(const int* d_ids, size_t r, int k) {
    std::vector<int> h(k);
    ANCHOR_CHECK(cudaMemcpy(h.data(), d_ids + r * (size_t)k, k * sizeof(int), cudaMemcpyDeviceToHost));
    return h;
}

} // namespace anchor
