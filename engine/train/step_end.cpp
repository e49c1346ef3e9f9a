#include "train/step_end.hpp"

#include "core/error.hpp"

namespace tessera::train {

void scale_loss_gradient(Tensor& gradient, double scale) {
    if (scale == 1.0) return;
    float* values = gradient.data<float>();
    const auto factor = static_cast<float>(scale);
    for (std::int64_t i = 0; i < gradient.num_elements(); ++i) values[i] *= factor;
}

bool finish_update(LossScaler& scaler, double used_scale, std::span<const std::span<Parameter>> copies,
                   const std::function<void()>& apply_optimizers, const StepContext& context, const ParallelFor& parallel) {
    TESSERA_ASSERT(!copies.empty(), "finish_update needs at least one copy of the parameters");
    const std::span<Parameter> reference = copies.front();
    LossScaler::check_gradients(reference);
    const Parameter* bad_gradient = LossScaler::first_non_finite_gradient(reference, parallel);
    const bool finite = bad_gradient == nullptr;
    if (!finite && !scaler.skips_non_finite()) {
        const auto index = static_cast<std::size_t>(bad_gradient - reference.data());
        TESSERA_REJECT("step " << context.step + 1 << ": the gradient of '" << bad_gradient->name << "' holds NaN or infinite values"
                                 << (context.locate ? context.locate(index) : std::string()) << " (the loss was " << context.loss
                                 << "): training diverged. Lower the learning rate, or use dynamic loss scaling in reduced precision."
                                 << context.aftermath);
    }
    // Unscale by the scale backward used, before update() may change it; 1/scale rounded to f32 once.
    if (finite && used_scale != 1.0) {
        const auto inverse = static_cast<float>(1.0 / used_scale);
        const auto per_copy = static_cast<std::int64_t>(reference.size());
        parallel(static_cast<std::int64_t>(copies.size()) * per_copy, [&](std::int64_t task) {
            Parameter& parameter = copies[static_cast<std::size_t>(task / per_copy)][static_cast<std::size_t>(task % per_copy)];
            float* gradient = parameter.gradient.data<float>();
            for (std::int64_t e = 0; e < parameter.gradient.num_elements(); ++e) gradient[e] *= inverse;
        });
    }
    const bool applied = scaler.update(!finite);
    if (!applied) return false;
    apply_optimizers();
    // Every copy got the same gradients and update: the first one speaks for all.
    if (const Parameter* bad = LossScaler::first_non_finite_value(reference, parallel)) {
        TESSERA_REJECT("step " << context.step + 1 << ": the update made '" << bad->name
                                 << "' NaN or infinite: training diverged. Lower the learning rate." << context.aftermath);
    }
    return true;
}

void check_statistics(std::span<const Tensor> statistics, const graph::Graph& graph, const StepContext& context,
                      const std::string& where) {
    for (std::size_t index = 0; index < statistics.size(); ++index) {
        TESSERA_CHECK(tensor_is_finite(statistics[index]),
                      "step " << context.step + 1 << ": the batch-norm statistic '" << graph.buffers()[index].name << "'" << where
                              << " became NaN or infinite. Lower the learning rate, or clean the data." << context.aftermath);
    }
}

}  // namespace tessera::train
