#include "graph/executor.hpp"

#include "graph/buffer_plan.hpp"

#include "core/random.hpp"
#include "ops/dnnl_support.hpp"
#include "ops/kernels.hpp"
#include "ops/tile_rows.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>

namespace tessera::graph {

using dnnl::memory;
using ops::Copy;
using ops::cpu_engine;
using ops::cpu_stream;
using ops::Kernel;
using ops::KernelInputs;
using ops::Scratchpad;

// ---- executor -------------------------------------------------------------------------------

struct Executor::Impl {
    Graph graph;
    ExecutorOptions options;
    Scratchpad scratchpad;  // every primitive's, shared by all of them (see Scratchpad)
    std::vector<Parameter> parameters;
    std::vector<Tensor> buffers;
    std::vector<std::unique_ptr<Kernel>> kernels;  // per node; null for the input
    std::vector<memory> outputs;                   // per node, in the kernel's output layout
    std::vector<memory> gradients;                 // per node: d loss / d output, same layout; empty for the input
    // BF16 mode on a CPU without oneDNN bf16 kernels: the nodes whose values (and gradients) would be bf16
    // run in f32 and are rounded to bf16 after each op, as F16 mode is emulated everywhere.
    std::vector<bool> rounds_to_bf16;
    // Per node and input slot: where backward writes that input's gradient. Either the producer's gradient
    // itself (the first contribution to arrive) or a scratch buffer that is then added to it.
    std::vector<std::vector<memory>> diff_targets;
    std::vector<std::vector<bool>> diff_is_scratch;
    std::vector<dnnl::binary> accumulate;  // per node: gradient += scratch

    // Per graph output (Graph::output_nodes()): copies between its kernel layout and a plain tensor.
    std::vector<Copy> output_to_plain;
    std::vector<Copy> plain_to_output_gradient;
    Copy plain_to_input;
    // Weight sharing (Graph::conv's share_parameters_of). Backward runs in reverse, so a shared
    // parameter's last user writes its gradient directly; every earlier user computes into a gradient
    // of its own, added once that user's backward has run (as activation gradients accumulate).
    struct SharedUse {
        std::size_t parameter;            // index into parameters
        std::unique_ptr<Parameter> copy;  // the value's storage shared, a gradient of its own
    };
    std::vector<std::vector<SharedUse>> shared_uses;  // per node
    bool ran_forward_training = false;
    Mode mode = Mode::Eval;
    std::vector<memory> node_inputs;  // scratch: the current node's input memories
    std::vector<NodeTiming> timings;
    // Nodes nothing consumes that are not outputs: no gradient arrives there, so backward starts
    // them at zero.
    std::vector<std::size_t> unconsumed;
    // A node read by a halo node alone whose kernel writes into views (a concatenation, a distributed batch
    // norm: Kernel::writes_into_views) writes its output into the halo buffer's interior and reads its
    // gradient from there: the halo node copies nothing in or out. Per node: the halo node whose interior holds this node's output (−1: none);
    // per halo node: whether its kernel is skipped.
    std::vector<int> inside_halo_of;
    std::vector<bool> halo_in_place;
    // A node a concatenation alone reads whose kernel writes into a channel range of that concatenation's
    // buffer (Kernel::write_into_channels) writes its output there and reads its gradient from there; the
    // concatenation copies only its other inputs. Per node: the concatenation (−1: none) and the first
    // channel of its range.
    std::vector<int> inside_concat_of;
    std::vector<std::int64_t> concat_first_channel;

    const std::vector<memory>& inputs_of(const Node& node) {
        node_inputs.clear();
        for (int i : node.inputs) node_inputs.push_back(outputs[static_cast<std::size_t>(i)]);
        return node_inputs;
    }


    int kernel_threads = 1;

    Impl(const Graph& g, ExecutorOptions o) : graph(g), options(o) {}

    // A shared parameter's users read the parameter's current storage (a driver may have replaced it).
    void sync_shared_values() {
        for (auto& uses : shared_uses) {
            for (SharedUse& use : uses) use.copy->value = parameters[use.parameter].value;
        }
    }

    // Every node's gradient and every scratch diff target: in one arena where their backward lifetimes
    // allow (graph/buffer_plan.hpp), each in memory of its own when asked to keep them. A blocked layout
    // with padding (channels not a multiple of the block) also gets its own: oneDNN expects the padding
    // to stay zero, and another buffer sharing those bytes would overwrite it.
    std::unique_ptr<std::byte, void (*)(void*)> gradient_arena{nullptr, std::free};
    std::int64_t gradient_arena_bytes = 0;
    std::vector<bool> gradient_in_arena;             // per node
    std::vector<std::vector<bool>> scratch_in_arena;  // per node and input slot, like diff_is_scratch

    // A box of a buffer (value or gradient) as memory of `shape`, at `offsets` [N, C, (D,) H, W]: the
    // sub-memory's strides, its first element as the handle.
    static memory sub_view(const memory& whole, const Shape& shape, const memory::dims& offsets) {
        memory::desc view = whole.get_desc().submemory_desc(ops::to_dims(shape), offsets);
        const auto first = static_cast<std::size_t>(view.data.offset0);
        view.data.offset0 = 0;
        return memory(view, cpu_engine(), static_cast<char*>(whole.get_data_handle()) + first * memory::data_type_size(view.data_type()));
    }
    // The interior of a halo node's buffer, of the tile's shape.
    static memory interior_view(const memory& widened, const Node& halo, const Shape& tile_shape) {
        memory::dims offsets(tile_shape.size(), 0);
        for (std::size_t axis = 0; axis < halo.halo.interior_offset.size(); ++axis) offsets[axis + 2] = halo.halo.interior_offset[axis];
        return sub_view(widened, tile_shape, offsets);
    }
    // Channels [first, first + C) of a buffer, of `part_shape` [N, C, ...].
    static memory channel_view(const memory& whole, const Shape& part_shape, std::int64_t first) {
        memory::dims offsets(part_shape.size(), 0);
        offsets[1] = first;
        return sub_view(whole, part_shape, offsets);
    }

    void allocate_gradients() {
        const std::vector<Node>& nodes = graph.nodes();
        const std::size_t count = nodes.size();
        std::vector<BufferLifetime> node_lifetimes = gradient_lifetimes(graph);
        // A node inside a halo buffer reads its gradient there: the halo's gradient lives until then.
        // Likewise a node inside a concatenation's buffer (its backward runs after the concatenation's);
        // first, so that a halo buffer holding that concatenation lives until then too.
        for (std::size_t n = 0; n < count; ++n) {
            if (inside_concat_of[n] < 0) continue;
            BufferLifetime& whole = node_lifetimes[static_cast<std::size_t>(inside_concat_of[n])];
            whole.last_step = std::max(whole.last_step, node_lifetimes[n].last_step);
        }
        for (std::size_t n = 0; n < count; ++n) {
            if (inside_halo_of[n] >= 0) node_lifetimes[static_cast<std::size_t>(inside_halo_of[n])].last_step = node_lifetimes[n].last_step;
        }
        struct Slot {
            std::size_t node, input_slot;  // input_slot == npos: the node's own gradient
            memory::desc desc;
        };
        constexpr std::size_t own = static_cast<std::size_t>(-1);
        std::vector<Slot> slots;
        std::vector<BufferLifetime> lifetimes;
        for (std::size_t n = 0; n < count; ++n) {
            if (nodes[n].kind == OpKind::Input) continue;
            if (inside_halo_of[n] < 0 && inside_concat_of[n] < 0) {
                slots.push_back({n, own, outputs[n].get_desc()});
                lifetimes.push_back(node_lifetimes[n]);
            }
            for (std::size_t slot = 0; slot < nodes[n].inputs.size(); ++slot) {
                if (!diff_is_scratch[n][slot]) continue;
                const auto producer = static_cast<std::size_t>(nodes[n].inputs[slot]);
                slots.push_back({n, slot, outputs[producer].get_desc()});
                const std::int64_t step = backward_step(count, n);  // written and added in n's backward alone
                lifetimes.push_back({0, step, step});
            }
        }
        std::vector<bool> shared(slots.size(), false);
        for (std::size_t i = 0; i < slots.size(); ++i) {
            const auto bytes = static_cast<std::int64_t>(slots[i].desc.get_size());
            std::int64_t dense = static_cast<std::int64_t>(memory::data_type_size(slots[i].desc.data_type()));
            for (const memory::dim extent : slots[i].desc.dims()) dense *= extent;
            shared[i] = !options.keep_activation_gradients && bytes == dense;
            lifetimes[i].bytes = shared[i] ? bytes : 0;
        }
        const ArenaPlan plan = plan_arena(lifetimes);
        gradient_arena_bytes = plan.bytes;
        if (plan.bytes > 0) {
            gradient_arena.reset(static_cast<std::byte*>(std::aligned_alloc(64, static_cast<std::size_t>(plan.bytes))));
            TESSERA_CHECK(gradient_arena, "cannot allocate " << plan.bytes << " bytes for the activation gradients of graph '"
                                                             << graph.name() << "'");
        }
        gradient_in_arena.assign(count, false);
        scratch_in_arena.resize(count);
        for (std::size_t n = 0; n < count; ++n) scratch_in_arena[n].assign(nodes[n].inputs.size(), false);
        for (std::size_t i = 0; i < slots.size(); ++i) {
            const Slot& slot = slots[i];
            (slot.input_slot == own ? gradient_in_arena[slot.node] : scratch_in_arena[slot.node][slot.input_slot]) = shared[i];
            memory buffer = shared[i] ? memory(slot.desc, cpu_engine(), gradient_arena.get() + plan.offsets[i])
                                      : memory(slot.desc, cpu_engine());
            if (slot.input_slot == own) {
                gradients[slot.node] = buffer;
            } else {
                diff_targets[slot.node][slot.input_slot] = buffer;
            }
        }
        for (std::size_t n = 0; n < count; ++n) {
            if (inside_halo_of[n] < 0) continue;
            const auto halo = static_cast<std::size_t>(inside_halo_of[n]);
            gradients[n] = interior_view(gradients[halo], nodes[halo], nodes[n].output_shape);
        }
        for (std::size_t n = 0; n < count; ++n) {  // after the halo views: a concatenation may sit in one
            if (inside_concat_of[n] < 0) continue;
            gradients[n] = channel_view(gradients[static_cast<std::size_t>(inside_concat_of[n])], nodes[n].output_shape, concat_first_channel[n]);
        }
    }

    // Rounds a node's value (or its gradient) to f16 and back, in place; any layout (padding included).
    // Rounds a node's value (or gradient) to bf16 and back when BF16 is emulated for it.
    void round_through_bf16(std::size_t node, const memory& value) const {
        if (rounds_to_bf16.empty() || !rounds_to_bf16[node]) return;
        TESSERA_ASSERT(value.get_desc().data_type() == memory::data_type::f32, "bf16 emulation runs on f32 buffers");
        ops::round_to_bf16(static_cast<float*>(value.get_data_handle()), static_cast<std::int64_t>(value.get_desc().get_size() / sizeof(float)));
    }

    static void round_through_half(std::size_t, const memory& value) {
        TESSERA_ASSERT(value.get_desc().data_type() == memory::data_type::f32, "f16 emulation runs on f32 buffers");
        ops::round_to_half(static_cast<float*>(value.get_data_handle()),
                           static_cast<std::int64_t>(value.get_desc().get_size() / sizeof(float)));
    }
};

namespace {

// The kernel of one node, compiled for the layouts its inputs arrive in (`in`), computing in `compute` and
// writing `output_type`; parameter(i) is the node's i-th parameter (nullptr past the last).
std::unique_ptr<Kernel> make_node_kernel(const Node& node, const std::vector<Shape>& input_shapes, const KernelInputs& in,
                                         const std::function<Parameter*(std::size_t)>& parameter, std::vector<Tensor>& buffers,
                                         bool distributed_reductions, memory::data_type compute, memory::data_type output_type) {
    std::unique_ptr<Kernel> kernel;
    try {
        switch (node.kind) {
            case OpKind::Conv:
                kernel = ops::make_conv_kernel(node.conv, input_shapes[0], node.output_shape, in, parameter(0),
                                               parameter(1), compute, output_type);
                break;
            case OpKind::ConvTranspose:
                kernel = ops::make_conv_transpose_kernel(node.conv_transpose, input_shapes[0], node.output_shape, in,
                                                         parameter(0), parameter(1), compute, output_type);
                break;
            case OpKind::Pool: kernel = ops::make_pool_kernel(node.pool, node.output_shape, in); break;
            case OpKind::BatchNorm: {
                Tensor* running_mean = &buffers[static_cast<std::size_t>(node.buffers[0])];
                Tensor* running_variance = &buffers[static_cast<std::size_t>(node.buffers[1])];
                kernel = ops::make_batch_norm_kernel(node.batch_norm, node.output_shape, in, parameter(0),
                                                     parameter(1), running_mean, running_variance,
                                                     distributed_reductions);
                break;
            }
            case OpKind::Relu: kernel = ops::make_relu_kernel(in); break;
            case OpKind::Add: kernel = ops::make_add_kernel(in); break;
            case OpKind::Concat: kernel = ops::make_concat_kernel(input_shapes, node.output_shape, in); break;
            case OpKind::GlobalAvgPool:
                kernel = ops::make_global_avg_pool_kernel(input_shapes[0], in, distributed_reductions);
                break;
            case OpKind::Halo: kernel = ops::make_halo_kernel(node.halo, input_shapes[0], node.output_shape, in); break;
            case OpKind::Upsample: kernel = ops::make_upsample_kernel(node.upsample_factor, node.output_shape, in); break;
            case OpKind::Crop: kernel = ops::make_crop_kernel(node.crop_offset, node.output_shape, in); break;
            case OpKind::Dense:
                kernel = ops::make_dense_kernel(input_shapes[0], node.output_shape, in, parameter(0), parameter(1));
                break;
            case OpKind::Input: break;
        }
    } catch (const dnnl::error& error) {
        TESSERA_REJECT("oneDNN cannot compile " << op_name(node.kind) << " '" << node.name << "' for input "
                                                << shape_to_string(input_shapes[0]) << ": " << error.what());
    }
    return kernel;
}

}  // namespace

Executor::Executor(const Graph& graph, ExecutorOptions options) : m_impl(std::make_unique<Impl>(graph, options)) {
    Impl& impl = *m_impl;
    impl.kernel_threads = ops::num_threads();
    TESSERA_CHECK(graph.input_node() >= 0, "graph '" << graph.name() << "' has no input");
    TESSERA_CHECK(graph.output_node() != graph.input_node(), "graph '" << graph.name() << "' has no output op");
    const std::vector<std::vector<int>> consumers = graph.consumers();
    for (int output : graph.output_nodes()) {
        TESSERA_CHECK(output != graph.input_node() && consumers[static_cast<std::size_t>(output)].empty(),
                      "graph '" << graph.name() << "': output '" << graph.node(output).name
                                << "' must be computed and feed no other node (its gradient comes from the loss alone)");
    }

    for (const ParameterSpec& spec : graph.parameters()) {
        impl.parameters.push_back({spec.name, Tensor::zeros(spec.shape, DType::F32), Tensor::zeros(spec.shape, DType::F32),
                                   spec.apply_weight_decay});
    }
    for (const ParameterSpec& spec : graph.buffers()) impl.buffers.push_back(Tensor::zeros(spec.shape, DType::F32));

    const std::vector<Node>& nodes = graph.nodes();
    const std::size_t count = nodes.size();
    impl.kernels.resize(count);
    impl.timings.resize(count);
    impl.outputs.resize(count);
    impl.gradients.resize(count);
    impl.diff_targets.resize(count);
    impl.diff_is_scratch.resize(count);
    impl.accumulate.resize(count);
    impl.shared_uses.resize(count);

    const auto input_id = static_cast<std::size_t>(graph.input_node());
    const memory::desc input_desc = ops::plain_desc(nodes[input_id].output_shape);
    impl.outputs[input_id] = memory(input_desc, cpu_engine());

    std::vector<int> last_user(graph.parameters().size(), -1);
    for (const Node& node : nodes) {
        for (int p : node.parameters) last_user[static_cast<std::size_t>(p)] = node.id;
    }
    auto parameter = [&](const Node& node, std::size_t i) -> Parameter* {
        if (i >= node.parameters.size()) return nullptr;
        const auto p = static_cast<std::size_t>(node.parameters[i]);
        Parameter& shared = impl.parameters[p];
        if (last_user[p] == node.id) return &shared;
        auto copy = std::make_unique<Parameter>(
            Parameter{shared.name, shared.value, Tensor::zeros(shared.value.shape(), DType::F32), shared.apply_weight_decay});
        Parameter* result = copy.get();
        impl.shared_uses[static_cast<std::size_t>(node.id)].push_back({p, std::move(copy)});
        return result;
    };
    std::vector<bool> is_output(count, false);
    for (int output : graph.output_nodes()) is_output[static_cast<std::size_t>(output)] = true;
    // Data: the graph input, or a simulated core's halo buffer around it. No gradient flows to data, and
    // the first layer reading it keeps f32 in BF16 mode.
    std::vector<bool> is_data(count, false);
    for (const Node& node : nodes) {
        is_data[static_cast<std::size_t>(node.id)] =
            node.kind == OpKind::Input || (node.kind == OpKind::Halo && is_data[static_cast<std::size_t>(node.inputs[0])]);
    }
    const bool native_bf16 = impl.options.precision != Precision::BF16 || (!impl.options.emulate_bf16 && ops::has_native_bf16());
    const bool emulated_bf16 = !native_bf16;
    if (emulated_bf16) impl.rounds_to_bf16.assign(count, false);
    for (const Node& node : nodes) {
        if (node.kind == OpKind::Input) continue;
        KernelInputs in;
        impl.scratchpad.begin_kernel();  // its call buffers may share bytes with other kernels'
        in.scratchpad = &impl.scratchpad;
        std::vector<Shape> input_shapes;
        for (int input : node.inputs) {
            in.descs.push_back(impl.outputs[static_cast<std::size_t>(input)].get_desc());
            in.needs_gradient.push_back(!is_data[static_cast<std::size_t>(input)]);
            input_shapes.push_back(nodes[static_cast<std::size_t>(input)].output_shape);
        }
        // Convolutions compute in bf16 in BF16 mode, but the first (it reads the f32 input) stays f32, as
        // do layers with fewer than 16 channels (they cannot fill a bf16 block: oneDNN's bf16 kernels
        // for them, and the batch norms after them, are reference code), and the output layer writes
        // f32 logits. Every other op follows the type of what it is given.
        const bool reads_graph_input = is_data[static_cast<std::size_t>(node.inputs[0])];
        const bool narrow = std::min(input_shapes[0].size() > 1 ? input_shapes[0][1] : 0,
                                     node.output_shape.size() > 1 ? node.output_shape[1] : 0) < 16;
        const bool bf16_compute = impl.options.precision == Precision::BF16 && !reads_graph_input && !narrow;
        // Without bf16 dot products (ops::has_native_bf16) the same nodes run in f32 and are rounded to bf16.
        const memory::data_type compute = bf16_compute && native_bf16 ? memory::data_type::bf16 : memory::data_type::f32;
        if (emulated_bf16) {
            const bool convolution = node.kind == OpKind::Conv || node.kind == OpKind::ConvTranspose;
            impl.rounds_to_bf16[static_cast<std::size_t>(node.id)] =
                !is_output[static_cast<std::size_t>(node.id)] &&
                (convolution ? bf16_compute : impl.rounds_to_bf16[static_cast<std::size_t>(node.inputs[0])]);
        }
        const memory::data_type output_type = is_output[static_cast<std::size_t>(node.id)] ? memory::data_type::f32 : compute;
        const std::unique_ptr<Kernel>& kernel = impl.kernels[static_cast<std::size_t>(node.id)] =
            make_node_kernel(node, input_shapes, in, [&](std::size_t i) { return parameter(node, i); }, impl.buffers,
                             impl.options.distributed_reductions, compute, output_type);
        const auto id = static_cast<std::size_t>(node.id);
        impl.outputs[id] = memory(kernel->output_desc(), cpu_engine());
        // A halo buffer's outer rows are written by the core mesh from the neighbours' tiles, never by a
        // node: start them at zero (the image border's value) rather than at whatever the allocation held
        // — on an executor without a mesh that was garbage (1e30 gradients after other allocations were
        // freed) and denormals that slowed convolutions 100×.
        if (node.kind == OpKind::Halo) std::memset(impl.outputs[id].get_data_handle(), 0, kernel->output_desc().get_size());
        impl.accumulate[id] = dnnl::binary(impl.scratchpad.fit(dnnl::binary::primitive_desc(
            dnnl::binary::desc(dnnl::algorithm::binary_add, kernel->output_desc(), kernel->output_desc(),
                               kernel->output_desc()),
            Scratchpad::attributes(), cpu_engine())));
    }

    // Nodes into the halo buffers they alone feed (Impl::inside_halo_of). f32 only: the emulated
    // bf16 and f16 modes round whole buffers in place.
    impl.inside_halo_of.assign(count, -1);
    impl.halo_in_place.assign(count, false);
    if (impl.options.precision == Precision::F32 && !ops::switched_off("TESSERA_HALO_IN_PLACE")) {
        for (const Node& node : nodes) {
            if (node.kind != OpKind::Halo) continue;
            const auto producer = static_cast<std::size_t>(node.inputs[0]);
            const Node& tile = nodes[producer];
            if (!impl.kernels[producer] || consumers[producer].size() != 1 || is_output[producer]) continue;  // the input node has none
            if (!impl.kernels[producer]->writes_into_views() || !ops::halo_covers_input(node.halo, tile.output_shape)) continue;
            const auto id = static_cast<std::size_t>(node.id);
            impl.outputs[producer] = Impl::interior_view(impl.outputs[id], node, tile.output_shape);
            impl.inside_halo_of[producer] = node.id;
            impl.halo_in_place[id] = true;
        }
    }

    // Nodes into the channel ranges of the concatenations they alone feed (Impl::inside_concat_of), after
    // the halo buffers (a concatenation may write into one). f32 only, as above.
    impl.inside_concat_of.assign(count, -1);
    impl.concat_first_channel.assign(count, 0);
    if (impl.options.precision == Precision::F32 && !ops::switched_off("TESSERA_CONCAT_IN_PLACE")) {
        for (const Node& node : nodes) {
            const auto id = static_cast<std::size_t>(node.id);
            if (node.kind != OpKind::Concat || !impl.kernels[id]->leaves_inputs_in_place()) continue;
            std::int64_t first = 0;
            for (std::size_t slot = 0; slot < node.inputs.size(); ++slot) {
                const auto producer = static_cast<std::size_t>(node.inputs[slot]);
                const Shape& shape = nodes[producer].output_shape;
                const std::int64_t at = first;
                first += shape[1];
                if (!impl.kernels[producer] || consumers[producer].size() != 1 || is_output[producer] || is_data[producer] ||
                    impl.inside_halo_of[producer] >= 0 || impl.inside_concat_of[producer] >= 0)
                    continue;
                memory view;
                try {
                    view = Impl::channel_view(impl.outputs[id], shape, at);
                } catch (const dnnl::error&) {  // the range cuts a channel block
                    continue;
                }
                if (!impl.kernels[producer]->write_into_channels(view.get_desc())) continue;
                impl.kernels[id]->leave_input_in_place(slot);
                impl.outputs[producer] = view;
                impl.inside_concat_of[producer] = node.id;
                impl.concat_first_channel[producer] = at;
            }
        }
    }

    // Backward runs in reverse order: the last consumer of a node writes its gradient first (directly);
    // every later contribution lands in scratch and is added.
    std::vector<bool> written(count, false);
    for (std::size_t n = count; n-- > 0;) {
        const Node& node = nodes[n];
        impl.diff_targets[n].resize(node.inputs.size());
        impl.diff_is_scratch[n].assign(node.inputs.size(), false);
        for (std::size_t slot = 0; slot < node.inputs.size(); ++slot) {
            const auto producer = static_cast<std::size_t>(node.inputs[slot]);
            if (is_data[producer]) continue;
            impl.diff_is_scratch[n][slot] = written[producer];
            written[producer] = true;
        }
    }
    impl.allocate_gradients();
    for (std::size_t n = 0; n < count; ++n) {
        for (std::size_t slot = 0; slot < nodes[n].inputs.size(); ++slot) {
            const auto producer = static_cast<std::size_t>(nodes[n].inputs[slot]);
            if (is_data[producer]) continue;
            if (!impl.diff_is_scratch[n][slot]) impl.diff_targets[n][slot] = impl.gradients[producer];
        }
    }

    for (std::size_t n = 0; n < count; ++n) {
        if (!is_data[n] && consumers[n].empty() && !is_output[n]) impl.unconsumed.push_back(n);
    }

    for (int output : graph.output_nodes()) {
        const auto output_id = static_cast<std::size_t>(output);
        const memory::desc output_plain = ops::plain_desc(nodes[output_id].output_shape);
        impl.output_to_plain.emplace_back(impl.scratchpad, impl.outputs[output_id].get_desc(), output_plain);
        impl.plain_to_output_gradient.emplace_back(impl.scratchpad, output_plain, impl.gradients[output_id].get_desc());
    }
    impl.plain_to_input = Copy(impl.scratchpad, input_desc, input_desc);
    impl.scratchpad.allocate();
}

Executor::~Executor() = default;


const Graph& Executor::graph() const { return m_impl->graph; }
const ExecutorOptions& Executor::options() const { return m_impl->options; }

std::span<Parameter> Executor::parameters() { return m_impl->parameters; }
std::span<const Parameter> Executor::parameters() const { return m_impl->parameters; }
std::span<Tensor> Executor::buffers() { return m_impl->buffers; }

void Executor::initialize_parameters(std::uint64_t seed) {
    const auto& specs = m_impl->graph.parameters();
    for (std::size_t p = 0; p < specs.size(); ++p) {
        Tensor& value = m_impl->parameters[p].value;
        float* data = value.data<float>();
        const std::int64_t count = value.num_elements();
        switch (specs[p].initializer) {
            case Initializer::Zeros: value.fill(0.0); break;
            case Initializer::Ones: value.fill(1.0); break;
            case Initializer::Constant: value.fill(specs[p].constant); break;
            case Initializer::Normal: {
                SeededRandom random(seed, p);
                for (std::int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(specs[p].constant * random.normal());
                break;
            }
            case Initializer::HeNormal: {
                SeededRandom random(seed, p);  // one stream per parameter: adding a layer leaves the others alone
                const double sigma = std::sqrt(2.0 / static_cast<double>(std::max<std::int64_t>(specs[p].fan_in, 1)));
                for (std::int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(sigma * random.normal());
                break;
            }
        }
        m_impl->parameters[p].gradient.fill(0.0);
    }
    const auto& buffer_specs = m_impl->graph.buffers();
    for (std::size_t b = 0; b < buffer_specs.size(); ++b) {
        m_impl->buffers[b].fill(buffer_specs[b].initializer == Initializer::Ones ? 1.0 : 0.0);
    }
}

Tensor Executor::forward(const Tensor& input, Mode mode) {
    begin_forward(input, mode);
    for (const Node& node : m_impl->graph.nodes()) {
        for (int phase = 0; phase < reduction_phases(node.id, Pass::Forward); ++phase) {
            // One executor: its partial is the total.
            const std::vector<double> sums = reduction_partial(node.id, Pass::Forward, phase);
            reduction_total(node.id, Pass::Forward, phase, sums);
        }
        forward_node(node.id);
    }
    return output();
}

void Executor::backward(const Tensor& output_gradient) {
    backward(std::span<const Tensor>(&output_gradient, 1));
}

void Executor::backward(std::span<const Tensor> output_gradients) {
    begin_backward(output_gradients);
    const auto& nodes = m_impl->graph.nodes();
    for (std::size_t n = nodes.size(); n-- > 0;) {
        const int id = nodes[n].id;
        for (int phase = 0; phase < reduction_phases(id, Pass::Backward); ++phase) {
            const std::vector<double> sums = reduction_partial(id, Pass::Backward, phase);
            reduction_total(id, Pass::Backward, phase, sums);
        }
        backward_node(id);
    }
    cpu_stream().wait();
}

void Executor::begin_forward(const Tensor& input, Mode mode) {
    Impl& impl = *m_impl;
    const std::vector<Node>& nodes = impl.graph.nodes();
    const auto input_id = static_cast<std::size_t>(impl.graph.input_node());
    TESSERA_CHECK(input.shape() == nodes[input_id].output_shape && input.dtype() == DType::F32,
                  "graph '" << impl.graph.name() << "' expects an f32 input of shape "
                            << shape_to_string(nodes[input_id].output_shape) << ", got " << dtype_name(input.dtype())
                            << " " << shape_to_string(input.shape()));
    const Tensor dense_input = input.contiguous();
    impl.plain_to_input(ops::wrap(dense_input), impl.outputs[input_id]);
    impl.sync_shared_values();
    impl.mode = mode;
    impl.ran_forward_training = false;
    for (NodeTiming& timing : impl.timings) timing.forward_seconds = 0;
}

void Executor::forward_node(int id) {
    Impl& impl = *m_impl;
    const Node& node = impl.graph.node(id);
    if (node.kind == OpKind::Input) return;
    const auto n = static_cast<std::size_t>(id);
    // oneDNN's CPU stream runs each primitive to completion in this thread, so wall time per node is exact.
    const auto start = std::chrono::steady_clock::now();
    if (!impl.halo_in_place[n]) impl.kernels[n]->forward(impl.inputs_of(node), impl.outputs[n], impl.mode);
    if (impl.options.precision == Precision::F16) impl.round_through_half(n, impl.outputs[n]);
    impl.round_through_bf16(n, impl.outputs[n]);
    impl.timings[n].forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::vector<int>& outputs = impl.graph.output_nodes();
    if (id == *std::max_element(outputs.begin(), outputs.end())) impl.ran_forward_training = impl.mode == Mode::Train;
}

Tensor Executor::output(std::size_t index) const {
    Impl& impl = *m_impl;
    const std::vector<int>& outputs = impl.graph.output_nodes();
    TESSERA_CHECK(index < outputs.size(), "graph '" << impl.graph.name() << "' has " << outputs.size()
                                                    << " outputs, asked for output " << index);
    const auto output_id = static_cast<std::size_t>(outputs[index]);
    Tensor result = Tensor::empty(impl.graph.nodes()[output_id].output_shape, DType::F32);
    impl.output_to_plain[index](impl.outputs[output_id], ops::wrap(result));
    cpu_stream().wait();
    return result;
}

std::vector<Tensor> Executor::outputs() const {
    std::vector<Tensor> result;
    for (std::size_t i = 0; i < m_impl->graph.output_nodes().size(); ++i) result.push_back(output(i));
    return result;
}

void Executor::begin_backward(const Tensor& output_gradient) {
    begin_backward(std::span<const Tensor>(&output_gradient, 1));
}

void Executor::begin_backward(std::span<const Tensor> output_gradients) {
    Impl& impl = *m_impl;
    TESSERA_CHECK(impl.ran_forward_training, "backward needs a forward pass in Mode::Train first");
    const std::vector<Node>& nodes = impl.graph.nodes();
    const std::vector<int>& outputs = impl.graph.output_nodes();
    TESSERA_CHECK(output_gradients.size() == 1 || output_gradients.size() == outputs.size(),
                  "graph '" << impl.graph.name() << "' has " << outputs.size() << " outputs; backward needs a gradient for "
                            << "each (or for the first alone), got " << output_gradients.size());
    for (std::size_t n : impl.unconsumed) {
        std::memset(impl.gradients[n].get_data_handle(), 0, impl.gradients[n].get_desc().get_size());
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        const auto output_id = static_cast<std::size_t>(outputs[i]);
        if (i >= output_gradients.size()) {  // outputs without a gradient given start at zero
            std::memset(impl.gradients[output_id].get_data_handle(), 0, impl.gradients[output_id].get_desc().get_size());
            continue;
        }
        TESSERA_CHECK(output_gradients[i].shape() == nodes[output_id].output_shape,
                      "backward expects a gradient of shape " << shape_to_string(nodes[output_id].output_shape) << " for '"
                                                              << nodes[output_id].name << "', got "
                                                              << shape_to_string(output_gradients[i].shape()));
        const Tensor dense_gradient = output_gradients[i].contiguous();
        impl.plain_to_output_gradient[i](ops::wrap(dense_gradient), impl.gradients[output_id]);
        if (impl.options.precision == Precision::F16) impl.round_through_half(output_id, impl.gradients[output_id]);
    }
    impl.sync_shared_values();
    for (NodeTiming& timing : impl.timings) timing.backward_seconds = 0;
}

void Executor::backward_node(int id) {
    const Node& node = m_impl->graph.node(id);
    if (node.kind == OpKind::Input) return;
    backward_part(id, true, true);
}

std::string Executor::implementation(int id) const {
    const Node& node = m_impl->graph.node(id);
    return node.kind == OpKind::Input ? std::string() : m_impl->kernels[static_cast<std::size_t>(id)]->implementation();
}

bool Executor::splits_backward(int id) const {
    const Node& node = m_impl->graph.node(id);
    return node.kind != OpKind::Input && m_impl->kernels[static_cast<std::size_t>(id)]->splits_backward();
}

void Executor::backward_node_inputs(int id) {
    TESSERA_CHECK(splits_backward(id), "node '" << m_impl->graph.node(id).name << "' computes its backward in one call");
    backward_part(id, true, false);
}

void Executor::backward_node_weights(int id) {
    TESSERA_CHECK(splits_backward(id), "node '" << m_impl->graph.node(id).name << "' computes its backward in one call");
    backward_part(id, false, true);
}

void Executor::backward_part(int id, bool inputs, bool weights) {
    Impl& impl = *m_impl;
    const Node& node = impl.graph.node(id);
    const auto n = static_cast<std::size_t>(id);
    const std::vector<Node>& nodes = impl.graph.nodes();
    const auto start = std::chrono::steady_clock::now();
    ops::Kernel& kernel = *impl.kernels[n];
    if (impl.halo_in_place[n]) {
        // The tile's gradient is this buffer's interior: nothing to copy.
    } else if (inputs && weights) {
        kernel.backward(impl.inputs_of(node), impl.outputs[n], impl.gradients[n], impl.diff_targets[n]);
    } else if (inputs) {
        kernel.backward_inputs(impl.inputs_of(node), impl.outputs[n], impl.gradients[n], impl.diff_targets[n]);
    } else {
        kernel.backward_weights(impl.inputs_of(node), impl.outputs[n], impl.gradients[n]);
    }
    if (inputs) {
        for (std::size_t slot = 0; slot < node.inputs.size(); ++slot) {
            if (!impl.diff_is_scratch[n][slot]) continue;
            const auto producer = static_cast<std::size_t>(node.inputs[slot]);
            impl.scratchpad.execute(impl.accumulate[producer], {{DNNL_ARG_SRC_0, impl.gradients[producer]},
                                                                {DNNL_ARG_SRC_1, impl.diff_targets[n][slot]},
                                                                {DNNL_ARG_DST, impl.gradients[producer]}});
        }
    }
    if (weights) {
        for (const Impl::SharedUse& use : impl.shared_uses[n]) {
            Tensor& total = impl.parameters[use.parameter].gradient;
            float* sum = total.data<float>();
            const float* part = use.copy->gradient.data<float>();
            for (std::int64_t i = 0; i < total.num_elements(); ++i) sum[i] += part[i];
        }
    }
    if (inputs) {
        if (impl.options.precision == Precision::F16) {  // every gradient this node produced, once complete
            for (int input : node.inputs) {
                const auto producer = static_cast<std::size_t>(input);
                if (nodes[producer].kind != OpKind::Input) impl.round_through_half(producer, impl.gradients[producer]);
            }
        }
        for (int input : node.inputs) {
            const auto producer = static_cast<std::size_t>(input);
            if (nodes[producer].kind != OpKind::Input) impl.round_through_bf16(producer, impl.gradients[producer]);
        }
    }
    impl.timings[n].backward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Executor::reduction_phases(int id, Pass pass) const {
    const Node& node = m_impl->graph.node(id);
    if (node.kind == OpKind::Input) return 0;
    return m_impl->kernels[static_cast<std::size_t>(id)]->reduction_phases(pass, m_impl->mode);
}

std::vector<double> Executor::reduction_partial(int id, Pass pass, int phase) {
    Impl& impl = *m_impl;
    const Node& node = impl.graph.node(id);
    TESSERA_CHECK(phase >= 0 && phase < reduction_phases(id, pass),
                  "node '" << node.name << "' has " << reduction_phases(id, pass) << " reduction phases, asked for " << phase);
    const auto n = static_cast<std::size_t>(id);
    const auto start = std::chrono::steady_clock::now();
    std::vector<double> sums =
        impl.kernels[n]->partial(pass, phase, impl.inputs_of(node), impl.outputs[n], impl.gradients[n], impl.diff_targets[n]);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (pass == Pass::Forward ? impl.timings[n].forward_seconds : impl.timings[n].backward_seconds) += seconds;
    return sums;
}

void Executor::reduction_total(int id, Pass pass, int phase, std::span<const double> total) {
    const Node& node = m_impl->graph.node(id);
    TESSERA_CHECK(phase >= 0 && phase < reduction_phases(id, pass),
                  "node '" << node.name << "' has " << reduction_phases(id, pass) << " reduction phases, got a total for "
                           << phase);
    m_impl->kernels[static_cast<std::size_t>(id)]->total(pass, phase, total);
}

void Executor::gradient_changed(int id) {
    Impl& impl = *m_impl;
    const Node& node = impl.graph.node(id);
    if (impl.options.precision == Precision::F16 && node.kind != OpKind::Input) {
        impl.round_through_half(static_cast<std::size_t>(id), impl.gradients[static_cast<std::size_t>(id)]);
    }
    if (node.kind != OpKind::Input) impl.round_through_bf16(static_cast<std::size_t>(id), impl.gradients[static_cast<std::size_t>(id)]);
}

ops::TileBuffer Executor::value_buffer(int id) {
    m_impl->graph.node(id);
    return ops::tile_buffer_of(m_impl->outputs[static_cast<std::size_t>(id)]);
}

ops::TileBuffer Executor::gradient_buffer(int id) {
    const Node& node = m_impl->graph.node(id);
    TESSERA_CHECK(node.kind != OpKind::Input, "the graph input has no gradient");
    return ops::tile_buffer_of(m_impl->gradients[static_cast<std::size_t>(id)]);
}

Tensor Executor::activation(int node) const {
    m_impl->graph.node(node);
    return ops::to_plain_tensor(m_impl->outputs[static_cast<std::size_t>(node)]);
}

Tensor Executor::activation_gradient(int node) const {
    const Node& n = m_impl->graph.node(node);
    TESSERA_CHECK(n.kind != OpKind::Input, "the graph input has no gradient (it is data, not a parameter)");
    TESSERA_CHECK(m_impl->options.keep_activation_gradients,
                  "the gradient w.r.t. '" << n.name << "' is not kept after backward: activation gradients share memory in "
                                          "graph '" << m_impl->graph.name()
                                          << "'; build its executor with keep_activation_gradients to read them");
    return ops::to_plain_tensor(m_impl->gradients[static_cast<std::size_t>(node)]);
}

std::span<const NodeTiming> Executor::timings() const { return m_impl->timings; }

int Executor::kernel_threads() const { return m_impl->kernel_threads; }

std::int64_t Executor::workspace_bytes() const {
    const Impl& impl = *m_impl;
    std::int64_t bytes = impl.scratchpad.bytes() + impl.gradient_arena_bytes;
    for (std::size_t n = 0; n < impl.outputs.size(); ++n) {
        bytes += static_cast<std::int64_t>(impl.outputs[n].get_desc().get_size());
        if (impl.gradients[n] && !impl.gradient_in_arena[n]) bytes += static_cast<std::int64_t>(impl.gradients[n].get_desc().get_size());
        if (impl.kernels[n]) bytes += impl.kernels[n]->bytes();
        for (std::size_t slot = 0; slot < impl.diff_targets[n].size(); ++slot) {
            if (impl.diff_is_scratch[n][slot] && !impl.scratch_in_arena[n][slot]) {
                bytes += static_cast<std::int64_t>(impl.diff_targets[n][slot].get_desc().get_size());
            }
        }
    }
    return bytes;
}

MemoryReport Executor::memory_report() const {
    const Impl& impl = *m_impl;
    MemoryReport report;
    for (const Parameter& p : impl.parameters) {
        report.weights += p.value.num_elements() * 4;
        report.weight_gradients += p.gradient.num_elements() * 4;
    }
    for (const auto& uses : impl.shared_uses) {  // a shared parameter's earlier users' own gradients
        for (const Impl::SharedUse& use : uses) report.weight_gradients += use.copy->gradient.num_elements() * 4;
    }
    for (const Tensor& buffer : impl.buffers) report.weights += buffer.num_elements() * 4;
    report.workspace = impl.scratchpad.bytes();  // the kernels' shared scratchpad (no node's alone)
    // The arena holds gradients (and scratch gradients) of every kind of node at once: all of it counts
    // as activation gradients. Per node, node_bytes still names what the node's buffers measure.
    report.activation_gradients = impl.gradient_arena_bytes;
    const auto& nodes = impl.graph.nodes();
    for (std::size_t n = 0; n < impl.outputs.size(); ++n) {
        // A node inside a halo buffer or a concatenation's owns no bytes: that node's buffers count them.
        const bool inside_another = impl.inside_halo_of[n] >= 0 || impl.inside_concat_of[n] >= 0;
        const auto value = inside_another ? std::int64_t{0} : static_cast<std::int64_t>(impl.outputs[n].get_desc().get_size());
        const std::int64_t gradient =
            impl.gradients[n] && !inside_another ? static_cast<std::int64_t>(impl.gradients[n].get_desc().get_size()) : 0;
        const std::int64_t own_gradient = impl.gradient_in_arena[n] ? 0 : gradient;
        if (nodes[n].kind == OpKind::Halo) {
            report.halo_buffers += value + own_gradient;
        } else {
            report.activations += value;
            report.activation_gradients += own_gradient;
        }
        const std::int64_t kernel = impl.kernels[n] ? impl.kernels[n]->bytes() : 0;
        std::int64_t scratch = 0, own_scratch = 0;
        for (std::size_t slot = 0; slot < impl.diff_targets[n].size(); ++slot) {
            if (!impl.diff_is_scratch[n][slot]) continue;
            const auto bytes = static_cast<std::int64_t>(impl.diff_targets[n][slot].get_desc().get_size());
            scratch += bytes;
            if (!impl.scratch_in_arena[n][slot]) own_scratch += bytes;
        }
        report.workspace += kernel + own_scratch;
        report.node_bytes.push_back(value + gradient + kernel + scratch);
    }
    return report;
}

}  // namespace tessera::graph
