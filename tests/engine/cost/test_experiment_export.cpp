// Export snippets: TPUConfig (as the Cloud TPU spatial-partitioning guide writes it) and JAX shardings
// for the presets, replicas, unsplit labels and uneven designs; and, where python3 exists, they compile.
#include "experiment/export.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

using namespace tessera;

namespace {

const std::filesystem::path kPresets = std::filesystem::path(TESSERA_SOURCE_DIR) / "resources" / "experiments";

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

experiment::Experiment uneven_experiment() {
    return experiment::parse_experiment(
        R"({"version": 1, "name": "uneven", "model": {"kind": "unet", "depth": 4, "base_width": 8},
            "input": {"size": [256, 256]}, "global_batch": 2, "num_cores_per_replica": 2,
            "input_partition_dims": [[1, 2, 1, 1], null], "tile_boundaries": [[0, 120, 256], [0, 256]]})",
        "uneven.json");
}

}  // namespace

TEST(ExperimentExport, TpuConfigFor2DFourWay) {
    const experiment::Experiment e = experiment::load_experiment(kPresets / "unet2d_em_4way.json");
    EXPECT_EQ(experiment::tpu_config_snippet(e),
              "# Exported by Tessera from the experiment \"2D U-Net on EM-like sections, 4-way split along H\" "
              "(unet2d_em_4way.json).\n"
              "# Global batch 4 (TPUEstimator's train_batch_size): 1 replica × 4 cores per replica = 4 TPU cores.\n"
              "# Features NHWC [4, 256, 256, 1] per replica, split [1, 4, 1, 1]; labels None: not split, every core of "
              "a replica "
              "receives them whole.\n"
              "import tensorflow as tf\n"
              "\n"
              "tpu_config = tf.compat.v1.estimator.tpu.TPUConfig(\n"
              "    iterations_per_loop=100,\n"
              "    num_cores_per_replica=4,\n"
              "    per_host_input_for_training=tf.compat.v1.estimator.tpu.InputPipelineConfig.PER_HOST_V2,\n"
              "    input_partition_dims=[[1, 4, 1, 1], None])\n"
              "run_config = tf.compat.v1.estimator.tpu.RunConfig(\n"
              "    # cluster=tf.distribute.cluster_resolver.TPUClusterResolver(tpu=TPU_NAME),\n"
              "    model_dir=\"runs/unet2d_em_4way\",\n"
              "    tpu_config=tpu_config)\n"
              "# estimator = tf.compat.v1.estimator.tpu.TPUEstimator(\n"
              "#     model_fn=model_fn, config=run_config, train_batch_size=4)\n");
}

TEST(ExperimentExport, JaxFor2DFourWay) {
    const experiment::Experiment e = experiment::load_experiment(kPresets / "unet2d_em_4way.json");
    EXPECT_EQ(
        experiment::jax_snippet(e),
        "# Exported by Tessera from the experiment \"2D U-Net on EM-like sections, 4-way split along H\" "
        "(unet2d_em_4way.json).\n"
        "# Global batch 4: 1 replica × 4 cores per replica = 4 devices (jax.device_count()).\n"
        "# Each replica's 4 images: NHWC [4, 256, 256, 1], split [1, 4, 1, 1].\n"
        "import jax\n"
        "from jax.experimental import mesh_utils\n"
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec\n"
        "\n"
        "# The device mesh: replicas along \"data\", then one axis per split spatial axis.\n"
        "devices = mesh_utils.create_device_mesh((1, 4))\n"
        "mesh = Mesh(devices, axis_names=(\"data\", \"height\"))\n"
        "\n"
        "# Images [N, H, W, C]: the batch over \"data\", split spatial axes over their mesh axes, channels whole.\n"
        "image_sharding = NamedSharding(mesh, PartitionSpec(\"data\", \"height\", None, None))\n"
        "# Labels [N, H, W]: not split (None in input_partition_dims), each replica's labels whole on its cores.\n"
        "label_sharding = NamedSharding(mesh, PartitionSpec(\"data\", None, None))\n"
        "# Weights: replicated on every device (spatial partitioning splits activations, not weights).\n"
        "weight_sharding = NamedSharding(mesh, PartitionSpec())\n"
        "\n"
        "# XLA's SPMD partitioner inserts the halo exchanges the split convolutions need.\n"
        "# images = jax.device_put(images, image_sharding)\n"
        "# labels = jax.device_put(labels, label_sharding)\n"
        "# params = jax.device_put(params, weight_sharding)\n");
}

TEST(ExperimentExport, The16Core3DPreset) {
    const experiment::Experiment e = experiment::load_experiment(kPresets / "unet3d_ct_256_16cores.json");
    const std::string tpu = experiment::tpu_config_snippet(e);
    EXPECT_TRUE(contains(
        tpu, "# Global batch 1 (TPUEstimator's train_batch_size): 1 replica × 16 cores per replica = 16 TPU cores.\n"));
    EXPECT_TRUE(
        contains(tpu, "# Features NDHWC [1, 256, 256, 256, 1] per replica, split [1, 2, 2, 4, 1]; labels None"));
    EXPECT_TRUE(contains(tpu, "    num_cores_per_replica=16,\n"));
    EXPECT_TRUE(contains(tpu, "    input_partition_dims=[[1, 2, 2, 4, 1], None])\n"));
    // A plan-only experiment: the seeds' iterations_per_loop, and no model_dir.
    EXPECT_TRUE(contains(tpu, "    iterations_per_loop=100,\n"));
    EXPECT_FALSE(contains(tpu, "model_dir"));
    EXPECT_TRUE(contains(tpu,
                         "run_config = tf.compat.v1.estimator.tpu.RunConfig(\n"
                         "    # cluster=tf.distribute.cluster_resolver.TPUClusterResolver(tpu=TPU_NAME),\n"
                         "    tpu_config=tpu_config)\n"));

    const std::string jax = experiment::jax_snippet(e);
    EXPECT_TRUE(contains(jax, "# Each replica's 1 image: NDHWC [1, 256, 256, 256, 1], split [1, 2, 2, 4, 1].\n"));
    EXPECT_TRUE(contains(jax, "devices = mesh_utils.create_device_mesh((1, 2, 2, 4))\n"));
    EXPECT_TRUE(contains(jax, "mesh = Mesh(devices, axis_names=(\"data\", \"depth\", \"height\", \"width\"))\n"));
    EXPECT_TRUE(contains(
        jax,
        "image_sharding = NamedSharding(mesh, PartitionSpec(\"data\", \"depth\", \"height\", \"width\", None))\n"));
    EXPECT_TRUE(contains(jax, "label_sharding = NamedSharding(mesh, PartitionSpec(\"data\", None, None, None))\n"));
    EXPECT_TRUE(contains(jax, "weight_sharding = NamedSharding(mesh, PartitionSpec())\n"));
    EXPECT_FALSE(contains(jax, "Warning"));
}

TEST(ExperimentExport, ReplicasAndUnsplitInputs) {
    const experiment::Experiment e = experiment::load_experiment(kPresets / "resnet50_fake_8replicas.json");
    const std::string tpu = experiment::tpu_config_snippet(e);
    EXPECT_TRUE(
        contains(tpu,
                 "# Global batch 16 (TPUEstimator's train_batch_size): 8 replicas × 1 core per replica = 8 TPU cores.\n"
                 "# No spatial partitioning: one core per replica (data parallelism).\n"));
    EXPECT_FALSE(contains(tpu, "num_cores_per_replica="));  // TPUConfig's None: no model parallelism
    EXPECT_FALSE(contains(tpu, "input_partition_dims="));
    EXPECT_TRUE(contains(tpu, "    iterations_per_loop=30,\n"));  // steps_per_eval: checkpoints follow evaluations
    EXPECT_TRUE(contains(tpu, "train_batch_size=16)"));

    const std::string jax = experiment::jax_snippet(e);
    EXPECT_TRUE(contains(jax, "# Each replica's 2 images: NHWC [2, 224, 224, 3], not split.\n"));
    EXPECT_TRUE(contains(jax, "devices = mesh_utils.create_device_mesh((8,))\n"));
    EXPECT_TRUE(contains(jax, "mesh = Mesh(devices, axis_names=(\"data\",))\n"));
    EXPECT_TRUE(contains(jax, "image_sharding = NamedSharding(mesh, PartitionSpec(\"data\", None, None, None))\n"));
    EXPECT_TRUE(contains(jax,
                         "# Labels [N]: one class per image, the batch over \"data\".\n"
                         "label_sharding = NamedSharding(mesh, PartitionSpec(\"data\"))\n"));

    // Replicas of a split replica: "data" is the first mesh axis; split labels follow the images.
    const experiment::Experiment both = experiment::parse_experiment(
        R"({"version": 1, "model": {"kind": "unet", "depth": 3, "base_width": 8}, "input": {"size": [64, 64, 64]},
            "global_batch": 4, "num_replicas": 2, "num_cores_per_replica": 4, "per_host_input_for_training": "PER_HOST_V2",
            "input_partition_dims": [[1, 2, 1, 2, 1], [1, 2, 1, 2]]})",
        "both.json");
    const std::string tpu_both = experiment::tpu_config_snippet(both);
    EXPECT_TRUE(contains(tpu_both, "2 replicas × 4 cores per replica = 8 TPU cores"));
    EXPECT_TRUE(contains(tpu_both, "labels split [1, 2, 1, 2]"));
    EXPECT_TRUE(contains(tpu_both, "    input_partition_dims=[[1, 2, 1, 2, 1], [1, 2, 1, 2]])\n"));
    EXPECT_TRUE(contains(tpu_both, "# Exported by Tessera from the experiment both.json.\n"));  // no name: the file
    const std::string jax_both = experiment::jax_snippet(both);
    EXPECT_TRUE(contains(jax_both, "devices = mesh_utils.create_device_mesh((2, 2, 2))\n"));
    EXPECT_TRUE(contains(jax_both, "mesh = Mesh(devices, axis_names=(\"data\", \"depth\", \"width\"))\n"));
    EXPECT_TRUE(contains(jax_both, "PartitionSpec(\"data\", \"depth\", None, \"width\", None))\n"));
    EXPECT_TRUE(
        contains(jax_both,
                 "# Labels [N, D, H, W]: split [1, 2, 1, 2] like the images.\n"
                 "label_sharding = NamedSharding(mesh, PartitionSpec(\"data\", \"depth\", None, \"width\"))\n"));
}

TEST(ExperimentExport, UnevenDesignsExportTheirPieceCountsWithAWarning) {
    const experiment::Experiment e = uneven_experiment();
    const std::string warning =
        "# Warning: this design cuts its tiles unevenly (tile_boundaries [[0, 120, 256], [0, 256]]).\n"
        "# Uneven tile boundaries are a Tessera simulation feature that XLA's SPMD partitioner does not\n"
        "# express: only the piece counts are exported, and XLA splits each axis evenly.\n";
    const std::string tpu = experiment::tpu_config_snippet(e);
    EXPECT_TRUE(contains(tpu, warning)) << tpu;
    EXPECT_TRUE(contains(tpu, "    input_partition_dims=[[1, 2, 1, 1], None])\n"));
    const std::string jax = experiment::jax_snippet(e);
    EXPECT_TRUE(contains(jax, warning)) << jax;
    EXPECT_TRUE(contains(jax, "devices = mesh_utils.create_device_mesh((1, 2))\n"));
    // No warning for the presets' even designs.
    EXPECT_FALSE(contains(experiment::tpu_config_snippet(experiment::load_experiment(kPresets / "unet2d_em_4way.json")),
                          "Warning"));
}

// Every snippet is valid Python (compiled, not run: TensorFlow and JAX need not be installed).
TEST(ExperimentExport, SnippetsCompileAsPython) {
    if (std::system("python3 -c \"pass\" > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not available";
    const std::filesystem::path folder =
        std::filesystem::temp_directory_path() / ("tessera_export_snippets_" + std::to_string(::getpid()));
    std::filesystem::create_directories(folder);
    std::vector<experiment::Experiment> experiments{uneven_experiment()};
    for (const auto& entry : std::filesystem::directory_iterator(kPresets)) {
        if (entry.path().extension() == ".json") experiments.push_back(experiment::load_experiment(entry.path()));
    }
    // One python3 for every snippet: it names the file of the first that does not compile.
    std::string command =
        "python3 -c \"import sys; [compile(open(f, encoding='utf-8').read(), f, 'exec') for f in sys.argv[1:]]\"";
    int index = 0;
    for (const experiment::Experiment& e : experiments) {
        for (const std::string& snippet : {experiment::tpu_config_snippet(e), experiment::jax_snippet(e)}) {
            const std::filesystem::path file = folder / ("snippet_" + std::to_string(index++) + ".py");
            std::ofstream(file) << snippet;
            command.append(" '").append(file.string()).append("'");
        }
    }
    EXPECT_EQ(std::system(command.c_str()), 0) << "a snippet in " << folder << " is not valid Python";
    std::filesystem::remove_all(folder);
}
