// Kernel memories seen as tile buffers, and layouts of halo buffers.
#include "ops/tile_rows.hpp"

namespace tessera::ops {

TileBuffer tile_buffer_of(const memory& m) {
    const memory::desc desc = m.get_desc();
    TileBuffer b;
    b.data = m.get_data_handle();
    TESSERA_ASSERT(desc.data_type() == memory::data_type::f32 || desc.data_type() == memory::data_type::bf16,
                   "tile buffers are f32 or bf16");
    b.dtype = desc.data_type() == memory::data_type::f32 ? DType::F32 : DType::BF16;
    b.shape = to_shape(desc.dims());
    TESSERA_ASSERT(b.shape.size() == 4 || b.shape.size() == 5, "tile buffers are [N, C, (D,) H, W]");
    const ChannelAddressing at(desc);
    b.batch_stride = at.batch_stride;
    b.block_stride = at.block_stride;
    b.block = at.block;
    b.spatial_stride = at.spatial_stride;
    return b;
}

memory::desc same_layout_desc(const memory::desc& like, const Shape& shape) {
    using tag = memory::format_tag;
    const std::vector<tag> candidates = shape.size() == 5
                                            ? std::vector<tag>{tag::ncdhw, tag::ndhwc, tag::nCdhw16c, tag::nCdhw8c, tag::nCdhw4c}
                                            : std::vector<tag>{tag::nchw, tag::nhwc, tag::nChw16c, tag::nChw8c, tag::nChw4c};
    for (tag candidate : candidates) {
        if (memory::desc(like.dims(), like.data_type(), candidate) == like) {
            return memory::desc(to_dims(shape), like.data_type(), candidate);
        }
    }
    TESSERA_FAIL("a halo buffer needs a plain, channels-last or channel-blocked layout; the producer's layout is none of these");
}

}  // namespace tessera::ops
