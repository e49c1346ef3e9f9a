#include "io/raw_image.hpp"

#include "core/memory_budget.hpp"
#include "core/units.hpp"
#include "core/user_files.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

namespace tessera::io_detail {

namespace {

struct ScalarTypeInfo {
    ScalarType type;
    std::string_view name;
    std::size_t size;
    bool integer;
};

constexpr ScalarTypeInfo scalar_types[] = {
    {ScalarType::U8, "uint8", 1, true},     {ScalarType::I8, "int8", 1, true},
    {ScalarType::U16, "uint16", 2, true},   {ScalarType::I16, "int16", 2, true},
    {ScalarType::U32, "uint32", 4, true},   {ScalarType::I32, "int32", 4, true},
    {ScalarType::U64, "uint64", 8, true},   {ScalarType::I64, "int64", 8, true},
    {ScalarType::F32, "float32", 4, false}, {ScalarType::F64, "float64", 8, false},
};

const ScalarTypeInfo& info_of(ScalarType type) {
    for (const ScalarTypeInfo& info : scalar_types) {
        if (info.type == type) return info;
    }
    TESSERA_ASSERT(false, "unknown scalar type " << static_cast<int>(type));
}

// Calls body(T{}) with T the C++ type of `type`.
template <class Body>
void visit_scalar_type(ScalarType type, Body&& body) {
    switch (type) {
        case ScalarType::U8:
            body(std::uint8_t{});
            return;
        case ScalarType::I8:
            body(std::int8_t{});
            return;
        case ScalarType::U16:
            body(std::uint16_t{});
            return;
        case ScalarType::I16:
            body(std::int16_t{});
            return;
        case ScalarType::U32:
            body(std::uint32_t{});
            return;
        case ScalarType::I32:
            body(std::int32_t{});
            return;
        case ScalarType::U64:
            body(std::uint64_t{});
            return;
        case ScalarType::I64:
            body(std::int64_t{});
            return;
        case ScalarType::F32:
            body(float{});
            return;
        case ScalarType::F64:
            body(double{});
            return;
    }
    TESSERA_ASSERT(false, "unknown scalar type " << static_cast<int>(type));
}

void check_raw_image(const RawImage& image) {
    TESSERA_ASSERT(image.voxels != nullptr, "reader returned no voxel buffer");
    for (int axis = 0; axis < 3; ++axis) {
        TESSERA_ASSERT(image.geometry.size[axis] > 0, "reader returned size " << image.geometry.size[axis]);
    }
}

// Visits every stored row of `image` with the destination row it belongs to.
template <class Source, class RowBody>
void for_each_row(const RawImage& image, RowBody&& body) {
    const auto& size = image.geometry.size;
    const auto* stored = static_cast<const Source*>(image.voxels);
    for (std::int64_t k = 0; k < size[2]; ++k) {
        const std::int64_t stored_k = image.slices_reversed ? size[2] - 1 - k : k;
        for (std::int64_t j = 0; j < size[1]; ++j) {
            const std::int64_t stored_j = image.rows_reversed ? size[1] - 1 - j : j;
            body(stored + (stored_k * size[1] + stored_j) * size[0], j, k);
        }
    }
}

bool is_identity_scaling(const RawImage& image) {
    return image.slope == 1.0 && image.intercept == 0.0;
}

}  // namespace

std::string_view scalar_type_name(ScalarType type) {
    return info_of(type).name;
}
std::size_t scalar_type_size(ScalarType type) {
    return info_of(type).size;
}
bool is_integer(ScalarType type) {
    return info_of(type).integer;
}

bool scalar_type_from_name(std::string_view name, ScalarType& type) {
    for (const ScalarTypeInfo& info : scalar_types) {
        if (info.name == name) {
            type = info.type;
            return true;
        }
    }
    return false;
}

void check_volume_budget(const std::filesystem::path& path, const std::string& size_text, std::uint64_t num_voxels,
                         std::uint64_t stored_bytes_per_voxel) {
    const std::uint64_t budget = max_volume_bytes();
    // Compared in double: a damaged header's product can pass 2^64.
    const double needed = static_cast<double>(num_voxels) * static_cast<double>(stored_bytes_per_voxel + 4);
    TESSERA_CHECK(needed <= static_cast<double>(budget),
                  quoted(path) << " claims " << size_text << " voxels: reading it would take "
                               << format_gib(static_cast<std::int64_t>(std::min(needed, 9.0e18)))
                               << " of memory (the voxels as stored plus their 32-bit copy), more than the "
                               << format_gib(static_cast<std::int64_t>(budget))
                               << " a volume may use on this machine. If the header is right, raise TESSERA_MAX_VOLUME_BYTES "
                                  "(e.g. TESSERA_MAX_VOLUME_BYTES=64GiB) on a machine with that much memory, or crop the volume; "
                                  "otherwise the header is damaged.");
}

void swap_byte_order(std::byte* elements, std::uint64_t count, std::size_t element_bytes) {
    if (element_bytes < 2) return;
    for (std::uint64_t index = 0; index < count; ++index) {
        std::byte* element = elements + index * element_bytes;
        std::reverse(element, element + element_bytes);
    }
}

bool holds_exactly(ScalarType type, double value) {
    if (!std::isfinite(value)) return false;
    const auto whole_in = [&](double lowest, double highest) {
        return value >= lowest && value <= highest && std::nearbyint(value) == value;
    };
    switch (type) {
        case ScalarType::U8: return whole_in(0, 255);
        case ScalarType::I8: return whole_in(-128, 127);
        case ScalarType::U16: return whole_in(0, 65535);
        case ScalarType::I16: return whole_in(-32768, 32767);
        case ScalarType::U32: return whole_in(0, 4294967295.0);
        case ScalarType::I32: return whole_in(-2147483648.0, 2147483647.0);
        case ScalarType::U64: return whole_in(0, 9007199254740992.0);
        case ScalarType::I64: return whole_in(-9007199254740992.0, 9007199254740992.0);
        case ScalarType::F32: return std::abs(value) <= std::numeric_limits<float>::max();
        case ScalarType::F64: return true;
    }
    return false;
}

std::filesystem::path checked_data_file(const std::filesystem::path& header, const std::string& name,
                                        const std::string& field_text) {
    const std::filesystem::path data_path = header.parent_path() / name;
    std::error_code error;
    const std::filesystem::path folder = std::filesystem::weakly_canonical(std::filesystem::absolute(header).parent_path(), error);
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(std::filesystem::absolute(data_path), error);
    const auto [folder_end, ignored] = std::mismatch(folder.begin(), folder.end(), resolved.begin(), resolved.end());
    const char* opt_in = std::getenv("TESSERA_ALLOW_EXTERNAL_DATA_FILES");
    TESSERA_CHECK(folder_end == folder.end() || (opt_in != nullptr && std::string(opt_in) == "1"),
                  quoted(header) << " keeps its voxels in " << quoted(resolved) << " (" << field_text
                                 << "), outside the header's folder " << quoted(folder)
                                 << ". Tessera reads data files only beside their header: copy the data file there (and "
                                    "name it without a folder), or set TESSERA_ALLOW_EXTERNAL_DATA_FILES=1 if you trust this header.");
    const FileKind kind = file_kind(data_path);
    TESSERA_CHECK(kind != FileKind::Missing, quoted(header) << " keeps its voxels in " << quoted(data_path)
                                                            << ", which does not exist: copy the data file next to the header.");
    TESSERA_CHECK(kind == FileKind::Regular, quoted(header) << " keeps its voxels in " << quoted(data_path) << ", which is "
                                                            << file_kind_name(kind) << ", not a regular file.");
    return data_path;
}

std::string quoted(const std::filesystem::path& path) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on "'" + std::string&&.
    std::string text = "'";
    text += path.string();
    text += '\'';
    return text;
}

std::string full_extension(const std::filesystem::path& path) {
    std::string name = path.filename().string();
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const std::size_t dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0) return "";
    std::string extension = name.substr(dot);
    if (extension == ".gz") {
        const std::size_t inner = name.rfind('.', dot - 1);
        if (inner != std::string::npos && inner != 0) extension = name.substr(inner);
    }
    return extension;
}

Tensor to_volume_voxels(const RawImage& image) {
    check_raw_image(image);
    const auto& size = image.geometry.size;
    Tensor voxels = Tensor::empty({size[2], size[1], size[0]}, DType::F32);
    float* out = voxels.data<float>();
    const bool identity = is_identity_scaling(image);
    visit_scalar_type(image.scalar_type, [&](auto tag) {
        using Source = decltype(tag);
        for_each_row<Source>(image, [&](const Source* row, std::int64_t j, std::int64_t k) {
            float* destination = out + (k * size[1] + j) * size[0];
            if (identity) {
                for (std::int64_t i = 0; i < size[0]; ++i) destination[i] = static_cast<float>(row[i]);
            } else {
                for (std::int64_t i = 0; i < size[0]; ++i) {
                    destination[i] = static_cast<float>(static_cast<double>(row[i]) * image.slope + image.intercept);
                }
            }
        });
    });
    return voxels;
}

Tensor to_label_voxels(const RawImage& image, const std::filesystem::path& path) {
    check_raw_image(image);
    const auto& size = image.geometry.size;
    Tensor labels = Tensor::empty({size[2], size[1], size[0]}, DType::I32);
    std::int32_t* out = labels.data<std::int32_t>();
    const bool identity = is_identity_scaling(image);
    constexpr double lowest = std::numeric_limits<std::int32_t>::lowest();
    constexpr double highest = std::numeric_limits<std::int32_t>::max();

    auto reject = [&](double value, std::int64_t i, std::int64_t j, std::int64_t k) {
        const bool whole = std::isfinite(value) && std::nearbyint(value) == value;
        TESSERA_REJECT(
              quoted(path) << " is not a label map: voxel (" << i << ", " << j << ", " << k << ") holds " << value
                           << (whole ? ", outside the int32 range of labels" : ", but labels must be whole numbers")
                           << " (the file stores " << image.source_scalar_type
                           << "). Open it as an image, or pick the segmentation file.");
    };

    visit_scalar_type(image.scalar_type, [&](auto tag) {
        using Source = decltype(tag);
        // Integer types that always fit int32 convert directly.
        constexpr bool always_fits = std::is_integral_v<Source> && sizeof(Source) <= 2;
        for_each_row<Source>(image, [&](const Source* row, std::int64_t j, std::int64_t k) {
            std::int32_t* destination = out + (k * size[1] + j) * size[0];
            if (always_fits && identity) {
                for (std::int64_t i = 0; i < size[0]; ++i) destination[i] = static_cast<std::int32_t>(row[i]);
                return;
            }
            for (std::int64_t i = 0; i < size[0]; ++i) {
                const double value = identity ? static_cast<double>(row[i])
                                              : static_cast<double>(row[i]) * image.slope + image.intercept;
                if (!(value >= lowest && value <= highest) || std::nearbyint(value) != value) {
                    reject(value, i, j, k);
                }
                destination[i] = static_cast<std::int32_t>(value);
            }
        });
    });
    return labels;
}

}  // namespace tessera::io_detail
