// The published training speeds of resources/validation/ load, convert to step times as their units
// say, rebuild as models, and get a prediction for their own layout. (How close the predictions come is
// bench/bm_published's report, not a pass/fail here: the presets' figures are data-sheet values, and
// the gaps are what the cost model has yet to explain.)
#include "experiment/published.hpp"

#include "support/error_of.hpp"
#include "support/scratch_dir.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

namespace tessera::experiment {
namespace {

using test::error_of;
using test::ScratchDir;

TEST(PublishedCases, EveryCaseLoadsWithASourceAndAStepTime) {
    const std::vector<PublishedCase> cases = load_published_cases(TESSERA_SOURCE_DIR "/resources/validation");
    ASSERT_GE(cases.size(), 15u);
    std::set<std::string> names, kinds, devices;
    for (const PublishedCase& c : cases) {
        EXPECT_TRUE(names.insert(c.name).second) << c.name << " appears twice";
        kinds.insert(c.model_kind);
        devices.insert(c.device);
        EXPECT_FALSE(c.source.empty()) << c.name;
        EXPECT_GT(c.published_step_seconds, 0) << c.name;
        EXPECT_LT(c.published_step_seconds, 60) << c.name;
        EXPECT_EQ(c.num_cores % c.num_cores_per_replica, 0) << c.name;
    }
    EXPECT_EQ(kinds, (std::set<std::string>{"resnet", "unet", "retinanet"}));
    EXPECT_GE(devices.size(), 4u);
}

TEST(PublishedCases, EveryCaseGetsAPredictionForItsOwnLayout) {
    for (const PublishedCase& c : load_published_cases(TESSERA_SOURCE_DIR "/resources/validation")) {
        const PublishedPrediction p = predict_published(c);
        EXPECT_FALSE(p.plan.layout.empty()) << c.name;
        if (p.plan.valid && p.plan.fits) {
            EXPECT_TRUE(std::isfinite(p.predicted_step_seconds) && p.predicted_step_seconds > 0) << c.name;
            EXPECT_DOUBLE_EQ(p.error, p.predicted_step_seconds / c.published_step_seconds - 1) << c.name;
        } else {
            EXPECT_FALSE(p.plan.verdict.empty()) << c.name << ": a layout that cannot run says why";
        }
    }
}

TEST(PublishedCases, UnitsConvertToTheStepOfTheGlobalBatchAndBadCasesAreNamed) {
    const ScratchDir scratch;
    const auto write = [&](const std::string& measured, const std::string& fusion = "none", const std::string& extra = "") {
        std::ofstream out(scratch / "cases.json");
        out << R"({"cases": [{"name": "r50", "model": {"kind": "resnet", "depth": 50, "num_classes": 1000},
                 "input": {"channels": 3, "size": [224, 224]}, "global_batch": 256, "device": "a100_80gb", "num_cores": 8,
                 "precision": "tf32", "framework": "PyTorch, eager", "fusion": ")"
            << fusion << R"(", )" << extra << R"("measured": )" << measured << R"(, "source": {"title": "t", "year": 2020}}]})";
    };
    write(R"({"value": 1024, "unit": "images/s"})");
    auto cases = load_published_cases(scratch.path());
    ASSERT_EQ(cases.size(), 1u);
    EXPECT_DOUBLE_EQ(cases[0].published_step_seconds, 0.25);  // 256 images at 1024 images/s
    // TF32 is f32 storage with the convolutions on TF32 tensor cores: modelled, not approximated.
    EXPECT_EQ(cases[0].precision, graph::Precision::F32);
    EXPECT_TRUE(cases[0].tf32);
    EXPECT_TRUE(cases[0].approximations.empty());
    EXPECT_EQ(cases[0].framework, "PyTorch, eager");
    EXPECT_EQ(cases[0].fusion, cost::ElementwiseFusion::None);
    write(R"({"value": 1024, "unit": "images/s"})", "chains");
    EXPECT_EQ(load_published_cases(scratch.path())[0].fusion, cost::ElementwiseFusion::Chains);
    write(R"({"value": 1024, "unit": "images/s"})", "convolution_statistics");
    EXPECT_EQ(load_published_cases(scratch.path())[0].fusion, cost::ElementwiseFusion::ConvolutionStatistics);
    write(R"({"value": 1024, "unit": "images/s"})", "convolution_main_loop");
    EXPECT_EQ(load_published_cases(scratch.path())[0].fusion, cost::ElementwiseFusion::ConvolutionMainLoop);
    // The convolutions' layout: channels-last unless the case names another.
    EXPECT_EQ(load_published_cases(scratch.path())[0].conv_layout, cost::ConvLayout::ChannelsLast);
    write(R"({"value": 1024, "unit": "images/s"})", "none", R"("conv_layout": "channels_first", )");
    EXPECT_EQ(load_published_cases(scratch.path())[0].conv_layout, cost::ConvLayout::ChannelsFirst);
    write(R"({"value": 1024, "unit": "images/s"})", "chains", R"("conv_layout": "xla", )");
    EXPECT_EQ(load_published_cases(scratch.path())[0].conv_layout, cost::ConvLayout::Xla);
    write(R"({"value": 1024, "unit": "images/s"})", "none", R"("conv_layout": "nchw", )");
    const std::string layout_message = error_of([&] { load_published_cases(scratch.path()); });
    EXPECT_NE(layout_message.find("cases.json: case \"r50\": conv_layout: expected \"channels_last\" (NHWC)"), std::string::npos)
        << layout_message;
    write(R"({"value": 1024, "unit": "images/s"})", "some");
    const std::string fusion_message = error_of([&] { load_published_cases(scratch.path()); });
    EXPECT_NE(fusion_message.find("cases.json: case \"r50\": fusion: expected \"none\""), std::string::npos) << fusion_message;
    EXPECT_NE(fusion_message.find("\"convolution_main_loop\" (NVIDIA's NormConvolution ResNets), got \"some\""), std::string::npos)
        << fusion_message;
    write(R"({"value": 80, "unit": "ms/step"})");
    EXPECT_DOUBLE_EQ(load_published_cases(scratch.path())[0].published_step_seconds, 0.08);
    write(R"({"value": 80, "unit": "fortnights"})");
    const std::string message = error_of([&] { load_published_cases(scratch.path()); });
    EXPECT_NE(message.find("cases.json: case \"r50\": measured.unit"), std::string::npos) << message;
}

// MLPerf's RetinaNet as NVIDIA's code builds it: ResNeXt50-32x4d, 800×800 with P6 and P7 rounded up,
// torchvision's pyramid and heads without batch norms — nothing rounded, nothing approximated.
TEST(PublishedCases, RetinaNetIsBuiltAsPublished) {
    const ScratchDir scratch;
    const auto write = [&](const std::string& model, const std::string& size) {
        std::ofstream out(scratch / "cases.json");
        out << R"({"cases": [{"name": "r", "model": {"kind": "retinanet", "backbone_depth": 50, "num_classes": 264, )" << model
            << R"(}, "input": {"channels": 3, "size": )" << size
            << R"(}, "global_batch": 256, "device": "a100_80gb", "num_cores": 8, "precision": "f16", "framework": "PyTorch",
                 "fusion": "into_convolutions", "measured": {"value": 262, "unit": "ms/step"}, "source": {"title": "t", "year": 2022}}]})";
    };
    write(R"("backbone": "resnext50_32x4d", "groups": 32, "width_per_group": 4, "coarse_levels": "round_up",
              "fpn_batch_norm": false, "head_batch_norm": false)",
          "[800, 800]");
    PublishedCase c = load_published_cases(scratch.path())[0];
    EXPECT_TRUE(c.approximations.empty()) << c.approximations.front();
    EXPECT_EQ(c.global_input, (Shape{256, 3, 800, 800}));
    const graph::Graph model = build_published_model(c, {32, 3, 800, 800});
    int grouped = 0, batch_norms_outside_backbone = 0;
    std::int64_t p7_rows = 0;
    for (const graph::Node& node : model.nodes()) {
        grouped += node.kind == graph::OpKind::Conv && node.conv.groups == 32;
        batch_norms_outside_backbone += node.kind == graph::OpKind::BatchNorm && !node.name.starts_with("stem.") && !node.name.starts_with("stage");
        if (node.name == "box.l7.out") p7_rows = node.output_shape[2];
    }
    EXPECT_EQ(grouped, 16);
    EXPECT_EQ(batch_norms_outside_backbone, 0);
    EXPECT_EQ(p7_rows, 7);
    // Without round-up the builder's exact levels need 896, and the case says it was rounded.
    write(R"("backbone": "resnext50_32x4d")", "[800, 800]");
    c = load_published_cases(scratch.path())[0];
    EXPECT_EQ(c.global_input, (Shape{256, 3, 896, 896}));
    EXPECT_EQ(c.approximations, (std::vector<std::string>{"backbone resnext50_32x4d read as ResNet", "input rounded up to a multiple of 128"}));
}

TEST(PublishedCases, UNetVariantsAreBuiltAsPublishedAndBadValuesNamed) {
    const ScratchDir scratch;
    const auto write = [&](const std::string& model, const std::string& size) {
        std::ofstream out(scratch / "cases.json");
        out << R"({"cases": [{"name": "u", "model": {"kind": "unet", "dims": 2, "depth": 5, "base_width": 64, "num_classes": 2, )"
            << model << R"(}, "input": {"channels": 1, "size": )" << size
            << R"(}, "global_batch": 8, "device": "v100", "num_cores": 1, "precision": "f32", "framework": "TF2 + XLA",
                 "fusion": "chains", "measured": {"value": 400, "unit": "ms/step"}, "source": {"title": "t", "year": 2021}}]})";
    };
    // Ronneberger's unpadded U-Net on its own 572² tile: built as such, nothing rounded or approximated.
    write(R"("batch_norm": false, "padding": "valid", "up_kernel": 3)", "[572, 572]");
    PublishedCase c = load_published_cases(scratch.path())[0];
    EXPECT_TRUE(c.valid_padding);
    EXPECT_EQ(c.up_kernel, 3);
    EXPECT_TRUE(c.approximations.empty());
    const graph::Graph unet = build_published_model(c, c.global_input);
    EXPECT_EQ(unet.node(unet.output_node()).output_shape, (Shape{8, 2, 388, 388}));
    // An extent the unpadded network cannot take is rounded up to one it can, and said.
    write(R"("padding": "valid")", "[512, 572]");
    c = load_published_cases(scratch.path())[0];
    EXPECT_EQ(c.global_input, (Shape{8, 1, 524, 572}));
    EXPECT_EQ(c.approximations, (std::vector<std::string>{"input rounded up to an extent the unpadded U-Net can use"}));
    write(R"("downsampling": "strided_conv", "head_kernel": 3)", "[512, 512]");
    c = load_published_cases(scratch.path())[0];
    EXPECT_TRUE(c.strided_downsampling);
    EXPECT_EQ(c.head_kernel, 3);
    write(R"("padding": "reflect")", "[512, 512]");
    const std::string padding = error_of([&] { load_published_cases(scratch.path()); });
    EXPECT_NE(padding.find("case \"u\": model.padding: expected \"same\" or \"valid\", got \"reflect\""), std::string::npos) << padding;
    write(R"("downsampling": "avg_pool")", "[512, 512]");
    const std::string downsampling = error_of([&] { load_published_cases(scratch.path()); });
    EXPECT_NE(downsampling.find("model.downsampling: expected \"max_pool\" or \"strided_conv\""), std::string::npos) << downsampling;
}

// Facts of the published setups the memory model must not contradict: NVIDIA trained ResNet-50 at 256
// images per 16 GB V100 in mixed precision (activations in 2 bytes), and MLPerf's TPU v3-8 ran 128
// images per core.
TEST(PublishedCases, PublishedBatchesFitTheirDevices) {
    int checked = 0;
    for (const PublishedCase& c : load_published_cases(TESSERA_SOURCE_DIR "/resources/validation")) {
        if (c.name != "resnet50_v100_1gpu_f16_bs256_dle_pytorch" && c.name != "resnet50_tpu_v3_8cores_bf16_bs1024_mlperf_v05") continue;
        const PublishedPrediction p = predict_published(c);
        EXPECT_TRUE(p.plan.valid && p.plan.fits) << c.name << ": " << p.plan.verdict;
        EXPECT_LT(p.plan.peak_memory, std::int64_t{16} << 30) << c.name;
        ++checked;
    }
    EXPECT_EQ(checked, 2) << "both cases are in resources/validation";
}

}  // namespace
}  // namespace tessera::experiment
