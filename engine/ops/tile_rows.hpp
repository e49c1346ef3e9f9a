// Tiles as kernels walk them: a oneDNN memory seen as a TileBuffer, and loops over its rows (a channel
// group's contiguous pixels) for the sums a simulated core shares with its replica (batch norm, global
// pooling). Internal to the kernels.
#pragma once

#include "ops/kernel.hpp"
#include "ops/tile_buffer.hpp"
#include "tensor/dtype.hpp"

#include <optional>
#include <vector>
#include <xmmintrin.h>

namespace tessera::ops {

// Whether Tessera's own vector kernels for max pooling and narrow pointwise heads run rather than
// oneDNN's: on a CPU with AVX2 and FMA, unless TESSERA_ROW_KERNELS=0 (to compare the two).
bool vector_row_kernels_enabled();

// The buffer behind a kernel's memory (f32 or bf16; plain, channels-last or channel-blocked).
TileBuffer tile_buffer_of(const memory& m);
// Whether a desc is a dense tile layout: plain, channels-last, or channel-blocked by 16, 8 or 4.
bool is_tile_layout(const memory::desc& desc);
// A desc of `shape` in the same layout family as `like` (nChw16c stays nChw16c at another size).
memory::desc same_layout_desc(const memory::desc& like, const Shape& shape);

// The rows of a tile: runs of pixels along W of one channel group, element (pixel p, lane j) at
// row[p · lanes + j]. A group is a channel block in blocked layouts (padded lanes included; they hold
// zeros), every channel in channels-last, one channel in plain layouts. Rows are numbered in memory
// order (n, group, z, y), so a loop over them streams a large tile once and can be split across threads.
struct TileRows {
    explicit TileRows(const TileBuffer& b)
        : buffer(&b), lanes(b.block == 1 && b.block_stride == 1 && b.channels() > 1 ? b.channels() : b.block),
          groups((b.channels() + lanes - 1) / lanes), depth(b.spatial_rank() == 3 ? b.shape[2] : 1),
          height(b.shape[static_cast<std::size_t>(b.spatial_rank())]),
          width(b.shape[static_cast<std::size_t>(b.spatial_rank()) + 1]), count(b.shape[0] * groups * depth * height) {
        TESSERA_ASSERT(b.spatial_stride[2] == lanes, "rows of a tile are contiguous along W");
    }
    std::int64_t batch(std::int64_t row) const { return row / (groups * depth * height); }
    std::int64_t first_channel(std::int64_t row) const { return row / (depth * height) % groups * lanes; }
    // Offset (elements) of the row's first element.
    std::int64_t offset(std::int64_t row) const {
        return buffer->offset(batch(row), first_channel(row), row / height % depth, row % height, 0);
    }
    // Every row's offset and first channel, in row order, from nested loops: offset(row) divides four
    // times, which on a 3D tile's rows of 256 floats cost about as much as a batch norm's pass over them.
    struct RowStart {
        std::int64_t offset = 0, first_channel = 0;
    };
    std::vector<RowStart> starts() const {
        std::vector<RowStart> result;
        result.reserve(static_cast<std::size_t>(count));
        const TileBuffer& b = *buffer;
        for (std::int64_t n = 0; n < b.shape[0]; ++n) {
            for (std::int64_t group = 0; group < groups; ++group) {
                const std::int64_t first = group * lanes, base = b.offset(n, first, 0, 0, 0);
                for (std::int64_t z = 0; z < depth; ++z)
                    for (std::int64_t y = 0; y < height; ++y) result.push_back({base + z * b.spatial_stride[0] + y * b.spatial_stride[1], first});
            }
        }
        return result;
    }

    const TileBuffer* buffer;
    std::int64_t lanes, groups, depth, height, width;
    std::int64_t count;  // rows in the tile
};

// Calls fn(row, first channel, lanes, pixels, n) for every row (TileRows), in memory order.
template <class Element, class Fn>
void for_each_row(const TileBuffer& b, Fn&& fn) {
    const TileRows rows(b);
    auto* base = static_cast<Element*>(b.data);
    const std::int64_t rows_per_image = rows.count / b.shape[0];
    std::int64_t r = 0;
    for (const TileRows::RowStart& start : rows.starts()) fn(base + start.offset, start.first_channel, rows.lanes, rows.width, r++ / rows_per_image);
}

// The rows of an f32 tile layout (TileRows' lanes, groups and count), without a buffer; none for another
// type or layout. Kernels decide from it whether their vector loops fit the layout an input arrives in.
struct RowShape {
    std::int64_t lanes = 0, groups = 0, count = 0;
};
std::optional<RowShape> f32_row_shape(const memory::desc& desc);

// Channels a row walk can touch: rounded up to whole channel groups (blocked layouts pad to the block).
inline std::int64_t padded_channels(const TileBuffer& b) {
    const TileRows rows(b);
    return rows.groups * rows.lanes;
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

// While alive, this thread's SSE/AVX arithmetic flushes denormal results and reads denormal inputs as
// zero (MXCSR FTZ and DAZ), as oneDNN's kernels run: each denormal value costs a microcode assist (a
// batch-norm loop over a tile of 1e-37 values ran 4–11× slower unflushed), and gradients deep in a
// backward pass hold values below 1e-38.
class DenormalsFlushed {
public:
    DenormalsFlushed() : m_saved(_mm_getcsr()) { _mm_setcsr(m_saved | k_flush_to_zero | k_denormals_are_zero); }
    ~DenormalsFlushed() { _mm_setcsr(m_saved); }
    DenormalsFlushed(const DenormalsFlushed&) = delete;
    DenormalsFlushed& operator=(const DenormalsFlushed&) = delete;

private:
    static constexpr unsigned k_flush_to_zero = 1u << 15, k_denormals_are_zero = 1u << 6;
    unsigned m_saved;
};

template <class Fn>
void with_element_type(DType dtype, Fn&& fn) {
    if (dtype == DType::F32) fn(float{});
    else fn(BFloat16{});
}

}  // namespace tessera::ops
