#include "run/model_dir.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"
#include "core/user_files.hpp"
#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"

#include <algorithm>
#include <cmath>
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

void write_text(const fs::path& path, const std::string& text) {
    io::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace

void set_checkpoint_fault_hook(void (*hook)(std::string_view stage)) { g_fault_hook = hook; }

namespace {

// "model.ckpt-000200.safetensors" → 200 with kind "model"; nullopt for any other name.
std::optional<std::int64_t> checkpoint_step(const std::string& name, std::string_view kind) {
    const std::string prefix = std::string(kind) + ".ckpt-";
    constexpr std::string_view suffix = ".safetensors";
    if (!name.starts_with(prefix) || !name.ends_with(suffix)) return std::nullopt;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.empty() || digits.size() > 15 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    return std::stoll(digits);
}

bool is_checkpoint_file(const std::string& name) {
    return checkpoint_step(name, "model").has_value() || checkpoint_step(name, "state").has_value();
}

// An index entry names a file inside the folder: no separators, no "..", nothing but a plain name.
std::string plain_file_name(const json::Json& value, const std::string& where, const char* field) {
    const std::string name = value.get<std::string>();
    const bool plain = !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                       std::all_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x20; });
    TESSERA_CHECK(plain, where << ": the entry's \"" << field << "\" is \"" << printable_path(name)
                               << "\", not a plain file name inside the model_dir; the index is written by Tessera only");
    return name;
}

// Why a checkpoint's values cannot be resumed from, or empty.
std::string first_non_finite(const std::vector<train::NamedTensor>& entries) {
    for (const train::NamedTensor& entry : entries) {
        if (entry.value.dtype() != DType::F32) continue;
        const Tensor dense = entry.value.contiguous();
        const float* values = dense.data<float>();
        for (std::int64_t index = 0; index < dense.num_elements(); ++index) {
            if (!std::isfinite(values[index])) return entry.name;
        }
    }
    return {};
}

}  // namespace

ModelDir::ModelDir(fs::path path, ModelDirAccess access, std::string_view command) : m_path(std::move(path)), m_access(access) {
    require_plain_path(m_path.native(), "the model_dir");
    if (access == ModelDirAccess::ReadOnly) {
        TESSERA_CHECK(file_kind(m_path) == FileKind::Folder,
                      "the model_dir '" << m_path.string() << "' " << (fs::exists(m_path) ? "is not a folder" : "does not exist")
                                        << ": train first (tessera-cli train), or name the folder of an earlier run with --model-dir");
        m_path = fs::absolute(m_path);
        if (!fs::exists(m_path / index_name)) m_scanned = scan_checkpoint_files();
        return;
    }
    std::error_code error;
    fs::create_directories(m_path, error);
    TESSERA_CHECK(!error && fs::is_directory(m_path),
                  "cannot create the model_dir '" << m_path.string() << "': " << (error ? error.message() : "a file has that name")
                                                  << "; choose another model_dir");
    m_path = fs::absolute(m_path);
    m_lock = std::make_unique<ModelDirLock>(m_path, command);
    if (const auto& previous = m_lock->taken_over_from()) {
        m_notes.push_back("took over the lock left by a run that ended without releasing it: " + previous->describe());
    }
    io::remove_stale_temporaries(m_path);
    recover_index();
    remove_unlisted();
}

ModelDir::~ModelDir() = default;

// The checkpoint pairs whose files are both present, oldest first (nothing is verified here).
std::vector<CheckpointInfo> ModelDir::scan_checkpoint_files() const {
    std::map<std::int64_t, int> seen;  // step → 1 model, 2 state, 3 both
    for (const auto& entry : fs::directory_iterator(m_path)) {
        const std::string name = entry.path().filename().string();
        if (const auto step = checkpoint_step(name, "model")) seen[*step] |= 1;
        if (const auto step = checkpoint_step(name, "state")) seen[*step] |= 2;
    }
    std::vector<CheckpointInfo> found;
    for (const auto& [step, parts] : seen) {
        if (parts == 3) {
            found.push_back({step, m_path / ("model." + step_suffix(step) + ".safetensors"), m_path / ("state." + step_suffix(step) + ".safetensors")});
        }
    }
    return found;
}

// No index, or a damaged one: list again the checkpoints whose files verify. Files that do not verify
// are renamed *.damaged (kept, and out of the way of the clean-up), never deleted.
void ModelDir::recover_index() {
    const fs::path index = m_path / index_name;
    if (fs::exists(index)) {
        try {
            (void)checkpoints();
            return;
        } catch (const Error& error) {
            const fs::path aside = m_path / (std::string(index_name) + ".damaged");
            fs::rename(index, aside);
            m_notes.push_back("the checkpoint index was damaged (" + std::string(error.what()) + "); it is kept as " +
                              aside.filename().string() + " and the index is rebuilt from the checkpoint files");
        }
    }
    std::vector<CheckpointInfo> found = scan_checkpoint_files();
    if (found.empty()) return;
    std::vector<CheckpointInfo> verified;
    for (const CheckpointInfo& candidate : found) {
        try {
            (void)load(candidate);
            verified.push_back(candidate);
        } catch (const Error& error) {
            for (const fs::path& file : {candidate.weights, candidate.state}) {
                std::error_code ignored;
                fs::rename(file, fs::path(file.string() + ".damaged"), ignored);
            }
            m_notes.push_back("step " + std::to_string(candidate.step) + " does not verify and is kept aside as *.damaged: " + error.what());
        }
    }
    write_index(verified);
    m_notes.push_back("the checkpoint index was missing: rebuilt from " + std::to_string(verified.size()) + " checkpoint" +
                      (verified.size() == 1 ? "" : "s") + " that verify (of " + std::to_string(found.size()) + " found)");
}

std::vector<CheckpointInfo> ModelDir::checkpoints() const {
    if (m_scanned) return *m_scanned;
    const fs::path index = m_path / index_name;
    if (!fs::exists(index)) return {};
    require_regular_file(index, "checkpoint index");
    const std::string where = index.string();
    const json::Json root = json::parse_json_strictly(read_user_text_file(index, "checkpoint index"), where);
    const auto fail = [&](const std::string& what) {
        TESSERA_REJECT(where << ": " << what << "; the index is written by Tessera only — restore it from a backup, or delete it "
                                                  "and Tessera rebuilds it from the checkpoint files that verify");
    };
    if (!root.is_object() || !root.contains("format") || root["format"] != index_format || !root.contains("checkpoints") ||
        !root["checkpoints"].is_array()) {
        fail("not a Tessera checkpoint index (expected {\"format\": \"" + std::string(index_format) + "\", \"checkpoints\": [...]})");
    }
    std::vector<CheckpointInfo> result;
    for (const json::Json& item : root["checkpoints"]) {
        if (!item.is_object() || !item.contains("step") || !item["step"].is_number_integer() || !item.contains("weights") ||
            !item["weights"].is_string() || !item.contains("state") || !item["state"].is_string()) {
            fail("a checkpoint entry is not {\"step\": n, \"weights\": file, \"state\": file}: " + item.dump());
        }
        result.push_back({item["step"].get<std::int64_t>(), m_path / plain_file_name(item["weights"], where, "weights"),
                          m_path / plain_file_name(item["state"], where, "state")});
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
    TESSERA_ASSERT(m_access == ModelDirAccess::Write, "a read-only model_dir cannot save");
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
    // Read back before anything older goes: a checkpoint that does not verify (a disk that returns
    // other bytes) must not replace one that does.
    try {
        (void)load(info);
    } catch (const Error& error) {
        TESSERA_REJECT("the checkpoint just written for step " << step << " does not verify: " << error.what()
                                                                << ". The previous checkpoints are kept; check the disk.");
    }

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
    io::TensorFile state = io::read_safetensors(info.state);
    for (const auto* file_metadata : {&checkpoint.metadata, &state.metadata}) {
        const auto step = file_metadata->find("step");
        TESSERA_CHECK(step == file_metadata->end() || step->second == std::to_string(info.step),
                      "the checkpoint files of step " << info.step << " say they are of step " << step->second
                                                      << ": they were renamed or mixed up");
    }
    checkpoint.state = to_entries(std::move(state));
    for (const auto* entries : {&checkpoint.weights, &checkpoint.state}) {
        const std::string bad = first_non_finite(*entries);
        TESSERA_CHECK(bad.empty(), info.weights.filename().string()
                                       << ": tensor '" << bad << "' holds NaN or infinite values, so the checkpoint cannot be "
                                          "resumed from (it was written by a diverged run, or damaged)");
    }
    return checkpoint;
}

std::optional<Checkpoint> ModelDir::load_newest_verified(std::vector<std::string>& skipped) const {
    const std::vector<CheckpointInfo> all = checkpoints();
    if (all.empty()) return std::nullopt;
    for (auto candidate = all.rbegin(); candidate != all.rend(); ++candidate) {
        try {
            return load(*candidate);
        } catch (const Error& error) {
            skipped.push_back("step " + std::to_string(candidate->step) + " (" + candidate->weights.filename().string() + "): " + error.what());
        }
    }
    std::string reasons;
    for (const std::string& line : skipped) reasons += "\n  " + line;
    TESSERA_REJECT("no checkpoint in the model_dir '" << m_path.string() << "' verifies:" << reasons
                                                        << "\nRestore the folder from a backup, or move it away to start the run over.");
}

std::optional<std::string> ModelDir::experiment_text() const {
    const fs::path file = m_path / "experiment.json";
    if (!fs::exists(file)) return std::nullopt;
    return read_user_text_file(file, "experiment copy");
}

void ModelDir::write_experiment_text(const std::string& text) const { write_text(m_path / "experiment.json", text); }

// Checkpoint files the index does not list: written by a run killed before it committed them.
void ModelDir::remove_unlisted() const {
    std::set<fs::path> listed;
    for (const CheckpointInfo& c : checkpoints()) {
        listed.insert(c.weights);
        listed.insert(c.state);
    }
    if (!fs::exists(m_path / index_name)) return;  // nothing committed: nothing to tell apart
    for (const auto& entry : fs::directory_iterator(m_path)) {
        const std::string name = entry.path().filename().string();
        if (is_checkpoint_file(name) && !listed.contains(entry.path())) {
            std::error_code ignored;
            fs::remove(entry.path(), ignored);
        }
    }
}

}  // namespace tessera::run
