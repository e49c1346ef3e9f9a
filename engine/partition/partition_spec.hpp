// The partition specification of a replica: how each input tensor is split across its cores.
//
// A replica runs one copy of the model on `num_cores_per_replica` cores; the global batch is split
// across `num_replicas` replicas. Within a replica, spatial partitioning splits each input tensor
// across the cores, as Cloud TPU's TPUConfig does:
//
//   TPUConfig(num_cores_per_replica=4,
//             per_host_input_for_training=InputPipelineConfig.PER_HOST_V2,
//             input_partition_dims=[[1, 4, 1, 1], None])
//
// is, in Tessera,
//
//   PartitionSpec spec{.num_cores_per_replica = 4,
//                      .features = InputPartition::of({1, 4, 1, 1}),   // NHWC: 4 pieces along H
//                      .labels = InputPartition::none()};                // broadcast to every core
//   const auto features = InputSignature::tensor({8, 512, 512, 3});     // [N, H, W, C]
//   const auto labels = InputSignature::tensor({8});                     // [N]
//   validate(spec, features, labels);                                    // throws Error if wrong
//   auto placed = placements(spec, features, labels);  // placed[0].pieces[c]: core c's rows
//                                                      // [128c, 128c + 128) of H
//
// `input_partition_dims = [features_dims, labels_dims]`; each side mirrors what the input pipeline
// yields:
//   a single tensor        → a list with one int per dimension, or None;
//   a dict of tensors      → a dict with exactly the same keys, each value a list or None
//                            (a bare None for the whole side broadcasts every tensor of that side,
//                            as TPUEstimator does for labels).
// For one tensor:
//   None                   → not split; broadcast whole to every core of the replica;
//   all ones, e.g. [1]     → not split; sent whole to core 0 only;
//   otherwise              → split into product(dims) pieces, which must equal num_cores_per_replica.
//
// Conventions
//   Shapes are in the input pipeline's layout, outermost first (NHWC [N, H, W, C], NDHWC
//   [N, D, H, W, C]), as one replica receives them. Axis 0 is the batch axis and is never split
//   here: the batch is divided across replicas. The spatial axes are 1 .. rank-2 (channels last)
//   for rank >= 3; a tensor of rank <= 2 has none.
//   Cores of a replica are numbered 0 .. num_cores_per_replica-1. A split tensor's pieces form a
//   grid of dims[0] × dims[1] × ... pieces; core c holds the piece whose grid index is c written
//   row-major over that grid, the last axis fastest:
//       c = Σ_i index[i] · Π_{j>i} dims[j]
//   e.g. dims [1, 2, 2, 1]: core 0 = top-left, 1 = top-right, 2 = bottom-left, 3 = bottom-right.
//   Splits are even: along axis i each piece has extent shape[i] / dims[i] and begins at
//   index[i] · shape[i] / dims[i]. An extent that dims[i] does not divide is an error here
//   (uneven splits need explicit tile boundaries).
//   Dict entries are visited in key order (std::map), features before labels.
//
// Text forms follow what users write in TPUConfig: `[1, 4, 1, 1]`, `None`,
// `{'image': [1, 2, 2, 1], 'mask': None}`; to_string and parse_input_partition round-trip.
//
// Every mistake is a tessera::Error (InvalidInput) naming the tensor (features['image'], labels),
// the rule and a valid alternative.
#pragma once

#include "tensor/tensor.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tessera::partition {

inline constexpr int batch_axis = 0;

// ---- the specification -------------------------------------------------------------------------

// How one tensor is split: dims[i] pieces along axis i. nullopt is Python's None (broadcast).
struct TensorPartition {
    std::optional<std::vector<std::int64_t>> dims;

    static TensorPartition none() { return {}; }
    static TensorPartition of(std::vector<std::int64_t> dims) { return {std::move(dims)}; }

    bool is_none() const noexcept { return !dims.has_value(); }
    bool operator==(const TensorPartition&) const = default;
};

// One side of input_partition_dims (features_dims or labels_dims): a single tensor's partition or a
// dict of them, keyed like the input pipeline's dict.
struct InputPartition {
    using Dict = std::map<std::string, TensorPartition>;

    std::variant<TensorPartition, Dict> value;  // default: None

    static InputPartition none() { return {}; }
    static InputPartition of(std::vector<std::int64_t> dims) { return {TensorPartition::of(std::move(dims))}; }
    static InputPartition dict(Dict entries) { return {std::move(entries)}; }

    bool is_dict() const noexcept { return std::holds_alternative<Dict>(value); }
    const TensorPartition& single() const;  // throws Error when it is a dict
    const Dict& entries() const;            // throws Error when it is not a dict
    bool operator==(const InputPartition&) const = default;
};

struct PartitionSpec {
    std::int64_t num_cores_per_replica = 1;  // >= 1
    std::int64_t num_replicas = 1;           // >= 1; data parallelism across replicas
    InputPartition features{};               // input_partition_dims[0]; default None
    InputPartition labels{};                 // input_partition_dims[1]; default None
    // per_host_input_for_training == PER_HOST_V2; spatial partitioning requires it.
    bool per_host_input_v2 = true;

    std::int64_t num_cores() const noexcept { return num_cores_per_replica * num_replicas; }
    bool operator==(const PartitionSpec&) const = default;
};

// ---- what the input pipeline yields ------------------------------------------------------------

// One side of the pipeline's output (features or labels): a single tensor's shape or a dict of
// named shapes. Shapes are per replica, in the pipeline's layout, batch on axis 0. A pipeline that
// yields no labels is an empty dict.
struct InputSignature {
    using Dict = std::map<std::string, Shape>;

    std::variant<Shape, Dict> value;

    static InputSignature tensor(Shape shape) { return {std::move(shape)}; }
    static InputSignature dict(Dict shapes) { return {std::move(shapes)}; }
    static InputSignature nothing() { return {Dict{}}; }

    bool is_dict() const noexcept { return std::holds_alternative<Dict>(value); }
    bool operator==(const InputSignature&) const = default;
};

// ---- validation --------------------------------------------------------------------------------

// Throws Error at the first violation: num_cores_per_replica or num_replicas < 1; a side whose
// structure differs from the pipeline's (list vs dict, different keys); a shape with an extent < 1;
// dims of the wrong length, with an entry < 1, splitting the batch axis, whose product is neither 1
// nor num_cores_per_replica, or not dividing an extent evenly; any split without per_host_input_v2.
void validate(const PartitionSpec& spec, const InputSignature& features, const InputSignature& labels);

// True when some tensor of the spec is split (its dims multiply to more than 1).
bool is_spatially_partitioned(const PartitionSpec& spec);

// The spatial axes of a tensor of this rank: 1 .. rank-2 for rank >= 3, none below.
std::vector<int> spatial_axes(int rank);

// Every dims vector of length `rank` whose entries on `axes` multiply to num_cores and are 1
// elsewhere. Balanced first: ordered by the entries sorted from largest down, compared
// lexicographically (smallest largest piece count first, then smallest second largest, ...);
// permutations of the same counts lexicographically larger first (outer axes get more pieces).
// num_cores >= 1; axes distinct, in any order, in [0, rank). For 4 over axes {1, 2} of rank 4:
// [1,2,2,1], [1,4,1,1], [1,1,4,1]; for 16 over {1, 2, 3} of rank 5: [1,4,2,2,1], [1,2,4,2,1],
// [1,2,2,4,1], [1,4,4,1,1], ... [1,1,1,16,1].
std::vector<std::vector<std::int64_t>> factorizations(std::int64_t num_cores, const std::vector<int>& axes, int rank);

// ---- what each core receives -------------------------------------------------------------------

enum class PlacementKind {
    Split,         // dims multiply to num_cores_per_replica: core c holds piece c
    Broadcast,     // None: every core holds the whole tensor
    CoreZeroOnly,  // dims all ones: core 0 holds the whole tensor, the others nothing
};
std::string_view to_string(PlacementKind kind);  // "split", "broadcast", "core 0 only"

// A box of the tensor held by one core.
struct TensorPiece {
    std::int64_t core = 0;            // core id within the replica
    std::vector<std::int64_t> index;  // grid index per axis; all zeros for a whole tensor
    Shape begin;                      // elements, per axis
    Shape extent;                     // elements, per axis
    bool operator==(const TensorPiece&) const = default;
};

struct TensorPlacement {
    std::string name;                // "features", "features['image']", "labels['mask']"
    bool is_label = false;           // labels side, else features
    std::optional<std::string> key;  // dict key, nullopt for a single tensor
    Shape shape;                     // the whole tensor, per replica
    PlacementKind kind = PlacementKind::Broadcast;
    std::vector<std::int64_t> dims;   // pieces per axis; all ones unless Split
    std::vector<TensorPiece> pieces;  // by core: every core (Split, Broadcast) or core 0 alone

    // The piece a core holds, or nullptr when it holds none of this tensor.
    const TensorPiece* piece_of_core(std::int64_t core) const;
};

// Validates, then places every tensor: features first, then labels; dict entries in key order.
std::vector<TensorPlacement> placements(const PartitionSpec& spec, const InputSignature& features,
                                        const InputSignature& labels);

// ---- text forms ----------------------------------------------------------------------------------

std::string to_string(const TensorPartition& partition);                // "[1, 4, 1, 1]", "None"
std::string to_string(const InputPartition& partition);                 // also "{'image': [1, 2, 2, 1], 'mask': None}"
std::string input_partition_dims_to_string(const PartitionSpec& spec);  // "[[1, 4, 1, 1], None]"

// Parses one side as written in TPUConfig: None, a list (or tuple) of ints, or a dict of quoted keys
// to lists or None. Whitespace is free, a trailing comma is allowed. Errors give the column (and
// the line when the text has several) and what was expected there.
InputPartition parse_input_partition(std::string_view text);

// Parses the whole `[features_dims, labels_dims]`; a missing labels_dims is None.
std::pair<InputPartition, InputPartition> parse_input_partition_dims(std::string_view text);

}  // namespace tessera::partition
