// TileBuffer: a node's activation (or gradient) inside a compiled graph, as code that moves tiles sees
// it — the logical shape [N, C, (D,) H, W] and where each element lives in oneDNN's layout (plain,
// channels-last or channel-blocked such as nChw16c). The core mesh copies halos between simulated
// cores with these, and the distributed kernels reduce over them.
//
//   TileBuffer from = executor.value_buffer(producer);          // a neighbour's tile
//   TileBuffer to = executor.value_buffer(halo_node);            // this core's widened buffer
//   copy_box(from, {0, 0}, to, {0, 9}, {64, 1});                 // one column of halo, all N and C
#pragma once

#include "tensor/tensor.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace tessera::ops {

struct TileBuffer {
    void* data = nullptr;
    DType dtype = DType::F32;  // F32 or BF16
    Shape shape;               // [N, C, (D,) H, W] logical
    // Element strides: batch, channel block, and (D,) H, W (unused leading entries 0); lanes of a
    // channel block are contiguous. Plain and channels-last layouts have block 1.
    std::int64_t batch_stride = 0, block_stride = 0, block = 1;
    std::array<std::int64_t, 3> spatial_stride{0, 0, 0};

    int spatial_rank() const { return static_cast<int>(shape.size()) - 2; }
    std::int64_t channels() const { return shape[1]; }
    std::int64_t element_size() const { return dtype == DType::F32 ? 4 : 2; }
    // Offset (elements) of element (n, channel, z, y, x); z ignored in 2D.
    std::int64_t offset(std::int64_t n, std::int64_t channel, std::int64_t z, std::int64_t y, std::int64_t x) const {
        return n * batch_stride + (channel / block) * block_stride + channel % block + z * spatial_stride[0] +
               y * spatial_stride[1] + x * spatial_stride[2];
    }
};

using Box = std::vector<std::int64_t>;  // one entry per spatial axis, outermost first

// Copies a spatial box (every N and C) between two buffers of the same type and channel count.
void copy_box(const TileBuffer& from, const Box& from_origin, const TileBuffer& to, const Box& to_origin,
              const Box& extent);
// to += from over the box (bf16: added in f32 and rounded once).
void add_box(const TileBuffer& from, const Box& from_origin, const TileBuffer& to, const Box& to_origin,
             const Box& extent);
// How a halo travels between processes: one box of a buffer (every N and C), dense, in the buffer's
// layout kind (plain, channels-last, or channel-blocked with lanes padded to whole blocks), so that
// copy_box into and out of it moves whole rows and add_box from it adds exactly as from the buffer.
// The sender's layout goes with the rows: the receiver's own buffers may have been laid out otherwise.
struct PackedLayout {
    std::int32_t block = 1;          // channel block (1: not blocked)
    std::int32_t channels_last = 0;  // 1: channels innermost (block 1)
};
PackedLayout packed_layout(const TileBuffer& buffer);
std::int64_t packed_elements(std::int64_t batch, std::int64_t channels, PackedLayout layout, const Box& extent);
TileBuffer packed_buffer(DType dtype, std::int64_t batch, std::int64_t channels, PackedLayout layout, const Box& extent,
                         void* data);
// Zeros a box of the buffer.
void zero_box(const TileBuffer& buffer, const Box& origin, const Box& extent);
// `pixels` pixels of `channels` channels each, between channels-last rows whose pixels lie `source_stride`
// and `target_stride` elements apart (a channel slice of a wider buffer has more than `channels`).
template <class Element>
void copy_pixels(const Element* source, std::int64_t source_stride, Element* target, std::int64_t target_stride,
                 std::int64_t pixels, std::int64_t channels) {
    // 8 and 16 channels (the U-Nets' own) as fixed-size copies the compiler inlines: a library call per
    // pixel cost more than the copy.
    const auto each = [&](auto fixed) {
        constexpr std::int64_t count = decltype(fixed)::value;
        for (std::int64_t x = 0; x < pixels; ++x) std::memcpy(target + x * target_stride, source + x * source_stride, count * sizeof(Element));
    };
    if (channels == 8) return each(std::integral_constant<std::int64_t, 8>{});
    if (channels == 16) return each(std::integral_constant<std::int64_t, 16>{});
    for (std::int64_t x = 0; x < pixels; ++x)
        std::memcpy(target + x * target_stride, source + x * source_stride, static_cast<std::size_t>(channels) * sizeof(Element));
}
// Channels [first, first + count) of a buffer, as a buffer of `count` channels (its rows strided as the
// whole's): a concatenation's part inside its output. `first` starts a channel block.
TileBuffer channel_slice(const TileBuffer& buffer, std::int64_t first, std::int64_t count);

}  // namespace tessera::ops
