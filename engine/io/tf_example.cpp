#include "io/tf_example.hpp"

#include "core/error.hpp"

#include <cstring>

namespace tessera::io {

namespace {

enum WireType : std::uint32_t { Varint = 0, Fixed64 = 1, LengthDelimited = 2, Fixed32 = 5 };

// A bounded reader over one message's bytes; every read checks what is left.
class WireReader {
public:
    WireReader(std::span<const std::byte> bytes, const char* message) : m_bytes(bytes), m_message(message) {}
    bool done() const { return m_at == m_bytes.size(); }

    std::uint64_t varint() {
        std::uint64_t value = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            TESSERA_CHECK(m_at < m_bytes.size(), "not a tf.Example: a varint in " << m_message << " runs past its end");
            const auto byte = static_cast<std::uint8_t>(m_bytes[m_at++]);
            value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
            if (!(byte & 0x80)) return value;
        }
        TESSERA_REJECT("not a tf.Example: a varint in " << m_message << " is longer than 10 bytes");
    }
    std::span<const std::byte> take(std::uint64_t count) {
        TESSERA_CHECK(count <= m_bytes.size() - m_at,
                      "not a tf.Example: a field in " << m_message << " claims " << count << " bytes, " << m_bytes.size() - m_at << " remain");
        const std::span<const std::byte> part = m_bytes.subspan(m_at, static_cast<std::size_t>(count));
        m_at += static_cast<std::size_t>(count);
        return part;
    }
    void skip(std::uint32_t wire_type) {
        switch (wire_type) {
            case Varint: varint(); return;
            case Fixed64: take(8); return;
            case LengthDelimited: take(varint()); return;
            case Fixed32: take(4); return;
            default: TESSERA_REJECT("not a tf.Example: wire type " << wire_type << " in " << m_message << " (groups or damage)");
        }
    }

private:
    std::span<const std::byte> m_bytes;
    const char* m_message;
    std::size_t m_at = 0;
};

float fixed32_float(std::span<const std::byte> bytes) {
    float value = 0;
    std::memcpy(&value, bytes.data(), 4);
    return value;
}

TFFeature parse_feature(std::span<const std::byte> bytes) {
    TFFeature feature;
    WireReader in(bytes, "a Feature");
    while (!in.done()) {
        const std::uint64_t key = in.varint();
        const auto field = static_cast<std::uint32_t>(key >> 3), wire = static_cast<std::uint32_t>(key & 7);
        if (field < 1 || field > 3 || wire != LengthDelimited) {
            in.skip(wire);
            continue;
        }
        // A oneof: the last kind written wins, as protobuf parses it.
        feature = TFFeature{};
        WireReader list(in.take(in.varint()), field == 1 ? "a BytesList" : field == 2 ? "a FloatList" : "an Int64List");
        feature.kind = field == 1 ? TFFeature::Kind::Bytes : field == 2 ? TFFeature::Kind::Float : TFFeature::Kind::Int64;
        while (!list.done()) {
            const std::uint64_t list_key = list.varint();
            const auto list_field = static_cast<std::uint32_t>(list_key >> 3), list_wire = static_cast<std::uint32_t>(list_key & 7);
            if (list_field != 1) {
                list.skip(list_wire);
                continue;
            }
            if (field == 1) {
                TESSERA_CHECK(list_wire == LengthDelimited, "not a tf.Example: a BytesList value has wire type " << list_wire);
                const std::span<const std::byte> value = list.take(list.varint());
                feature.bytes.emplace_back(reinterpret_cast<const char*>(value.data()), value.size());
            } else if (field == 2) {
                if (list_wire == LengthDelimited) {  // packed
                    const std::span<const std::byte> packed = list.take(list.varint());
                    TESSERA_CHECK(packed.size() % 4 == 0, "not a tf.Example: a packed FloatList holds " << packed.size() << " bytes, not a multiple of 4");
                    for (std::size_t at = 0; at < packed.size(); at += 4) feature.floats.push_back(fixed32_float(packed.subspan(at, 4)));
                } else {
                    TESSERA_CHECK(list_wire == Fixed32, "not a tf.Example: a FloatList value has wire type " << list_wire);
                    feature.floats.push_back(fixed32_float(list.take(4)));
                }
            } else {
                if (list_wire == LengthDelimited) {  // packed
                    WireReader packed(list.take(list.varint()), "a packed Int64List");
                    while (!packed.done()) feature.int64s.push_back(static_cast<std::int64_t>(packed.varint()));
                } else {
                    TESSERA_CHECK(list_wire == Varint, "not a tf.Example: an Int64List value has wire type " << list_wire);
                    feature.int64s.push_back(static_cast<std::int64_t>(list.varint()));
                }
            }
        }
    }
    return feature;
}

void put_varint(std::vector<std::byte>& out, std::uint64_t value) {
    while (value >= 0x80) {
        out.push_back(static_cast<std::byte>((value & 0x7f) | 0x80));
        value >>= 7;
    }
    out.push_back(static_cast<std::byte>(value));
}

void put_length_delimited(std::vector<std::byte>& out, std::uint32_t field, std::span<const std::byte> payload) {
    put_varint(out, (std::uint64_t{field} << 3) | LengthDelimited);
    put_varint(out, payload.size());
    out.insert(out.end(), payload.begin(), payload.end());
}

std::span<const std::byte> as_bytes(const std::string& text) { return std::as_bytes(std::span(text.data(), text.size())); }

}  // namespace

TFExample parse_tf_example(std::span<const std::byte> record) {
    TFExample example;
    WireReader in(record, "the Example");
    while (!in.done()) {
        const std::uint64_t key = in.varint();
        const auto field = static_cast<std::uint32_t>(key >> 3), wire = static_cast<std::uint32_t>(key & 7);
        if (field != 1 || wire != LengthDelimited) {
            in.skip(wire);
            continue;
        }
        WireReader features(in.take(in.varint()), "its Features");
        while (!features.done()) {
            const std::uint64_t features_key = features.varint();
            const auto features_field = static_cast<std::uint32_t>(features_key >> 3), features_wire = static_cast<std::uint32_t>(features_key & 7);
            if (features_field != 1 || features_wire != LengthDelimited) {
                features.skip(features_wire);
                continue;
            }
            // A map entry: key = 1 (string), value = 2 (Feature).
            WireReader entry(features.take(features.varint()), "a feature map entry");
            std::string name;
            TFFeature value;
            while (!entry.done()) {
                const std::uint64_t entry_key = entry.varint();
                const auto entry_field = static_cast<std::uint32_t>(entry_key >> 3), entry_wire = static_cast<std::uint32_t>(entry_key & 7);
                if (entry_field == 1 && entry_wire == LengthDelimited) {
                    const std::span<const std::byte> text = entry.take(entry.varint());
                    name.assign(reinterpret_cast<const char*>(text.data()), text.size());
                } else if (entry_field == 2 && entry_wire == LengthDelimited) {
                    value = parse_feature(entry.take(entry.varint()));
                } else {
                    entry.skip(entry_wire);
                }
            }
            example[name] = std::move(value);  // a repeated key: the last wins, as protobuf's maps do
        }
    }
    return example;
}

std::vector<std::byte> serialize_tf_example(const TFExample& example) {
    std::vector<std::byte> features;
    for (const auto& [name, feature] : example) {
        std::vector<std::byte> list;
        switch (feature.kind) {
            case TFFeature::Kind::Bytes:
                for (const std::string& value : feature.bytes) put_length_delimited(list, 1, as_bytes(value));
                break;
            case TFFeature::Kind::Float: {
                std::vector<std::byte> packed(feature.floats.size() * 4);
                if (!packed.empty()) std::memcpy(packed.data(), feature.floats.data(), packed.size());
                if (!packed.empty()) put_length_delimited(list, 1, packed);
                break;
            }
            case TFFeature::Kind::Int64: {
                std::vector<std::byte> packed;
                for (std::int64_t value : feature.int64s) put_varint(packed, static_cast<std::uint64_t>(value));
                if (!packed.empty()) put_length_delimited(list, 1, packed);
                break;
            }
        }
        std::vector<std::byte> encoded_feature;
        put_length_delimited(encoded_feature, feature.kind == TFFeature::Kind::Bytes ? 1 : feature.kind == TFFeature::Kind::Float ? 2 : 3, list);
        std::vector<std::byte> entry;
        put_length_delimited(entry, 1, as_bytes(name));
        put_length_delimited(entry, 2, encoded_feature);
        put_length_delimited(features, 1, entry);
    }
    std::vector<std::byte> out;
    put_length_delimited(out, 1, features);
    return out;
}

}  // namespace tessera::io
