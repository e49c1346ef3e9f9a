// Tensor: a dense N-d array with shared, 64-byte aligned storage.
//
// Shapes are listed outermost first: 4-d activations are [N, C, H, W], 5-d are [N, C, D, H, W], a
// volume is [D, H, W]. Strides count elements, never bytes. A view (view_box) shares storage with its
// parent, which is how tiles and halos are cut out of a larger tensor without copying:
//
//   Tensor volume = Tensor::zeros({64, 256, 256}, DType::F32);             // [D, H, W]
//   Tensor tile = volume.view_box({0, 128, 0}, {64, 128, 256});            // lower half in H
//   tile.fill(1.0f);                                                       // writes into volume
//   Tensor packed = tile.contiguous();                                     // a copy, dense strides
#pragma once

#include "core/error.hpp"
#include "tensor/dtype.hpp"

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tessera {

using Shape = std::vector<std::int64_t>;

std::int64_t num_elements_of(std::span<const std::int64_t> shape);
std::string shape_to_string(std::span<const std::int64_t> shape);  // "[2, 3, 4]"
Shape contiguous_strides(std::span<const std::int64_t> shape);       // elements

// Aligned heap block; owned through shared_ptr by every tensor that views it.
class Storage {
public:
    static constexpr std::size_t alignment = 64;  // bytes: one cache line, one AVX-512 register

    explicit Storage(std::size_t num_bytes);
    ~Storage();
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    std::byte* data() noexcept { return m_data; }
    const std::byte* data() const noexcept { return m_data; }
    std::size_t num_bytes() const noexcept { return m_num_bytes; }

private:
    std::byte* m_data = nullptr;
    std::size_t m_num_bytes = 0;
};

class Tensor {
public:
    Tensor() = default;  // an empty tensor: rank 0, no storage

    static Tensor empty(Shape shape, DType dtype);  // uninitialised
    static Tensor zeros(Shape shape, DType dtype);
    template <class T> static Tensor full(Shape shape, T value);

    bool is_defined() const noexcept { return m_storage != nullptr; }
    DType dtype() const noexcept { return m_dtype; }
    const Shape& shape() const noexcept { return m_shape; }
    const Shape& strides() const noexcept { return m_strides; }  // elements
    int rank() const noexcept { return static_cast<int>(m_shape.size()); }
    std::int64_t dim(int axis) const;  // negative axes count from the end
    std::int64_t num_elements() const noexcept { return num_elements_of(m_shape); }
    std::size_t num_bytes() const noexcept {  // bytes of the elements this tensor spans
        return static_cast<std::size_t>(num_elements()) * dtype_size(m_dtype);
    }
    bool is_contiguous() const noexcept;
    bool shares_storage_with(const Tensor& other) const noexcept {
        return m_storage && m_storage == other.m_storage;
    }

    template <class T> T* data();
    template <class T> const T* data() const;
    void* raw_data();
    const void* raw_data() const;

    // Element access by full index; checked. For tests and slow paths, not for kernels.
    template <class T> T& at(std::initializer_list<std::int64_t> index);
    template <class T> const T& at(std::initializer_list<std::int64_t> index) const;

    // A sub-box sharing storage: begin and extent have one entry per axis.
    Tensor view_box(std::span<const std::int64_t> begin, std::span<const std::int64_t> extent) const;
    Tensor view_box(std::initializer_list<std::int64_t> begin,
                    std::initializer_list<std::int64_t> extent) const {
        return view_box(std::span(begin.begin(), begin.size()), std::span(extent.begin(), extent.size()));
    }
    // Same elements, new shape; the tensor must be contiguous.
    Tensor reshape(Shape shape) const;

    Tensor contiguous() const;       // this tensor if already contiguous, else a dense copy
    Tensor clone() const;            // always a dense copy
    void copy_from(const Tensor& source);  // same shape and dtype; any strides on either side
    void fill(double value);
    Tensor to(DType dtype) const;    // converted dense copy (float → int rounds to nearest)

private:
    std::int64_t offset_of(std::initializer_list<std::int64_t> index) const;
    void check_dtype(DType expected) const;

    std::shared_ptr<Storage> m_storage;
    std::int64_t m_offset = 0;  // elements from the start of storage
    Shape m_shape;
    Shape m_strides;  // elements
    DType m_dtype = DType::F32;
};

template <class T> T* Tensor::data() {
    check_dtype(dtype_of<T>);
    return reinterpret_cast<T*>(m_storage->data()) + m_offset;
}

template <class T> const T* Tensor::data() const {
    check_dtype(dtype_of<T>);
    return reinterpret_cast<const T*>(m_storage->data()) + m_offset;
}

template <class T> T& Tensor::at(std::initializer_list<std::int64_t> index) {
    return data<T>()[offset_of(index)];
}

template <class T> const T& Tensor::at(std::initializer_list<std::int64_t> index) const {
    return data<T>()[offset_of(index)];
}

template <class T> Tensor Tensor::full(Shape shape, T value) {
    Tensor result = empty(std::move(shape), dtype_of<T>);
    T* out = result.data<T>();
    const std::int64_t count = result.num_elements();
    for (std::int64_t i = 0; i < count; ++i) out[i] = value;
    return result;
}

}  // namespace tessera
