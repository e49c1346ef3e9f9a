#include "run/step_trace.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"
#include "core/user_files.hpp"
#include "io/atomic_file.hpp"

#include <cmath>
#include <span>

namespace fs = std::filesystem;
using tessera::json::Json;

namespace tessera::run {

namespace {

constexpr double microseconds_per_second = 1e6;

mesh::EventKind kind_from_name(const std::string& name, const fs::path& file) {
    for (mesh::EventKind kind : {mesh::EventKind::Compute, mesh::EventKind::Halo, mesh::EventKind::AllReduce, mesh::EventKind::Wait}) {
        if (mesh::event_kind_name(kind) == name) return kind;
    }
    TESSERA_REJECT(file.string() << ": an event's kind is '" << name << "'; expected compute, halo, all-reduce or wait");
}

mesh::StepPhase phase_from_name(const std::string& name, const fs::path& file) {
    for (mesh::StepPhase phase : {mesh::StepPhase::Forward, mesh::StepPhase::Backward, mesh::StepPhase::Update}) {
        if (mesh::step_phase_name(phase) == name) return phase;
    }
    TESSERA_REJECT(file.string() << ": an event's phase is '" << name << "'; expected forward, backward or update");
}

}  // namespace

std::string event_name(const StepTrace& trace, const mesh::CoreEvent& event) {
    if (event.layer >= 0 && static_cast<std::size_t>(event.layer) < trace.layer_names.size()) {
        return trace.layer_names[static_cast<std::size_t>(event.layer)];
    }
    if (event.kind == mesh::EventKind::AllReduce) return "all-reduce";
    return event.phase == mesh::StepPhase::Update ? "update" : "loss";
}

void write_step_trace(const fs::path& file, const StepTrace& trace) {
    Json events = Json::array();
    events.push_back({{"ph", "M"}, {"pid", 0}, {"name", "process_name"}, {"args", {{"name", "simulated cores, step " + std::to_string(trace.step)}}}});
    for (std::int64_t core = 0; core < trace.num_cores; ++core) {
        events.push_back({{"ph", "M"}, {"pid", 0}, {"tid", core}, {"name", "thread_name"}, {"args", {{"name", "core " + std::to_string(core)}}}});
    }
    for (const mesh::CoreEvent& event : trace.events) {
        const std::string kind(mesh::event_kind_name(event.kind)), phase(mesh::step_phase_name(event.phase));
        events.push_back({{"ph", "X"},
                          {"pid", 0},
                          {"tid", event.core},
                          {"name", event_name(trace, event)},
                          {"cat", kind + "/" + phase},
                          {"ts", event.start_seconds * microseconds_per_second},
                          {"dur", (event.end_seconds - event.start_seconds) * microseconds_per_second},
                          {"args", {{"layer", event.layer}, {"flops", event.flops}, {"bytes", event.bytes}, {"peer", event.peer}}}});
    }
    const Json root = {{"traceEvents", events},
                       {"displayTimeUnit", "ms"},
                       {"otherData", {{"producer", "tessera"}, {"step", trace.step}, {"num_cores", trace.num_cores}, {"layer_names", trace.layer_names}}}};
    const std::string text = root.dump();
    io::write_file_atomically(file, std::as_bytes(std::span(text.data(), text.size())));
}

StepTrace read_step_trace(const fs::path& file) {
    const std::string text = read_user_text_file(file, "step trace");
    StepTrace trace;
    try {
        const Json root = Json::parse(text);
        TESSERA_CHECK(root.is_object() && root.contains("otherData") && root["otherData"].value("producer", "") == "tessera",
                      file.string() << " is not a step trace Tessera wrote (its otherData.producer is not \"tessera\")");
        const Json& other = root["otherData"];
        trace.step = other.value("step", std::int64_t{0});
        trace.num_cores = other.value("num_cores", std::int64_t{0});
        trace.layer_names = other.value("layer_names", std::vector<std::string>{});
        for (const Json& event : root.at("traceEvents")) {
            if (event.value("ph", "") != "X") continue;
            mesh::CoreEvent e;
            e.core = event.at("tid").get<std::int64_t>();
            const std::string category = event.value("cat", "");
            const std::size_t slash = category.find('/');
            TESSERA_CHECK(slash != std::string::npos, file.string() << ": an event's category is '" << category << "'; expected <kind>/<phase>");
            e.kind = kind_from_name(category.substr(0, slash), file);
            e.phase = phase_from_name(category.substr(slash + 1), file);
            e.start_seconds = event.at("ts").get<double>() / microseconds_per_second;
            e.end_seconds = e.start_seconds + event.at("dur").get<double>() / microseconds_per_second;
            const Json& args = event.at("args");
            e.layer = args.value("layer", -1);
            e.flops = args.value("flops", 0.0);
            e.bytes = args.value("bytes", std::int64_t{0});
            e.peer = args.value("peer", std::int64_t{-1});
            TESSERA_CHECK(e.core >= 0 && e.core < trace.num_cores && std::isfinite(e.start_seconds) && e.end_seconds >= e.start_seconds,
                          file.string() << ": an event on core " << e.core << " from " << e.start_seconds << " s to " << e.end_seconds
                                        << " s does not fit a step of " << trace.num_cores << " cores");
            trace.events.push_back(e);
        }
    } catch (const Json::exception& error) {
        TESSERA_REJECT(file.string() << " is not a readable step trace: " << error.what());
    }
    return trace;
}

}  // namespace tessera::run
