// TensorBoard event files: CRC-32C, the exact bytes of a record, writer -> reader round trips, session
// starts, and damaged files (a torn tail is tolerated, a bad CRC elsewhere is reported with its offset).
#include "io/tensorboard_events.hpp"
#include "io/tfrecord.hpp"

#include "run_files_test_support.hpp"

#include <cmath>
#include <cstring>
#include <regex>

using namespace tessera;
using namespace tessera::io;
using namespace tessera::test;

namespace {

std::uint32_t crc_of(std::string_view text) {
    return crc32c(std::as_bytes(std::span(text.data(), text.size())));
}

std::vector<std::byte> bytes_from(std::initializer_list<int> values) {
    std::vector<std::byte> bytes;
    for (int value : values) bytes.push_back(static_cast<std::byte>(value));
    return bytes;
}

std::uint64_t load_u64(const std::vector<std::byte>& bytes, std::size_t at) {
    std::uint64_t value = 0;
    std::memcpy(&value, bytes.data() + at, 8);
    return value;
}

// The data of each record, and where each record starts.
struct Records {
    std::vector<std::vector<std::byte>> data;
    std::vector<std::size_t> offsets;
};

Records split_records(const std::vector<std::byte>& file) {
    Records records;
    std::size_t at = 0;
    while (at + 12 <= file.size()) {
        const std::uint64_t length = load_u64(file, at);
        records.offsets.push_back(at);
        records.data.emplace_back(file.begin() + static_cast<std::ptrdiff_t>(at + 12),
                                  file.begin() + static_cast<std::ptrdiff_t>(at + 12 + length));
        at += 16 + length;
    }
    EXPECT_EQ(at, file.size());
    return records;
}

// A TFRecord around `data`, framed independently of the writer.
std::vector<std::byte> frame(const std::vector<std::byte>& data) {
    std::vector<std::byte> record(8);
    const std::uint64_t length = data.size();
    std::memcpy(record.data(), &length, 8);
    const std::uint32_t length_crc = masked_crc32c(std::span(record.data(), 8));
    const std::uint32_t data_crc = masked_crc32c(data);
    record.resize(12);
    std::memcpy(record.data() + 8, &length_crc, 4);
    record.insert(record.end(), data.begin(), data.end());
    record.resize(record.size() + 4);
    std::memcpy(record.data() + record.size() - 4, &data_crc, 4);
    return record;
}

}  // namespace

// ---- CRC and bytes --------------------------------------------------------------------------

TEST(TensorBoardEventSerialization, Crc32cMatchesTheStandardCheckValues) {
    EXPECT_EQ(crc_of("123456789"), 0xE3069283u);  // the catalogue's check value for CRC-32C
    EXPECT_EQ(crc_of(""), 0u);
    EXPECT_EQ(crc32c(std::vector<std::byte>(32, std::byte{0})), 0x8A9136AAu);  // RFC 3720, B.4
    EXPECT_EQ(crc32c(std::vector<std::byte>(32, std::byte{0xff})), 0x62A8AB43u);
    const std::string_view digits = "123456789";
    // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xa282ead8 = 0x2507C60D + 0xA282EAD8
    EXPECT_EQ(masked_crc32c(std::as_bytes(std::span(digits.data(), digits.size()))), 0xC78AB0E5u);
}

TEST(TensorBoardEventSerialization, FileIsNamedAsTensorFlowNamesIt) {
    const ScratchDir dir;
    const TensorBoardWriter writer(dir / "run");
    EXPECT_EQ(writer.path().parent_path(), dir / "run");
    const std::regex pattern(R"(events\.out\.tfevents\.\d{10}\.[^.].*\.)" + std::to_string(::getpid()) + R"(\.\d+)");
    EXPECT_TRUE(std::regex_match(writer.path().filename().string(), pattern)) << writer.path();
    EXPECT_TRUE(fs::exists(writer.path()));
}

TEST(TensorBoardEventSerialization, RecordsAreByteExact) {
    const ScratchDir dir;
    fs::path path;
    {
        TensorBoardWriter writer(dir.path());
        path = writer.path();
        writer.add_scalar("loss", 0.5, 3, 1610612736.0);  // 1.5 * 2^30: double 0x41D8000000000000
        writer.add_session_start(5, 1610612736.0);
        writer.add_scalar("zero", 0.0, 0, 1610612736.0);  // step 0 omitted; simple_value 0 kept (oneof)
    }
    const std::vector<std::byte> file = read_file_bytes(path);
    const Records records = split_records(file);
    ASSERT_EQ(records.data.size(), 4u);

    // file_version: wall_time (now), then field 3 "brain.Event:2".
    const std::vector<std::byte>& version = records.data[0];
    ASSERT_EQ(version.size(), 9u + 2u + 13u);
    EXPECT_EQ(version[0], std::byte{0x09});
    EXPECT_EQ(text_of({version.begin() + 9, version.end()}), std::string("\x1a\x0d") + "brain.Event:2");

    const std::vector<std::byte> scalar =
        bytes_from({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xd8, 0x41,  // wall_time: field 1, fixed64
                    0x10, 0x03,                                            // step: field 2, varint 3
                    0x2a, 0x0d,                                            // summary: field 5, 13 bytes
                    0x0a, 0x0b,                                            //   value: field 1, 11 bytes
                    0x0a, 0x04, 'l',  'o',  's',  's',                     //     tag: field 1, "loss"
                    0x15, 0x00, 0x00, 0x00, 0x3f});                        //     simple_value: field 2, fixed32 0.5f
    EXPECT_EQ(records.data[1], scalar);
    const std::vector<std::byte> session_start =
        bytes_from({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xd8, 0x41,  // wall_time
                    0x10, 0x05,                                            // step 5
                    0x3a, 0x02, 0x08, 0x01});                              // session_log: field 7 {status: START}
    EXPECT_EQ(records.data[2], session_start);
    const std::vector<std::byte> zero =
        bytes_from({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xd8, 0x41,  // wall_time; no step field
                    0x2a, 0x0d, 0x0a, 0x0b,                                // summary, value
                    0x0a, 0x04, 'z',  'e',  'r',  'o',                     //     tag "zero"
                    0x15, 0x00, 0x00, 0x00, 0x00});                        //     simple_value 0.0f, present
    EXPECT_EQ(records.data[3], zero);

    // Framing: length 26 then its masked CRC, data, masked CRC of the data.
    const std::size_t at = records.offsets[1];
    EXPECT_EQ(load_u64(file, at), 26u);
    const std::vector<std::byte> expected_record = frame(scalar);
    EXPECT_TRUE(
        std::equal(expected_record.begin(), expected_record.end(), file.begin() + static_cast<std::ptrdiff_t>(at)));
}

TEST(TensorBoardEventSerialization, NegativeStepsAndLongTagsUseLongVarints) {
    const ScratchDir dir;
    const std::string long_tag(300, 't');  // length 300 needs a two-byte varint
    fs::path path;
    {
        TensorBoardWriter writer(dir.path());
        path = writer.path();
        writer.add_scalar(long_tag, 1.0, -1, 10.0);
        writer.add_scalar("big", 2.0, std::int64_t{1} << 40, 11.0);
    }
    const Records records = split_records(read_file_bytes(path));
    ASSERT_EQ(records.data.size(), 3u);
    // step -1: ten bytes 0xff ... 0x01 after the tag byte 0x10.
    EXPECT_EQ(std::vector<std::byte>(records.data[1].begin() + 9, records.data[1].begin() + 20),
              bytes_from({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
    const std::vector<ScalarEvent> scalars = read_tensorboard_scalars(path);
    ASSERT_EQ(scalars.size(), 2u);
    EXPECT_EQ(scalars[0].tag, long_tag);
    EXPECT_EQ(scalars[0].step, -1);
    EXPECT_EQ(scalars[1].step, std::int64_t{1} << 40);
}

// ---- writer -> reader -----------------------------------------------------------------------

TEST(TensorBoardEventSerialization, RoundTripThroughTheReader) {
    const ScratchDir dir;
    TensorBoardWriter writer(dir / "run");
    const double start = unix_time_now();
    for (int step = 0; step < 50; ++step) {
        writer.add_scalar("loss/train", 1.0 / (1 + step), step, 1700000000.0 + step * 0.125);
        if (step % 10 == 0) writer.add_scalar("accuracy/eval", step * 0.01, step, 1700000000.0 + step * 0.125);
    }
    writer.add_scalar("now", -7.25, 50);
    writer.add_scalar("nan", std::nan(""), 51, 1.0);
    writer.flush();  // readable while the writer stays open

    const std::vector<ScalarEvent> scalars = read_tensorboard_scalars(writer.path());
    ASSERT_EQ(scalars.size(), 57u);
    std::size_t i = 0;
    for (int step = 0; step < 50; ++step) {
        EXPECT_EQ(scalars[i].tag, "loss/train");
        EXPECT_EQ(scalars[i].step, step);
        EXPECT_EQ(scalars[i].wall_time, 1700000000.0 + step * 0.125);
        EXPECT_EQ(scalars[i].value, static_cast<float>(1.0 / (1 + step)));
        ++i;
        if (step % 10 == 0) {
            EXPECT_EQ(scalars[i].tag, "accuracy/eval");
            EXPECT_EQ(scalars[i].value, static_cast<float>(step * 0.01));
            ++i;
        }
    }
    EXPECT_EQ(scalars[i].tag, "now");
    EXPECT_EQ(scalars[i].value, -7.25f);
    EXPECT_GE(scalars[i].wall_time, start);
    EXPECT_LE(scalars[i].wall_time, unix_time_now());
    EXPECT_TRUE(std::isnan(scalars[i + 1].value));
    // The folder reads the same.
    EXPECT_EQ(read_tensorboard_scalars(dir / "run").size(), 57u);
}

TEST(TensorBoardEventSerialization, SessionStartDropsLaterStepsOfTheEarlierRun) {
    const ScratchDir dir;
    {
        TensorBoardWriter first(dir.path());
        for (int step = 0; step < 10; ++step) first.add_scalar("loss", step, step, 100.0 + step);
        TensorBoardWriter second(dir.path());  // resumed from the checkpoint of step 6
        second.add_session_start(6, 200.0);
        for (int step = 6; step < 9; ++step) second.add_scalar("loss", 100 + step, step, 200.0 + step);
    }
    const std::vector<ScalarEvent> scalars = read_tensorboard_scalars(dir.path());
    ASSERT_EQ(scalars.size(), 9u);
    for (int step = 0; step < 9; ++step) {
        EXPECT_EQ(scalars[static_cast<std::size_t>(step)].step, step);
        EXPECT_EQ(scalars[static_cast<std::size_t>(step)].value, step < 6 ? step : 100 + step);
    }
}

TEST(TensorBoardEventSerialization, FolderFilesAreReadInCreationOrder) {
    // Within one second the names differ only in the counter: 9 comes before 10.
    const ScratchDir dir;
    for (int i = 0; i < 12; ++i) {
        TensorBoardWriter writer(dir.path());
        writer.add_scalar("i", i, i, 1.0);
    }
    write_file_bytes(dir / "notes.txt", bytes_of("not an event file"));
    fs::create_directories(dir / "other_run");
    TensorBoardWriter(dir / "other_run").add_scalar("other", 1, 1, 1.0);
    const std::vector<ScalarEvent> scalars = read_tensorboard_scalars(dir.path());
    ASSERT_EQ(scalars.size(), 12u);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(scalars[static_cast<std::size_t>(i)].step, i);
}

TEST(TensorBoardEventSerialization, ReaderSkipsFieldsItDoesNotUse) {
    // A record as another writer might make it: the summary first and the step after it, an unknown
    // field (10, a message), a value with only a tag (as a histogram's would look to us), two values
    // in one summary, one of them with its fields in reverse order.
    const std::vector<std::byte> event =
        bytes_from({0x2a, 0x19,                                                  // summary, 25 bytes
                    0x0a, 0x03, 0x0a, 0x01, 'h',                                 //   value {tag "h"}
                    0x0a, 0x08, 0x0a, 0x01, 'a',  0x15, 0x00, 0x00, 0x80, 0x3f,  //   value {tag "a", simple_value 1.0f}
                    0x0a, 0x08, 0x15, 0x00, 0x00, 0x00, 0x40, 0x0a, 0x01, 'b',   //   value {simple_value 2.0f, tag "b"}
                    0x52, 0x00,                                                  // field 10, an empty message
                    0x10, 0x07,                                                  // step 7
                    0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x3f});      // wall_time 1.0
    const ScratchDir dir;
    write_file_bytes(dir / "x.tfevents", frame(event));
    const std::vector<ScalarEvent> scalars = read_tensorboard_scalars(dir / "x.tfevents");
    ASSERT_EQ(scalars.size(), 2u);
    EXPECT_EQ(scalars[0].tag, "a");
    EXPECT_EQ(scalars[0].value, 1.0f);
    EXPECT_EQ(scalars[0].step, 7);
    EXPECT_EQ(scalars[0].wall_time, 1.0);
    EXPECT_EQ(scalars[1].tag, "b");
    EXPECT_EQ(scalars[1].value, 2.0f);
}

TEST(TensorBoardEventSerialization, EmptyTagIsRejected) {
    const ScratchDir dir;
    TensorBoardWriter writer(dir.path());
    EXPECT_ERROR_CONTAINS(writer.add_scalar("", 1.0, 0), "needs a tag");
}

// ---- damaged files --------------------------------------------------------------------------

TEST(TensorBoardEventValidation, TruncatedLastRecordIsIgnored) {
    const ScratchDir dir;
    fs::path path;
    {
        TensorBoardWriter writer(dir.path());
        path = writer.path();
        for (int step = 0; step < 5; ++step) writer.add_scalar("loss", step, step, 1.0);
    }
    const std::vector<std::byte> whole = read_file_bytes(path);
    const Records records = split_records(whole);
    ASSERT_EQ(records.offsets.size(), 6u);
    const std::size_t last = records.offsets.back();
    for (std::size_t size = last; size < whole.size(); ++size) {
        write_file_bytes(path,
                         std::vector<std::byte>(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(size)));
        const std::vector<ScalarEvent> scalars = read_tensorboard_scalars(path);
        ASSERT_EQ(scalars.size(), 4u) << "cut at " << size;
        EXPECT_EQ(scalars.back().step, 3);
    }
    write_file_bytes(path, {});
    EXPECT_TRUE(read_tensorboard_scalars(path).empty());
}

TEST(TensorBoardEventValidation, CorruptCrcNamesTheFileAndOffset) {
    const ScratchDir dir;
    fs::path path;
    {
        TensorBoardWriter writer(dir.path());
        path = writer.path();
        for (int step = 0; step < 4; ++step) writer.add_scalar("loss", step, step, 1.0);
    }
    const std::vector<std::byte> whole = read_file_bytes(path);
    const Records records = split_records(whole);
    const std::size_t third = records.offsets[2];
    const std::string where = path.string() + "\": corrupt record at byte offset " + std::to_string(third);

    std::vector<std::byte> damaged = whole;
    damaged[third + 12 + 5] ^= std::byte{0x10};  // a data byte
    write_file_bytes(path, damaged);
    EXPECT_ERROR_CONTAINS(read_tensorboard_scalars(path), where + ": the CRC of its 26 data bytes is");

    damaged = whole;
    damaged[third + 12 + 26] ^= std::byte{0x01};  // the data CRC itself
    write_file_bytes(path, damaged);
    EXPECT_ERROR_CONTAINS(read_tensorboard_scalars(path), where + ": the CRC of its 26 data bytes");

    damaged = whole;
    damaged[third] ^= std::byte{0x02};  // the length
    write_file_bytes(path, damaged);
    EXPECT_ERROR_CONTAINS(read_tensorboard_scalars(path), where + ": the CRC of its length is 0x");

    // Damage in the last record is damage, not truncation: the record is whole.
    damaged = whole;
    damaged[records.offsets.back() + 14] ^= std::byte{0x40};
    write_file_bytes(path, damaged);
    EXPECT_ERROR_CONTAINS(read_tensorboard_scalars(path),
                          "corrupt record at byte offset " + std::to_string(records.offsets.back()));
}

TEST(TensorBoardEventValidation, RecordThatIsNotAnEventIsReported) {
    const ScratchDir dir;
    std::vector<std::byte> file = frame(bytes_from({0x09, 0x00, 0x00}));  // fixed64 cut short
    const std::vector<std::byte> second = frame(bytes_from({0x0b, 0x00}));
    write_file_bytes(dir / "a.tfevents", file);
    EXPECT_ERROR_CONTAINS(read_tensorboard_scalars(dir / "a.tfevents"),
                          "record at byte offset 0 is not a valid tensorflow.Event: a fixed-size field runs past");
    file = frame(bytes_from({0x10, 0x01}));
    file.insert(file.end(), second.begin(), second.end());
    write_file_bytes(dir / "a.tfevents", file);
    EXPECT_ERROR_CONTAINS(read_tensorboard_scalars(dir / "a.tfevents"),
                          "record at byte offset 18 is not a valid tensorflow.Event: field 1 has wire type 3");
}

TEST(TensorBoardEventValidation, MissingPathIsReported) {
    EXPECT_ERROR_CONTAINS(read_tensorboard_scalars("/nonexistent/run"),
                          "cannot read TensorBoard scalars from \"/nonexistent/run\"");
    const ScratchDir dir;
    EXPECT_TRUE(read_tensorboard_scalars(dir.path()).empty());
}

TEST(TensorBoardEventValidation, UnwritableFolderIsReported) {
    const ScratchDir dir;
    write_file_bytes(dir / "file", bytes_of("x"));
    EXPECT_ERROR_CONTAINS(TensorBoardWriter(dir / "file" / "run"), "cannot create the TensorBoard log folder");
}

// ---- TFRecord index: skip and seek -------------------------------------------------------------

// An index built from headers alone finds every record where a full read does, and a seek to any indexed
// offset reads that record; a damaged length is found while indexing, a damaged data byte only on reading.
TEST(TFRecordIndex, SkipFindsEveryRecordAndSeekReadsIt) {
    const ScratchDir dir;
    const fs::path path = dir.path() / "shard-00000-of-00001";
    std::vector<std::vector<std::byte>> records;
    std::vector<std::byte> file;
    std::vector<std::size_t> offsets;
    for (int i = 0; i < 5; ++i) {
        records.emplace_back(static_cast<std::size_t>(3 + 7 * i), std::byte(i + 1));
        offsets.push_back(file.size());
        const std::vector<std::byte> framed = frame(records.back());
        file.insert(file.end(), framed.begin(), framed.end());
    }
    write_file_bytes(path, file);
    TFRecordReader indexer(path);
    std::vector<std::uint64_t> indexed;
    while (indexer.skip()) indexed.push_back(indexer.record_offset());
    EXPECT_EQ(indexed, std::vector<std::uint64_t>(offsets.begin(), offsets.end()));
    EXPECT_EQ(indexer.records_read(), 5);
    TFRecordReader reader(path);
    std::vector<std::byte> data;
    for (int i : {3, 0, 1, 4}) {
        reader.seek(indexed[static_cast<std::size_t>(i)]);
        ASSERT_TRUE(reader.next(data));
        EXPECT_EQ(data, records[static_cast<std::size_t>(i)]) << "record " << i;
    }
    EXPECT_FALSE(reader.next(data)) << "the last record was read: nothing follows it";
    EXPECT_ERROR_CONTAINS(reader.seek(file.size() + 1), "past the end of the file");

    std::vector<std::byte> damaged = file;
    damaged[offsets[2] + 12 + 1] ^= std::byte{0x08};  // a data byte of record 2: the index does not see it
    write_file_bytes(path, damaged);
    TFRecordReader skipping(path);
    int count = 0;
    while (skipping.skip()) ++count;
    EXPECT_EQ(count, 5);
    TFRecordReader reading(path);
    reading.seek(offsets[2]);
    EXPECT_ERROR_CONTAINS(reading.next(data), "corrupt record at byte offset " + std::to_string(offsets[2]));
    damaged = file;
    damaged[offsets[3]] ^= std::byte{0x01};  // the length of record 3: the index refuses it
    write_file_bytes(path, damaged);
    TFRecordReader refusing(path);
    EXPECT_ERROR_CONTAINS({ while (refusing.skip()) {} }, "corrupt record at byte offset " + std::to_string(offsets[3]) + ": the CRC of its length");
}
