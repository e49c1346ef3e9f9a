#include "tensor/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <sstream>

namespace tessera {

// ---- fp16 -----------------------------------------------------------------------------------

Float16 to_float16(float value) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, 4);
    const std::uint32_t sign = (bits >> 16) & 0x8000u;
    const std::uint32_t exponent = (bits >> 23) & 0xffu;
    std::uint32_t mantissa = bits & 0x7fffffu;
    if (exponent == 0xffu) {  // inf or NaN
        return Float16{static_cast<std::uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u))};
    }
    const int half_exponent = static_cast<int>(exponent) - 127 + 15;
    if (half_exponent >= 0x1f) return Float16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // overflow → inf
    if (half_exponent <= 0) {  // subnormal or zero in fp16
        if (half_exponent < -10) return Float16{static_cast<std::uint16_t>(sign)};
        mantissa |= 0x800000u;
        const int shift = 14 - half_exponent;
        std::uint32_t half_mantissa = mantissa >> shift;
        const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
        const std::uint32_t halfway = 1u << (shift - 1);
        if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u))) ++half_mantissa;
        return Float16{static_cast<std::uint16_t>(sign | half_mantissa)};
    }
    std::uint32_t half = sign | (static_cast<std::uint32_t>(half_exponent) << 10) | (mantissa >> 13);
    const std::uint32_t remainder = mantissa & 0x1fffu;
    if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;  // may carry into inf: correct
    return Float16{static_cast<std::uint16_t>(half)};
}

float to_float(Float16 value) {
    const std::uint32_t sign = (static_cast<std::uint32_t>(value.bits) & 0x8000u) << 16;
    const std::uint32_t exponent = (value.bits >> 10) & 0x1fu;
    std::uint32_t mantissa = value.bits & 0x3ffu;
    std::uint32_t bits = 0;
    if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int shift = 0;
            while ((mantissa & 0x400u) == 0) {
                mantissa <<= 1;
                ++shift;
            }
            mantissa &= 0x3ffu;
            bits = sign | (static_cast<std::uint32_t>(127 - 15 + 1 - shift) << 23) | (mantissa << 13);
        }
    } else if (exponent == 0x1fu) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
    }
    float result = 0;
    std::memcpy(&result, &bits, 4);
    return result;
}

// ---- shapes ---------------------------------------------------------------------------------

std::int64_t num_elements_of(std::span<const std::int64_t> shape) {
    std::int64_t count = 1;
    for (std::int64_t extent : shape) count *= extent;
    return count;
}

std::string shape_to_string(std::span<const std::int64_t> shape) {
    std::ostringstream out;
    out << '[';
    for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
    out << ']';
    return out.str();
}

Shape contiguous_strides(std::span<const std::int64_t> shape) {
    Shape strides(shape.size());
    std::int64_t stride = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        strides[i] = stride;
        stride *= shape[i];
    }
    return strides;
}

// ---- storage --------------------------------------------------------------------------------

Storage::Storage(std::size_t num_bytes) : m_num_bytes(num_bytes) {
    // aligned_alloc needs a size that is a multiple of the alignment.
    const std::size_t rounded = std::max<std::size_t>(alignment, (num_bytes + alignment - 1) / alignment * alignment);
    m_data = static_cast<std::byte*>(std::aligned_alloc(alignment, rounded));
    TESSERA_CHECK(m_data != nullptr, "out of host memory: could not allocate " << num_bytes << " bytes");
}

Storage::~Storage() { std::free(m_data); }

// ---- tensor ---------------------------------------------------------------------------------

Tensor Tensor::empty(Shape shape, DType dtype) {
    for (std::size_t axis = 0; axis < shape.size(); ++axis) {
        TESSERA_CHECK(shape[axis] >= 0, "expected non-negative extents, got " << shape_to_string(shape)
                                                                                << " (axis " << axis << ")");
    }
    Tensor tensor;
    tensor.m_dtype = dtype;
    tensor.m_strides = contiguous_strides(shape);
    tensor.m_shape = std::move(shape);
    tensor.m_storage = std::make_shared<Storage>(tensor.num_bytes());
    return tensor;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
    Tensor tensor = empty(std::move(shape), dtype);
    std::memset(tensor.raw_data(), 0, tensor.num_bytes());
    return tensor;
}

std::int64_t Tensor::dim(int axis) const {
    const int resolved = axis < 0 ? axis + rank() : axis;
    TESSERA_CHECK(resolved >= 0 && resolved < rank(),
                  "axis " << axis << " is out of range for a tensor of shape " << shape_to_string(m_shape));
    return m_shape[static_cast<std::size_t>(resolved)];
}

bool Tensor::is_contiguous() const noexcept {
    std::int64_t expected = 1;
    for (std::size_t i = m_shape.size(); i-- > 0;) {
        if (m_shape[i] != 1 && m_strides[i] != expected) return false;
        expected *= m_shape[i];
    }
    return true;
}

void* Tensor::raw_data() {
    TESSERA_CHECK(is_defined(), "expected a defined tensor, got an empty one");
    return m_storage->data() + m_offset * static_cast<std::int64_t>(dtype_size(m_dtype));
}

const void* Tensor::raw_data() const {
    TESSERA_CHECK(is_defined(), "expected a defined tensor, got an empty one");
    return m_storage->data() + m_offset * static_cast<std::int64_t>(dtype_size(m_dtype));
}

void Tensor::check_dtype(DType expected) const {
    TESSERA_CHECK(is_defined(), "expected a defined tensor, got an empty one");
    TESSERA_CHECK(m_dtype == expected,
                  "expected a tensor of " << dtype_name(expected) << ", got " << dtype_name(m_dtype));
}

std::int64_t Tensor::offset_of(std::initializer_list<std::int64_t> index) const {
    TESSERA_CHECK(static_cast<int>(index.size()) == rank(),
                  "expected " << rank() << " indices for shape " << shape_to_string(m_shape) << ", got "
                              << index.size());
    std::int64_t offset = 0;
    std::size_t axis = 0;
    for (std::int64_t i : index) {
        TESSERA_CHECK(i >= 0 && i < m_shape[axis], "index " << i << " is out of range on axis " << axis
                                                            << " of shape " << shape_to_string(m_shape));
        offset += i * m_strides[axis];
        ++axis;
    }
    return offset;
}

Tensor Tensor::view_box(std::span<const std::int64_t> begin, std::span<const std::int64_t> extent) const {
    TESSERA_CHECK(static_cast<int>(begin.size()) == rank() && static_cast<int>(extent.size()) == rank(),
                  "expected a box with " << rank() << " axes for shape " << shape_to_string(m_shape)
                                         << ", got begin " << shape_to_string(begin) << " and extent "
                                         << shape_to_string(extent));
    Tensor view = *this;
    for (std::size_t axis = 0; axis < begin.size(); ++axis) {
        TESSERA_CHECK(begin[axis] >= 0 && extent[axis] >= 0 && begin[axis] + extent[axis] <= m_shape[axis],
                      "box begin " << shape_to_string(begin) << " extent " << shape_to_string(extent)
                                   << " does not fit in shape " << shape_to_string(m_shape) << " (axis " << axis
                                   << ")");
        view.m_offset += begin[axis] * m_strides[axis];
        view.m_shape[axis] = extent[axis];
    }
    return view;
}

Tensor Tensor::reshape(Shape shape) const {
    TESSERA_CHECK(num_elements_of(shape) == num_elements(),
                  "cannot reshape " << shape_to_string(m_shape) << " (" << num_elements() << " elements) to "
                                    << shape_to_string(shape) << " (" << num_elements_of(shape) << " elements)");
    TESSERA_CHECK(is_contiguous(), "reshape needs a contiguous tensor; call contiguous() first");
    Tensor view = *this;
    view.m_strides = contiguous_strides(shape);
    view.m_shape = std::move(shape);
    return view;
}

Tensor Tensor::contiguous() const {
    if (is_contiguous()) return *this;
    return clone();
}

Tensor Tensor::clone() const {
    Tensor copy = empty(m_shape, m_dtype);
    copy.copy_from(*this);
    return copy;
}

namespace {

// Visits the tensor as rows along its innermost axis; calls row(dst_row, src_row, count).
template <class RowFn>
void for_each_row(const Shape& shape, const Shape& strides_a, const Shape& strides_b, RowFn&& row) {
    const int rank = static_cast<int>(shape.size());
    if (rank == 0) {
        row(std::int64_t{0}, std::int64_t{0}, std::int64_t{1});
        return;
    }
    const std::int64_t row_length = shape[static_cast<std::size_t>(rank - 1)];
    const std::int64_t num_rows = row_length == 0 ? 0 : num_elements_of(shape) / row_length;
    std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
    for (std::int64_t r = 0; r < num_rows; ++r) {
        std::int64_t offset_a = 0;
        std::int64_t offset_b = 0;
        for (int axis = 0; axis < rank - 1; ++axis) {
            offset_a += index[static_cast<std::size_t>(axis)] * strides_a[static_cast<std::size_t>(axis)];
            offset_b += index[static_cast<std::size_t>(axis)] * strides_b[static_cast<std::size_t>(axis)];
        }
        row(offset_a, offset_b, row_length);
        for (int axis = rank - 2; axis >= 0; --axis) {
            if (++index[static_cast<std::size_t>(axis)] < shape[static_cast<std::size_t>(axis)]) break;
            index[static_cast<std::size_t>(axis)] = 0;
        }
    }
}

double load_as_double(const std::byte* base, DType dtype, std::int64_t i) {
    switch (dtype) {
        case DType::F32: return reinterpret_cast<const float*>(base)[i];
        case DType::I32: return reinterpret_cast<const std::int32_t*>(base)[i];
        case DType::U8: return reinterpret_cast<const std::uint8_t*>(base)[i];
        case DType::BF16: return to_float(reinterpret_cast<const BFloat16*>(base)[i]);
        case DType::F16: return to_float(reinterpret_cast<const Float16*>(base)[i]);
    }
    return 0;
}

void store_from_double(std::byte* base, DType dtype, std::int64_t i, double value) {
    switch (dtype) {
        case DType::F32: reinterpret_cast<float*>(base)[i] = static_cast<float>(value); return;
        case DType::I32:
            reinterpret_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(std::lround(value));
            return;
        case DType::U8:
            reinterpret_cast<std::uint8_t*>(base)[i] =
                static_cast<std::uint8_t>(std::clamp<long>(std::lround(value), 0, 255));
            return;
        case DType::BF16: reinterpret_cast<BFloat16*>(base)[i] = to_bfloat16(static_cast<float>(value)); return;
        case DType::F16: reinterpret_cast<Float16*>(base)[i] = to_float16(static_cast<float>(value)); return;
    }
}

}  // namespace

void Tensor::copy_from(const Tensor& source) {
    TESSERA_CHECK(source.m_shape == m_shape && source.m_dtype == m_dtype,
                  "copy_from expects shape " << shape_to_string(m_shape) << " " << dtype_name(m_dtype) << ", got "
                                             << shape_to_string(source.m_shape) << " "
                                             << dtype_name(source.m_dtype));
    if (num_elements() == 0) return;
    const std::size_t element_size = dtype_size(m_dtype);
    auto* dst = static_cast<std::byte*>(raw_data());
    const auto* src = static_cast<const std::byte*>(source.raw_data());
    if (is_contiguous() && source.is_contiguous()) {
        // One copy: row by row, a 1×1 convolution's weights [C_out, C_in, 1, 1] were a call per element.
        std::memcpy(dst, src, static_cast<std::size_t>(num_elements()) * element_size);
        return;
    }
    const bool dense_rows = m_strides.empty() || (m_strides.back() == 1 && source.m_strides.back() == 1);
    for_each_row(m_shape, m_strides, source.m_strides, [&](std::int64_t dst_offset, std::int64_t src_offset, std::int64_t count) {
        if (dense_rows) {
            std::memcpy(dst + dst_offset * static_cast<std::int64_t>(element_size),
                        src + src_offset * static_cast<std::int64_t>(element_size),
                        static_cast<std::size_t>(count) * element_size);
            return;
        }
        const std::int64_t dst_step = m_strides.back();
        const std::int64_t src_step = source.m_strides.back();
        for (std::int64_t i = 0; i < count; ++i) {
            std::memcpy(dst + (dst_offset + i * dst_step) * static_cast<std::int64_t>(element_size),
                        src + (src_offset + i * src_step) * static_cast<std::int64_t>(element_size), element_size);
        }
    });
}

void Tensor::fill(double value) {
    if (num_elements() == 0) return;
    auto* base = static_cast<std::byte*>(raw_data());
    const std::int64_t step = m_strides.empty() ? 1 : m_strides.back();
    for_each_row(m_shape, m_strides, m_strides, [&](std::int64_t offset, std::int64_t, std::int64_t count) {
        for (std::int64_t i = 0; i < count; ++i) store_from_double(base, m_dtype, offset + i * step, value);
    });
}

Tensor Tensor::to(DType dtype) const {
    if (dtype == m_dtype) return clone();
    Tensor result = empty(m_shape, dtype);
    if (num_elements() == 0) return result;
    const auto* src = static_cast<const std::byte*>(raw_data());
    auto* dst = static_cast<std::byte*>(result.raw_data());
    const std::int64_t step = m_strides.empty() ? 1 : m_strides.back();
    std::int64_t out_index = 0;
    for_each_row(m_shape, m_strides, m_strides, [&](std::int64_t offset, std::int64_t, std::int64_t count) {
        for (std::int64_t i = 0; i < count; ++i) {
            store_from_double(dst, dtype, out_index++, load_as_double(src, m_dtype, offset + i * step));
        }
    });
    return result;
}

}  // namespace tessera
