// The engine's bridge to oneDNN: one CPU engine and stream, shape conversions, and wrapping plain
// Tensors as oneDNN memory without copying.
//
// Activations inside a compiled graph live in whatever layout oneDNN's kernels run fastest with
// (blocked nChw16c and friends); a Tensor is always plain [N, C, (D,) H, W], so layouts change only at
// the graph's edges, through reorders created once.
#pragma once

#include "tensor/tensor.hpp"

#include <oneapi/dnnl/dnnl.hpp>

namespace tessera::ops {

dnnl::engine& cpu_engine();
dnnl::stream& cpu_stream();

dnnl::memory::dims to_dims(const Shape& shape);
Shape to_shape(const dnnl::memory::dims& dims);
// Plain row-major format for a rank: a, ab, abc, abcd (NCHW), abcde (NCDHW).
dnnl::memory::format_tag plain_format(std::size_t rank);
dnnl::memory::desc plain_desc(const Shape& shape, dnnl::memory::data_type type = dnnl::memory::data_type::f32);
dnnl::memory::desc any_desc(const Shape& shape, dnnl::memory::data_type type = dnnl::memory::data_type::f32);
// [N, C, (D,) H, W] stored with channels innermost (nhwc / ndhwc).
dnnl::memory::desc channels_last_desc(const Shape& shape, dnnl::memory::data_type type = dnnl::memory::data_type::f32);
// [N, C, (D,) H, W] in dense 16-channel blocks (nChw16c / nCdhw16c), as oneDNN's AVX-512 kernels write it.
dnnl::memory::desc channel_blocked_desc(const Shape& shape, dnnl::memory::data_type type = dnnl::memory::data_type::f32);
dnnl::memory::data_type to_dnnl(DType dtype);

// A oneDNN memory over the tensor's storage (which must be contiguous); no copy.
dnnl::memory wrap(const Tensor& tensor);
// Copies a oneDNN memory of any layout into a new plain f32 tensor of its logical shape.
Tensor to_plain_tensor(const dnnl::memory& memory);

// Rounds every value to the nearest IEEE half and back (overflow → ±inf), in place; F16C when the CPU
// has it. Emulates half-precision storage on CPUs without half-precision arithmetic.
void round_to_half(float* values, std::int64_t count);

// Rounds every value to the nearest bfloat16 (ties to even) and back, in place: bf16 storage emulated where
// oneDNN has no bf16 kernels.
void round_to_bf16(float* values, std::int64_t count);
// Whether this CPU has bf16 dot products (AVX512-BF16, or AMX) as oneDNN sees it (ONEDNN_MAX_CPU_ISA
// lowers it). Without them oneDNN's bf16 kernels either do not exist (AVX2) or convert every value in
// software (AVX-512 without BF16: slower than its f32 kernels), so the executor emulates BF16 mode
// there: f32 kernels, values rounded to bf16. TESSERA_BF16_KERNELS=onednn takes oneDNN's kernels on any
// AVX-512 CPU (to test that path where they convert in software), =emulated emulates everywhere.
bool has_native_bf16();

// Whether environment variable `name` is "0": how a kernel path is turned off to compare it with the one
// it replaced, or to rule it out when a result looks wrong (TESSERA_WINOGRAD=0, TESSERA_ROW_KERNELS=0...).
// Read when a kernel is built.
bool switched_off(const char* name);

// Sets the threads oneDNN (OpenMP) uses; 0 leaves the default.
void set_num_threads(int num_threads);
int num_threads();

}  // namespace tessera::ops
