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

std::shared_ptr<const tessera::Volume> StreamedVolume::slice(int axis, std::int64_t index) {
    const Key key{axis, index};
    {
        const std::lock_guard lock(m_mutex);
        if (const auto found = m_cache.find(key); found != m_cache.end()) {
            found->second.last_used = ++m_clock;
            return found->second.slice;
        }
        if (m_failed.contains(key) || m_reading == key) return nullptr;
        m_waiting[static_cast<std::size_t>(axis)] = index;  // replaces an older request along this axis
    }
    m_wake.notify_one();
    return nullptr;
}

std::optional<float> StreamedVolume::cachedValue(const std::array<std::int64_t, 3>& voxel) const {
    const std::lock_guard lock(m_mutex);
    for (int axis = 0; axis < 3; ++axis) {
        const auto found = m_cache.find({axis, voxel[static_cast<std::size_t>(axis)]});
        if (found == m_cache.end()) continue;
        std::array<std::int64_t, 3> within = voxel;
        within[static_cast<std::size_t>(axis)] = 0;
        return found->second.slice->value_at(within[0], within[1], within[2]);
    }
    return std::nullopt;
}

std::string StreamedVolume::lastError() const {
    const std::lock_guard lock(m_mutex);
    return m_last_error;
}

std::size_t StreamedVolume::cachedBytes() const {
    const std::lock_guard lock(m_mutex);
    return m_bytes;
}

std::int64_t StreamedVolume::slicesRead() const {
    const std::lock_guard lock(m_mutex);
    return m_slices_read;
}

void StreamedVolume::dropLeastRecentlyUsed() {
    // Keep at least one slice per axis: the three views' slices stay while the cache is small.
    while (m_bytes > m_cache_bytes && m_cache.size() > 3) {
        auto oldest = std::min_element(m_cache.begin(), m_cache.end(),
                                       [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; });
        m_bytes -= static_cast<std::size_t>(oldest->second.slice->voxels.num_elements()) * sizeof(float);
        m_cache.erase(oldest);
    }
}

void StreamedVolume::run() {
    lowerThisThreadPriority();  // the GUI thread comes first
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
        if (m_cache.contains(key) || m_failed.contains(key)) continue;
        m_reading = key;
        lock.unlock();

        std::shared_ptr<const tessera::Volume> slice;
        std::string error;
        try {
            const auto& size = m_reader->geometry().size;
            tessera::VoxelBox box{{0, 0, 0}, size};
            box.begin[static_cast<std::size_t>(axis)] = key.second;
            box.extent[static_cast<std::size_t>(axis)] = 1;
            slice = std::make_shared<const tessera::Volume>(tessera::read_region_volume(*m_reader, box));
        } catch (const std::exception& exception) {
            error = exception.what();
        }

        lock.lock();
        m_reading.reset();
        if (slice) {
            m_bytes += static_cast<std::size_t>(slice->voxels.num_elements()) * sizeof(float);
            m_cache[key] = Cached{std::move(slice), ++m_clock};
            ++m_slices_read;
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
