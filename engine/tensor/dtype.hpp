// Element types of Tensor. fp32 for compute, int32/uint8 for labels, bf16/fp16 stored as raw 16-bit
// patterns with explicit conversions (compute happens in fp32 or in oneDNN kernels).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace tessera {

enum class DType : std::uint8_t { F32, BF16, F16, I32, U8 };

struct BFloat16 {
    std::uint16_t bits = 0;
};
struct Float16 {
    std::uint16_t bits = 0;
};

constexpr std::size_t dtype_size(DType dtype) {  // bytes per element
    switch (dtype) {
        case DType::F32: return 4;
        case DType::I32: return 4;
        case DType::BF16: return 2;
        case DType::F16: return 2;
        case DType::U8: return 1;
    }
    return 0;
}

constexpr std::string_view dtype_name(DType dtype) {
    switch (dtype) {
        case DType::F32: return "f32";
        case DType::I32: return "i32";
        case DType::BF16: return "bf16";
        case DType::F16: return "f16";
        case DType::U8: return "u8";
    }
    return "?";
}

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<std::uint8_t> { static constexpr DType value = DType::U8; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::BF16; };
template <> struct DTypeOf<Float16> { static constexpr DType value = DType::F16; };
template <class T> inline constexpr DType dtype_of = DTypeOf<T>::value;

// Round to nearest even, as hardware bf16 conversion does; NaN stays NaN.
inline BFloat16 to_bfloat16(float value) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, 4);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
        return BFloat16{static_cast<std::uint16_t>((bits >> 16) | 0x0040u)};
    }
    const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return BFloat16{static_cast<std::uint16_t>((bits + rounding) >> 16)};
}

inline float to_float(BFloat16 value) {
    const std::uint32_t bits = static_cast<std::uint32_t>(value.bits) << 16;
    float result = 0;
    std::memcpy(&result, &bits, 4);
    return result;
}

Float16 to_float16(float value);
float to_float(Float16 value);

}  // namespace tessera
