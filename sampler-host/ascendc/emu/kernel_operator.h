// x86 emulation of the AscendC subset that sampler-dsl emits (dav-2201, AIV only).
//
// Written for this project from the public AscendC API documentation; it
// contains no Huawei code. It stands in for `kernel_operator.h` when the
// generated sources are compiled with g++ for the emulation test, and it is
// strict where the hardware is unforgiving:
//   - UB is 192 KB per core; `InitBuffer` beyond it fails;
//   - vector and DMA UB addresses must be 32-byte aligned (Sort32 inputs 256);
//   - `DataCopy` silently rounds the byte count down to a multiple of 32;
//     `DataCopyPad` leaves the rest of the last 32-byte block undefined
//     unless padding is requested;
//   - UB starts poisoned: reading a byte never written is an error;
//   - every access is stamped with its pipe (S, V, MTE2, MTE3); reading data
//     written on another pipe needs a SetFlag/WaitFlag chain (or
//     PipeBarrier<PIPE_ALL>) in between, tracked with vector clocks;
//   - Sort32 puts equal scores in input order, MrgSort takes equal scores
//     from the lower-numbered list first; repeat counts must be 1..255;
//   - TQue: AllocTensor/EnQue/DeQue/FreeTensor over the buffers given to
//     InitBuffer (at most that many outstanding, at most DEPTH enqueued);
//     EnQue/DeQue is the synchronisation point between the producing pipe
//     (MTE2 for VECIN, V for VECOUT) and the consuming one (V, MTE3); DeQue
//     of an empty queue, EnQue/FreeTensor of a tensor the queue does not
//     hold in that state, and buffers still held at the end are errors;
//   - a UB -> UB DataCopy (V pipe) copies whole 32-byte blocks, poison
//     included (copying undefined bytes is allowed, reading them is not);
//   - WAR and WAW across pipes need a sync as RAW does (a scalar read is
//     complete when the scalar unit issues its next instruction, so a read on
//     S needs nothing before a later write);
//   - strict vector pipe: a vector op reading (RAW) or overwriting (WAR, WAW)
//     bytes of an earlier vector op needs PipeBarrier<PIPE_V> in between, as
//     without the compiler's auto-sync (ASCENDC_EMU_AUTO_SYNC=1 turns this
//     check off, as `--cce-auto-sync=on` would insert the barriers);
//   - flags are single-bit: SetFlag of an (event, id) already set and not yet
//     waited for is an error; TQue holds its own flags (V_MTE2 between
//     FreeTensor and the next AllocTensor of a VECIN buffer, MTE3_V for
//     VECOUT) on IDs from the same per-event pool that AllocEventID and
//     FetchEventID draw from, so a hard-coded EVENT_ID0 can collide;
//   - per-core 64-byte write-back DataCache for scalar GM access: a line
//     written by GlobalTensor::SetValue in one block and written by any other
//     block in the same launch, a scalar write and a DMA write on one line of
//     one core without DataCacheCleanAndInvalid between, a scalar read of a
//     cached line that DMA has rewritten since, and a DMA read under a dirty
//     line are errors (CACHE); the blocks of one launch share these records
//     (begin_block(0, n) starts a launch), so the order they run in does not
//     matter;
//   - limits: MrgSort lists at most 4095 elements, Sort32 destinations
//     256-byte aligned, ReduceMax work space of ceil(n/64)*2 elements rounded
//     up to 32 bytes (LIMIT, ALIGN, UB);
//   - Sort32/MrgSort order scores by a stated total order: descending, every
//     NaN above +inf (NaNs equal), -0.0 equal to +0.0, ties in input order /
//     lower list first;
//   - numerics: ASCENDC_EMU_NUMERICS=perturb moves every vector Exp and Div
//     result by -2..+2 ulp (a hash of the inputs picks) and flushes
//     subnormal inputs and outputs of f32 vector arithmetic to zero, as the
//     hardware's documented accuracy allows; decisions must not change.
// Any violation prints "ascendc-emu: <KIND>: ..." and exits with status 3.
#ifndef SAMPLER_ASCENDC_EMU_KERNEL_OPERATOR_H
#define SAMPLER_ASCENDC_EMU_KERNEL_OPERATOR_H

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#define __global__
#define __aicore__
#define __vector__
#define __gm__
typedef uint8_t *GM_ADDR;
#define KERNEL_TYPE_AIV_ONLY 1
#define KERNEL_TASK_TYPE_DEFAULT(t) ((void)(t))

enum pipe_t { PIPE_S = 0, PIPE_V = 1, PIPE_MTE2 = 2, PIPE_MTE3 = 3, PIPE_ALL = 4 };
typedef int32_t event_t;
static const event_t EVENT_ID0 = 0, EVENT_ID1 = 1, EVENT_ID2 = 2, EVENT_ID3 = 3;

namespace AscendC {
class TPipe;
}
// As in CANN (include/basic_api/kernel_common.h): declared in the global
// namespace, not in AscendC, so `AscendC::GetTPipePtr()` fails here as there.
inline AscendC::TPipe *GetTPipePtr();

namespace AscendC {

enum class HardEvent { MTE2_V, V_MTE2, V_MTE3, MTE3_V, MTE2_S, S_MTE2, MTE3_S, S_MTE3, V_S, S_V, MTE2_MTE3, MTE3_MTE2 };
enum class CacheLine { SINGLE_CACHE_LINE, ENTIRE_DATA_CACHE };
enum class DcciDst { CACHELINE_ALL, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };
typedef int8_t TEventID;
enum class TPosition { VECIN, VECOUT, VECCALC };
using QuePosition = TPosition;

namespace emu {

static const uint32_t UB_BYTES = 192 * 1024;
static const char *const PIPE_NAMES[4] = {"S", "V", "MTE2", "MTE3"};
static const char *const EVENT_NAMES[12] = {"MTE2_V", "V_MTE2", "V_MTE3", "MTE3_V", "MTE2_S", "S_MTE2", "MTE3_S", "S_MTE3", "V_S", "S_V", "MTE2_MTE3", "MTE3_MTE2"};
/// Flag IDs per HardEvent (the pool AllocEventID / FetchEventID draw from).
static const int EVENT_IDS = 8;
/// DataCache line of the scalar unit's GM accesses.
static const uintptr_t LINE = 64;

inline bool env_on(const char *name, const char *value) {
  const char *v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}
/// ASCENDC_EMU_AUTO_SYNC=1: same-pipe vector barriers are the compiler's job.
inline bool auto_sync() {
  static const bool on = env_on("ASCENDC_EMU_AUTO_SYNC", "1");
  return on;
}
/// ASCENDC_EMU_NUMERICS=perturb: vector Exp/Div within 2 ulp, subnormals flushed.
inline bool perturb() {
  static const bool on = env_on("ASCENDC_EMU_NUMERICS", "perturb");
  return on;
}

struct Stamp {
  uint8_t pipe = 0;
  uint64_t time = 0;  // 0: never written in this block (input data)
};

struct Core {
  std::vector<uint8_t> ub = std::vector<uint8_t>(UB_BYTES);
  std::vector<uint8_t> init = std::vector<uint8_t>(UB_BYTES);
  std::vector<Stamp> stamp = std::vector<Stamp>(UB_BYTES);
  std::vector<uint64_t> rd[4] = {std::vector<uint64_t>(UB_BYTES), std::vector<uint64_t>(UB_BYTES), std::vector<uint64_t>(UB_BYTES),
                                 std::vector<uint64_t>(UB_BYTES)};  // last read of each byte per pipe
  std::unordered_map<uintptr_t, Stamp> gm;
  uint64_t now = 1;
  uint64_t vc[4][4] = {};  // vc[p][q]: pipe p has seen pipe q's work up to this time
  uint64_t vbar = 0;       // time of the last PipeBarrier<PIPE_V> (or PIPE_ALL)
  uint64_t mbar[4] = {};   // time of the last PipeBarrier<PIPE_MTE2>/<PIPE_MTE3> (or PIPE_ALL), per pipe
  std::map<std::pair<int, int>, std::vector<uint64_t>> flags;  // (event, id) -> the set flag's snapshot (single-bit)
  std::map<std::pair<int, int>, uint64_t> waited;  // (event, id) -> time of its last WaitFlag on the destination pipe
  uint32_t event_alloc[12] = {};  // AllocEventID bit masks per HardEvent
  TPipe *pipe = nullptr;
  std::unordered_map<uintptr_t, uint64_t> cache;  // DataCache: line -> time it was filled
  std::unordered_set<uintptr_t> dirty;            // lines written by SetValue, not yet cleaned
  std::unordered_set<uintptr_t> dma_lines;        // lines this core wrote by DMA since the last clean
  uint32_t ub_used = 0;
  int64_t block_idx = 0, block_num = 1;
  const char *op = "";
};

/// What the blocks of one launch did to each GM line (shared by all cores).
struct LineInfo {
  int64_t writer = -1;     // first block that wrote the line
  bool scalar = false;     // written by a scalar SetValue (whole-line write-back)
  bool multi = false;      // written by more than one block
  uint64_t dma_time = 0;   // last DMA write
};
inline std::unordered_map<uintptr_t, LineInfo> &launch_lines() {
  static std::unordered_map<uintptr_t, LineInfo> m;
  return m;
}

inline Core &core() {
  static Core c;
  return c;
}

[[noreturn]] inline void fail(const char *kind, const char *fmt, ...) {
  std::fprintf(stderr, "ascendc-emu: %s: ", kind);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, " (in %s, block %lld)\n", core().op, (long long)core().block_idx);
  std::exit(3);
}

/// Starts block `idx` of `num` on a fresh core: poisoned UB, no pending work.
inline void begin_block(int64_t idx, int64_t num) {
  Core &c = core();
  if (idx == 0) launch_lines().clear();  // a new launch
  std::fill(c.ub.begin(), c.ub.end(), (uint8_t)0xA5);
  std::fill(c.init.begin(), c.init.end(), (uint8_t)0);
  std::fill(c.stamp.begin(), c.stamp.end(), Stamp());
  for (auto &r : c.rd) std::fill(r.begin(), r.end(), (uint64_t)0);
  c.gm.clear();
  c.now = 1;
  std::memset(c.vc, 0, sizeof(c.vc));
  c.vbar = 0;
  std::memset(c.mbar, 0, sizeof(c.mbar));
  c.flags.clear();
  c.waited.clear();
  std::memset(c.event_alloc, 0, sizeof(c.event_alloc));
  c.pipe = nullptr;
  c.cache.clear();
  c.dirty.clear();
  c.dma_lines.clear();
  c.ub_used = 0;
  c.block_idx = idx;
  c.block_num = num;
  c.op = "kernel";
}

/// Ends a block: every SetFlag must have been waited for.
inline void end_block() {
  for (auto &kv : core().flags) fail("SYNC", "SetFlag<%s>(%d) never waited for", EVENT_NAMES[kv.first.first], kv.first.second);
}

inline uint64_t tick() { return ++core().now; }

/// Whether a vector op at time `t` is complete for later vector ops: a
/// PipeBarrier<PIPE_V>/<PIPE_ALL> since, or a flag chain back to V (V -> MTE3 -> V).
inline bool v_ordered(uint64_t t) { return core().vbar >= t || core().vc[PIPE_V][PIPE_V] >= t; }
/// Whether a DMA on `pipe` (MTE2 or MTE3) at time `t` is complete for later
/// DMAs of the same pipe: PipeBarrier<PIPE_MTE2/3>/<PIPE_ALL> since, or a
/// flag chain back to the pipe (MTE3 -> S -> MTE3). The PipeBarrier page:
/// same-pipe DMAs with overlapping destinations need the barrier.
inline bool mte_ordered(int pipe, uint64_t t) { return core().mbar[pipe] >= t || core().vc[pipe][pipe] >= t; }

inline void check_read(int pipe, const Stamp &s, const char *where, uintptr_t addr) {
  if (s.time == 0) return;
  if (s.pipe == pipe) {
    if (pipe == PIPE_V && !auto_sync() && !v_ordered(s.time))
      fail("HAZARD", "pipe V reads %s at 0x%llx written by an earlier vector op (t=%llu) without PipeBarrier<PIPE_V> in between (RAW)", where,
           (unsigned long long)addr, (unsigned long long)s.time);
    return;
  }
  if (core().vc[pipe][s.pipe] < s.time)
    fail("HAZARD", "pipe %s reads %s at 0x%llx written by pipe %s (t=%llu) without SetFlag/WaitFlag or PipeBarrier in between", PIPE_NAMES[pipe], where,
         (unsigned long long)addr, PIPE_NAMES[s.pipe], (unsigned long long)s.time);
}

/// WAW and WAR checks of a write at time `t` on `pipe` to UB byte `i`.
inline void check_write(int pipe, uint32_t i, uint64_t t) {
  Core &c = core();
  const Stamp &w = c.stamp[i];
  if (w.time != 0) {
    if (w.pipe != pipe && c.vc[pipe][w.pipe] < w.time)
      fail("HAZARD", "pipe %s overwrites UB byte %u written by pipe %s (t=%llu) without SetFlag/WaitFlag or PipeBarrier in between (WAW)", PIPE_NAMES[pipe], i,
           PIPE_NAMES[w.pipe], (unsigned long long)w.time);
    if (w.pipe == pipe && pipe == PIPE_V && !auto_sync() && !v_ordered(w.time) && w.time != t)
      fail("HAZARD", "pipe V overwrites UB byte %u written by an earlier vector op (t=%llu) without PipeBarrier<PIPE_V> in between (WAW)", i,
           (unsigned long long)w.time);
  }
  for (int q = 1; q < 4; ++q) {  // q = S (0) is skipped: a scalar read is complete once issued
    uint64_t r = c.rd[q][i];
    if (r == 0 || r == t) continue;
    if (q != pipe && c.vc[pipe][q] < r)
      fail("HAZARD", "pipe %s overwrites UB byte %u read by pipe %s (t=%llu) without SetFlag/WaitFlag or PipeBarrier in between (WAR)", PIPE_NAMES[pipe], i,
           PIPE_NAMES[q], (unsigned long long)r);
    if (q == pipe && pipe == PIPE_V && !auto_sync() && !v_ordered(r))
      fail("HAZARD", "pipe V overwrites UB byte %u read by an earlier vector op (t=%llu) without PipeBarrier<PIPE_V> in between (WAR)", i, (unsigned long long)r);
  }
  // Same-pipe DMA write-after-write (after the WAR checks, which name the other pipe).
  if (w.time != 0 && w.pipe == pipe && pipe == PIPE_MTE2 && !mte_ordered(pipe, w.time) && w.time != t)
    fail("HAZARD", "pipe MTE2 overwrites UB byte %u written by an earlier MTE2 DMA (t=%llu) without PipeBarrier<PIPE_MTE2> in between (WAW)", i,
         (unsigned long long)w.time);
}

inline void ub_range(uint32_t off, uint64_t bytes, uint32_t limit) {
  if ((uint64_t)off + bytes > limit || (uint64_t)off + bytes > UB_BYTES)
    fail("UB", "access [%u, %llu) beyond the buffer (ends at %u)", off, (unsigned long long)(off + bytes), limit);
}

inline void ub_read(int pipe, uint32_t off, uint64_t bytes, uint32_t limit) {
  ub_range(off, bytes, limit);
  Core &c = core();
  for (uint64_t i = off; i < off + bytes; ++i) {
    if (!c.init[i]) fail("POISON", "pipe %s reads uninitialised UB byte %llu", PIPE_NAMES[pipe], (unsigned long long)i);
    check_read(pipe, c.stamp[i], "UB", i);
    c.rd[pipe][i] = c.now + 1;  // the time of the op doing this read (it ticks next)
  }
}

inline void ub_write(int pipe, uint32_t off, uint64_t bytes, uint32_t limit, uint64_t t, bool defined = true) {
  ub_range(off, bytes, limit);
  Core &c = core();
  for (uint64_t i = off; i < off + bytes; ++i) {
    check_write(pipe, (uint32_t)i, t);
    c.stamp[i].pipe = (uint8_t)pipe;
    c.stamp[i].time = t;
    c.init[i] = defined ? 1 : 0;
    if (!defined) c.ub[i] = 0xA5;
  }
}

/// The DataCache side of a GM access: scalar (pipe S) accesses go through
/// this core's 64-byte write-back lines, DMA (MTE2/MTE3) goes around them.
inline uint64_t &launch_clock() {
  static uint64_t t = 0;
  return t;
}
inline void cache_access(int pipe, uintptr_t a, uint64_t bytes, bool write) {
  Core &c = core();
  if (bytes == 0) return;
  const uint64_t now = ++launch_clock();
  for (uintptr_t l = a / LINE * LINE; l < a + bytes; l += LINE) {
    LineInfo &li = launch_lines()[l];
    if (pipe == PIPE_S) {
      auto it = c.cache.find(l);
      if (it != c.cache.end() && it->second < li.dma_time)
        fail("CACHE", "scalar %s of GM line 0x%llx cached before a DMA write to it: stale DataCache line (DataCacheCleanAndInvalid needed)",
             write ? "write" : "read", (unsigned long long)l);
      if (it == c.cache.end()) c.cache[l] = now;
      if (write) {
        if (c.dma_lines.count(l))
          fail("CACHE", "scalar SetValue and DMA writes on one 64-byte GM line 0x%llx: the line's write-back would overwrite the DMA data",
               (unsigned long long)l);
        if (li.writer >= 0 && li.writer != c.block_idx)
          fail("CACHE", "GM line 0x%llx written by a scalar SetValue in block %lld and also by block %lld: the 64-byte write-back of one overwrites the other",
               (unsigned long long)l, (long long)c.block_idx, (long long)li.writer);
        c.dirty.insert(l);
        li.scalar = true;
        li.writer = c.block_idx;
      }
    } else if (write) {
      if (c.dirty.count(l))
        fail("CACHE", "DMA write to GM line 0x%llx that a scalar SetValue left dirty in this core's DataCache: its write-back would overwrite the DMA data",
             (unsigned long long)l);
      if (li.scalar && li.writer != c.block_idx)
        fail("CACHE", "DMA write to GM line 0x%llx from block %lld, a line block %lld wrote by scalar SetValue (64-byte write-back)",
             (unsigned long long)l, (long long)c.block_idx, (long long)li.writer);
      if (li.writer < 0) li.writer = c.block_idx;
      li.dma_time = now;
      c.dma_lines.insert(l);
    } else if (c.dirty.count(l)) {
      fail("CACHE", "DMA read of GM line 0x%llx that a scalar SetValue left dirty in this core's DataCache (DataCacheCleanAndInvalid needed)",
           (unsigned long long)l);
    }
  }
}

inline void gm_read(int pipe, const void *p, uint64_t bytes) {
  Core &c = core();
  uintptr_t a = (uintptr_t)p;
  cache_access(pipe, a, bytes, false);
  for (uint64_t i = 0; i < bytes; ++i) {
    auto it = c.gm.find(a + i);
    if (it != c.gm.end()) check_read(pipe, it->second, "GM", a + i);
  }
}

/// A GM write at time `t`: write-after-write on this core needs the earlier
/// write complete, across pipes (a flag chain) and on one DMA pipe
/// (PipeBarrier<PIPE_MTE3>: DMAs of one pipe may complete out of order when
/// their GM destinations overlap, PipeBarrier page).
inline void gm_write(int pipe, const void *p, uint64_t bytes, uint64_t t) {
  Core &c = core();
  uintptr_t a = (uintptr_t)p;
  cache_access(pipe, a, bytes, true);
  for (uint64_t i = 0; i < bytes; ++i) {
    auto it = c.gm.find(a + i);
    if (it != c.gm.end() && it->second.time != 0 && it->second.time != t) {
      const Stamp &w = it->second;
      if (w.pipe == pipe && pipe != PIPE_S && !mte_ordered(pipe, w.time))
        fail("HAZARD", "pipe %s writes GM 0x%llx written by an earlier %s DMA (t=%llu) without PipeBarrier<PIPE_%s> in between (WAW)", PIPE_NAMES[pipe],
             (unsigned long long)(a + i), PIPE_NAMES[pipe], (unsigned long long)w.time, PIPE_NAMES[pipe]);
      if (w.pipe != pipe && c.vc[pipe][w.pipe] < w.time)
        fail("HAZARD", "pipe %s writes GM 0x%llx written by pipe %s (t=%llu) without SetFlag/WaitFlag or PipeBarrier in between (WAW)", PIPE_NAMES[pipe],
             (unsigned long long)(a + i), PIPE_NAMES[w.pipe], (unsigned long long)w.time);
    }
    c.gm[a + i] = Stamp{(uint8_t)pipe, t};
  }
}

/// Cleans (writes back) and invalidates DataCache lines: all, or the one holding `a`.
inline void dcci(bool entire, uintptr_t a) {
  Core &c = core();
  if (entire) {
    c.cache.clear();
    c.dirty.clear();
    c.dma_lines.clear();
    return;
  }
  uintptr_t l = a / LINE * LINE;
  c.cache.erase(l);
  c.dirty.erase(l);
  c.dma_lines.erase(l);
}

/// The stated total order of Sort32/MrgSort scores: `a` ranks before `b`.
inline bool score_before(float a, float b) {
  if (std::isnan(a)) return !std::isnan(b);
  if (std::isnan(b)) return false;
  return a > b;
}

inline float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
template <typename T>
inline T ftz(T x) { return x; }
/// A vector Exp/Div result within 2 ulp of `r` (perturb mode), flushed to zero if subnormal.
inline float sloppy(float r, uint32_t h) {
  if (!perturb()) return r;
  if (!std::isfinite(r)) return r;
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  int k = (int)(h % 5) - 2;
  // Within 2 ulp, never past the largest float nor across (or onto) zero.
  auto ok = [&](float t) { return std::isfinite(t) && t != 0.0f && std::signbit(t) == std::signbit(r); };
  if (r == 0.0f) return r;
  for (; k > 0 && ok(std::nextafter(r, INFINITY)); --k) r = std::nextafter(r, INFINITY);
  for (; k < 0 && ok(std::nextafter(r, -INFINITY)); ++k) r = std::nextafter(r, -INFINITY);
  return ftz(r);
}
template <typename T>
inline T sloppy(T r, uint32_t) { return r; }
inline uint32_t bits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
template <typename T>
inline uint32_t bits(T x) { return (uint32_t)x; }
/// Subnormal inputs of f32 vector arithmetic read as zero in perturb mode.
template <typename T>
inline T in(T x) { return perturb() ? ftz(x) : x; }
/// Subnormal results of f32 vector arithmetic are written as zero in perturb mode.
template <typename T>
inline T out(T x) { return perturb() ? ftz(x) : x; }

inline void align(uint32_t off, uint32_t a, const char *what) {
  if (off % a != 0) fail("ALIGN", "%s at UB offset %u is not %u-byte aligned", what, off, a);
}

inline void repeat(int32_t r, const char *what) {
  if (r < 1 || r > 255) fail("REPEAT", "%s: repeatTimes %d outside 1..255", what, r);
}

inline void count(int64_t n, const char *what) {
  if (n < 0) fail("COUNT", "%s: negative count %lld", what, (long long)n);
}

inline int event_src(HardEvent e) {
  switch (e) {
    case HardEvent::MTE2_V: case HardEvent::MTE2_S: case HardEvent::MTE2_MTE3: return PIPE_MTE2;
    case HardEvent::V_MTE2: case HardEvent::V_MTE3: case HardEvent::V_S: return PIPE_V;
    case HardEvent::MTE3_V: case HardEvent::MTE3_S: case HardEvent::MTE3_MTE2: return PIPE_MTE3;
    default: return PIPE_S;
  }
}
inline int event_dst(HardEvent e) {
  switch (e) {
    case HardEvent::V_MTE2: case HardEvent::S_MTE2: case HardEvent::MTE3_MTE2: return PIPE_MTE2;
    case HardEvent::MTE2_V: case HardEvent::MTE3_V: case HardEvent::S_V: return PIPE_V;
    case HardEvent::V_MTE3: case HardEvent::S_MTE3: case HardEvent::MTE2_MTE3: return PIPE_MTE3;
    default: return PIPE_S;
  }
}

}  // namespace emu

inline int64_t GetBlockIdx() { return emu::core().block_idx; }
inline int64_t GetBlockNum() { return emu::core().block_num; }

namespace emu {
inline void set_flag(HardEvent e, event_t id) {
  Core &c = core();
  if (id < 0 || id >= EVENT_IDS) fail("FLAG", "SetFlag<%s>(%d): event IDs are 0..%d", EVENT_NAMES[(int)e], (int)id, EVENT_IDS - 1);
  auto key = std::make_pair((int)e, (int)id);
  if (c.flags.count(key))
    fail("FLAG", "SetFlag<%s>(%d) while that flag is still set (no WaitFlag since): flags are single-bit, one of the two waits would hang or pass early",
         EVENT_NAMES[(int)e], (int)id);
  int s = event_src(e);
  // The emulator pairs SetFlag and WaitFlag in program order, but the
  // destination pipe runs its WaitFlag only when its queue reaches it. A
  // second SetFlag of the same (event, id) is defined only once the source
  // pipe knows that WaitFlag ran (a flag chain back, or PipeBarrier<PIPE_ALL>);
  // a scalar-side wait blocks the scalar unit, so it has run (SetFlag-WaitFlag
  // and FetchEventID pages: same pipe pair, same ID, set twice in a row).
  auto w = c.waited.find(key);
  int d = event_dst(e);
  if (w != c.waited.end() && d != PIPE_S && s != d && c.vc[s][d] < w->second)
    fail("FLAG",
         "SetFlag<%s>(%d) again while pipe %s may not have run the previous WaitFlag<%s>(%d) yet (no %s -> %s sync or PipeBarrier<PIPE_ALL> since): "
         "same pipe pair, same ID, set twice in a row is undefined and can hang",
         EVENT_NAMES[(int)e], (int)id, PIPE_NAMES[d], EVENT_NAMES[(int)e], (int)id, PIPE_NAMES[d], PIPE_NAMES[s]);
  std::vector<uint64_t> snap(c.vc[s], c.vc[s] + 4);
  snap[s] = tick();  // all of the source pipe's earlier work
  c.flags[key] = snap;
}
inline void wait_flag(HardEvent e, event_t id) {
  Core &c = core();
  auto it = c.flags.find(std::make_pair((int)e, (int)id));
  if (it == c.flags.end()) fail("SYNC", "WaitFlag<%s>(%d) with no SetFlag before it: the core would hang", EVENT_NAMES[(int)e], (int)id);
  std::vector<uint64_t> snap = it->second;
  c.flags.erase(it);
  int d = event_dst(e);
  for (int i = 0; i < 4; ++i) c.vc[d][i] = std::max(c.vc[d][i], snap[i]);
  c.waited[std::make_pair((int)e, (int)id)] = tick();  // the wait's own time on pipe d
}
}  // namespace emu

template <HardEvent E>
inline void SetFlag(event_t id) {
  emu::set_flag(E, id);
}

template <HardEvent E>
inline void WaitFlag(event_t id) {
  emu::wait_flag(E, id);
}

template <pipe_t P>
inline void PipeBarrier() {
  emu::Core &c = emu::core();
  uint64_t t = emu::tick();
  if (P == PIPE_ALL) {
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) c.vc[i][j] = t;
  }
  if (P == PIPE_ALL || P == PIPE_V) c.vbar = t;
  if (P == PIPE_ALL || P == PIPE_MTE2) c.mbar[PIPE_MTE2] = t;
  if (P == PIPE_ALL || P == PIPE_MTE3) c.mbar[PIPE_MTE3] = t;
}

template <typename T>
class LocalTensor {
 public:
  uint32_t off = 0;    // byte offset in UB
  uint32_t limit = 0;  // end of the owning buffer
  LocalTensor() {}
  LocalTensor(uint32_t o, uint32_t l) : off(o), limit(l) {}
  LocalTensor operator[](uint32_t i) const {
    uint64_t o = (uint64_t)off + (uint64_t)i * sizeof(T);
    if (o > limit) emu::fail("UB", "offset %u elements past the end of the buffer", i);
    return LocalTensor(uint32_t(o), limit);
  }
  template <typename U>
  LocalTensor<U> ReinterpretCast() const { return LocalTensor<U>(off, limit); }
  T GetValue(uint32_t i) const {
    uint32_t o = off + i * (uint32_t)sizeof(T);
    emu::core().op = "LocalTensor::GetValue";
    emu::ub_read(PIPE_S, o, sizeof(T), limit);
    T v;
    std::memcpy(&v, &emu::core().ub[o], sizeof(T));
    return v;
  }
  void SetValue(uint32_t i, T v) const {
    uint32_t o = off + i * (uint32_t)sizeof(T);
    emu::core().op = "LocalTensor::SetValue";
    // The scalar unit's own order: a later scalar read sees it.
    emu::ub_range(o, sizeof(T), limit);
    // WAR/WAW hazards are not modelled; reads check RAW.
    emu::ub_write(PIPE_S, o, sizeof(T), limit, emu::tick());
    std::memcpy(&emu::core().ub[o], &v, sizeof(T));
  }
  T *ptr() const { return reinterpret_cast<T *>(&emu::core().ub[off]); }
};

template <typename T>
class GlobalTensor {
 public:
  T *p = nullptr;
  void SetGlobalBuffer(T *b) { p = b; }
  void SetGlobalBuffer(T *b, uint64_t) { p = b; }
  GlobalTensor operator[](uint64_t i) const {
    GlobalTensor g;
    g.p = p + i;
    return g;
  }
  T GetValue(uint64_t i) const {
    emu::core().op = "GlobalTensor::GetValue";
    if (!p) emu::fail("GM", "GetValue of a GlobalTensor without a buffer");
    emu::gm_read(PIPE_S, p + i, sizeof(T));
    return p[i];
  }
  void SetValue(uint64_t i, T v) const {
    emu::core().op = "GlobalTensor::SetValue";
    if (!p) emu::fail("GM", "SetValue of a GlobalTensor without a buffer");
    emu::gm_write(PIPE_S, p + i, sizeof(T), emu::tick());
    p[i] = v;
  }
};

/// DataCacheCleanAndInvalid: writes back and drops the DataCache line(s) of the scalar unit.
template <typename T, CacheLine L, DcciDst D>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T> &g) {
  emu::dcci(L == CacheLine::ENTIRE_DATA_CACHE, (uintptr_t)g.p);
}
template <typename T, CacheLine L>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T> &g) {
  emu::dcci(L == CacheLine::ENTIRE_DATA_CACHE, (uintptr_t)g.p);
}

template <TPosition P>
class TBuf {
 public:
  uint32_t base = 0, bytes = 0;
  bool ready = false;
  template <typename T>
  LocalTensor<T> Get() const {
    if (!ready) emu::fail("UB", "TBuf::Get before TPipe::InitBuffer");
    return LocalTensor<T>(base, base + bytes);
  }
};

/// A hardware queue of `num` UB buffers (given by TPipe::InitBuffer).
template <TPosition P, int32_t DEPTH>
class TQue {
 public:
  static_assert(P == TPosition::VECIN || P == TPosition::VECOUT, "the emulation models VECIN and VECOUT queues");
  static_assert(DEPTH >= 1 && DEPTH <= 2, "TQue depth is 1 or 2 in the generated code");
  uint32_t base = 0, len = 0, num = 0;
  bool ready = false;
  enum State { FREE, ALLOCATED, QUEUED, DEQUEUED };
  std::vector<State> state;
  std::vector<uint64_t> freed_at;  // round robin: the buffer freed longest ago first
  std::vector<int> held;           // event ID of the flag FreeTensor set on each buffer (-1: none)
  struct Entry {
    uint32_t buf;
    std::vector<uint64_t> snap;
  };
  std::vector<Entry> fifo;
  TQue() {}
  TQue(const TQue &) = delete;
  ~TQue() {
    for (uint32_t i = 0; i < num; ++i)
      if (state[i] != FREE) emu::fail("QUEUE", "%s buffer %u still held at the end of the kernel (AllocTensor without FreeTensor)", name(), i);
    for (uint32_t i = 0; i < num; ++i) release(i);  // TPipe::Destroy waits for the held flags
  }
  /// The flag a freed buffer holds until its reuse: consumer -> producer pipe.
  static HardEvent reuse_event() { return P == TPosition::VECIN ? HardEvent::V_MTE2 : HardEvent::MTE3_V; }
  void release(uint32_t i);
  void hold(uint32_t i);
  static const char *name() { return P == TPosition::VECIN ? "TQue<VECIN>" : "TQue<VECOUT>"; }
  static int src_pipe() { return P == TPosition::VECIN ? PIPE_MTE2 : PIPE_V; }
  static int dst_pipe() { return P == TPosition::VECIN ? PIPE_V : PIPE_MTE3; }
  uint32_t which(uint32_t off, const char *what) const {
    if (!ready) emu::fail("QUEUE", "%s::%s before TPipe::InitBuffer", name(), what);
    if (off < base || (off - base) % len != 0 || (off - base) / len >= num) emu::fail("QUEUE", "%s::%s of a tensor that is not one of its buffers (UB offset %u)", name(), what, off);
    return (off - base) / len;
  }
  template <typename T>
  LocalTensor<T> AllocTensor() {
    emu::core().op = "TQue::AllocTensor";
    if (!ready) emu::fail("QUEUE", "%s::AllocTensor before TPipe::InitBuffer", name());
    int pick = -1;
    for (uint32_t i = 0; i < num; ++i)
      if (state[i] == FREE && (pick < 0 || freed_at[i] < freed_at[pick])) pick = (int)i;
    if (pick < 0) emu::fail("QUEUE", "%s::AllocTensor with all %u buffers outstanding (FreeTensor missing)", name(), num);
    release((uint32_t)pick);
    state[pick] = ALLOCATED;
    return LocalTensor<T>(base + (uint32_t)pick * len, base + (uint32_t)pick * len + len);
  }
  template <typename T>
  void EnQue(const LocalTensor<T> &t) {
    emu::Core &c = emu::core();
    c.op = "TQue::EnQue";
    uint32_t i = which(t.off, "EnQue");
    if (state[i] != ALLOCATED) emu::fail("QUEUE", "%s::EnQue of buffer %u that is not allocated (or already queued)", name(), i);
    if (fifo.size() >= (size_t)DEPTH) emu::fail("QUEUE", "%s::EnQue beyond the queue depth %d", name(), DEPTH);
    int s = src_pipe();
    std::vector<uint64_t> snap(c.vc[s], c.vc[s] + 4);
    snap[s] = emu::tick();  // all of the producing pipe's earlier work
    fifo.push_back(Entry{i, snap});
    state[i] = QUEUED;
  }
  template <typename T>
  LocalTensor<T> DeQue() {
    emu::Core &c = emu::core();
    c.op = "TQue::DeQue";
    if (fifo.empty()) emu::fail("QUEUE", "%s::DeQue of an empty queue: the core would hang", name());
    Entry e = fifo.front();
    fifo.erase(fifo.begin());
    int d = dst_pipe();
    for (int k = 0; k < 4; ++k) c.vc[d][k] = std::max(c.vc[d][k], e.snap[k]);
    state[e.buf] = DEQUEUED;
    return LocalTensor<T>(base + e.buf * len, base + e.buf * len + len);
  }
  template <typename T>
  void FreeTensor(const LocalTensor<T> &t) {
    emu::core().op = "TQue::FreeTensor";
    uint32_t i = which(t.off, "FreeTensor");
    if (state[i] != DEQUEUED && state[i] != ALLOCATED) emu::fail("QUEUE", "%s::FreeTensor of buffer %u that is %s", name(), i, state[i] == FREE ? "already free" : "still queued");
    state[i] = FREE;
    freed_at[i] = emu::tick();
    hold(i);
  }
};

class TPipe {
 public:
  TPipe() {
    if (emu::core().pipe) emu::fail("QUEUE", "a second TPipe in one kernel");
    emu::core().pipe = this;
  }
  ~TPipe() {
    for (int e = 0; e < 12; ++e)
      if (emu::core().event_alloc[e]) emu::fail("FLAG", "event ID of %s allocated with AllocEventID and never released", emu::EVENT_NAMES[e]);
    emu::core().pipe = nullptr;
  }
  TPipe(const TPipe &) = delete;
  /// An event ID no AllocEventID holds (TQue draws from the same pool).
  TEventID FetchEventID(HardEvent e) const {
    uint32_t m = emu::core().event_alloc[(int)e];
    for (int i = 0; i < emu::EVENT_IDS; ++i)
      if (!(m & (1u << i))) return (TEventID)i;
    emu::fail("FLAG", "FetchEventID<%s>: every event ID is allocated", emu::EVENT_NAMES[(int)e]);
  }
  template <HardEvent E>
  TEventID FetchEventID() const { return FetchEventID(E); }
  template <HardEvent E>
  TEventID AllocEventID() {
    TEventID id = FetchEventID(E);
    emu::core().event_alloc[(int)E] |= 1u << id;
    return id;
  }
  template <HardEvent E>
  void ReleaseEventID(TEventID id) {
    uint32_t &m = emu::core().event_alloc[(int)E];
    if (!(m & (1u << id))) emu::fail("FLAG", "ReleaseEventID<%s>(%d) of an ID not allocated", emu::EVENT_NAMES[(int)E], (int)id);
    m &= ~(1u << id);
  }
  static uint32_t take(uint32_t bytes) {
    emu::Core &c = emu::core();
    uint32_t at = (c.ub_used + 31) / 32 * 32;
    if ((uint64_t)at + bytes > emu::UB_BYTES) emu::fail("UB", "InitBuffer of %u bytes exceeds the 192 KB unified buffer (%u in use)", bytes, at);
    c.ub_used = at + bytes;
    return at;
  }
  template <TPosition P>
  void InitBuffer(TBuf<P> &b, uint32_t bytes) {
    b.base = take(bytes);
    b.bytes = bytes;
    b.ready = true;
  }
  template <TPosition P, int32_t D>
  void InitBuffer(TQue<P, D> &q, uint32_t num, uint32_t len) {
    if (q.ready) emu::fail("QUEUE", "InitBuffer twice on one %s", q.name());
    if (num < 1 || num > 2) emu::fail("QUEUE", "InitBuffer of %s with %u buffers (1 or 2)", q.name(), num);
    if (len == 0 || len % 32 != 0) emu::fail("ALIGN", "InitBuffer of %s with a buffer length of %u bytes (a positive multiple of 32)", q.name(), len);
    q.base = take(num * len);
    q.len = len;
    q.num = num;
    q.state.assign(num, TQue<P, D>::FREE);
    q.freed_at.assign(num, 0);
    q.held.assign(num, -1);
    q.ready = true;
  }
};

}  // namespace AscendC

inline AscendC::TPipe *GetTPipePtr() {
  if (!AscendC::emu::core().pipe) AscendC::emu::fail("FLAG", "GetTPipePtr() with no TPipe alive");
  return AscendC::emu::core().pipe;
}

namespace AscendC {

template <TPosition P, int32_t DEPTH>
void TQue<P, DEPTH>::hold(uint32_t i) {
  // As the TQue implementation: FreeTensor sets the reuse flag on an allocated ID.
  TPipe *pipe = ::GetTPipePtr();
  TEventID id = P == TPosition::VECIN ? pipe->AllocEventID<HardEvent::V_MTE2>() : pipe->AllocEventID<HardEvent::MTE3_V>();
  emu::set_flag(reuse_event(), id);
  held[i] = id;
}
template <TPosition P, int32_t DEPTH>
void TQue<P, DEPTH>::release(uint32_t i) {
  if (held.empty() || held[i] < 0) return;
  emu::wait_flag(reuse_event(), held[i]);
  TPipe *pipe = emu::core().pipe;
  if (P == TPosition::VECIN) pipe->ReleaseEventID<HardEvent::V_MTE2>((TEventID)held[i]);
  else pipe->ReleaseEventID<HardEvent::MTE3_V>((TEventID)held[i]);
  held[i] = -1;
}

struct DataCopyExtParams {
  uint16_t blockCount;
  uint32_t blockLen;  // bytes
  uint32_t srcStride;
  uint32_t dstStride;
  uint32_t rsv;
};

template <typename T>
struct DataCopyPadExtParams {
  bool isPad;
  uint8_t leftPadding;
  uint8_t rightPadding;  // elements, within the last 32-byte block
  T paddingValue;
};

/// GM -> UB with exact byte counts; the tail of each 32-byte block is
/// `paddingValue` when `isPad`, else undefined (poisoned).
template <typename T>
inline void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &p, const DataCopyPadExtParams<T> &pad) {
  emu::core().op = "DataCopyPad(GM->UB)";
  emu::align(dst.off, 32, "DataCopyPad destination");
  if (p.blockLen == 0 || p.blockCount == 0) emu::fail("COUNT", "DataCopyPad with an empty block");
  if (pad.leftPadding != 0) emu::fail("PAD", "leftPadding is not used by the generated code");
  uint64_t t = emu::tick();
  uint32_t blk = (p.blockLen + 31) / 32 * 32;
  for (uint32_t b = 0; b < p.blockCount; ++b) {
    const uint8_t *s = reinterpret_cast<const uint8_t *>(src.p) + (uint64_t)b * (p.blockLen + p.srcStride);
    uint32_t d = dst.off + b * (blk + p.dstStride * 32);
    emu::gm_read(PIPE_MTE2, s, p.blockLen);
    emu::ub_write(PIPE_MTE2, d, p.blockLen, dst.limit, t);
    std::memcpy(&emu::core().ub[d], s, p.blockLen);
    uint32_t padb = pad.isPad ? pad.rightPadding * (uint32_t)sizeof(T) : 0;
    if (p.blockLen + padb > blk) emu::fail("PAD", "rightPadding of %u elements spills past the 32-byte block", pad.rightPadding);
    for (uint32_t i = 0; i < (pad.isPad ? pad.rightPadding : 0u); ++i) {
      emu::ub_write(PIPE_MTE2, d + p.blockLen + i * sizeof(T), sizeof(T), dst.limit, t);
      std::memcpy(&emu::core().ub[d + p.blockLen + i * sizeof(T)], &pad.paddingValue, sizeof(T));
    }
    if (blk > p.blockLen + padb) emu::ub_write(PIPE_MTE2, d + p.blockLen + padb, blk - p.blockLen - padb, dst.limit, t, false);
  }
}

/// UB -> GM with exact byte counts.
template <typename T>
inline void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &p) {
  emu::core().op = "DataCopyPad(UB->GM)";
  emu::align(src.off, 32, "DataCopyPad source");
  if (p.blockLen == 0 || p.blockCount == 0) emu::fail("COUNT", "DataCopyPad with an empty block");
  uint64_t t = emu::tick();
  uint32_t blk = (p.blockLen + 31) / 32 * 32;
  for (uint32_t b = 0; b < p.blockCount; ++b) {
    uint32_t s = src.off + b * (blk + p.srcStride * 32);
    uint8_t *d = reinterpret_cast<uint8_t *>(dst.p) + (uint64_t)b * (p.blockLen + p.dstStride);
    emu::ub_read(PIPE_MTE3, s, p.blockLen, src.limit);
    emu::gm_write(PIPE_MTE3, d, p.blockLen, t);
    std::memcpy(d, &emu::core().ub[s], p.blockLen);
  }
}

struct DataCopyParams {
  uint16_t blockCount;
  uint16_t blockLen;  // 32-byte blocks
  uint16_t srcStride;
  uint16_t dstStride;
};

/// UB -> UB on the V pipe, whole 32-byte blocks. Undefined (poisoned) bytes
/// are copied as undefined: the copy itself is not a read of their values.
template <typename T>
inline void DataCopy(const LocalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyParams &p) {
  emu::Core &c = emu::core();
  c.op = "DataCopy(UB->UB)";
  emu::align(dst.off, 32, "DataCopy destination");
  emu::align(src.off, 32, "DataCopy source");
  if (p.blockCount == 0 || p.blockLen == 0) emu::fail("COUNT", "DataCopy(UB->UB) with an empty block");
  uint64_t t = emu::tick();
  for (uint32_t b = 0; b < p.blockCount; ++b) {
    uint32_t s = src.off + b * (p.blockLen + p.srcStride) * 32, d = dst.off + b * (p.blockLen + p.dstStride) * 32;
    uint32_t bytes = (uint32_t)p.blockLen * 32;
    emu::ub_range(s, bytes, src.limit);
    std::vector<uint8_t> v(&c.ub[s], &c.ub[s] + bytes), ok(&c.init[s], &c.init[s] + bytes);
    for (uint32_t i = 0; i < bytes; ++i) {
      emu::check_read(PIPE_V, c.stamp[s + i], "UB", s + i);
      c.rd[PIPE_V][s + i] = c.now + 1;
    }
    emu::ub_write(PIPE_V, d, bytes, dst.limit, t);
    std::memcpy(&c.ub[d], v.data(), bytes);
    std::memcpy(&c.init[d], ok.data(), bytes);
  }
}

/// GM -> UB: the byte count is silently rounded down to a multiple of 32.
template <typename T>
inline void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t count) {
  emu::core().op = "DataCopy(GM->UB)";
  emu::align(dst.off, 32, "DataCopy destination");
  uint32_t bytes = count * (uint32_t)sizeof(T) / 32 * 32;
  uint64_t t = emu::tick();
  emu::gm_read(PIPE_MTE2, src.p, bytes);
  emu::ub_write(PIPE_MTE2, dst.off, bytes, dst.limit, t);
  std::memcpy(&emu::core().ub[dst.off], src.p, bytes);
}

/// UB -> GM: the byte count is silently rounded down to a multiple of 32.
template <typename T>
inline void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count) {
  emu::core().op = "DataCopy(UB->GM)";
  emu::align(src.off, 32, "DataCopy source");
  uint32_t bytes = count * (uint32_t)sizeof(T) / 32 * 32;
  uint64_t t = emu::tick();
  emu::ub_read(PIPE_MTE3, src.off, bytes, src.limit);
  emu::gm_write(PIPE_MTE3, dst.p, bytes, t);
  std::memcpy(dst.p, &emu::core().ub[src.off], bytes);
}

namespace emu {
// One count-form vector instruction: checks, reads, then writes `dst`.
template <typename T, typename F>
inline void vmap(const char *name, const LocalTensor<T> &dst, int32_t n, std::vector<std::pair<uint32_t, uint32_t>> srcs, F f) {
  core().op = name;
  count(n, name);
  align(dst.off, 32, name);
  for (auto &s : srcs) {
    align(s.first, 32, name);
    ub_read(PIPE_V, s.first, (uint64_t)n * sizeof(T), s.second);
  }
  uint64_t t = tick();
  std::vector<T> out((size_t)n);
  for (int32_t i = 0; i < n; ++i) out[i] = f(i);
  ub_write(PIPE_V, dst.off, (uint64_t)n * sizeof(T), dst.limit, t);
  if (n > 0) std::memcpy(&core().ub[dst.off], out.data(), (size_t)n * sizeof(T));
}
template <typename T>
inline T at(const LocalTensor<T> &x, int32_t i) {
  T v;
  std::memcpy(&v, &core().ub[x.off + (uint32_t)i * sizeof(T)], sizeof(T));
  return v;
}
}  // namespace emu

#define SK_EMU_BINARY(NAME, EXPR)                                                                              \
  template <typename T>                                                                                        \
  inline void NAME(const LocalTensor<T> &d, const LocalTensor<T> &a, const LocalTensor<T> &b, int32_t n) {     \
    emu::vmap<T>(#NAME, d, n, {{a.off, a.limit}, {b.off, b.limit}}, [&](int32_t i) {                           \
      T x = emu::at(a, i), y = emu::at(b, i);                                                                  \
      return (T)(EXPR);                                                                                        \
    });                                                                                                        \
  }
SK_EMU_BINARY(Add, emu::out(emu::in(x) + emu::in(y)))
SK_EMU_BINARY(Sub, emu::out(emu::in(x) - emu::in(y)))
SK_EMU_BINARY(Mul, emu::out(emu::in(x) * emu::in(y)))
SK_EMU_BINARY(Div, emu::sloppy(emu::in(x) / emu::in(y), emu::bits(x) * 31u + emu::bits(y)))
SK_EMU_BINARY(Max, y > x ? y : x)
SK_EMU_BINARY(Min, y < x ? y : x)
#undef SK_EMU_BINARY

#define SK_EMU_SCALAR(NAME, EXPR)                                                                              \
  template <typename T>                                                                                        \
  inline void NAME(const LocalTensor<T> &d, const LocalTensor<T> &a, T s, int32_t n) {                         \
    emu::vmap<T>(#NAME, d, n, {{a.off, a.limit}}, [&](int32_t i) {                                             \
      T x = emu::at(a, i);                                                                                     \
      return (T)(EXPR);                                                                                        \
    });                                                                                                        \
  }
SK_EMU_SCALAR(Adds, emu::perturb() ? emu::ftz(emu::in(x) + emu::in(s)) : x + s)
SK_EMU_SCALAR(Muls, emu::perturb() ? emu::ftz(emu::in(x) * emu::in(s)) : x * s)
SK_EMU_SCALAR(Maxs, s > x ? s : x)
SK_EMU_SCALAR(Mins, s < x ? s : x)
#undef SK_EMU_SCALAR

template <typename T>
inline void Exp(const LocalTensor<T> &d, const LocalTensor<T> &a, int32_t n) {
  emu::vmap<T>("Exp", d, n, {{a.off, a.limit}}, [&](int32_t i) {
    T x = emu::at(a, i);
    return emu::sloppy((T)std::exp(emu::in(x)), emu::bits(x));
  });
}
template <typename T>
inline void Abs(const LocalTensor<T> &d, const LocalTensor<T> &a, int32_t n) {
  emu::vmap<T>("Abs", d, n, {{a.off, a.limit}}, [&](int32_t i) { return (T)std::fabs(emu::at(a, i)); });
}
template <typename T>
inline void Duplicate(const LocalTensor<T> &d, T s, int32_t n) {
  emu::vmap<T>("Duplicate", d, n, {}, [&](int32_t) { return s; });
}
template <typename T>
inline void CreateVecIndex(const LocalTensor<T> &d, T first, uint32_t n) {
  emu::vmap<T>("CreateVecIndex", d, (int32_t)n, {}, [&](int32_t i) { return (T)(first + (T)i); });
}

namespace emu {
template <typename T, bool MAX>
inline void reduce(const char *name, const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work, int32_t n) {
  core().op = name;
  if (n < 1) fail("COUNT", "%s needs count >= 1, got %d", name, n);
  align(dst.off, 32, name);
  align(src.off, 32, name);
  align(work.off, 32, name);
  // Work space of the documented shape: two values per 64-element repeat, rounded up to 32 bytes.
  uint64_t need = ((uint64_t)((n + 63) / 64) * 2 * sizeof(T) + 31) / 32 * 32;
  if ((uint64_t)work.off + need > work.limit)
    fail("LIMIT", "%s work space of %llu bytes needed (ceil(n/64)*2 elements rounded up to 32 bytes), the buffer holds %u", name, (unsigned long long)need,
         work.limit - work.off);
  ub_range(work.off, need, work.limit);
  ub_read(PIPE_V, src.off, (uint64_t)n * sizeof(T), src.limit);
  uint64_t t = tick();
  T best = at(src, 0);
  for (int32_t i = 1; i < n; ++i) {
    T x = at(src, i);
    if (MAX ? (x > best) : (x < best)) best = x;
  }
  ub_write(PIPE_V, work.off, need, work.limit, t);
  ub_write(PIPE_V, dst.off, sizeof(T), dst.limit, t);
  std::memcpy(&core().ub[dst.off], &best, sizeof(T));
}
}  // namespace emu

template <typename T>
inline void ReduceMax(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work, int32_t n) {
  emu::reduce<T, true>("ReduceMax", dst, src, work, n);
}
template <typename T>
inline void ReduceMin(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work, int32_t n) {
  emu::reduce<T, false>("ReduceMin", dst, src, work, n);
}

/// Sorts each group of 32 scores descending into (score, index) pairs;
/// equal scores keep their input order.
inline void Sort32(const LocalTensor<float> &dst, const LocalTensor<float> &src0, const LocalTensor<uint32_t> &src1, int32_t repeatTimes) {
  emu::core().op = "Sort32";
  emu::repeat(repeatTimes, "Sort32");
  emu::align(dst.off, 256, "Sort32 destination");
  emu::align(src0.off, 256, "Sort32 scores");
  emu::align(src1.off, 256, "Sort32 indices");
  uint64_t n = (uint64_t)repeatTimes * 32;
  emu::ub_read(PIPE_V, src0.off, n * 4, src0.limit);
  emu::ub_read(PIPE_V, src1.off, n * 4, src1.limit);
  uint64_t t = emu::tick();
  std::vector<std::pair<float, uint32_t>> out;
  for (int32_t r = 0; r < repeatTimes; ++r) {
    std::vector<std::pair<float, uint32_t>> g;
    for (int i = 0; i < 32; ++i) g.push_back({emu::at(src0, r * 32 + i), emu::at(src1, r * 32 + i)});
    std::stable_sort(g.begin(), g.end(), [](const std::pair<float, uint32_t> &a, const std::pair<float, uint32_t> &b) { return emu::score_before(a.first, b.first); });
    out.insert(out.end(), g.begin(), g.end());
  }
  emu::ub_write(PIPE_V, dst.off, n * 8, dst.limit, t);
  for (uint64_t i = 0; i < n; ++i) {
    std::memcpy(&emu::core().ub[dst.off + i * 8], &out[i].first, 4);
    std::memcpy(&emu::core().ub[dst.off + i * 8 + 4], &out[i].second, 4);
  }
}

template <typename T>
struct MrgSortSrcList {
  LocalTensor<T> src1, src2, src3, src4;
  MrgSortSrcList(const LocalTensor<T> &a, const LocalTensor<T> &b, const LocalTensor<T> &c, const LocalTensor<T> &d) : src1(a), src2(b), src3(c), src4(d) {}
};

/// Merges 2-4 sorted lists of (score, index) pairs; equal scores are taken
/// from the lower-numbered list first.
template <typename T>
inline void MrgSort(const LocalTensor<T> &dst, const MrgSortSrcList<T> &list, const uint16_t elementCountList[4], uint32_t sortedNum[4], uint16_t validBit,
                    int32_t repeatTimes) {
  emu::core().op = "MrgSort";
  emu::repeat(repeatTimes, "MrgSort");
  if (repeatTimes != 1) emu::fail("REPEAT", "MrgSort with repeatTimes > 1 is not used by the generated code");
  if (validBit != 3 && validBit != 7 && validBit != 15) emu::fail("MASK", "MrgSort validBit 0x%x: need 2-4 lists from list 0 (0b11, 0b111, 0b1111)", validBit);
  const LocalTensor<T> *ls[4] = {&list.src1, &list.src2, &list.src3, &list.src4};
  int k = validBit == 3 ? 2 : validBit == 7 ? 3 : 4;
  emu::align(dst.off, 32, "MrgSort destination");
  uint64_t total = 0;
  for (int q = 0; q < k; ++q) {
    if (elementCountList[q] > 4095) emu::fail("LIMIT", "MrgSort list %d holds %u elements (at most 4095)", q, (unsigned)elementCountList[q]);
    emu::align(ls[q]->off, 32, "MrgSort list");
    emu::ub_read(PIPE_V, ls[q]->off, (uint64_t)elementCountList[q] * 8, ls[q]->limit);
    total += elementCountList[q];
  }
  for (int q = 0; q < k; ++q) {
    uint64_t a0 = ls[q]->off, a1 = a0 + (uint64_t)elementCountList[q] * 8;
    if (elementCountList[q] > 0 && a0 < dst.off + total * 8 && dst.off < a1) emu::fail("OVERLAP", "MrgSort destination overlaps list %d", q);
  }
  uint64_t t = emu::tick();
  std::vector<std::pair<float, uint32_t>> out;
  uint32_t pos[4] = {0, 0, 0, 0};
  for (uint64_t i = 0; i < total; ++i) {
    int best = -1;
    float bv = 0;
    for (int q = 0; q < k; ++q) {
      if (pos[q] >= elementCountList[q]) continue;
      float v = emu::at(ls[q]->template ReinterpretCast<float>(), (int32_t)(pos[q] * 2));
      if (best < 0 || emu::score_before(v, bv)) {
        best = q;
        bv = v;
      }
    }
    uint32_t id = emu::at(ls[best]->template ReinterpretCast<uint32_t>(), (int32_t)(pos[best] * 2 + 1));
    out.push_back({bv, id});
    ++pos[best];
  }
  emu::ub_write(PIPE_V, dst.off, total * 8, dst.limit, t);
  for (uint64_t i = 0; i < total; ++i) {
    std::memcpy(&emu::core().ub[dst.off + i * 8], &out[i].first, 4);
    std::memcpy(&emu::core().ub[dst.off + i * 8 + 4], &out[i].second, 4);
  }
  for (int q = 0; q < 4; ++q) sortedNum[q] = q < k ? elementCountList[q] : 0;
}

/// Splits (score, index) pairs into scores and indices, 32 pairs a repeat.
inline void Extract(const LocalTensor<float> &dstValue, const LocalTensor<uint32_t> &dstIndex, const LocalTensor<float> &sorted, int32_t repeatTimes) {
  emu::core().op = "Extract";
  emu::repeat(repeatTimes, "Extract");
  emu::align(dstValue.off, 32, "Extract values");
  emu::align(dstIndex.off, 32, "Extract indices");
  emu::align(sorted.off, 32, "Extract source");
  uint64_t n = (uint64_t)repeatTimes * 32;
  emu::ub_read(PIPE_V, sorted.off, n * 8, sorted.limit);
  uint64_t t = emu::tick();
  std::vector<uint8_t> src(&emu::core().ub[sorted.off], &emu::core().ub[sorted.off] + n * 8);
  emu::ub_write(PIPE_V, dstValue.off, n * 4, dstValue.limit, t);
  emu::ub_write(PIPE_V, dstIndex.off, n * 4, dstIndex.limit, t);
  for (uint64_t i = 0; i < n; ++i) {
    std::memcpy(&emu::core().ub[dstValue.off + i * 4], &src[i * 8], 4);
    std::memcpy(&emu::core().ub[dstIndex.off + i * 4], &src[i * 8 + 4], 4);
  }
}

}  // namespace AscendC

using AscendC::PipeBarrier;

#endif
