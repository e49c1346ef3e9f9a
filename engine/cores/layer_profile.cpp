#include "cores/layer_profile.hpp"

#include "core/error.hpp"
#include "cores/measurement_support.hpp"
#include "ops/dnnl_support.hpp"
#include "partition/core_graph.hpp"

#include <algorithm>
#include <map>

namespace tessera::cores {

namespace {

// Cores whose graphs have the same node shapes run the same kernels: one profile serves them all.
std::vector<std::int64_t> shape_signature(const graph::Graph& core_graph) {
    std::vector<std::int64_t> signature;
    for (const graph::Node& node : core_graph.nodes()) {
        signature.push_back(static_cast<std::int64_t>(node.output_shape.size()));
        signature.insert(signature.end(), node.output_shape.begin(), node.output_shape.end());
    }
    return signature;
}

}  // namespace

cost::MeasuredLayers profile_layers(const graph::Graph& model, const partition::TilingPlan& plan, const ProfileOptions& options) {
    TESSERA_CHECK(options.repeats >= 1, "a layer profile needs at least one repeat, got " << options.repeats);
    const partition::CoreGraphs core_graphs = partition::build_core_graphs(model, plan);
    const std::size_t num_nodes = model.nodes().size();
    cost::MeasuredLayers result(core_graphs.graphs.size(), std::vector<cost::MeasuredLayer>(num_nodes));
    std::map<std::vector<std::int64_t>, std::size_t> profiled;  // signature → the core measured for it

    const int saved_threads = ops::num_threads();
    ops::set_num_threads(1);  // a simulated core's kernels run on one host thread
    try {
        for (std::size_t core = 0; core < core_graphs.graphs.size(); ++core) {
            const graph::Graph& core_graph = core_graphs.graphs[core];
            const auto [found, inserted] = profiled.emplace(shape_signature(core_graph), core);
            if (!inserted) {
                result[core] = result[found->second];
                continue;
            }
            graph::ExecutorOptions executor_options;
            executor_options.precision = options.precision;
            executor_options.distributed_reductions = true;  // as in the mesh: statistics phases of their own
            graph::Executor executor(core_graph, executor_options);
            executor.initialize_parameters(1);
            const Tensor input = normal_tensor(core_graph.node(core_graph.input_node()).output_shape, 2);
            const Tensor gradient = normal_tensor(core_graph.node(core_graph.output_node()).output_shape, 3);
            std::vector<cost::MeasuredLayer>& layers = result[core];
            for (int repeat = 0; repeat <= options.repeats; ++repeat) {
                executor.forward(input, graph::Mode::Train);
                executor.backward(gradient);
                if (repeat == 0) continue;  // warm-up: the first touch of every buffer, oneDNN's primitive creation
                for (std::size_t local = 0; local < core_graph.nodes().size(); ++local) {
                    const int model_node = core_graphs.model_node[local];
                    if (model_node < 0 || core_graph.nodes()[local].kind == graph::OpKind::Input) continue;  // halo copies are modelled
                    const graph::NodeTiming& timing = executor.timings()[local];
                    cost::MeasuredLayer& layer = layers[static_cast<std::size_t>(model_node)];
                    layer.forward_seconds = repeat == 1 ? timing.forward_seconds : std::min(layer.forward_seconds, timing.forward_seconds);
                    layer.backward_seconds =
                        repeat == 1 ? timing.backward_seconds : std::min(layer.backward_seconds, timing.backward_seconds);
                }
            }
        }
    } catch (...) {
        ops::set_num_threads(saved_threads);
        throw;
    }
    ops::set_num_threads(saved_threads);
    return result;
}

}  // namespace tessera::cores
