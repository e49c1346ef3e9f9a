#include "train/optimizer.hpp"

#include <cmath>
#include <sstream>
#include <utility>

namespace tessera::train {

namespace {

constexpr std::string_view step_counter_name = "num_steps";

bool is_finite_non_negative(double value) {
    return std::isfinite(value) && value >= 0.0;
}
bool is_unit_interval(double value) {
    return std::isfinite(value) && value >= 0.0 && value < 1.0;
}

void check_sgd_options(const SgdOptions& options, std::string_view where) {
    TESSERA_CHECK(is_unit_interval(options.momentum),
                  where << ": expected momentum in [0, 1), got " << options.momentum);
    TESSERA_CHECK(!options.nesterov || options.momentum > 0.0,
                  where << ": expected momentum > 0 with nesterov, got momentum " << options.momentum);
    TESSERA_CHECK(is_finite_non_negative(options.weight_decay),
                  where << ": expected a finite weight_decay >= 0, got " << options.weight_decay);
}

void check_adam_options(const AdamOptions& options, std::string_view where) {
    TESSERA_CHECK(is_unit_interval(options.beta1), where << ": expected beta1 in [0, 1), got " << options.beta1);
    TESSERA_CHECK(is_unit_interval(options.beta2), where << ": expected beta2 in [0, 1), got " << options.beta2);
    TESSERA_CHECK(std::isfinite(options.epsilon) && options.epsilon > 0.0,
                  where << ": expected a finite epsilon > 0, got " << options.epsilon);
    TESSERA_CHECK(is_finite_non_negative(options.weight_decay),
                  where << ": expected a finite weight_decay >= 0, got " << options.weight_decay);
}

// ---- update kernels ----------------------------------------------------------------------------
// Plain loops over contiguous f32 arrays; the compiler vectorises them. Branches on options are
// template parameters so each loop body is straight-line code.

template <bool WeightDecay>
void sgd_plain(float* weight, const float* gradient, std::int64_t count, float lr, float wd) {
    for (std::int64_t i = 0; i < count; ++i) {
        float g = gradient[i];
        if constexpr (WeightDecay) g = g + wd * weight[i];
        weight[i] = weight[i] - lr * g;
    }
}

template <bool WeightDecay, bool Nesterov>
void sgd_momentum(float* weight, const float* gradient, float* velocity, std::int64_t count, float lr, float wd,
                  float mu) {
    for (std::int64_t i = 0; i < count; ++i) {
        float g = gradient[i];
        if constexpr (WeightDecay) g = g + wd * weight[i];
        const float v = velocity[i] * mu + g;
        velocity[i] = v;
        if constexpr (Nesterov) {
            weight[i] = weight[i] - lr * (g + mu * v);
        } else {
            weight[i] = weight[i] - lr * v;
        }
    }
}

struct AdamCoefficients {
    float one_minus_beta1;  // weight of the new gradient in m (lerp)
    float beta2;
    float one_minus_beta2;
    float step_size;              // lr / (1 − β1^t)
    float bias_correction2_sqrt;  // sqrt(1 − β2^t)
    float epsilon;
    float wd;                      // coupled weight decay (Adam)
    float decoupled_decay_factor;  // 1 − lr·wd (AdamW)
};

// CoupledDecay: Adam's g += wd·w. DecoupledDecay: AdamW's w *= 1 − lr·wd before the update, fused
// into the same pass (the same f32 operations as a separate pass, so the same bits).
template <bool CoupledDecay, bool DecoupledDecay>
void adam(float* weight, const float* gradient, float* exp_avg, float* exp_avg_sq, std::int64_t count,
          AdamCoefficients c) {
    for (std::int64_t i = 0; i < count; ++i) {
        float w = weight[i];
        if constexpr (DecoupledDecay) w = w * c.decoupled_decay_factor;
        float g = gradient[i];
        if constexpr (CoupledDecay) g = g + c.wd * w;
        const float m = exp_avg[i] + c.one_minus_beta1 * (g - exp_avg[i]);
        const float s = exp_avg_sq[i] * c.beta2 + c.one_minus_beta2 * g * g;
        exp_avg[i] = m;
        exp_avg_sq[i] = s;
        const float denominator = std::sqrt(s) / c.bias_correction2_sqrt + c.epsilon;
        weight[i] = w + (-c.step_size) * m / denominator;
    }
}

std::string format_parameter(const Parameter& parameter, std::size_t index) {
    std::ostringstream out;
    out << "parameter " << index << " ('" << parameter.name << "')";
    return out.str();
}

void check_tensor(const Tensor& tensor, const Parameter& parameter, std::size_t index, std::string_view what) {
    TESSERA_CHECK(tensor.is_defined(), "optimizer step: expected " << format_parameter(parameter, index)
                                                                   << " to have a " << what
                                                                   << " tensor, got an undefined tensor");
    TESSERA_CHECK(tensor.dtype() == DType::F32, "optimizer step: expected the "
                                                    << what << " of " << format_parameter(parameter, index)
                                                    << " to be f32, got " << dtype_name(tensor.dtype()));
    TESSERA_CHECK(tensor.is_contiguous(), "optimizer step: expected the "
                                              << what << " of " << format_parameter(parameter, index)
                                              << " to be contiguous, got strides " << shape_to_string(tensor.strides())
                                              << " for shape " << shape_to_string(tensor.shape()));
}

}  // namespace

// ---- Optimizer ---------------------------------------------------------------------------------

Optimizer::Optimizer(std::vector<std::string> slot_names) : m_slot_names(std::move(slot_names)) {}

void Optimizer::check_parameters(std::span<const Parameter> parameters) const {
    for (std::size_t i = 0; i < parameters.size(); ++i) {
        const Parameter& parameter = parameters[i];
        check_tensor(parameter.value, parameter, i, "value");
        check_tensor(parameter.gradient, parameter, i, "gradient");
        TESSERA_CHECK(parameter.gradient.shape() == parameter.value.shape(),
                      "optimizer step: expected the gradient of "
                          << format_parameter(parameter, i) << " to have the value's shape "
                          << shape_to_string(parameter.value.shape()) << ", got "
                          << shape_to_string(parameter.gradient.shape()));
        TESSERA_CHECK(!parameter.gradient.shares_storage_with(parameter.value),
                      "optimizer step: expected the gradient of " << format_parameter(parameter, i)
                                                                  << " to have its own storage, got the value's");
    }
    if (m_slots.empty()) return;
    TESSERA_CHECK(parameters.size() == m_slots.size(),
                  "optimizer step: expected " << m_slots.size()
                                              << " parameters, as when the optimizer state was created, got "
                                              << parameters.size());
    for (std::size_t i = 0; i < parameters.size(); ++i) {
        const ParameterSlots& slots = m_slots[i];
        TESSERA_CHECK(parameters[i].name == slots.parameter_name, "optimizer step: expected parameter "
                                                                      << i << " to be '" << slots.parameter_name
                                                                      << "', as in the optimizer state, got '"
                                                                      << parameters[i].name << "'");
        TESSERA_CHECK(parameters[i].value.shape() == slots.shape,
                      "optimizer step: expected parameter "
                          << i << " ('" << slots.parameter_name << "') to have shape " << shape_to_string(slots.shape)
                          << ", as in the optimizer state, got " << shape_to_string(parameters[i].value.shape()));
    }
}

void Optimizer::step(std::span<Parameter> parameters, double learning_rate, const ParallelFor& parallel) {
    TESSERA_CHECK(is_finite_non_negative(learning_rate),
                  "optimizer step: expected a finite learning rate >= 0, got " << learning_rate);
    check_parameters(parameters);
    if (m_slots.empty()) {
        m_slots.reserve(parameters.size());
        for (const Parameter& parameter : parameters) {
            ParameterSlots slots{parameter.name, parameter.value.shape(), {}};
            for (std::size_t k = 0; k < m_slot_names.size(); ++k) {
                slots.tensors.push_back(Tensor::zeros(parameter.value.shape(), DType::F32));
            }
            m_slots.push_back(std::move(slots));
        }
    }
    const std::int64_t step_number = m_num_steps + 1;
    parallel(static_cast<std::int64_t>(parameters.size()), [&](std::int64_t index) {
        const auto i = static_cast<std::size_t>(index);
        update(parameters[i], m_slots[i].tensors, learning_rate, step_number);
    });
    m_num_steps = step_number;
}

std::vector<NamedTensor> Optimizer::state() const {
    std::vector<NamedTensor> entries;
    entries.reserve(m_slots.size() * m_slot_names.size() + 1);
    for (const ParameterSlots& slots : m_slots) {
        for (std::size_t k = 0; k < m_slot_names.size(); ++k) {
            entries.push_back(NamedTensor{slots.parameter_name + '/' + m_slot_names[k], slots.tensors[k].clone()});
        }
    }
    entries.push_back(make_counter_entry(std::string(step_counter_name), m_num_steps));
    return entries;
}

void Optimizer::load_state(const std::vector<NamedTensor>& state) {
    const std::string where = "loading " + name() + " optimizer state";
    const NamedTensor* counter = nullptr;
    std::vector<const NamedTensor*> slot_entries;
    for (const NamedTensor& entry : state) {
        if (entry.name == step_counter_name) {
            TESSERA_CHECK(counter == nullptr, where << ": expected one entry '" << step_counter_name << "', got two");
            counter = &entry;
        } else {
            slot_entries.push_back(&entry);
        }
    }
    TESSERA_CHECK(counter != nullptr,
                  where << ": expected an entry '" << step_counter_name << "', got " << describe_entries(state));
    const std::int64_t num_steps = read_counter_entry(*counter);

    const std::size_t num_slots = m_slot_names.size();
    if (num_slots == 0) {
        TESSERA_CHECK(slot_entries.empty(),
                      where << ": expected no per-parameter slots, got entry '" << slot_entries.front()->name << "'");
        m_num_steps = num_steps;  // slot records (names and shapes, no tensors) stay for checking
        return;
    }

    std::vector<ParameterSlots> loaded;
    for (std::size_t e = 0; e < slot_entries.size(); ++e) {
        const NamedTensor& entry = *slot_entries[e];
        const std::size_t k = e % num_slots;
        const std::size_t slash = entry.name.rfind('/');
        const std::string slot_name = slash == std::string::npos ? std::string() : entry.name.substr(slash + 1);
        TESSERA_CHECK(slash != std::string::npos && slot_name == m_slot_names[k],
                      where << ": expected entry " << e << " to be '<parameter>/" << m_slot_names[k] << "', got '"
                            << entry.name << "'");
        const std::string parameter_name = entry.name.substr(0, slash);
        TESSERA_CHECK(entry.value.is_defined() && entry.value.dtype() == DType::F32,
                      where << ": expected slot '" << entry.name << "' to be an f32 tensor, got "
                            << (entry.value.is_defined() ? std::string(dtype_name(entry.value.dtype()))
                                                         : std::string("an undefined tensor")));
        if (k == 0) {
            loaded.push_back(ParameterSlots{parameter_name, entry.value.shape(), {}});
        } else {
            const ParameterSlots& current = loaded.back();
            TESSERA_CHECK(parameter_name == current.parameter_name,
                          where << ": expected slot '" << current.parameter_name << '/' << m_slot_names[k]
                                << "' after '" << current.parameter_name << '/' << m_slot_names[0] << "', got '"
                                << entry.name << "'");
            TESSERA_CHECK(entry.value.shape() == current.shape,
                          where << ": slot '" << entry.name << "': expected shape " << shape_to_string(current.shape)
                                << ", as its parameter's other slots, got " << shape_to_string(entry.value.shape()));
        }
        loaded.back().tensors.push_back(entry.value.clone());
    }
    TESSERA_CHECK(slot_entries.size() % num_slots == 0, where << ": expected " << num_slots << " slots for parameter '"
                                                              << loaded.back().parameter_name << "', got "
                                                              << loaded.back().tensors.size());

    if (!m_slots.empty()) {
        TESSERA_CHECK(loaded.size() == m_slots.size(),
                      where << ": expected slots for " << m_slots.size() << " parameters, got " << loaded.size());
        for (std::size_t i = 0; i < loaded.size(); ++i) {
            const ParameterSlots& expected = m_slots[i];
            TESSERA_CHECK(loaded[i].parameter_name == expected.parameter_name,
                          where << ": expected the slots of parameter " << i << " to be for '"
                                << expected.parameter_name << "', got '" << loaded[i].parameter_name << "'");
            TESSERA_CHECK(loaded[i].shape == expected.shape, where << ": slot '" << expected.parameter_name << '/'
                                                                   << m_slot_names[0] << "': expected shape "
                                                                   << shape_to_string(expected.shape) << ", got "
                                                                   << shape_to_string(loaded[i].shape));
        }
    }
    m_slots = std::move(loaded);
    m_num_steps = num_steps;
}

void Optimizer::reset() {
    m_slots.clear();
    m_num_steps = 0;
}

// ---- SGD ---------------------------------------------------------------------------------------

SgdOptimizer::SgdOptimizer(SgdOptions options)
    : Optimizer(options.momentum > 0.0 ? std::vector<std::string>{"momentum"} : std::vector<std::string>{}),
      m_options(options) {
    check_sgd_options(options, "sgd optimizer");
}

std::string SgdOptimizer::describe() const {
    std::ostringstream out;
    out << "sgd";
    if (m_options.momentum > 0.0) out << " momentum " << m_options.momentum << (m_options.nesterov ? " nesterov" : "");
    if (m_options.weight_decay > 0.0) out << ", weight decay " << m_options.weight_decay;
    return out.str();
}

void SgdOptimizer::update(Parameter& parameter, std::span<Tensor> slots, double learning_rate,
                          std::int64_t /*step_number*/) {
    float* weight = parameter.value.data<float>();
    const float* gradient = parameter.gradient.data<float>();
    const std::int64_t count = parameter.value.num_elements();
    const float lr = static_cast<float>(learning_rate);
    const bool decay = parameter.apply_weight_decay && m_options.weight_decay > 0.0;
    const float wd = static_cast<float>(m_options.weight_decay);
    if (slots.empty()) {
        if (decay)
            sgd_plain<true>(weight, gradient, count, lr, wd);
        else
            sgd_plain<false>(weight, gradient, count, lr, wd);
        return;
    }
    float* velocity = slots[0].data<float>();
    const float mu = static_cast<float>(m_options.momentum);
    if (decay) {
        if (m_options.nesterov)
            sgd_momentum<true, true>(weight, gradient, velocity, count, lr, wd, mu);
        else
            sgd_momentum<true, false>(weight, gradient, velocity, count, lr, wd, mu);
    } else {
        if (m_options.nesterov)
            sgd_momentum<false, true>(weight, gradient, velocity, count, lr, wd, mu);
        else
            sgd_momentum<false, false>(weight, gradient, velocity, count, lr, wd, mu);
    }
}

// ---- Adam and AdamW ----------------------------------------------------------------------------

AdamOptimizer::AdamOptimizer(AdamOptions options) : AdamOptimizer(options, false) {}

AdamOptimizer::AdamOptimizer(AdamOptions options, bool decoupled_weight_decay)
    : Optimizer({"exp_avg", "exp_avg_sq"}), m_options(options), m_decoupled_weight_decay(decoupled_weight_decay) {
    check_adam_options(options, decoupled_weight_decay ? "adamw optimizer" : "adam optimizer");
}

std::string AdamOptimizer::describe() const {
    std::ostringstream out;
    out << name() << " beta1 " << m_options.beta1 << ", beta2 " << m_options.beta2 << ", epsilon " << m_options.epsilon;
    if (m_options.weight_decay > 0.0) {
        out << ", " << (m_decoupled_weight_decay ? "decoupled " : "") << "weight decay " << m_options.weight_decay;
    }
    return out.str();
}

void AdamOptimizer::update(Parameter& parameter, std::span<Tensor> slots, double learning_rate,
                           std::int64_t step_number) {
    float* weight = parameter.value.data<float>();
    const float* gradient = parameter.gradient.data<float>();
    float* exp_avg = slots[0].data<float>();
    float* exp_avg_sq = slots[1].data<float>();
    const std::int64_t count = parameter.value.num_elements();
    const bool decay = parameter.apply_weight_decay && m_options.weight_decay > 0.0;

    const double t = static_cast<double>(step_number);
    const double bias_correction1 = 1.0 - std::pow(m_options.beta1, t);
    const double bias_correction2 = 1.0 - std::pow(m_options.beta2, t);
    AdamCoefficients c{};
    c.one_minus_beta1 = static_cast<float>(1.0 - m_options.beta1);
    c.beta2 = static_cast<float>(m_options.beta2);
    c.one_minus_beta2 = static_cast<float>(1.0 - m_options.beta2);
    c.step_size = static_cast<float>(learning_rate / bias_correction1);
    c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    c.epsilon = static_cast<float>(m_options.epsilon);
    c.wd = static_cast<float>(m_options.weight_decay);

    c.decoupled_decay_factor = static_cast<float>(1.0 - learning_rate * m_options.weight_decay);

    if (decay && m_decoupled_weight_decay) {
        adam<false, true>(weight, gradient, exp_avg, exp_avg_sq, count, c);
    } else if (decay) {
        adam<true, false>(weight, gradient, exp_avg, exp_avg_sq, count, c);
    } else {
        adam<false, false>(weight, gradient, exp_avg, exp_avg_sq, count, c);
    }
}

// ---- configuration -----------------------------------------------------------------------------

std::string_view to_string(OptimizerKind kind) {
    switch (kind) {
        case OptimizerKind::Sgd:
            return "sgd";
        case OptimizerKind::Adam:
            return "adam";
        case OptimizerKind::AdamW:
            return "adamw";
    }
    TESSERA_ASSERT(false, "unknown OptimizerKind " << static_cast<int>(kind));
}

OptimizerKind parse_optimizer_kind(std::string_view text) {
    for (OptimizerKind kind : {OptimizerKind::Sgd, OptimizerKind::Adam, OptimizerKind::AdamW}) {
        if (text == to_string(kind)) return kind;
    }
    TESSERA_REJECT("expected an optimizer kind of sgd, adam or adamw, got '" << text << "'");
}

void validate(const OptimizerConfig& config) {
    constexpr std::string_view where = "optimizer config";
    switch (config.kind) {
        case OptimizerKind::Sgd:
            check_sgd_options({config.momentum, config.nesterov, config.weight_decay}, where);
            return;
        case OptimizerKind::Adam:
        case OptimizerKind::AdamW:
            TESSERA_CHECK(!config.nesterov, where << ": expected nesterov = false for " << to_string(config.kind)
                                                  << " (nesterov applies to sgd), got true");
            check_adam_options({config.beta1, config.beta2, config.epsilon, config.weight_decay}, where);
            return;
    }
    TESSERA_FAIL(where << ": expected kind sgd, adam or adamw, got " << static_cast<int>(config.kind));
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config) {
    validate(config);
    switch (config.kind) {
        case OptimizerKind::Sgd:
            return std::make_unique<SgdOptimizer>(SgdOptions{config.momentum, config.nesterov, config.weight_decay});
        case OptimizerKind::Adam:
            return std::make_unique<AdamOptimizer>(
                AdamOptions{config.beta1, config.beta2, config.epsilon, config.weight_decay});
        case OptimizerKind::AdamW:
            return std::make_unique<AdamWOptimizer>(
                AdamOptions{config.beta1, config.beta2, config.epsilon, config.weight_decay});
    }
    TESSERA_FAIL("optimizer config: expected kind sgd, adam or adamw, got " << static_cast<int>(config.kind));
}

}  // namespace tessera::train
