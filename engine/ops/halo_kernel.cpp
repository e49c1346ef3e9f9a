// The widened tile before a windowed op on a simulated core.
#include "ops/kernels.hpp"
#include "ops/tile_rows.hpp"

namespace tessera::ops {

namespace {

// The widened tile before a windowed op on a simulated core: the core's own tile copied into its
// interior here; the rows around it are written by the core mesh from the neighbours' tiles.
class HaloKernel final : public Kernel {
public:
    HaloKernel(const HaloAttributes& attributes, const Shape& input_shape, const Shape& output_shape, const KernelInputs& in)
        : Kernel(in), m_attributes(attributes), m_needs_diff_input(in.needs_gradient[0]),
          m_covers_input(halo_covers_input(attributes, input_shape)) {
        m_output_desc = same_layout_desc(in.descs[0], output_shape);
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        const Box origin(m_attributes.interior_offset.size(), 0);
        copy_box(tile_buffer_of(inputs[0]), origin, tile_buffer_of(output), m_attributes.interior_offset,
                 m_attributes.interior_extent);
    }

    void backward(const std::vector<memory>& inputs, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const TileBuffer target = tile_buffer_of(diff_inputs[0]);
        const Box origin(m_attributes.interior_offset.size(), 0);
        // Rows of the tile the op never reads get a zero gradient here (the target may be written, not added).
        if (!m_covers_input) zero_box(target, origin, Box(target.shape.begin() + 2, target.shape.end()));
        (void)inputs;
        copy_box(tile_buffer_of(diff_output), m_attributes.interior_offset, target, origin, m_attributes.interior_extent);
    }

private:
    HaloAttributes m_attributes;
    bool m_needs_diff_input;
    bool m_covers_input;
};

}  // namespace

std::unique_ptr<Kernel> make_halo_kernel(const HaloAttributes& attributes, const Shape& input_shape, const Shape& output_shape,
                                         const KernelInputs& in) {
    return std::make_unique<HaloKernel>(attributes, input_shape, output_shape, in);
}

}  // namespace tessera::ops
