// Region readers: HDF5 by hyperslab, uncompressed NIfTI by pread of the box's rows.
#include "io/volume_region.hpp"

#include "io/hdf5_detail.hpp"
#include "io/raw_image.hpp"

#include "core/user_files.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <unistd.h>

namespace tessera {

using io_detail::quoted;
using io_detail::ScalarType;

namespace {

std::string box_text(const VoxelBox& box) {
    std::string text;
    for (int axis = 0; axis < 3; ++axis) {
        text += (axis == 0 ? "" : ", ") + std::to_string(box.begin[axis]) + "–" + std::to_string(box.begin[axis] + box.extent[axis] - 1);
    }
    return text + " (i, j, k)";
}

class Hdf5RegionReader final : public VolumeRegionReader {
public:
    Hdf5RegionReader(std::unique_ptr<io_detail::Hdf5Dataset> dataset)
        : VolumeRegionReader(dataset->geometry(), std::string(io_detail::scalar_type_name(dataset->scalar_type())), dataset->display_name()),
          m_dataset(std::move(dataset)) {}

    void read(const VoxelBox& box, float* out) const override {
        check_box(box);
        m_dataset->read(box, ScalarType::F32, out);
    }
    void read_exact(const VoxelBox& box, double* out) const override {
        check_box(box);
        m_dataset->read(box, ScalarType::F64, out);
    }
    bool read_int32_directly(const VoxelBox& box, std::int32_t* out) const override {
        switch (m_dataset->scalar_type()) {
            case ScalarType::U8:
            case ScalarType::I8:
            case ScalarType::U16:
            case ScalarType::I16:
            case ScalarType::I32:
                check_box(box);
                m_dataset->read(box, ScalarType::I32, out);  // HDF5 widens them exactly
                return true;
            default: return false;
        }
    }

private:
    std::unique_ptr<io_detail::Hdf5Dataset> m_dataset;
};

class FileDescriptor {
public:
    explicit FileDescriptor(int descriptor) : m_descriptor(descriptor) {}
    ~FileDescriptor() {
        if (m_descriptor >= 0) ::close(m_descriptor);
    }
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    int get() const { return m_descriptor; }

private:
    int m_descriptor;
};

// An uncompressed NIfTI: each row of the box is one pread (rows are contiguous along i), converted with
// the header's byte order, rows/slices order and scaling.
class NiftiRegionReader final : public VolumeRegionReader {
public:
    NiftiRegionReader(const std::filesystem::path& path, io_detail::NiftiLayout layout)
        : VolumeRegionReader(layout.description.geometry, layout.description.source_scalar_type, path.string()),
          m_layout(std::move(layout)),
          m_file(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
        TESSERA_CHECK(m_file.get() >= 0, "cannot open " << quoted(path) << ": " << std::strerror(errno));
        // The header checked that the file holds every voxel; it could shrink later (a read then says so).
    }

    void read(const VoxelBox& box, float* out) const override {
        check_box(box);
        read_rows(box, [&](const double* row, std::int64_t offset) {
            for (std::int64_t i = 0; i < box.extent[0]; ++i) out[offset + i] = static_cast<float>(row[i]);
        });
    }
    void read_exact(const VoxelBox& box, double* out) const override {
        check_box(box);
        read_rows(box, [&](const double* row, std::int64_t offset) { std::memcpy(out + offset, row, static_cast<std::size_t>(box.extent[0]) * sizeof(double)); });
    }

private:
    template <class Store>
    void read_rows(const VoxelBox& box, Store&& store) const {
        const io_detail::RawImage& description = m_layout.description;
        const auto& size = description.geometry.size;
        const std::size_t element_bytes = io_detail::scalar_type_size(description.scalar_type);
        std::vector<std::byte> stored(static_cast<std::size_t>(box.extent[0]) * element_bytes);
        std::vector<double> values(static_cast<std::size_t>(box.extent[0]));
        for (std::int64_t k = 0; k < box.extent[2]; ++k) {
            const std::int64_t file_k = box.begin[2] + k;
            const std::int64_t stored_k = description.slices_reversed ? size[2] - 1 - file_k : file_k;
            for (std::int64_t j = 0; j < box.extent[1]; ++j) {
                const std::int64_t file_j = box.begin[1] + j;
                const std::int64_t stored_j = description.rows_reversed ? size[1] - 1 - file_j : file_j;
                const std::uint64_t element = static_cast<std::uint64_t>((stored_k * size[1] + stored_j) * size[0] + box.begin[0]);
                read_exactly(stored.data(), stored.size(), m_layout.data_offset + element * element_bytes, box);
                if (m_layout.swapped) io_detail::swap_byte_order(stored.data(), static_cast<std::uint64_t>(box.extent[0]), element_bytes);
                convert(stored.data(), values.data(), box.extent[0]);
                store(values.data(), (k * box.extent[1] + j) * box.extent[0]);
            }
        }
    }

    void read_exactly(std::byte* into, std::size_t bytes, std::uint64_t offset, const VoxelBox& box) const {
        std::size_t done = 0;
        while (done < bytes) {
            const ssize_t count = ::pread(m_file.get(), into + done, bytes - done, static_cast<off_t>(offset + done));
            if (count < 0 && errno == EINTR) continue;
            TESSERA_CHECK(count > 0, "cannot read voxels " << box_text(box) << " of " << quoted(source_path()) << ": "
                                                           << (count < 0 ? std::strerror(errno) : "the file ended early (it was truncated after it was opened)"));
            done += static_cast<std::size_t>(count);
        }
    }

    void convert(const std::byte* stored, double* values, std::int64_t count) const {
        const io_detail::RawImage& description = m_layout.description;
        const auto run = [&](auto zero) {
            using T = decltype(zero);
            for (std::int64_t index = 0; index < count; ++index) {
                T value;
                std::memcpy(&value, stored + index * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
                values[index] = static_cast<double>(value) * description.slope + description.intercept;
            }
        };
        switch (description.scalar_type) {
            case ScalarType::U8: run(std::uint8_t{}); break;
            case ScalarType::I8: run(std::int8_t{}); break;
            case ScalarType::U16: run(std::uint16_t{}); break;
            case ScalarType::I16: run(std::int16_t{}); break;
            case ScalarType::U32: run(std::uint32_t{}); break;
            case ScalarType::I32: run(std::int32_t{}); break;
            case ScalarType::U64: run(std::uint64_t{}); break;
            case ScalarType::I64: run(std::int64_t{}); break;
            case ScalarType::F32: run(float{}); break;
            case ScalarType::F64: run(double{}); break;
        }
    }

    io_detail::NiftiLayout m_layout;
    FileDescriptor m_file;
};

// ---- label writers -----------------------------------------------------------------------------------

ScalarType label_type_for(std::int32_t max_label) {
    if (max_label <= 255) return ScalarType::U8;
    if (max_label <= 32767) return ScalarType::I16;
    return ScalarType::I32;
}

// The labels of `slab` ([count, H, W] i32) in `type`, i fastest.
std::vector<std::byte> encode_labels(const Tensor& slab, ScalarType type) {
    const Tensor dense = slab.contiguous();
    const std::int32_t* labels = dense.data<std::int32_t>();
    const std::int64_t count = dense.num_elements();
    std::vector<std::byte> bytes(static_cast<std::size_t>(count) * io_detail::scalar_type_size(type));
    for (std::int64_t v = 0; v < count; ++v) {
        if (type == ScalarType::U8) {
            bytes[static_cast<std::size_t>(v)] = static_cast<std::byte>(labels[v]);
        } else if (type == ScalarType::I16) {
            const auto value = static_cast<std::int16_t>(labels[v]);
            std::memcpy(bytes.data() + v * 2, &value, 2);
        } else {
            std::memcpy(bytes.data() + v * 4, labels + v, 4);
        }
    }
    return bytes;
}

// Where a label volume is written before it is complete: "x.nii.partial", "x.partial.h5" (an HDF5 name keeps its extension).
std::filesystem::path partial_name(const std::filesystem::path& file) {
    if (is_hdf5_name(file)) return file.parent_path() / (file.stem().string() + ".partial" + file.extension().string());
    return file.string() + ".partial";
}

void check_slab(const Tensor& labels, const ImageGeometry& geometry, std::int64_t first, const std::string& where) {
    const bool volume = geometry.size[2] > 1;
    const std::int64_t slices = volume ? geometry.size[2] : geometry.size[1];
    const Shape plane = volume ? Shape{geometry.size[1], geometry.size[0]} : Shape{geometry.size[0]};
    TESSERA_ASSERT(labels.dtype() == DType::I32 && labels.rank() == static_cast<int>(plane.size()) + 1 &&
                       Shape(labels.shape().begin() + 1, labels.shape().end()) == plane && first >= 0 && first + labels.dim(0) <= slices,
                   "labels " << shape_to_string(labels.shape()) << " at slice " << first << " do not fit " << describe(geometry) << " of " << where);
}

class Hdf5LabelWriter final : public LabelVolumeWriter {
public:
    Hdf5LabelWriter(const std::filesystem::path& path, const ImageGeometry& geometry, ScalarType type)
        : m_name(*parse_hdf5_name(path.string())), m_geometry(geometry), m_type(type) {
        if (m_name.dataset.empty()) m_name.dataset = "/volumes/labels/prediction";
        const std::filesystem::path partial = partial_name(m_name.file);
        std::error_code ignored;
        std::filesystem::remove(partial, ignored);
        m_writer = std::make_unique<io_detail::Hdf5DatasetWriter>(partial.string() + ":" + m_name.dataset, geometry, type);
    }
    ~Hdf5LabelWriter() override {
        if (m_writer) {
            m_writer.reset();
            std::error_code ignored;
            std::filesystem::remove(partial_name(m_name.file), ignored);
        }
    }
    void write_slices(std::int64_t first, const Tensor& labels) override {
        check_slab(labels, m_geometry, first, m_name.file.string());
        const bool volume = m_geometry.size[2] > 1;
        VoxelBox box{{0, 0, 0}, m_geometry.size};
        box.begin[volume ? 2 : 1] = first;
        box.extent[volume ? 2 : 1] = labels.dim(0);
        m_writer->write(box, encode_labels(labels, m_type).data());
    }
    void finish() override {
        m_writer->finish();
        m_writer.reset();
        std::error_code error;
        std::filesystem::rename(partial_name(m_name.file), m_name.file, error);
        TESSERA_CHECK(!error, "cannot rename " << quoted(partial_name(m_name.file)) << " to " << quoted(m_name.file) << ": " << error.message());
    }

private:
    Hdf5DatasetName m_name;
    ImageGeometry m_geometry;
    ScalarType m_type;
    std::unique_ptr<io_detail::Hdf5DatasetWriter> m_writer;
};

// NIfTI-1, one file: a 348-byte header (sform in RAS from the LPS geometry), 4 bytes of no extension,
// then the voxels, each slab written at its offset.
class NiftiLabelWriter final : public LabelVolumeWriter {
public:
    NiftiLabelWriter(const std::filesystem::path& path, const ImageGeometry& geometry, ScalarType type)
        : m_path(path), m_geometry(geometry), m_type(type),
          m_file(::open(partial_name(path).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
        TESSERA_CHECK(m_file.get() >= 0, "cannot create " << quoted(partial_name(path)) << ": " << std::strerror(errno));
        std::vector<std::byte> header(352, std::byte{0});
        const auto put = [&](std::size_t offset, auto value) { std::memcpy(header.data() + offset, &value, sizeof value); };
        put(0, std::int32_t{348});
        const std::int16_t rank = geometry.size[2] > 1 ? 3 : 2;
        put(40, rank);
        for (int axis = 0; axis < 3; ++axis) put(42 + 2 * static_cast<std::size_t>(axis), static_cast<std::int16_t>(geometry.size[axis]));
        for (int axis = 3; axis < 7; ++axis) put(42 + 2 * static_cast<std::size_t>(axis), std::int16_t{1});
        put(70, static_cast<std::int16_t>(type == ScalarType::U8 ? 2 : type == ScalarType::I16 ? 4 : 8));
        put(72, static_cast<std::int16_t>(8 * io_detail::scalar_type_size(type)));
        put(76, 1.0f);  // qfac
        for (int axis = 0; axis < 3; ++axis) put(80 + 4 * static_cast<std::size_t>(axis), static_cast<float>(geometry.spacing[axis]));
        put(108, 352.0f);  // vox_offset
        put(112, 1.0f);    // scl_slope
        put(123, std::uint8_t{2 | 8});  // xyzt_units: mm, s
        put(254, std::int16_t{1});      // sform_code: scanner
        // RAS = diag(-1, -1, 1) · (direction · diag(spacing) · ijk + origin)
        for (int row = 0; row < 3; ++row) {
            const double flip = row < 2 ? -1.0 : 1.0;
            for (int column = 0; column < 3; ++column) {
                put(280 + 16 * static_cast<std::size_t>(row) + 4 * static_cast<std::size_t>(column),
                    static_cast<float>(flip * geometry.direction[static_cast<std::size_t>(row * 3 + column)] * geometry.spacing[static_cast<std::size_t>(column)]));
            }
            put(280 + 16 * static_cast<std::size_t>(row) + 12, static_cast<float>(flip * geometry.origin[static_cast<std::size_t>(row)]));
        }
        std::memcpy(header.data() + 344, "n+1", 4);
        write_at(header.data(), header.size(), 0);
    }
    ~NiftiLabelWriter() override {
        if (!m_finished) {
            std::error_code ignored;
            std::filesystem::remove(partial_name(m_path), ignored);
        }
    }
    void write_slices(std::int64_t first, const Tensor& labels) override {
        check_slab(labels, m_geometry, first, m_path.string());
        const std::int64_t row_voxels = m_geometry.size[0] * (m_geometry.size[2] > 1 ? m_geometry.size[1] : 1);
        const std::vector<std::byte> bytes = encode_labels(labels, m_type);
        write_at(bytes.data(), bytes.size(), 352 + static_cast<std::uint64_t>(first * row_voxels) * io_detail::scalar_type_size(m_type));
    }
    void finish() override {
        TESSERA_CHECK(::fsync(m_file.get()) == 0, "cannot write " << quoted(partial_name(m_path)) << ": " << std::strerror(errno));
        std::error_code error;
        std::filesystem::rename(partial_name(m_path), m_path, error);
        TESSERA_CHECK(!error, "cannot rename " << quoted(partial_name(m_path)) << " to " << quoted(m_path) << ": " << error.message());
        m_finished = true;
    }

private:
    void write_at(const std::byte* bytes, std::size_t count, std::uint64_t offset) {
        std::size_t done = 0;
        while (done < count) {
            const ssize_t wrote = ::pwrite(m_file.get(), bytes + done, count - done, static_cast<off_t>(offset + done));
            if (wrote < 0 && errno == EINTR) continue;
            TESSERA_CHECK(wrote > 0, "cannot write " << quoted(partial_name(m_path)) << ": " << std::strerror(errno) << " (is the disk full?)");
            done += static_cast<std::size_t>(wrote);
        }
    }

    std::filesystem::path m_path;
    ImageGeometry m_geometry;
    ScalarType m_type;
    FileDescriptor m_file;
    bool m_finished = false;
};

}  // namespace

std::unique_ptr<LabelVolumeWriter> create_label_volume_writer(const std::filesystem::path& path, const ImageGeometry& geometry,
                                                              std::int32_t max_label) {
    const ScalarType type = label_type_for(max_label);
    if (is_hdf5_name(path)) return std::make_unique<Hdf5LabelWriter>(path, geometry, type);
    TESSERA_CHECK(io_detail::full_extension(path) == ".nii",
                  "cannot write " << quoted(path) << " slab by slab: name an HDF5 dataset (out.h5:/volumes/labels/prediction) or an "
                                  << "uncompressed NIfTI (.nii)");
    return std::make_unique<NiftiLabelWriter>(path, geometry, type);
}

VolumeRegionReader::VolumeRegionReader(ImageGeometry geometry, std::string source_scalar_type, std::string source_path)
    : m_geometry(geometry), m_source_scalar_type(std::move(source_scalar_type)), m_source_path(std::move(source_path)) {}

void VolumeRegionReader::check_box(const VoxelBox& box) const {
    for (int axis = 0; axis < 3; ++axis) {
        TESSERA_ASSERT(box.begin[axis] >= 0 && box.extent[axis] > 0 && box.begin[axis] + box.extent[axis] <= m_geometry.size[axis],
                       "box " << box_text(box) << " is not inside the " << describe(m_geometry) << " grid of " << m_source_path);
    }
}

void VolumeRegionReader::read_labels(const VoxelBox& box, std::int32_t* out) const {
    if (read_int32_directly(box, out)) return;
    std::vector<double> values(static_cast<std::size_t>(box.num_voxels()));
    read_exact(box, values.data());
    for (std::int64_t index = 0; index < box.num_voxels(); ++index) {
        const double value = values[static_cast<std::size_t>(index)];
        if (!(value >= std::numeric_limits<std::int32_t>::min() && value <= std::numeric_limits<std::int32_t>::max() && std::nearbyint(value) == value)) {
            const std::int64_t i = box.begin[0] + index % box.extent[0];
            const std::int64_t j = box.begin[1] + (index / box.extent[0]) % box.extent[1];
            const std::int64_t k = box.begin[2] + index / (box.extent[0] * box.extent[1]);
            TESSERA_REJECT(quoted(m_source_path) << " is not a label map: voxel (i, j, k) = (" << i << ", " << j << ", " << k << ") holds "
                                                 << value << ", not a whole number in the int32 range. Labels must be whole numbers "
                                                    "(0 = background); check that this is the label dataset.");
        }
        out[index] = static_cast<std::int32_t>(value);
    }
}

bool can_read_by_region(const std::filesystem::path& path) {
    if (is_hdf5_name(path)) return true;
    return io_detail::full_extension(path) == ".nii";
}

std::unique_ptr<VolumeRegionReader> open_region_reader(const std::filesystem::path& path, std::size_t cache_bytes) {
    if (is_hdf5_name(path)) return std::make_unique<Hdf5RegionReader>(std::make_unique<io_detail::Hdf5Dataset>(path, cache_bytes));
    TESSERA_CHECK(io_detail::full_extension(path) == ".nii",
                  "cannot read " << quoted(path) << " region by region: only HDF5 datasets (file.h5:/dataset) and uncompressed NIfTI "
                                 << "(.nii) can be. Convert it (tessera-cli convert " << path.filename().string()
                                 << " volume.h5:/volumes/raw), or let it be read whole.");
    require_plain_path(path.native(), "the image path");
    const FileKind kind = file_kind(path);
    TESSERA_CHECK(kind == FileKind::Regular, "cannot read " << quoted(path) << ": "
                                                            << (kind == FileKind::Missing ? "no such file. Check the path." : "it is not a regular file."));
    io_detail::NiftiLayout layout = io_detail::read_nifti_layout(path);
    TESSERA_CHECK(!layout.compressed, quoted(path) << " is gzip-compressed although named .nii: it cannot be read by region. "
                                                      "Name it .nii.gz to read it whole, or decompress it (gunzip -c).");
    return std::make_unique<NiftiRegionReader>(path, std::move(layout));
}

}  // namespace tessera
