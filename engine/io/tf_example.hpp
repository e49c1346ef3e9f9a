// tf.Example, the record TensorFlow input pipelines store in TFRecord shards (the ResNet seed's
// ImageNet: `image/encoded` JPEG bytes, `image/class/label` int64), read and written here in protobuf's
// wire format by hand (TensorFlow's example.proto and feature.proto):
//
//   Example  { Features features = 1; }          Features { map<string, Feature> feature = 1; }
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1; }  Int64List { repeated int64 value = 1; }
//
//   TFExample example = parse_tf_example(record);            // record: one TFRecord's data
//   const std::string& jpeg = example.at("image/encoded").bytes.at(0);
//   std::int64_t label = example.at("image/class/label").int64s.at(0);
//
// Repeated scalars are read packed or unpacked (proto3 writes them packed); unknown fields are skipped.
// A record that is not a well-formed Example throws tessera::Error saying what is wrong in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace tessera::io {

struct TFFeature {
    enum class Kind { Bytes, Float, Int64 };
    Kind kind = Kind::Bytes;
    std::vector<std::string> bytes{};      // Kind::Bytes
    std::vector<float> floats{};           // Kind::Float
    std::vector<std::int64_t> int64s{};    // Kind::Int64
    bool operator==(const TFFeature&) const = default;
};

using TFExample = std::map<std::string, TFFeature>;  // by feature key

TFExample parse_tf_example(std::span<const std::byte> record);
std::vector<std::byte> serialize_tf_example(const TFExample& example);

}  // namespace tessera::io
