#include "ops/tile_buffer.hpp"

#include "core/error.hpp"

#include <cstring>

namespace tessera::ops {

namespace {

// How a layout splits into contiguous rows along W: per (n, group, z, y) one run of `row_length(x)`
// elements. Plain: a group per channel; blocked: per channel block (lanes included); channels-last:
// one group holding every channel. Channels-last with more channels between pixels than the buffer
// has (a channel slice of a wider buffer): a run per pixel.
enum class RowKind { Plain, Blocked, ChannelsLast, ChannelsLastSlice, Other };

RowKind row_kind(const TileBuffer& b) {
    if (b.block > 1) return b.spatial_stride[2] == b.block ? RowKind::Blocked : RowKind::Other;
    if (b.spatial_stride[2] == 1) return RowKind::Plain;
    if (b.block_stride == 1 && b.spatial_stride[2] == b.channels()) return RowKind::ChannelsLast;
    if (b.block_stride == 1 && b.spatial_stride[2] > b.channels()) return RowKind::ChannelsLastSlice;
    return RowKind::Other;
}

bool channels_last_like(RowKind kind) { return kind == RowKind::ChannelsLast || kind == RowKind::ChannelsLastSlice; }

struct Walk {
    std::int64_t z0 = 0, y0 = 0, x0 = 0, depth = 1, height = 1, width = 1;
};

Walk make_walk(const TileBuffer& b, const Box& origin, const Box& extent) {
    const int rank = b.spatial_rank();
    TESSERA_ASSERT(rank == 2 || rank == 3, "tile boxes are 2D or 3D");
    TESSERA_ASSERT(static_cast<int>(origin.size()) == rank && static_cast<int>(extent.size()) == rank,
                   "a box needs one origin and extent per spatial axis");
    for (int axis = 0; axis < rank; ++axis) {
        TESSERA_ASSERT(origin[axis] >= 0 && extent[axis] >= 0 && origin[axis] + extent[axis] <= b.shape[axis + 2],
                       "box [" << origin[axis] << ", " << origin[axis] + extent[axis] << ") outside a buffer of "
                               << b.shape[axis + 2] << " along axis " << axis);
    }
    Walk w;
    if (rank == 3) {
        w.z0 = origin[0];
        w.depth = extent[0];
    }
    w.y0 = origin[rank - 2];
    w.height = extent[rank - 2];
    w.x0 = origin[rank - 1];
    w.width = extent[rank - 1];
    return w;
}

float load(const void* base, DType dtype, std::int64_t i) {
    if (dtype == DType::F32) return static_cast<const float*>(base)[i];
    return to_float(static_cast<const BFloat16*>(base)[i]);
}

void store(void* base, DType dtype, std::int64_t i, float value) {
    if (dtype == DType::F32) static_cast<float*>(base)[i] = value;
    else static_cast<BFloat16*>(base)[i] = to_bfloat16(value);
}

enum class Operation { Copy, Add };

void run_rows(const TileBuffer& from, const Box& from_origin, const TileBuffer& to, const Box& to_origin,
              const Box& extent, Operation operation) {
    TESSERA_ASSERT(from.dtype == to.dtype && from.shape[0] == to.shape[0] && from.shape[1] == to.shape[1],
                   "tile boxes move between buffers of one type, batch and channel count");
    const Walk a = make_walk(from, from_origin, extent);
    const Walk b = make_walk(to, to_origin, extent);
    const std::int64_t batch = from.shape[0], channels = from.channels();
    const RowKind kind = row_kind(from);
    const std::int64_t element = from.element_size();
    auto* source = static_cast<const char*>(from.data);
    auto* target = static_cast<char*>(to.data);
    if (operation == Operation::Copy && channels_last_like(kind) && channels_last_like(row_kind(to)) &&
        (kind == RowKind::ChannelsLastSlice || row_kind(to) == RowKind::ChannelsLastSlice)) {
        for (std::int64_t n = 0; n < batch; ++n) {
            for (std::int64_t z = 0; z < a.depth; ++z) {
                for (std::int64_t y = 0; y < a.height; ++y) {
                    const std::int64_t s = from.offset(n, 0, a.z0 + z, a.y0 + y, a.x0);
                    const std::int64_t t = to.offset(n, 0, b.z0 + z, b.y0 + y, b.x0);
                    if (from.dtype == DType::F32) {
                        copy_pixels(reinterpret_cast<const float*>(source) + s, from.spatial_stride[2], reinterpret_cast<float*>(target) + t,
                                    to.spatial_stride[2], a.width, channels);
                    } else {
                        copy_pixels(reinterpret_cast<const std::uint16_t*>(source) + s, from.spatial_stride[2],
                                    reinterpret_cast<std::uint16_t*>(target) + t, to.spatial_stride[2], a.width, channels);
                    }
                }
            }
        }
        return;
    }
    const bool rows = kind != RowKind::Other && kind != RowKind::ChannelsLastSlice && kind == row_kind(to) && from.block == to.block;
    if (rows) {
        std::int64_t groups = channels, lanes = a.width;
        if (kind == RowKind::Blocked) {
            groups = (channels + from.block - 1) / from.block;
            lanes = a.width * from.block;
        } else if (kind == RowKind::ChannelsLast) {
            groups = 1;
            lanes = a.width * channels;
        }
        const std::int64_t group_channels = kind == RowKind::Blocked ? from.block : 1;
        for (std::int64_t n = 0; n < batch; ++n) {
            for (std::int64_t g = 0; g < groups; ++g) {
                for (std::int64_t z = 0; z < a.depth; ++z) {
                    for (std::int64_t y = 0; y < a.height; ++y) {
                        const std::int64_t s = from.offset(n, g * group_channels, a.z0 + z, a.y0 + y, a.x0);
                        const std::int64_t t = to.offset(n, g * group_channels, b.z0 + z, b.y0 + y, b.x0);
                        if (operation == Operation::Copy) {
                            std::memcpy(target + t * element, source + s * element, static_cast<std::size_t>(lanes * element));
                        } else if (from.dtype == DType::F32) {
                            const float* in = reinterpret_cast<const float*>(source) + s;
                            float* out = reinterpret_cast<float*>(target) + t;
                            for (std::int64_t i = 0; i < lanes; ++i) out[i] += in[i];
                        } else {
                            for (std::int64_t i = 0; i < lanes; ++i) {
                                store(target, to.dtype, t + i, load(target, to.dtype, t + i) + load(source, from.dtype, s + i));
                            }
                        }
                    }
                }
            }
        }
        return;
    }
    // Different layouts on the two sides: element by element (correct, slower; rare).
    for (std::int64_t n = 0; n < batch; ++n) {
        for (std::int64_t c = 0; c < channels; ++c) {
            for (std::int64_t z = 0; z < a.depth; ++z) {
                for (std::int64_t y = 0; y < a.height; ++y) {
                    for (std::int64_t x = 0; x < a.width; ++x) {
                        const std::int64_t s = from.offset(n, c, a.z0 + z, a.y0 + y, a.x0 + x);
                        const std::int64_t t = to.offset(n, c, b.z0 + z, b.y0 + y, b.x0 + x);
                        const float value = load(source, from.dtype, s);
                        store(target, to.dtype, t, operation == Operation::Copy ? value : load(target, to.dtype, t) + value);
                    }
                }
            }
        }
    }
}

}  // namespace

void copy_box(const TileBuffer& from, const Box& from_origin, const TileBuffer& to, const Box& to_origin,
              const Box& extent) {
    run_rows(from, from_origin, to, to_origin, extent, Operation::Copy);
}

void add_box(const TileBuffer& from, const Box& from_origin, const TileBuffer& to, const Box& to_origin,
             const Box& extent) {
    run_rows(from, from_origin, to, to_origin, extent, Operation::Add);
}

TileBuffer channel_slice(const TileBuffer& buffer, std::int64_t first, std::int64_t count) {
    TESSERA_ASSERT(first >= 0 && count > 0 && first + count <= buffer.channels(),
                   "channels [" << first << ", " << first + count << ") of a buffer of " << buffer.channels());
    TESSERA_ASSERT(first % buffer.block == 0, "a channel slice starts a block of " << buffer.block << ", not at channel " << first);
    TileBuffer slice = buffer;
    slice.data = static_cast<char*>(buffer.data) + buffer.offset(0, first, 0, 0, 0) * buffer.element_size();
    slice.shape[1] = count;
    return slice;
}

PackedLayout packed_layout(const TileBuffer& buffer) {
    switch (row_kind(buffer)) {
        case RowKind::Blocked: return {static_cast<std::int32_t>(buffer.block), 0};
        case RowKind::ChannelsLast:
        case RowKind::ChannelsLastSlice: return {1, 1};
        case RowKind::Plain:
        case RowKind::Other: break;  // without whole rows a buffer is copied element by element either way
    }
    return {1, 0};
}

std::int64_t packed_elements(std::int64_t batch, std::int64_t channels, PackedLayout layout, const Box& extent) {
    std::int64_t elements = batch * ((channels + layout.block - 1) / layout.block * layout.block);
    for (std::int64_t size : extent) elements *= size;
    return elements;
}

TileBuffer packed_buffer(DType dtype, std::int64_t batch, std::int64_t channels, PackedLayout layout, const Box& extent,
                         void* data) {
    TESSERA_ASSERT(extent.size() == 2 || extent.size() == 3, "a packed box is 2D or 3D");
    TESSERA_ASSERT(layout.block >= 1 && (layout.block == 1 || !layout.channels_last), "a packed layout is blocked or channels-last, not both");
    TileBuffer packed;
    packed.data = data;
    packed.dtype = dtype;
    packed.shape = {batch, channels};
    packed.shape.insert(packed.shape.end(), extent.begin(), extent.end());
    const bool volume = extent.size() == 3;
    const std::int64_t depth = volume ? extent[0] : 1;
    const std::int64_t height = extent[extent.size() - 2], width = extent.back();
    const std::int64_t plane = depth * height * width;  // elements of one channel (or block lane)
    const std::int64_t x_stride = layout.block > 1 ? layout.block : (layout.channels_last ? channels : 1);
    packed.spatial_stride = {volume ? height * width * x_stride : 0, width * x_stride, x_stride};
    if (layout.block > 1) {
        packed.block = layout.block;
        packed.block_stride = plane * layout.block;
        packed.batch_stride = (channels + layout.block - 1) / layout.block * packed.block_stride;
    } else if (layout.channels_last) {
        packed.block_stride = 1;
        packed.batch_stride = plane * channels;
    } else {
        packed.block_stride = plane;
        packed.batch_stride = plane * channels;
    }
    return packed;
}

void zero_box(const TileBuffer& buffer, const Box& origin, const Box& extent) {
    const Walk w = make_walk(buffer, origin, extent);
    const std::int64_t batch = buffer.shape[0], channels = buffer.channels();
    for (std::int64_t n = 0; n < batch; ++n) {
        for (std::int64_t c = 0; c < channels; ++c) {
            for (std::int64_t z = 0; z < w.depth; ++z) {
                for (std::int64_t y = 0; y < w.height; ++y) {
                    for (std::int64_t x = 0; x < w.width; ++x) {
                        store(buffer.data, buffer.dtype, buffer.offset(n, c, w.z0 + z, w.y0 + y, w.x0 + x), 0.0f);
                    }
                }
            }
        }
    }
}

}  // namespace tessera::ops
