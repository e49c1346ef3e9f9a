#!/usr/bin/env python3
"""Reference detections from torchvision's RetinaNet.postprocess_detections for test_postprocess.cpp.

Run once (Debian's python3-torch 1.13 / python3-torchvision 0.14, CPU) and commit its output:
    /usr/bin/python3 tests/engine/detection/reference/make_postprocess_reference.py
It writes postprocess_reference.json beside itself. Never a build or test-time dependency.

Setting: a 256 × 192 (H × W) input, levels 3..7, A = 9 anchors per cell, K = 5 classes, N = 2 images;
three option sets (OPTION_SETS), the last with torchvision's own RetinaNet box coder weights (1, 1, 1, 1).
Anchors are recomputed here from the formula in engine/detection/anchors.hpp (a sample is written so the
test can compare them with make_anchors). The heads' outputs are written in Tessera's layout, per level
[N, A·K, H_l, W_l] logits and [N, A·4, H_l, W_l] codes, and permuted here the way torchvision's heads do
(view(N, A, K, H, W).permute(0, 3, 4, 1, 2).reshape(N, HWA, K)) before calling postprocess_detections.

Logits: a background formula for every element (-4 - (e % 89) / 16, e the row-major index in the level's
[N, A·K, H, W] tensor: sigmoid ≤ 0.018, below every threshold used), overwritten at ~120 chosen anchors per
image (clustered around five objects' centres so NMS has work) by the object's class and sometimes 1-2
others, with distinct logits on a 1e-3 grid in [-2.9, 6], plus some just below the 0.05 threshold.
Codes: finite for the chosen anchors (a few with dw = 25, beyond the decode clamp), NaN everywhere else,
which both torchvision and Tessera must never read. Every value is a short decimal, read by both sides
as decimal → double → f32.

Guards so that the comparison is exact: the candidates' scores are distinct by > 1e-6 and more than 1e-5
from the score threshold, and no two same-class candidates have an IoU within 1e-4 of the NMS threshold
(float32-vs-double decoding moves corners by ~1e-5 px and torchvision's coordinate-offset batched_nms
rounds offset corners near 1000 px by ~6e-5 px; both must decide like Tessera). The seed is the first from
FIRST_SEED whose draw passes the guards.
"""
import json
import math
import os

import numpy as np
import torch
import torchvision
from torchvision.models.detection._utils import BoxCoder
from torchvision.models.detection.retinanet import RetinaNet

IMAGE_HEIGHT, IMAGE_WIDTH = 256, 192
LEVELS = [3, 4, 5, 6, 7]
NUM_SCALES, RATIOS, ANCHOR_SCALE = 3, [1.0, 2.0, 0.5], 4.0
A = NUM_SCALES * len(RATIOS)
K = 5
N = 2
CHOSEN_ANCHORS_PER_LEVEL = {3: 48, 4: 30, 5: 20, 6: 12, 7: 8}
# Tessera's defaults; truncation by top-k and max detections; torchvision's RetinaNet defaults, whose box
# coder has weights (1, 1, 1, 1) where Tessera's (like torchvision's Faster R-CNN) has (10, 10, 5, 5).
OPTION_SETS = [
    {"score_threshold": 0.05, "top_k_per_level": 1000, "nms_iou_threshold": 0.5, "max_detections": 100,
     "box_coder_weights": [10.0, 10.0, 5.0, 5.0]},
    {"score_threshold": 0.3, "top_k_per_level": 20, "nms_iou_threshold": 0.4, "max_detections": 15,
     "box_coder_weights": [10.0, 10.0, 5.0, 5.0]},
    {"score_threshold": 0.05, "top_k_per_level": 1000, "nms_iou_threshold": 0.5, "max_detections": 300,
     "box_coder_weights": [1.0, 1.0, 1.0, 1.0]},
]

FIRST_SEED = 20240612
rng = None  # set per attempted seed in main()


def level_shape(level):
    stride = 2 ** level
    return -(-IMAGE_HEIGHT // stride), -(-IMAGE_WIDTH // stride)


def level_anchors(level):
    """[H·W·A, 4] float32 in (row, column, octave, ratio) order, from the formula in anchors.hpp."""
    stride = 2 ** level
    height, width = level_shape(level)
    boxes = []
    for row in range(height):
        for column in range(width):
            centre_x, centre_y = (column + 0.5) * stride, (row + 0.5) * stride
            for octave in range(NUM_SCALES):
                size = ANCHOR_SCALE * stride * 2.0 ** (octave / NUM_SCALES)
                for ratio in RATIOS:
                    half_width, half_height = size * math.sqrt(ratio) / 2, size / math.sqrt(ratio) / 2
                    boxes.append([centre_x - half_width, centre_y - half_height,
                                  centre_x + half_width, centre_y + half_height])
    return np.asarray(boxes, dtype=np.float64).astype(np.float32)


def background_logits(level):
    height, width = level_shape(level)
    element = np.arange(N * A * K * height * width)
    return (-4.0 - (element % 89) / 16.0).astype(np.float32).reshape(N, A * K, height, width)


def choose_anchors():
    """Distinct (level, anchor, row, column, object class) near a few objects' centres."""
    centres = rng.uniform([0, 0], [IMAGE_WIDTH, IMAGE_HEIGHT], size=(5, 2))
    object_classes = rng.integers(K, size=len(centres))
    chosen = []
    for level, count in CHOSEN_ANCHORS_PER_LEVEL.items():
        stride = 2 ** level
        height, width = level_shape(level)
        picked = {}
        while len(picked) < count:
            which = int(rng.integers(len(centres)))
            centre_x, centre_y = centres[which]
            row = int(np.clip(centre_y // stride + rng.choice([-1, 0, 0, 1]), 0, height - 1))
            column = int(np.clip(centre_x // stride + rng.choice([-1, 0, 0, 1]), 0, width - 1))
            picked.setdefault((int(rng.integers(A)), row, column), int(object_classes[which]))
        chosen += [(level, anchor, row, column, picked[(anchor, row, column)])
                   for anchor, row, column in sorted(picked)]
    return chosen


def make_inputs():
    classes = {level: background_logits(level) for level in LEVELS}
    codes = {level: np.full((N, A * 4, *level_shape(level)), np.nan, dtype=np.float32) for level in LEVELS}
    chosen_per_image = [choose_anchors() for image in range(N)]
    num_positive = sum(len(chosen) for chosen in chosen_per_image) * 3  # enough for ≤ 3 classes each
    positive_pool = list(rng.choice(np.arange(-2900, 6001), size=num_positive, replace=False) / 1000.0)
    logit_records, code_records = [], []
    for image, chosen in enumerate(chosen_per_image):
        for level, anchor, row, column, object_class in chosen:
            # The object's class, and with probability 0.4 one or two others.
            others = [k for k in rng.permutation(K) if k != object_class][:int(rng.choice([0, 0, 0, 1, 2]))]
            for k in [object_class, *others]:
                value = positive_pool.pop() if rng.uniform() < 0.85 else round(float(rng.uniform(-3.6, -3.0)), 3)
                classes[level][image, anchor * K + int(k), row, column] = np.float32(value)
                logit_records.append([image, level, anchor * K + int(k), row, column, value])
            code = [round(float(v), 3) for v in rng.normal(0.0, 0.6, size=4)]
            if rng.uniform() < 0.05:
                code[2] = 25.0  # dw / 5 = 5 > log(1000 / 16): clamped
            codes[level][image, anchor * 4:anchor * 4 + 4, row, column] = np.asarray(code, dtype=np.float32)
            code_records.append([image, level, anchor, row, column, *code])
    return classes, codes, logit_records, code_records


def torchvision_layout(per_level, channels_per_anchor):
    """Per level [N, A·C, H, W] → [N, H·W·A, C], as RetinaNetClassificationHead / RegressionHead do."""
    out = []
    for level in LEVELS:
        t = torch.from_numpy(per_level[level])
        n, _, height, width = t.shape
        t = t.view(n, A, channels_per_anchor, height, width).permute(0, 3, 4, 1, 2)
        out.append(t.reshape(n, -1, channels_per_anchor))
    return out


class TinyBackbone(torch.nn.Module):  # RetinaNet's constructor wants a backbone; postprocess never runs it
    out_channels = 8


def run(options, head_outputs, anchors):
    model = RetinaNet(TinyBackbone(), num_classes=K, score_thresh=options["score_threshold"],
                      nms_thresh=options["nms_iou_threshold"], detections_per_img=options["max_detections"],
                      topk_candidates=options["top_k_per_level"])
    model.box_coder = BoxCoder(weights=tuple(options["box_coder_weights"]))  # the clamp stays log(1000 / 16)
    model.eval()
    with torch.no_grad():
        return model.postprocess_detections(head_outputs, [anchors] * N, [(IMAGE_HEIGHT, IMAGE_WIDTH)] * N)


def iou_matrix(boxes):
    boxes = boxes.astype(np.float64)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    lt = np.maximum(boxes[:, None, :2], boxes[None, :, :2])
    rb = np.minimum(boxes[:, None, 2:], boxes[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    union = area[:, None] + area[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def check_margins(options, head_outputs, anchors):
    """All candidates (NMS at 1.0 suppresses nothing): scores and same-class IoUs away from ties."""
    everything = dict(options, nms_iou_threshold=1.0, max_detections=10 ** 6)
    for image, result in enumerate(run(everything, head_outputs, anchors)):
        scores = np.sort(result["scores"].numpy().astype(np.float64))
        assert np.all(np.diff(scores) > 1e-6), ("scores too close", image)
        assert np.all(np.abs(scores - options["score_threshold"]) > 1e-5), ("score at threshold", image)
        assert not torch.isnan(result["boxes"]).any()
        labels = result["labels"].numpy()
        ious = iou_matrix(result["boxes"].numpy())
        same_class = labels[:, None] == labels[None, :]
        close = same_class & (np.abs(ious - options["nms_iou_threshold"]) < 1e-4)
        if close.any():
            print(f"  image {image}: same-class IoU within 1e-4 of the threshold, candidates {np.argwhere(close)[0]}")
            return False
        print(f"  image {image}: {len(scores)} candidates")
    return True


def draw(per_level_anchors):
    """Inputs from the first seed whose candidates pass the guards of every option set."""
    global rng
    seed = FIRST_SEED
    while True:
        print("seed", seed)
        rng = np.random.default_rng(seed)
        classes, codes, logit_records, code_records = make_inputs()
        head_outputs = {"cls_logits": torchvision_layout(classes, K), "bbox_regression": torchvision_layout(codes, 4)}
        if all(check_margins(options, head_outputs, per_level_anchors) for options in OPTION_SETS):
            return seed, head_outputs, logit_records, code_records
        seed += 1


def main():
    per_level_anchors = [torch.from_numpy(level_anchors(level)) for level in LEVELS]
    seed, head_outputs, logit_records, code_records = draw(per_level_anchors)

    all_anchors = torch.cat(per_level_anchors).numpy()
    sample = sorted(set(rng.choice(len(all_anchors), size=40, replace=False).tolist())
                    | {0, len(all_anchors) - 1, 32 * 24 * A, 32 * 24 * A - 1})
    cases = []
    for options in OPTION_SETS:
        print(options)
        results = run(options, head_outputs, per_level_anchors)
        images = []
        for result in results:
            assert not torch.isnan(result["boxes"]).any()
            images.append({
                "boxes": [[round(float(v), 5) for v in row] for row in result["boxes"].tolist()],
                "scores": [round(float(s), 9) for s in result["scores"].tolist()],
                "labels": [int(label) for label in result["labels"].tolist()],
            })
            print(f"  {len(images[-1]['labels'])} detections")
        cases.append({"options": options, "images": images})

    out = {
        "generator": "tests/engine/detection/reference/make_postprocess_reference.py",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "seed": seed,
        "image_height": IMAGE_HEIGHT, "image_width": IMAGE_WIDTH, "levels": LEVELS,
        "num_scales": NUM_SCALES, "aspect_ratios": RATIOS, "anchor_scale": ANCHOR_SCALE,
        "batch_size": N, "num_classes": K,
        "background_logit": "-4 - (e % 89) / 16, e = row-major index in the level's [N, A·K, H, W] tensor",
        "background_code": "NaN",
        "anchor_samples": [[i, *[float(v) for v in all_anchors[i]]] for i in sample],  # global index, corners
        "logits": logit_records,  # [image, level, channel a·K + k, row, column, logit]
        "codes": code_records,    # [image, level, anchor, row, column, dx, dy, dw, dh]
        "cases": cases,           # per option set, per image: boxes [x_min, y_min, x_max, y_max], scores, labels
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "postprocess_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
