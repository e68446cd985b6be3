// Hardware probe (hand-written, not a sampler kernel): the scalar-unit float
// arithmetic and conversions the kernels' exact decisions rest on, for a bit
// for bit comparison with the CPU (docs/ASCEND.md, first hour on a 910B,
// step 4; the CPU side is backend::ascend::probe::scalar_expected).
// Per element i of x, y (f32) and u (u64):
//   f[8i..8i+8] u32 = bits of x + y, x * y, sk::div(x, y), sk::exp(x),
//                     (float)u, sk::fixed_to_f32(u), sk::sub(x, y), 0;
//   q[2i..2i+2] u64 = sk::to_fixed(x), sk::f32_to_u64(x).
// Programs of C = 512 elements.
#include "kernel_operator.h"
#include "sampler_prelude.h"

extern "C" __global__ __vector__ void scalar_probe(GM_ADDR px, GM_ADDR py, GM_ADDR pu, GM_ADDR pf, GM_ADDR pq, uint32_t n, uint32_t programs) {
  const uint32_t C = 512;
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::VECCALC> ub;
  pipe.InitBuffer(ub, C * (4 + 4 + 8 + 32 + 16));
  AscendC::LocalTensor<float> x = ub.Get<float>();
  AscendC::LocalTensor<float> y = x[C];
  AscendC::LocalTensor<uint64_t> u = x[2 * C].ReinterpretCast<uint64_t>();
  AscendC::LocalTensor<uint32_t> f = x[4 * C].ReinterpretCast<uint32_t>();
  AscendC::LocalTensor<uint64_t> q = x[12 * C].ReinterpretCast<uint64_t>();
  AscendC::GlobalTensor<float> gx, gy;
  AscendC::GlobalTensor<uint64_t> gu, gq;
  AscendC::GlobalTensor<uint32_t> gf;
  gx.SetGlobalBuffer((__gm__ float *)px);
  gy.SetGlobalBuffer((__gm__ float *)py);
  gu.SetGlobalBuffer((__gm__ uint64_t *)pu);
  gf.SetGlobalBuffer((__gm__ uint32_t *)pf);
  gq.SetGlobalBuffer((__gm__ uint64_t *)pq);
  for (uint32_t prog = (uint32_t)AscendC::GetBlockIdx(); prog < programs; prog += (uint32_t)AscendC::GetBlockNum()) {
    const uint64_t off = (uint64_t)prog * C;
    if (off >= n) break;
    const uint32_t cnt = (uint32_t)sk::min<uint64_t>(C, n - off);
    AscendC::PipeBarrier<PIPE_ALL>();
    AscendC::DataCopyPad(x, gx[off], AscendC::DataCopyExtParams{1, cnt * 4, 0, 0, 0}, AscendC::DataCopyPadExtParams<float>{false, 0, 0, 0});
    AscendC::DataCopyPad(y, gy[off], AscendC::DataCopyExtParams{1, cnt * 4, 0, 0, 0}, AscendC::DataCopyPadExtParams<float>{false, 0, 0, 0});
    AscendC::DataCopyPad(u, gu[off], AscendC::DataCopyExtParams{1, cnt * 8, 0, 0, 0}, AscendC::DataCopyPadExtParams<uint64_t>{false, 0, 0, 0});
    sk::sync<AscendC::HardEvent::MTE2_S>();
    for (uint32_t i = 0; i < cnt; ++i) {
      const float a = x.GetValue(i), b = y.GetValue(i);
      const uint64_t v = u.GetValue(i);
      f.SetValue(8 * i + 0, sk::f32_bits(sk::add<float>(a, b)));
      f.SetValue(8 * i + 1, sk::f32_bits(sk::mul<float>(a, b)));
      f.SetValue(8 * i + 2, sk::f32_bits(sk::div<float>(a, b)));
      f.SetValue(8 * i + 3, sk::f32_bits(sk::exp(a)));
      f.SetValue(8 * i + 4, sk::f32_bits((float)v));
      f.SetValue(8 * i + 5, sk::f32_bits(sk::fixed_to_f32(v)));
      f.SetValue(8 * i + 6, sk::f32_bits(sk::sub<float>(a, b)));
      f.SetValue(8 * i + 7, 0u);
      q.SetValue(2 * i + 0, sk::to_fixed(a));
      q.SetValue(2 * i + 1, sk::f32_to_u64(a));
    }
    sk::sync<AscendC::HardEvent::S_MTE3>();
    AscendC::DataCopyPad(gf[off * 8], f, AscendC::DataCopyExtParams{1, cnt * 32, 0, 0, 0});
    AscendC::DataCopyPad(gq[off * 2], q, AscendC::DataCopyExtParams{1, cnt * 16, 0, 0, 0});
  }
  AscendC::PipeBarrier<PIPE_ALL>();
}
