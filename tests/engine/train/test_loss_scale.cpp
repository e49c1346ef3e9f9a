// Loss scaling: overflow skips and backs off, clean steps grow the scale, clamps, inf/NaN detection,
// unscaling, and state round trips.
#include "train/loss_scale.hpp"
#include "train/optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace tessera;
using namespace tessera::train;

namespace {

Parameter make_gradient_parameter(std::string name, std::vector<float> gradient) {
    Parameter parameter;
    parameter.name = std::move(name);
    const std::int64_t count = static_cast<std::int64_t>(gradient.size());
    parameter.value = Tensor::zeros({count}, DType::F32);
    parameter.gradient = Tensor::empty({count}, DType::F32);
    for (std::int64_t i = 0; i < count; ++i)
        parameter.gradient.data<float>()[i] = gradient[static_cast<std::size_t>(i)];
    return parameter;
}

void expect_error(const auto& action, const std::string& fragment) {
    try {
        action();
        ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
}

}  // namespace

// ---- dynamic -----------------------------------------------------------------------------------

TEST(DynamicLossScaler, DefaultsFollowTensorFlow) {
    const DynamicLossScaler scaler;
    EXPECT_EQ(scaler.scale(), 32768.0);
    EXPECT_EQ(scaler.options().growth_interval, 2000);
    EXPECT_EQ(scaler.options().growth_factor, 2.0);
    EXPECT_EQ(scaler.options().backoff_factor, 0.5);
    EXPECT_EQ(scaler.skipped_steps(), 0);
    EXPECT_EQ(scaler.clean_steps_since_growth(), 0);
    EXPECT_EQ(scaler.name(), "dynamic");
    EXPECT_EQ(scaler.describe(), "dynamic loss scale 32768 (x2 after 2000 clean steps, x0.5 on overflow)");
}

TEST(DynamicLossScaler, OverflowSkipsAndHalves) {
    DynamicLossScaler scaler;
    EXPECT_TRUE(scaler.update(false));
    EXPECT_EQ(scaler.clean_steps_since_growth(), 1);
    EXPECT_FALSE(scaler.update(true));
    EXPECT_EQ(scaler.scale(), 16384.0);
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.clean_steps_since_growth(), 0);  // an overflow restarts the count
    EXPECT_FALSE(scaler.update(true));
    EXPECT_EQ(scaler.scale(), 8192.0);
    EXPECT_EQ(scaler.skipped_steps(), 2);
}

TEST(DynamicLossScaler, GrowsAfterGrowthIntervalCleanSteps) {
    DynamicLossScaler scaler({.initial_scale = 1024.0, .growth_interval = 3});
    EXPECT_TRUE(scaler.update(false));
    EXPECT_TRUE(scaler.update(false));
    EXPECT_EQ(scaler.scale(), 1024.0);
    EXPECT_EQ(scaler.clean_steps_since_growth(), 2);
    EXPECT_TRUE(scaler.update(false));  // the third clean step grows the scale
    EXPECT_EQ(scaler.scale(), 2048.0);
    EXPECT_EQ(scaler.clean_steps_since_growth(), 0);
    // An overflow in the middle restarts the count.
    scaler.update(false);
    scaler.update(false);
    scaler.update(true);
    EXPECT_EQ(scaler.scale(), 1024.0);
    scaler.update(false);
    scaler.update(false);
    EXPECT_EQ(scaler.scale(), 1024.0);
    scaler.update(false);
    EXPECT_EQ(scaler.scale(), 2048.0);
}

TEST(DynamicLossScaler, ClampsToMinAndMaxScale) {
    DynamicLossScaler low({.initial_scale = 2.0, .min_scale = 1.0});
    EXPECT_FALSE(low.update(true));
    EXPECT_EQ(low.scale(), 1.0);
    EXPECT_FALSE(low.update(true));  // still skipped, never below min_scale
    EXPECT_EQ(low.scale(), 1.0);
    EXPECT_EQ(low.skipped_steps(), 2);

    DynamicLossScaler high({.initial_scale = 65536.0, .growth_interval = 1, .max_scale = 65536.0});
    EXPECT_TRUE(high.update(false));
    EXPECT_EQ(high.scale(), 65536.0);
    EXPECT_EQ(high.clean_steps_since_growth(), 0);
}

TEST(DynamicLossScaler, RecoversFromFp16Overflow) {
    // A true gradient of 10 scaled by 2^15 overflows fp16 (max 65504); the scaler backs off until the
    // scaled gradient fits (4096 · 10 = 40960), then the step is applied with the true gradient.
    DynamicLossScaler scaler;
    SgdOptimizer optimizer;
    std::vector<Parameter> parameters{make_gradient_parameter("w", {0.0f})};
    int applied = 0;
    for (int step = 0; step < 4; ++step) {
        const float scaled = to_float(to_float16(static_cast<float>(10.0 * scaler.scale())));
        parameters[0].gradient.data<float>()[0] = scaled;
        const bool finite = LossScaler::gradients_are_finite(parameters);
        scaler.unscale(parameters);
        if (scaler.update(!finite)) {
            optimizer.step(parameters, 0.1);
            ++applied;
        }
    }
    EXPECT_EQ(scaler.skipped_steps(), 3);
    EXPECT_EQ(scaler.scale(), 4096.0);
    EXPECT_EQ(applied, 1);
    EXPECT_FLOAT_EQ(parameters[0].value.data<float>()[0], -1.0f);  // 0 − 0.1 · 10
}

TEST(DynamicLossScaler, StateRoundTripContinuesIdentically) {
    DynamicLossScaler original({.initial_scale = 256.0, .growth_interval = 4});
    for (bool overflow : {false, true, false, false}) original.update(overflow);
    const std::vector<NamedTensor> saved = original.state();
    ASSERT_EQ(saved.size(), 3u);
    EXPECT_EQ(saved[0].name, "loss_scale/scale");

    DynamicLossScaler restored({.initial_scale = 256.0, .growth_interval = 4});
    restored.load_state(saved);
    EXPECT_EQ(restored.scale(), 128.0);
    EXPECT_EQ(restored.clean_steps_since_growth(), 2);
    EXPECT_EQ(restored.skipped_steps(), 1);
    for (bool overflow : {false, false, true, false, false, false, false}) {
        EXPECT_EQ(original.update(overflow), restored.update(overflow));
        EXPECT_EQ(original.scale(), restored.scale());
        EXPECT_EQ(original.clean_steps_since_growth(), restored.clean_steps_since_growth());
    }
}

TEST(DynamicLossScaler, BadStateAndOptionsAreErrors) {
    DynamicLossScaler scaler;
    expect_error([&] { scaler.load_state({}); }, "expected an entry 'loss_scale/scale', got no entries");
    std::vector<NamedTensor> state = scaler.state();
    state.push_back(make_counter_entry("loss_scale/extra", 1));
    expect_error([&] { scaler.load_state(state); }, "unknown entry 'loss_scale/extra'");
    state = scaler.state();
    state[0].value = Tensor::zeros({2}, DType::F32);
    expect_error([&] { scaler.load_state(state); }, "expected a f32 tensor of shape [1], got f32 [2]");

    expect_error([] { DynamicLossScaler({.backoff_factor = 1.0}); }, "backoff_factor in (0, 1), got 1");
    expect_error([] { DynamicLossScaler({.growth_factor = 1.0}); }, "growth_factor > 1, got 1");
    expect_error([] { DynamicLossScaler({.growth_interval = 0}); }, "growth_interval >= 1, got 0");
    expect_error([] { DynamicLossScaler({.initial_scale = 1e9}); }, "initial_scale in [min_scale, max_scale]");
    expect_error([] { DynamicLossScaler({.min_scale = 0.0}); }, "min_scale > 0, got 0");
}

// ---- finite check and unscale --------------------------------------------------------------------

TEST(LossScaler, DetectsInfAndNaNAnywhere) {
    std::vector<float> values(10000, 1.0f);
    values[17] = std::numeric_limits<float>::max();         // finite
    values[18] = std::numeric_limits<float>::denorm_min();  // finite
    values[19] = -0.0f;
    std::vector<Parameter> clean{make_gradient_parameter("a", values), make_gradient_parameter("b", {1.0f, -2.0f})};
    EXPECT_TRUE(LossScaler::gradients_are_finite(clean));

    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()}) {
        for (std::size_t position : {std::size_t{0}, std::size_t{4095}, std::size_t{4096}, std::size_t{9999}}) {
            std::vector<float> with_bad = values;
            with_bad[position] = bad;
            std::vector<Parameter> parameters{make_gradient_parameter("b", {1.0f}),
                                              make_gradient_parameter("a", with_bad)};
            EXPECT_FALSE(LossScaler::gradients_are_finite(parameters)) << bad << " at " << position;
        }
    }
    std::vector<Parameter> none;
    EXPECT_TRUE(LossScaler::gradients_are_finite(none));
}

TEST(LossScaler, UnscaleDividesByTheScale) {
    DynamicLossScaler scaler({.initial_scale = 4.0});
    std::vector<Parameter> parameters{make_gradient_parameter("w", {2.0f, 4.0f, -8.0f, 0.0f})};
    scaler.unscale(parameters);
    const float* g = parameters[0].gradient.data<float>();
    EXPECT_EQ(g[0], 0.5f);
    EXPECT_EQ(g[1], 1.0f);
    EXPECT_EQ(g[2], -2.0f);
    EXPECT_EQ(g[3], 0.0f);

    StaticLossScaler fixed(128.0);
    std::vector<Parameter> scaled{make_gradient_parameter("w", {256.0f})};
    fixed.unscale(scaled);
    EXPECT_EQ(scaled[0].gradient.data<float>()[0], 2.0f);

    NoLossScaling none;
    std::vector<Parameter> untouched{make_gradient_parameter("w", {3.0f})};
    none.unscale(untouched);
    EXPECT_EQ(untouched[0].gradient.data<float>()[0], 3.0f);
}

TEST(LossScaler, BadGradientsAreErrors) {
    std::vector<Parameter> parameters{make_gradient_parameter("w", {1.0f})};
    parameters[0].gradient = Tensor();
    expect_error([&] { LossScaler::gradients_are_finite(parameters); }, "parameter 0 ('w') to have a gradient");
    parameters[0].gradient = Tensor::zeros({1}, DType::I32);
    expect_error([&] { DynamicLossScaler().unscale(parameters); }, "to be f32, got i32");
}

// ---- static, none and the shared interface -------------------------------------------------------

TEST(LossScaler, StaticAndNoneNeverSkip) {
    StaticLossScaler fixed(512.0);
    EXPECT_EQ(fixed.scale(), 512.0);
    EXPECT_TRUE(fixed.update(true));
    EXPECT_TRUE(fixed.update(false));
    EXPECT_EQ(fixed.skipped_steps(), 0);
    EXPECT_EQ(fixed.describe(), "static loss scale 512");
    EXPECT_TRUE(fixed.state().empty());
    EXPECT_NO_THROW(fixed.load_state({}));
    expect_error([&] { fixed.load_state(DynamicLossScaler().state()); }, "loading static loss scaler state");
    expect_error([] { StaticLossScaler(0.0); }, "scale > 0");

    NoLossScaling none;
    EXPECT_EQ(none.scale(), 1.0);
    EXPECT_TRUE(none.update(true));
}

TEST(LossScaler, FactoryAndKinds) {
    EXPECT_EQ(make_loss_scaler({})->name(), "none");
    EXPECT_EQ(make_loss_scaler({.kind = LossScaleKind::Static, .static_scale = 64.0})->scale(), 64.0);
    const auto dynamic = make_loss_scaler({.kind = LossScaleKind::Dynamic, .dynamic = {.initial_scale = 8.0}});
    EXPECT_EQ(dynamic->scale(), 8.0);
    EXPECT_FALSE(dynamic->update(true));
    EXPECT_EQ(dynamic->scale(), 4.0);
    EXPECT_EQ(parse_loss_scale_kind("dynamic"), LossScaleKind::Dynamic);
    EXPECT_EQ(to_string(LossScaleKind::Static), "static");
    expect_error([] { parse_loss_scale_kind("auto"); }, "none, static or dynamic, got 'auto'");
    expect_error([] { make_loss_scaler({.kind = LossScaleKind::Dynamic, .dynamic = {.backoff_factor = 2.0}}); },
                 "backoff_factor");
}
