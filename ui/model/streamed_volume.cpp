#include "model/streamed_volume.hpp"

#include "model/gui_mailbox.hpp"

#include <algorithm>

namespace tessera::ui {

StreamedVolume::StreamedVolume(std::shared_ptr<const tessera::VolumeRegionReader> reader, std::array<std::int64_t, 3> overview_factor,
                               std::array<double, 2> value_range, std::size_t cache_bytes, std::function<void()> on_loaded)
    : m_reader(std::move(reader)),
      m_factor(overview_factor),
      m_value_range(value_range),
      m_cache_bytes(cache_bytes),
      m_on_loaded(std::move(on_loaded)),
      m_worker([this] { run(); }) {}

StreamedVolume::~StreamedVolume() {
    {
        const std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_wake.notify_all();
    m_worker.join();
}

std::size_t StreamedVolume::Cached::bytes() const {
    return (slice ? slice->voxels.num_bytes() : 0) + (labels ? labels->labels.num_bytes() : 0);
}

bool StreamedVolume::complete(const Cached& cached) const { return cached.slice && (!m_labels || cached.labels); }

void StreamedVolume::request(const Key& key) {
    if (m_failed.contains(key) || m_reading == key) return;
    m_waiting[static_cast<std::size_t>(key.first)] = key.second;  // replaces an older request along this axis
    m_wake.notify_one();
}

std::shared_ptr<const tessera::Volume> StreamedVolume::slice(int axis, std::int64_t index) {
    const Key key{axis, index};
    const std::lock_guard lock(m_mutex);
    const auto found = m_cache.find(key);
    if (found != m_cache.end()) {
        found->second.last_used = ++m_clock;
        if (!complete(found->second)) request(key);
        return found->second.slice;
    }
    request(key);
    return nullptr;
}

std::shared_ptr<const tessera::LabelMap> StreamedVolume::labelSlice(int axis, std::int64_t index) {
    const Key key{axis, index};
    const std::lock_guard lock(m_mutex);
    if (!m_labels) return nullptr;
    const auto found = m_cache.find(key);
    if (found != m_cache.end() && found->second.labels) {
        found->second.last_used = ++m_clock;
        return found->second.labels;
    }
    request(key);
    return nullptr;
}

void StreamedVolume::setLabels(std::shared_ptr<const tessera::VolumeRegionReader> labels) {
    const std::lock_guard lock(m_mutex);
    m_labels = std::move(labels);
    ++m_labels_generation;
    for (auto& [key, cached] : m_cache) {
        m_bytes -= cached.bytes();
        cached.labels.reset();
        m_bytes += cached.bytes();
    }
    m_failed.clear();  // the new labels get their chance where the old ones failed
}

bool StreamedVolume::hasLabels() const {
    const std::lock_guard lock(m_mutex);
    return m_labels != nullptr;
}

template <class Part>
auto StreamedVolume::findThrough(const std::array<std::int64_t, 3>& voxel, Part part) const
    -> std::optional<std::pair<decltype(part(std::declval<const Cached&>())), std::array<std::int64_t, 3>>> {
    for (int axis = 0; axis < 3; ++axis) {
        const auto found = m_cache.find({axis, voxel[static_cast<std::size_t>(axis)]});
        if (found == m_cache.end() || !part(found->second)) continue;
        std::array<std::int64_t, 3> within = voxel;  // the slice is one voxel thick along `axis`
        within[static_cast<std::size_t>(axis)] = 0;
        return std::pair{part(found->second), within};
    }
    return std::nullopt;
}

std::optional<float> StreamedVolume::cachedValue(const std::array<std::int64_t, 3>& voxel) const {
    const std::lock_guard lock(m_mutex);
    const auto found = findThrough(voxel, [](const Cached& cached) { return cached.slice; });
    if (!found) return std::nullopt;
    return found->first->value_at(found->second[0], found->second[1], found->second[2]);
}

std::optional<std::int32_t> StreamedVolume::cachedLabel(const std::array<std::int64_t, 3>& voxel) const {
    const std::lock_guard lock(m_mutex);
    const auto found = findThrough(voxel, [](const Cached& cached) { return cached.labels; });
    if (!found) return std::nullopt;
    return found->first->label_at(found->second[0], found->second[1], found->second[2]);
}

bool StreamedVolume::readFailed(int axis, std::int64_t index) const {
    const std::lock_guard lock(m_mutex);
    return m_failed.contains({axis, index});
}

std::string StreamedVolume::lastError() const {
    const std::lock_guard lock(m_mutex);
    return m_last_error;
}

void StreamedVolume::dropLeastRecentlyUsed() {
    // Keep at least one slice per axis: the three views' slices stay while the cache is small.
    while (m_bytes > m_cache_bytes && m_cache.size() > 3) {
        auto oldest = std::min_element(m_cache.begin(), m_cache.end(),
                                       [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; });
        m_bytes -= oldest->second.bytes();
        m_cache.erase(oldest);
    }
}

void StreamedVolume::run() {
    scheduleThisThreadAsBatch();  // the GUI thread comes first
    std::unique_lock lock(m_mutex);
    while (true) {
        m_wake.wait(lock, [this] {
            return m_stop || std::any_of(m_waiting.begin(), m_waiting.end(), [](const auto& index) { return index.has_value(); });
        });
        if (m_stop) return;
        // Axial first (k), as the view users look at most; each axis's newest request only.
        int axis = 2;
        while (!m_waiting[static_cast<std::size_t>(axis)]) --axis;
        const Key key{axis, *m_waiting[static_cast<std::size_t>(axis)]};
        m_waiting[static_cast<std::size_t>(axis)].reset();
        if (m_failed.contains(key)) continue;
        const auto cached = m_cache.find(key);
        const bool need_image = cached == m_cache.end() || !cached->second.slice;
        const std::shared_ptr<const tessera::VolumeRegionReader> labels = m_labels;
        const bool need_labels = labels && (cached == m_cache.end() || !cached->second.labels);
        if (!need_image && !need_labels) continue;
        const std::uint64_t labels_generation = m_labels_generation;
        m_reading = key;
        lock.unlock();

        std::shared_ptr<const tessera::Volume> slice;
        std::shared_ptr<const tessera::LabelMap> label_slice;
        std::string error;
        try {
            tessera::VoxelBox box{{0, 0, 0}, m_reader->geometry().size};
            box.begin[static_cast<std::size_t>(axis)] = key.second;
            box.extent[static_cast<std::size_t>(axis)] = 1;
            if (need_image) slice = std::make_shared<const tessera::Volume>(tessera::read_region_volume(*m_reader, box));
            if (need_labels) label_slice = std::make_shared<const tessera::LabelMap>(tessera::read_region_label_map(*labels, box));
        } catch (const std::exception& exception) {
            error = exception.what();
        }

        lock.lock();
        m_reading.reset();
        if (error.empty()) {
            Cached& entry = m_cache[key];
            m_bytes -= entry.bytes();
            if (slice) entry.slice = std::move(slice);
            if (label_slice && labels_generation == m_labels_generation) entry.labels = std::move(label_slice);
            entry.last_used = ++m_clock;
            m_bytes += entry.bytes();
            dropLeastRecentlyUsed();
        } else {
            m_failed[key] = error;
            m_last_error = error;
        }
        if (m_on_loaded) {
            lock.unlock();
            m_on_loaded();
            lock.lock();
        }
    }
}

}  // namespace tessera::ui
