#include "ops/attributes.hpp"

#include <sstream>

namespace tessera::ops {

namespace {

void check_spatial_input(const Shape& input, int spatial_rank, const char* op) {
    TESSERA_CHECK(spatial_rank == 2 || spatial_rank == 3,
                  op << " expects 2 or 3 spatial axes, got " << spatial_rank);
    TESSERA_CHECK(static_cast<int>(input.size()) == spatial_rank + 2,
                  op << " with " << spatial_rank << " spatial axes expects an input of rank " << spatial_rank + 2
                     << " ([N, C, " << (spatial_rank == 3 ? "D, " : "") << "H, W]), got " << shape_to_string(input));
}

void check_extents(const Extents& values, int spatial_rank, const char* what, std::int64_t minimum) {
    TESSERA_CHECK(static_cast<int>(values.size()) == spatial_rank,
                  what << " needs " << spatial_rank << " entries, got " << shape_to_string(values));
    for (std::int64_t value : values) {
        TESSERA_CHECK(value >= minimum, what << " entries must be ≥ " << minimum << ", got " << shape_to_string(values));
    }
}

}  // namespace

ConvAttributes ConvAttributes::same(int spatial_rank, std::int64_t kernel, std::int64_t dilation) {
    const std::int64_t reach = dilation * (kernel - 1);  // taps beyond the centre, both sides together
    ConvAttributes attributes;
    const auto n = static_cast<std::size_t>(spatial_rank);
    attributes.kernel.assign(n, kernel);
    attributes.stride.assign(n, 1);
    attributes.dilation.assign(n, dilation);
    attributes.pad_begin.assign(n, reach / 2);
    attributes.pad_end.assign(n, reach - reach / 2);
    return attributes;
}

ConvAttributes ConvAttributes::valid(int spatial_rank, std::int64_t kernel, std::int64_t stride) {
    ConvAttributes attributes;
    const auto n = static_cast<std::size_t>(spatial_rank);
    attributes.kernel.assign(n, kernel);
    attributes.stride.assign(n, stride);
    attributes.dilation.assign(n, 1);
    attributes.pad_begin.assign(n, 0);
    attributes.pad_end.assign(n, 0);
    return attributes;
}

ConvTransposeAttributes ConvTransposeAttributes::upsample(int spatial_rank, std::int64_t factor) {
    ConvTransposeAttributes attributes;
    attributes.kernel.assign(static_cast<std::size_t>(spatial_rank), factor);
    attributes.stride.assign(static_cast<std::size_t>(spatial_rank), factor);
    return attributes;
}

PoolAttributes PoolAttributes::max_down(int spatial_rank, std::int64_t factor) {
    PoolAttributes attributes;
    const auto n = static_cast<std::size_t>(spatial_rank);
    attributes.kind = PoolKind::Max;
    attributes.kernel.assign(n, factor);
    attributes.stride.assign(n, factor);
    attributes.pad_begin.assign(n, 0);
    attributes.pad_end.assign(n, 0);
    return attributes;
}

Shape conv_output_shape(const Shape& input, std::int64_t out_channels, const ConvAttributes& attributes) {
    const int rank = attributes.spatial_rank();
    check_spatial_input(input, rank, "convolution");
    check_extents(attributes.kernel, rank, "convolution kernel", 1);
    check_extents(attributes.stride, rank, "convolution stride", 1);
    check_extents(attributes.dilation, rank, "convolution dilation", 1);
    check_extents(attributes.pad_begin, rank, "convolution pad_begin", 0);
    check_extents(attributes.pad_end, rank, "convolution pad_end", 0);
    TESSERA_CHECK(out_channels > 0, "convolution needs at least one output channel, got " << out_channels);
    TESSERA_CHECK(attributes.groups >= 1 && input[1] % attributes.groups == 0 && out_channels % attributes.groups == 0,
                  "a convolution in " << attributes.groups << " groups needs input and output channels divisible by "
                                      << attributes.groups << ", got " << input[1] << " in and " << out_channels
                                      << " out (use a number of groups that divides both)");
    Shape output{input[0], out_channels};
    for (int axis = 0; axis < rank; ++axis) {
        const auto a = static_cast<std::size_t>(axis);
        const std::int64_t padded = input[a + 2] + attributes.pad_begin[a] + attributes.pad_end[a];
        const std::int64_t reach = attributes.dilation[a] * (attributes.kernel[a] - 1) + 1;
        TESSERA_CHECK(padded >= reach, "convolution " << describe(attributes) << " needs at least " << reach
                                                      << " elements along spatial axis " << axis
                                                      << " after padding, got " << padded << " (input "
                                                      << shape_to_string(input) << ")");
        output.push_back((padded - reach) / attributes.stride[a] + 1);
    }
    return output;
}

Shape conv_weight_shape(std::int64_t in_channels, std::int64_t out_channels, const ConvAttributes& attributes) {
    Shape weights{out_channels, in_channels / std::max<std::int64_t>(attributes.groups, 1)};
    weights.insert(weights.end(), attributes.kernel.begin(), attributes.kernel.end());
    return weights;
}

Shape conv_transpose_output_shape(const Shape& input, std::int64_t out_channels,
                                  const ConvTransposeAttributes& attributes) {
    const int rank = attributes.spatial_rank();
    check_spatial_input(input, rank, "transposed convolution");
    check_extents(attributes.kernel, rank, "transposed convolution kernel", 1);
    check_extents(attributes.stride, rank, "transposed convolution stride", 1);
    TESSERA_CHECK(out_channels > 0, "transposed convolution needs at least one output channel, got " << out_channels);
    Shape output{input[0], out_channels};
    for (int axis = 0; axis < rank; ++axis) {
        const auto a = static_cast<std::size_t>(axis);
        output.push_back((input[a + 2] - 1) * attributes.stride[a] + attributes.kernel[a]);
    }
    return output;
}

Shape conv_transpose_weight_shape(std::int64_t in_channels, std::int64_t out_channels,
                                  const ConvTransposeAttributes& attributes) {
    Shape weights{in_channels, out_channels};
    weights.insert(weights.end(), attributes.kernel.begin(), attributes.kernel.end());
    return weights;
}

Shape pool_output_shape(const Shape& input, const PoolAttributes& attributes) {
    const int rank = attributes.spatial_rank();
    check_spatial_input(input, rank, "pooling");
    check_extents(attributes.kernel, rank, "pooling kernel", 1);
    check_extents(attributes.stride, rank, "pooling stride", 1);
    check_extents(attributes.pad_begin, rank, "pooling pad_begin", 0);
    check_extents(attributes.pad_end, rank, "pooling pad_end", 0);
    Shape output{input[0], input[1]};
    for (int axis = 0; axis < rank; ++axis) {
        const auto a = static_cast<std::size_t>(axis);
        const std::int64_t padded = input[a + 2] + attributes.pad_begin[a] + attributes.pad_end[a];
        TESSERA_CHECK(padded >= attributes.kernel[a], "pooling kernel " << shape_to_string(attributes.kernel)
                                                                        << " is larger than the padded input along axis "
                                                                        << axis << " (" << padded << ")");
        output.push_back((padded - attributes.kernel[a]) / attributes.stride[a] + 1);
    }
    return output;
}

double conv_forward_flops(const Shape& output, std::int64_t in_channels, const ConvAttributes& attributes) {
    double taps = 1;
    for (std::int64_t k : attributes.kernel) taps *= static_cast<double>(k);
    // Each output reads its own group's inputs only.
    return 2.0 * static_cast<double>(num_elements_of(output)) * static_cast<double>(in_channels / attributes.groups) * taps;
}

std::string describe(const ConvAttributes& attributes) {
    std::ostringstream out;
    for (std::size_t a = 0; a < attributes.kernel.size(); ++a) out << (a ? "×" : "") << attributes.kernel[a];
    out << " s" << (attributes.stride.empty() ? 1 : attributes.stride[0]) << " d"
        << (attributes.dilation.empty() ? 1 : attributes.dilation[0]) << " p"
        << (attributes.pad_begin.empty() ? 0 : attributes.pad_begin[0]) << "/"
        << (attributes.pad_end.empty() ? 0 : attributes.pad_end[0]);
    if (attributes.groups > 1) out << " g" << attributes.groups;
    return out.str();
}

bool halo_covers_input(const HaloAttributes& attributes, const Shape& input_shape) {
    for (std::size_t axis = 0; axis < attributes.interior_extent.size(); ++axis) {
        if (attributes.interior_extent[axis] != input_shape[axis + 2]) return false;
    }
    return true;
}

}  // namespace tessera::ops
