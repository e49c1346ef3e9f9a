#include "mesh/layer_profile.hpp"

#include "core/error.hpp"
#include "mesh/measurement_support.hpp"
#include "mesh/thread_pool.hpp"
#include "ops/tile_buffer.hpp"
#include "partition/core_graph.hpp"

#include <algorithm>
#include <chrono>

namespace tessera::mesh {

struct LayerProfiler::Impl {
    partition::CoreGraphs core_graphs;
    std::vector<std::size_t> task_core;                     // the core graph each task runs
    std::vector<std::unique_ptr<graph::Executor>> executors;  // one per task
    std::vector<Tensor> inputs, gradients;                  // per task
    cost::MeasuredLayers fastest;                           // [core of a replica][model node], of the fastest pass: mean over the core's tasks
    double fastest_total = 0;                               // its layers' phase walls (every task profiled), else seconds summed over the tasks
    std::vector<std::vector<cost::MeasuredLayer>> pass;     // [task][model node], this pass
    std::vector<cost::MeasuredLayer> pass_walls;            // [model node]: this pass's layer phases, wall time
    bool every_task = false;                                // the profile runs every task of the step
    bool measured = false;
    ThreadPool pool;

    Impl(const graph::Graph& model, const partition::TilingPlan& plan, const ProfileOptions& options)
        : core_graphs(partition::build_core_graphs(model, plan)), pool(std::max(1, options.threads)) {
        const std::size_t cores = core_graphs.graphs.size();
        const std::int64_t tasks = profiled_executors(options, static_cast<std::int64_t>(cores));
        for (std::int64_t task = 0; task < tasks; ++task) task_core.push_back(static_cast<std::size_t>(task) % cores);
        every_task = tasks == options.tasks;
        executors.resize(task_core.size());
        graph::ExecutorOptions executor_options;
        executor_options.precision = options.precision;
        executor_options.distributed_reductions = true;  // as in the mesh: statistics phases of their own
        // Compiled on the pool, as the mesh compiles its cores: oneDNN fixes a primitive's threads when
        // it creates it, and the simulated cores' kernels are single-threaded.
        pool.run(static_cast<std::int64_t>(task_core.size()), [&](std::int64_t task) {
            const graph::Graph& core_graph = core_graphs.graphs[task_core[static_cast<std::size_t>(task)]];
            auto executor = std::make_unique<graph::Executor>(core_graph, executor_options);
            executor->initialize_parameters(1);
            // Its halo buffers' outer rows start at zero (the Executor's doing): the profile has no neighbours.
            executors[static_cast<std::size_t>(task)] = std::move(executor);
        });
        for (std::size_t core : task_core) {
            const graph::Graph& core_graph = core_graphs.graphs[core];
            inputs.push_back(normal_tensor(core_graph.node(core_graph.input_node()).output_shape, 2));
            gradients.push_back(normal_tensor(core_graph.node(core_graph.output_node()).output_shape, 3));
        }
        fastest.assign(cores, std::vector<cost::MeasuredLayer>(model.nodes().size()));
        pass.assign(task_core.size(), std::vector<cost::MeasuredLayer>(model.nodes().size()));
        pass_walls.assign(model.nodes().size(), {});
        run_pass(false);  // warm-up: the first touch of every buffer, oneDNN's primitive creation
    }

    // One step's layers in the mesh's order and phases: each reduction phase of a node (batch-norm
    // statistics) a phase over every task, its totals then taken on this thread (local totals: the sums
    // over cores are modelled), then the node's kernel a phase; a task's layer time is its share of
    // them all. As in the mesh, every task's pass over its tile ends before any task's next pass
    // begins: with several tasks a thread, a tile leaves the cache between a batch norm's passes.
    void run_pass(bool keep) {
        const auto num_tasks = static_cast<std::int64_t>(executors.size());
        const graph::Graph& first_graph = core_graphs.graphs[0];
        const std::size_t num_local = first_graph.nodes().size();
        auto layer_phase = [&](std::size_t local, graph::Pass direction) {
            const int model_node = core_graphs.model_node[local];
            const int id = static_cast<int>(local);
            std::vector<double> seconds(static_cast<std::size_t>(num_tasks), 0.0);
            const auto timed = [&](std::int64_t task, auto&& work) {
                const auto start = std::chrono::steady_clock::now();
                work(*executors[static_cast<std::size_t>(task)]);
                seconds[static_cast<std::size_t>(task)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            };
            const auto wall_start = std::chrono::steady_clock::now();
            const int reduction_phases = executors.front()->reduction_phases(id, direction);
            for (int phase = 0; phase < reduction_phases; ++phase) {
                std::vector<std::vector<double>> sums(static_cast<std::size_t>(num_tasks));
                pool.run(num_tasks, [&](std::int64_t task) {
                    timed(task, [&](graph::Executor& executor) { sums[static_cast<std::size_t>(task)] = executor.reduction_partial(id, direction, phase); });
                });
                for (std::int64_t task = 0; task < num_tasks; ++task) {
                    executors[static_cast<std::size_t>(task)]->reduction_total(id, direction, phase, sums[static_cast<std::size_t>(task)]);
                }
            }
            pool.run(num_tasks, [&](std::int64_t task) {
                timed(task, [&](graph::Executor& executor) {
                    if (direction == graph::Pass::Forward) executor.forward_node(id);
                    else executor.backward_node(id);
                });
            });
            if (model_node < 0) return;  // halo copies are modelled
            const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
            cost::MeasuredLayer& walls = pass_walls[static_cast<std::size_t>(model_node)];
            (direction == graph::Pass::Forward ? walls.forward_wall_seconds : walls.backward_wall_seconds) = wall;
            for (std::int64_t task = 0; task < num_tasks; ++task) {
                cost::MeasuredLayer& layer = pass[static_cast<std::size_t>(task)][static_cast<std::size_t>(model_node)];
                (direction == graph::Pass::Forward ? layer.forward_seconds : layer.backward_seconds) = seconds[static_cast<std::size_t>(task)];
            }
        };
        pool.run(num_tasks, [&](std::int64_t task) {
            executors[static_cast<std::size_t>(task)]->begin_forward(inputs[static_cast<std::size_t>(task)], graph::Mode::Train);
        });
        for (std::size_t local = 0; local < num_local; ++local) {
            if (first_graph.nodes()[local].kind != graph::OpKind::Input) layer_phase(local, graph::Pass::Forward);
        }
        pool.run(num_tasks, [&](std::int64_t task) {
            executors[static_cast<std::size_t>(task)]->begin_backward(gradients[static_cast<std::size_t>(task)]);
        });
        for (std::size_t local = num_local; local-- > 0;) {
            if (first_graph.nodes()[local].kind != graph::OpKind::Input) layer_phase(local, graph::Pass::Backward);
        }
        if (!keep) return;
        // The fastest pass as a whole, as the fastest step is measured: per-layer minima would pick
        // each layer's luckiest moment and sum below any real step. Every task counts, and a core's
        // layers are the mean over the tasks that ran it (its copies in the other replicas): one
        // task's own luck — running while the other threads happened to be idle — would otherwise
        // pick a pass no step of the mesh sees (4 replicas of one core: 25 % under the steps). Where
        // the profile runs every task of the step, its layer phases' wall time picks the pass, and
        // those walls go with the layers (the host step takes them for its layer phases).
        double total = 0;
        if (every_task) {
            for (const cost::MeasuredLayer& walls : pass_walls) total += walls.forward_wall_seconds + walls.backward_wall_seconds;
        } else {
            for (const std::vector<cost::MeasuredLayer>& task_layers : pass) {
                for (const cost::MeasuredLayer& layer : task_layers) total += layer.forward_seconds + layer.backward_seconds;
            }
        }
        if (measured && total >= fastest_total) return;
        fastest_total = total;
        fastest = mean_over_copies(pass, task_core, fastest.size());
        if (every_task) {
            for (std::vector<cost::MeasuredLayer>& core_layers : fastest) {
                for (std::size_t node = 0; node < core_layers.size(); ++node) {
                    core_layers[node].forward_wall_seconds = pass_walls[node].forward_wall_seconds;
                    core_layers[node].backward_wall_seconds = pass_walls[node].backward_wall_seconds;
                }
            }
        }
        measured = true;
    }
};

cost::MeasuredLayers mean_over_copies(const std::vector<std::vector<cost::MeasuredLayer>>& per_task,
                                      const std::vector<std::size_t>& task_core, std::size_t cores) {
    TESSERA_CHECK(per_task.size() == task_core.size(), "a pass has " << per_task.size() << " tasks' times, the profile " << task_core.size() << " tasks");
    const std::size_t nodes = per_task.empty() ? 0 : per_task.front().size();
    cost::MeasuredLayers mean(cores, std::vector<cost::MeasuredLayer>(nodes));
    std::vector<int> copies(cores, 0);
    for (std::size_t task = 0; task < per_task.size(); ++task) {
        const std::size_t core = task_core[task];
        TESSERA_CHECK(core < cores && per_task[task].size() == nodes,
                      "task " << task << " runs core " << core << " of " << cores << " with " << per_task[task].size() << " layers, expected " << nodes);
        ++copies[core];
        for (std::size_t node = 0; node < nodes; ++node) {
            mean[core][node].forward_seconds += per_task[task][node].forward_seconds;
            mean[core][node].backward_seconds += per_task[task][node].backward_seconds;
        }
    }
    for (std::size_t core = 0; core < cores; ++core) {
        TESSERA_CHECK(copies[core] > 0, "no task of the profile ran core " << core);
        for (cost::MeasuredLayer& layer : mean[core]) {
            layer.forward_seconds /= copies[core];
            layer.backward_seconds /= copies[core];
        }
    }
    return mean;
}

std::int64_t profiled_executors(const ProfileOptions& options, std::int64_t cores_per_replica) {
    return std::max(cores_per_replica, std::min(options.tasks, options.max_tasks));
}

LayerProfiler::LayerProfiler(const graph::Graph& model, const partition::TilingPlan& plan, const ProfileOptions& options)
    : m_impl(std::make_unique<Impl>(model, plan, options)) {}

LayerProfiler::~LayerProfiler() = default;

void LayerProfiler::measure(int passes) {
    TESSERA_CHECK(passes >= 1, "a layer profile needs at least one pass, got " << passes);
    for (int pass = 0; pass < passes; ++pass) m_impl->run_pass(true);
}

cost::MeasuredLayers LayerProfiler::layers() const {
    TESSERA_CHECK(m_impl->measured, "a layer profile has no passes yet: call measure() first");
    return m_impl->fastest;
}

cost::MeasuredLayers profile_layers(const graph::Graph& model, const partition::TilingPlan& plan, const ProfileOptions& options) {
    LayerProfiler profiler(model, plan, options);
    profiler.measure(options.repeats);
    return profiler.layers();
}

}  // namespace tessera::mesh
