// StreamedVolume: a volume too large to hold whole, seen through full-resolution slices read when a
// view asks for them (no widgets, no rendering). The ViewerModel holds its downsampled overview as the
// volume; this object holds the file and the slices read so far.
//
// Reading a slice can take seconds (an axial slice of a 64³-chunked HDF5 dataset decompresses a whole
// layer of chunks), so slices are read on one worker thread: slice() returns what is cached or asks for
// it and returns nullptr; `on_loaded` runs on the worker thread after each read (the model posts it to
// the GUI thread). Per voxel axis only the newest request waits, so walking through slices reads the
// one the user stops at, not every one passed on the way. Read slices are kept, least recently used
// dropped first, within `cache_bytes` (and at least one per axis). A label volume on the same grid,
// read by region too, may be attached: its slices are read with the image's.
#pragma once

#include "io/volume_overview.hpp"

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tessera::ui {

class StreamedVolume {
public:
    StreamedVolume(std::shared_ptr<const tessera::VolumeRegionReader> reader, std::array<std::int64_t, 3> overview_factor,
                   std::array<double, 2> value_range, std::size_t cache_bytes, std::function<void()> on_loaded);
    ~StreamedVolume();  // stops the worker after the slice it is reading
    StreamedVolume(const StreamedVolume&) = delete;
    StreamedVolume& operator=(const StreamedVolume&) = delete;

    const tessera::ImageGeometry& geometry() const { return m_reader->geometry(); }  // full resolution
    const std::string& sourcePath() const { return m_reader->source_path(); }
    std::array<std::int64_t, 3> overviewFactor() const { return m_factor; }
    std::array<double, 2> valueRange() const { return m_value_range; }  // over every finite voxel

    // The full-resolution slice through `index` along voxel axis `axis` (0 = i, 1 = j, 2 = k): a volume
    // one voxel thick along that axis. nullptr while it is being read (it is then asked for).
    std::shared_ptr<const tessera::Volume> slice(int axis, std::int64_t index);
    // A voxel's value from a slice already read, without reading.
    std::optional<float> cachedValue(const std::array<std::int64_t, 3>& voxel) const;

    // Labels on the same full-resolution grid read by region (nullptr: none). Slices read before of
    // other labels are dropped.
    void setLabels(std::shared_ptr<const tessera::VolumeRegionReader> labels);
    bool hasLabels() const;
    // As slice(), for the labels: nullptr while being read or when there are no labels.
    std::shared_ptr<const tessera::LabelMap> labelSlice(int axis, std::int64_t index);
    std::optional<std::int32_t> cachedLabel(const std::array<std::int64_t, 3>& voxel) const;
    // Whether reading the slice through `index` along `axis` failed (it is not asked for again).
    bool readFailed(int axis, std::int64_t index) const;
    // Why the last failed read failed ("" when none has failed); a failed slice is not asked for again.
    std::string lastError() const;

private:
    using Key = std::pair<int, std::int64_t>;  // voxel axis, slice index
    struct Cached {
        std::shared_ptr<const tessera::Volume> slice;       // nullptr until read
        std::shared_ptr<const tessera::LabelMap> labels;    // nullptr until read or without labels
        std::uint64_t last_used = 0;
        std::size_t bytes() const;
    };
    // The cached slice through `voxel` along some axis that has what `part` picks, and the voxel's place in
    // it; under m_mutex.
    template <class Part>
    auto findThrough(const std::array<std::int64_t, 3>& voxel, Part part) const
        -> std::optional<std::pair<decltype(part(std::declval<const Cached&>())), std::array<std::int64_t, 3>>>;
    void request(const Key& key);           // under m_mutex
    bool complete(const Cached& cached) const;  // under m_mutex: all there is to read is read
    void run();
    void dropLeastRecentlyUsed();  // under m_mutex

    std::shared_ptr<const tessera::VolumeRegionReader> m_reader;
    std::array<std::int64_t, 3> m_factor;
    std::array<double, 2> m_value_range;
    std::size_t m_cache_bytes;
    std::function<void()> m_on_loaded;

    mutable std::mutex m_mutex;  // guards everything below
    std::condition_variable m_wake;
    std::map<Key, Cached> m_cache;
    std::shared_ptr<const tessera::VolumeRegionReader> m_labels;
    std::uint64_t m_labels_generation = 0;  // counts setLabels(): a read of older labels is dropped
    std::size_t m_bytes = 0;
    mutable std::uint64_t m_clock = 0;
    std::array<std::optional<std::int64_t>, 3> m_waiting;  // per axis: the newest slice asked for
    std::optional<Key> m_reading;
    std::map<Key, std::string> m_failed;
    std::string m_last_error;
    bool m_stop = false;
    std::thread m_worker;  // last: starts after everything it uses
};

}  // namespace tessera::ui
