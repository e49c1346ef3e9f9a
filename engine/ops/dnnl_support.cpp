#include "ops/dnnl_support.hpp"

#include <cpuid.h>
#include <cstdlib>
#include <string_view>
#include <immintrin.h>
#include <omp.h>
#include <cstring>

namespace tessera::ops {

dnnl::engine& cpu_engine() {
    static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

dnnl::stream& cpu_stream() {
    static dnnl::stream stream(cpu_engine());
    return stream;
}

dnnl::memory::dims to_dims(const Shape& shape) { return dnnl::memory::dims(shape.begin(), shape.end()); }

Shape to_shape(const dnnl::memory::dims& dims) { return Shape(dims.begin(), dims.end()); }

dnnl::memory::format_tag plain_format(std::size_t rank) {
    using tag = dnnl::memory::format_tag;
    switch (rank) {
        case 1: return tag::a;
        case 2: return tag::ab;
        case 3: return tag::abc;
        case 4: return tag::abcd;
        case 5: return tag::abcde;
        case 6: return tag::abcdef;
        default: break;
    }
    TESSERA_FAIL("oneDNN memory needs a rank from 1 to 6, got " << rank);
}

dnnl::memory::desc plain_desc(const Shape& shape, dnnl::memory::data_type type) {
    return dnnl::memory::desc(to_dims(shape), type, plain_format(shape.size()));
}

dnnl::memory::desc any_desc(const Shape& shape, dnnl::memory::data_type type) {
    return dnnl::memory::desc(to_dims(shape), type, dnnl::memory::format_tag::any);
}

dnnl::memory::desc channels_last_desc(const Shape& shape, dnnl::memory::data_type type) {
    using tag = dnnl::memory::format_tag;
    TESSERA_CHECK(shape.size() == 4 || shape.size() == 5,
                  "channels-last needs [N, C, H, W] or [N, C, D, H, W], got " << shape_to_string(shape));
    return dnnl::memory::desc(to_dims(shape), type, shape.size() == 4 ? tag::acdb : tag::acdeb);
}

dnnl::memory::desc channel_blocked_desc(const Shape& shape, dnnl::memory::data_type type) {
    using tag = dnnl::memory::format_tag;
    TESSERA_CHECK(shape.size() == 4 || shape.size() == 5,
                  "16-channel blocks need [N, C, H, W] or [N, C, D, H, W], got " << shape_to_string(shape));
    return dnnl::memory::desc(to_dims(shape), type, shape.size() == 4 ? tag::nChw16c : tag::nCdhw16c);
}

dnnl::memory::data_type to_dnnl(DType dtype) {
    switch (dtype) {
        case DType::F32: return dnnl::memory::data_type::f32;
        case DType::BF16: return dnnl::memory::data_type::bf16;
        case DType::F16: return dnnl::memory::data_type::f16;
        case DType::I32: return dnnl::memory::data_type::s32;
        case DType::U8: return dnnl::memory::data_type::u8;
    }
    return dnnl::memory::data_type::undef;
}

dnnl::memory wrap(const Tensor& tensor) {
    TESSERA_CHECK(tensor.is_contiguous(), "oneDNN needs a contiguous tensor, got one of shape "
                                              << shape_to_string(tensor.shape()) << " with gaps");
    // oneDNN takes a non-const handle; kernels given an input only read it.
    return dnnl::memory(plain_desc(tensor.shape(), to_dnnl(tensor.dtype())), cpu_engine(),
                        const_cast<void*>(tensor.raw_data()));
}

Tensor to_plain_tensor(const dnnl::memory& memory) {
    const dnnl::memory::desc desc = memory.get_desc();
    Tensor result = Tensor::empty(to_shape(desc.dims()), DType::F32);
    dnnl::memory plain = wrap(result);
    dnnl::memory source = memory;  // execute() takes non-const handles; memory objects are shared handles
    dnnl::reorder(source, plain).execute(cpu_stream(), source, plain);
    cpu_stream().wait();
    return result;
}

namespace {

// Blocks [begin, end) of 8 floats. The loop stays in this function: an OpenMP region's outlined body
// does not inherit a target attribute under clang, so the intrinsics cannot sit in the region itself.
__attribute__((target("avx,f16c"))) void round_blocks_f16c(float* values, std::int64_t begin, std::int64_t end) {
    for (std::int64_t block = begin; block < end; ++block) {
        float* at = values + block * 8;
        const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(at), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(at, _mm256_cvtph_ps(half));
    }
}

void round_to_half_f16c(float* values, std::int64_t count) {
    const std::int64_t blocks = count / 8;
#pragma omp parallel
    {
        const std::int64_t thread = omp_get_thread_num(), threads = omp_get_num_threads();
        round_blocks_f16c(values, blocks * thread / threads, blocks * (thread + 1) / threads);
    }
    for (std::int64_t i = blocks * 8; i < count; ++i) values[i] = to_float(to_float16(values[i]));
}

}  // namespace

// F16C and the AVX its 256-bit form needs (checked through AVX, which includes the OS's support for
// ymm registers). By cpuid, not __builtin_cpu_supports("f16c"): clang before 17 has no "f16c" there.
static bool has_f16c() {
    static const bool present = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    }();
    return present;
}

void round_to_half(float* values, std::int64_t count) {
    if (has_f16c()) {
        round_to_half_f16c(values, count);
        return;
    }
    for (std::int64_t i = 0; i < count; ++i) values[i] = to_float(to_float16(values[i]));
}

bool switched_off(const char* name) {
    const char* setting = std::getenv(name);
    return setting != nullptr && std::string_view(setting) == "0";
}

void round_to_bf16(float* values, std::int64_t count) {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < count; ++i) {
        std::uint32_t bits;
        std::memcpy(&bits, values + i, sizeof bits);
        if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) continue;  // NaN stays NaN
        bits += 0x7fffu + ((bits >> 16) & 1u);  // to nearest, ties to even (overflow rounds to ±inf)
        bits &= 0xffff0000u;
        std::memcpy(values + i, &bits, sizeof bits);
    }
}

bool has_native_bf16() {
    // The ISA values are bit sets: AVX512-BF16's includes AVX-512 and VNNI, AMX's includes AVX512-BF16.
    static const bool native = [] {
        const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
        const auto bits = [](dnnl::cpu_isa required) { return static_cast<unsigned>(required); };
        const char* setting = std::getenv("TESSERA_BF16_KERNELS");
        const std::string_view chosen = setting ? setting : "";
        // oneDNN's bf16 kernels run on any AVX-512 CPU (converting in software without BF16): to test
        // the bf16-typed path on such a CPU.
        if (chosen == "onednn") return (isa & bits(dnnl::cpu_isa::avx512_core)) == bits(dnnl::cpu_isa::avx512_core);
        if (chosen == "emulated") return false;
        return (isa & bits(dnnl::cpu_isa::avx512_core_bf16)) == bits(dnnl::cpu_isa::avx512_core_bf16);
    }();
    return native;
}

void set_num_threads(int count) {
    if (count > 0) omp_set_num_threads(count);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace tessera::ops
