// Tiles as kernels walk them: a oneDNN memory seen as a TileBuffer, and loops over its rows (a channel
// group's contiguous pixels) for the sums a simulated core shares with its replica (batch norm, global
// pooling). Internal to the kernels.
#pragma once

#include "ops/kernel.hpp"
#include "ops/tile_buffer.hpp"
#include "tensor/dtype.hpp"

namespace tessera::ops {

// The buffer behind a kernel's memory (f32 or bf16; plain, channels-last or channel-blocked).
TileBuffer tile_buffer_of(const memory& m);
// A desc of `shape` in the same layout family as `like` (nChw16c stays nChw16c at another size).
memory::desc same_layout_desc(const memory::desc& like, const Shape& shape);

// Calls fn(row, first channel, lanes, pixels, n) for every row of pixels along W of every channel
// group, element (pixel p, lane j) at row[p · lanes + j]: a channel block in blocked layouts (padded
// lanes included; they hold zeros), every channel in channels-last, one channel in plain layouts.
// Rows are walked in memory order, so large tiles stream once.
template <class Element, class Fn>
void for_each_row(const TileBuffer& b, Fn&& fn) {
    const std::int64_t channels = b.channels();
    const bool channels_last = b.block == 1 && b.block_stride == 1 && channels > 1;
    const std::int64_t lanes = channels_last ? channels : b.block;
    const std::int64_t groups = (channels + lanes - 1) / lanes;
    TESSERA_ASSERT(b.spatial_stride[2] == lanes, "rows of a tile are contiguous along W");
    const int rank = b.spatial_rank();
    const std::int64_t depth = rank == 3 ? b.shape[2] : 1, height = b.shape[rank], width = b.shape[rank + 1];
    auto* base = static_cast<Element*>(b.data);
    for (std::int64_t n = 0; n < b.shape[0]; ++n) {
        for (std::int64_t g = 0; g < groups; ++g) {
            for (std::int64_t z = 0; z < depth; ++z) {
                for (std::int64_t y = 0; y < height; ++y) fn(base + b.offset(n, g * lanes, z, y, 0), g * lanes, lanes, width, n);
            }
        }
    }
}

// Channels a row walk can touch: rounded up to whole channel groups (blocked layouts pad to the block).
inline std::int64_t padded_channels(const TileBuffer& b) {
    const bool channels_last = b.block == 1 && b.block_stride == 1 && b.channels() > 1;
    const std::int64_t lanes = channels_last ? b.channels() : b.block;
    return (b.channels() + lanes - 1) / lanes * lanes;
}

inline float as_float(float v) { return v; }
inline float as_float(BFloat16 v) { return to_float(v); }
inline void assign(float& target, float v) { target = v; }
inline void assign(BFloat16& target, float v) { target = to_bfloat16(v); }

// Per-lane sums over a row: Σx (centre null) or Σ(x − centre)². A fixed lane count lets the compiler
// keep the accumulators in vector registers; rows are short enough for float accumulation, and the
// caller adds the rows in double.
template <int Lanes, class Element>
void add_row_sums(const Element* row, std::int64_t pixels, const float* centre, double* sums) {
    float accumulator[Lanes] = {};
    if (centre) {
        float c[Lanes];
        for (int j = 0; j < Lanes; ++j) c[j] = centre[j];
        for (std::int64_t p = 0; p < pixels; ++p) {
            for (int j = 0; j < Lanes; ++j) {
                const float d = as_float(row[p * Lanes + j]) - c[j];
                accumulator[j] += d * d;
            }
        }
    } else {
        for (std::int64_t p = 0; p < pixels; ++p) {
            for (int j = 0; j < Lanes; ++j) accumulator[j] += as_float(row[p * Lanes + j]);
        }
    }
    for (int j = 0; j < Lanes; ++j) sums[j] += accumulator[j];
}

template <class Element>
void add_row_sums(const Element* row, std::int64_t lanes, std::int64_t pixels, const float* centre, double* sums) {
    switch (lanes) {
        case 16: add_row_sums<16>(row, pixels, centre, sums); return;
        case 8: add_row_sums<8>(row, pixels, centre, sums); return;
        case 4: add_row_sums<4>(row, pixels, centre, sums); return;
        case 1: add_row_sums<1>(row, pixels, centre, sums); return;
        default: break;
    }
    for (std::int64_t j = 0; j < lanes; ++j) {
        float accumulator = 0;
        for (std::int64_t p = 0; p < pixels; ++p) {
            const float v = as_float(row[p * lanes + j]) - (centre ? centre[j] : 0.0f);
            accumulator += centre ? v * v : v;
        }
        sums[j] += accumulator;
    }
}

// row[p, j] −= offset[j] + slope[j] · x[p, j] (batch norm's correction for the replica's statistics).
template <int Lanes, class Element>
void subtract_affine_row(Element* row, const Element* x, std::int64_t pixels, const float* offset, const float* slope) {
    float a[Lanes], b[Lanes];
    for (int j = 0; j < Lanes; ++j) {
        a[j] = offset[j];
        b[j] = slope[j];
    }
    for (std::int64_t p = 0; p < pixels; ++p) {
        for (int j = 0; j < Lanes; ++j) {
            const std::int64_t i = p * Lanes + j;
            assign(row[i], as_float(row[i]) - a[j] - b[j] * as_float(x[i]));
        }
    }
}

template <class Element>
void subtract_affine_row(Element* row, const Element* x, std::int64_t lanes, std::int64_t pixels, const float* offset,
                         const float* slope) {
    switch (lanes) {
        case 16: subtract_affine_row<16>(row, x, pixels, offset, slope); return;
        case 8: subtract_affine_row<8>(row, x, pixels, offset, slope); return;
        case 4: subtract_affine_row<4>(row, x, pixels, offset, slope); return;
        case 1: subtract_affine_row<1>(row, x, pixels, offset, slope); return;
        default: break;
    }
    for (std::int64_t p = 0; p < pixels; ++p) {
        for (std::int64_t j = 0; j < lanes; ++j) {
            const std::int64_t i = p * lanes + j;
            assign(row[i], as_float(row[i]) - offset[j] - slope[j] * as_float(x[i]));
        }
    }
}

template <class Fn>
void with_element_type(DType dtype, Fn&& fn) {
    if (dtype == DType::F32) fn(float{});
    else fn(BFloat16{});
}

}  // namespace tessera::ops
