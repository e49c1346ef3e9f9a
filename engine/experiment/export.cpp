#include "experiment/export.hpp"

#include "core/json_support.hpp"

#include <algorithm>

namespace tessera::experiment {

namespace {

std::string number(std::int64_t value) {
    return std::to_string(value);
}

std::string list_text(const std::vector<std::int64_t>& values) {
    std::string text = "[";
    for (std::size_t i = 0; i < values.size(); ++i) text.append(i ? ", " : "").append(number(values[i]));
    return text.append("]");
}

// One line of a Python comment: no line breaks.
std::string one_line(std::string text) {
    std::replace(text.begin(), text.end(), '\n', ' ');
    std::replace(text.begin(), text.end(), '\r', ' ');
    return text;
}

// A Python string literal (JSON's escapes with ASCII output are valid Python).
std::string python_string(const std::string& text) {
    return json::Json(text).dump(-1, ' ', true, json::Json::error_handler_t::replace);
}

std::string where_from(const Experiment& e) {
    std::string text = "# Exported by Tessera from the experiment ";
    if (!e.name.empty()) {
        text.append(one_line(json::in_quotes(e.name)));
        if (!e.origin.empty()) text.append(" (").append(one_line(e.origin)).append(")");
    } else {
        text.append(e.origin.empty() ? std::string("(unnamed)") : one_line(e.origin));
    }
    return text.append(".\n");
}

// "1 replica × 4 cores per replica = 4 TPU cores" (`unit`: what a core is called).
std::string cores_line(const Experiment& e, std::string_view unit) {
    const std::int64_t replicas = e.partition.num_replicas, per_replica = e.partition.num_cores_per_replica;
    return std::string(replicas == 1 ? "1 replica" : number(replicas) + " replicas")
        .append(" × ")
        .append(number(per_replica))
        .append(per_replica == 1 ? " core" : " cores")
        .append(" per replica = ")
        .append(number(e.partition.num_cores()))
        .append(" ")
        .append(unit)
        .append(e.partition.num_cores() == 1 ? "" : "s");
}

bool is_uneven(const Experiment& e) {
    return e.grid && !is_even_split(*e.grid, e.size);
}

std::string uneven_warning(const Experiment& e) {
    if (!is_uneven(e)) return {};
    return std::string("# Warning: this design cuts its tiles unevenly (tile_boundaries ")
        .append(tile_boundaries_text(*e.grid))
        .append(
            ").\n# Uneven tile boundaries are a Tessera simulation feature that XLA's SPMD partitioner does not\n"
            "# express: only the piece counts are exported, and XLA splits each axis evenly.\n");
}

// [N, (D,) H, W, C] as one replica's pipeline yields it.
std::vector<std::int64_t> replica_features(const Experiment& e) {
    std::vector<std::int64_t> shape{e.global_batch / e.partition.num_replicas};
    shape.insert(shape.end(), e.size.begin(), e.size.end());
    shape.push_back(e.channels);
    return shape;
}

std::string layout_name(std::size_t rank) {
    return rank == 3 ? "NDHWC" : "NHWC";
}

std::vector<std::string> axis_names(std::size_t rank) {
    if (rank == 3) return {"depth", "height", "width"};
    return {"height", "width"};
}

std::vector<std::string> axis_letters(std::size_t rank) {
    if (rank == 3) return {"D", "H", "W"};
    return {"H", "W"};
}

std::int64_t iterations_per_loop(const Experiment& e) {
    // TPUConfig: "recommended to be set as number of global steps for next checkpoint".
    const TrainingSpec& t = e.training;
    if (t.steps_per_checkpoint > 0) return t.steps_per_checkpoint;
    if (t.steps_per_eval > 0) return t.steps_per_eval;
    if (t.steps > 0) return t.steps;
    return 100;  // the seeds' value, for a plan-only experiment
}

}  // namespace

std::string tpu_config_snippet(const Experiment& e) {
    const std::size_t rank = e.size.size();
    const bool model_parallel = e.partition.num_cores_per_replica > 1;
    std::string out = where_from(e);
    out.append("# Global batch ")
        .append(number(e.global_batch))
        .append(" (TPUEstimator's train_batch_size): ")
        .append(cores_line(e, "TPU core"))
        .append(".\n");
    if (model_parallel) {
        out.append("# Features ")
            .append(layout_name(rank))
            .append(" ")
            .append(list_text(replica_features(e)))
            .append(" per replica, split ")
            .append(partition::to_string(e.partition.features))
            .append("; labels ")
            .append(e.partition.labels.is_dict() || !e.partition.labels.single().is_none()
                        ? std::string("split ").append(partition::to_string(e.partition.labels))
                        : std::string("None: not split, every core of a replica receives them whole"))
            .append(".\n");
    } else {
        out.append("# No spatial partitioning: one core per replica")
            .append(e.partition.num_replicas > 1 ? " (data parallelism)" : "")
            .append(".\n");
    }
    out.append(uneven_warning(e));
    out.append("import tensorflow as tf\n\n");
    out.append("tpu_config = tf.compat.v1.estimator.tpu.TPUConfig(\n");
    out.append("    iterations_per_loop=").append(number(iterations_per_loop(e))).append(",\n");
    if (model_parallel)
        out.append("    num_cores_per_replica=").append(number(e.partition.num_cores_per_replica)).append(",\n");
    out.append("    per_host_input_for_training=tf.compat.v1.estimator.tpu.InputPipelineConfig.")
        .append(e.per_host_input);
    if (model_parallel)
        out.append(",\n    input_partition_dims=").append(partition::input_partition_dims_to_string(e.partition));
    out.append(")\n");
    out.append("run_config = tf.compat.v1.estimator.tpu.RunConfig(\n");
    out.append("    # cluster=tf.distribute.cluster_resolver.TPUClusterResolver(tpu=TPU_NAME),\n");
    if (!e.training.model_dir.empty())
        out.append("    model_dir=").append(python_string(e.training.model_dir.generic_string())).append(",\n");
    out.append("    tpu_config=tpu_config)\n");
    out.append("# estimator = tf.compat.v1.estimator.tpu.TPUEstimator(\n");
    out.append("#     model_fn=model_fn, config=run_config, train_batch_size=")
        .append(number(e.global_batch))
        .append(")\n");
    return out;
}

std::string jax_snippet(const Experiment& e) {
    const std::size_t rank = e.size.size();
    const std::vector<std::int64_t> pieces = spatial_pieces(e);
    const std::vector<std::string> names = axis_names(rank), letters = axis_letters(rank);
    const std::int64_t replica_batch = e.global_batch / e.partition.num_replicas;

    // Mesh axes: "data" for the replicas, then every split spatial axis.
    std::vector<std::int64_t> mesh_shape{e.partition.num_replicas};
    std::vector<std::string> mesh_axes{"data"};
    for (std::size_t axis = 0; axis < rank; ++axis) {
        if (pieces[axis] > 1) {
            mesh_shape.push_back(pieces[axis]);
            mesh_axes.push_back(names[axis]);
        }
    }
    auto tuple = [](const std::vector<std::string>& items) {
        std::string text = "(";
        for (std::size_t i = 0; i < items.size(); ++i) text.append(i ? ", " : "").append(items[i]);
        return text.append(items.size() == 1 ? ",)" : ")");
    };
    std::vector<std::string> shape_items, axis_items;
    for (std::int64_t n : mesh_shape) shape_items.push_back(number(n));
    for (const std::string& name : mesh_axes) axis_items.push_back(json::in_quotes(name));

    // The images: batch over "data", split axes over their mesh axes, channels whole.
    std::vector<std::string> image_spec{"\"data\""};
    std::string image_dims = "[N, ";
    for (std::size_t axis = 0; axis < rank; ++axis) {
        image_spec.push_back(pieces[axis] > 1 ? json::in_quotes(names[axis]) : "None");
        image_dims.append(letters[axis]).append(", ");
    }
    image_spec.push_back("None");
    image_dims.append("C]");

    // The labels: a segmentation's label volume follows input_partition_dims' labels part.
    std::vector<std::string> label_spec{"\"data\""};
    std::string label_comment;
    if (e.model.kind == ModelKind::UNet) {
        std::vector<std::int64_t> label_pieces(rank, 1);
        const partition::InputPartition& labels = e.partition.labels;
        if (!labels.is_dict() && !labels.single().is_none()) {
            const auto& dims = *labels.single().dims;  // [N, spatial…]
            for (std::size_t axis = 0; axis < rank && axis + 1 < dims.size(); ++axis)
                label_pieces[axis] = dims[axis + 1];
        }
        const bool split = std::any_of(label_pieces.begin(), label_pieces.end(), [](std::int64_t p) { return p > 1; });
        bool differs = false;
        std::string label_dims = "[N";
        for (std::size_t axis = 0; axis < rank; ++axis) {
            const bool follows = label_pieces[axis] > 1 && label_pieces[axis] == pieces[axis];
            differs = differs || (label_pieces[axis] > 1 && !follows);
            label_spec.push_back(follows ? json::in_quotes(names[axis]) : "None");
            label_dims.append(", ").append(letters[axis]);
        }
        label_dims.append("]");
        label_comment = std::string("# Labels ").append(label_dims);
        if (!split) {
            label_comment.append(": not split (")
                .append(partition::to_string(labels))
                .append(" in input_partition_dims), each replica's labels whole on its cores.\n");
        } else {
            label_comment.append(": split ").append(partition::to_string(labels)).append(" like the images.\n");
            if (differs)
                label_comment.append("# (Axes the labels split differently from the images are left whole here.)\n");
        }
    } else {
        label_comment = "# Labels [N]: one class per image, the batch over \"data\".\n";
    }

    const bool splits = std::any_of(pieces.begin(), pieces.end(), [](std::int64_t p) { return p > 1; });
    std::vector<std::int64_t> dims{1};  // input_partition_dims' features part, channels last
    dims.insert(dims.end(), pieces.begin(), pieces.end());
    dims.push_back(1);
    std::string out = where_from(e);
    out.append("# Global batch ")
        .append(number(e.global_batch))
        .append(": ")
        .append(cores_line(e, "device"))
        .append(" (jax.device_count()).\n# Each replica's ")
        .append(number(replica_batch))
        .append(replica_batch == 1 ? " image: " : " images: ")
        .append(layout_name(rank))
        .append(" ")
        .append(list_text(replica_features(e)))
        .append(splits ? std::string(", split ").append(list_text(dims)) : std::string(", not split"))
        .append(".\n");
    out.append(uneven_warning(e));
    out.append("import jax\n");
    out.append("from jax.experimental import mesh_utils\n");
    out.append("from jax.sharding import Mesh, NamedSharding, PartitionSpec\n\n");
    out.append("# The device mesh: replicas along \"data\", then one axis per split spatial axis.\n");
    out.append("devices = mesh_utils.create_device_mesh(").append(tuple(shape_items)).append(")\n");
    out.append("mesh = Mesh(devices, axis_names=").append(tuple(axis_items)).append(")\n\n");
    out.append("# Images ")
        .append(image_dims)
        .append(": the batch over \"data\", split spatial axes over their mesh axes, channels whole.\n");
    out.append("image_sharding = NamedSharding(mesh, PartitionSpec(");
    for (std::size_t i = 0; i < image_spec.size(); ++i) out.append(i ? ", " : "").append(image_spec[i]);
    out.append("))\n");
    out.append(label_comment);
    out.append("label_sharding = NamedSharding(mesh, PartitionSpec(");
    for (std::size_t i = 0; i < label_spec.size(); ++i) out.append(i ? ", " : "").append(label_spec[i]);
    out.append("))\n");
    out.append("# Weights: replicated on every device (spatial partitioning splits activations, not weights).\n");
    out.append("weight_sharding = NamedSharding(mesh, PartitionSpec())\n\n");
    out.append("# XLA's SPMD partitioner inserts the halo exchanges the split convolutions need.\n");
    out.append("# images = jax.device_put(images, image_sharding)\n");
    out.append("# labels = jax.device_put(labels, label_sharding)\n");
    out.append("# params = jax.device_put(params, weight_sharding)\n");
    return out;
}

}  // namespace tessera::experiment
