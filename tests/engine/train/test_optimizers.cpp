// Optimizers against PyTorch's documented update rules, computed here in double, step by step, from
// the torch.optim algorithm boxes (not from the implementation's formulas), on a 3-element
// parameter with fixed gradients and a learning rate that changes every step.
#include "train/optimizer.hpp"
#include "train/schedule.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace tessera;
using namespace tessera::train;

namespace {

using Values = std::vector<double>;

constexpr int num_reference_steps = 6;

// Inputs are rounded to f32 once, here, and both sides see the same f32 numbers.
double f32(double value) {
    return static_cast<double>(static_cast<float>(value));
}

Values initial_weights() {
    return {f32(1.0), f32(-2.0), f32(0.5)};
}

// A fixed gradient per step: changes sign, magnitude and includes a zero.
Values gradient_at(int step) {
    return {f32(0.5 - 0.1 * step), f32(-0.25 + 0.2 * step), f32(step % 2 ? -0.125 : 0.0)};
}

double learning_rate_at(int step) {
    return 0.1 / (1.0 + 0.5 * step);
}

Tensor tensor_of(const Values& values) {
    Tensor tensor = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::F32);
    for (std::size_t i = 0; i < values.size(); ++i) tensor.data<float>()[i] = static_cast<float>(values[i]);
    return tensor;
}

Parameter make_parameter(std::string name, const Values& values, bool apply_weight_decay = true) {
    Parameter parameter;
    parameter.name = std::move(name);
    parameter.value = tensor_of(values);
    parameter.gradient = Tensor::zeros({static_cast<std::int64_t>(values.size())}, DType::F32);
    parameter.apply_weight_decay = apply_weight_decay;
    return parameter;
}

void set_gradient(Parameter& parameter, const Values& gradient) {
    for (std::size_t i = 0; i < gradient.size(); ++i)
        parameter.gradient.data<float>()[i] = static_cast<float>(gradient[i]);
}

void expect_close(const Tensor& actual, const Values& expected, const std::string& what) {
    ASSERT_EQ(actual.num_elements(), static_cast<std::int64_t>(expected.size())) << what;
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const double tolerance = 1e-7 + 2e-6 * std::abs(expected[i]);
        EXPECT_NEAR(actual.data<float>()[i], expected[i], tolerance) << what << ", element " << i;
    }
}

// Runs `optimizer` for num_reference_steps on the given parameters, all receiving gradient_at(step).
void run_fixed_gradients(Optimizer& optimizer, std::vector<Parameter>& parameters) {
    for (int step = 0; step < num_reference_steps; ++step) {
        for (Parameter& parameter : parameters) set_gradient(parameter, gradient_at(step));
        optimizer.step(parameters, learning_rate_at(step));
    }
}

// ---- references in double (torch.optim documentation) ----------------------------------------

// torch.optim.SGD: g ← ∇ + λθ; b ← g (t = 1) or μb + g; g ← g + μb (Nesterov) or b; θ ← θ − γg.
Values reference_sgd(double momentum, bool nesterov, double weight_decay) {
    Values theta = initial_weights();
    Values buffer(theta.size(), 0.0);
    for (int step = 0; step < num_reference_steps; ++step) {
        const Values gradient = gradient_at(step);
        for (std::size_t i = 0; i < theta.size(); ++i) {
            double g = gradient[i] + weight_decay * theta[i];
            if (momentum != 0.0) {
                buffer[i] = step == 0 ? g : momentum * buffer[i] + g;
                g = nesterov ? g + momentum * buffer[i] : buffer[i];
            }
            theta[i] -= learning_rate_at(step) * g;
        }
    }
    return theta;
}

// torch.optim.Adam (amsgrad off) and AdamW:
//   AdamW: θ ← θ − γλθ.   Adam: g ← ∇ + λθ.
//   m ← β1 m + (1 − β1) g;  v ← β2 v + (1 − β2) g²;  m̂ = m / (1 − β1^t);  v̂ = v / (1 − β2^t)
//   θ ← θ − γ m̂ / (sqrt(v̂) + ε)
Values reference_adam(double beta1, double beta2, double epsilon, double weight_decay, bool decoupled) {
    Values theta = initial_weights();
    Values m(theta.size(), 0.0);
    Values v(theta.size(), 0.0);
    for (int step = 0; step < num_reference_steps; ++step) {
        const int t = step + 1;
        const double gamma = learning_rate_at(step);
        const Values gradient = gradient_at(step);
        for (std::size_t i = 0; i < theta.size(); ++i) {
            double g = gradient[i];
            if (decoupled) {
                theta[i] -= gamma * weight_decay * theta[i];
            } else {
                g += weight_decay * theta[i];
            }
            m[i] = beta1 * m[i] + (1.0 - beta1) * g;
            v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
            const double m_hat = m[i] / (1.0 - std::pow(beta1, t));
            const double v_hat = v[i] / (1.0 - std::pow(beta2, t));
            theta[i] -= gamma * m_hat / (std::sqrt(v_hat) + epsilon);
        }
    }
    return theta;
}

}  // namespace

// ---- SGD ---------------------------------------------------------------------------------------

TEST(SgdOptimizer, OneStepByHand) {
    SgdOptimizer optimizer;
    std::vector<Parameter> parameters{make_parameter("w", {1.0, -2.0, 0.5})};
    set_gradient(parameters[0], {0.5, -0.25, 0.0});
    optimizer.step(parameters, 0.1);
    // w − 0.1·g
    expect_close(parameters[0].value, {0.95, -1.975, 0.5}, "sgd");
    EXPECT_EQ(optimizer.num_steps(), 1);
    EXPECT_TRUE(optimizer.slot_names().empty());
}

TEST(SgdOptimizer, PlainMatchesReference) {
    SgdOptimizer optimizer;
    std::vector<Parameter> parameters{make_parameter("w", initial_weights())};
    run_fixed_gradients(optimizer, parameters);
    expect_close(parameters[0].value, reference_sgd(0.0, false, 0.0), "sgd");
}

TEST(SgdOptimizer, MomentumMatchesReference) {
    SgdOptimizer optimizer({.momentum = 0.9});
    std::vector<Parameter> parameters{make_parameter("w", initial_weights())};
    run_fixed_gradients(optimizer, parameters);
    expect_close(parameters[0].value, reference_sgd(0.9, false, 0.0), "sgd momentum");
    EXPECT_EQ(optimizer.slot_names(), (std::vector<std::string>{"momentum"}));
}

TEST(SgdOptimizer, MomentumTwoStepsByHand) {
    // v1 = g1 = 1, w1 = 1 − 0.1 = 0.9;  v2 = 0.5·1 + 2 = 2.5, w2 = 0.9 − 0.1·2.5 = 0.65
    SgdOptimizer optimizer({.momentum = 0.5});
    std::vector<Parameter> parameters{make_parameter("w", {1.0})};
    set_gradient(parameters[0], {1.0});
    optimizer.step(parameters, 0.1);
    set_gradient(parameters[0], {2.0});
    optimizer.step(parameters, 0.1);
    expect_close(parameters[0].value, {0.65}, "sgd momentum");
}

TEST(SgdOptimizer, NesterovMatchesReference) {
    SgdOptimizer optimizer({.momentum = 0.9, .nesterov = true});
    std::vector<Parameter> parameters{make_parameter("w", initial_weights())};
    run_fixed_gradients(optimizer, parameters);
    expect_close(parameters[0].value, reference_sgd(0.9, true, 0.0), "sgd nesterov");
}

TEST(SgdOptimizer, WeightDecayAppliesOnlyWhereEnabled) {
    SgdOptimizer optimizer({.momentum = 0.9, .nesterov = false, .weight_decay = 0.01});
    std::vector<Parameter> parameters{make_parameter("conv.weight", initial_weights(), true),
                                      make_parameter("bn.gamma", initial_weights(), false)};
    run_fixed_gradients(optimizer, parameters);
    expect_close(parameters[0].value, reference_sgd(0.9, false, 0.01), "decayed");
    expect_close(parameters[1].value, reference_sgd(0.9, false, 0.0), "not decayed");
}

TEST(SgdOptimizer, WeightDecayWithNesterovAndWithoutMomentum) {
    SgdOptimizer nesterov({.momentum = 0.8, .nesterov = true, .weight_decay = 0.05});
    std::vector<Parameter> a{make_parameter("w", initial_weights())};
    run_fixed_gradients(nesterov, a);
    expect_close(a[0].value, reference_sgd(0.8, true, 0.05), "nesterov + weight decay");

    SgdOptimizer plain({.momentum = 0.0, .nesterov = false, .weight_decay = 0.05});
    std::vector<Parameter> b{make_parameter("w", initial_weights())};
    run_fixed_gradients(plain, b);
    expect_close(b[0].value, reference_sgd(0.0, false, 0.05), "plain + weight decay");
}

// ---- Adam and AdamW ----------------------------------------------------------------------------

TEST(AdamOptimizer, MatchesReference) {
    AdamOptimizer optimizer;
    std::vector<Parameter> parameters{make_parameter("w", initial_weights())};
    run_fixed_gradients(optimizer, parameters);
    expect_close(parameters[0].value, reference_adam(0.9, 0.999, 1e-8, 0.0, false), "adam");
    EXPECT_EQ(optimizer.name(), "adam");
    EXPECT_EQ(optimizer.slot_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
}

TEST(AdamOptimizer, OtherBetasAndLargeEpsilonMatchReference) {
    AdamOptimizer optimizer({.beta1 = 0.5, .beta2 = 0.9, .epsilon = 0.1});
    std::vector<Parameter> parameters{make_parameter("w", initial_weights())};
    run_fixed_gradients(optimizer, parameters);
    expect_close(parameters[0].value, reference_adam(0.5, 0.9, 0.1, 0.0, false), "adam");
}

TEST(AdamOptimizer, FirstStepMovesEachWeightByTheLearningRate) {
    // t = 1: m̂ = g, v̂ = g², so the step is γ·g / (|g| + ε) ≈ γ·sign(g), and 0 where g = 0.
    AdamOptimizer optimizer;
    std::vector<Parameter> parameters{make_parameter("w", {1.0, -2.0, 0.5})};
    set_gradient(parameters[0], {3.0, -0.001, 0.0});
    optimizer.step(parameters, 0.01);
    expect_close(parameters[0].value, {0.99, -1.99, 0.5}, "adam first step");
}

TEST(AdamOptimizer, CoupledWeightDecayAppliesOnlyWhereEnabled) {
    AdamOptimizer optimizer({.beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-8, .weight_decay = 0.1});
    std::vector<Parameter> parameters{make_parameter("conv.weight", initial_weights(), true),
                                      make_parameter("conv.bias", initial_weights(), false)};
    run_fixed_gradients(optimizer, parameters);
    expect_close(parameters[0].value, reference_adam(0.9, 0.999, 1e-8, 0.1, false), "decayed");
    expect_close(parameters[1].value, reference_adam(0.9, 0.999, 1e-8, 0.0, false), "not decayed");
}

TEST(AdamWOptimizer, DecoupledWeightDecayMatchesReference) {
    AdamWOptimizer optimizer({.beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-8, .weight_decay = 0.1});
    std::vector<Parameter> parameters{make_parameter("conv.weight", initial_weights(), true),
                                      make_parameter("conv.bias", initial_weights(), false)};
    run_fixed_gradients(optimizer, parameters);
    expect_close(parameters[0].value, reference_adam(0.9, 0.999, 1e-8, 0.1, true), "decayed");
    expect_close(parameters[1].value, reference_adam(0.9, 0.999, 1e-8, 0.0, true), "not decayed");
    EXPECT_EQ(optimizer.name(), "adamw");
    // Decoupled and coupled decay differ: the test above would not pass by accident.
    const Values coupled = reference_adam(0.9, 0.999, 1e-8, 0.1, false);
    EXPECT_GT(std::abs(parameters[0].value.data<float>()[0] - coupled[0]), 1e-4);
}

TEST(AdamWOptimizer, ZeroGradientOnlyDecays) {
    // g = 0: m = v = 0, so only θ ← θ(1 − γλ) acts: 2·(1 − 0.1·0.5) = 1.9.
    AdamWOptimizer optimizer({.weight_decay = 0.5});
    std::vector<Parameter> parameters{make_parameter("w", {2.0})};
    optimizer.step(parameters, 0.1);
    expect_close(parameters[0].value, {1.9}, "adamw decay only");
}

// ---- convergence -------------------------------------------------------------------------------

namespace {

// f(w) = ½ Σ a_i (w_i − c_i)²: minimised at c (or at a·c / (a + λ) with L2 weight decay λ).
const Values curvature = {0.5, 1.0, 2.0, 1.5};
const Values target = {3.0, -1.0, 0.25, 0.0};

void fill_quadratic_gradient(Parameter& parameter) {
    for (std::size_t i = 0; i < curvature.size(); ++i) {
        const double w = parameter.value.data<float>()[i];
        parameter.gradient.data<float>()[i] = static_cast<float>(curvature[i] * (w - target[i]));
    }
}

Values minimise(Optimizer& optimizer, const LearningRateSchedule& schedule, std::int64_t num_steps,
                bool apply_weight_decay = false) {
    std::vector<Parameter> parameters{make_parameter("w", {0.0, 0.0, 0.0, 0.0}, apply_weight_decay)};
    for (std::int64_t step = 0; step < num_steps; ++step) {
        fill_quadratic_gradient(parameters[0]);
        optimizer.step(parameters, schedule.value(step));
    }
    Values result;
    for (std::size_t i = 0; i < curvature.size(); ++i) result.push_back(parameters[0].value.data<float>()[i]);
    return result;
}

}  // namespace

TEST(OptimizerConvergence, EachOptimizerMinimisesAConvexQuadratic) {
    const ConstantSchedule constant(0.1);
    const CosineDecaySchedule cosine({.learning_rate_base = 0.1, .total_steps = 2000});
    struct Case {
        OptimizerConfig config;
        const LearningRateSchedule* schedule;
        double tolerance;
    };
    const std::vector<Case> cases = {
        {{.kind = OptimizerKind::Sgd, .momentum = 0.0}, &constant, 1e-5},
        {{.kind = OptimizerKind::Sgd, .momentum = 0.9}, &constant, 1e-5},
        {{.kind = OptimizerKind::Sgd, .momentum = 0.9, .nesterov = true}, &constant, 1e-5},
        {{.kind = OptimizerKind::Adam}, &cosine, 1e-3},
        {{.kind = OptimizerKind::AdamW}, &cosine, 1e-3},
    };
    for (const Case& c : cases) {
        const auto optimizer = make_optimizer(c.config);
        const Values w = minimise(*optimizer, *c.schedule, 2000);
        for (std::size_t i = 0; i < w.size(); ++i) {
            EXPECT_NEAR(w[i], target[i], c.tolerance) << optimizer->describe() << ", element " << i;
        }
    }
}

TEST(OptimizerConvergence, SgdWithWeightDecayFindsTheRegularisedMinimum) {
    const double lambda = 0.5;
    SgdOptimizer optimizer({.momentum = 0.9, .weight_decay = lambda});
    const Values w = minimise(optimizer, ConstantSchedule(0.1), 2000, true);
    for (std::size_t i = 0; i < w.size(); ++i) {
        EXPECT_NEAR(w[i], curvature[i] * target[i] / (curvature[i] + lambda), 1e-5) << "element " << i;
    }
}

// ---- state -------------------------------------------------------------------------------------

namespace {

std::vector<Parameter> resume_parameters() {
    std::vector<Parameter> parameters;
    parameters.push_back(make_parameter("conv.weight", {0.3, -0.7, 1.1, 0.05, -0.2, 0.9}));
    parameters.back().value = parameters.back().value.reshape({2, 3});
    parameters.back().gradient = parameters.back().gradient.reshape({2, 3});
    parameters.push_back(make_parameter("bn.beta", {0.25, -0.5}, false));
    return parameters;
}

std::vector<Parameter> copy_of(const std::vector<Parameter>& parameters) {
    std::vector<Parameter> copy = parameters;
    for (Parameter& parameter : copy) {
        parameter.value = parameter.value.clone();
        parameter.gradient = parameter.gradient.clone();
    }
    return copy;
}

// Gradients depend on the weights and the step, so any state difference shows in the result.
void run_steps(Optimizer& optimizer, std::vector<Parameter>& parameters, std::int64_t first, std::int64_t count) {
    for (std::int64_t step = first; step < first + count; ++step) {
        for (Parameter& parameter : parameters) {
            float* w = parameter.value.data<float>();
            float* g = parameter.gradient.data<float>();
            for (std::int64_t i = 0; i < parameter.value.num_elements(); ++i) {
                g[i] = std::sin(static_cast<float>(step) + w[i]) + 0.1f * static_cast<float>(i);
            }
        }
        optimizer.step(parameters, 0.05 / (1.0 + static_cast<double>(step)));
    }
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() &&
           std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

}  // namespace

TEST(OptimizerState, SaveAndLoadResumesBitIdentically) {
    const std::vector<OptimizerConfig> configs = {
        {.kind = OptimizerKind::Sgd, .momentum = 0.0, .weight_decay = 1e-2},
        {.kind = OptimizerKind::Sgd, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-2},
        {.kind = OptimizerKind::Adam, .weight_decay = 1e-2},
        {.kind = OptimizerKind::AdamW, .weight_decay = 1e-2},
    };
    for (const OptimizerConfig& config : configs) {
        SCOPED_TRACE(std::string(to_string(config.kind)));
        const auto original = make_optimizer(config);
        std::vector<Parameter> parameters = resume_parameters();
        run_steps(*original, parameters, 0, 5);
        const std::vector<NamedTensor> saved = original->state();
        std::vector<Parameter> resumed_parameters = copy_of(parameters);
        run_steps(*original, parameters, 5, 5);

        const auto resumed = make_optimizer(config);
        resumed->load_state(saved);
        EXPECT_EQ(resumed->num_steps(), 5);
        run_steps(*resumed, resumed_parameters, 5, 5);

        for (std::size_t i = 0; i < parameters.size(); ++i) {
            EXPECT_TRUE(same_bits(parameters[i].value, resumed_parameters[i].value)) << parameters[i].name;
        }
        const std::vector<NamedTensor> a = original->state();
        const std::vector<NamedTensor> b = resumed->state();
        ASSERT_EQ(a.size(), b.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
            EXPECT_EQ(a[i].name, b[i].name);
            EXPECT_TRUE(same_bits(a[i].value, b[i].value)) << a[i].name;
        }
    }
}

TEST(OptimizerState, NamesSlotsAfterParametersAndCopiesTensors) {
    AdamOptimizer optimizer;
    std::vector<Parameter> parameters = resume_parameters();
    run_steps(optimizer, parameters, 0, 2);
    const std::vector<NamedTensor> state = optimizer.state();
    ASSERT_EQ(state.size(), 5u);
    EXPECT_EQ(state[0].name, "conv.weight/exp_avg");
    EXPECT_EQ(state[1].name, "conv.weight/exp_avg_sq");
    EXPECT_EQ(state[2].name, "bn.beta/exp_avg");
    EXPECT_EQ(state[3].name, "bn.beta/exp_avg_sq");
    EXPECT_EQ(state[4].name, "num_steps");
    EXPECT_EQ(state[0].value.shape(), (Shape{2, 3}));
    EXPECT_EQ(read_counter_entry(state[4]), 2);
    const Tensor before = state[0].value.clone();
    run_steps(optimizer, parameters, 2, 1);
    EXPECT_TRUE(same_bits(state[0].value, before));  // a saved state is a snapshot
}

TEST(OptimizerState, LoadingTheWrongKindNamesTheSlot) {
    SgdOptimizer sgd({.momentum = 0.9});
    std::vector<Parameter> parameters = resume_parameters();
    run_steps(sgd, parameters, 0, 1);
    AdamOptimizer adam;
    try {
        adam.load_state(sgd.state());
        FAIL() << "expected an error";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find("exp_avg"), std::string::npos) << message;
        EXPECT_NE(message.find("conv.weight/momentum"), std::string::npos) << message;
    }
}

TEST(OptimizerState, LoadingAMismatchedShapeSaysExpectedAndGot) {
    SgdOptimizer optimizer({.momentum = 0.9});
    std::vector<Parameter> parameters{make_parameter("w", {1.0, 2.0, 3.0, 4.0})};
    run_steps(optimizer, parameters, 0, 1);

    SgdOptimizer other({.momentum = 0.9});
    std::vector<Parameter> smaller{make_parameter("w", {1.0, 2.0, 3.0})};
    run_steps(other, smaller, 0, 1);
    try {
        optimizer.load_state(other.state());
        FAIL() << "expected an error";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find("'w/momentum'"), std::string::npos) << message;
        EXPECT_NE(message.find("expected shape [4], got [3]"), std::string::npos) << message;
    }
    // A fresh optimizer accepts the state, then its first step checks it against the parameters.
    SgdOptimizer fresh({.momentum = 0.9});
    fresh.load_state(other.state());
    try {
        fresh.step(parameters, 0.1);
        FAIL() << "expected an error";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find("shape [3]"), std::string::npos) << message;
        EXPECT_NE(message.find("got [4]"), std::string::npos) << message;
    }
}

TEST(OptimizerState, MissingStepCounterIsAnError) {
    SgdOptimizer optimizer({.momentum = 0.9});
    std::vector<NamedTensor> state{{"w/momentum", Tensor::zeros({3}, DType::F32)}};
    try {
        optimizer.load_state(state);
        FAIL() << "expected an error";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("num_steps"), std::string::npos) << error.what();
    }
}

TEST(OptimizerState, ResetForgetsSlotsAndSteps) {
    SgdOptimizer optimizer({.momentum = 0.9});
    std::vector<Parameter> parameters = resume_parameters();
    run_steps(optimizer, parameters, 0, 2);
    EXPECT_EQ(optimizer.num_slot_parameters(), 2u);
    optimizer.reset();
    EXPECT_EQ(optimizer.num_steps(), 0);
    EXPECT_EQ(optimizer.num_slot_parameters(), 0u);
    std::vector<Parameter> other{make_parameter("x", {1.0})};
    EXPECT_NO_THROW(optimizer.step(other, 0.1));
}

// ---- step checks -------------------------------------------------------------------------------

TEST(OptimizerStep, ChangedParameterListsAreErrors) {
    SgdOptimizer optimizer({.momentum = 0.9});
    std::vector<Parameter> parameters = resume_parameters();
    run_steps(optimizer, parameters, 0, 1);

    std::vector<Parameter> renamed = copy_of(parameters);
    renamed[1].name = "bn.gamma";
    EXPECT_THROW(
        {
            try {
                optimizer.step(renamed, 0.1);
            } catch (const Error& error) {
                EXPECT_NE(std::string(error.what()).find("expected parameter 1 to be 'bn.beta'"), std::string::npos)
                    << error.what();
                EXPECT_NE(std::string(error.what()).find("got 'bn.gamma'"), std::string::npos) << error.what();
                throw;
            }
        },
        Error);

    std::vector<Parameter> fewer = copy_of(parameters);
    fewer.pop_back();
    EXPECT_THROW(optimizer.step(fewer, 0.1), Error);
    EXPECT_EQ(optimizer.num_steps(), 1);  // failed steps change nothing
}

TEST(OptimizerStep, BadLearningRatesAndTensorsAreErrors) {
    SgdOptimizer optimizer;
    std::vector<Parameter> parameters{make_parameter("w", {1.0, 2.0})};
    EXPECT_THROW(optimizer.step(parameters, -0.1), Error);
    EXPECT_THROW(optimizer.step(parameters, std::nan("")), Error);

    std::vector<Parameter> no_gradient{make_parameter("w", {1.0, 2.0})};
    no_gradient[0].gradient = Tensor();
    EXPECT_THROW(optimizer.step(no_gradient, 0.1), Error);

    std::vector<Parameter> wrong_shape{make_parameter("w", {1.0, 2.0})};
    wrong_shape[0].gradient = Tensor::zeros({3}, DType::F32);
    try {
        optimizer.step(wrong_shape, 0.1);
        FAIL() << "expected an error";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find("shape [2], got [3]"), std::string::npos) << message;
    }

    std::vector<Parameter> strided{make_parameter("w", {1.0, 2.0})};
    Tensor big = Tensor::zeros({2, 2}, DType::F32);
    strided[0].value = big.view_box({0, 0}, {2, 1});
    strided[0].gradient = Tensor::zeros({2, 1}, DType::F32);
    EXPECT_THROW(optimizer.step(strided, 0.1), Error);
    EXPECT_EQ(optimizer.num_steps(), 0);
}

// ---- configuration -----------------------------------------------------------------------------

namespace {

void expect_config_error(const OptimizerConfig& config, const std::string& fragment) {
    try {
        validate(config);
        ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
    EXPECT_THROW(make_optimizer(config), Error);
}

}  // namespace

TEST(OptimizerConfig, FactoryMakesEachKind) {
    EXPECT_EQ(make_optimizer({.kind = OptimizerKind::Sgd})->name(), "sgd");
    EXPECT_EQ(make_optimizer({.kind = OptimizerKind::Adam})->name(), "adam");
    EXPECT_EQ(make_optimizer({.kind = OptimizerKind::AdamW})->name(), "adamw");
    EXPECT_EQ(make_optimizer({.kind = OptimizerKind::Sgd, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-4})
                  ->describe(),
              "sgd momentum 0.9 nesterov, weight decay 0.0001");
    EXPECT_EQ(make_optimizer({.kind = OptimizerKind::AdamW, .weight_decay = 0.01})->describe(),
              "adamw beta1 0.9, beta2 0.999, epsilon 1e-08, decoupled weight decay 0.01");
    EXPECT_EQ(parse_optimizer_kind("adamw"), OptimizerKind::AdamW);
    EXPECT_EQ(to_string(OptimizerKind::Sgd), "sgd");
    EXPECT_THROW(parse_optimizer_kind("rmsprop"), Error);
}

TEST(OptimizerConfig, ValidationNamesTheField) {
    expect_config_error({.kind = OptimizerKind::Sgd, .momentum = 1.0}, "momentum in [0, 1), got 1");
    expect_config_error({.kind = OptimizerKind::Sgd, .momentum = -0.1}, "momentum in [0, 1), got -0.1");
    expect_config_error({.kind = OptimizerKind::Sgd, .momentum = 0.0, .nesterov = true}, "momentum > 0 with nesterov");
    expect_config_error({.kind = OptimizerKind::Sgd, .weight_decay = -1e-4}, "weight_decay >= 0, got -0.0001");
    expect_config_error({.kind = OptimizerKind::Adam, .beta1 = 1.0}, "beta1 in [0, 1), got 1");
    expect_config_error({.kind = OptimizerKind::AdamW, .beta2 = 1.5}, "beta2 in [0, 1), got 1.5");
    expect_config_error({.kind = OptimizerKind::Adam, .epsilon = 0.0}, "epsilon > 0, got 0");
    expect_config_error({.kind = OptimizerKind::Adam, .nesterov = true}, "nesterov = false for adam");
    EXPECT_THROW(SgdOptimizer({.momentum = 2.0}), Error);
    EXPECT_THROW(AdamWOptimizer({.weight_decay = -1.0}), Error);
}

TEST(Optimizers, ParametersUpdatedOnSeveralThreadsGiveTheSameBits) {
    // A mesh spreads the update over its host threads: each parameter's update must not depend on
    // which thread runs it or when. Adam with weight decay over 7 parameters, 3 steps.
    const auto run = [](const ParallelFor& parallel) {
        std::vector<Parameter> parameters;
        for (int p = 0; p < 7; ++p) parameters.push_back(make_parameter(std::string(1, static_cast<char>('a' + p)), {0.1 * p, -1.5, 3.25}, p % 2 == 0));
        const auto optimizer = make_optimizer({.kind = OptimizerKind::Adam, .weight_decay = 0.01});
        for (int step = 0; step < 3; ++step) {
            for (Parameter& parameter : parameters) set_gradient(parameter, gradient_at(step));
            optimizer->step(parameters, learning_rate_at(step), parallel);
        }
        return parameters;
    };
    const std::vector<Parameter> in_order = run(run_in_order);
    const std::vector<Parameter> spread = run([](std::int64_t count, const std::function<void(std::int64_t)>& body) {
        std::vector<std::thread> threads;
        for (std::int64_t i = count - 1; i >= 0; --i) threads.emplace_back([&body, i] { body(i); });
        for (std::thread& thread : threads) thread.join();
    });
    for (std::size_t p = 0; p < in_order.size(); ++p) {
        EXPECT_EQ(std::memcmp(in_order[p].value.data<float>(), spread[p].value.data<float>(), 3 * sizeof(float)), 0) << in_order[p].name;
    }
}
