// Cropping a box out of an activation (an unpadded U-Net's skip connections).
#include "ops/kernels.hpp"
#include "ops/tile_rows.hpp"

namespace tessera::ops {

namespace {

// Copies in the input's own layout (the halo kernel's tile copies), so no reorder is needed either way.
class CropKernel final : public Kernel {
public:
    CropKernel(const Extents& offset, const Shape& output_shape, const KernelInputs& in)
        : Kernel(in), m_offset(offset), m_extent(output_shape.begin() + 2, output_shape.end()),
          m_needs_diff_input(in.needs_gradient[0]) {
        m_output_desc = same_layout_desc(in.descs[0], output_shape);
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        copy_box(tile_buffer_of(inputs[0]), m_offset, tile_buffer_of(output), Box(m_offset.size(), 0), m_extent);
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const TileBuffer target = tile_buffer_of(diff_inputs[0]);
        // Rows outside the box were never read: their gradient is zero (the target is written, not added).
        zero_box(target, Box(m_offset.size(), 0), Box(target.shape.begin() + 2, target.shape.end()));
        copy_box(tile_buffer_of(diff_output), Box(m_offset.size(), 0), target, m_offset, m_extent);
    }

private:
    Box m_offset;
    Box m_extent;
    bool m_needs_diff_input;
};

}  // namespace

std::unique_ptr<Kernel> make_crop_kernel(const Extents& offset, const Shape& output_shape, const KernelInputs& in) {
    return std::make_unique<CropKernel>(offset, output_shape, in);
}

}  // namespace tessera::ops
