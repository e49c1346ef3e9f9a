#include "io/volume.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace tessera {

namespace {

// Short decimal form for messages: 2, 0.661468, -254.
std::string format_number(double value) {
    if (value == 0.0) value = 0.0;  // no "-0"
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.6g", value);
    return buffer;
}

std::string format_triple(const std::array<double, 3>& values, const char* separator) {
    return format_number(values[0]) + separator + format_number(values[1]) + separator + format_number(values[2]);
}

std::string format_direction(const std::array<double, 9>& d) {
    std::string text = "[";
    for (int row = 0; row < 3; ++row) {
        text += row ? "; " : "";
        text += format_number(d[row * 3]) + " " + format_number(d[row * 3 + 1]) + " " + format_number(d[row * 3 + 2]);
    }
    return text + "]";
}

bool same_size(const ImageGeometry& a, const ImageGeometry& b) {
    return a.size == b.size;
}

bool same_spacing(const ImageGeometry& a, const ImageGeometry& b, double tolerance) {
    for (int axis = 0; axis < 3; ++axis) {
        const double scale = std::max(std::abs(a.spacing[axis]), std::abs(b.spacing[axis]));
        if (std::abs(a.spacing[axis] - b.spacing[axis]) > tolerance * scale) return false;
    }
    return true;
}

bool same_origin(const ImageGeometry& a, const ImageGeometry& b, double tolerance) {
    const double scale = std::min({a.spacing[0], a.spacing[1], a.spacing[2]});
    for (int axis = 0; axis < 3; ++axis) {
        if (std::abs(a.origin[axis] - b.origin[axis]) > tolerance * scale) return false;
    }
    return true;
}

bool same_direction(const ImageGeometry& a, const ImageGeometry& b, double tolerance) {
    for (int index = 0; index < 9; ++index) {
        if (std::abs(a.direction[index] - b.direction[index]) > tolerance) return false;
    }
    return true;
}

}  // namespace

std::array<double, 3> ImageGeometry::world_of(double i, double j, double k) const {
    const double scaled[3] = {i * spacing[0], j * spacing[1], k * spacing[2]};
    std::array<double, 3> world{};
    for (int row = 0; row < 3; ++row) {
        world[row] = origin[row] + direction[row * 3] * scaled[0] + direction[row * 3 + 1] * scaled[1] +
                     direction[row * 3 + 2] * scaled[2];
    }
    return world;
}

std::array<double, 3> ImageGeometry::continuous_index_of(const std::array<double, 3>& world) const {
    // Solve direction * scaled = world - origin with the adjugate (direction need not be orthonormal).
    const std::array<double, 9>& m = direction;
    const double cofactor[9] = {m[4] * m[8] - m[5] * m[7], m[2] * m[7] - m[1] * m[8], m[1] * m[5] - m[2] * m[4],
                                m[5] * m[6] - m[3] * m[8], m[0] * m[8] - m[2] * m[6], m[2] * m[3] - m[0] * m[5],
                                m[3] * m[7] - m[4] * m[6], m[1] * m[6] - m[0] * m[7], m[0] * m[4] - m[1] * m[3]};
    const double determinant = m[0] * cofactor[0] + m[1] * cofactor[3] + m[2] * cofactor[6];
    TESSERA_CHECK(std::abs(determinant) > 1e-12,
                  "the direction matrix " << format_direction(direction) << " is singular");
    const double offset[3] = {world[0] - origin[0], world[1] - origin[1], world[2] - origin[2]};
    std::array<double, 3> index{};
    for (int axis = 0; axis < 3; ++axis) {
        const double scaled =
            (cofactor[axis * 3] * offset[0] + cofactor[axis * 3 + 1] * offset[1] + cofactor[axis * 3 + 2] * offset[2]) /
            determinant;
        index[axis] = scaled / spacing[axis];
    }
    return index;
}

bool same_grid(const ImageGeometry& a, const ImageGeometry& b, double tolerance) {
    return same_size(a, b) && same_spacing(a, b, tolerance) && same_origin(a, b, tolerance) &&
           same_direction(a, b, tolerance);
}

void check_same_grid(const ImageGeometry& image, const ImageGeometry& labels, const std::string& what) {
    if (same_grid(image, labels)) return;
    std::vector<std::string> differences;
    if (!same_size(image, labels)) differences.push_back("size");
    if (!same_spacing(image, labels, 1e-4)) differences.push_back("spacing");
    if (!same_origin(image, labels, 1e-4)) differences.push_back("origin");
    if (!same_direction(image, labels, 1e-4)) differences.push_back("direction");
    std::string differ;
    for (std::size_t index = 0; index < differences.size(); ++index) {
        differ += (index == 0 ? "" : index + 1 == differences.size() ? " and " : ", ") + differences[index];
    }
    auto full = [](const ImageGeometry& g) {
        return describe(g) + ", origin (" + format_triple(g.origin, ", ") + ") mm, direction " +
               format_direction(g.direction);
    };
    TESSERA_REJECT(what << " is not on the image's grid: they differ in " << differ << ". Image: " << full(image) << ". "
                        << what << ": " << full(labels)
                        << ". Resample the labels onto the image grid (nearest neighbour) or pick the "
                           "matching image.");
}

std::string describe(const ImageGeometry& geometry) {
    std::ostringstream out;
    out << geometry.size[0] << "×" << geometry.size[1] << "×" << geometry.size[2] << " voxels, "
        << format_triple(geometry.spacing, "×") << " mm";
    return out.str();
}

std::vector<std::int32_t> LabelMap::present_labels() const {
    std::set<std::int32_t> found;
    const Tensor dense = labels.contiguous();
    const std::int32_t* values = dense.data<std::int32_t>();
    const std::int64_t count = dense.num_elements();
    // Most label maps hold a handful of values: skip runs of the last one seen.
    std::int32_t last = 0;
    bool have_last = false;
    for (std::int64_t index = 0; index < count; ++index) {
        if (have_last && values[index] == last) continue;
        last = values[index];
        have_last = true;
        found.insert(last);
    }
    return {found.begin(), found.end()};
}

namespace {
void check_geometry(const ImageGeometry& geometry) {
    for (int axis = 0; axis < 3; ++axis) {
        TESSERA_CHECK(geometry.size[axis] > 0,
                      "expected a positive grid size along axis " << axis << ", got " << geometry.size[axis]);
        TESSERA_CHECK(
            std::isfinite(geometry.spacing[axis]) && geometry.spacing[axis] > 0,
            "expected a positive voxel spacing along axis " << axis << ", got " << geometry.spacing[axis] << " mm");
    }
}
}  // namespace

Volume make_volume(const ImageGeometry& geometry) {
    check_geometry(geometry);
    Volume volume;
    volume.geometry = geometry;
    volume.voxels = Tensor::zeros({geometry.size[2], geometry.size[1], geometry.size[0]}, DType::F32);
    volume.source_scalar_type = "float32";
    return volume;
}

LabelMap make_label_map(const ImageGeometry& geometry) {
    check_geometry(geometry);
    LabelMap label_map;
    label_map.geometry = geometry;
    label_map.labels = Tensor::zeros({geometry.size[2], geometry.size[1], geometry.size[0]}, DType::I32);
    return label_map;
}

}  // namespace tessera
