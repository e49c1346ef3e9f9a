#!/usr/bin/env python3
"""Reference kept-index lists for Tessera's NMS, from torchvision.ops.nms and batched_nms.

Run once (torch 1.13 / torchvision 0.14, CPU) and commit the output next to this script:
    /usr/bin/python3 tests/engine/detection/reference/make_nms_reference.py

300 boxes in 4 classes, drawn around a few centres so that many overlap; corners on a quarter-pixel grid
(exact in f32, short in JSON). 12 boxes are exact copies of others (same class, lower score) and 6 are
copies in another class. Scores are distinct f32 values: torchvision sorts scores with an unstable sort,
so equal scores would make its order unspecified (the tie case is a hand-checked C++ test instead).

batched_nms on CPU with fewer than 4000 coordinates offsets each class's boxes by class * (max coordinate
+ 1) (the "coordinate trick"), which can round IoUs differently; the script also runs the per-class
("vanilla") form and asserts both give the same list, so the fixture does not depend on that choice.
"""
import json
import os

import numpy as np
import torch
import torchvision
from torchvision.ops import batched_nms, box_iou, nms
from torchvision.ops.boxes import _batched_nms_vanilla

NUM_BOXES = 300
NUM_CLASSES = 4
THRESHOLDS = [0.3, 0.5, 0.7]


def make_boxes(rng):
    centres = rng.uniform(40, 360, size=(12, 2))
    which = rng.integers(0, len(centres), size=NUM_BOXES)
    centre = centres[which] + rng.normal(0, 10, size=(NUM_BOXES, 2))
    size = rng.uniform(10, 90, size=(NUM_BOXES, 2))
    corners = np.concatenate([centre - size / 2, centre + size / 2], axis=1)
    corners = np.round(corners * 4) / 4  # quarter pixels
    classes = rng.integers(0, NUM_CLASSES, size=NUM_BOXES)
    # Exact duplicates: rows 0..11 copied to rows 288..299 (same class), rows 12..17 to 282..287 (next class).
    corners[288:300] = corners[0:12]
    classes[288:300] = classes[0:12]
    corners[282:288] = corners[12:18]
    classes[282:288] = (classes[12:18] + 1) % NUM_CLASSES
    return corners.astype(np.float32), classes.astype(np.int64)


def make_scores(rng):
    while True:
        scores = rng.uniform(0.01, 1.0, size=NUM_BOXES).astype(np.float32)
        if len(np.unique(scores)) == NUM_BOXES:
            return scores


def main():
    rng = np.random.default_rng(20240611)
    corners, classes = make_boxes(rng)
    scores = make_scores(rng)
    # Copies score below their originals so the copy is the one suppressed.
    scores[288:300] = np.minimum(scores[288:300], scores[0:12] * np.float32(0.5))
    assert len(np.unique(scores)) == NUM_BOXES

    boxes_t = torch.from_numpy(corners)
    scores_t = torch.from_numpy(scores)
    classes_t = torch.from_numpy(classes)
    ious = box_iou(boxes_t, boxes_t)
    cases = []
    for threshold in THRESHOLDS:
        kept = nms(boxes_t, scores_t, threshold)
        kept_batched = batched_nms(boxes_t, scores_t, classes_t, threshold)
        kept_vanilla = _batched_nms_vanilla(boxes_t, scores_t, classes_t, threshold)
        assert torch.equal(kept_batched, kept_vanilla), threshold
        off_diagonal = ious[~torch.eye(NUM_BOXES, dtype=torch.bool)]
        at_threshold = int((off_diagonal == threshold).sum()) // 2
        cases.append({"iou_threshold": threshold,
                      "pairs_with_iou_equal_to_threshold": at_threshold,
                      "nms": kept.tolist(),
                      "batched_nms": kept_batched.tolist()})
    out = {
        "generator": "tests/engine/detection/reference/make_nms_reference.py",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "num_classes": NUM_CLASSES,
        "boxes": [[float(v) for v in row] for row in corners],  # [N, 4] x_min, y_min, x_max, y_max, pixels
        "scores": [float(s) for s in scores],                   # [N], distinct f32 values
        "classes": [int(c) for c in classes],                   # [N]
        "cases": cases,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nms_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    for case in cases:
        print(case["iou_threshold"], len(case["nms"]), len(case["batched_nms"]),
              "pairs at threshold:", case["pairs_with_iou_equal_to_threshold"])


if __name__ == "__main__":
    main()
