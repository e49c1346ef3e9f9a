#include "run/model_dir.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"
#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace tessera::run {

namespace fs = std::filesystem;

namespace {

constexpr const char* index_name = "checkpoint";
void (*g_fault_hook)(std::string_view) = nullptr;

void fault_point(std::string_view stage) {
    if (g_fault_hook) g_fault_hook(stage);
}
constexpr const char* index_format = "tessera-checkpoints";

std::string step_suffix(std::int64_t step) {
    char text[32];
    std::snprintf(text, sizeof text, "ckpt-%06lld", static_cast<long long>(step));
    return text;
}

io::TensorFile to_tensor_file(const std::vector<train::NamedTensor>& entries, const std::map<std::string, std::string>& metadata) {
    io::TensorFile file;
    for (const train::NamedTensor& entry : entries) file.tensors.push_back({entry.name, entry.value});
    file.metadata = metadata;
    return file;
}

std::vector<train::NamedTensor> to_entries(io::TensorFile file) {
    std::vector<train::NamedTensor> entries;
    for (io::TensorRecord& record : file.tensors) entries.push_back({std::move(record.name), std::move(record.value)});
    return entries;
}

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in, "cannot read '" << path.string() << "'");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

void write_text(const fs::path& path, const std::string& text) {
    io::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace

void set_checkpoint_fault_hook(void (*hook)(std::string_view stage)) { g_fault_hook = hook; }

ModelDir::ModelDir(fs::path path) : m_path(std::move(path)) {
    std::error_code error;
    fs::create_directories(m_path, error);
    TESSERA_CHECK(!error && fs::is_directory(m_path),
                  "cannot create the model_dir '" << m_path.string() << "': " << (error ? error.message() : "a file has that name")
                                                  << "; choose another model_dir");
    m_path = fs::absolute(m_path);
    io::remove_stale_temporaries(m_path);
    remove_unlisted();
}

std::vector<CheckpointInfo> ModelDir::checkpoints() const {
    const fs::path index = m_path / index_name;
    if (!fs::exists(index)) return {};
    const std::string where = index.string();
    const json::Json root = json::parse_json_strictly(read_text(index), where);
    const auto fail = [&](const std::string& what) {
        TESSERA_FAIL(where << ": " << what << "; the index is written by Tessera only — restore it from a backup, or move the "
                                              "folder away to start a new run");
    };
    if (!root.is_object() || root.value("format", "") != index_format || !root.contains("checkpoints") ||
        !root["checkpoints"].is_array()) {
        fail("not a Tessera checkpoint index (expected {\"format\": \"" + std::string(index_format) + "\", \"checkpoints\": [...]})");
    }
    std::vector<CheckpointInfo> result;
    for (const json::Json& item : root["checkpoints"]) {
        if (!item.is_object() || !item.contains("step") || !item["step"].is_number_integer() || !item.contains("weights") ||
            !item["weights"].is_string() || !item.contains("state") || !item["state"].is_string()) {
            fail("a checkpoint entry is not {\"step\": n, \"weights\": file, \"state\": file}: " + item.dump());
        }
        result.push_back({item["step"].get<std::int64_t>(), m_path / item["weights"].get<std::string>(),
                          m_path / item["state"].get<std::string>()});
    }
    std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
    return result;
}

std::optional<CheckpointInfo> ModelDir::latest() const {
    auto all = checkpoints();
    if (all.empty()) return std::nullopt;
    return all.back();
}

void ModelDir::write_index(const std::vector<CheckpointInfo>& checkpoints) const {
    json::Json list = json::Json::array();
    for (const CheckpointInfo& c : checkpoints) {
        list.push_back({{"step", c.step}, {"weights", c.weights.filename().string()}, {"state", c.state.filename().string()}});
    }
    const json::Json root = {{"format", index_format}, {"version", 1}, {"checkpoints", list}};
    write_text(m_path / index_name, root.dump(2) + "\n");
}

CheckpointInfo ModelDir::save(std::int64_t step, const std::vector<train::NamedTensor>& weights,
                              const std::vector<train::NamedTensor>& state, const std::map<std::string, std::string>& metadata,
                              std::int64_t keep) {
    TESSERA_CHECK(keep >= 1, "expected to keep at least one checkpoint, got " << keep);
    CheckpointInfo info{step, m_path / ("model." + step_suffix(step) + ".safetensors"),
                        m_path / ("state." + step_suffix(step) + ".safetensors")};
    std::map<std::string, std::string> tagged = metadata;
    tagged["step"] = std::to_string(step);
    tagged["format"] = "tessera";
    io::write_safetensors(info.state, to_tensor_file(state, tagged));
    fault_point("state written");
    io::write_safetensors(info.weights, to_tensor_file(weights, tagged));
    fault_point("weights written");

    std::vector<CheckpointInfo> all = checkpoints();
    std::erase_if(all, [&](const CheckpointInfo& c) { return c.step >= step; });  // a re-run past a resume point replaces them
    all.push_back(info);
    std::vector<CheckpointInfo> dropped;
    while (static_cast<std::int64_t>(all.size()) > keep) {
        dropped.push_back(all.front());
        all.erase(all.begin());
    }
    write_index(all);  // the commit point
    for (const CheckpointInfo& c : dropped) {
        std::error_code ignored;
        fs::remove(c.weights, ignored);
        fs::remove(c.state, ignored);
    }
    remove_unlisted();
    return info;
}

Checkpoint ModelDir::load(const CheckpointInfo& info) const {
    Checkpoint checkpoint;
    checkpoint.info = info;
    io::TensorFile weights = io::read_safetensors(info.weights);
    checkpoint.metadata = weights.metadata;
    checkpoint.weights = to_entries(std::move(weights));
    checkpoint.state = to_entries(io::read_safetensors(info.state));
    return checkpoint;
}

std::optional<std::string> ModelDir::experiment_text() const {
    const fs::path file = m_path / "experiment.json";
    if (!fs::exists(file)) return std::nullopt;
    return read_text(file);
}

void ModelDir::write_experiment_text(const std::string& text) const { write_text(m_path / "experiment.json", text); }

// Checkpoint files the index does not list: written by a run killed before it committed them.
void ModelDir::remove_unlisted() const {
    std::set<fs::path> listed;
    for (const CheckpointInfo& c : checkpoints()) {
        listed.insert(c.weights);
        listed.insert(c.state);
    }
    for (const auto& entry : fs::directory_iterator(m_path)) {
        const std::string name = entry.path().filename().string();
        const bool is_checkpoint_file = (name.starts_with("model.ckpt-") || name.starts_with("state.ckpt-")) && name.ends_with(".safetensors");
        if (is_checkpoint_file && !listed.contains(entry.path())) {
            std::error_code ignored;
            fs::remove(entry.path(), ignored);
        }
    }
}

}  // namespace tessera::run
