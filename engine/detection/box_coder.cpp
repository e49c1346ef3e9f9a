#include "detection/box_coder.hpp"

#include <algorithm>

namespace tessera::detection {

namespace {

struct CentreSize {
    double x = 0, y = 0, width = 0, height = 0;  // pixels
};

CentreSize centre_size_of(const Box& box) {
    const double width = static_cast<double>(box.x_max) - static_cast<double>(box.x_min);
    const double height = static_cast<double>(box.y_max) - static_cast<double>(box.y_min);
    return {static_cast<double>(box.x_min) + 0.5 * width, static_cast<double>(box.y_min) + 0.5 * height, width, height};
}

void check_weights(const BoxCoderWeights& weights) {
    TESSERA_CHECK(weights.x > 0 && weights.y > 0 && weights.width > 0 && weights.height > 0,
                  "box coder: expected positive weights, got (" << weights.x << ", " << weights.y << ", "
                                                                << weights.width << ", " << weights.height << ")");
}

void check_box_tensor(const Tensor& boxes, const char* what, std::int64_t count) {
    TESSERA_CHECK(boxes.is_defined() && boxes.rank() == 2 && boxes.dim(1) == 4 && boxes.dtype() == DType::F32,
                  "box coder: expected " << what << " as [M, 4] f32, got " << shape_to_string(boxes.shape()));
    TESSERA_CHECK(count < 0 || boxes.dim(0) == count,
                  "box coder: expected " << count << " " << what << " rows, got " << boxes.dim(0));
}

Box box_from(const float* row) {
    return {row[0], row[1], row[2], row[3]};
}

}  // namespace

BoxCode encode_box(const Box& target, const Box& anchor, const BoxCoderWeights& weights) {
    const CentreSize g = centre_size_of(target);
    const CentreSize a = centre_size_of(anchor);
    TESSERA_CHECK(g.width > 0 && g.height > 0 && a.width > 0 && a.height > 0,
                  "encode_box: expected a target and an anchor of positive size, got target "
                      << g.width << "×" << g.height << " and anchor " << a.width << "×" << a.height
                      << " (drop empty ground-truth boxes before labelling)");
    return {static_cast<float>(weights.x * (g.x - a.x) / a.width),
            static_cast<float>(weights.y * (g.y - a.y) / a.height),
            static_cast<float>(weights.width * std::log(g.width / a.width)),
            static_cast<float>(weights.height * std::log(g.height / a.height))};
}

Box decode_box(const BoxCode& code, const Box& anchor, const BoxCoderWeights& weights) {
    const CentreSize a = centre_size_of(anchor);
    const double dw = std::min(static_cast<double>(code.dw) / weights.width, k_box_code_clamp);
    const double dh = std::min(static_cast<double>(code.dh) / weights.height, k_box_code_clamp);
    const double centre_x = static_cast<double>(code.dx) / weights.x * a.width + a.x;
    const double centre_y = static_cast<double>(code.dy) / weights.y * a.height + a.y;
    const double width = std::exp(dw) * a.width;
    const double height = std::exp(dh) * a.height;
    return {static_cast<float>(centre_x - 0.5 * width), static_cast<float>(centre_y - 0.5 * height),
            static_cast<float>(centre_x + 0.5 * width), static_cast<float>(centre_y + 0.5 * height)};
}

Tensor encode_boxes(const Tensor& targets, const Tensor& anchors, const BoxCoderWeights& weights) {
    check_weights(weights);
    check_box_tensor(targets, "targets", -1);
    check_box_tensor(anchors, "anchors", targets.dim(0));
    const Tensor target_rows = targets.contiguous();
    const Tensor anchor_rows = anchors.contiguous();
    Tensor codes = Tensor::empty({targets.dim(0), 4}, DType::F32);
    for (std::int64_t i = 0; i < targets.dim(0); ++i) {
        const BoxCode code = encode_box(box_from(target_rows.data<float>() + 4 * i),
                                        box_from(anchor_rows.data<float>() + 4 * i), weights);
        float* out = codes.data<float>() + 4 * i;
        out[0] = code.dx;
        out[1] = code.dy;
        out[2] = code.dw;
        out[3] = code.dh;
    }
    return codes;
}

Tensor decode_boxes(const Tensor& codes, const Tensor& anchors, const BoxCoderWeights& weights) {
    check_weights(weights);
    check_box_tensor(codes, "codes", -1);
    check_box_tensor(anchors, "anchors", codes.dim(0));
    const Tensor code_rows = codes.contiguous();
    const Tensor anchor_rows = anchors.contiguous();
    Tensor boxes = Tensor::empty({codes.dim(0), 4}, DType::F32);
    for (std::int64_t i = 0; i < codes.dim(0); ++i) {
        const float* c = code_rows.data<float>() + 4 * i;
        const Box box = decode_box({c[0], c[1], c[2], c[3]}, box_from(anchor_rows.data<float>() + 4 * i), weights);
        float* out = boxes.data<float>() + 4 * i;
        out[0] = box.x_min;
        out[1] = box.y_min;
        out[2] = box.x_max;
        out[3] = box.y_max;
    }
    return boxes;
}

}  // namespace tessera::detection
