// Learning-rate schedules at their key steps, against the seeds' TPU configurations.
#include "train/schedule.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>

using namespace tessera;
using namespace tessera::train;

namespace {

void expect_error(const auto& make, const std::string& fragment) {
    try {
        make();
        ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
}

// The detection seed's cosine_decay_learning_rate example.
CosineDecayOptions detection_cosine() {
    return {.learning_rate_base = 0.04, .total_steps = 25000, .warmup_learning_rate = 0.013333, .warmup_steps = 2000};
}

}  // namespace

// ---- constant ----------------------------------------------------------------------------------

TEST(ConstantSchedule, IsTheSameEverywhere) {
    const ConstantSchedule schedule(0.1);
    EXPECT_EQ(schedule.value(0), 0.1);
    EXPECT_EQ(schedule(123456789), 0.1);
    EXPECT_EQ(schedule.describe(), "constant 0.1");
    EXPECT_THROW(schedule.value(-1), Error);
    EXPECT_THROW(ConstantSchedule{-0.1}, Error);
    EXPECT_THROW(ConstantSchedule{std::numeric_limits<double>::infinity()}, Error);
}

// ---- cosine decay ------------------------------------------------------------------------------

TEST(CosineDecaySchedule, KeyStepsOfTheDetectionConfig) {
    const CosineDecaySchedule schedule(detection_cosine());
    EXPECT_DOUBLE_EQ(schedule.value(0), 0.013333);                               // warmup start
    EXPECT_DOUBLE_EQ(schedule.value(1000), 0.013333 + 0.5 * (0.04 - 0.013333));  // mid-warmup
    EXPECT_DOUBLE_EQ(schedule.value(1999), 0.013333 + 1999.0 / 2000.0 * (0.04 - 0.013333));
    EXPECT_DOUBLE_EQ(schedule.value(2000), 0.04);          // end of warmup
    EXPECT_DOUBLE_EQ(schedule.value(2000 + 11500), 0.02);  // mid-decay: cos(π/2) = 0
    EXPECT_DOUBLE_EQ(schedule.value(2000 + 5750), 0.5 * 0.04 * (1.0 + std::cos(std::numbers::pi / 4.0)));
    EXPECT_NEAR(schedule.value(25000), 0.0, 1e-15);  // end: cos(π) = −1
    EXPECT_GT(schedule.value(24999), 0.0);
    EXPECT_EQ(schedule.value(25001), 0.0);  // beyond
    EXPECT_EQ(schedule.value(1'000'000'000), 0.0);
}

TEST(CosineDecaySchedule, WarmupRisesAndDecayFalls) {
    const CosineDecaySchedule schedule(detection_cosine());
    for (std::int64_t step = 1; step <= 2000; ++step) ASSERT_GT(schedule.value(step), schedule.value(step - 1)) << step;
    for (std::int64_t step = 2001; step <= 25000; ++step)
        ASSERT_LT(schedule.value(step), schedule.value(step - 1)) << step;
    for (std::int64_t step = 0; step <= 26000; ++step) {
        ASSERT_GE(schedule.value(step), 0.0);
        ASSERT_LE(schedule.value(step), 0.04);
    }
}

TEST(CosineDecaySchedule, HoldKeepsTheBaseRateThenDecaysOverTheRest) {
    CosineDecayOptions options = detection_cosine();
    options.hold_base_rate_steps = 1000;
    const CosineDecaySchedule schedule(options);
    EXPECT_DOUBLE_EQ(schedule.value(1000), 0.013333 + 0.5 * (0.04 - 0.013333));
    EXPECT_EQ(schedule.value(2000), 0.04);
    EXPECT_EQ(schedule.value(2500), 0.04);
    EXPECT_EQ(schedule.value(3000), 0.04);
    EXPECT_LT(schedule.value(3001), 0.04);
    EXPECT_DOUBLE_EQ(schedule.value(3000 + 11000), 0.02);  // halfway through the 22000 decay steps
    EXPECT_EQ(schedule.value(25001), 0.0);
}

TEST(CosineDecaySchedule, WithoutWarmupStartsAtTheBase) {
    const CosineDecaySchedule schedule({.learning_rate_base = 1.0, .total_steps = 100});
    EXPECT_EQ(schedule.value(0), 1.0);
    EXPECT_DOUBLE_EQ(schedule.value(50), 0.5);
    EXPECT_NEAR(schedule.value(100), 0.0, 1e-15);
    EXPECT_EQ(schedule.value(101), 0.0);
    // Warmup filling the whole run: the base at its end, then 0.
    const CosineDecaySchedule all_warmup({.learning_rate_base = 1.0, .total_steps = 10, .warmup_steps = 10});
    EXPECT_DOUBLE_EQ(all_warmup.value(5), 0.5);
    EXPECT_EQ(all_warmup.value(10), 1.0);
    EXPECT_EQ(all_warmup.value(11), 0.0);
}

TEST(CosineDecaySchedule, DescribeIsOneLine) {
    const std::string text = CosineDecaySchedule(detection_cosine()).describe();
    EXPECT_EQ(text, "linear warmup 0.013333 -> 0.04 over 2000 steps, cosine decay 0.04 -> 0 at step 25000");
    EXPECT_EQ(text.find('\n'), std::string::npos);
}

TEST(CosineDecaySchedule, InvalidOptionsNameTheField) {
    expect_error([] { CosineDecaySchedule({.learning_rate_base = 0.1, .total_steps = 100, .warmup_steps = 200}); },
                 "expected warmup_steps <= total_steps, got warmup_steps 200 and total_steps 100");
    expect_error([] { CosineDecaySchedule({.learning_rate_base = 0.1, .total_steps = 0}); }, "total_steps > 0, got 0");
    expect_error([] { CosineDecaySchedule({.learning_rate_base = -0.1, .total_steps = 10}); }, "learning_rate_base");
    expect_error(
        [] {
            CosineDecaySchedule(
                {.learning_rate_base = 0.1, .total_steps = 100, .warmup_learning_rate = 0.2, .warmup_steps = 10});
        },
        "warmup_learning_rate <= learning_rate_base");
    expect_error(
        [] {
            CosineDecaySchedule(
                {.learning_rate_base = 0.1, .total_steps = 100, .warmup_steps = 60, .hold_base_rate_steps = 50});
        },
        "warmup_steps + hold_base_rate_steps <= total_steps");
}

// ---- manual steps ------------------------------------------------------------------------------

TEST(ManualStepSchedule, DetectionConfigWithWarmup) {
    // manual_step_learning_rate { warmup: true initial_learning_rate: .01333
    //   schedule { step: 2000 learning_rate: .04 } schedule { step: 15000 learning_rate: .004 } }
    const ManualStepSchedule schedule(
        {.learning_rate = 0.04, .steps = {{15000, 0.004}}, .warmup_learning_rate = 0.01333, .warmup_steps = 2000});
    EXPECT_DOUBLE_EQ(schedule.value(0), 0.01333);
    EXPECT_DOUBLE_EQ(schedule.value(1000), 0.5 * (0.01333 + 0.04));
    EXPECT_EQ(schedule.value(2000), 0.04);
    EXPECT_EQ(schedule.value(14999), 0.04);
    EXPECT_EQ(schedule.value(15000), 0.004);
    EXPECT_EQ(schedule.value(10'000'000), 0.004);
    for (std::int64_t step = 1; step < 2000; ++step) ASSERT_GT(schedule.value(step), schedule.value(step - 1));
    EXPECT_EQ(schedule.describe(), "linear warmup 0.01333 -> 0.04 over 2000 steps, then 0.04, 0.004 from step 15000");
}

TEST(ManualStepSchedule, RetinaNetLevelsAndSteps) {
    // learning_rate 0.08, lr_warmup_init 0.008 over 500 steps, levels [0.008, 0.0008] at steps [15000, 20000].
    const ManualStepSchedule schedule({.learning_rate = 0.08,
                                       .steps = {{15000, 0.008}, {20000, 0.0008}},
                                       .warmup_learning_rate = 0.008,
                                       .warmup_steps = 500});
    EXPECT_DOUBLE_EQ(schedule.value(250), 0.008 + 0.5 * (0.08 - 0.008));
    EXPECT_EQ(schedule.value(500), 0.08);
    EXPECT_EQ(schedule.value(14999), 0.08);
    EXPECT_EQ(schedule.value(15000), 0.008);
    EXPECT_EQ(schedule.value(19999), 0.008);
    EXPECT_EQ(schedule.value(20000), 0.0008);
}

TEST(ManualStepSchedule, WithoutWarmupStartsAtTheRate) {
    const ManualStepSchedule schedule({.learning_rate = 1.0, .steps = {{1, 0.5}, {3, 0.25}}});
    EXPECT_EQ(schedule.value(0), 1.0);
    EXPECT_EQ(schedule.value(1), 0.5);
    EXPECT_EQ(schedule.value(2), 0.5);
    EXPECT_EQ(schedule.value(3), 0.25);
    EXPECT_EQ(ManualStepSchedule({.learning_rate = 0.3}).value(99), 0.3);
}

TEST(ManualStepSchedule, InvalidBoundariesNameTheField) {
    expect_error(
        [] {
            ManualStepSchedule({.learning_rate = 0.1, .steps = {{100, 0.01}, {50, 0.001}}});
        },
        "expected steps sorted by strictly increasing step, got steps[0].step 100 then steps[1].step 50");
    expect_error(
        [] {
            ManualStepSchedule({.learning_rate = 0.1, .steps = {{100, 0.01}, {100, 0.001}}});
        },
        "strictly increasing");
    expect_error([] { ManualStepSchedule({.learning_rate = 0.1, .steps = {{0, 0.01}}}); }, "steps[0].step >= 1, got 0");
    expect_error(
        [] {
            ManualStepSchedule({.learning_rate = 0.1, .steps = {{10, 0.01}}, .warmup_steps = 20});
        },
        "steps[0].step >= warmup_steps 20");
    expect_error(
        [] {
            ManualStepSchedule({.learning_rate = 0.1, .steps = {{10, -0.01}}});
        },
        "steps[0].learning_rate >= 0, got -0.01");
}

// ---- the ResNet-50 seed's schedule --------------------------------------------------------------

namespace {

// tpu/models/official/resnet/resnet_main.py: learning_rate_schedule, transliterated.
double resnet_reference(double base_learning_rate, double batch, double steps_per_epoch, std::int64_t step) {
    const double schedule[4][2] = {{1.0, 5}, {0.1, 30}, {0.01, 60}, {0.001, 80}};  // (multiplier, epoch to start)
    const double scaled = base_learning_rate * batch / 256.0;
    const double epoch = static_cast<double>(step) / steps_per_epoch;
    double rate = scaled * schedule[0][0] * epoch / schedule[0][1];
    for (const auto& [multiplier, start_epoch] : schedule) rate = epoch < start_epoch ? rate : scaled * multiplier;
    return rate;
}

}  // namespace

TEST(ResNetSchedule, MatchesTheSeedsFormula) {
    const double steps_per_epoch = 1281167.0 / 1024.0;  // ImageNet at global batch 1024
    const ScheduleConfig config = resnet_imagenet_schedule(0.1, 1024, steps_per_epoch);
    const auto schedule = make_schedule(config);
    EXPECT_DOUBLE_EQ(schedule->value(config.warmup_steps), 0.4);  // 0.1 scaled by 1024 / 256
    const std::int64_t probes[] = {0,     3000,  6255,  6256,   6257,   20000, 37534,
                                   37535, 75068, 75069, 100091, 100092, 112000};
    for (std::int64_t step : probes) {
        const double expected = resnet_reference(0.1, 1024, steps_per_epoch, step);
        // Warmup divides by whole steps (6256) instead of 6255.7: within 1e-4 of the seed's rate.
        EXPECT_NEAR(schedule->value(step), expected, step < config.warmup_steps ? 1e-4 : 1e-12) << step;
    }
    EXPECT_DOUBLE_EQ(schedule->value(37534), 0.4);
    EXPECT_DOUBLE_EQ(schedule->value(37535), 0.04);     // epoch 30
    EXPECT_DOUBLE_EQ(schedule->value(100092), 0.0004);  // epoch 80
}

// ---- scaling and configuration -----------------------------------------------------------------

TEST(LearningRateScaling, IsLinearInTheGlobalBatch) {
    EXPECT_DOUBLE_EQ(scale_learning_rate_by_batch(0.1, 1024), 0.4);
    EXPECT_DOUBLE_EQ(scale_learning_rate_by_batch(0.1, 256), 0.1);
    EXPECT_DOUBLE_EQ(scale_learning_rate_by_batch(0.1, 64), 0.025);
    EXPECT_DOUBLE_EQ(scale_learning_rate_by_batch(0.04, 2048, 512), 0.16);
    expect_error([] { scale_learning_rate_by_batch(0.1, 0); }, "global_batch_size > 0, got 0");
    expect_error([] { scale_learning_rate_by_batch(0.1, 8, -1); }, "reference_batch_size > 0, got -1");
}

TEST(ScheduleConfig, ScalingAppliesToEveryRate) {
    ScheduleConfig config;
    config.kind = ScheduleKind::ManualStep;
    config.learning_rate = 0.1;
    config.warmup_learning_rate = 0.01;
    config.warmup_steps = 10;
    config.steps = {{100, 0.01}};
    config.scale_by_batch_size = true;
    config.global_batch_size = 1024;
    const auto schedule = make_schedule(config);
    EXPECT_DOUBLE_EQ(schedule->value(0), 0.04);
    EXPECT_DOUBLE_EQ(schedule->value(10), 0.4);
    EXPECT_DOUBLE_EQ(schedule->value(100), 0.04);

    config.scale_by_batch_size = false;
    EXPECT_DOUBLE_EQ(make_schedule(config)->value(10), 0.1);
}

TEST(ScheduleConfig, FactoryMakesEachKind) {
    ScheduleConfig config;
    config.learning_rate = 0.2;
    EXPECT_EQ(make_schedule(config)->describe(), "constant 0.2");
    config.kind = ScheduleKind::CosineDecay;
    config.total_steps = 100;
    EXPECT_DOUBLE_EQ(make_schedule(config)->value(50), 0.1);
    config.kind = ScheduleKind::ManualStep;
    config.steps = {{10, 0.02}};
    EXPECT_EQ(make_schedule(config)->value(10), 0.02);
    EXPECT_EQ(parse_schedule_kind("cosine"), ScheduleKind::CosineDecay);
    EXPECT_EQ(to_string(ScheduleKind::ManualStep), "manual");
    expect_error([] { parse_schedule_kind("exponential"); }, "constant, cosine or manual, got 'exponential'");
}

TEST(ScheduleConfig, ValidationNamesTheField) {
    ScheduleConfig cosine;
    cosine.kind = ScheduleKind::CosineDecay;
    cosine.total_steps = 1000;
    cosine.warmup_steps = 2000;
    expect_error([&] { validate(cosine); },
                 "schedule config: expected warmup_steps <= total_steps, got warmup_steps 2000 and total_steps 1000");
    expect_error([&] { make_schedule(cosine); }, "warmup_steps <= total_steps");

    ScheduleConfig manual;
    manual.kind = ScheduleKind::ManualStep;
    manual.steps = {{30, 0.01}, {20, 0.001}};
    expect_error([&] { validate(manual); }, "schedule config: expected steps sorted by strictly increasing step");

    ScheduleConfig batch;
    batch.scale_by_batch_size = true;
    batch.global_batch_size = 0;
    expect_error([&] { validate(batch); }, "global_batch_size > 0 with scale_by_batch_size, got 0");

    ScheduleConfig negative;
    negative.learning_rate = -1.0;
    expect_error([&] { validate(negative); }, "learning_rate >= 0, got -1");
}
