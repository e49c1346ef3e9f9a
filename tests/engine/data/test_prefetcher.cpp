// Prefetcher: same batches in the same order, producer errors rethrown, prompt shutdown.
#include "data/prefetcher.hpp"
#include "data_test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

using namespace tessera;
using namespace tessera::data;
using namespace tessera::data::test;
using namespace std::chrono_literals;

namespace {

// Batch i is filled with i; counts calls, can be slow and can fail at one index.
class ScriptedDataset final : public Dataset {
public:
    explicit ScriptedDataset(std::chrono::milliseconds delay = 0ms, std::int64_t failing_index = -1)
        : Dataset({1, 1, 2, 2}), m_delay(delay), m_failing_index(failing_index) {}

    Batch training_batch(std::int64_t index) const override {
        ++m_calls;
        std::this_thread::sleep_for(m_delay);
        TESSERA_CHECK(index != m_failing_index, "batch " << index << " cannot be made");
        return Batch{Tensor::full<float>({1, 1, 2, 2}, static_cast<float>(index)),
                     Tensor::full<std::int32_t>({1, 2, 2}, static_cast<std::int32_t>(index))};
    }
    std::int64_t num_eval_examples() const override { return 0; }
    Example eval_example(std::int64_t) const override { return {}; }
    std::int64_t num_classes() const override { return 2; }
    std::string describe() const override { return "scripted"; }
    int calls() const { return m_calls; }

private:
    std::chrono::milliseconds m_delay;
    std::int64_t m_failing_index;
    mutable std::atomic<int> m_calls{0};
};

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST(DataPrefetcher, ReturnsTheDatasetsBatchesInOrder) {
    DataConfig config;
    config.image_size = {64, 64};
    config.num_train_images = 2;
    config.augment.flip_axes = {0, 1};
    const auto dataset = make_dataset(config, {2, 1, 32, 32}, 2);
    Prefetcher prefetcher(*dataset, 5, 3);
    for (std::int64_t index = 5; index < 12; ++index) {
        EXPECT_EQ(prefetcher.next_index(), index);
        const Batch batch = prefetcher.next();
        EXPECT_TRUE(same_batch(batch, dataset->training_batch(index))) << index;
    }
    EXPECT_EQ(prefetcher.next_index(), 12);
}

TEST(DataPrefetcher, PreparesDepthBatchesAheadAndNoMore) {
    ScriptedDataset dataset;
    Prefetcher prefetcher(dataset, 0, 2);
    // Waits (up to 10 s: a loaded machine may be slow to run the producer) for what must come, then
    // gives the producer time to overreach: counted, not timed.
    auto wait_for_calls = [&](int count) {
        const auto start = std::chrono::steady_clock::now();
        while (dataset.calls() < count && seconds_since(start) < 10) std::this_thread::sleep_for(1ms);
        std::this_thread::sleep_for(50ms);
    };
    wait_for_calls(2);
    EXPECT_EQ(dataset.calls(), 2);
    EXPECT_EQ(prefetcher.next().images.at<float>({0, 0, 0, 0}), 0.0f);
    wait_for_calls(3);
    EXPECT_EQ(dataset.calls(), 3);
    EXPECT_EQ(prefetcher.next().labels.at<std::int32_t>({0, 1, 1}), 1);
}

TEST(DataPrefetcher, RethrowsTheProducersErrorAfterTheBatchesBeforeIt) {
    ScriptedDataset dataset(0ms, 3);
    Prefetcher prefetcher(dataset, 1, 2);
    EXPECT_EQ(prefetcher.next().images.at<float>({0, 0, 0, 0}), 1.0f);
    EXPECT_EQ(prefetcher.next().images.at<float>({0, 0, 0, 0}), 2.0f);
    const std::string message = error_message([&] { prefetcher.next(); });
    EXPECT_EQ(message, "batch 3 cannot be made");
    EXPECT_EQ(prefetcher.next_index(), 3);
    EXPECT_THROW(prefetcher.next(), Error);  // and again: nothing comes after a failed batch
}

// Stopping makes no batch beyond the one in flight (counted, not timed: a machine under load may take
// any time to wake a thread; a stop that waited for the queue to drain would make more batches).
TEST(DataPrefetcher, StopsPromptlyWithAFullQueueOrABatchInFlight) {
    {
        ScriptedDataset dataset(30ms);
        auto prefetcher = std::make_unique<Prefetcher>(dataset, 0, 2);
        const auto start = std::chrono::steady_clock::now();
        while (dataset.calls() < 2 && seconds_since(start) < 10) std::this_thread::sleep_for(1ms);
        std::this_thread::sleep_for(60ms);  // the queue is full; the producer waits
        ASSERT_EQ(dataset.calls(), 2);
        prefetcher.reset();
        EXPECT_EQ(dataset.calls(), 2) << "a stop with a full queue makes no further batch";
    }
    {
        ScriptedDataset dataset(200ms);
        auto prefetcher = std::make_unique<Prefetcher>(dataset, 0, 8);
        const auto start = std::chrono::steady_clock::now();
        while (dataset.calls() < 1 && seconds_since(start) < 10) std::this_thread::sleep_for(1ms);
        prefetcher.reset();  // batch 0 is being made
        EXPECT_EQ(dataset.calls(), 1) << "waits for at most the batch in flight";
    }
    ScriptedDataset dataset;
    EXPECT_THROW(Prefetcher(dataset, 0, 0), Error);
}
