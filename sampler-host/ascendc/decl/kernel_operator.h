// Declarations only: the AscendC names, namespaces and signatures that the
// generated sources (sampler-host/ascendc/*.cpp), the two headers in
// include/ and the probes use, written for this project from the public
// asc-devkit headers (github.com/mirror-cann/asc-devkit, HEAD 82b89a15f,
// the dav-2201 branches of each `#if __NPU_ARCH__`). No bodies: the test
// `generated_sources_compile_against_the_cann_declarations`
// (tests/ascendc_emu_selftest.rs) runs `g++ -fsyntax-only` on every source
// with this directory in place of CANN's include path, so a name in the
// wrong namespace, a missing overload or a call that does not deduce fails
// here as it would under bisheng. Each declaration names the header it
// comes from. Overloads the sources do not use (mask and repeat forms,
// TensorTrait forms, other architectures) are left out; add one here, from
// the header, before the emitter prints it.
#ifndef SAMPLER_ASCENDC_DECL_KERNEL_OPERATOR_H
#define SAMPLER_ASCENDC_DECL_KERNEL_OPERATOR_H
#include <cstdint>

// Compiler keywords (bisheng; impl/utils/sys_macros.h defines __aicore__ as
// the [aicore] attribute). Attributes only: nothing to check under g++.
#define __aicore__
#define __global__
#define __vector__
#define __gm__
#define __inout_pipe__(p)
#define __in_pipe__(p)
#define __out_pipe__(p)

// impl/basic_api/utils/kernel_utils_macros.h:24
#define GM_ADDR __gm__ uint8_t *

// pipe_t and event_t are bisheng builtins (global, unscoped; the API pages
// write PIPE_V / EVENT_ID0 without a namespace).
enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };
enum event_t { EVENT_ID0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

// include/basic_api/kernel_common.h:46-51 (forward declarations inside AscendC)
namespace AscendC {
class TPipe;
template <typename T>
class GlobalTensor;
}  // namespace AscendC

// include/basic_api/kernel_common.h:100-112: GLOBAL namespace, after
// `namespace AscendC` closes (also v8.5.0 :61-63, v9.0.0 :85-87).
__aicore__ AscendC::TPipe *GetTPipePtr();

namespace AscendC {

// impl/basic_api/common_types.h:27
enum class TPosition : uint8_t {
  GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, SPM, SHM = SPM, TSCM, C2PIPE2GM, C2PIPE2LOCAL, MAX,
};
// impl/basic_api/kernel_event.h:36-75
using QuePosition = TPosition;
enum class HardEvent : uint8_t {
  MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3, MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX,
  FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX,
};
// impl/basic_api/kernel_tensor_base.h:30
using TEventID = int8_t;
// impl/basic_api/kernel_reg.h:109,111
enum class CacheLine : uint64_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst : uint64_t { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };

// include/basic_api/kernel_tensor.h:146-182 (the device branch; PrimType is T for plain types)
template <typename T>
class LocalTensor {
 public:
  __aicore__ LocalTensor();
  __aicore__ T GetValue(const uint32_t index) const;
  template <typename U>
  __aicore__ LocalTensor<U> ReinterpretCast() const;
  template <typename S>
  __aicore__ void SetValue(const uint32_t index, const S value) const;
  __aicore__ LocalTensor operator[](const uint32_t offset) const;
};

// include/basic_api/kernel_tensor.h:253-286
template <typename T>
class GlobalTensor {
 public:
  __aicore__ GlobalTensor();
  __aicore__ void SetGlobalBuffer(__gm__ T *buffer, uint64_t bufferSize);
  __aicore__ void SetGlobalBuffer(__gm__ T *buffer);
  __aicore__ T GetValue(const uint64_t offset) const;
  __aicore__ T GetValue(const uint64_t offset);
  __aicore__ void SetValue(const uint64_t offset, T value);
  __aicore__ GlobalTensor operator[](const uint64_t offset) const;
};

// include/basic_api/kernel_tpipe.h:52-82 (TQueBind), 183-186 (TQue): FreeTensor
// takes a non-const reference, depth is int32_t, mask an `auto` parameter.
template <TPosition pos, int32_t depth, auto mask = 0>
class TQue {
 public:
  __aicore__ TQue();
  template <typename T>
  __aicore__ LocalTensor<T> AllocTensor();
  template <typename T>
  __aicore__ void AllocTensor(LocalTensor<T> &tensor);
  template <typename T>
  __aicore__ void FreeTensor(LocalTensor<T> &tensor);
  template <typename T>
  __aicore__ bool EnQue(const LocalTensor<T> &tensor);
  template <typename T>
  __aicore__ void DeQue(LocalTensor<T> &tensor);
  template <typename T>
  __aicore__ LocalTensor<T> DeQue();
};

// include/basic_api/kernel_tpipe.h:201-208
template <TPosition pos = TPosition::LCM>
class TBuf {
 public:
  __aicore__ TBuf();
  template <typename T>
  __aicore__ LocalTensor<T> Get();
  template <typename T>
  __aicore__ LocalTensor<T> Get(uint32_t len);
};

// include/basic_api/kernel_tpipe.h:448-473
class TPipe {
 public:
  __aicore__ TPipe();
  __aicore__ ~TPipe();
  template <class T>
  __aicore__ bool InitBuffer(T &que, uint8_t num, uint32_t len);
  template <TPosition p>
  __aicore__ bool InitBuffer(TBuf<p> &buf, uint32_t len);
  template <HardEvent evt>
  __aicore__ TEventID AllocEventID();
  template <HardEvent evt>
  __aicore__ void ReleaseEventID(TEventID id);
  template <HardEvent evt>
  __aicore__ TEventID FetchEventID();
  __aicore__ TEventID FetchEventID(HardEvent evt);
};

// include/basic_api/kernel_operator_block_sync_intf.h:40-49
template <HardEvent event>
__aicore__ void SetFlag(int32_t eventID);
template <HardEvent event>
__aicore__ void WaitFlag(int32_t eventID);
template <pipe_t pipe>
__aicore__ void PipeBarrier();

// include/basic_api/kernel_operator_sys_var_intf.h:37-41
__aicore__ int64_t GetBlockNum();
__aicore__ int64_t GetBlockIdx();

// include/basic_api/kernel_operator_cache_intf.h:46-53
template <typename T, CacheLine entireType, DcciDst dcciDst>
__aicore__ void DataCacheCleanAndInvalid(const GlobalTensor<T> &dst);
template <typename T, CacheLine entireType, DcciDst dcciDst>
__aicore__ void DataCacheCleanAndInvalid(const LocalTensor<T> &dst);
template <typename T, CacheLine entireType>
__aicore__ void DataCacheCleanAndInvalid(const GlobalTensor<T> &dst);

// include/basic_api/kernel_struct_data_copy.h:57-82, 194-219, 221-257: classes
// with constructors (brace initialisation calls them; narrowing is an error).
struct DataCopyParams {
  __aicore__ DataCopyParams();
  __aicore__ DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn, const uint16_t dstStrideIn);
  uint16_t blockCount;
  uint16_t blockLen;
  uint16_t srcStride;
  uint16_t dstStride;
};
struct DataCopyExtParams {
  __aicore__ DataCopyExtParams();
  __aicore__ DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn, const uint32_t dstStrideIn, const uint32_t rsvIn);
  uint16_t blockCount;
  uint32_t blockLen;
  uint32_t srcStride;
  uint32_t dstStride;
  uint32_t rsv;
};
template <typename T>
struct DataCopyPadExtParams {
  __aicore__ DataCopyPadExtParams();
  __aicore__ DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue, T padValue);
  bool isPad;
  uint8_t leftPadding;
  uint8_t rightPadding;
  T paddingValue;
};

// include/basic_api/kernel_operator_data_copy_intf.h:66-67 (UB -> UB)
template <typename T>
__aicore__ void DataCopy(const LocalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyParams &repeatParams);
// include/basic_api/kernel_operator_data_copy_intf.h:403-406, 423-425 (GM -> UB, UB -> GM)
template <typename T>
__aicore__ void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &dataCopyParams,
                            const DataCopyPadExtParams<T> &padParams);
template <typename T>
__aicore__ void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &dataCopyParams);

// include/basic_api/kernel_operator_vec_binary_scalar_intf.h:75-77, 140-142, 205-207 (count forms)
template <typename T, bool isSetMask = true>
__aicore__ void Adds(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalarValue, const int32_t &count);
template <typename T, bool isSetMask = true>
__aicore__ void Muls(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalarValue, const int32_t &count);
template <typename T, bool isSetMask = true>
__aicore__ void Maxs(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalarValue, const int32_t &count);
// include/basic_api/kernel_operator_vec_binary_intf.h:58-60, 107-109 (count forms)
template <typename T>
__aicore__ void Sub(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, const int32_t &count);
template <typename T>
__aicore__ void Div(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, const int32_t &count);
// include/basic_api/kernel_operator_vec_unary_intf.h:71-72
template <typename T>
__aicore__ void Exp(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t &count);
// include/basic_api/kernel_operator_vec_duplicate_intf.h:37-38
template <typename T>
__aicore__ void Duplicate(const LocalTensor<T> &dst, const T &scalarValue, const int32_t &count);
// include/basic_api/kernel_operator_vec_createvecindex_intf.h:48-50 (dst by value)
template <typename T>
__aicore__ void CreateVecIndex(LocalTensor<T> dst, const T &firstValue, uint32_t count);
// include/basic_api/kernel_operator_vec_reduce_intf.h:169-172 (count form)
template <typename T>
__aicore__ void ReduceMax(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &sharedTmpBuffer, const int32_t count,
                          bool calIndex = 0);

// include/basic_api/kernel_struct_proposal.h:59-77
template <typename T>
struct MrgSortSrcList {
  __aicore__ MrgSortSrcList();
  __aicore__ MrgSortSrcList(const LocalTensor<T> &src1In, const LocalTensor<T> &src2In, const LocalTensor<T> &src3In, const LocalTensor<T> &src4In);
  LocalTensor<T> src1;
  LocalTensor<T> src2;
  LocalTensor<T> src3;
  LocalTensor<T> src4;
};
// include/basic_api/kernel_operator_proposal_intf.h:89-91, 141-144, 157-160
template <typename T>
__aicore__ void Sort32(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<uint32_t> &src1, const int32_t repeatTime);
template <typename T>
__aicore__ void Extract(const LocalTensor<T> &dstValue, const LocalTensor<uint32_t> &dstIndex, const LocalTensor<T> &sorted, const int32_t repeatTime);
template <typename T, bool isExhaustedSuspension = false>
__aicore__ void MrgSort(const LocalTensor<T> &dst, const MrgSortSrcList<T> &sortList, const uint16_t elementCountList[4], uint32_t sortedNum[4],
                        uint16_t validBit, const int32_t repeatTime);

}  // namespace AscendC

#endif
