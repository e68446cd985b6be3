// The top-N routine (SAMPLER.md section 3.3 and 3.6) on one AI vector
// core: the row streams through UB in chunks of `TILE / 2` logits; each
// chunk is sorted by `Sort32` (runs of 32) and 4-way `MrgSort` rounds,
// then merged with the running top list (split in two lists once it holds
// more than 4095, the MrgSort limit). Ties: `Sort32` puts the lower input
// position first and `MrgSort` the lower list first, and positions and
// lists are in vocabulary-id order, so ties go to the lower id.
#ifndef SAMPLER_ASCENDC_TOP_N_H
#define SAMPLER_ASCENDC_TOP_N_H
#include "sampler_prelude.h"
namespace sk {
__aicore__ inline void copy_pairs(const AscendC::LocalTensor<float> &dst, const AscendC::LocalTensor<float> &src, uint32_t pairs) {
  if (pairs > 0) AscendC::Adds(dst.ReinterpretCast<int32_t>(), src.ReinterpretCast<int32_t>(), (int32_t)0, (int32_t)(pairs * 2));
}
// run: TILE pairs; merged: TILE + TILE/2 pairs (also stages the chunk);
// a, b: TILE/2 pairs each; outv/outi: TILE elements. Returns min(n, v, TILE).
// `bad` / `finite` (top_n_counted, both or neither): the range's NaN-or-+inf
// and not--inf counts (SAMPLER.md 3.2), taken by the scalar unit from each
// chunk as it lands in UB, so the row is read from GM once.
template <uint32_t TILE>
__aicore__ inline uint32_t top_n(const AscendC::GlobalTensor<float> &g, uint64_t off, uint32_t v, uint32_t n,
                                 const AscendC::LocalTensor<float> &run, const AscendC::LocalTensor<float> &merged,
                                 const AscendC::LocalTensor<float> &a, const AscendC::LocalTensor<float> &b,
                                 const AscendC::LocalTensor<float> &outv, const AscendC::LocalTensor<uint32_t> &outi,
                                 uint32_t *bad = nullptr, uint32_t *finite = nullptr) {
  uint32_t nbad = 0, nfin = 0;
  const uint32_t C = TILE / 2;
  const uint32_t IDX = (C + 63) / 64 * 64;
  const float NEG = bits_f32(0xff800000u);
  n = min(min(n, v), TILE);
  AscendC::LocalTensor<float> vals = merged;
  AscendC::LocalTensor<uint32_t> idx = merged[IDX].ReinterpretCast<uint32_t>();
  AscendC::Duplicate(run.ReinterpretCast<int32_t>(), (int32_t)0, (int32_t)(TILE * 2));
  uint32_t have = 0;
  for (uint32_t start = 0; start < v; start += C) {
    uint32_t cnt = min(C, v - start);
    uint32_t c8 = (cnt + 7) / 8 * 8, c32 = (cnt + 31) / 32 * 32;
    sync<AscendC::HardEvent::V_MTE2>();
    if (bad) sync<AscendC::HardEvent::S_MTE2>();  // the last chunk's count read vals
    AscendC::DataCopyExtParams cp{1, cnt * 4, 0, 0, 0};
    AscendC::DataCopyPadExtParams<float> pad{true, 0, (uint8_t)(c8 - cnt), NEG};
    AscendC::DataCopyPad(vals, g[off + start], cp, pad);
    if (c32 > c8) AscendC::Duplicate(vals[c8], NEG, (int32_t)(c32 - c8));
    AscendC::CreateVecIndex(idx.ReinterpretCast<int32_t>(), (int32_t)start, c32);
    sync<AscendC::HardEvent::MTE2_V>();
    if (bad) {
      sync<AscendC::HardEvent::MTE2_S>();
      for (uint32_t i = 0; i < cnt; ++i) {
        const float x = vals.GetValue(i);
        nbad += (uint32_t)(is_nan(x) || is_pos_inf(x));
        nfin += (uint32_t)!is_neg_inf(x);
      }
    }
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::Sort32(a, vals, idx, (int32_t)(c32 / 32));
    AscendC::LocalTensor<float> src = a, dst = b;
    for (uint32_t len = 32; len < cnt; len *= 4) {
      AscendC::PipeBarrier<PIPE_V>();
      for (uint32_t g0 = 0; g0 < cnt; g0 += 4 * len) {
        uint16_t lens[4];
        uint32_t sorted[4];
        uint16_t valid = 0;
        for (uint32_t q = 0; q < 4; ++q) {
          uint32_t s = g0 + q * len;
          lens[q] = (uint16_t)(s < cnt ? min(len, cnt - s) : 0);
          if (lens[q] > 0) valid |= (uint16_t)(1u << q);
        }
        if (valid == 1) {
          copy_pairs(dst[g0 * 2], src[g0 * 2], lens[0]);
        } else {
          uint32_t o1 = lens[1] ? g0 + len : g0, o2 = lens[2] ? g0 + 2 * len : g0, o3 = lens[3] ? g0 + 3 * len : g0;
          AscendC::MrgSortSrcList<float> list(src[g0 * 2], src[o1 * 2], src[o2 * 2], src[o3 * 2]);
          AscendC::MrgSort<float>(dst[g0 * 2], list, lens, sorted, valid, 1);
        }
      }
      AscendC::LocalTensor<float> t = src; src = dst; dst = t;
    }
    AscendC::PipeBarrier<PIPE_V>();
    if (have == 0) {
      have = min(cnt, n);
      copy_pairs(run, src, have);
    } else if (have <= 4095) {
      uint16_t lens[4] = {(uint16_t)have, (uint16_t)cnt, 0, 0};
      uint32_t sorted[4];
      AscendC::MrgSortSrcList<float> list(run, src, run, run);
      AscendC::MrgSort<float>(merged, list, lens, sorted, (uint16_t)3, 1);
      AscendC::PipeBarrier<PIPE_V>();
      have = min(have + cnt, n);
      copy_pairs(run, merged, have);
    } else {
      // A MrgSort list holds at most 4095 elements: the running list (4096
      // at N = 4096) goes in as its two sorted halves, lists 0 and 1, so
      // equal scores still come out run (lower ids) first, then the chunk.
      const uint32_t lo = have / 2;
      uint16_t lens[4] = {(uint16_t)lo, (uint16_t)(have - lo), (uint16_t)cnt, 0};
      uint32_t sorted[4];
      AscendC::MrgSortSrcList<float> list(run, run[lo * 2], src, run);
      AscendC::MrgSort<float>(merged, list, lens, sorted, (uint16_t)7, 1);
      AscendC::PipeBarrier<PIPE_V>();
      have = min(have + cnt, n);
      copy_pairs(run, merged, have);
    }
    AscendC::PipeBarrier<PIPE_V>();
  }
  if (n > 0) AscendC::Extract(outv, outi, run, (int32_t)((n + 31) / 32));
  if (bad) {
    *bad = nbad;
    *finite = nfin;
  }
  return n;
}
} // namespace sk
#endif  // SAMPLER_ASCENDC_TOP_N_H
