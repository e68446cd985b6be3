// Hardware probe (hand-written, not a sampler kernel): the vector unit's Exp
// and Div over n inputs, for an ulp histogram against rt::math::exp_f32 and
// IEEE division on the host (docs/ASCEND.md, first hour on a 910B, step 9).
// e[i] = Exp(x[i]), d[i] = Div(x[i], y[i]); programs of 2048 elements.
#include "kernel_operator.h"
#include "sampler_prelude.h"

extern "C" __global__ __vector__ void exp_div_probe(GM_ADDR px, GM_ADDR py, GM_ADDR pe, GM_ADDR pd, uint32_t n, uint32_t programs) {
  const uint32_t C = 2048;
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::VECCALC> ub;
  pipe.InitBuffer(ub, 4 * C * 4);
  AscendC::LocalTensor<float> x = ub.Get<float>();
  AscendC::LocalTensor<float> y = x[C], e = x[2 * C], d = x[3 * C];
  AscendC::GlobalTensor<float> gx, gy, ge, gd;
  gx.SetGlobalBuffer((__gm__ float *)px);
  gy.SetGlobalBuffer((__gm__ float *)py);
  ge.SetGlobalBuffer((__gm__ float *)pe);
  gd.SetGlobalBuffer((__gm__ float *)pd);
  for (uint32_t prog = (uint32_t)AscendC::GetBlockIdx(); prog < programs; prog += (uint32_t)AscendC::GetBlockNum()) {
    const uint64_t off = (uint64_t)prog * C;
    if (off >= n) break;
    const uint32_t cnt = (uint32_t)sk::min<uint64_t>(C, n - off);
    AscendC::PipeBarrier<PIPE_ALL>();
    AscendC::DataCopyPad(x, gx[off], AscendC::DataCopyExtParams{1, cnt * 4, 0, 0, 0}, AscendC::DataCopyPadExtParams<float>{false, 0, 0, 0});
    AscendC::DataCopyPad(y, gy[off], AscendC::DataCopyExtParams{1, cnt * 4, 0, 0, 0}, AscendC::DataCopyPadExtParams<float>{false, 0, 0, 0});
    sk::sync<AscendC::HardEvent::MTE2_V>();
    AscendC::Exp(e, x, (int32_t)cnt);
    AscendC::Div(d, x, y, (int32_t)cnt);
    sk::sync<AscendC::HardEvent::V_MTE3>();
    AscendC::DataCopyPad(ge[off], e, AscendC::DataCopyExtParams{1, cnt * 4, 0, 0, 0});
    AscendC::DataCopyPad(gd[off], d, AscendC::DataCopyExtParams{1, cnt * 4, 0, 0, 0});
  }
  AscendC::PipeBarrier<PIPE_ALL>();
}
