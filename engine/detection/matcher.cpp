#include "detection/matcher.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace tessera::detection {

namespace {

struct IouView {
    const float* values = nullptr;  // [G, M] row-major
    std::int64_t rows = 0, columns = 0;
};

IouView view_of(const Tensor& iou, const char* who) {
    TESSERA_CHECK(iou.is_defined() && iou.rank() == 2 && iou.dtype() == DType::F32 && iou.is_contiguous(),
                  who << ": expected a contiguous [G, M] f32 IoU matrix, got " << shape_to_string(iou.shape()));
    return {iou.data<float>(), iou.dim(0), iou.dim(1)};
}

std::int64_t clamp_valid_rows(std::int64_t num_valid_rows, std::int64_t rows, const char* who) {
    TESSERA_CHECK(num_valid_rows <= rows,
                  who << ": expected at most " << rows << " valid rows (G), got " << num_valid_rows);
    return num_valid_rows < 0 ? rows : num_valid_rows;
}

// The threshold part of the matcher for one column: argmax over valid rows (ties → lowest row).
std::int32_t threshold_match(const IouView& iou, std::int64_t column, std::int64_t valid_rows,
                             const MatcherOptions& options) {
    if (valid_rows == 0) return k_unmatched;  // TF's _match_when_rows_are_empty
    std::int64_t best_row = 0;
    float best = iou.values[column];
    for (std::int64_t row = 1; row < valid_rows; ++row) {
        const float value = iou.values[row * iou.columns + column];
        if (value > best) {
            best = value;
            best_row = row;
        }
    }
    if (best >= options.matched_threshold) return static_cast<std::int32_t>(best_row);
    const bool below_unmatched = best < options.unmatched_threshold;
    if (options.negatives_lower_than_unmatched) return below_unmatched ? k_unmatched : k_ignored;
    return below_unmatched ? k_ignored : k_unmatched;
}

}  // namespace

void validate(const MatcherOptions& options) {
    TESSERA_CHECK(std::isfinite(options.matched_threshold) && std::isfinite(options.unmatched_threshold),
                  "matcher: expected finite thresholds, got matched " << options.matched_threshold << ", unmatched "
                                                                      << options.unmatched_threshold);
    TESSERA_CHECK(options.unmatched_threshold <= options.matched_threshold,
                  "matcher: expected unmatched_threshold ≤ matched_threshold, got unmatched "
                      << options.unmatched_threshold << " > matched " << options.matched_threshold);
    TESSERA_CHECK(options.negatives_lower_than_unmatched || options.unmatched_threshold < options.matched_threshold,
                  "matcher: with negatives between the thresholds (negatives_lower_than_unmatched false) the "
                  "thresholds cannot be equal, got both "
                      << options.matched_threshold
                      << "; lower unmatched_threshold or set negatives_lower_than_unmatched");
}

Tensor iou_matrix(std::span<const Box> ground_truth, std::span<const Box> anchors, std::int64_t num_valid_rows) {
    const auto rows = static_cast<std::int64_t>(ground_truth.size());
    const auto columns = static_cast<std::int64_t>(anchors.size());
    const std::int64_t valid_rows = clamp_valid_rows(num_valid_rows, rows, "iou_matrix");
    Tensor iou = Tensor::zeros({rows, columns}, DType::F32);
    float* out = iou.data<float>();
    for (std::int64_t row = 0; row < valid_rows; ++row) {
        const Box& box = ground_truth[static_cast<std::size_t>(row)];
        if (box.empty()) continue;
        for (std::int64_t column = 0; column < columns; ++column) {
            out[row * columns + column] = intersection_over_union(box, anchors[static_cast<std::size_t>(column)]);
        }
    }
    return iou;
}

RowBestPartial row_best_partial(const Tensor& iou, std::span<const std::int64_t> global_anchor_index) {
    const IouView view = view_of(iou, "row_best_partial");
    TESSERA_CHECK(static_cast<std::int64_t>(global_anchor_index.size()) == view.columns,
                  "row_best_partial: expected one global anchor index per IoU column (" << view.columns << "), got "
                                                                                        << global_anchor_index.size());
    RowBestPartial partial;
    partial.best_iou.assign(static_cast<std::size_t>(view.rows), -std::numeric_limits<float>::infinity());
    partial.best_anchor.assign(static_cast<std::size_t>(view.rows), -1);
    for (std::int64_t row = 0; row < view.rows; ++row) {
        float& best = partial.best_iou[static_cast<std::size_t>(row)];
        std::int64_t& best_anchor = partial.best_anchor[static_cast<std::size_t>(row)];
        for (std::int64_t column = 0; column < view.columns; ++column) {
            const float value = view.values[row * view.columns + column];
            const std::int64_t anchor = global_anchor_index[static_cast<std::size_t>(column)];
            // Subsets need not be in ascending order: ties go to the lowest global index explicitly.
            if (value > best || (value == best && anchor < best_anchor)) {
                best = value;
                best_anchor = anchor;
            }
        }
    }
    return partial;
}

RowBestPartial combine(const RowBestPartial& a, const RowBestPartial& b) {
    TESSERA_CHECK(a.best_iou.size() == b.best_iou.size() && a.best_anchor.size() == a.best_iou.size() &&
                      b.best_anchor.size() == b.best_iou.size(),
                  "combine: expected partials over the same ground truth rows, got " << a.best_iou.size() << " and "
                                                                                     << b.best_iou.size() << " rows");
    RowBestPartial result = a;
    for (std::size_t row = 0; row < b.best_iou.size(); ++row) {
        const bool b_wins = b.best_anchor[row] >= 0 &&
                            (result.best_anchor[row] < 0 || b.best_iou[row] > result.best_iou[row] ||
                             (b.best_iou[row] == result.best_iou[row] && b.best_anchor[row] < result.best_anchor[row]));
        if (b_wins) {
            result.best_iou[row] = b.best_iou[row];
            result.best_anchor[row] = b.best_anchor[row];
        }
    }
    return result;
}

std::vector<std::int32_t> match_anchor_subset(const Tensor& iou, std::span<const std::int64_t> global_anchor_index,
                                              const RowBestPartial& all_anchors, std::int64_t num_valid_rows,
                                              const MatcherOptions& options) {
    validate(options);
    const IouView view = view_of(iou, "match_anchors");
    const std::int64_t valid_rows = clamp_valid_rows(num_valid_rows, view.rows, "match_anchors");
    TESSERA_CHECK(static_cast<std::int64_t>(global_anchor_index.size()) == view.columns,
                  "match_anchors: expected one global anchor index per IoU column (" << view.columns << "), got "
                                                                                     << global_anchor_index.size());
    std::vector<std::int32_t> matches(static_cast<std::size_t>(view.columns));
    for (std::int64_t column = 0; column < view.columns; ++column) {
        matches[static_cast<std::size_t>(column)] = threshold_match(view, column, valid_rows, options);
    }
    if (!options.force_match_for_each_row || valid_rows == 0) return matches;
    TESSERA_CHECK(static_cast<std::int64_t>(all_anchors.best_anchor.size()) == view.rows,
                  "match_anchors: expected a row-best partial of " << view.rows << " rows, got "
                                                                   << all_anchors.best_anchor.size());
    // (global anchor, row) of every forcing row, sorted: where rows force one anchor the lowest row comes first.
    std::vector<std::pair<std::int64_t, std::int32_t>> forced;
    for (std::int64_t row = 0; row < valid_rows; ++row) {
        forced.emplace_back(all_anchors.best_anchor[static_cast<std::size_t>(row)], static_cast<std::int32_t>(row));
    }
    std::sort(forced.begin(), forced.end());
    for (std::int64_t column = 0; column < view.columns; ++column) {
        const std::int64_t anchor = global_anchor_index[static_cast<std::size_t>(column)];
        const auto where = std::lower_bound(forced.begin(), forced.end(), std::pair{anchor, std::int32_t{-1}});
        if (where != forced.end() && where->first == anchor) matches[static_cast<std::size_t>(column)] = where->second;
    }
    return matches;
}

std::vector<std::int32_t> match_anchors(const Tensor& iou, std::int64_t num_valid_rows, const MatcherOptions& options) {
    const IouView view = view_of(iou, "match_anchors");
    std::vector<std::int64_t> all(static_cast<std::size_t>(view.columns));
    for (std::int64_t column = 0; column < view.columns; ++column) all[static_cast<std::size_t>(column)] = column;
    const RowBestPartial best = row_best_partial(iou, all);
    return match_anchor_subset(iou, all, best, num_valid_rows, options);
}

namespace {

constexpr std::int64_t k_iou_block = 4096;  // anchors per IoU block

void check_global_indices(std::span<const Box> anchors, std::span<const std::int64_t> global_anchor_index, const char* who) {
    TESSERA_CHECK(global_anchor_index.size() == anchors.size(), who << ": expected one global anchor index per anchor ("
                                                                    << anchors.size() << "), got "
                                                                    << global_anchor_index.size());
}

}  // namespace

RowBestPartial row_best_partial(std::span<const Box> ground_truth, std::int64_t num_valid_rows,
                                std::span<const Box> anchors, std::span<const std::int64_t> global_anchor_index) {
    check_global_indices(anchors, global_anchor_index, "row_best_partial");
    RowBestPartial partial;
    partial.best_iou.assign(ground_truth.size(), -std::numeric_limits<float>::infinity());
    partial.best_anchor.assign(ground_truth.size(), -1);
    for (std::size_t begin = 0; begin < anchors.size(); begin += k_iou_block) {
        const std::size_t length = std::min<std::size_t>(k_iou_block, anchors.size() - begin);
        const Tensor block = iou_matrix(ground_truth, anchors.subspan(begin, length), num_valid_rows);
        partial = combine(partial, row_best_partial(block, global_anchor_index.subspan(begin, length)));
    }
    return partial;
}

std::vector<std::int32_t> match_anchor_subset(std::span<const Box> ground_truth, std::int64_t num_valid_rows,
                                              std::span<const Box> anchors,
                                              std::span<const std::int64_t> global_anchor_index,
                                              const RowBestPartial& all_anchors, const MatcherOptions& options) {
    check_global_indices(anchors, global_anchor_index, "match_anchors");
    validate(options);
    std::vector<std::int32_t> matches;
    matches.reserve(anchors.size());
    for (std::size_t begin = 0; begin < anchors.size(); begin += k_iou_block) {
        const std::size_t length = std::min<std::size_t>(k_iou_block, anchors.size() - begin);
        const Tensor block = iou_matrix(ground_truth, anchors.subspan(begin, length), num_valid_rows);
        const std::vector<std::int32_t> part = match_anchor_subset(block, global_anchor_index.subspan(begin, length),
                                                                   all_anchors, num_valid_rows, options);
        matches.insert(matches.end(), part.begin(), part.end());
    }
    return matches;
}

std::vector<std::int32_t> match_anchors(std::span<const Box> ground_truth, std::int64_t num_valid_rows,
                                        std::span<const Box> anchors, const MatcherOptions& options) {
    std::vector<std::int64_t> all(anchors.size());
    for (std::size_t column = 0; column < anchors.size(); ++column) all[column] = static_cast<std::int64_t>(column);
    const RowBestPartial best = row_best_partial(ground_truth, num_valid_rows, anchors, all);
    return match_anchor_subset(ground_truth, num_valid_rows, anchors, all, best, options);
}

Tensor gather_by_one_hot(std::span<const std::int32_t> matches, const Tensor& rows) {
    TESSERA_CHECK(rows.is_defined() && rows.rank() == 2 && rows.dtype() == DType::F32,
                  "gather_by_one_hot: expected [G, C] f32 rows, got " << shape_to_string(rows.shape()));
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Tensor dense = rows.contiguous();
    const std::int64_t num_rows = dense.dim(0);
    const std::int64_t num_columns = dense.dim(1);
    const Eigen::Map<const RowMajor> source(dense.data<float>(), num_rows, num_columns);
    const auto num_anchors = static_cast<std::int64_t>(matches.size());
    Tensor gathered = Tensor::empty({num_anchors, num_columns}, DType::F32);
    Eigen::Map<RowMajor> out(gathered.data<float>(), num_anchors, num_columns);
    constexpr std::int64_t k_block = 1024;  // anchors per one-hot block: [1024, G] stays small
    RowMajor one_hot(std::min(k_block, num_anchors), num_rows);
    for (std::int64_t begin = 0; begin < num_anchors; begin += k_block) {
        const std::int64_t length = std::min(k_block, num_anchors - begin);
        one_hot.setZero();
        for (std::int64_t i = 0; i < length; ++i) {
            const std::int32_t match = matches[static_cast<std::size_t>(begin + i)];
            TESSERA_CHECK(match >= k_ignored && match < num_rows,
                          "gather_by_one_hot: expected matches in [-2, " << num_rows << "), got " << match);
            if (match >= 0) one_hot(i, match) = 1.0f;
        }
        out.middleRows(begin, length).noalias() = one_hot.topRows(length) * source;
    }
    return gathered;
}

}  // namespace tessera::detection
