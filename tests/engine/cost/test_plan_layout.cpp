// cost::plan_layout: one layout on its own, such as an experiment's uneven tile_boundaries, planned as
// the planner plans its own layouts.
#include "core/error.hpp"
#include "cost/planner.hpp"
#include "experiment/experiment.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace tessera;

namespace {

experiment::Experiment em_experiment(const std::string& partition) {
    return experiment::parse_experiment(R"({"version": 1, "model": {"kind": "unet", "depth": 4, "base_width": 16},
        "input": {"size": [256, 256]}, "global_batch": 4, "device": "tpu_v3", )" +
                                            partition + "}",
                                        "em.json");
}

cost::PlannerRequest request_for(const experiment::Experiment& e) {
    cost::PlannerRequest request;
    request.global_input = experiment::global_input_shape(e);
    request.core_budget = e.partition.num_cores();
    return request;
}

}  // namespace

TEST(PlanLayout, AnEvenGridMatchesThePlannersOwnPlan) {
    const experiment::Experiment e =
        em_experiment(R"("num_cores_per_replica": 4, "input_partition_dims": [[1, 4, 1, 1], null])");
    const cost::ModelFactory factory = [&](const Shape& input) { return experiment::build_model(e, input); };
    const cost::CostModel model(cost::load_device_preset("tpu_v3"));
    const cost::PlannerRequest request = request_for(e);
    const std::vector<cost::LayoutPlan> plans = cost::plan_layouts(factory, request, model);
    const partition::SpatialGrid grid = experiment::tile_grid(e);
    const auto listed = std::find_if(plans.begin(), plans.end(), [&](const cost::LayoutPlan& p) {
        return p.replicas == 1 && p.grid.boundaries == grid.boundaries;
    });
    ASSERT_NE(listed, plans.end());
    const cost::LayoutPlan alone = cost::plan_layout(factory, request, model, 1, grid);
    EXPECT_TRUE(alone.valid && alone.fits) << alone.verdict;
    EXPECT_EQ(alone.layout, "input_partition_dims [1, 4, 1, 1]");
    EXPECT_EQ(alone.pieces, (std::vector<std::int64_t>{4, 1}));
    EXPECT_EQ(alone.peak_memory, listed->peak_memory);
    EXPECT_DOUBLE_EQ(alone.step_seconds, listed->step_seconds);
}

TEST(PlanLayout, AnUnevenGridIsPlannedAndNamedWithItsCuts) {
    const experiment::Experiment e = em_experiment(
        R"("num_cores_per_replica": 2, "input_partition_dims": [[1, 2, 1, 1], null], "tile_boundaries": [[0, 64, 256], [0, 256]])");
    const cost::ModelFactory factory = [&](const Shape& input) { return experiment::build_model(e, input); };
    const cost::CostModel model(cost::load_device_preset("tpu_v3"));
    const cost::PlannerRequest request = request_for(e);
    const partition::SpatialGrid grid = experiment::tile_grid(e);
    for (const cost::LayoutPlan& p : cost::plan_layouts(factory, request, model))
        EXPECT_NE(p.grid.boundaries, grid.boundaries);
    const cost::LayoutPlan uneven = cost::plan_layout(factory, request, model, 1, grid);
    EXPECT_TRUE(uneven.valid && uneven.fits) << uneven.verdict;
    EXPECT_EQ(uneven.layout, "input_partition_dims [1, 2, 1, 1], tiles [[0, 64, 256], [0, 256]]");
    EXPECT_EQ(uneven.grid.boundaries, grid.boundaries);
    // The bigger tile sets the step: slower than the even split of the same pieces.
    const cost::LayoutPlan even = cost::plan_layout(
        factory, request, model, 1, partition::SpatialGrid::even(experiment::replica_input_shape(e), {2, 1}));
    EXPECT_GT(uneven.step_seconds, even.step_seconds);
    EXPECT_GT(uneven.peak_memory, even.peak_memory);
    // Replicas that do not divide the batch are refused.
    EXPECT_THROW(cost::plan_layout(factory, request, model, 3, grid), Error);
}
