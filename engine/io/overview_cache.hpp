// Overviews kept on disk between sessions: reopening a volume read by region (minutes of reading for
// tens of gigabytes) takes the overview read last time, as long as the file is the one it was read from.
//
//   OverviewCache cache(OverviewCache::default_folder());
//   std::optional<VolumeOverview> overview = cache.find_image(*reader, limit);
//   if (!overview) { overview = read_overview(*reader, limit); cache.store_image(*reader, limit, *overview); }
//
// An entry is two files named by a hash of what it summarises — the source (file and dataset), the file's
// size and modification time, and the overview's limit or factor: `<key>.json` (geometry, factor, value
// range, labels present, the source's identity) and `<key>.raw` (the voxels, f32 or i32). A changed,
// missing or damaged entry is a miss, never an error; a failed store only costs the next open its pass.
// The folder keeps the `max_entries` most recently stored entries.
#pragma once

#include "io/volume_overview.hpp"

#include <cstddef>
#include <filesystem>
#include <optional>

namespace tessera {

class OverviewCache {
public:
    explicit OverviewCache(std::filesystem::path folder, std::size_t max_entries = 16);

    // $TESSERA_CACHE_DIR/overviews, else $XDG_CACHE_HOME/tessera/overviews, else ~/.cache/tessera/overviews.
    static std::filesystem::path default_folder();
    const std::filesystem::path& folder() const { return m_folder; }

    std::optional<VolumeOverview> find_image(const VolumeRegionReader& reader, std::int64_t max_overview_voxels) const;
    void store_image(const VolumeRegionReader& reader, std::int64_t max_overview_voxels, const VolumeOverview& overview) const;
    std::optional<LabelOverview> find_labels(const VolumeRegionReader& reader, const std::array<std::int64_t, 3>& factor) const;
    void store_labels(const VolumeRegionReader& reader, const std::array<std::int64_t, 3>& factor, const LabelOverview& overview) const;

private:
    std::filesystem::path m_folder;
    std::size_t m_max_entries;
};

}  // namespace tessera
