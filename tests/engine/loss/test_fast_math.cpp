// The vectorisable exp and log of engine/loss against the C library, over the domains the losses use.
#include "loss/fast_math.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace tessera::loss::detail;

namespace {

// Relative error measured in units of float's epsilon.
double ulps(double actual, double expected) {
    return std::fabs(actual - expected) / (std::fabs(expected) * std::numeric_limits<float>::epsilon());
}

}  // namespace

TEST(FastMath, ExpWithinTwoUlps) {
    double worst = 0;
    for (double x = -87.0; x <= 88.0; x += 0.00123) {
        const float xf = static_cast<float>(x);
        worst = std::max(worst, ulps(exp_f32(xf), std::exp(static_cast<double>(xf))));
    }
    EXPECT_LE(worst, 2.0);
    EXPECT_EQ(exp_f32(0.0f), 1.0f);
    EXPECT_EQ(exp_f32(-100.0f), 0.0f);
    EXPECT_EQ(exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
    EXPECT_EQ(exp_f32(100.0f), std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FastMath, LogWithinTwoUlps) {
    double worst = 0;
    for (double x = 1e-30; x < 1e30; x *= 1.00731) {
        const float xf = static_cast<float>(x);
        const double expected = std::log(static_cast<double>(xf));
        if (std::fabs(expected) < 1e-3) continue;  // near 1 the absolute error is what matters; below
        worst = std::max(worst, ulps(log_f32(xf), expected));
    }
    EXPECT_LE(worst, 2.0);
    for (double x = 0.999; x < 1.001; x += 1e-6) {
        const float xf = static_cast<float>(x);
        EXPECT_NEAR(log_f32(xf), std::log(static_cast<double>(xf)), 1.5e-10);
    }
    EXPECT_EQ(log_f32(1.0f), 0.0f);
}

TEST(FastMath, Log1pAccurateForTinyArguments) {
    double worst = 0;
    for (double u = 1e-30; u <= 1.0; u *= 1.0137) {
        const float uf = static_cast<float>(u);
        worst = std::max(worst, ulps(log1p_f32(uf), std::log1p(static_cast<double>(uf))));
    }
    EXPECT_LE(worst, 3.0);
    EXPECT_EQ(log1p_f32(0.0f), 0.0f);
}
