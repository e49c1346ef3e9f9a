// Internal to engine/data: what each DataConfig::source loads. The segmentation sources return a
// VolumePlan (loaders for their training and held-out volumes, checked against the model here, loaded
// lazily or already read); fake images are their own small Dataset.
//
//   VolumePlan plan = synthetic_em_plan(config, {8, 1, 256, 256}, 2);
//   VolumeDataset dataset(config, {8, 1, 256, 256}, 2, std::move(plan));
#pragma once

#include "data/volume_dataset.hpp"

namespace tessera::data::detail {

// batch_shape is the model input [N, C, (D,) H, W]; each throws when the source cannot feed it.
VolumePlan synthetic_em_plan(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes);
VolumePlan synthetic_ct_plan(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes);
VolumePlan folder_plan(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes);
// One image and its labels, read whole or by region (DataConfig::read_by_region).
VolumePlan volume_plan(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes);
VolumePlan example_mri_plan(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes);

std::unique_ptr<Dataset> make_fake_images(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes);
std::unique_ptr<Dataset> make_synthetic_shapes(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes);
// Reads the annotation file(s) (not the images: those are decoded when a batch or example needs them).
std::unique_ptr<Dataset> make_coco(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes);
// Finds the shards and indexes their records (headers only; images are decoded when a batch needs them).
std::unique_ptr<Dataset> make_tfrecord_images(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes);

}  // namespace tessera::data::detail
