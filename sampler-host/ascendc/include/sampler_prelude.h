// Scalar-unit helpers every generated AscendC source includes (sampler-dsl's
// AscendC emitter, sampler-host/ascendc/*.cpp). Hand-written, not generated.
//
// They reproduce `sampler_kernels::rt::{elem, math}` with 32- and 64-bit
// integer and f32 operations only: dav-2201 has no 64-bit vector integers and
// no fp64, and the scalar unit has no 128-bit type, so the exact fixed-point
// decisions (top-p threshold, accept test, categorical draw) use a two-word
// 128-bit integer. Build with -ffp-contract=off: `exp` and `ln_fixed` must
// not be contracted into FMAs (docs/ASCEND.md).
#ifndef SAMPLER_ASCENDC_PRELUDE_H
#define SAMPLER_ASCENDC_PRELUDE_H
#include "kernel_operator.h"
namespace sk {
// A SetFlag/WaitFlag pair on an event ID the pipe does not hold: TQue keeps
// flags of its own on IDs of the same pool, so a fixed EVENT_ID0 could set a
// flag that is already set (flags are single-bit). CANN declares GetTPipePtr
// in the global namespace (kernel_common.h), hence `::`.
template <AscendC::HardEvent E> __aicore__ inline void sync() {
  const event_t id = static_cast<event_t>(::GetTPipePtr()->FetchEventID(E));
  AscendC::SetFlag<E>(id);
  AscendC::WaitFlag<E>(id);
}
// Wrapping integer arithmetic (Rust `wrapping_*`; x / 0 == 0, as on the GPU).
template <typename T> struct U_ { typedef T t; };
template <> struct U_<int32_t> { typedef uint32_t t; };
template <> struct U_<int64_t> { typedef uint64_t t; };
template <typename T> __aicore__ inline T add(T a, T b) { return (T)((typename U_<T>::t)a + (typename U_<T>::t)b); }
template <typename T> __aicore__ inline T sub(T a, T b) { return (T)((typename U_<T>::t)a - (typename U_<T>::t)b); }
template <typename T> __aicore__ inline T mul(T a, T b) { return (T)((typename U_<T>::t)a * (typename U_<T>::t)b); }
template <typename T> __aicore__ inline T neg(T a) { return (T)((typename U_<T>::t)0 - (typename U_<T>::t)a); }
template <typename T> __aicore__ inline T div(T a, T b) {
  if (b == 0) return 0;
  if ((T)-1 < (T)0 && b == (T)-1) return neg(a);
  return a / b;
}
template <typename T> __aicore__ inline T rem(T a, T b) {
  if (b == 0) return 0;
  if ((T)-1 < (T)0 && b == (T)-1) return 0;
  return a % b;
}
template <> __aicore__ inline float add<float>(float a, float b) { return a + b; }
template <> __aicore__ inline float sub<float>(float a, float b) { return a - b; }
template <> __aicore__ inline float mul<float>(float a, float b) { return a * b; }
template <> __aicore__ inline float div<float>(float a, float b) { return a / b; }
template <> __aicore__ inline float neg<float>(float a) { return -a; }
template <typename T> __aicore__ inline T shl(T a, uint32_t b) { return (T)((typename U_<T>::t)a << (b & (sizeof(T) * 8 - 1))); }
template <typename T> __aicore__ inline T shr(T a, uint32_t b) { return a >> (b & (sizeof(T) * 8 - 1)); }
template <typename T> __aicore__ inline T min(T a, T b) { return b < a ? b : a; }
template <typename T> __aicore__ inline T max(T a, T b) { return b > a ? b : a; }
// Rust `as` from f32: saturating, NaN -> 0.
template <typename T> __aicore__ inline T f2i(float x, T lo, T hi, float flo, float fhi) {
  if (!(x == x)) return 0;
  if (x <= flo) return lo;
  if (x >= fhi) return hi;
  return (T)x;
}
__aicore__ inline int32_t f32_to_i32(float x) { return f2i<int32_t>(x, (int32_t)0x80000000, 0x7fffffff, -2147483648.0f, 2147483648.0f); }
__aicore__ inline uint32_t f32_to_u32(float x) { return f2i<uint32_t>(x, 0u, 0xffffffffu, 0.0f, 4294967296.0f); }
__aicore__ inline int64_t f32_to_i64(float x) { return f2i<int64_t>(x, (int64_t)0x8000000000000000ull, 0x7fffffffffffffffll, -9223372036854775808.0f, 9223372036854775808.0f); }
__aicore__ inline uint64_t f32_to_u64(float x) { return f2i<uint64_t>(x, 0ull, 0xffffffffffffffffull, 0.0f, 18446744073709551616.0f); }
__aicore__ inline uint32_t f32_bits(float x) { union { float f; uint32_t u; } c; c.f = x; return c.u; }
__aicore__ inline float bits_f32(uint32_t u) { union { float f; uint32_t u; } c; c.u = u; return c.f; }
__aicore__ inline bool is_nan(float x) { return !(x == x); }
__aicore__ inline bool is_pos_inf(float x) { return x == bits_f32(0x7f800000u); }
__aicore__ inline bool is_neg_inf(float x) { return x == bits_f32(0xff800000u); }
__aicore__ inline float abs(float x) { return bits_f32(f32_bits(x) & 0x7fffffffu); }
// exp with plain f32 operations, as rt::math::exp_f32 (bit for bit).
__aicore__ inline float exp(float x) {
  if (!(x == x)) return x;
  if (x > 88.72283f) return bits_f32(0x7f800000u);
  if (x < -103.97208f) return 0.0f;
  const float LOG2E = 1.442695f, LN2_HI = 0.6933594f, LN2_LO = -2.1219444e-4f;
  float t = x * LOG2E;
  int32_t k = t >= 0.0f ? (int32_t)(t + 0.5f) : (int32_t)(t - 0.5f);
  float kf = (float)k;
  float r = (x - kf * LN2_HI) - kf * LN2_LO;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  if (k >= -126) {
    if (k > 127) return p * bits_f32(254u << 23) * bits_f32((uint32_t)(k - 127 + 127) << 23);
    return p * bits_f32((uint32_t)(k + 127) << 23);
  }
  return p * bits_f32((uint32_t)(k + 64 + 127) << 23) * bits_f32((uint32_t)(127 - 64) << 23);
}
// 128-bit unsigned integers from two 64-bit words (the scalar unit has no u128).
struct U128 { uint64_t hi, lo; };
__aicore__ inline U128 mul64(uint64_t a, uint64_t b) {
  uint64_t a0 = a & 0xffffffffull, a1 = a >> 32, b0 = b & 0xffffffffull, b1 = b >> 32;
  uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffull) + (p10 & 0xffffffffull);
  U128 r; r.lo = (mid << 32) | (p00 & 0xffffffffull); r.hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
  return r;
}
__aicore__ inline U128 shl128(U128 x, uint32_t s) {
  U128 r;
  if (s == 0) return x;
  if (s >= 128) { r.hi = 0; r.lo = 0; return r; }
  if (s >= 64) { r.hi = x.lo << (s - 64); r.lo = 0; return r; }
  r.hi = (x.hi << s) | (x.lo >> (64 - s)); r.lo = x.lo << s; return r;
}
__aicore__ inline U128 shr128(U128 x, uint32_t s) {
  U128 r;
  if (s == 0) return x;
  if (s >= 128) { r.hi = 0; r.lo = 0; return r; }
  if (s >= 64) { r.lo = x.hi >> (s - 64); r.hi = 0; return r; }
  r.lo = (x.lo >> s) | (x.hi << (64 - s)); r.hi = x.hi >> s; return r;
}
__aicore__ inline bool lt128(U128 a, U128 b) { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo); }
__aicore__ inline U128 add128(U128 a, uint64_t b) { U128 r; r.lo = a.lo + b; r.hi = a.hi + (r.lo < a.lo ? 1 : 0); return r; }
// SplitMix64 (SAMPLER.md section 2).
__aicore__ inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__aicore__ inline uint64_t rand_u64(uint64_t seed, uint64_t seq) { return mix64(seed + (seq + 1) * 0x9E3779B97F4A7C15ull); }
__aicore__ inline uint64_t uniform53(uint64_t seed, uint64_t seq) { return rand_u64(seed, seq) >> 11; }
// m * 2^e for a finite non-negative f32.
__aicore__ inline void decompose(float x, uint64_t &m, int32_t &e) {
  uint32_t b = f32_bits(x);
  int32_t ex = (int32_t)((b >> 23) & 0xff);
  uint64_t fr = b & 0x7fffffu;
  if (ex == 0) { m = fr; e = -149; } else { m = fr | 0x800000u; e = ex - 150; }
}
__aicore__ inline uint64_t frac_floor(uint64_t total, float p) {
  if (!(p > 0.0f)) return 0;
  if (p >= 1.0f) return total;
  uint64_t m; int32_t e; decompose(p, m, e);
  uint32_t s = (uint32_t)(-e);
  if (s >= 128) return 0;
  return shr128(mul64(total, m), s).lo;
}
__aicore__ inline bool accept(uint64_t k, float q, float p) {
  if (!(q > 0.0f) || !(p > 0.0f)) return false;
  if (is_pos_inf(q)) return k == 0;
  if (is_pos_inf(p)) return true;
  uint64_t mq, mp; int32_t eq, ep;
  decompose(q, mq, eq); decompose(p, mp, ep);
  U128 lhs = mul64(k, mq);
  int32_t d = ep - eq + 53;
  if (lhs.hi == 0 && lhs.lo == 0) return true;
  if (d >= 0) {
    if (d > 100) return true;
    U128 rhs; rhs.hi = 0; rhs.lo = mp;
    return lt128(lhs, shl128(rhs, (uint32_t)d));
  }
  uint32_t s = (uint32_t)(-d);
  if (lhs.hi != 0 || lhs.lo >= (1ull << 24) || s >= 64) return false;
  return (lhs.lo << s) < mp;
}
__aicore__ inline uint64_t to_fixed(float x) {
  if (!(x > 0.0f)) return 0;
  float y = x * 17592186044416.0f;
  if (y >= 9.223372e18f) return 1ull << 63;
  return (uint64_t)y;
}
__aicore__ inline float fixed_to_f32(uint64_t s) { return (float)s * 5.684341886080802e-14f; }
// ln(s * 2^-44) in f32 arithmetic (rt::math::ln_fixed uses f64; within 1e-6 here).
__aicore__ inline float ln_fixed(uint64_t s) {
  if (s == 0) return bits_f32(0xff800000u);
  int32_t lz = 0;
  uint64_t top = s;
  while ((top & 0x8000000000000000ull) == 0) { top <<= 1; ++lz; }
  int32_t e = 63 - lz - 44;
  float m = bits_f32((127u << 23) | (uint32_t)((top << 1) >> 41));
  if (m > 1.4142135f) { m *= 0.5f; e += 1; }
  float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
  float acc = 1.0f / 11.0f;
  acc = acc * t2 + 1.0f / 9.0f;
  acc = acc * t2 + 1.0f / 7.0f;
  acc = acc * t2 + 1.0f / 5.0f;
  acc = acc * t2 + 1.0f / 3.0f;
  acc = acc * t2 + 1.0f;
  float lnm = 2.0f * t * acc;
  // e * ln2 split so the product keeps ~40 bits.
  return (float)e * 0.693145751953125f + ((float)e * 1.4286068203094172e-6f + lnm);
}
} // namespace sk
#endif  // SAMPLER_ASCENDC_PRELUDE_H
