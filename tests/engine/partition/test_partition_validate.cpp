// validate(): the seeds' specs pass, every rule fails with a message naming the tensor, the rule and
// a valid alternative.
#include "partition/partition_spec.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace tessera::partition {
namespace {

// The message of the Error that `f` throws; fails the test when it throws none.
std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& error) {
        EXPECT_EQ(error.kind(), Error::Kind::InvalidInput) << error.what();
        return error.what();
    }
    ADD_FAILURE() << "expected a tessera::Error";
    return {};
}

#define EXPECT_CONTAINS(text, part) \
    EXPECT_NE((text).find(part), std::string::npos) << "missing \"" << (part) << "\" in:\n" << (text)

const InputSignature image_nhwc = InputSignature::tensor({8, 64, 64, 3});  // [N, H, W, C]
const InputSignature class_label = InputSignature::tensor({8});            // [N]

PartitionSpec spec_of(std::int64_t num_cores, InputPartition features, InputPartition labels = InputPartition::none()) {
    return PartitionSpec{
        .num_cores_per_replica = num_cores, .features = std::move(features), .labels = std::move(labels)};
}

// ---- the seeds' specs ----------------------------------------------------------------------------

TEST(PartitionValidate, FourWayAlongHeightWithLabelsNone) {
    // TPUConfig(num_cores_per_replica=4, per_host_input_for_training=PER_HOST_V2,
    //           input_partition_dims=[[1, 4, 1, 1], None])
    const PartitionSpec spec = spec_of(4, InputPartition::of({1, 4, 1, 1}));
    EXPECT_NO_THROW(validate(spec, image_nhwc, class_label));
    EXPECT_TRUE(is_spatially_partitioned(spec));
}

TEST(PartitionValidate, DictFeaturesWithLabelsBroadcast) {
    const PartitionSpec spec = spec_of(4, InputPartition::dict({{"image", TensorPartition::of({1, 2, 2, 1})}}));
    EXPECT_NO_THROW(validate(spec, InputSignature::dict({{"image", {8, 64, 64, 3}}}), class_label));
    // A bare None for a dict of labels broadcasts every label tensor, as TPUEstimator does.
    EXPECT_NO_THROW(validate(spec, InputSignature::dict({{"image", {8, 64, 64, 3}}}),
                             InputSignature::dict({{"class_label", {8}}, {"mask", {8, 64, 64, 1}}})));
}

TEST(PartitionValidate, SeedDictsForFeaturesAndLabels) {
    // input_partition_dims = [{'image': [1,4,1,1], 'image_mask': [1,2,2,1]},
    //                         {'class_label': [1], 'mask': None}]
    const PartitionSpec spec =
        spec_of(4,
                InputPartition::dict(
                    {{"image", TensorPartition::of({1, 4, 1, 1})}, {"image_mask", TensorPartition::of({1, 2, 2, 1})}}),
                InputPartition::dict({{"class_label", TensorPartition::of({1})}, {"mask", TensorPartition::none()}}));
    EXPECT_NO_THROW(validate(spec, InputSignature::dict({{"image", {8, 64, 64, 3}}, {"image_mask", {8, 64, 64, 1}}}),
                             InputSignature::dict({{"class_label", {8}}, {"mask", {8, 64, 64, 1}}})));
}

TEST(PartitionValidate, SeedDictFeaturesWithSingleLabelOnCoreZero) {
    const PartitionSpec spec = spec_of(4,
                                       InputPartition::dict({{"image", TensorPartition::of({1, 4, 1, 1})},
                                                             {"image_mask", TensorPartition::of({1, 2, 2, 1})}}),
                                       InputPartition::of({1}));
    EXPECT_NO_THROW(
        validate(spec, InputSignature::dict({{"image", {8, 64, 64, 3}}, {"image_mask", {8, 64, 64, 1}}}), class_label));
}

TEST(PartitionValidate, Sixteen3DCoresOverDepthHeightWidth) {
    // 3D U-Net on a 256^3 CT volume, NDHWC, 16-way.
    const PartitionSpec spec = spec_of(16, InputPartition::of({1, 2, 2, 4, 1}), InputPartition::of({1, 2, 2, 4, 1}));
    EXPECT_NO_THROW(
        validate(spec, InputSignature::tensor({1, 256, 256, 256, 1}), InputSignature::tensor({1, 256, 256, 256, 1})));
}

TEST(PartitionValidate, UnsplitSpecsNeedNoCoreCountOrPerHostV2) {
    PartitionSpec spec = spec_of(4, InputPartition::of({1, 1, 1, 1}), InputPartition::of({1}));
    spec.per_host_input_v2 = false;
    EXPECT_NO_THROW(validate(spec, image_nhwc, class_label));
    EXPECT_FALSE(is_spatially_partitioned(spec));
    EXPECT_NO_THROW(validate(PartitionSpec{}, image_nhwc, class_label));
    EXPECT_NO_THROW(validate(spec_of(1, InputPartition::none()), image_nhwc, InputSignature::nothing()));
}

// ---- core counts -------------------------------------------------------------------------------

TEST(PartitionValidate, CoreAndReplicaCountsMustBePositive) {
    EXPECT_EQ(error_of([] { validate(spec_of(0, InputPartition::none()), image_nhwc, class_label); }),
              "num_cores_per_replica must be >= 1, got 0; use 1 for a replica on one core (no spatial partitioning)");
    PartitionSpec spec;
    spec.num_replicas = -2;
    EXPECT_EQ(error_of([&] { validate(spec, image_nhwc, class_label); }),
              "num_replicas must be >= 1, got -2; use 1 for a single replica");
}

// ---- structure ---------------------------------------------------------------------------------

TEST(PartitionValidate, ListForADictIsAStructureMismatch) {
    const auto message = error_of([] {
        validate(spec_of(4, InputPartition::of({1, 4, 1, 1})),
                 InputSignature::dict({{"image", {8, 64, 64, 3}}, {"mask", {8, 64, 64, 1}}}), class_label);
    });
    EXPECT_EQ(message,
              "features: the input pipeline yields a dict with keys {'image', 'mask'} but input_partition_dims[0] is a "
              "list [1,4,1,1]; give a dict with exactly the same keys, each value a list or None, e.g. "
              "{'image': [1, 4, 1, 1], 'mask': None}");
}

TEST(PartitionValidate, DictForASingleTensorIsAStructureMismatch) {
    const auto message = error_of([] {
        validate(spec_of(4, InputPartition::of({1, 4, 1, 1}),
                         InputPartition::dict({{"class_label", TensorPartition::of({1})}})),
                 image_nhwc, class_label);
    });
    EXPECT_EQ(message,
              "labels: the input pipeline yields a single tensor of shape [8] but input_partition_dims[1] is a dict "
              "with keys {'class_label'}; give a list with one entry per dimension (e.g. [1], core 0 only) or None "
              "(broadcast)");
}

TEST(PartitionValidate, MissingAndNearMissKeysAreNamed) {
    const InputSignature features = InputSignature::dict({{"image", {8, 64, 64, 3}}, {"image_mask", {8, 64, 64, 1}}});
    const auto message = error_of([&] {
        validate(spec_of(4, InputPartition::dict({{"imgae", TensorPartition::of({1, 4, 1, 1})},
                                                  {"image_mask", TensorPartition::of({1, 2, 2, 1})}})),
                 features, class_label);
    });
    EXPECT_EQ(message,
              "features: input_partition_dims[0] must have exactly the keys of the input pipeline's features dict "
              "{'image', 'image_mask'}, but has {'image_mask', 'imgae'}; missing 'image' (give None to broadcast a "
              "tensor, or its dims); 'imgae' is not a key of features (did you mean 'image'?)");

    const auto missing_only = error_of([&] {
        validate(spec_of(4, InputPartition::dict({{"image", TensorPartition::of({1, 4, 1, 1})}})), features,
                 class_label);
    });
    EXPECT_CONTAINS(missing_only, "features: input_partition_dims[0] must have exactly the keys");
    EXPECT_CONTAINS(missing_only, "missing 'image_mask'");
    EXPECT_EQ(missing_only.find("is not a key"), std::string::npos) << missing_only;

    const auto extra_only = error_of([&] {
        validate(spec_of(4, InputPartition::none(),
                         InputPartition::dict(
                             {{"class_label", TensorPartition::of({1})}, {"weights", TensorPartition::none()}})),
                 features, InputSignature::dict({{"class_label", {8}}}));
    });
    EXPECT_CONTAINS(extra_only,
                    "labels: input_partition_dims[1] must have exactly the keys of the input pipeline's "
                    "labels dict {'class_label'}, but has {'class_label', 'weights'}");
    EXPECT_CONTAINS(extra_only, "'weights' is not a key of labels");
    EXPECT_EQ(extra_only.find("did you mean"), std::string::npos) << extra_only;

    // Case-only differences are near misses too.
    const auto case_miss = error_of([] {
        validate(spec_of(4, InputPartition::none(), InputPartition::dict({{"Mask", TensorPartition::none()}})),
                 image_nhwc, InputSignature::dict({{"mask", {8, 64, 64, 1}}}));
    });
    EXPECT_CONTAINS(case_miss, "'Mask' is not a key of labels (did you mean 'mask'?)");
}

// ---- one tensor's dims -------------------------------------------------------------------------

TEST(PartitionValidate, DimsLengthMustEqualRank) {
    const auto message = error_of([] { validate(spec_of(4, InputPartition::of({1, 4, 1})), image_nhwc, class_label); });
    EXPECT_EQ(message,
              "features: dims [1,4,1] have 3 entries but the tensor has rank 4 (shape [8, 64, 64, 3]); give one entry "
              "per dimension; did you mean [1,4,1,1] or [1,2,2,1]?");

    const auto labels_message = error_of([] {
        validate(spec_of(4, InputPartition::of({1, 4, 1, 1}), InputPartition::of({1, 1})), image_nhwc, class_label);
    });
    EXPECT_CONTAINS(labels_message, "labels: dims [1,1] have 2 entries but the tensor has rank 1 (shape [8])");
    EXPECT_CONTAINS(labels_message, "did you mean [1]?");
}

TEST(PartitionValidate, EntriesMustBePositive) {
    const auto zero = error_of([] { validate(spec_of(4, InputPartition::of({1, 0, 1, 1})), image_nhwc, class_label); });
    EXPECT_CONTAINS(zero,
                    "features: dims [1,0,1,1] have entry 0 at axis 1; every entry must be >= 1 (1 leaves that "
                    "axis whole, None broadcasts the tensor)");
    EXPECT_CONTAINS(zero, "did you mean [1,1,1,1]?");

    const auto negative = error_of([] {
        validate(spec_of(4, InputPartition::dict({{"image", TensorPartition::of({1, -4, 1, 1})}})),
                 InputSignature::dict({{"image", {8, 64, 64, 3}}}), class_label);
    });
    EXPECT_CONTAINS(negative, "features['image']: dims [1,-4,1,1] have entry -4 at axis 1; every entry must be >= 1");
    EXPECT_CONTAINS(negative, "did you mean [1,4,1,1]");
}

TEST(PartitionValidate, BatchAxisIsNeverSplit) {
    const auto message = error_of([] {
        validate(spec_of(4, InputPartition::of({2, 2, 1, 1})), image_nhwc, class_label);
    });
    EXPECT_EQ(message,
              "features: dims [2,2,1,1] split axis 0, the batch axis, into 2 pieces; spatial partitioning splits the "
              "spatial axes (height, width, depth) of each example, never the batch, which is divided across replicas "
              "(num_replicas); did you mean [1,2,2,1] or [1,4,1,1]?");

    const auto whole_batch = error_of([] {
        validate(spec_of(4, InputPartition::of({4, 1, 1, 1})), image_nhwc, class_label);
    });
    EXPECT_CONTAINS(whole_batch, "split axis 0, the batch axis, into 4 pieces");
    EXPECT_CONTAINS(whole_batch, "did you mean [1,2,2,1], [1,4,1,1] or [1,1,4,1]?");

    // A label of shape [N] has no spatial axis to split.
    const auto label = error_of([] {
        validate(spec_of(4, InputPartition::of({1, 4, 1, 1}), InputPartition::of({4})), image_nhwc, class_label);
    });
    EXPECT_CONTAINS(label, "labels: dims [4] split axis 0, the batch axis, into 4 pieces");
    EXPECT_CONTAINS(label, "did you mean None (broadcast to every core) or [1] (core 0 only)?");
}

TEST(PartitionValidate, ProductMustEqualCoresPerReplica) {
    const auto message = error_of([] {
        validate(spec_of(4, InputPartition::dict({{"image", TensorPartition::of({1, 3, 1, 1})}})),
                 InputSignature::dict({{"image", {8, 64, 64, 3}}}), class_label);
    });
    EXPECT_EQ(message,
              "features['image']: dims [1,3,1,1] multiply to 3 but num_cores_per_replica is 4; did you mean [1,4,1,1] "
              "or [1,2,2,1]?");

    const auto too_many = error_of([] {
        validate(spec_of(4, InputPartition::of({1, 4, 2, 1})), image_nhwc, class_label);
    });
    EXPECT_EQ(too_many,
              "features: dims [1,4,2,1] multiply to 8 but num_cores_per_replica is 4; did you mean [1,2,2,1], "
              "[1,4,1,1] or [1,1,4,1]?");

    const auto volume = error_of([] {
        validate(spec_of(16, InputPartition::of({1, 2, 2, 2, 1})), InputSignature::tensor({1, 64, 64, 64, 1}),
                 InputSignature::nothing());
    });
    EXPECT_CONTAINS(volume, "features: dims [1,2,2,2,1] multiply to 8 but num_cores_per_replica is 16; did you mean ");
    EXPECT_CONTAINS(volume, "[1,4,2,2,1], [1,2,4,2,1] or [1,2,2,4,1]?");

    const auto huge = error_of([] {
        validate(spec_of(4, InputPartition::of({1, 4294967296, 4294967296, 1})), image_nhwc, class_label);
    });
    EXPECT_CONTAINS(huge, "multiply to more than 2^63 but num_cores_per_replica is 4");
}

TEST(PartitionValidate, ExtentsMustDivideEvenly) {
    const auto message = error_of([] {
        validate(spec_of(4, InputPartition::of({1, 4, 1, 1})), InputSignature::tensor({8, 30, 32, 3}), class_label);
    });
    EXPECT_EQ(message,
              "features: axis 1 has extent 30 (shape [8, 30, 32, 3]), which dims [1,4,1,1] cannot split evenly into 4 "
              "pieces (30 = 4 x 7 + 2); an uneven split is allowed only with explicit tile boundaries: use explicit "
              "tile boundaries, or crop or pad the extent to a multiple of 4 (28 or 32); dims that split this shape "
              "evenly: [1,2,2,1]");

    const auto smaller_than_dims = error_of([] {
        validate(spec_of(4, InputPartition::of({1, 4, 1, 1})), InputSignature::tensor({8, 3, 5, 3}), class_label);
    });
    EXPECT_CONTAINS(smaller_than_dims, "features: axis 1 has extent 3");
    EXPECT_CONTAINS(smaller_than_dims, "multiple of 4 (4)");
    EXPECT_EQ(smaller_than_dims.find("dims that split this shape evenly"), std::string::npos) << smaller_than_dims;
}

TEST(PartitionValidate, ShapeExtentsMustBePositive) {
    const auto message = error_of([] {
        validate(spec_of(4, InputPartition::none()), InputSignature::tensor({8, 0, 64, 3}), class_label);
    });
    EXPECT_EQ(message,
              "features: the input pipeline's shape [8, 0, 64, 3] has extent 0 at axis 1; every extent must be >= 1");
}

TEST(PartitionValidate, SplittingRequiresPerHostV2) {
    PartitionSpec spec =
        spec_of(4, InputPartition::none(), InputPartition::dict({{"mask", TensorPartition::of({1, 2, 2, 1})}}));
    spec.per_host_input_v2 = false;
    const auto message = error_of([&] {
        validate(spec, image_nhwc, InputSignature::dict({{"mask", {8, 64, 64, 1}}}));
    });
    EXPECT_EQ(message,
              "spatial partitioning requires per_host_input_for_training = PER_HOST_V2: labels['mask'] is split by "
              "dims [1,2,2,1] but per_host_input_v2 is false; set per_host_input_v2 = true (each host's input pipeline "
              "then feeds the cores of its replicas, as TPUEstimator requires for input_partition_dims), or leave "
              "every tensor unsplit (None or all ones)");
}

TEST(PartitionValidate, StructureOfBothSidesIsCheckedBeforeAnyDims) {
    const auto message = error_of([] {
        validate(spec_of(4, InputPartition::of({1, 3, 1, 1}), InputPartition::dict({})), image_nhwc, class_label);
    });
    EXPECT_CONTAINS(message, "labels: the input pipeline yields a single tensor");  // structure before dims
}

}  // namespace
}  // namespace tessera::partition
