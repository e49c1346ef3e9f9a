// Fuzz target: tf.Example records (engine/io/tf_example.cpp) and TFRecord framing (engine/io/tfrecord.cpp).
// The input is one record's data: a decoded Example must encode and decode again to the same features.
// The same bytes framed as a TFRecord file must read back as that one record, and every prefix of the
// framed file (a truncated shard) must be refused, never read. The bytes as a shard of their own: its
// header-only index (skip) and the reads at the indexed offsets (seek) work or are refused.
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
    // Indexed by headers alone (the TFRecord source's index), then read at the indexed offset.
    io::TFRecordReader indexer(file);
    require(indexer.skip() && indexer.record_offset() == 0 && !indexer.skip(), "the index of one framed record is not [0]");
    reader.seek(0);
    require(reader.next(record) && record.size() == size, "a seek back to the indexed record did not read it");
    // The input itself as a shard: indexing it and reading every indexed record either works or is refused.
    const std::filesystem::path shard = input_file("shard.tfrecord", data, size);
    expect_success_or_error([&] {
        io::TFRecordReader scan(shard);
        std::vector<std::uint64_t> offsets;
        while (scan.skip()) offsets.push_back(scan.record_offset());
        io::TFRecordReader read_back(shard);
        for (std::uint64_t offset : offsets) {
            read_back.seek(offset);
            require(read_back.next(record), "an indexed record is missing");
        }
    });
    const std::size_t cut = size % (framed.size() - 1) + 1;  // a prefix, 1 … framed.size() − 1 bytes
    const std::filesystem::path torn = input_file("torn.tfrecord", reinterpret_cast<const std::uint8_t*>(framed.data()), cut);
    expect_success_or_error([&] {
        io::TFRecordReader torn_reader(torn);
        require(!torn_reader.next(record), "a truncated record was read");
    });
    return 0;
}
