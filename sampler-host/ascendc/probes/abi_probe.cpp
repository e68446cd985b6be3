// Hardware probe (hand-written, not a sampler kernel): echoes its scalar
// arguments into GM, so the host sees which argument layout the launch
// used (docs/ASCEND.md, first hour on a 910B, step 3). Adjacent u32s, a u64
// after a u32 and a float after a u32: natural alignment puts them at
// 8, 12, 16, 24, 28, 32; 8-byte slots at 8, 16, 24, 32, 40, 48.
// out[0..8] u32 = a, b, lo(c), hi(c), d, bits(e), programs, 0xC0FFEE.
#include "kernel_operator.h"
#include "sampler_prelude.h"

extern "C" __global__ __vector__ void abi_probe(GM_ADDR pout, uint32_t a, uint32_t b, uint64_t c, uint32_t d, float e, uint32_t programs) {
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::VECCALC> ub;
  pipe.InitBuffer(ub, 32);
  AscendC::LocalTensor<uint32_t> w = ub.Get<uint32_t>();
  AscendC::GlobalTensor<uint32_t> out;
  out.SetGlobalBuffer((__gm__ uint32_t *)pout);
  if (AscendC::GetBlockIdx() == 0) {
    w.SetValue(0, a);
    w.SetValue(1, b);
    w.SetValue(2, (uint32_t)c);
    w.SetValue(3, (uint32_t)(c >> 32));
    w.SetValue(4, d);
    w.SetValue(5, sk::f32_bits(e));
    w.SetValue(6, programs);
    w.SetValue(7, 0xC0FFEEu);
    sk::sync<AscendC::HardEvent::S_MTE3>();
    AscendC::DataCopyPad(out, w, AscendC::DataCopyExtParams{1, 32, 0, 0, 0});
  }
  AscendC::PipeBarrier<PIPE_ALL>();
}
