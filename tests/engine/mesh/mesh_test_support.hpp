// What the core-mesh tests share: a batch with structure at every scale and labels that follow it, and a
// bitwise comparison of two meshes' weights.
#pragma once

#include "mesh/core_mesh.hpp"
#include "core/random.hpp"
#include "graph/graph.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace tessera::test {

// Images [N, C, (D,) H, W] of normal noise and labels bucketed from them ([N, (D,) H, W], or [N] for a
// classifier, from each image's first pixel), so the loss is not flat and halos matter.
inline std::pair<Tensor, Tensor> make_batch(const Shape& image_shape, std::int64_t num_classes, bool classification,
                                            std::uint64_t seed) {
    SeededRandom random(seed);
    Tensor images = Tensor::empty(image_shape, DType::F32);
    float* pixels = images.data<float>();
    for (std::int64_t i = 0; i < images.num_elements(); ++i) pixels[i] = static_cast<float>(random.normal());
    Shape label_shape{image_shape[0]};
    if (!classification) label_shape.insert(label_shape.end(), image_shape.begin() + 2, image_shape.end());
    Tensor labels = Tensor::empty(label_shape, DType::I32);
    std::int32_t* classes = labels.data<std::int32_t>();
    const std::int64_t per_image = labels.num_elements() / image_shape[0];
    const std::int64_t pixels_per_image = images.num_elements() / image_shape[0];
    for (std::int64_t i = 0; i < labels.num_elements(); ++i) {
        const float v = classification ? pixels[i * pixels_per_image] : pixels[(i / per_image) * pixels_per_image + i % per_image];
        const auto bucket = static_cast<std::int64_t>(std::floor((v + 2.0f) / 4.0f * static_cast<float>(num_classes)));
        classes[i] = static_cast<std::int32_t>(std::clamp<std::int64_t>(bucket, 0, num_classes - 1));
    }
    return {images, labels};
}

// Every parameter of every core of `a` equals `b`'s bit for bit.
inline void expect_identical_weights(mesh::CoreMesh& a, mesh::CoreMesh& b, const graph::Graph& model) {
    ASSERT_EQ(a.num_cores(), b.num_cores());
    for (std::int64_t core = 0; core < a.num_cores(); ++core) {
        for (std::size_t p = 0; p < model.parameters().size(); ++p) {
            const Tensor& x = a.executor(core).parameters()[p].value;
            const Tensor& y = b.executor(core).parameters()[p].value;
            EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), static_cast<std::size_t>(x.num_elements()) * 4), 0)
                << model.parameters()[p].name << " on core " << core;
        }
    }
}

}  // namespace tessera::test
