// Selection anchor 2: DeepSeek's DeepSelect fp32 top-k kernel (csrc/cuda_kernels/v3_fp32), built
// for sm_90a, on fp32 logits [R, V = 129280]. One CTA per row streams the row once through TMA in a
// pseudo-random segment order, keeps a running threshold and compacts its candidates on chip.
//
// Build (scripts/gpu/anchors.sh does it, one binary per k and output order; DS = the DeepSelect
// source tree that `scripts/gpu/anchors.sh build` stages, CUTLASS = its include/ folder):
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//        --expt-extended-lambda --use_fast_math --ftz=false -DANCHOR_K=1024 -DDS_SORTED=0 \
//        -I $DS/csrc -I $DS/csrc/kerutils/include -I $CUTLASS -I cccl/... deepselect_topk.cu -lcuda
//
// The configurations are the ones DeepSelect's own dispatch (csrc/api.cpp) picks for fp32:
//   k <= 1024:        512 threads, 8192 elements per round, reconstruct threshold 4096, 3 TMA buffers;
//   k in (1024,4096]: 256 threads, 4096 elements per round, reconstruct threshold 4096, 3 TMA buffers.
// DS_SORTED=0: values and ids, unsorted (sorted_value = false, sorted_index = false, return_value);
// DS_SORTED=1: values and ids sorted by value (sorted_value = true), as a sampler would read them.
// Ties: the kernel's own header says not to assume that ties keep the lower ids; the tie row says
// what this build does.
#include <exception>

#include "cuda_kernels/v3_fp32/topk_select.cuh"

#include "harness.cuh"

#ifndef ANCHOR_K
#error "define ANCHOR_K (1024 or 4096)"
#endif
#ifndef DS_SORTED
#define DS_SORTED 0
#endif

namespace {

constexpr bool kSorted = DS_SORTED != 0;
using Config = std::conditional_t<
    (ANCHOR_K <= 1024),
    TopkSelectConfig<float, int32_t, kSorted, false, true, 1024, 512, 1, 8192, 4096, 3>,
    TopkSelectConfig<float, int32_t, kSorted, false, true, 4096, 256, 1, 4096, 4096, 3>>;

struct Call {
    TopkSelectArgs args{};

    Call(const float* logits, float* values_out, int* ids_out, int rows, uint64_t smem_per_sm) {
        args.batch_size = (uint32_t)rows;
        args.vocab_size = anchor::kVocab;
        args.topk = ANCHOR_K;
        args.input = (void*)logits;
        args.output_value = values_out;
        args.output_index = ids_out;
        args.begin_ptr = nullptr;
        args.end_ptr = nullptr;
        args.output_idx_offset = nullptr;
        args.stride_input_batch = anchor::kVocab;
        args.stride_output_value_batch = ANCHOR_K;
        args.stride_output_index_batch = ANCHOR_K;
        args.sorted_value = kSorted;
        args.sorted_index = false;
        args.return_value = true;
        args.idx_oob_fill_value = -1;
        args.value_oob_fill_value = -INFINITY;
        args.abort_when_nan_found = false;
        args.shared_memory_size_per_sm = smem_per_sm;
    }

    // The library reports bad arguments by throwing; one failed shape must not stop the others.
    cudaError_t operator()(cudaStream_t stream) {
        args.stream = stream;
        try {
            topk_select_fp32::run_topk_select_kernel<Config>(args);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "deepselect: %s\n", e.what());
            return cudaErrorLaunchFailure;
        }
        return cudaGetLastError();
    }
};

} // namespace

int main(int argc, char** argv) {
    anchor::Options opt = anchor::parse_options(argc, argv);
    int max_rows = *std::max_element(opt.rows.begin(), opt.rows.end());
    // V * 4 = 517120 bytes = 505 * 1024: every row starts on the 1024-byte boundary the TMA
    // descriptor wants (INPUT_STRIDE_ALIGNMENT_REQUIREMENT).
    static_assert(anchor::kVocab * sizeof(float) % INPUT_STRIDE_ALIGNMENT_REQUIREMENT == 0);
    anchor::Buffers buf(max_rows);
    constexpr int K = ANCHOR_K;
    float* values_out = nullptr;
    int* ids_out = nullptr;
    ANCHOR_CHECK(cudaMalloc(&values_out, (size_t)max_rows * K * sizeof(float)));
    ANCHOR_CHECK(cudaMalloc(&ids_out, (size_t)max_rows * K * sizeof(int)));
    cudaStream_t stream;
    ANCHOR_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int dev = 0;
    ANCHOR_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    ANCHOR_CHECK(cudaGetDeviceProperties(&prop, dev));
    const char* variant = kSorted ? "fp32 sorted_value" : "fp32 unsorted";

    // A failure here leaves the tie fields null and the timed shapes still run.
    anchor::Check tie;
    bool tie_ran = false;
    {
        Call call(buf.tie, values_out, ids_out, 1, prop.sharedMemPerBlockOptin);
        if (cudaError_t e = anchor::try_once(call, stream); e == cudaSuccess) {
            tie = anchor::check_row(buf.row(buf.tie, 0), anchor::download_ids(ids_out, 0, K), K);
            tie_ran = true;
        } else {
            std::fprintf(stderr, "deepselect tie row: %s\n", cudaGetErrorString(e));
            (void)cudaGetLastError();
        }
    }

    for (int rows : opt.rows) {
        Call call(buf.logits, values_out, ids_out, rows, prop.sharedMemPerBlockOptin);
        auto launch = [&](cudaStream_t s) { return call(s); };
        if (cudaError_t e = anchor::try_once(launch, stream); e != cudaSuccess) {
            anchor::print_failure("deepselect", variant, rows, K, e);
            (void)cudaGetLastError();
            continue;
        }
        std::string why;
        double eager = anchor::time_median_us(launch, stream, buf.flush, opt.reps, opt.warmup, false, &why);
        double graph = anchor::time_median_us(launch, stream, buf.flush, opt.reps, opt.warmup, true, &why);
        ANCHOR_CHECK(launch(stream));
        ANCHOR_CHECK(cudaStreamSynchronize(stream));
        anchor::Check first = anchor::check_row(buf.row(buf.logits, 0), anchor::download_ids(ids_out, 0, K), K);
        anchor::Check last =
            anchor::check_row(buf.row(buf.logits, rows - 1), anchor::download_ids(ids_out, rows - 1, K), K);
        std::string note = std::string("one CTA per row, ") + std::to_string(Config::num_threads) + " threads" +
                           (why.empty() ? "" : "; " + why);
        anchor::print_result("deepselect", variant, "unspecified (kernel header)", rows, K, graph, eager, first, last,
                             tie_ran ? &tie : nullptr, note);
    }
    cudaFree(values_out);
    cudaFree(ids_out);
    cudaStreamDestroy(stream);
    return 0;
}
