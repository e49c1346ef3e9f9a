// Export: an experiment's layout as code for the frameworks that run it on real hardware.
//
//   tpu_config_snippet(e)   TPUEstimator: a TPUConfig (iterations_per_loop, num_cores_per_replica,
//                           per_host_input_for_training, input_partition_dims) inside a RunConfig, as the
//                           Cloud TPU spatial-partitioning guide writes it:
//                             tpu_config = tf.compat.v1.estimator.tpu.TPUConfig(
//                                 iterations_per_loop=100,
//                                 num_cores_per_replica=4,
//                                 per_host_input_for_training=tf.compat.v1.estimator.tpu.InputPipelineConfig.PER_HOST_V2,
//                                 input_partition_dims=[[1, 4, 1, 1], None])
//   jax_snippet(e)          JAX: a Mesh over ("data", one axis per split spatial axis) from
//                           mesh_utils.create_device_mesh, and NamedSharding/PartitionSpec for the
//                           channels-last input batch, the labels and the (replicated) weights.
//
// Each snippet opens with a comment naming the experiment and its global batch. Both frameworks split
// an axis evenly: an uneven design (tile_boundaries) exports its piece counts only, with a warning in
// the snippet, since uneven tiles are a Tessera simulation feature XLA's SPMD partitioner does not express.
#pragma once

#include "experiment/experiment.hpp"

#include <string>

namespace tessera::experiment {

std::string tpu_config_snippet(const Experiment& experiment);  // Python (TensorFlow 1.x / tf.compat.v1)
std::string jax_snippet(const Experiment& experiment);         // Python (jax.sharding)

}  // namespace tessera::experiment
