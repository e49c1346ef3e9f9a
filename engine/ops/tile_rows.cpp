// Kernel memories seen as tile buffers, and layouts of halo buffers.
#include "ops/tile_rows.hpp"


namespace tessera::ops {

bool vector_row_kernels_enabled() {
    static const bool available = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return available && !switched_off("TESSERA_ROW_KERNELS");
}

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

namespace {

std::vector<memory::format_tag> tile_layout_tags(std::size_t rank) {
    using tag = memory::format_tag;
    return rank == 5 ? std::vector<tag>{tag::ncdhw, tag::ndhwc, tag::nCdhw16c, tag::nCdhw8c, tag::nCdhw4c}
                     : std::vector<tag>{tag::nchw, tag::nhwc, tag::nChw16c, tag::nChw8c, tag::nChw4c};
}

}  // namespace

std::optional<RowShape> f32_row_shape(const memory::desc& desc) {
    if (desc.data_type() != memory::data_type::f32 || !is_tile_layout(desc)) return std::nullopt;
    const TileBuffer layout = tile_buffer_of(memory(desc, cpu_engine(), DNNL_MEMORY_NONE));
    const TileRows rows(layout);
    return RowShape{rows.lanes, rows.groups, rows.count};
}

bool is_tile_layout(const memory::desc& desc) {
    if (desc.data.ndims != 4 && desc.data.ndims != 5) return false;
    for (memory::format_tag candidate : tile_layout_tags(static_cast<std::size_t>(desc.data.ndims))) {
        if (memory::desc(desc.dims(), desc.data_type(), candidate) == desc) return true;
    }
    return false;
}

memory::desc same_layout_desc(const memory::desc& like, const Shape& shape) {
    for (memory::format_tag candidate : tile_layout_tags(shape.size())) {
        if (memory::desc(like.dims(), like.data_type(), candidate) == like) {
            return memory::desc(to_dims(shape), like.data_type(), candidate);
        }
    }
    TESSERA_FAIL("a halo buffer needs a plain, channels-last or channel-blocked layout; the producer's layout is none of these");
}

}  // namespace tessera::ops
