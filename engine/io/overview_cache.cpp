#include "io/overview_cache.hpp"

#include "io/atomic_file.hpp"
#include "io/hdf5_volume.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

namespace tessera {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// What an entry summarises: the source as named, its file's size and modification time, and the kind
// and shape of the summary. Any change makes another key.
std::optional<std::string> source_identity(const VolumeRegionReader& reader, const std::string& summary) {
    const auto hdf5 = parse_hdf5_name(reader.source_path());
    const fs::path file = hdf5 ? hdf5->file : fs::path(reader.source_path());
    std::error_code error;
    const fs::path absolute = fs::absolute(file, error);
    const auto size = fs::file_size(file, error);
    if (error) return std::nullopt;
    const auto modified = fs::last_write_time(file, error);
    if (error) return std::nullopt;
    std::ostringstream identity;
    identity << absolute.string() << (hdf5 ? ":" + hdf5->dataset : "") << '|' << size << '|'
             << modified.time_since_epoch().count() << '|' << summary;
    return identity.str();
}

std::string labels_summary(const std::array<std::int64_t, 3>& factor) {
    return "labels|" + std::to_string(factor[0]) + "," + std::to_string(factor[1]) + "," + std::to_string(factor[2]);
}

std::string key_of(const std::string& identity) {
    std::uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits
    for (const char c : identity) {
        hash ^= static_cast<unsigned char>(c);
        hash *= 1099511628211ull;
    }
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
    return text;
}

json geometry_json(const ImageGeometry& geometry) {
    return {{"size", geometry.size}, {"spacing", geometry.spacing}, {"origin", geometry.origin}, {"direction", geometry.direction}};
}

ImageGeometry geometry_from(const json& value) {
    ImageGeometry geometry;
    geometry.size = value.at("size").get<std::array<std::int64_t, 3>>();
    geometry.spacing = value.at("spacing").get<std::array<double, 3>>();
    geometry.origin = value.at("origin").get<std::array<double, 3>>();
    geometry.direction = value.at("direction").get<std::array<double, 9>>();
    return geometry;
}

// The entry's metadata when it is there and names `identity`; its voxels are checked by size on reading.
std::optional<json> read_metadata(const fs::path& folder, const std::string& key, const std::string& identity) {
    std::ifstream in(folder / (key + ".json"));
    if (!in) return std::nullopt;
    json metadata = json::parse(in, nullptr, /*allow_exceptions*/ false);
    if (metadata.is_discarded() || !metadata.is_object() || metadata.value("identity", std::string{}) != identity) return std::nullopt;
    return metadata;
}

bool read_voxels(const fs::path& path, void* out, std::size_t bytes) {
    std::error_code error;
    if (fs::file_size(path, error) != bytes || error) return false;
    std::ifstream in(path, std::ios::binary);
    return static_cast<bool>(in.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes)));
}

}  // namespace

OverviewCache::OverviewCache(fs::path folder, std::size_t max_entries) : m_folder(std::move(folder)), m_max_entries(max_entries) {}

fs::path OverviewCache::default_folder() {
    if (const char* set = std::getenv("TESSERA_CACHE_DIR"); set && *set) return fs::path(set) / "overviews";
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "tessera" / "overviews";
    const char* home = std::getenv("HOME");
    return fs::path(home && *home ? home : "/tmp") / ".cache" / "tessera" / "overviews";
}

std::optional<VolumeOverview> OverviewCache::find_image(const VolumeRegionReader& reader, std::int64_t max_overview_voxels) const {
    try {
        const auto identity = source_identity(reader, "image|" + std::to_string(max_overview_voxels));
        if (!identity) return std::nullopt;
        const std::string key = key_of(*identity);
        const auto metadata = read_metadata(m_folder, key, *identity);
        if (!metadata) return std::nullopt;
        VolumeOverview overview;
        overview.full_geometry = reader.geometry();
        overview.factor = metadata->at("factor").get<std::array<std::int64_t, 3>>();
        overview.minimum = metadata->at("minimum").get<double>();
        overview.maximum = metadata->at("maximum").get<double>();
        overview.num_non_finite = metadata->at("num_non_finite").get<std::int64_t>();
        overview.volume = make_volume(geometry_from(metadata->at("geometry")));
        overview.volume.source_path = reader.source_path();
        overview.volume.source_scalar_type = reader.source_scalar_type();
        if (!read_voxels(m_folder / (key + ".raw"), overview.volume.voxels.data<float>(), overview.volume.voxels.num_bytes())) return std::nullopt;
        return overview;
    } catch (const std::exception&) {
        return std::nullopt;  // a damaged entry: read the file again
    }
}

std::optional<LabelOverview> OverviewCache::find_labels(const VolumeRegionReader& reader, const std::array<std::int64_t, 3>& factor) const {
    try {
        const auto identity = source_identity(reader, labels_summary(factor));
        if (!identity) return std::nullopt;
        const std::string key = key_of(*identity);
        const auto metadata = read_metadata(m_folder, key, *identity);
        if (!metadata) return std::nullopt;
        LabelOverview overview;
        overview.present_labels = metadata->at("present_labels").get<std::vector<std::int32_t>>();
        overview.labels = make_label_map(geometry_from(metadata->at("geometry")));
        overview.labels.source_path = reader.source_path();
        if (!read_voxels(m_folder / (key + ".raw"), overview.labels.labels.data<std::int32_t>(), overview.labels.labels.num_bytes())) {
            return std::nullopt;
        }
        return overview;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

namespace {

// Voxels first, then the metadata that makes the entry findable; then the oldest entries beyond
// `max_entries` go. Failures are swallowed: the cache only saves time.
void store_entry(const fs::path& folder, std::size_t max_entries, const std::string& identity, json metadata,
                 std::span<const std::byte> voxels) {
    try {
        std::error_code error;
        fs::create_directories(folder, error);
        if (error) return;
        const std::string key = key_of(identity);
        metadata["identity"] = identity;
        io::write_file_atomically(folder / (key + ".raw"), voxels);
        const std::string text = metadata.dump(1);
        io::write_file_atomically(folder / (key + ".json"), std::as_bytes(std::span(text.data(), text.size())));

        std::vector<std::pair<fs::file_time_type, std::string>> entries;
        for (const auto& file : fs::directory_iterator(folder, error)) {
            if (file.path().extension() == ".json") entries.emplace_back(file.last_write_time(error), file.path().stem().string());
        }
        std::sort(entries.begin(), entries.end(), std::greater<>());
        for (std::size_t e = max_entries; e < entries.size(); ++e) {
            fs::remove(folder / (entries[e].second + ".json"), error);
            fs::remove(folder / (entries[e].second + ".raw"), error);
        }
    } catch (const std::exception&) {
    }
}

}  // namespace

void OverviewCache::store_image(const VolumeRegionReader& reader, std::int64_t max_overview_voxels, const VolumeOverview& overview) const {
    const auto identity = source_identity(reader, "image|" + std::to_string(max_overview_voxels));
    if (!identity) return;
    json metadata = {{"geometry", geometry_json(overview.volume.geometry)},
                     {"factor", overview.factor},
                     {"minimum", overview.minimum},
                     {"maximum", overview.maximum},
                     {"num_non_finite", overview.num_non_finite}};
    const Tensor& voxels = overview.volume.voxels;
    store_entry(m_folder, m_max_entries, *identity, std::move(metadata),
                std::span(static_cast<const std::byte*>(voxels.raw_data()), voxels.num_bytes()));
}

void OverviewCache::store_labels(const VolumeRegionReader& reader, const std::array<std::int64_t, 3>& factor, const LabelOverview& overview) const {
    const auto identity = source_identity(reader, labels_summary(factor));
    if (!identity) return;
    json metadata = {{"geometry", geometry_json(overview.labels.geometry)}, {"present_labels", overview.present_labels}};
    const Tensor& labels = overview.labels.labels;
    store_entry(m_folder, m_max_entries, *identity, std::move(metadata),
                std::span(static_cast<const std::byte*>(labels.raw_data()), labels.num_bytes()));
}

}  // namespace tessera
