// Internal to engine/loss: branch-free exp and log on float that the compiler can vectorise.
//
// std::exp and std::log are library calls that no loop around them can vectorise (glibc's vector
// variants need -ffast-math, which the engine does not use). These are Cephes' single-precision
// polynomials, written with selects instead of branches; exp and log stay within 2 ulp of std:: on the
// domain stated, log1p within 3 (tests/engine/loss/test_fast_math.cpp measures it). The selects become
// SIMD blends only with -fno-trapping-math, which engine/loss/CMakeLists.txt sets for the library.
//
//   for (j = 0; j < n; ++j) e[j] = exp_f32(z[j] - m[j]);   // becomes SIMD code at -O3
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace tessera::loss::detail {

// max by value: std::max returns a reference, and a load through it hides from the vectoriser that
// `m[j] = std::max(m[j], row[j])` reads only m[j] and row[j]. NaN in b is skipped.
inline float max_f32(float a, float b) { return b > a ? b : a; }

// e^x. Exact 0 below -87.33 (where float would go subnormal), +inf above 88; NaN stays NaN.
inline float exp_f32(float x) {
    constexpr float min_x = -87.3365447505531f;  // log(FLT_MIN)
    constexpr float max_x = 88.0f;               // keeps the power of two below 2^128
    const float clamped = x < min_x ? min_x : (x > max_x ? max_x : x);
    // x = n ln2 + r with |r| <= ln2 / 2; n rounded to nearest by the 1.5·2^23 trick.
    const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = clamped - n * 0.693359375f;  // ln2 in two parts, the first exact in float
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e_r = p * (r * r) + r + 1.0f;
    const float two_n = std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
    const float result = e_r * two_n;
    return x < min_x ? 0.0f : (x > max_x ? std::numeric_limits<float>::infinity() : result);
}

// Natural log for positive, normal, finite x (what the losses pass: sums ≥ 1, 1 + e^-|s|).
inline float log_f32(float x) {
    const std::int32_t bits = std::bit_cast<std::int32_t>(x);
    const float exponent = static_cast<float>(((bits >> 23) & 0xff) - 126);
    const float mantissa = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // [0.5, 1)
    const bool is_low = mantissa < 0.707106781186547524f;
    const float e = is_low ? exponent - 1.0f : exponent;
    const float m = is_low ? mantissa + mantissa - 1.0f : mantissa - 1.0f;  // [-0.29, 0.41]
    const float m2 = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * m2;
    y = y - 2.12194440e-4f * e;
    y = y - 0.5f * m2;
    return (m + y) + 0.693359375f * e;
}

// log(1 + u) for u in [0, 1], accurate for tiny u (Goldberg's correction: the rounding of 1 + u is
// divided back out).
inline float log1p_f32(float u) {
    const float w = 1.0f + u;
    const float d = w - 1.0f;
    const float ratio = d == 0.0f ? 1.0f : u / d;
    return d == 0.0f ? u : log_f32(w) * ratio;
}

}  // namespace tessera::loss::detail
