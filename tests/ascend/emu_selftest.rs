//! Self-tests of the x86 AscendC emulation header
//! (sampler-host/ascendc/emu/kernel_operator.h): small hand-written programs
//! against the header, compiled once with `g++ -fsanitize=address,undefined`
//! and run one case per process. Each rule the header claims to model is
//! shown to fire on a violation and to stay quiet on the legal form.
//!
//! Skips (passing) only when g++ is absent.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

const PROGRAM: &str = r#"
#include "kernel_operator.h"
#include <string>
using namespace AscendC;

static float gin[64];
static float gout[64];
alignas(64) static int32_t grow[64];  // per-row outputs: 16 rows share one 64-byte line

static float ulps(float a, float b) {  // distance in ulps of two finite floats of one sign
  int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return (float)std::abs(x - y);
}

#define SYNC(E) do { SetFlag<HardEvent::E>(EVENT_ID0); WaitFlag<HardEvent::E>(EVENT_ID0); } while (0)

static void run(const std::string &c) {
  for (int i = 0; i < 64; ++i) gin[i] = (float)(i + 1);
  GlobalTensor<float> g;
  g.SetGlobalBuffer(gin);
  GlobalTensor<float> go;
  go.SetGlobalBuffer(gout);
  TPipe pipe;
  // ---- DataCopy rounds the byte count down to 32 ----
  if (c == "datacopy_40_bytes_moves_32") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256);
    LocalTensor<float> t = b.Get<float>();
    DataCopy(t, g, 10);  // 40 bytes asked, 32 moved
    SYNC(MTE2_S);
    for (int i = 0; i < 8; ++i) if (t.GetValue(i) != gin[i]) { std::printf("wrong %d\n", i); std::exit(1); }
    std::printf("moved 8 floats\n");
    if (std::getenv("READ_NINTH")) std::printf("%f\n", t.GetValue(8));  // never copied: poisoned
  }
  // ---- 32-byte alignment of UB addresses ----
  else if (c == "aligned_vector_op") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 1024);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t[8], 1.0f, 8);  // 32 bytes in: aligned
  } else if (c == "misaligned_vector_op") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 1024);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t[4], 1.0f, 8);  // 16 bytes in
  } else if (c == "misaligned_datacopypad") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 1024);
    LocalTensor<float> t = b.Get<float>();
    DataCopyPad(t[1], g, DataCopyExtParams{1, 16, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
  } else if (c == "sort32_input_needs_256") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 4096);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t[32], 0.0f, 64);
    PipeBarrier<PIPE_V>();
    Sort32(t[512], t[32], t[64].ReinterpretCast<uint32_t>(), 1);  // scores at 128 bytes: 32- but not 256-aligned
  }
  // ---- UB capacity ----
  else if (c == "ub_within_capacity") {
    TQue<QuePosition::VECIN, 2> q; pipe.InitBuffer(q, 2, 32 * 1024);
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 184 * 1024 - 64 * 1024);
  } else if (c == "ub_over_capacity_tbuf") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 193 * 1024);
  } else if (c == "ub_over_capacity_queues") {
    TQue<QuePosition::VECIN, 2> qi; pipe.InitBuffer(qi, 2, 48 * 1024);
    TQue<QuePosition::VECOUT, 2> qo; pipe.InitBuffer(qo, 2, 48 * 1024);
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 1024);
  } else if (c == "access_past_the_buffer") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 0.0f, 65);  // 260 bytes into 256
  }
  // ---- repeat and mask limits ----
  else if (c == "sort32_repeat_1" || c == "sort32_repeat_0" || c == "sort32_repeat_256") {
    int r = c == "sort32_repeat_1" ? 1 : c == "sort32_repeat_0" ? 0 : 256;
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 160 * 1024);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 0.0f, 256 * 32);
    CreateVecIndex(t[256 * 32].ReinterpretCast<int32_t>(), 0, 256 * 32);
    PipeBarrier<PIPE_V>();
    Sort32(t[512 * 32], t, t[256 * 32].ReinterpretCast<uint32_t>(), r);
  } else if (c == "mrgsort_mask_0b11" || c == "mrgsort_mask_0b101") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 4096);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 256);
    PipeBarrier<PIPE_V>();
    uint16_t lens[4] = {32, 32, 32, 0};
    uint32_t sorted[4];
    MrgSortSrcList<float> l(t, t[64], t[128], t[192]);
    MrgSort<float>(t[512], l, lens, sorted, c == "mrgsort_mask_0b11" ? 3 : 5, 1);
  } else if (c == "negative_count") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256);
    Duplicate(b.Get<float>(), 0.0f, -1);
  }
  // ---- poisoned uninitialised UB ----
  else if (c == "poison_scalar_read") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256);
    std::printf("%f\n", b.Get<float>().GetValue(3));
  } else if (c == "poison_vector_read") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 512);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 8);
    PipeBarrier<PIPE_V>();
    Adds(t[64], t, 1.0f, 16);  // elements 8..15 never written
  } else if (c == "poison_datacopypad_tail") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256);
    LocalTensor<float> t = b.Get<float>();
    DataCopyPad(t, g, DataCopyExtParams{1, 12, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    SYNC(MTE2_S);
    float a = t.GetValue(2);   // copied
    std::printf("%f\n", a);
    float z = t.GetValue(3);   // block tail: undefined
    std::printf("%f\n", z);
  }
  // ---- Sort32 / MrgSort tie order ----
  else if (c == "tie_order") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 8192);
    LocalTensor<float> t = b.Get<float>();
    const float s[32] = {1, 3, 3, 2, 3, 0, 2, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 5};
    for (int i = 0; i < 32; ++i) t.SetValue(i, s[i]);
    SYNC(S_V);
    CreateVecIndex(t[64].ReinterpretCast<int32_t>(), 0, 32);
    PipeBarrier<PIPE_V>();
    Sort32(t[256], t, t[64].ReinterpretCast<uint32_t>(), 1);
    SYNC(V_S);  // V has run its WaitFlag<S_V>(0) before S sets that flag again
    // Two lists of equal scores: list 0 ids 100.., list 1 ids 200..
    for (int i = 0; i < 4; ++i) {
      t.SetValue(512 + 2 * i, 7.0f); t[512 + 2 * i + 1].ReinterpretCast<uint32_t>().SetValue(0, 100 + i);
      t.SetValue(576 + 2 * i, 7.0f); t[576 + 2 * i + 1].ReinterpretCast<uint32_t>().SetValue(0, 200 + i);
    }
    SYNC(S_V);
    uint16_t lens[4] = {4, 4, 0, 0};
    uint32_t sorted[4];
    MrgSort<float>(t[1024], MrgSortSrcList<float>(t[576], t[512], t[512], t[512]), lens, sorted, 3, 1);
    SYNC(V_S);
    std::printf("sort32:");
    for (int i = 0; i < 8; ++i) std::printf(" %u", t[256 + 2 * i + 1].ReinterpretCast<uint32_t>().GetValue(0));
    std::printf("\nmrgsort:");
    for (int i = 0; i < 8; ++i) std::printf(" %u", t[1024 + 2 * i + 1].ReinterpretCast<uint32_t>().GetValue(0));
    std::printf("\n");
  }
  // ---- cross-pipe reads ----
  else if (c == "cross_pipe_no_sync" || c == "cross_pipe_setflag" || c == "cross_pipe_barrier") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 512);
    LocalTensor<float> t = b.Get<float>();
    DataCopyPad(t, g, DataCopyExtParams{1, 64, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    if (c == "cross_pipe_setflag") SYNC(MTE2_V);
    if (c == "cross_pipe_barrier") PipeBarrier<PIPE_ALL>();
    Adds(t[64], t, 1.0f, 16);
    SYNC(V_MTE3);
    DataCopyPad(go, t[64], DataCopyExtParams{1, 64, 0, 0, 0});
  } else if (c == "cross_pipe_wrong_event") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 512);
    LocalTensor<float> t = b.Get<float>();
    DataCopyPad(t, g, DataCopyExtParams{1, 64, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    SYNC(MTE2_S);  // orders MTE2 before the scalar unit, not before V
    Adds(t[64], t, 1.0f, 16);
  } else if (c == "cross_pipe_scalar_write_vector_read") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 512);
    LocalTensor<float> t = b.Get<float>();
    for (int i = 0; i < 8; ++i) t.SetValue(i, 1.0f);
    Adds(t[64], t, 1.0f, 8);
  } else if (c == "cross_pipe_tque" || c == "cross_pipe_tque_no_enque") {
    TQue<QuePosition::VECIN, 2> qi; pipe.InitBuffer(qi, 2, 256);
    TQue<QuePosition::VECOUT, 2> qo; pipe.InitBuffer(qo, 2, 256);
    for (int row = 0; row < 4; ++row) {
      LocalTensor<float> x = qi.AllocTensor<float>();
      DataCopyPad(x, g[row * 16], DataCopyExtParams{1, 64, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
      if (c == "cross_pipe_tque") { qi.EnQue(x); x = qi.DeQue<float>(); }
      LocalTensor<float> y = qo.AllocTensor<float>();
      Muls(y, x, 2.0f, 16);
      qo.EnQue(y);
      y = qo.DeQue<float>();
      DataCopyPad(go[row * 16], y, DataCopyExtParams{1, 64, 0, 0, 0});
      qi.FreeTensor(x);
      qo.FreeTensor(y);
    }
    PipeBarrier<PIPE_ALL>();
    for (int i = 0; i < 64; ++i) if (gout[i] != 2.0f * gin[i]) { std::printf("wrong %d\n", i); std::exit(1); }
    std::printf("tque rows ok\n");
  }
  // ---- TQue misuse ----
  else if (c == "tque_deque_empty") {
    TQue<QuePosition::VECIN, 2> q; pipe.InitBuffer(q, 2, 256);
    LocalTensor<float> x = q.DeQue<float>();
    (void)x;
  } else if (c == "tque_three_outstanding") {
    TQue<QuePosition::VECIN, 2> q; pipe.InitBuffer(q, 2, 256);
    LocalTensor<float> a = q.AllocTensor<float>();
    LocalTensor<float> b2 = q.AllocTensor<float>();
    LocalTensor<float> c3 = q.AllocTensor<float>();
    (void)a; (void)b2; (void)c3;
  } else if (c == "tque_not_freed") {
    TQue<QuePosition::VECIN, 2> q; pipe.InitBuffer(q, 2, 256);
    LocalTensor<float> a = q.AllocTensor<float>();
    (void)a;
  } else if (c == "tque_double_free") {
    TQue<QuePosition::VECOUT, 2> q; pipe.InitBuffer(q, 2, 256);
    LocalTensor<float> a = q.AllocTensor<float>();
    q.FreeTensor(a);
    q.FreeTensor(a);
  } else if (c == "tque_foreign_tensor") {
    TQue<QuePosition::VECIN, 2> q; pipe.InitBuffer(q, 2, 256);
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256);
    q.EnQue(b.Get<float>());
  }
  // ---- per-core 64-byte write-back DataCache (run with BLOCKS=2) ----
  else if (c == "cache_rows_scalar" || c == "cache_rows_dma") {
    // Row r of 16 is written by block r % blocks, as the kernels deal rows.
    GlobalTensor<int32_t> gr; gr.SetGlobalBuffer(grow);
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256);
    LocalTensor<int32_t> t = b.Get<int32_t>();
    for (int64_t r = GetBlockIdx(); r < 16; r += GetBlockNum()) {
      if (c == "cache_rows_scalar") {
        gr.SetValue((uint64_t)r, (int32_t)(100 + r));
      } else {
        t.SetValue(0, (int32_t)(100 + r));
        SYNC(S_MTE3);
        DataCopyPad(gr[(uint64_t)r], t, DataCopyExtParams{1, 4, 0, 0, 0});
        SYNC(MTE3_S);
      }
    }
  } else if (c == "cache_scalar_then_dma" || c == "cache_scalar_dcci_dma") {
    GlobalTensor<int32_t> gr; gr.SetGlobalBuffer(grow);
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256);
    LocalTensor<int32_t> t = b.Get<int32_t>();
    gr.SetValue(0, 7);  // dirty line in this core's DataCache
    if (c == "cache_scalar_dcci_dma") DataCacheCleanAndInvalid<int32_t, CacheLine::ENTIRE_DATA_CACHE, DcciDst::CACHELINE_OUT>(gr);
    t.SetValue(0, 8);
    SYNC(S_MTE3);
    DataCopyPad(gr[1], t, DataCopyExtParams{1, 4, 0, 0, 0});  // same line, by DMA
    SYNC(MTE3_S);
  } else if (c == "cache_stale_read" || c == "cache_dcci_read") {
    GlobalTensor<int32_t> gr; gr.SetGlobalBuffer(grow);
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256);
    LocalTensor<int32_t> t = b.Get<int32_t>();
    int32_t before = gr.GetValue(1);  // the line is now cached
    t.SetValue(0, before + 1);
    SYNC(S_MTE3);
    DataCopyPad(gr[1], t, DataCopyExtParams{1, 4, 0, 0, 0});
    SYNC(MTE3_S);
    if (c == "cache_dcci_read") DataCacheCleanAndInvalid<int32_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(gr);
    std::printf("read back %d\n", gr.GetValue(1));
  }
  // ---- strict vector pipe (PipeBarrier<PIPE_V>) and WAR / WAW ----
  else if (c == "v_raw_no_barrier" || c == "v_raw_barrier" || c == "v_in_place") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 512);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 8);
    if (c != "v_raw_no_barrier") PipeBarrier<PIPE_V>();
    if (c == "v_in_place") Adds(t, t, 1.0f, 8);  // reads and writes in one op: no barrier needed
    else Adds(t[64], t, 1.0f, 8);
  } else if (c == "v_war_no_barrier" || c == "v_waw_no_barrier") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 512);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 8);
    if (c == "v_war_no_barrier") {
      PipeBarrier<PIPE_V>();
      Adds(t[64], t, 1.0f, 8);  // reads t
    }
    Duplicate(t, 2.0f, 8);  // then overwrites it
  } else if (c == "cross_pipe_war" || c == "cross_pipe_war_synced" || c == "cross_pipe_waw") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 512);
    LocalTensor<float> t = b.Get<float>();
    if (c == "cross_pipe_waw") {
      Duplicate(t, 1.0f, 16);  // V writes, then MTE2 overwrites without V_MTE2
    } else {
      DataCopyPad(t, g, DataCopyExtParams{1, 64, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
      SYNC(MTE2_V);
      Adds(t[64], t, 1.0f, 16);  // V reads t
      if (c == "cross_pipe_war_synced") SYNC(V_MTE2);
    }
    DataCopyPad(t, g[16], DataCopyExtParams{1, 64, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    SYNC(MTE2_V);
    PipeBarrier<PIPE_V>();
  }
  // ---- same-pipe DMA write-after-write (PipeBarrier<PIPE_MTE3/MTE2>; N3) ----
  else if (c == "mte3_gm_waw" || c == "mte3_gm_waw_barrier" || c == "mte3_gm_waw_chain") {
    // remap_draft's shape: a row written as -inf by one MTE3 DMA, then one
    // element of it scattered by another MTE3 DMA.
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 512);
    LocalTensor<float> row = b.Get<float>(), one = row[64];
    Duplicate(row, -INFINITY, 16);
    SYNC(V_MTE3);
    DataCopyPad(go, row, DataCopyExtParams{1, 64, 0, 0, 0});
    if (c == "mte3_gm_waw_barrier") PipeBarrier<PIPE_MTE3>();
    if (c == "mte3_gm_waw_chain") SYNC(MTE3_S);  // the scalar waits for the row DMA
    one.SetValue(0, 5.0f);
    SYNC(S_MTE3);
    DataCopyPad(go[3], one, DataCopyExtParams{1, 4, 0, 0, 0});
    SYNC(MTE3_S);
  } else if (c == "mte2_ub_waw" || c == "mte2_ub_waw_barrier") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 512);
    LocalTensor<float> t = b.Get<float>();
    DataCopyPad(t, g, DataCopyExtParams{1, 64, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    if (c == "mte2_ub_waw_barrier") PipeBarrier<PIPE_MTE2>();
    DataCopyPad(t, g[16], DataCopyExtParams{1, 64, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    SYNC(MTE2_S);
    std::printf("%f\n", t.GetValue(0));
  }
  // ---- a fetched event ID set again before its WaitFlag ran (N4) ----
  else if (c == "flag_reset_busy" || c == "flag_reset_drained" || c == "flag_reset_scalar_wait") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 512);
    LocalTensor<float> s0 = b.Get<float>(), s1 = s0[64];
    auto sync = [&](HardEvent e) {  // the prelude's sk::sync: FetchEventID returns the same ID each time
      event_t id = static_cast<event_t>(GetTPipePtr()->FetchEventID(e));
      if (e == HardEvent::S_MTE3) { SetFlag<HardEvent::S_MTE3>(id); WaitFlag<HardEvent::S_MTE3>(id); }
      if (e == HardEvent::MTE3_S) { SetFlag<HardEvent::MTE3_S>(id); WaitFlag<HardEvent::MTE3_S>(id); }
      if (e == HardEvent::V_S) { SetFlag<HardEvent::V_S>(id); WaitFlag<HardEvent::V_S>(id); }
    };
    if (c == "flag_reset_scalar_wait") {  // X_S twice: the scalar unit blocked on the first wait
      sync(HardEvent::V_S);
      sync(HardEvent::V_S);
    } else {
      s0.SetValue(0, 1.0f);
      sync(HardEvent::S_MTE3);
      DataCopyPad(go, s0, DataCopyExtParams{1, 4, 0, 0, 0});
      if (c == "flag_reset_drained") sync(HardEvent::MTE3_S);
      s1.SetValue(0, 2.0f);
      sync(HardEvent::S_MTE3);  // MTE3 may still hold the first WaitFlag<S_MTE3>
      DataCopyPad(go[8], s1, DataCopyExtParams{1, 4, 0, 0, 0});
      sync(HardEvent::MTE3_S);
    }
  }
  // ---- single-bit flags; TQue holds IDs of the same pool ----
  else if (c == "flag_set_twice") {
    SetFlag<HardEvent::V_S>(EVENT_ID0);
    SetFlag<HardEvent::V_S>(EVENT_ID0);
    WaitFlag<HardEvent::V_S>(EVENT_ID0);
  } else if (c == "flag_tque_fixed_id" || c == "flag_tque_fetched_id") {
    TQue<QuePosition::VECIN, 2> q; pipe.InitBuffer(q, 2, 256);
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256);
    LocalTensor<float> x = q.AllocTensor<float>();
    DataCopyPad(x, g, DataCopyExtParams{1, 64, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    q.EnQue(x);
    x = q.DeQue<float>();
    LocalTensor<float> y = b.Get<float>();
    Muls(y, x, 2.0f, 16);
    q.FreeTensor(x);  // the queue now holds a V_MTE2 flag until the buffer's next AllocTensor
    event_t id = c == "flag_tque_fixed_id" ? EVENT_ID0 : (event_t)GetTPipePtr()->FetchEventID(HardEvent::V_MTE2);
    SetFlag<HardEvent::V_MTE2>(id);  // before reloading y's source elsewhere
    WaitFlag<HardEvent::V_MTE2>(id);
    std::printf("event id %d\n", (int)id);
  }
  // ---- limits ----
  else if (c == "mrgsort_4095" || c == "mrgsort_4096") {
    uint16_t len = c == "mrgsort_4095" ? 4095 : 4096;
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 128 * 1024);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 4 * 4096);  // two lists of 4096 pairs
    PipeBarrier<PIPE_V>();
    uint16_t lens[4] = {len, 16, 0, 0};
    uint32_t sorted[4];
    MrgSort<float>(t[4 * 4096], MrgSortSrcList<float>(t, t[2 * 4096], t, t), lens, sorted, 3, 1);
  } else if (c == "sort32_dst_needs_256") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 4096);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 0.0f, 64);
    PipeBarrier<PIPE_V>();
    Sort32(t[256 + 32], t, t[32].ReinterpretCast<uint32_t>(), 1);  // destination at 1152 bytes: 128- not 256-aligned
  } else if (c == "reducemax_work_32" || c == "reducemax_work_8") {
    // n = 64 needs ceil(64/64) * 2 floats = 8 bytes, rounded up to 32.
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, c == "reducemax_work_32" ? 1024 : 1000);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 3.0f, 64);
    PipeBarrier<PIPE_V>();
    ReduceMax(t[64], t, t[248], 64);  // work space at byte 992
  }
  // ---- numerics: vector Exp / Div within 2 ulp, subnormals flushed ----
  else if (c == "numerics") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 8192);
    LocalTensor<float> t = b.Get<float>();
    const int N = 256;
    for (int i = 0; i < N; ++i) {
      t.SetValue(i, -20.0f + 0.17f * (float)i);     // Exp inputs
      t.SetValue(N + i, 1.0f + 0.31f * (float)i);   // dividends
      t.SetValue(2 * N + i, 0.7f + 0.01f * (float)i);  // divisors
    }
    t.SetValue(N, 1e-39f);  // a subnormal dividend
    SYNC(S_V);
    Exp(t[3 * N], t, N);
    Div(t[4 * N], t[N], t[2 * N], N);
    SYNC(V_S);
    float worst = 0;
    int moved = 0;
    for (int i = 0; i < N; ++i) {
      float e = std::exp(t.GetValue(i)), d = t.GetValue(N + i) / t.GetValue(2 * N + i);
      float de = ulps(t.GetValue(3 * N + i), e), dd = i == 0 ? 0.0f : ulps(t.GetValue(4 * N + i), d);
      moved += (de > 0) + (dd > 0);
      worst = std::max(worst, std::max(de, dd));
    }
    std::printf("moved %d worst %g subnormal quotient %g\n", moved, worst, t.GetValue(4 * N));
  }
  // ---- Sort32 / MrgSort: NaN and +-0.0 in the stated total order ----
  else if (c == "sort_nan_zero") {
    TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 8192);
    LocalTensor<float> t = b.Get<float>();
    const float inf = INFINITY, qnan = NAN;
    float s[32];
    for (int i = 0; i < 32; ++i) s[i] = -inf;
    s[1] = 0.0f; s[2] = qnan; s[3] = -0.0f; s[4] = inf; s[5] = 1.0f; s[6] = -qnan; s[7] = -1.0f; s[8] = 0.0f;
    for (int i = 0; i < 32; ++i) t.SetValue(i, s[i]);
    SYNC(S_V);
    CreateVecIndex(t[64].ReinterpretCast<int32_t>(), 0, 32);
    PipeBarrier<PIPE_V>();
    Sort32(t[256], t, t[64].ReinterpretCast<uint32_t>(), 1);
    SYNC(V_S);  // V has run its WaitFlag<S_V>(0) before S sets that flag again
    // MrgSort: list 0 = (-0.0, id 10), (NaN, 11) sorted as NaN first; list 1 = (NaN, 20), (+0.0, 21).
    t.SetValue(512, qnan); t[513].ReinterpretCast<uint32_t>().SetValue(0, 11);
    t.SetValue(514, -0.0f); t[515].ReinterpretCast<uint32_t>().SetValue(0, 10);
    t.SetValue(576, qnan); t[577].ReinterpretCast<uint32_t>().SetValue(0, 20);
    t.SetValue(578, 0.0f); t[579].ReinterpretCast<uint32_t>().SetValue(0, 21);
    SYNC(S_V);
    PipeBarrier<PIPE_V>();
    uint16_t lens[4] = {2, 2, 0, 0};
    uint32_t sorted[4];
    MrgSort<float>(t[1024], MrgSortSrcList<float>(t[512], t[576], t[512], t[512]), lens, sorted, 3, 1);
    SYNC(V_S);
    std::printf("sort32:");
    for (int i = 0; i < 9; ++i) std::printf(" %u", t[256 + 2 * i + 1].ReinterpretCast<uint32_t>().GetValue(0));
    std::printf("\nmrgsort:");
    for (int i = 0; i < 4; ++i) std::printf(" %u", t[1024 + 2 * i + 1].ReinterpretCast<uint32_t>().GetValue(0));
    std::printf("\n");
  } else {
    std::fprintf(stderr, "unknown case %s\n", c.c_str());
    std::exit(2);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  const int blocks = std::getenv("BLOCKS") ? std::atoi(std::getenv("BLOCKS")) : 1;
  for (int b = 0; b < blocks; ++b) {
    emu::begin_block(b, blocks);
    run(argv[1]);
    emu::end_block();
  }
  std::printf("done\n");
  return 0;
}
"#;

fn gxx() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    Command::new(&cxx).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| cxx)
}

/// The sanitized self-test binary (built once per test run).
fn binary() -> Option<&'static PathBuf> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        let cxx = gxx()?;
        // Under the target's scratch folder, rebuilt each run (not a new /tmp folder per run).
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ascendc-emu-selftest");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("selftest.cpp");
        std::fs::write(&src, PROGRAM).unwrap();
        let bin = dir.join("selftest");
        let emu = std::path::Path::new(ROOT).join("sampler-host/ascendc/emu");
        let o = Command::new(cxx)
            .args([
                "-std=c++17",
                "-g",
                "-O1",
                "-Wall",
                "-Wno-unused-variable",
                "-fsanitize=address,undefined",
                "-fno-sanitize-recover=undefined",
                "-fno-omit-frame-pointer",
            ])
            .arg("-I")
            .arg(&emu)
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .output()
            .unwrap();
        assert!(o.status.success(), "g++ failed on the self-test program:\n{}", String::from_utf8_lossy(&o.stderr));
        Some(bin)
    })
    .as_ref()
}

/// Runs one case: (exit status, stdout, stderr); `None` without g++.
fn case(name: &str, env: &[(&str, &str)]) -> Option<(i32, String, String)> {
    let Some(bin) = binary() else {
        eprintln!("skipping: g++ not found");
        return None;
    };
    let o = Command::new(bin).arg(name).envs(env.iter().copied()).output().unwrap();
    let r = (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(!r.2.contains("Sanitizer") && !r.2.contains("runtime error"), "sanitizer report in case {name}:\n{}", r.2);
    Some(r)
}

fn passes(name: &str) -> Option<String> {
    passes_env(name, &[])
}

fn passes_env(name: &str, env: &[(&str, &str)]) -> Option<String> {
    let (code, out, err) = case(name, env)?;
    assert_eq!(code, 0, "case {name} must pass under emulation:\n{err}");
    assert!(out.ends_with("done\n"), "{out}");
    Some(out)
}

fn fails(name: &str, kind: &str, detail: &str) {
    fails_env(name, &[], kind, detail)
}

fn fails_env(name: &str, env: &[(&str, &str)], kind: &str, detail: &str) {
    let Some((code, _, err)) = case(name, env) else { return };
    assert_eq!(code, 3, "case {name} must be stopped by the emulator ({kind}), got status {code}:\n{err}");
    assert!(err.contains(&format!("ascendc-emu: {kind}:")), "case {name}: expected {kind}, got:\n{err}");
    assert!(err.contains(detail), "case {name}: expected `{detail}` in:\n{err}");
}

#[test]
fn same_pipe_dma_write_after_write_needs_a_pipe_barrier() {
    // N3: remap_draft's -inf row, then a scattered element of it, both on MTE3.
    fails("mte3_gm_waw", "HAZARD", "written by an earlier MTE3 DMA");
    fails("mte3_gm_waw", "HAZARD", "without PipeBarrier<PIPE_MTE3>");
    passes("mte3_gm_waw_barrier");
    passes("mte3_gm_waw_chain");
    fails("mte2_ub_waw", "HAZARD", "without PipeBarrier<PIPE_MTE2>");
    passes("mte2_ub_waw_barrier");
}

#[test]
fn a_fetched_event_id_set_again_before_its_wait_ran_is_flagged() {
    // N4: SetFlag<S_MTE3> twice on the fetched ID with no MTE3 -> S between.
    fails("flag_reset_busy", "FLAG", "SetFlag<S_MTE3>(0) again while pipe MTE3 may not have run the previous WaitFlag");
    passes("flag_reset_drained");
    passes("flag_reset_scalar_wait");
}

#[test]
fn datacopy_rounds_40_bytes_down_to_32() {
    if let Some(out) = passes("datacopy_40_bytes_moves_32") {
        assert!(out.contains("moved 8 floats"), "{out}");
    }
    // The 9th float (bytes 32..40) was never moved: reading it is a poison error.
    fails_env("datacopy_40_bytes_moves_32", &[("READ_NINTH", "1")], "POISON", "reads uninitialised UB byte 32");
}

#[test]
fn misaligned_ub_addresses_are_flagged() {
    passes("aligned_vector_op");
    fails("misaligned_vector_op", "ALIGN", "UB offset 16 is not 32-byte aligned");
    fails("misaligned_datacopypad", "ALIGN", "DataCopyPad destination at UB offset 4");
    fails("sort32_input_needs_256", "ALIGN", "Sort32 scores at UB offset 128 is not 256-byte aligned");
}

#[test]
fn ub_capacity_overflow_is_flagged() {
    passes("ub_within_capacity");
    fails("ub_over_capacity_tbuf", "UB", "exceeds the 192 KB unified buffer");
    fails("ub_over_capacity_queues", "UB", "exceeds the 192 KB unified buffer");
    fails("access_past_the_buffer", "UB", "beyond the buffer");
}

#[test]
fn repeat_and_mask_limits_are_enforced() {
    passes("sort32_repeat_1");
    fails("sort32_repeat_0", "REPEAT", "repeatTimes 0 outside 1..255");
    fails("sort32_repeat_256", "REPEAT", "repeatTimes 256 outside 1..255");
    passes("mrgsort_mask_0b11");
    fails("mrgsort_mask_0b101", "MASK", "validBit 0x5");
    fails("negative_count", "COUNT", "negative count -1");
}

#[test]
fn poisoned_uninitialised_ub_is_detected_when_read() {
    fails("poison_scalar_read", "POISON", "pipe S reads uninitialised UB byte 12");
    fails("poison_vector_read", "POISON", "pipe V reads uninitialised UB byte 32");
    // DataCopyPad of 12 bytes: the rest of the 32-byte block is undefined.
    fails("poison_datacopypad_tail", "POISON", "pipe S reads uninitialised UB byte 12");
}

#[test]
fn sort32_and_mrgsort_tie_order() {
    let Some(out) = passes("tie_order") else { return };
    // Sort32: descending, equal scores in input order (5; the 3s at 1, 2, 4, 7; the 2s at 3, 6; then the first 1).
    assert!(out.contains("sort32: 31 1 2 4 7 3 6 0\n"), "{out}");
    // MrgSort: equal scores come from the lower-numbered list first (list 0 holds ids 200..).
    assert!(out.contains("mrgsort: 200 201 202 203 100 101 102 103\n"), "{out}");
}

#[test]
fn cross_pipe_read_without_sync_is_flagged() {
    fails("cross_pipe_no_sync", "HAZARD", "pipe V reads UB");
    fails("cross_pipe_wrong_event", "HAZARD", "written by pipe MTE2");
    fails("cross_pipe_scalar_write_vector_read", "HAZARD", "written by pipe S");
    passes("cross_pipe_setflag");
    passes("cross_pipe_barrier");
}

#[test]
fn tque_enque_deque_is_the_sync_point() {
    if let Some(out) = passes("cross_pipe_tque") {
        assert!(out.contains("tque rows ok"), "{out}");
    }
    fails("cross_pipe_tque_no_enque", "HAZARD", "pipe V reads UB");
}

#[test]
fn tque_misuse_is_flagged() {
    fails("tque_deque_empty", "QUEUE", "DeQue of an empty queue");
    fails("tque_three_outstanding", "QUEUE", "AllocTensor with all 2 buffers outstanding");
    fails("tque_not_freed", "QUEUE", "still held at the end of the kernel");
    fails("tque_double_free", "QUEUE", "already free");
    fails("tque_foreign_tensor", "QUEUE", "not one of its buffers");
}

#[test]
fn datacache_lines_shared_by_blocks_or_mixed_with_dma_are_flagged() {
    // 16 int32 rows in one 64-byte line, dealt over two blocks: scalar
    // SetValue writes the whole line back, so one block's rows clobber the
    // other's; byte-exact DMA writes of the same rows are fine.
    passes_env("cache_rows_scalar", &[("BLOCKS", "1")]);
    fails_env(
        "cache_rows_scalar",
        &[("BLOCKS", "2")],
        "CACHE",
        "written by a scalar SetValue in block 1 and also by block 0",
    );
    passes_env("cache_rows_dma", &[("BLOCKS", "2")]);
    passes_env("cache_rows_dma", &[("BLOCKS", "40")]);
    // One core: a dirty scalar line, then DMA on the same line.
    fails("cache_scalar_then_dma", "CACHE", "left dirty in this core's DataCache");
    passes("cache_scalar_dcci_dma");
    // A line cached by a scalar read, rewritten by DMA, read again.
    fails("cache_stale_read", "CACHE", "stale DataCache line");
    if let Some(out) = passes("cache_dcci_read") {
        assert!(out.contains("read back 1\n"), "{out}");
    }
}

#[test]
fn strict_vector_pipe_needs_pipebarrier_v() {
    fails("v_raw_no_barrier", "HAZARD", "without PipeBarrier<PIPE_V> in between (RAW)");
    passes("v_raw_barrier");
    passes("v_in_place");
    fails("v_war_no_barrier", "HAZARD", "without PipeBarrier<PIPE_V> in between (WAR)");
    fails("v_waw_no_barrier", "HAZARD", "without PipeBarrier<PIPE_V> in between (WAW)");
    // With the compiler's auto-sync the barriers are its job.
    passes_env("v_raw_no_barrier", &[("ASCENDC_EMU_AUTO_SYNC", "1")]);
    passes_env("v_war_no_barrier", &[("ASCENDC_EMU_AUTO_SYNC", "1")]);
}

#[test]
fn cross_pipe_war_and_waw_are_flagged() {
    fails("cross_pipe_war", "HAZARD", "pipe MTE2 overwrites UB byte 0 read by pipe V");
    passes("cross_pipe_war_synced");
    fails("cross_pipe_waw", "HAZARD", "pipe MTE2 overwrites UB byte 0 written by pipe V");
}

#[test]
fn flags_are_single_bit_and_tque_holds_ids_of_the_same_pool() {
    fails("flag_set_twice", "FLAG", "SetFlag<V_S>(0) while that flag is still set");
    // After FreeTensor a VECIN queue holds V_MTE2 on ID 0: a hard-coded EVENT_ID0 sets it twice.
    fails("flag_tque_fixed_id", "FLAG", "SetFlag<V_MTE2>(0) while that flag is still set");
    if let Some(out) = passes("flag_tque_fetched_id") {
        assert!(out.contains("event id 1\n"), "FetchEventID skips the queue's ID: {out}");
    }
}

#[test]
fn mrgsort_sort32_and_reducemax_limits() {
    passes("mrgsort_4095");
    fails("mrgsort_4096", "LIMIT", "MrgSort list 0 holds 4096 elements (at most 4095)");
    fails("sort32_dst_needs_256", "ALIGN", "Sort32 destination at UB offset 1152 is not 256-byte aligned");
    passes("reducemax_work_32");
    fails("reducemax_work_8", "LIMIT", "ReduceMax work space of 32 bytes needed");
}

#[test]
fn numerics_mode_perturbs_vector_exp_and_div_within_2_ulp_and_flushes_subnormals() {
    if let Some(out) = passes("numerics") {
        assert!(out.contains("moved 0 worst 0 subnormal quotient 1.4"), "exact by default: {out}");
    }
    let Some(out) = passes_env("numerics", &[("ASCENDC_EMU_NUMERICS", "perturb")]) else { return };
    let moved: u32 =
        out.split("moved ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok()).expect(&out);
    assert!(moved > 200, "most of the 510 results move: {out}");
    assert!(
        out.contains("worst 2 subnormal quotient 0\n"),
        "at most 2 ulp; the subnormal dividend flushes to 0: {out}"
    );
}

#[test]
fn sort32_and_mrgsort_order_nan_and_signed_zero_by_the_stated_total_order() {
    let Some(out) = passes("sort_nan_zero") else { return };
    // Descending with every NaN first (input order), +inf, 1, the zeros in input order (-0.0 == +0.0), -1, then -inf.
    assert!(out.contains("sort32: 2 6 4 5 1 3 8 7 0\n"), "{out}");
    // Equal keys (NaN, NaN) and (-0.0, +0.0): the lower list first.
    assert!(out.contains("mrgsort: 11 20 10 21\n"), "{out}");
}

/// Every generated source, the probes and the two headers they include,
/// checked with `g++ -fsyntax-only` against `sampler-host/ascendc/decl/`
/// (declarations only, taken from the public asc-devkit headers) instead of
/// the emulator: a name in the wrong namespace, a missing overload or a call
/// that does not deduce fails here as under bisheng.
fn decl_check(include: &Path, sources: &[PathBuf]) -> Option<(bool, String)> {
    let cxx = gxx()?;
    let decl = Path::new(ROOT).join("sampler-host/ascendc/decl");
    let o = Command::new(cxx)
        .args(["-std=c++17", "-fsyntax-only", "-Werror=return-type"])
        .arg("-I")
        .arg(&decl)
        .arg("-I")
        .arg(include)
        .args(sources)
        .output()
        .unwrap();
    Some((o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned()))
}

fn ascendc_sources() -> Vec<PathBuf> {
    let dir = Path::new(ROOT).join("sampler-host/ascendc");
    let mut v: Vec<PathBuf> = Vec::new();
    for d in [dir.clone(), dir.join("probes")] {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "cpp") {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

#[test]
fn generated_sources_compile_against_the_cann_declarations() {
    let srcs = ascendc_sources();
    assert!(srcs.len() >= 22, "{} sources", srcs.len());
    let include = Path::new(ROOT).join("sampler-host/ascendc/include");
    let Some((ok, err)) = decl_check(&include, &srcs) else {
        eprintln!("skipping: g++ not found");
        return;
    };
    assert!(ok, "the AscendC sources do not compile against the CANN declarations:\n{err}");
}

/// N1: the prelude calling `AscendC::GetTPipePtr()` (CANN declares it in the
/// global namespace) fails the declaration check, and the emulator as well.
#[test]
fn a_planted_ascendc_qualified_get_tpipe_ptr_fails_the_declaration_check() {
    let Some(cxx) = gxx() else {
        eprintln!("skipping: g++ not found");
        return;
    };
    let inc = Path::new(ROOT).join("sampler-host/ascendc/include");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ascendc-planted-n1");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let prelude = std::fs::read_to_string(inc.join("sampler_prelude.h")).unwrap();
    assert_eq!(prelude.matches("::GetTPipePtr()").count(), 1, "the prelude calls ::GetTPipePtr() once");
    std::fs::write(dir.join("sampler_prelude.h"), prelude.replace("::GetTPipePtr()", "AscendC::GetTPipePtr()"))
        .unwrap();
    std::fs::copy(inc.join("sampler_top_n.h"), dir.join("sampler_top_n.h")).unwrap();
    let draw = Path::new(ROOT).join("sampler-host/ascendc/draw.cpp");
    let (ok, err) = decl_check(&dir, std::slice::from_ref(&draw)).unwrap();
    let named = err.contains("'GetTPipePtr' is not a member of 'AscendC'")
        || err.contains("‘GetTPipePtr’ is not a member of ‘AscendC’");
    assert!(!ok && named, "{err}");
    let emu = Path::new(ROOT).join("sampler-host/ascendc/emu");
    let o = Command::new(cxx)
        .args(["-std=c++17", "-fsyntax-only", "-I"])
        .arg(&emu)
        .arg("-I")
        .arg(&dir)
        .arg(&draw)
        .output()
        .unwrap();
    assert!(!o.status.success(), "the emulator must reject AscendC::GetTPipePtr() too");
}
