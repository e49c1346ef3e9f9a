// Direct 3×3 and 3×3×3 stride-1 convolutions vectorised along W (AVX-512), for layers with few channels.
//
// oneDNN's kernels vectorise over channels, 16 to a vector: a layer with 8 output channels fills half of
// every vector (or runs channels-last at a similar rate), and a 3D U-Net's first level, 8 channels at
// full resolution, is over half of its step. Here each vector holds 16 neighbouring output positions of one
// row instead: for every input channel and tap, one shifted load of the input row times one broadcast
// weight, whatever the channel count. Forward and the input gradient are this product (the input
// gradient as the convolution of the output gradient with the weights flipped and transposed); the
// weights' gradient accumulates the same row products per tap.
//
// The operands are plain, zero-padded f32 buffers (PaddedRows): the input with the convolution's own
// padding, so every tap reads inside the buffer and the loops have no edge cases. Rows are padded on the
// right to whole vectors; lanes past a row's end are computed and not stored (outputs) or multiply zeros
// (the weights' gradient).
//
//   PaddedRows x = padded_rows_for(batch, in_channels, out_extent);   // sized for the outputs; place x.data
//   fill_padded(x, source, pad_begin);                                 // zeros around the values
//   row_conv_forward(x, relaid_weights(weights, ...), bias, out_channels, rank, output, true);  // channels-last
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace tessera::ops {

// Whether this CPU runs the row convolutions (AVX-512F); otherwise the caller keeps oneDNN's kernels.
bool row_convolution_available();
// Available, and not turned off with TESSERA_ROW_CONVOLUTIONS=0 (to compare with oneDNN's kernels, or to
// rule the row kernels out when a result looks wrong). Read when a kernel is built.
bool row_convolutions_enabled();

// A plain [N, C, D, H, W] f32 buffer (D = 1 in 2D) around which a convolution's padding is stored as
// zeros: logical element (n, c, z, y, x) of the padded tensor at
// data[(((n·C + c)·depth + z)·height + y)·row + lead + x]. `lead` zeros start each row so that one chosen
// column falls on a vector boundary (64-byte aligned in an aligned buffer).
struct PaddedRows {
    float* data = nullptr;
    std::int64_t batch = 0, channels = 0;
    std::int64_t depth = 1, height = 1, row = 0;  // padded extents; `row` is the W stride (≥ lead + the padded width)
    std::int64_t width = 0;                       // padded width: the values and the zeros either side
    std::int64_t lead = 0;                        // zeros before column 0 of each row

    // Floats a forward pass's vector loads may read past the last row (lanes it computes and drops).
    static constexpr std::int64_t k_tail = 64;

    // What the buffer must hold: the rows and the tail.
    std::int64_t elements() const { return batch * channels * depth * height * row + k_tail; }
    // Column 0 of a padded row.
    float* at(std::int64_t n, std::int64_t c, std::int64_t z, std::int64_t y) const {
        return data + (((n * channels + c) * depth + z) * height + y) * row + lead;
    }
};

// The padded input of a 3-tap (per spatial axis) stride-1 convolution whose output is `out_extent`
// ((D,) H, W): extents out + 2 on each axis (out + 0 for D in 2D), column `aligned_column` on a vector
// boundary (the weights' gradient reads the output's gradient from its margin on, 16 at a time: loads
// that straddle two cache lines cost two). Rows are as short as the weights' gradient allows: its
// 16-wide reads stay inside a row and see zeros past the values. The forward pass's loads may run into
// the next row (or the tail) for lanes it drops. `data` is left null: the caller places it.
PaddedRows padded_rows_for(std::int64_t batch, std::int64_t channels, const std::vector<std::int64_t>& out_extent,
                           std::int64_t aligned_column = 0);

// Where one channel's values of a source tensor live: any layout oneDNN describes with outer strides
// and an optional channel block (plain, channels-last, nChw16c).
struct SourceLayout {
    const float* data = nullptr;
    std::int64_t batch_stride = 0, block_stride = 0, block = 1;
    std::array<std::int64_t, 3> spatial_stride{0, 0, 0};  // D, H, W (D's 0 in 2D)
    std::array<std::int64_t, 3> extent{1, 1, 1};          // the source's own D, H, W
};

// Writes every element of `padded`: the source's values at offset `pad_begin` ((D,) H, W), zeros elsewhere.
void fill_padded(const PaddedRows& padded, const SourceLayout& source, const std::vector<std::int64_t>& pad_begin);

// Weights [C_out, C_in, (kD,) kH, kW] (3 taps per axis) re-laid for row_conv_forward: per block of 8
// output channels, per input channel and tap, the 8 channels' weights side by side. `flip_transpose`
// gives the input gradient's weights instead: [C_in, C_out] swapped and every tap mirrored.
std::vector<float> relaid_weights(const float* weights, std::int64_t out_channels, std::int64_t in_channels, int rank,
                                  bool flip_transpose);

// output[n, o, z, y, x] = bias[o] + Σ_i Σ_taps w[o, i, taps] · input[n, i, z + kz, y + ky, x + kx] for the
// padded input; `output` is [N, out_channels, (D,) H, W] with H, W = input height − 2, width − 2, plain
// or channels-last (what batch norm and pooling run fast on). out_channels must be a multiple of 8;
// bias may be null.
void row_conv_forward(const PaddedRows& input, const std::vector<float>& relaid, const float* bias,
                      std::int64_t out_channels, int rank, float* output, bool channels_last);

// The weights' gradient: dw[o, i, taps] = Σ_n Σ_positions dy[n, o, position] · input[n, i, position + taps],
// written (not added) as [C_out, C_in, (kD,) kH, kW]; `gradient` holds the output's gradient at offset
// `gradient_offset` ((D,) H, W) of its padded buffer, with zeros past each row's end. The sum runs in a
// fixed order whatever the thread count. Optionally the bias gradient (Σ dy per channel).
void row_conv_weights_gradient(const PaddedRows& input, const PaddedRows& gradient,
                               const std::vector<std::int64_t>& gradient_offset, const std::vector<std::int64_t>& out_extent,
                               int rank, float* weights_gradient, float* bias_gradient);

}  // namespace tessera::ops
