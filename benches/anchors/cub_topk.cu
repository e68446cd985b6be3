// Selection anchor 1: cub::DeviceBatchedTopK::MaxPairs from CCCL main (header-only), SM90 cluster
// backend, on fp32 logits [R, V = 129280]: keys = logits, values = ids 0..V-1 of each row.
//
// Build (scripts/gpu/anchors.sh does it, one binary per k and tie mode):
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -DANCHOR_K=1024 -DCUB_LOWID=1 \
//        -DCUB_DISABLE_TOPK_UNSUPPORTED_ARCH_ASSERT \
//        -I cccl/cub -I cccl/libcudacxx/include -I cccl/thrust cub_topk.cu -o cub_k1024_lowid
// CUB_DISABLE_TOPK_UNSUPPORTED_ARCH_ASSERT: with nvcc 13.0 a deterministic request otherwise stops
// at a static_assert in the (discarded) baseline arm of CCCL's dispatch; see docs/gpu/HOWTO.md.
//
// CUB_LOWID=1: determinism::gpu_to_gpu + tie_break::prefer_smaller_index, i.e. among equal keys the
//              lower ids are kept (our tie rule); the fastest request that keeps it.
// CUB_LOWID=0: determinism::not_guaranteed + tie_break::unspecified (any tied subset), for scale.
// Output ordering is `unsorted` in both: CCCL main implements no sorted ordering for this API yet.
#include <cub/device/device_batched_topk.cuh>

#include <cuda/__execution/determinism.h>
#include <cuda/__execution/output_ordering.h>
#include <cuda/__execution/require.h>
#include <cuda/__execution/tie_break.h>
#include <cuda/argument>
#include <cuda/iterator>
#include <cuda/std/__execution/env.h>
#include <cuda/std/cstdint>
#include <cuda/stream>

#include "harness.cuh"

#ifndef ANCHOR_K
#error "define ANCHOR_K (1024 or 4096)"
#endif
#ifndef CUB_LOWID
#define CUB_LOWID 1
#endif

namespace {

// The selection requirements (see the file head), as a `cuda::execution::require` value.
auto requirements() {
#if CUB_LOWID
    return cuda::execution::require(cuda::execution::determinism::gpu_to_gpu,
                                    cuda::execution::tie_break::prefer_smaller_index,
                                    cuda::execution::output_ordering::unsorted);
#else
    return cuda::execution::require(cuda::execution::determinism::not_guaranteed,
                                    cuda::execution::tie_break::unspecified,
                                    cuda::execution::output_ordering::unsorted);
#endif
}

// One call of the library on rows [0, rows) of `logits`; `temp == nullptr` queries the size.
cudaError_t call(void* temp, size_t& temp_bytes, const float* logits, float* keys_out, int* ids_out, int rows,
                 cudaStream_t stream) {
    constexpr int V = (int)anchor::kVocab;
    constexpr int K = ANCHOR_K;
    auto d_keys_in = cuda::make_strided_iterator(cuda::make_counting_iterator(logits), V);
    auto d_keys_out = cuda::make_strided_iterator(cuda::make_counting_iterator(keys_out), K);
    // Every row's values are its ids 0..V-1: an iterator that yields the same counting iterator.
    auto d_values_in = cuda::make_constant_iterator(cuda::make_counting_iterator(0));
    auto d_values_out = cuda::make_strided_iterator(cuda::make_counting_iterator(ids_out), K);
    constexpr auto segment_sizes = cuda::args::constant<V>{};
    constexpr auto k_arg = cuda::args::constant<K>{};
    auto num_segs = cuda::args::immediate{cuda::std::int64_t{rows}};
    // The stream travels in the environment next to the requirements.
    auto env = cuda::std::execution::env{requirements(), cuda::stream_ref{stream}};
    return cub::DeviceBatchedTopK::MaxPairs(temp, temp_bytes, d_keys_in, d_keys_out, d_values_in, d_values_out,
                                            segment_sizes, k_arg, num_segs, env);
}

} // namespace

int main(int argc, char** argv) {
    anchor::Options opt = anchor::parse_options(argc, argv);
    int max_rows = *std::max_element(opt.rows.begin(), opt.rows.end());
    anchor::Buffers buf(max_rows);
    constexpr int K = ANCHOR_K;
    float* keys_out = nullptr;
    int* ids_out = nullptr;
    ANCHOR_CHECK(cudaMalloc(&keys_out, (size_t)max_rows * K * sizeof(float)));
    ANCHOR_CHECK(cudaMalloc(&ids_out, (size_t)max_rows * K * sizeof(int)));
    cudaStream_t stream;
    ANCHOR_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const char* variant = CUB_LOWID ? "gpu_to_gpu+prefer_smaller_index" : "not_guaranteed";
    const char* tie_rule = CUB_LOWID ? "lower id" : "unspecified";

    // The tie row: does the request keep lower ids among equal keys at the k-th value?
    // A failure here leaves the tie fields null and the timed shapes still run.
    anchor::Check tie;
    bool tie_ran = false;
    {
        size_t bytes = 0;
        if (call(nullptr, bytes, buf.tie, keys_out, ids_out, 1, stream) == cudaSuccess) {
            void* temp = nullptr;
            ANCHOR_CHECK(cudaMalloc(&temp, bytes > 0 ? bytes : 1));
            auto launch = [&](cudaStream_t s) { return call(temp, bytes, buf.tie, keys_out, ids_out, 1, s); };
            if (cudaError_t e = anchor::try_once(launch, stream); e == cudaSuccess) {
                tie = anchor::check_row(buf.row(buf.tie, 0), anchor::download_ids(ids_out, 0, K), K);
                tie_ran = true;
            } else {
                std::fprintf(stderr, "cub tie row: %s\n", cudaGetErrorString(e));
                (void)cudaGetLastError();
            }
            cudaFree(temp);
        }
    }

    for (int rows : opt.rows) {
        size_t bytes = 0;
        cudaError_t e = call(nullptr, bytes, buf.logits, keys_out, ids_out, rows, stream);
        if (e != cudaSuccess) {
            std::fprintf(stderr, "cub R=%d k=%d: temp-size query failed: %s\n", rows, K, cudaGetErrorString(e));
            continue;
        }
        void* temp = nullptr;
        ANCHOR_CHECK(cudaMalloc(&temp, bytes > 0 ? bytes : 1));
        auto launch = [&](cudaStream_t s) { return call(temp, bytes, buf.logits, keys_out, ids_out, rows, s); };
        if (cudaError_t e = anchor::try_once(launch, stream); e != cudaSuccess) {
            anchor::print_failure("cub_batched_topk", variant, rows, K, e);
            (void)cudaGetLastError();
            cudaFree(temp);
            continue;
        }
        std::string why;
        double eager = anchor::time_median_us(launch, stream, buf.flush, opt.reps, opt.warmup, false, &why);
        double graph = anchor::time_median_us(launch, stream, buf.flush, opt.reps, opt.warmup, true, &why);
        // Results of the last call (eager or graph: the same inputs).
        ANCHOR_CHECK(launch(stream));
        ANCHOR_CHECK(cudaStreamSynchronize(stream));
        anchor::Check first = anchor::check_row(buf.row(buf.logits, 0), anchor::download_ids(ids_out, 0, K), K);
        anchor::Check last =
            anchor::check_row(buf.row(buf.logits, rows - 1), anchor::download_ids(ids_out, rows - 1, K), K);
        std::string note = std::string("temp ") + std::to_string(bytes) + " B" + (why.empty() ? "" : "; " + why);
        anchor::print_result("cub_batched_topk", variant, tie_rule, rows, K, graph, eager, first, last,
                             tie_ran ? &tie : nullptr, note);
        cudaFree(temp);
    }
    cudaFree(keys_out);
    cudaFree(ids_out);
    cudaStreamDestroy(stream);
    return 0;
}
