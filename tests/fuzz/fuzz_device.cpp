// Fuzz target: device preset files (engine/cost/device.cpp). The input is the JSON text.
#include "cost/device.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera;
    const std::string text(reinterpret_cast<const char*>(data), size);
    fuzz::expect_success_or_error([&] {
        const cost::Device device = cost::parse_device(text, "fuzz_device");
        (void)device.peak_flops(graph::Precision::F32);
        (void)device.peak_flops(graph::Precision::BF16);
        (void)device.peak_flops(graph::Precision::F16);
        (void)cost::topology_name(device.topology);
    });
    return 0;
}
