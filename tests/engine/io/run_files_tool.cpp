// The C++ side of the Python checks (check_safetensors.py, check_tensorboard_events.py), which
// compare our files with independent readers and writers:
//
//   run_files_tool write-samples DIR        DIR/sample.safetensors and DIR/events/events.out.tfevents.*
//   run_files_tool read-safetensors FILE    the tensors as JSON on stdout
//   run_files_tool read-tensorboard PATH    the scalars as JSON on stdout
//   run_files_tool write-examples FILE      sample tf.Examples as a TFRecord file
//   run_files_tool read-examples FILE       a TFRecord file's tf.Examples as JSON on stdout (bytes as hex)
//
// The samples are fixed; the Python scripts rebuild the expected values from the same formulas.
// Errors go to stderr with exit status 1.
#include "core/json_support.hpp"
#include "io/safetensors.hpp"
#include "io/tensorboard_events.hpp"
#include "io/tf_example.hpp"
#include "io/tfrecord.hpp"

#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

using namespace tessera;
using namespace tessera::io;
using json::Json;

namespace {

namespace fs = std::filesystem;

// Element i (row-major) of the sample tensors.
double sample_value(DType dtype, std::int64_t i) {
    switch (dtype) {
        case DType::F32: return static_cast<double>(i) * 0.25 - 3.0;
        case DType::BF16:
        case DType::F16: return static_cast<double>(i) * 0.5 - 2.0;
        case DType::I32: return static_cast<double>(i * 7 - 20);
        case DType::U8: return static_cast<double>(i * 37 % 256);
    }
    return 0;
}

Tensor sample(Shape shape, DType dtype) {
    Tensor tensor = Tensor::empty(std::move(shape), dtype);
    for (std::int64_t i = 0; i < tensor.num_elements(); ++i) {
        const double value = sample_value(dtype, i);
        switch (dtype) {
            case DType::F32: tensor.data<float>()[i] = static_cast<float>(value); break;
            case DType::BF16: tensor.data<BFloat16>()[i] = to_bfloat16(static_cast<float>(value)); break;
            case DType::F16: tensor.data<Float16>()[i] = to_float16(static_cast<float>(value)); break;
            case DType::I32: tensor.data<std::int32_t>()[i] = static_cast<std::int32_t>(value); break;
            case DType::U8: tensor.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(value); break;
        }
    }
    return tensor;
}

void write_samples(const fs::path& dir) {
    fs::create_directories(dir);
    TensorFile file;
    file.tensors.push_back({"conv.weight", sample({2, 3, 4}, DType::F32)});
    file.tensors.push_back({"norm.scale", sample({5}, DType::BF16)});
    file.tensors.push_back({"head.bias", sample({2, 2}, DType::F16)});
    file.tensors.push_back({"labels", sample({3, 1, 2}, DType::I32)});
    file.tensors.push_back({"mask", sample({7}, DType::U8)});
    file.tensors.push_back({"loss_scale", Tensor::full<float>({}, 42.5f)});
    file.tensors.push_back({"empty", Tensor::zeros({0, 3}, DType::F32)});
    // A strided view: rows 1-2, columns 2-4 of a [4, 6] sample.
    file.tensors.push_back({"tile", sample({4, 6}, DType::F32).view_box({1, 2}, {2, 3})});
    file.metadata = {{"format", "pt"}, {"producer", "tessera"}, {"step", "1200"}};
    write_safetensors(dir / "sample.safetensors", file);

    TensorBoardWriter writer(dir / "events");
    for (int step = 0; step < 5; ++step) writer.add_scalar("loss/train", 1.0 / (1 + step), step, 1700000000.0 + step);
    writer.add_scalar("lr", 0.0, 4, 1700000004.5);
    writer.add_session_start(3, 1700000010.0);
    writer.add_scalar("loss/train", 0.25, 3, 1700000011.0);
    writer.add_scalar("loss/train", 3.0e38, std::int64_t{1} << 40, 1700000012.0);
    writer.add_scalar("\xc3\xbcnicode/tag", 1.5, 7, 1700000013.0);
    writer.flush();
}

double element_as_double(const Tensor& tensor, std::int64_t i) {
    switch (tensor.dtype()) {
        case DType::F32: return tensor.data<float>()[i];
        case DType::BF16: return to_float(tensor.data<BFloat16>()[i]);
        case DType::F16: return to_float(tensor.data<Float16>()[i]);
        case DType::I32: return tensor.data<std::int32_t>()[i];
        case DType::U8: return tensor.data<std::uint8_t>()[i];
    }
    return 0;
}

Json read_safetensors_as_json(const fs::path& path) {
    const TensorFile file = read_safetensors(path);
    Json tensors = Json::array();
    for (const TensorRecord& record : file.tensors) {
        Json values = Json::array();
        for (std::int64_t i = 0; i < record.value.num_elements(); ++i)
            values.push_back(element_as_double(record.value, i));
        tensors.push_back({{"name", record.name},
                           {"dtype", std::string(safetensors_dtype_name(record.value.dtype()))},
                           {"shape", record.value.shape()},
                           {"values", values}});
    }
    return {{"metadata", file.metadata}, {"tensors", tensors}};
}

Json read_tensorboard_as_json(const fs::path& path) {
    Json scalars = Json::array();
    for (const ScalarEvent& event : read_tensorboard_scalars(path))
        scalars.push_back({{"tag", event.tag},
                           {"step", event.step},
                           {"wall_time", event.wall_time},
                           {"value", static_cast<double>(event.value)}});
    return scalars;
}

// The samples check_tf_example.py expects: record r has an image of r + 1 bytes (0, 1, 2, … mod 256,
// with a zero byte inside), its label 1000·r − 7 (negative for r = 0), a float list and a class name.
void write_examples(const fs::path& file) {
    std::vector<std::vector<std::byte>> records;
    for (int r = 0; r < 3; ++r) {
        TFExample example;
        TFFeature image{.kind = TFFeature::Kind::Bytes};
        std::string bytes;
        for (int i = 0; i <= r; ++i) bytes.push_back(static_cast<char>((i * 37) % 256));
        image.bytes.push_back(bytes);
        example["image/encoded"] = image;
        example["image/class/label"] = TFFeature{.kind = TFFeature::Kind::Int64, .int64s = {1000 * r - 7}};
        example["image/bbox"] = TFFeature{.kind = TFFeature::Kind::Float, .floats = {0.25f * static_cast<float>(r), -1.5f}};
        example["image/class/text"] = TFFeature{.kind = TFFeature::Kind::Bytes, .bytes = {"class " + std::to_string(r), ""}};
        records.push_back(serialize_tf_example(example));
    }
    write_tfrecords(file, records);
}

std::string hex_of(const std::string& bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string text;
    for (unsigned char c : bytes) text += {digits[c >> 4], digits[c & 15]};
    return text;
}

Json read_examples_as_json(const fs::path& file) {
    Json examples = Json::array();
    TFRecordReader reader(file);
    std::vector<std::byte> record;
    while (reader.next(record)) {
        Json features = Json::object();
        for (const auto& [name, feature] : parse_tf_example(record)) {
            Json values = Json::array();
            for (const std::string& bytes : feature.bytes) values.push_back(hex_of(bytes));
            for (float value : feature.floats) values.push_back(static_cast<double>(value));
            for (std::int64_t value : feature.int64s) values.push_back(value);
            const char* kind = feature.kind == TFFeature::Kind::Bytes ? "bytes" : feature.kind == TFFeature::Kind::Float ? "float" : "int64";
            features[name] = {{"kind", kind}, {"values", values}};
        }
        examples.push_back({{"offset", reader.record_offset()}, {"features", features}});
    }
    return examples;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string usage =
        "usage: run_files_tool write-samples DIR | read-safetensors FILE | read-tensorboard PATH | write-examples FILE | read-examples FILE";
    if (argc != 3) {
        std::cerr << usage << '\n';
        return 2;
    }
    const std::string command = argv[1];
    const fs::path path = argv[2];
    try {
        if (command == "write-samples") {
            write_samples(path);
        } else if (command == "read-safetensors") {
            std::cout << read_safetensors_as_json(path).dump() << '\n';
        } else if (command == "read-tensorboard") {
            std::cout << read_tensorboard_as_json(path).dump() << '\n';
        } else if (command == "write-examples") {
            write_examples(path);
        } else if (command == "read-examples") {
            std::cout << read_examples_as_json(path).dump() << '\n';
        } else {
            std::cerr << usage << '\n';
            return 2;
        }
    } catch (const std::exception& error) {
        std::cerr << "run_files_tool: " << error.what() << '\n';
        return 1;
    }
    return 0;
}
