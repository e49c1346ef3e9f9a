#include "partition/partition_spec.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

namespace tessera::partition {

namespace {

using Dims = std::vector<std::int64_t>;

// ---- small text helpers ------------------------------------------------------------------------

// Joins text pieces by appending. (Also avoids GCC 12's false -Wrestrict on "literal" + std::string.)
template <class... Parts>
std::string cat(const Parts&... parts) {
    std::string text;
    (text.append(std::string_view(parts)), ...);
    return text;
}

// Dims as they appear in messages, compact: "[1,4,1,1]".
std::string compact(const Dims& dims) {
    std::string text = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) {
        if (i > 0) text += ',';
        text += std::to_string(dims[i]);
    }
    return text + "]";
}

// A Python string literal, single quoted: 'image'.
std::string quoted(const std::string& key) {
    std::string text = "'";
    for (char c : key) {
        if (c == '\'' || c == '\\') text += '\\';
        text += c;
    }
    return text + "'";
}

std::string quoted_keys(const std::vector<std::string>& keys) {
    std::string text;
    for (std::size_t i = 0; i < keys.size(); ++i) {
        if (i > 0) text += ", ";
        text += quoted(keys[i]);
    }
    return text;
}

template <class Map>
std::vector<std::string> keys_of(const Map& map) {
    std::vector<std::string> keys;
    for (const auto& entry : map) keys.push_back(entry.first);
    return keys;
}

// "A", "A or B", "A, B or C".
std::string one_of(const std::vector<std::string>& options) {
    std::string text;
    for (std::size_t i = 0; i < options.size(); ++i) {
        if (i > 0) text += (i + 1 == options.size()) ? " or " : ", ";
        text += options[i];
    }
    return text;
}

const char* side_name(bool is_label) {
    return is_label ? "labels" : "features";
}
const char* side_source(bool is_label) {
    return is_label ? "input_partition_dims[1]" : "input_partition_dims[0]";
}

// Optimal string alignment distance (Levenshtein plus adjacent transpositions).
std::size_t edit_distance(const std::string& a, const std::string& b) {
    const std::size_t n = a.size(), m = b.size();
    std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1, 0));
    for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= n; ++i) {
        for (std::size_t j = 1; j <= m; ++j) {
            const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    }
    return d[n][m];
}

std::string lowered(std::string text) {
    for (char& c : text) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return text;
}

// The candidate closest to `key` when it is a near miss: at most 2 edits, or a third of the longer.
std::optional<std::string> near_miss(const std::string& key, const std::vector<std::string>& candidates) {
    std::optional<std::string> best;
    std::size_t best_distance = std::numeric_limits<std::size_t>::max();
    for (const std::string& candidate : candidates) {
        const std::size_t distance = edit_distance(lowered(key), lowered(candidate));
        const std::size_t allowed = std::max<std::size_t>(2, std::max(key.size(), candidate.size()) / 3);
        if (distance <= allowed && distance < best_distance) {
            best = candidate;
            best_distance = distance;
        }
    }
    return best;
}

// ---- suggestions -------------------------------------------------------------------------------

constexpr std::int64_t saturated = std::numeric_limits<std::int64_t>::max();

// Product of entries >= 1, saturating at `saturated` so huge entries cannot overflow; 0 when an
// entry is < 1.
std::int64_t product_of(const Dims& dims) {
    std::int64_t product = 1;
    for (std::int64_t d : dims) {
        if (d <= 0) return 0;
        if (product > saturated / d) return saturated;
        product *= d;
    }
    return product;
}

bool divides_evenly(const Dims& dims, const Shape& shape) {
    for (std::size_t axis = 0; axis < dims.size() && axis < shape.size(); ++axis) {
        if (shape[axis] % dims[axis] != 0) return false;
    }
    return true;
}

// What the user seems to want, as a vector of the tensor's rank with entries >= 1: truncated or
// padded with ones, a negative entry taken by magnitude, a zero as 1.
Dims intent_of(const Dims& dims, std::size_t rank) {
    Dims intent(rank, 1);
    for (std::size_t axis = 0; axis < rank && axis < dims.size(); ++axis) {
        const std::int64_t d = dims[axis];
        intent[axis] = d > 0 ? d : (d < 0 && d != std::numeric_limits<std::int64_t>::min() ? -d : 1);
    }
    return intent;
}

double log_distance(const Dims& a, const Dims& b) {
    double distance = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        distance += std::abs(std::log2(static_cast<double>(a[i])) - std::log2(static_cast<double>(b[i])));
    }
    return distance;
}

// Up to three valid dims for a tensor of this shape on `num_cores` cores, closest to `wanted` (of
// the tensor's rank, entries >= 1) in Σ|log2 ratio|: the batch axis unsplit, pieces over the axes
// `wanted` splits and the spatial axes, and, when some do, only dims that split at least one of the
// axes `wanted` splits. When `shape` is given, only dims that split it evenly. When what was wanted
// multiplies to 1, all ones.
std::vector<std::string> suggestions(Dims wanted, std::int64_t num_cores, const Shape* shape = nullptr,
                                     const Dims* exclude = nullptr) {
    const int rank = static_cast<int>(wanted.size());
    if (product_of(wanted) == 1) return {compact(Dims(wanted.size(), 1))};
    if (rank > 0) wanted[batch_axis] = 1;

    std::vector<int> axes = spatial_axes(rank);
    std::vector<int> wanted_split;  // axes the user split
    for (int axis = 1; axis < rank; ++axis) {
        if (wanted[static_cast<std::size_t>(axis)] > 1) {
            wanted_split.push_back(axis);
            if (std::find(axes.begin(), axes.end(), axis) == axes.end()) axes.push_back(axis);
        }
    }
    std::sort(axes.begin(), axes.end());

    auto candidates = factorizations(num_cores, axes, rank);
    std::erase_if(candidates, [&](const Dims& dims) {
        return (shape != nullptr && !divides_evenly(dims, *shape)) || (exclude != nullptr && dims == *exclude);
    });
    std::vector<Dims> sharing;  // candidates that split an axis the user split
    for (const Dims& dims : candidates) {
        if (std::any_of(wanted_split.begin(), wanted_split.end(),
                        [&](int axis) { return dims[static_cast<std::size_t>(axis)] > 1; }))
            sharing.push_back(dims);
    }
    if (!sharing.empty()) candidates = std::move(sharing);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](const Dims& a, const Dims& b) { return log_distance(a, wanted) < log_distance(b, wanted); });
    std::vector<std::string> texts;
    for (std::size_t i = 0; i < candidates.size() && i < 3; ++i) texts.push_back(compact(candidates[i]));
    return texts;
}

// "; did you mean [1,4,1,1] or [1,2,2,1]?", or the unsplit alternatives when no split fits.
std::string did_you_mean(const std::vector<std::string>& options, std::size_t rank) {
    if (options.empty()) {
        return cat("; did you mean None (broadcast to every core) or ", compact(Dims(rank, 1)), " (core 0 only)?");
    }
    return cat("; did you mean ", one_of(options), "?");
}

// ---- the tensors of one side -------------------------------------------------------------------

struct NamedTensor {
    std::string name;  // features['image']
    bool is_label = false;
    std::optional<std::string> key;
    Shape shape;
    std::optional<Dims> dims;  // nullopt: None
};

std::string tensor_name(bool is_label, const std::optional<std::string>& key) {
    std::string name = side_name(is_label);
    if (key) name += cat("[", quoted(*key), "]");
    return name;
}

// The pipeline's keys as a dict, the first given `hint` and the others None: the example of a
// structure mismatch's message.
std::string dict_template(const std::vector<std::string>& keys, const TensorPartition* hint) {
    std::string text = "{";
    for (std::size_t i = 0; i < keys.size(); ++i) {
        if (i > 0) text += ", ";
        text += cat(quoted(keys[i]), ": ", hint != nullptr && i == 0 ? to_string(*hint) : std::string("None"));
    }
    return text + "}";
}

// Pairs the side's partition with the pipeline's tensors, checking that the structures match.
std::vector<NamedTensor> tensors_of_side(const InputPartition& partition, const InputSignature& signature,
                                         bool is_label) {
    const std::string side = side_name(is_label);
    const std::string source = side_source(is_label);
    std::vector<NamedTensor> tensors;

    if (!signature.is_dict()) {
        const Shape& shape = std::get<Shape>(signature.value);
        TESSERA_CHECK(!partition.is_dict(),
                      side << ": the input pipeline yields a single tensor of shape " << shape_to_string(shape)
                           << " but " << source << " is a dict with keys {" << quoted_keys(keys_of(partition.entries()))
                           << "}; give a list with one entry per dimension (e.g. " << compact(Dims(shape.size(), 1))
                           << ", core 0 only) or None (broadcast)");
        tensors.push_back({side, is_label, std::nullopt, shape, partition.single().dims});
        return tensors;
    }

    const InputSignature::Dict& shapes = std::get<InputSignature::Dict>(signature.value);
    if (!partition.is_dict()) {
        const TensorPartition& single = partition.single();
        TESSERA_CHECK(single.is_none(),
                      side << ": the input pipeline yields a dict with keys {" << quoted_keys(keys_of(shapes))
                           << "} but " << source << " is a list " << compact(*single.dims)
                           << "; give a dict with exactly the same keys, each value a list or None, e.g. "
                           << dict_template(keys_of(shapes), &single));
        // A bare None for a dict side: every tensor of that side is broadcast.
        for (const auto& [key, shape] : shapes) {
            tensors.push_back({tensor_name(is_label, key), is_label, key, shape, std::nullopt});
        }
        return tensors;
    }

    const InputPartition::Dict& entries = partition.entries();
    std::vector<std::string> missing, unknown;
    for (const auto& entry : shapes) {
        if (!entries.contains(entry.first)) missing.push_back(entry.first);
    }
    for (const auto& entry : entries) {
        if (!shapes.contains(entry.first)) unknown.push_back(entry.first);
    }
    if (!missing.empty() || !unknown.empty()) {
        std::ostringstream message;
        message << side << ": " << source << " must have exactly the keys of the input pipeline's " << side << " dict {"
                << quoted_keys(keys_of(shapes)) << "}, but has {" << quoted_keys(keys_of(entries)) << "}";
        if (!missing.empty()) {
            message << "; missing " << quoted_keys(missing) << " (give None to broadcast a tensor, or its dims)";
        }
        for (const std::string& key : unknown) {
            message << "; " << quoted(key) << " is not a key of " << side;
            if (auto guess = near_miss(key, missing.empty() ? keys_of(shapes) : missing)) {
                message << " (did you mean " << quoted(*guess) << "?)";
            }
        }
        TESSERA_REJECT(message.str());
    }
    for (const auto& [key, shape] : shapes) {
        tensors.push_back({tensor_name(is_label, key), is_label, key, shape, entries.at(key).dims});
    }
    return tensors;
}

// Checks one tensor's dims against its shape and the replica's core count.
void check_tensor(const NamedTensor& tensor, std::int64_t num_cores) {
    const Shape& shape = tensor.shape;
    const std::size_t rank = shape.size();
    for (std::size_t axis = 0; axis < rank; ++axis) {
        TESSERA_CHECK(shape[axis] >= 1, tensor.name << ": the input pipeline's shape " << shape_to_string(shape)
                                                    << " has extent " << shape[axis] << " at axis " << axis
                                                    << "; every extent must be >= 1");
    }
    if (!tensor.dims) return;  // None: broadcast
    const Dims& dims = *tensor.dims;

    TESSERA_CHECK(dims.size() == rank, tensor.name
                                           << ": dims " << compact(dims) << " have " << dims.size() << " entr"
                                           << (dims.size() == 1 ? "y" : "ies") << " but the tensor has rank " << rank
                                           << " (shape " << shape_to_string(shape) << "); give one entry per dimension"
                                           << did_you_mean(suggestions(intent_of(dims, rank), num_cores), rank));

    for (std::size_t axis = 0; axis < rank; ++axis) {
        TESSERA_CHECK(dims[axis] >= 1,
                      tensor.name << ": dims " << compact(dims) << " have entry " << dims[axis] << " at axis " << axis
                                  << "; every entry must be >= 1 (1 leaves that axis whole, None broadcasts the tensor)"
                                  << did_you_mean(suggestions(intent_of(dims, rank), num_cores), rank));
    }

    const std::int64_t product = product_of(dims);
    if (product == 1) return;  // all ones: core 0 only

    TESSERA_CHECK(dims[batch_axis] == 1,
                  tensor.name << ": dims " << compact(dims) << " split axis 0, the batch axis, into "
                              << dims[batch_axis]
                              << " pieces; spatial partitioning splits the spatial axes (height, width, depth) of each "
                                 "example, never the batch, which is divided across replicas (num_replicas)"
                              << did_you_mean(suggestions(dims, num_cores), rank));

    if (product != num_cores) {
        const std::string multiplied = product == saturated ? "more than 2^63" : std::to_string(product);
        TESSERA_REJECT(tensor.name << ": dims " << compact(dims) << " multiply to " << multiplied
                                   << " but num_cores_per_replica is " << num_cores
                                   << did_you_mean(suggestions(dims, num_cores), rank));
    }
    for (std::size_t axis = 0; axis < rank; ++axis) {
        if (shape[axis] % dims[axis] == 0) continue;
        const std::int64_t extent = shape[axis], d = dims[axis];
        const std::int64_t lower = extent / d * d, upper = lower + d;
        std::ostringstream message;
        message << tensor.name << ": axis " << axis << " has extent " << extent << " (shape " << shape_to_string(shape)
                << "), which dims " << compact(dims) << " cannot split evenly into " << d << " pieces (" << extent
                << " = " << d << " x " << extent / d << " + " << extent % d
                << "); an uneven split is allowed only with explicit tile boundaries: use explicit tile boundaries, "
                   "or crop or pad the extent to a multiple of "
                << d << " (";
        if (lower > 0) message << lower << " or ";
        message << upper << ")";
        const auto even = suggestions(dims, num_cores, &shape, &dims);
        if (!even.empty()) message << "; dims that split this shape evenly: " << one_of(even);
        TESSERA_REJECT(message.str());
    }
}

std::vector<NamedTensor> checked_tensors(const PartitionSpec& spec, const InputSignature& features,
                                         const InputSignature& labels) {
    TESSERA_CHECK(spec.num_cores_per_replica >= 1,
                  "num_cores_per_replica must be >= 1, got "
                      << spec.num_cores_per_replica << "; use 1 for a replica on one core (no spatial partitioning)");
    TESSERA_CHECK(spec.num_replicas >= 1,
                  "num_replicas must be >= 1, got " << spec.num_replicas << "; use 1 for a single replica");

    std::vector<NamedTensor> tensors = tensors_of_side(spec.features, features, false);
    std::vector<NamedTensor> label_tensors = tensors_of_side(spec.labels, labels, true);
    tensors.insert(tensors.end(), label_tensors.begin(), label_tensors.end());

    for (const NamedTensor& tensor : tensors) check_tensor(tensor, spec.num_cores_per_replica);

    if (!spec.per_host_input_v2) {
        for (const NamedTensor& tensor : tensors) {
            TESSERA_CHECK(!tensor.dims || product_of(*tensor.dims) == 1,
                          "spatial partitioning requires per_host_input_for_training = PER_HOST_V2: "
                              << tensor.name << " is split by dims " << compact(*tensor.dims)
                              << " but per_host_input_v2 is false; set per_host_input_v2 = true (each host's "
                                 "input pipeline then feeds the cores of its replicas, as TPUEstimator requires for "
                                 "input_partition_dims), or leave every tensor unsplit (None or all ones)");
        }
    }
    return tensors;
}

// The divisors of n >= 1, ascending.
std::vector<std::int64_t> divisors_of(std::int64_t n) {
    std::vector<std::int64_t> low, high;
    for (std::int64_t d = 1; d <= n / d; ++d) {
        if (n % d != 0) continue;
        low.push_back(d);
        if (d != n / d) high.push_back(n / d);
    }
    low.insert(low.end(), high.rbegin(), high.rend());
    return low;
}

// Every assignment of divisors to axes[next..] whose product is `remaining`; `divisors` holds the
// divisors of the original count, so of every `remaining`'s too.
void collect_factorizations(std::int64_t remaining, const std::vector<int>& axes, std::size_t next,
                            const std::vector<std::int64_t>& divisors, Dims& current, std::vector<Dims>& out) {
    if (next == axes.size()) {
        if (remaining == 1) out.push_back(current);
        return;
    }
    const auto axis = static_cast<std::size_t>(axes[next]);
    for (std::int64_t d : divisors) {
        if (d > remaining) break;
        if (remaining % d != 0) continue;
        current[axis] = d;
        collect_factorizations(remaining / d, axes, next + 1, divisors, current, out);
    }
    current[axis] = 1;
}

}  // namespace

// ---- InputPartition ------------------------------------------------------------------------------

const TensorPartition& InputPartition::single() const {
    TESSERA_CHECK(!is_dict(), "expected a single tensor's partition, got the dict " << to_string(*this));
    return std::get<TensorPartition>(value);
}

const InputPartition::Dict& InputPartition::entries() const {
    TESSERA_CHECK(is_dict(), "expected a dict of partitions, got " << to_string(*this));
    return std::get<Dict>(value);
}

// ---- validation ----------------------------------------------------------------------------------

void validate(const PartitionSpec& spec, const InputSignature& features, const InputSignature& labels) {
    checked_tensors(spec, features, labels);
}

bool is_spatially_partitioned(const PartitionSpec& spec) {
    const auto side_is_split = [&](const InputPartition& side) {
        const auto split = [&](const TensorPartition& partition) {
            return partition.dims && product_of(*partition.dims) > 1;
        };
        if (!side.is_dict()) return split(side.single());
        return std::any_of(side.entries().begin(), side.entries().end(),
                           [&](const auto& entry) { return split(entry.second); });
    };
    return side_is_split(spec.features) || side_is_split(spec.labels);
}

std::vector<int> spatial_axes(int rank) {
    std::vector<int> axes;
    for (int axis = 1; axis + 1 < rank; ++axis) axes.push_back(axis);
    return axes;
}

std::vector<std::vector<std::int64_t>> factorizations(std::int64_t num_cores, const std::vector<int>& axes, int rank) {
    TESSERA_CHECK(num_cores >= 1, "factorizations: num_cores must be >= 1, got " << num_cores);
    TESSERA_CHECK(rank >= 0, "factorizations: rank must be >= 0, got " << rank);
    std::set<int> seen;
    for (int axis : axes) {
        TESSERA_CHECK(axis >= 0 && axis < rank, "factorizations: axis " << axis << " is out of range for rank " << rank
                                                                        << " (0.." << rank - 1 << ")");
        TESSERA_CHECK(seen.insert(axis).second, "factorizations: axis " << axis << " is listed twice");
    }
    std::vector<Dims> out;
    Dims current(static_cast<std::size_t>(rank), 1);
    collect_factorizations(num_cores, axes, 0, divisors_of(num_cores), current, out);

    // Balanced first: compare the entries sorted from largest down (the smallest largest count
    // wins, then the smallest second largest, ...); among permutations, outer axes get more.
    const auto descending = [](Dims dims) {
        std::sort(dims.begin(), dims.end(), std::greater<>());
        return dims;
    };
    std::sort(out.begin(), out.end(), [&](const Dims& a, const Dims& b) {
        const Dims sorted_a = descending(a), sorted_b = descending(b);
        if (sorted_a != sorted_b) return sorted_a < sorted_b;
        return a > b;
    });
    return out;
}

// ---- placements ----------------------------------------------------------------------------------

std::string_view to_string(PlacementKind kind) {
    switch (kind) {
        case PlacementKind::Split:
            return "split";
        case PlacementKind::Broadcast:
            return "broadcast";
        case PlacementKind::CoreZeroOnly:
            return "core 0 only";
    }
    TESSERA_FAIL("unknown PlacementKind " << static_cast<int>(kind));
}

const TensorPiece* TensorPlacement::piece_of_core(std::int64_t core) const {
    for (const TensorPiece& piece : pieces) {
        if (piece.core == core) return &piece;
    }
    return nullptr;
}

std::vector<TensorPlacement> placements(const PartitionSpec& spec, const InputSignature& features,
                                        const InputSignature& labels) {
    const std::vector<NamedTensor> tensors = checked_tensors(spec, features, labels);
    const std::int64_t num_cores = spec.num_cores_per_replica;

    std::vector<TensorPlacement> placed;
    for (const NamedTensor& tensor : tensors) {
        const std::size_t rank = tensor.shape.size();
        TensorPlacement placement;
        placement.name = tensor.name;
        placement.is_label = tensor.is_label;
        placement.key = tensor.key;
        placement.shape = tensor.shape;
        placement.dims = Dims(rank, 1);
        const TensorPiece whole{0, Dims(rank, 0), Shape(rank, 0), tensor.shape};

        if (!tensor.dims) {
            placement.kind = PlacementKind::Broadcast;
            for (std::int64_t core = 0; core < num_cores; ++core) {
                TensorPiece piece = whole;
                piece.core = core;
                placement.pieces.push_back(std::move(piece));
            }
        } else if (product_of(*tensor.dims) == 1) {
            placement.kind = PlacementKind::CoreZeroOnly;
            placement.pieces.push_back(whole);
        } else {
            placement.kind = PlacementKind::Split;
            placement.dims = *tensor.dims;
            for (std::int64_t core = 0; core < num_cores; ++core) {
                TensorPiece piece{core, Dims(rank, 0), Shape(rank, 0), Shape(rank, 0)};
                std::int64_t rest = core;
                for (std::size_t axis = rank; axis-- > 0;) {  // last axis fastest
                    const std::int64_t d = placement.dims[axis];
                    piece.index[axis] = rest % d;
                    rest /= d;
                    piece.extent[axis] = tensor.shape[axis] / d;
                    piece.begin[axis] = piece.index[axis] * piece.extent[axis];
                }
                TESSERA_ASSERT(rest == 0, "core " << core << " outside the grid " << compact(placement.dims));
                placement.pieces.push_back(std::move(piece));
            }
        }
        placed.push_back(std::move(placement));
    }
    return placed;
}

}  // namespace tessera::partition
