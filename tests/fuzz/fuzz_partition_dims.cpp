// Fuzz target: input_partition_dims as written in TPUConfig (engine/partition/partition_text.cpp).
// The input is the text. Both parsers run on it; whatever parses must print back (to_string) to text
// that parses to the same value.
#include "fuzz_support.hpp"
#include "partition/partition_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera;
    using namespace tessera::fuzz;
    using namespace tessera::partition;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    expect_success_or_error([&] {
        const InputPartition side = parse_input_partition(text);
        const std::string printed = to_string(side);
        require(parse_input_partition(printed) == side, "parse_input_partition(to_string(x)) != x");
    });
    expect_success_or_error([&] {
        const auto [features, labels] = parse_input_partition_dims(text);
        PartitionSpec spec;
        spec.features = features;
        spec.labels = labels;
        const std::string printed = input_partition_dims_to_string(spec);
        const auto reparsed = parse_input_partition_dims(printed);
        require(reparsed.first == features && reparsed.second == labels,
                "parse_input_partition_dims(input_partition_dims_to_string(x)) != x");
    });
    return 0;
}
