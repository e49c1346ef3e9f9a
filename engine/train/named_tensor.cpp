#include "train/named_tensor.hpp"

#include <limits>
#include <sstream>
#include <utility>

namespace tessera::train {

namespace {

void check_one_element(const NamedTensor& entry, DType dtype) {
    TESSERA_CHECK(entry.value.is_defined(), "state entry '" << entry.name << "': expected a " << dtype_name(dtype)
                                                            << " tensor of shape [1], got an undefined tensor");
    TESSERA_CHECK(entry.value.dtype() == dtype && entry.value.num_elements() == 1,
                  "state entry '" << entry.name << "': expected a " << dtype_name(dtype) << " tensor of shape [1], got "
                                  << dtype_name(entry.value.dtype()) << ' ' << shape_to_string(entry.value.shape()));
}

}  // namespace

NamedTensor make_counter_entry(std::string name, std::int64_t count) {
    TESSERA_CHECK(count >= 0 && count <= std::numeric_limits<std::int32_t>::max(),
                  "state entry '" << name << "': expected a count in [0, 2^31 - 1], got " << count);
    Tensor value = Tensor::full<std::int32_t>({1}, static_cast<std::int32_t>(count));
    return NamedTensor{std::move(name), std::move(value)};
}

std::int64_t read_counter_entry(const NamedTensor& entry) {
    check_one_element(entry, DType::I32);
    const std::int32_t count = entry.value.data<std::int32_t>()[0];
    TESSERA_CHECK(count >= 0, "state entry '" << entry.name << "': expected a count >= 0, got " << count);
    return count;
}

NamedTensor make_scalar_entry(std::string name, float value) {
    return NamedTensor{std::move(name), Tensor::full<float>({1}, value)};
}

float read_scalar_entry(const NamedTensor& entry) {
    check_one_element(entry, DType::F32);
    return entry.value.data<float>()[0];
}

const NamedTensor* find_entry(std::span<const NamedTensor> entries, std::string_view name) {
    for (const NamedTensor& entry : entries) {
        if (entry.name == name) return &entry;
    }
    return nullptr;
}

std::string describe_entries(std::span<const NamedTensor> entries) {
    if (entries.empty()) return "no entries";
    std::ostringstream out;
    for (std::size_t i = 0; i < entries.size(); ++i) {
        out << (i ? ", " : "") << entries[i].name << ' ' << shape_to_string(entries[i].value.shape());
    }
    return out.str();
}

}  // namespace tessera::train
