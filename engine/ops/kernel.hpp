// The kernel interface inside an Executor (graph/executor.hpp): each op family compiles its oneDNN
// primitives once for fixed shapes and layouts and runs forward and backward over oneDNN memories.
// Not a public API: the graph compiles kernels through the factories of kernels.hpp, and tests and
// bench/bm_ops may call a factory directly to run one op.
//
//   Scratchpad scratchpad;
//   KernelInputs in{.descs = {plain_desc(x.shape())}, .needs_gradient = {true}, .scratchpad = &scratchpad};
//   std::unique_ptr<Kernel> relu = make_relu_kernel(in);
//   scratchpad.allocate();                                  // after every primitive was created
//   relu->forward({wrap(x)}, output, Mode::Train);          // output in relu->output_desc()
#pragma once

#include "core/error.hpp"
#include "ops/attributes.hpp"
#include "ops/dnnl_support.hpp"
#include "tensor/parameter.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera::ops {

using memory = dnnl::memory;

// oneDNN counts dilation from 0 (a dense kernel); Tessera from 1, as PyTorch.
inline memory::dims dnnl_dilation(const Extents& dilation) {
    memory::dims result;
    for (std::int64_t d : dilation) result.push_back(d - 1);
    return result;
}

// ---- scratchpads ------------------------------------------------------------------------------
//
// oneDNN's default scratchpad (scratchpad_mode::library; Debian's 2.6 is built without
// DNNL_ENABLE_CONCURRENT_EXEC) may belong to a thread: its gemm-based kernels (gemm:jit convolutions,
// which AVX2 CPUs run for 3D backward passes) and Winograd share one buffer per thread, sized by the
// primitives created on that thread and freed when that thread's count of them returns to zero — such
// a primitive must run on the thread that created it. A simulated core's kernels are created on one
// pool thread and run on whichever thread picks the core up next (a kernel reaching past another
// thread's smaller buffer, or into a freed one: tests/engine/mesh/test_uneven_threads.cpp). So every
// primitive here is created with a user scratchpad and runs with its executor's own buffer, sized for
// the largest of them: an executor runs one primitive at a time, and the buffer goes where it goes.
class Scratchpad {
public:
    static const dnnl::primitive_attr& attributes() {
        static const dnnl::primitive_attr attributes = [] {
            dnnl::primitive_attr a;
            a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
            return a;
        }();
        return attributes;
    }
    // Widens the buffer for a primitive about to be created; returns its descriptor.
    template <class PrimitiveDesc>
    PrimitiveDesc fit(PrimitiveDesc pd) {
        TESSERA_ASSERT(!m_buffer, "every primitive is created before the scratchpad is allocated");
        m_bytes = std::max(m_bytes, pd.scratchpad_desc().get_size());
        return pd;
    }
    // Buffers a kernel needs only while one of its forward or backward calls runs (a reordered copy of
    // the weights, a gradient in the primitive's layout before it is reordered into place). An executor
    // runs one kernel call at a time, so the kernels share one arena: each kernel's buffers side by side
    // (they are live together within a call), every kernel's from offset 0 (begin_kernel). Without
    // begin_kernel, nothing is shared.
    void begin_kernel() { m_call_offset = 0; }
    memory call_buffer(const memory::desc& desc) {
        TESSERA_ASSERT(!m_allocated, "every kernel is created before the scratchpad is allocated");
        constexpr std::size_t alignment = 64;
        const std::size_t offset = m_call_offset;
        m_call_offset = (offset + desc.get_size() + alignment - 1) / alignment * alignment;
        m_call_bytes = std::max(m_call_bytes, m_call_offset);
        memory buffer(desc, cpu_engine(), DNNL_MEMORY_NONE);  // placed in the arena by allocate()
        m_call_buffers.push_back({buffer, offset});
        return buffer;
    }
    void allocate() {
        TESSERA_ASSERT(!m_allocated, "a scratchpad is allocated once");
        m_allocated = true;
        if (m_bytes > 0) {
            m_buffer = memory(memory::desc({static_cast<memory::dim>(m_bytes)}, memory::data_type::u8, memory::format_tag::a),
                              cpu_engine());
        }
        if (m_call_bytes > 0) {
            m_call_arena = memory(memory::desc({static_cast<memory::dim>(m_call_bytes)}, memory::data_type::u8, memory::format_tag::a),
                                  cpu_engine());
            auto* base = static_cast<char*>(m_call_arena.get_data_handle());
            for (CallBuffer& placed : m_call_buffers) placed.buffer.set_data_handle(base + placed.offset);
        }
    }
    // Runs a primitive of this executor on the calling thread.
    void execute(const dnnl::primitive& primitive, std::unordered_map<int, memory> args) const {
        if (m_buffer) args[DNNL_ARG_SCRATCHPAD] = m_buffer;
        primitive.execute(cpu_stream(), args);
    }
    // oneDNN's scratchpad and the kernels' call arena.
    std::int64_t bytes() const { return static_cast<std::int64_t>(m_bytes + m_call_bytes); }

private:
    struct CallBuffer {
        memory buffer;
        std::size_t offset = 0;
    };
    std::size_t m_bytes = 0;
    memory m_buffer;
    bool m_allocated = false;
    std::size_t m_call_offset = 0, m_call_bytes = 0;
    std::vector<CallBuffer> m_call_buffers;
    memory m_call_arena;
};

// How long a kernel's converted or staged copy must live: only during the call that makes it (in the
// scratchpad's shared arena), or kept from that call to a later one (backward reading forward's copy).
enum class Lifetime { Call, Kept };


// A reorder primitive with a user scratchpad.
inline dnnl::reorder make_reorder(Scratchpad& scratchpad, const memory::desc& from, const memory::desc& to) {
    return dnnl::reorder(scratchpad.fit(
        dnnl::reorder::primitive_desc(cpu_engine(), from, cpu_engine(), to, Scratchpad::attributes())));
}

// Whether two layouts place every element at the same offset — 16 channels channels-last and one 16-channel
// block, say — so that a value in one is the other without a copy (defined below).
bool same_placement(const memory::desc& a, const memory::desc& b);

// The same bytes under another layout's name.
inline memory viewed_as(const memory& value, const memory::desc& desc) {
    return value.get_desc() == desc ? value : memory(desc, cpu_engine(), value.get_data_handle());
}

// Brings a value into the layout a primitive wants; no copy when they agree (or place every element alike).
class Converted {
public:
    Converted() = default;
    Converted(Scratchpad& scratchpad, const memory::desc& from, const memory::desc& to, Lifetime lifetime)
        : m_scratchpad(&scratchpad), m_needed(!same_placement(from, to)), m_kept(lifetime == Lifetime::Kept), m_to(to) {
        if (!m_needed) return;
        m_target = m_kept ? memory(to, cpu_engine()) : scratchpad.call_buffer(to);
        m_reorder = make_reorder(scratchpad, from, to);
    }
    memory operator()(const memory& source) {
        if (!m_needed) return viewed_as(source, m_to);
        m_scratchpad->execute(m_reorder, {{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, m_target}});
        return m_target;
    }
    // Its own bytes (a call-lifetime copy is counted in the scratchpad's arena).
    std::int64_t bytes() const { return m_needed && m_kept ? static_cast<std::int64_t>(m_target.get_desc().get_size()) : 0; }

private:
    Scratchpad* m_scratchpad = nullptr;
    bool m_needed = false;
    bool m_kept = true;
    memory::desc m_to;
    memory m_target;
    dnnl::reorder m_reorder;
};

// A value a primitive produces in its own layout that must land in a given memory of another layout:
// written there directly when the layouts agree, else through a scratch buffer and a reorder.
// destination() and finish() belong to one kernel call: the scratch buffer lives in the scratchpad's
// shared arena.
class Staged {
public:
    Staged() = default;
    Staged(Scratchpad& scratchpad, const memory::desc& produced, const memory::desc& target)
        : m_scratchpad(&scratchpad), m_direct(same_placement(produced, target)), m_produced(produced) {
        if (m_direct) return;
        m_scratch = scratchpad.call_buffer(produced);
        m_reorder = make_reorder(scratchpad, produced, target);
    }
    memory destination(const memory& target) const { return m_direct ? viewed_as(target, m_produced) : m_scratch; }
    void finish(const memory& target) {
        if (!m_direct) m_scratchpad->execute(m_reorder, {{DNNL_ARG_FROM, m_scratch}, {DNNL_ARG_TO, target}});
    }
    std::int64_t bytes() const { return 0; }  // in the scratchpad's arena

private:
    Scratchpad* m_scratchpad = nullptr;
    bool m_direct = true;
    memory::desc m_produced;
    memory m_scratch;
    dnnl::reorder m_reorder;
};

// A copy between layouts that is always performed (also when the layouts agree).
class Copy {
public:
    Copy() = default;
    Copy(Scratchpad& scratchpad, const memory::desc& from, const memory::desc& to)
        : m_scratchpad(&scratchpad), m_reorder(make_reorder(scratchpad, from, to)) {}
    void operator()(const memory& from, const memory& to) {
        m_scratchpad->execute(m_reorder, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    }

private:
    Scratchpad* m_scratchpad = nullptr;
    dnnl::reorder m_reorder;
};

struct KernelInputs {
    std::vector<memory::desc> descs;     // layouts the inputs arrive in
    std::vector<bool> needs_gradient;    // false for the graph input
    Scratchpad* scratchpad = nullptr;    // the executor's: every primitive is fitted to it and runs with it
};

class Kernel {
public:
    explicit Kernel(const KernelInputs& in) : m_scratchpad(*in.scratchpad) {}
    virtual ~Kernel() = default;
    const memory::desc& output_desc() const { return m_output_desc; }
    virtual void forward(const std::vector<memory>& inputs, const memory& output, Mode mode) = 0;
    // diff_inputs[i] is in the layout inputs[i] arrived in, or empty when that gradient is not needed.
    virtual void backward(const std::vector<memory>& inputs, const memory& output, const memory& diff_output,
                          const std::vector<memory>& diff_inputs) = 0;
    // A kernel with weights may run backward in two calls, the input gradients first: a driver sends
    // them to its neighbours and computes the weights' gradients while they travel. Each part reads only
    // what backward reads, so the bits are backward's, in either order.
    virtual bool splits_backward() const { return false; }
    virtual void backward_inputs(const std::vector<memory>&, const memory&, const memory&, const std::vector<memory>&) {
        TESSERA_FAIL("this kernel computes its backward in one call");
    }
    virtual void backward_weights(const std::vector<memory>&, const memory&, const memory&) {
        TESSERA_FAIL("this kernel computes its backward in one call");
    }
    virtual std::int64_t bytes() const { return 0; }
    // Which code runs the forward pass, for profiles and tests: oneDNN's name for its primitive
    // ("jit:avx512_core", "brgconv:avx512_core"), "rows:avx512" for row_convolution.hpp; empty where a
    // kernel does not say.
    virtual std::string implementation() const { return {}; }
    // Whether forward may be handed an output — and backward its gradient — that is a view inside a wider
    // buffer (the same layout, other strides): graph::Executor then places it in the halo buffer it feeds.
    virtual bool writes_into_views() const { return false; }
    // Whether forward can write its output into — and backward read its gradient from — `view`, a channel
    // range of the concatenation it alone feeds, in that buffer's layout; a kernel that returns true does
    // so from then on (graph::Executor places it there, and the concatenation leaves those channels).
    virtual bool write_into_channels(const memory::desc& view) {
        (void)view;
        return false;
    }
    // A concatenation: whether it can leave an input's channels to that input's producer (written in place,
    // above) in forward and backward; leave_input_in_place(slot) makes it do so for input `slot`.
    virtual bool leaves_inputs_in_place() const { return false; }
    virtual void leave_input_in_place(std::size_t slot) { (void)slot; }
    // Sums shared across executors (simulated cores) before forward / backward; none by default.
    virtual int reduction_phases(Pass, Mode) const { return 0; }
    virtual std::vector<double> partial(Pass, int, const std::vector<memory>&, const memory&, const memory&,
                                        const std::vector<memory>&) {
        TESSERA_FAIL("this kernel has no reduction phases");
    }
    virtual void total(Pass, int, std::span<const double>) {}

protected:
    Scratchpad& m_scratchpad;
    memory::desc m_output_desc;
};


inline memory::desc optional_bias_desc(const Parameter* bias) {
    return bias ? plain_desc(bias->value.shape()) : memory::desc();
}

// Where element (n, channel, spatial...) of a oneDNN memory lives: the desc's outer strides plus, for
// blocked layouts (nChw16c), the inner channel block. Plain and channels-last layouts have block 1.
struct ChannelAddressing {
    std::int64_t batch_stride = 0, block_stride = 0, block = 1;
    std::array<std::int64_t, 3> spatial_stride{0, 0, 0};  // (D,) H, W; unused entries 0
    explicit ChannelAddressing(const memory::desc& desc) {
        const auto& blocking = desc.data.format_desc.blocking;
        TESSERA_ASSERT(blocking.inner_nblks <= 1 && (blocking.inner_nblks == 0 || blocking.inner_idxs[0] == 1),
                       "expected a plain, channels-last or channel-blocked layout");
        if (blocking.inner_nblks == 1) block = blocking.inner_blks[0];
        batch_stride = blocking.strides[0];
        block_stride = blocking.strides[1];
        const int spatial = desc.data.ndims - 2;
        for (int axis = 0; axis < spatial; ++axis) spatial_stride[static_cast<std::size_t>(3 - spatial + axis)] = blocking.strides[axis + 2];
    }
    std::int64_t channel_offset(std::int64_t channel) const { return (channel / block) * block_stride + channel % block; }
    // Whether ChannelAddressing describes this layout.
    static bool describes(const memory::desc& desc) {
        const auto& blocking = desc.data.format_desc.blocking;
        return desc.data.format_kind == dnnl_blocked && desc.data.ndims >= 3 && desc.data.ndims <= 5 && blocking.inner_nblks <= 1 &&
               (blocking.inner_nblks == 0 || blocking.inner_idxs[0] == 1);
    }
};

inline bool same_placement(const memory::desc& a, const memory::desc& b) {
    if (a == b) return true;
    if (a.data_type() != b.data_type() || a.dims() != b.dims() || a.get_size() != b.get_size() || a.data.offset0 != b.data.offset0)
        return false;
    if (!ChannelAddressing::describes(a) || !ChannelAddressing::describes(b)) return false;
    const ChannelAddressing at_a(a), at_b(b);
    if (at_a.batch_stride != at_b.batch_stride || at_a.spatial_stride != at_b.spatial_stride) return false;
    for (memory::dim channel = 0; channel < a.dims()[1]; ++channel)
        if (at_a.channel_offset(channel) != at_b.channel_offset(channel)) return false;
    return true;
}

}  // namespace tessera::ops
