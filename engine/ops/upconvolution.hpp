// Up-convolutions — transposed convolutions whose kernel equals their stride (U-Net's 2×2(×2) s2) — as
// one product per input pixel, written straight into the upsampled layout (AVX-512, f32).
//
// Each input pixel covers K = kD·kH·kW output pixels that no other input pixel touches, so its
// K·C_out outputs are the matrix product W[K·C_out × C_in] · x[C_in]. The other route (a 1×1
// convolution to K·C_out channels, then a depth-to-space rearrangement) writes and reads that wide
// tensor once more each way, and oneDNN's 1×1 kernels run narrow layers at a fraction of their speed.
// Here the K·C_out outputs of a pixel are grouped into runs of 16 floats that lie side by side in the
// output's layout (16 channels of one block, or two neighbouring pixels of 8 channels-last channels):
// one vector each, accumulated over the input channels with broadcast inputs. The input gradient runs
// over 16-channel runs of the input, the weights' gradient over the same output runs.
//
//   const auto plan = UpconvPlan::make(geometry, ChannelAddressing(input_desc), ChannelAddressing(output_desc));
//   if (plan) plan->forward(x, weights, bias, y);   // else: the layouts have no such runs (use the 1×1 route)
#pragma once

#include "ops/kernel.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace tessera::ops {

struct UpconvGeometry {
    std::int64_t batch = 1, in_channels = 0, out_channels = 0;
    std::array<std::int64_t, 3> in_extent{1, 1, 1};  // the input's D, H, W (D = 1 in 2D)
    std::array<std::int64_t, 3> factor{1, 1, 1};     // kernel = stride per axis: kD, kH, kW (kD = 1 in 2D)
    std::int64_t taps() const { return factor[0] * factor[1] * factor[2]; }
};

class UpconvPlan {
public:
    // A plan when this CPU has AVX-512F and both layouts have the runs described above: the output's
    // K·C_out values of a pixel fall into whole runs of 16 adjacent floats, and the input's channels into
    // runs of 16 (C_in a multiple of 16, blocked or channels-last). Otherwise none.
    static std::optional<UpconvPlan> make(const UpconvGeometry& geometry, const ChannelAddressing& input_at,
                                          const ChannelAddressing& output_at);

    const UpconvGeometry& geometry() const { return m_geometry; }

    // y = the transposed convolution of x; weights [C_in, C_out, (kD,) kH, kW], bias [C_out] or null.
    void forward(const float* x, const float* weights, const float* bias, float* y) const;
    // From dy (in the output's layout): dx in the input's layout (if not null), dw [C_in, C_out, (kD,) kH, kW]
    // and db [C_out] (if not null), all written; one pass over dy. dw and db are summed in a fixed order
    // whatever the thread count.
    void backward(const float* x, const float* dy, const float* weights, float* input_gradient, float* weights_gradient,
                  float* bias_gradient) const;

private:
    UpconvPlan(const UpconvGeometry& geometry, const ChannelAddressing& input_at, const ChannelAddressing& output_at)
        : m_geometry(geometry), m_input_at(input_at), m_output_at(output_at) {}

    // Where input pixel (n, z, y, 0)'s channel 0 and its first output pixel's channel 0 start.
    std::int64_t input_row(std::int64_t n, std::int64_t z, std::int64_t y) const;
    std::int64_t output_row(std::int64_t n, std::int64_t z, std::int64_t y) const;
    // The weights for the forward product: per output run, per input channel, the run's 16 weights.
    std::vector<float> run_weights(const float* weights) const;
    // For the input gradient: per (run, lane), per 16-channel input run, 16 weights.
    std::vector<float> channel_weights(const float* weights) const;
    // The input gradient of one row of input pixels from its outputs' gradient.
    void data_row(const float* dy_row, const float* relaid, std::int64_t channel_runs, float* dx_row) const;

    UpconvGeometry m_geometry;
    ChannelAddressing m_input_at, m_output_at;
    std::int64_t m_input_step = 0, m_output_step = 0;  // from one input pixel to the next along W, and its outputs
    std::vector<std::int64_t> m_run_offset;            // per output run: its first float from the pixel's first output
    std::vector<std::int64_t> m_lane_weight;           // per (run, lane): the element co·K + tap of a [C_out·K] row
    std::vector<std::int64_t> m_channel_offset;        // per input channel: its offset in a pixel
};

}  // namespace tessera::ops
