// Fuzz target: tf.Example records (engine/io/tf_example.cpp) and TFRecord framing (engine/io/tfrecord.cpp).
// The input is one record's data: a decoded Example must encode and decode again to the same features.
// The same bytes framed as a TFRecord file must read back as that one record, and every prefix of the
// framed file (a truncated shard) must be refused, never read.
#include "fuzz_support.hpp"
#include "io/tf_example.hpp"
#include "io/tfrecord.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera;
    using namespace tessera::fuzz;
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    expect_success_or_error([&] {
        const io::TFExample example = io::parse_tf_example(bytes);
        const std::vector<std::byte> encoded = io::serialize_tf_example(example);
        // Bytes, not values: a NaN float is not equal to itself.
        require(io::serialize_tf_example(io::parse_tf_example(encoded)) == encoded, "an Example changed in a round trip");
    });
    const std::vector<std::byte> framed = io::frame_tfrecord(bytes);
    const std::filesystem::path file = input_file("record.tfrecord", reinterpret_cast<const std::uint8_t*>(framed.data()), framed.size());
    io::TFRecordReader reader(file);
    std::vector<std::byte> record;
    require(reader.next(record) && record.size() == size && std::equal(record.begin(), record.end(), bytes.begin()),
            "a framed record did not read back");
    require(!reader.next(record), "one framed record read as two");
    const std::size_t cut = size % (framed.size() - 1) + 1;  // a prefix, 1 … framed.size() − 1 bytes
    const std::filesystem::path torn = input_file("torn.tfrecord", reinterpret_cast<const std::uint8_t*>(framed.data()), cut);
    expect_success_or_error([&] {
        io::TFRecordReader torn_reader(torn);
        require(!torn_reader.next(record), "a truncated record was read");
    });
    return 0;
}
