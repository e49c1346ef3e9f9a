// Attributes of the engine's ops: plain structs, shared by the oneDNN kernels, the graph, the cost
// model and the reference implementations the tests use.
//
// Spatial activations are [N, C, H, W] (2D) or [N, C, D, H, W] (3D). Every per-axis vector below has
// one entry per spatial axis, outermost first (D, H, W or H, W). Weights of a convolution are
// [C_out, C_in, kD, kH, kW]; of a transposed convolution [C_in, C_out, kD, kH, kW] (as PyTorch).
//
//   ConvAttributes conv = ConvAttributes::same(3, /*kernel*/ 3);       // 3×3×3, stride 1, 'same'
//   Shape y = conv_output_shape({1, 8, 32, 32, 32}, 16, conv);        // [1, 16, 32, 32, 32]
#pragma once

#include "tensor/tensor.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::ops {

using Extents = std::vector<std::int64_t>;  // one entry per spatial axis

struct ConvAttributes {
    Extents kernel;     // taps per axis
    Extents stride;     // ≥ 1
    Extents dilation;   // ≥ 1 (1 = dense kernel, as PyTorch counts it)
    Extents pad_begin;  // elements of implicit zero padding before the first element
    Extents pad_end;    // ... and after the last
    bool has_bias = false;
    // Channel groups (ResNeXt's cardinality): group g's C_in/groups inputs alone feed its C_out/groups
    // outputs; weights [C_out, C_in/groups, k...]. 1 = an ordinary convolution.
    std::int64_t groups = 1;

    int spatial_rank() const { return static_cast<int>(kernel.size()); }
    // Stride 1, dilation 1, padding that keeps the extent (odd kernels; even ones pad one more at the end).
    static ConvAttributes same(int spatial_rank, std::int64_t kernel, std::int64_t dilation = 1);
    // No padding.
    static ConvAttributes valid(int spatial_rank, std::int64_t kernel, std::int64_t stride = 1);
};

struct ConvTransposeAttributes {
    Extents kernel;
    Extents stride;
    bool has_bias = false;
    int spatial_rank() const { return static_cast<int>(kernel.size()); }
    static ConvTransposeAttributes upsample(int spatial_rank, std::int64_t factor = 2);  // kernel = stride
};

enum class PoolKind { Max, Average };

struct PoolAttributes {
    PoolKind kind = PoolKind::Max;
    Extents kernel;
    Extents stride;
    Extents pad_begin;
    Extents pad_end;
    // Average pooling divides by the taps inside the input (padding excluded), as TF's 'SAME' does.
    int spatial_rank() const { return static_cast<int>(kernel.size()); }
    static PoolAttributes max_down(int spatial_rank, std::int64_t factor = 2);  // kernel = stride = factor
};

struct BatchNormAttributes {
    double epsilon = 1e-5;
    double momentum = 0.9;  // running = momentum * running + (1 - momentum) * batch (TF's decay)
    bool fuse_relu = false;
};

// Where a simulated core's own tile sits inside the widened buffer a Halo op makes; every other row
// of that buffer is filled from the neighbours' tiles by the core mesh.
struct HaloAttributes {
    Extents interior_offset;  // per spatial axis: buffer row of the tile's first row
    Extents interior_extent;  // per spatial axis: rows of the tile that lie inside the buffer
};
// Whether the halo buffer holds every row of its input tile [N, C, (D,) H, W] (a strided layer's may not).
bool halo_covers_input(const HaloAttributes& attributes, const Shape& input_shape);

// Training uses batch statistics (and keeps what backward needs); evaluation the running ones.
enum class Mode { Train, Eval };
enum class Pass { Forward, Backward };

// Output shapes; each checks its input and says what was expected.
Shape conv_output_shape(const Shape& input, std::int64_t out_channels, const ConvAttributes& attributes);
Shape conv_weight_shape(std::int64_t in_channels, std::int64_t out_channels, const ConvAttributes& attributes);
Shape conv_transpose_output_shape(const Shape& input, std::int64_t out_channels,
                                  const ConvTransposeAttributes& attributes);
Shape conv_transpose_weight_shape(std::int64_t in_channels, std::int64_t out_channels,
                                  const ConvTransposeAttributes& attributes);
Shape pool_output_shape(const Shape& input, const PoolAttributes& attributes);

// Multiply-adds counted as 2 FLOPs.
double conv_forward_flops(const Shape& output, std::int64_t in_channels, const ConvAttributes& attributes);

std::string describe(const ConvAttributes& attributes);  // "3×3×3 s1 d1 p1/1"

}  // namespace tessera::ops
