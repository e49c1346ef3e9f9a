// safetensors: round trips of every dtype and odd shape, the exact bytes of a tiny file, and one test
// per kind of malformed file, each checking its message.
#include "io/safetensors.hpp"

#include "run_files_test_support.hpp"

#include <cstring>
#include <random>

using namespace tessera;
using namespace tessera::io;
using namespace tessera::test;

namespace {

constexpr DType k_dtypes[] = {DType::F32, DType::BF16, DType::F16, DType::I32, DType::U8};

// Distinct, exactly representable values in every dtype: element i holds i * 0.5 - 3 (ints: i * 7 - 20,
// u8: i * 37 mod 256).
Tensor patterned(Shape shape, DType dtype) {
    Tensor tensor = Tensor::empty(std::move(shape), dtype);
    const std::int64_t count = tensor.num_elements();
    for (std::int64_t i = 0; i < count; ++i) {
        const float value = static_cast<float>(i) * 0.5f - 3.0f;
        switch (dtype) {
            case DType::F32: tensor.data<float>()[i] = value; break;
            case DType::BF16: tensor.data<BFloat16>()[i] = to_bfloat16(value); break;
            case DType::F16: tensor.data<Float16>()[i] = to_float16(value); break;
            case DType::I32: tensor.data<std::int32_t>()[i] = static_cast<std::int32_t>(i * 7 - 20); break;
            case DType::U8: tensor.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i * 37 % 256); break;
        }
    }
    return tensor;
}

void expect_same_tensor(const Tensor& actual, const Tensor& expected, const std::string& name) {
    ASSERT_TRUE(actual.is_defined()) << name;
    EXPECT_EQ(actual.dtype(), expected.dtype()) << name;
    ASSERT_EQ(actual.shape(), expected.shape()) << name;
    EXPECT_TRUE(actual.is_contiguous()) << name;
    const Tensor packed = expected.contiguous();
    ASSERT_EQ(actual.num_bytes(), packed.num_bytes()) << name;
    if (packed.num_bytes() > 0) {
        EXPECT_EQ(std::memcmp(actual.raw_data(), packed.raw_data(), packed.num_bytes()), 0) << name;
    }
}

void append_u64(std::vector<std::byte>& bytes, std::uint64_t value) {
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::byte>(value >> (8 * i)));
}

// A file with this header text (unpadded, as given) and `data_size` zero bytes of data.
std::vector<std::byte> raw_file(const std::string& header, std::size_t data_size) {
    std::vector<std::byte> bytes;
    append_u64(bytes, header.size());
    for (char c : header) bytes.push_back(static_cast<std::byte>(c));
    bytes.resize(bytes.size() + data_size, std::byte{0});
    return bytes;
}

std::string decode_error(const std::string& header, std::size_t data_size) {
    const std::vector<std::byte> bytes = raw_file(header, data_size);
    return error_message([&] { decode_safetensors(bytes, "bad.safetensors"); });
}

#define EXPECT_DECODE_ERROR(header, data_size, fragment)                                              \
    do {                                                                                              \
        const std::string tessera_message_ = decode_error(header, data_size);                         \
        EXPECT_NE(tessera_message_.find("bad.safetensors: "), std::string::npos) << tessera_message_; \
        EXPECT_NE(tessera_message_.find(fragment), std::string::npos)                                 \
            << "expected \"" << (fragment) << "\" in: " << tessera_message_;                          \
    } while (false)

}  // namespace

// ---- writing and reading --------------------------------------------------------------------

TEST(SafetensorsSerialization, DtypeNamesAreTheFormats) {
    EXPECT_EQ(safetensors_dtype_name(DType::F32), "F32");
    EXPECT_EQ(safetensors_dtype_name(DType::BF16), "BF16");
    EXPECT_EQ(safetensors_dtype_name(DType::F16), "F16");
    EXPECT_EQ(safetensors_dtype_name(DType::I32), "I32");
    EXPECT_EQ(safetensors_dtype_name(DType::U8), "U8");
    for (DType dtype : k_dtypes) EXPECT_EQ(dtype_from_safetensors_name(safetensors_dtype_name(dtype)), dtype);
    EXPECT_EQ(dtype_from_safetensors_name("F64"), std::nullopt);
    EXPECT_EQ(dtype_from_safetensors_name("f32"), std::nullopt);  // the format's names are upper case
}

TEST(SafetensorsSerialization, RoundTripsEveryDtypeAndShapeThroughAFile) {
    const ScratchDir dir;
    TensorFile file;
    for (DType dtype : k_dtypes) {
        const std::string name(dtype_name(dtype));
        file.tensors.push_back({name + ".matrix", patterned({3, 5}, dtype)});
        file.tensors.push_back({name + ".volume", patterned({2, 3, 4}, dtype)});
        file.tensors.push_back({name + ".scalar", patterned({}, dtype)});  // 0-d: one element
        file.tensors.push_back({name + ".empty", patterned({0}, dtype)});  // no bytes
        file.tensors.push_back({name + ".empty_inner", patterned({2, 0, 3}, dtype)});
    }
    file.metadata = {{"format", "pt"}, {"step", "1200"}, {"note", "ünïcode ok"}};
    write_safetensors(dir / "all.safetensors", file);

    const TensorFile loaded = read_safetensors(dir / "all.safetensors");
    EXPECT_EQ(loaded.metadata, file.metadata);
    ASSERT_EQ(loaded.tensors.size(), file.tensors.size());
    for (std::size_t i = 0; i < file.tensors.size(); ++i) {
        // Read order is data order, which is the written order.
        EXPECT_EQ(loaded.tensors[i].name, file.tensors[i].name);
        expect_same_tensor(loaded.tensors[i].value, file.tensors[i].value, file.tensors[i].name);
    }
    ASSERT_NE(loaded.find("f32.scalar"), nullptr);
    EXPECT_EQ(loaded.find("f32.scalar")->value.rank(), 0);
    EXPECT_EQ(loaded.find("f32.scalar")->value.data<float>()[0], -3.0f);
    EXPECT_EQ(loaded.find("missing"), nullptr);
}

TEST(SafetensorsSerialization, NonContiguousViewsArePackedOnWrite) {
    const Tensor parent = patterned({4, 6, 5}, DType::F32);
    const Tensor view = parent.view_box({1, 2, 1}, {2, 3, 3});  // strided in every axis but the last
    ASSERT_FALSE(view.is_contiguous());
    const Tensor parent_u8 = patterned({5, 7}, DType::U8);
    const Tensor view_u8 = parent_u8.view_box({1, 3}, {4, 2});
    TensorFile file;
    file.tensors = {{"view", view}, {"view_u8", view_u8}, {"whole", parent}};
    const TensorFile loaded = decode_safetensors(encode_safetensors(file), "memory");
    expect_same_tensor(loaded.find("view")->value, view, "view");
    expect_same_tensor(loaded.find("view_u8")->value, view_u8, "view_u8");
    expect_same_tensor(loaded.find("whole")->value, parent, "whole");
    EXPECT_EQ(loaded.find("view")->value.at<float>({1, 2, 2}), parent.at<float>({2, 4, 3}));
    EXPECT_FALSE(loaded.find("whole")->value.shares_storage_with(parent));
}

TEST(SafetensorsSerialization, TinyFileIsByteExact) {
    // Written "b" then "a": data in the given order, JSON keys sorted ("__metadata__" < "a" < "b").
    TensorFile file;
    Tensor b = Tensor::empty({2}, DType::F32);
    b.data<float>()[0] = 1.0f;
    b.data<float>()[1] = -2.0f;
    Tensor a = Tensor::empty({3}, DType::U8);
    for (int i = 0; i < 3; ++i) a.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i + 1);
    file.tensors = {{"b", b}, {"a", a}};
    file.metadata["format"] = "pt";

    // 170 bytes of JSON, padded with 6 spaces to 176 so that the data starts at 8 + 176 = 184. The
    // checksum is the CRC-32 of the 11 data bytes (zlib.crc32 in Python gives 0x8d8f477b).
    const std::string header =
        R"({"__metadata__":{"format":"pt","tessera.data_crc32":"8d8f477b"},"a":{"data_offsets":[8,11],"dtype":"U8","shape":[3]},)"
        R"("b":{"data_offsets":[0,8],"dtype":"F32","shape":[2]}})"
        "      ";
    ASSERT_EQ(header.size(), 176u);
    std::vector<std::byte> expected = {std::byte{0xb0}, std::byte{0}, std::byte{0}, std::byte{0},
                                       std::byte{0},    std::byte{0}, std::byte{0}, std::byte{0}};
    for (char c : header) expected.push_back(static_cast<std::byte>(c));
    for (int value : {0x00, 0x00, 0x80, 0x3f,  // 1.0f
                      0x00, 0x00, 0x00, 0xc0,  // -2.0f
                      0x01, 0x02, 0x03})       // u8
        expected.push_back(static_cast<std::byte>(value));

    const std::vector<std::byte> encoded = encode_safetensors(file);
    EXPECT_EQ(text_of(encoded), text_of(expected));

    const ScratchDir dir;
    write_safetensors(dir / "tiny.safetensors", file);
    EXPECT_EQ(read_file_bytes(dir / "tiny.safetensors"), expected);
}

TEST(SafetensorsSerialization, EmptyFileHoldsOnlyTheChecksumOfNoData) {
    // No tensors: only the checksum of the empty data (CRC-32 0), padded to 56 bytes.
    const std::vector<std::byte> encoded = encode_safetensors(TensorFile{});
    ASSERT_EQ(encoded.size(), 64u);
    EXPECT_EQ(encoded[0], std::byte{56});
    EXPECT_EQ(text_of(encoded).substr(8), R"({"__metadata__":{"tessera.data_crc32":"00000000"}}      )");
    const TensorFile loaded = decode_safetensors(encoded, "empty");
    EXPECT_TRUE(loaded.tensors.empty());
    EXPECT_TRUE(loaded.metadata.empty());
}

TEST(SafetensorsSerialization, ReadsFilesOtherToolsLayOutDifferently) {
    // Unsorted keys, no padding, metadata last, data in reverse name order, two empty tensors sharing
    // an offset: all valid.
    const std::string header =
        R"({"z":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
        R"("e1":{"shape":[0,4],"dtype":"F32","data_offsets":[8,8]},)"
        R"("e2":{"dtype":"U8","shape":[0],"data_offsets":[8,8]},)"
        R"("a":{"data_offsets":[8,10],"shape":[],"dtype":"BF16"},"__metadata__":{"k":"v"}})";
    std::vector<std::byte> bytes = raw_file(header, 10);
    const std::size_t data = 8 + header.size();
    bytes[data] = std::byte{7};         // z[0] = 7
    bytes[data + 4] = std::byte{0xfe};  // z[1] = -2
    for (int i = 5; i < 8; ++i) bytes[data + static_cast<std::size_t>(i)] = std::byte{0xff};
    bytes[data + 8] = std::byte{0xc0};  // a = bf16 0x3fc0 = 1.5
    bytes[data + 9] = std::byte{0x3f};
    const TensorFile loaded = decode_safetensors(bytes, "other.safetensors");
    ASSERT_EQ(loaded.tensors.size(), 4u);
    EXPECT_EQ(loaded.tensors[0].name, "z");
    EXPECT_EQ(loaded.find("z")->value.data<std::int32_t>()[0], 7);
    EXPECT_EQ(loaded.find("z")->value.data<std::int32_t>()[1], -2);
    EXPECT_EQ(to_float(loaded.find("a")->value.data<BFloat16>()[0]), 1.5f);
    EXPECT_EQ(loaded.find("e1")->value.shape(), (Shape{0, 4}));
    EXPECT_EQ(loaded.find("e2")->value.num_elements(), 0);
    EXPECT_EQ(loaded.metadata.at("k"), "v");
}

TEST(SafetensorsSerialization, WriteRejectsBadNamesAndKeepsTheOldFile) {
    const ScratchDir dir;
    const fs::path path = dir / "w.safetensors";
    TensorFile good;
    good.tensors.push_back({"w", patterned({2}, DType::F32)});
    write_safetensors(path, good);
    const std::vector<std::byte> before = read_file_bytes(path);

    TensorFile duplicate = good;
    duplicate.tensors.push_back({"w", patterned({3}, DType::F32)});
    EXPECT_ERROR_CONTAINS(write_safetensors(path, duplicate), "two tensors named \"w\"");
    TensorFile reserved;
    reserved.tensors.push_back({"__metadata__", patterned({1}, DType::F32)});
    EXPECT_ERROR_CONTAINS(write_safetensors(path, reserved), "reserves that key");
    TensorFile undefined;
    undefined.tensors.push_back({"u", Tensor()});
    EXPECT_ERROR_CONTAINS(write_safetensors(path, undefined), "\"u\": it is undefined");
    TensorFile bad_utf8;
    bad_utf8.tensors.push_back({"bad\xff", patterned({1}, DType::F32)});
    EXPECT_ERROR_CONTAINS(write_safetensors(path, bad_utf8), "not valid UTF-8");
    EXPECT_EQ(read_file_bytes(path), before);
}

TEST(SafetensorsSerialization, MissingFileNamesThePath) {
    EXPECT_ERROR_CONTAINS(read_safetensors("/nonexistent/w.safetensors"),
                          "cannot read the safetensors file '/nonexistent/w.safetensors': no such file");
    const ScratchDir dir;
    EXPECT_ERROR_CONTAINS(read_safetensors(dir.path()), "it is a folder, not a file");
}

// ---- malformed files ------------------------------------------------------------------------

TEST(SafetensorsValidation, FileShorterThanTheHeaderLength) {
    const std::vector<std::byte> five(5, std::byte{0});
    EXPECT_ERROR_CONTAINS(decode_safetensors(five, "short.safetensors"),
                          "short.safetensors: not a safetensors file: it is 5 bytes long, shorter than the 8-byte");
    EXPECT_ERROR_CONTAINS(decode_safetensors({}, "empty.safetensors"), "it is 0 bytes long");
}

TEST(SafetensorsValidation, AbsurdHeaderLength) {
    std::vector<std::byte> bytes;
    append_u64(bytes, 200'000'000);
    bytes.resize(64, std::byte{' '});
    EXPECT_ERROR_CONTAINS(decode_safetensors(bytes, "big.safetensors"),
                          "big.safetensors: not a safetensors file: the header length in its first 8 bytes is "
                          "200000000 bytes, more than the format's limit of 100000000");
    // A PNG: its first 8 bytes read as a huge length.
    const std::vector<std::byte> png = {std::byte{0x89}, std::byte{'P'},  std::byte{'N'},  std::byte{'G'},
                                        std::byte{'\r'}, std::byte{'\n'}, std::byte{0x1a}, std::byte{'\n'},
                                        std::byte{0},    std::byte{0}};
    EXPECT_ERROR_CONTAINS(decode_safetensors(png, "image.png"), "not a safetensors file");
}

TEST(SafetensorsValidation, HeaderLengthPastTheEndOfTheFile) {
    std::vector<std::byte> bytes = raw_file("{}", 0);
    bytes[0] = std::byte{100};
    EXPECT_ERROR_CONTAINS(decode_safetensors(bytes, "cut.safetensors"),
                          "cut.safetensors: truncated or not a safetensors file: the header length is 100 bytes, "
                          "but only 2 bytes follow");
}

TEST(SafetensorsValidation, HeaderThatIsNotJsonGivesTheBytePosition) {
    EXPECT_DECODE_ERROR(R"({"a": {"dtype": "F32",, }})", 0,
                        "JSON header (which starts at file byte 8): not valid JSON at byte 23 (line 1, column 23)");
    EXPECT_DECODE_ERROR("{\"a\"\xff}", 0, "not valid JSON");
    EXPECT_DECODE_ERROR("", 0, "not valid JSON");
}

TEST(SafetensorsValidation, HeaderThatIsNotAnObject) {
    EXPECT_DECODE_ERROR("[1, 2]", 0, "the JSON header is an array, expected an object mapping tensor names");
    EXPECT_DECODE_ERROR("\"text\"", 0, "the JSON header is the string");
}

TEST(SafetensorsValidation, EntryThatIsNotAnObject) {
    EXPECT_DECODE_ERROR(R"({"w": [0, 4]})", 4, "tensor \"w\": expected an object with dtype, shape and data_offsets");
}

TEST(SafetensorsValidation, EntryMissingAField) {
    EXPECT_DECODE_ERROR(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4, "tensor \"w\": missing \"dtype\"");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4, "tensor \"w\": missing \"shape\"");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": [1]}})", 4, "tensor \"w\": missing \"data_offsets\"");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": [1], "data_offset": [0, 4]}})", 4,
                        "missing \"data_offsets\"; is \"data_offset\" a misspelling of it?");
}

TEST(SafetensorsValidation, EntryFieldsOfTheWrongType) {
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": 1, "shape": [1], "data_offsets": [0, 4]}})", 4,
                        "tensor \"w\": dtype: expected a string such as \"F32\", got the number 1");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 4,
                        "tensor \"w\": shape: expected an array of non-negative integers, got the number 1");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": [1, -1], "data_offsets": [0, 4]}})", 4,
                        "shape: expected non-negative integers, got -1 on axis 1");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}})", 4,
                        "shape: expected non-negative integers, got 1.0 on axis 0");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4,
                        "tensor \"w\": data_offsets: expected [begin, end], two non-negative integers, got [0]");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, "4"]}})", 4,
                        "data_offsets: expected [begin, end]");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": {"begin": 0}}})", 4,
                        "data_offsets: expected [begin, end]");
}

TEST(SafetensorsValidation, UnknownDtypeListsTheSupportedOnes) {
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8,
                        "tensor \"w\": unsupported dtype \"F64\" (Tessera reads BF16, F16, F32, I32, U8)");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "float32", "shape": [1], "data_offsets": [0, 4]}})", 4,
                        "unsupported dtype \"float32\"");
}

TEST(SafetensorsValidation, OffsetsOutOfRangeOrReversed) {
    EXPECT_DECODE_ERROR(
        R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8,
        "tensor \"w\": data_offsets [0, 16] run past the end of the data buffer (8 bytes after the header)");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8,
                        "tensor \"w\": data_offsets [8, 4] end before they begin");
}

TEST(SafetensorsValidation, SizeThatDoesNotMatchTheShape) {
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8,
                        "tensor \"w\": shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] hold 8");
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 8]}})", 8,
                        "needs more than 2^64 bytes");
}

TEST(SafetensorsValidation, OverlappingTensors) {
    EXPECT_DECODE_ERROR(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                        12, "tensors \"a\" (bytes [0, 8)) and \"b\" (bytes [4, 12)) overlap");
    EXPECT_DECODE_ERROR(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                        8, "overlap");
    EXPECT_DECODE_ERROR(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
                        8, "tensors \"a\" (bytes [0, 8)) and \"e\" (bytes [4, 4)) overlap");
}

TEST(SafetensorsValidation, GapsAndTrailingBytes) {
    EXPECT_DECODE_ERROR(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                            "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                        12, "the tensors do not cover the data buffer: bytes [4, 8) belong to no tensor");
    EXPECT_DECODE_ERROR(R"({"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8,
                        "the tensors do not cover the data buffer: bytes [0, 4) belong to no tensor");
    EXPECT_DECODE_ERROR(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8,
                        "the tensors do not cover the data buffer: bytes [4, 8) (of 8) belong to no tensor");
    EXPECT_DECODE_ERROR("{}", 3, "bytes [0, 3) (of 3) belong to no tensor");
}

TEST(SafetensorsValidation, DuplicateNames) {
    EXPECT_DECODE_ERROR(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                            "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                        2, "w: duplicate key");
}

TEST(SafetensorsValidation, MetadataMustMapStringsToStrings) {
    EXPECT_DECODE_ERROR(R"({"__metadata__": ["a"]})", 0,
                        "\"__metadata__\": expected an object of strings, got an array");
    EXPECT_DECODE_ERROR(R"({"__metadata__": {"step": 1200}})", 0,
                        "\"__metadata__\".\"step\": expected a string, got the number 1200");
}

TEST(SafetensorsValidation, ErrorsFromAFileNameIt) {
    const ScratchDir dir;
    write_file_bytes(dir / "broken.safetensors", raw_file(R"({"w": {"dtype": "F32"}})", 0));
    EXPECT_ERROR_CONTAINS(read_safetensors(dir / "broken.safetensors"),
                          (dir / "broken.safetensors").string() + ": tensor \"w\": missing \"shape\"");
}

TEST(SafetensorsValidation, EveryTruncationAndByteFlipFailsCleanly) {
    TensorFile file;
    file.tensors = {{"a", patterned({3, 2}, DType::F32)}, {"b", patterned({5}, DType::U8)}};
    file.metadata["m"] = "x";
    const std::vector<std::byte> bytes = encode_safetensors(file);
    for (std::size_t size = 0; size < bytes.size(); ++size) {
        const std::span<const std::byte> prefix(bytes.data(), size);
        EXPECT_THROW(decode_safetensors(prefix, "cut"), Error) << "prefix of " << size << " bytes";
    }
    // Flipping header bytes may still give a valid file (a changed digit in a name); it must never crash
    // or read out of bounds, and whatever decodes must be self-consistent.
    std::mt19937 random(7);
    const std::size_t header_end = 8 + static_cast<std::size_t>(bytes[0]);
    for (int trial = 0; trial < 2000; ++trial) {
        std::vector<std::byte> damaged = bytes;
        const std::size_t at = random() % header_end;
        damaged[at] ^= static_cast<std::byte>(1u << (random() % 8));
        try {
            const TensorFile decoded = decode_safetensors(damaged, "flipped");
            for (const TensorRecord& record : decoded.tensors) EXPECT_TRUE(record.value.is_contiguous());
        } catch (const Error&) {
        }
    }
}
