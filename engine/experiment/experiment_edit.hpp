// Editing experiment files in place: the studio writes a partition design (or any one field) back into
// the user's file and keeps everything else — field order, notes, the data section — as it was.
//
//   PartitionEdit edit = partition_edit_of(experiment);        // what the file says now
//   edit.pieces = {2, 1};                                       // split H in two …
//   edit.num_cores_per_replica = 2;
//   edit.uneven = partition::SpatialGrid{{{0, 120, 256}, {0, 256}}};   // … at row 120
//   std::string text = apply_partition_edit(file_text, edit);  // input_partition_dims [[1, 2, 1, 1], null],
//                                                               // tile_boundaries [[0, 120, 256], [0, 256]]
//   text = set_experiment_field(text, "model.base_width", 16);
//   text = set_experiment_field(text, "notes", nullptr);        // null removes the field
//
// The text comes back with two-space indentation; a nested value stays on one line when it fits in
// 120 columns (as the presets are written). A field that is absent and keeps its default stays absent,
// so applying partition_edit_of(parse_experiment(text)) gives back the same JSON.
#pragma once

#include "experiment/experiment.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::experiment {

// The fields the studio's partition designer edits.
struct PartitionEdit {
    std::int64_t num_cores_per_replica = 1;
    std::int64_t num_replicas = 1;
    std::int64_t global_batch = 1;                 // images per step over all replicas
    std::vector<std::int64_t> pieces;              // per spatial axis (outermost first)
    std::optional<partition::SpatialGrid> uneven;  // written as tile_boundaries when not even; removed when even
    std::vector<std::int64_t> input_size;          // spatial extents: (H, W) or (D, H, W)
    std::string device = "tpu_v3";                 // a preset id
    std::string precision = "f32";                 // "f32", "bf16", "f16"
};

// The experiment's current values (uneven only when its tile_boundaries are not an even split).
PartitionEdit partition_edit_of(const Experiment& experiment);

// Writes the edit into the experiment's JSON: input.size, global_batch, num_cores_per_replica,
// num_replicas, input_partition_dims' features part channels last ([1, p0, p1, (p2,) 1]; the labels
// part kept, or re-cut to the new pieces when it was split), tile_boundaries, device, precision, and
// per_host_input_for_training set to PER_HOST_V2 when the design splits. Throws Error when the text
// is not a JSON object or when the result would not be a valid experiment (the message says why).
std::string apply_partition_edit(const std::string& experiment_json, const PartitionEdit& edit);

// Sets one field at a JSON path ("model.base_width", "data.augment.flip_axes", "tile_boundaries[0][1]"),
// creating objects on the way; a null value removes the field (or array element). A new top-level field
// goes where the schema lists it. The result is not validated: the studio may pass through invalid
// states (parse_experiment says what is wrong). Throws Error for a malformed path or one that runs
// through a value that is not an object (or array, for an index).
std::string set_experiment_field(const std::string& json, std::string_view json_path, const nlohmann::json& value);

// The writer's layout for experiment JSON (see above).
std::string format_experiment_json(const nlohmann::ordered_json& root);

}  // namespace tessera::experiment
