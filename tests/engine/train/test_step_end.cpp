// The end of a training step, shared by the single-core trainer and the core mesh: the loss gradient
// scaled, every copy of the gradients unscaled by the scale backward used, a skipped overflow, a
// diverged step stopped with the tensor and the core named, and batch-norm statistics checked.
#include "train/step_end.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

using namespace tessera;
using namespace tessera::train;

namespace {

Parameter parameter_with_gradient(std::string name, std::vector<float> gradient) {
    Parameter parameter;
    parameter.name = std::move(name);
    const auto count = static_cast<std::int64_t>(gradient.size());
    parameter.value = Tensor::zeros({count}, DType::F32);
    parameter.gradient = Tensor::empty({count}, DType::F32);
    for (std::int64_t i = 0; i < count; ++i) parameter.gradient.data<float>()[i] = gradient[static_cast<std::size_t>(i)];
    return parameter;
}

StepContext at_step(std::int64_t step) {
    StepContext context;
    context.step = step;
    return context;
}

DynamicLossScaler dynamic_scaler(double initial_scale, std::int64_t growth_interval) {
    DynamicLossScaleOptions options;
    options.initial_scale = initial_scale;
    options.growth_interval = growth_interval;
    return DynamicLossScaler(options);
}

std::string error_of(const auto& action) {
    try {
        action();
    } catch (const Error& error) {
        return error.what();
    }
    ADD_FAILURE() << "no error";
    return {};
}

}  // namespace

TEST(StepEnd, TheLossGradientIsScaledInPlace) {
    Tensor gradient = Tensor::zeros({3}, DType::F32);
    gradient.data<float>()[0] = 0.5f;
    gradient.data<float>()[2] = -0.25f;
    scale_loss_gradient(gradient, 1024.0);
    EXPECT_EQ(gradient.data<float>()[0], 512.0f);
    EXPECT_EQ(gradient.data<float>()[1], 0.0f);
    EXPECT_EQ(gradient.data<float>()[2], -256.0f);
    scale_loss_gradient(gradient, 1.0);
    EXPECT_EQ(gradient.data<float>()[0], 512.0f);
}

TEST(StepEnd, EveryCopyIsUnscaledByTheScaleBackwardUsedAndUpdatedOnce) {
    std::vector<Parameter> core0 = {parameter_with_gradient("w", {64.0f, -128.0f})};
    std::vector<Parameter> core1 = {parameter_with_gradient("w", {64.0f, -128.0f})};
    const std::span<Parameter> copies[] = {core0, core1};
    // Growth after one clean step: update() doubles the scale, but the gradients were scaled by 64.
    DynamicLossScaler scaler = dynamic_scaler(64, 1);
    int optimizer_calls = 0;
    const bool applied = finish_update(scaler, 64.0, copies, [&] { ++optimizer_calls; }, at_step(3));
    EXPECT_TRUE(applied);
    EXPECT_EQ(optimizer_calls, 1);
    EXPECT_EQ(scaler.scale(), 128.0);
    for (const std::vector<Parameter>* core : {&core0, &core1}) {
        EXPECT_EQ((*core)[0].gradient.data<float>()[0], 1.0f);
        EXPECT_EQ((*core)[0].gradient.data<float>()[1], -2.0f);
    }
}

TEST(StepEnd, AnOverflowIsSkippedByADynamicScalerAndStopsTheRunOtherwise) {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<Parameter> parameters = {parameter_with_gradient("a", {1.0f}), parameter_with_gradient("b", {inf})};
    const std::span<Parameter> copies[] = {parameters};
    DynamicLossScaler dynamic = dynamic_scaler(1024, 2000);
    bool optimized = false;
    EXPECT_FALSE(finish_update(dynamic, 1024.0, copies, [&] { optimized = true; }, at_step(0)));
    EXPECT_FALSE(optimized);
    EXPECT_EQ(dynamic.scale(), 512.0);
    EXPECT_EQ(parameters[0].gradient.data<float>()[0], 1.0f) << "a skipped step is not unscaled";

    NoLossScaling none;
    StepContext context{.step = 6, .loss = 2.5, .locate = [](std::size_t index) { return " on core " + std::to_string(index + 2); },
                        .aftermath = " Nothing of this step was saved."};
    const std::string message = error_of([&] { finish_update(none, 1.0, copies, [&] { optimized = true; }, context); });
    EXPECT_EQ(message, "step 7: the gradient of 'b' holds NaN or infinite values on core 3 (the loss was 2.5): training diverged. "
                       "Lower the learning rate, or use dynamic loss scaling in reduced precision. Nothing of this step was saved.");
    EXPECT_FALSE(optimized);
}

TEST(StepEnd, AnUpdateThatMakesAWeightNonFiniteStopsTheRun) {
    std::vector<Parameter> parameters = {parameter_with_gradient("w", {1.0f})};
    const std::span<Parameter> copies[] = {parameters};
    NoLossScaling none;
    const std::string message = error_of([&] {
        finish_update(none, 1.0, copies, [&] { parameters[0].value.data<float>()[0] = std::numeric_limits<float>::quiet_NaN(); },
                      at_step(1));
    });
    EXPECT_EQ(message, "step 2: the update made 'w' NaN or infinite: training diverged. Lower the learning rate.");
}

TEST(StepEnd, ANonFiniteBatchNormStatisticIsNamedWithItsCore) {
    graph::Graph g("bn");
    const int x = g.input({2, 3, 4, 4});
    g.set_output(g.batch_norm(x, ops::BatchNormAttributes{}, "bn"));
    std::vector<Tensor> statistics;
    for (const graph::ParameterSpec& spec : g.buffers()) statistics.push_back(Tensor::zeros(spec.shape, DType::F32));
    ASSERT_FALSE(statistics.empty());
    EXPECT_NO_THROW(check_statistics(statistics, g, at_step(0)));
    statistics.back().data<float>()[1] = std::numeric_limits<float>::infinity();
    const std::string message = error_of([&] { check_statistics(statistics, g, at_step(4), " on core 1"); });
    EXPECT_NE(message.find("step 5: the batch-norm statistic '" + g.buffers().back().name + "' on core 1 became NaN or infinite"),
              std::string::npos)
        << message;
}

// A runner that takes the tasks in reverse order, on threads of its own: what a thread pool may do.
static void run_backwards_on_threads(std::int64_t count, const std::function<void(std::int64_t)>& body) {
    std::vector<std::thread> threads;
    for (std::int64_t i = count - 1; i >= 0; --i) threads.emplace_back([&body, i] { body(i); });
    for (std::thread& thread : threads) thread.join();
}

TEST(StepEnd, ChecksSpreadOverThreadsStillNameTheFirstBadParameterInOrder) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<Parameter> parameters = {parameter_with_gradient("a", {1.0f}), parameter_with_gradient("b", {nan}),
                                         parameter_with_gradient("c", {2.0f}), parameter_with_gradient("d", {nan})};
    const std::span<Parameter> copies[] = {parameters};
    NoLossScaling none;
    const std::string message = error_of([&] { finish_update(none, 1.0, copies, [] {}, at_step(0), run_backwards_on_threads); });
    EXPECT_NE(message.find("the gradient of 'b'"), std::string::npos) << message;
}

TEST(StepEnd, UnscalingSpreadOverThreadsGivesTheSameBitsAsInOrder) {
    const auto make_copies = [] {
        std::vector<std::vector<Parameter>> cores(3);
        for (int core = 0; core < 3; ++core) {
            for (int p = 0; p < 5; ++p)
                cores[static_cast<std::size_t>(core)].push_back(
                    parameter_with_gradient(std::string(1, static_cast<char>('a' + p)), {0.3f * static_cast<float>(p + 1), -7.1f, 1e-3f * static_cast<float>(core)}));
        }
        return cores;
    };
    std::vector<std::vector<Parameter>> in_order = make_copies(), spread = make_copies();
    const std::span<Parameter> in_order_copies[] = {in_order[0], in_order[1], in_order[2]};
    const std::span<Parameter> spread_copies[] = {spread[0], spread[1], spread[2]};
    DynamicLossScaler first = dynamic_scaler(3, 100), second = dynamic_scaler(3, 100);  // 1/3 is inexact in f32
    ASSERT_TRUE(finish_update(first, 3.0, in_order_copies, [] {}, at_step(0)));
    ASSERT_TRUE(finish_update(second, 3.0, spread_copies, [] {}, at_step(0), run_backwards_on_threads));
    for (std::size_t core = 0; core < 3; ++core) {
        for (std::size_t p = 0; p < 5; ++p) {
            const Tensor& expected = in_order[core][p].gradient;
            const Tensor& got = spread[core][p].gradient;
            for (std::int64_t e = 0; e < expected.num_elements(); ++e)
                EXPECT_EQ(std::bit_cast<std::uint32_t>(got.data<float>()[e]), std::bit_cast<std::uint32_t>(expected.data<float>()[e]));
        }
    }
}
