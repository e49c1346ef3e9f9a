#!/usr/bin/env python3
"""Reference values from torchvision for tests/engine/detection/test_torchvision_reference.cpp.

Run once (Debian's python3-torch 1.13 / python3-torchvision 0.14) and commit its output:
    /usr/bin/python3 tests/engine/detection/reference/make_torchvision_reference.py
It writes torchvision_reference.json beside itself. Never a build or test-time dependency.

Inputs are drawn in float32 (what the engine stores) and written exactly; references are computed in
float64 from those float32 values, so the C++ tolerances measure Tessera's error alone.
"""
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torchvision.models.detection._utils import BoxCoder, Matcher
from torchvision.ops import box_iou, sigmoid_focal_loss

rng = np.random.default_rng(20240611)


def f32(array):
    return np.asarray(array, dtype=np.float32)


def listed(tensor_or_array):
    """Nested lists of Python floats; NaN becomes None (JSON has no NaN)."""
    array = tensor_or_array.detach().cpu().numpy() if torch.is_tensor(tensor_or_array) else np.asarray(tensor_or_array)
    def convert(x):
        if isinstance(x, list):
            return [convert(v) for v in x]
        return None if isinstance(x, float) and math.isnan(x) else x
    return convert(array.astype(np.float64).tolist() if array.dtype.kind == "f" else array.tolist())


def random_boxes(count, min_size, max_size, extent=1000.0):
    centres = rng.uniform(0, extent, size=(count, 2))
    sizes = np.exp(rng.uniform(math.log(min_size), math.log(max_size), size=(count, 2)))
    return f32(np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=1))


def box_coder_case():
    # 50 anchor / ground-truth pairs: anchors from 0.5 px to 2000 px; half the targets near their anchor
    # (as matched pairs are), half independent (very different sizes and far centres).
    anchors = random_boxes(50, 0.5, 2000.0)
    near = anchors[:25] + f32(rng.normal(0, 0.2, size=(25, 4))) * (anchors[:25, 2:3] - anchors[:25, 0:1])
    near[:, 2:] = np.maximum(near[:, 2:], near[:, :2] + 0.25)  # keep positive sizes
    targets = f32(np.concatenate([near, random_boxes(25, 0.5, 2000.0)]))
    coder = BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))
    a64, t64 = torch.from_numpy(anchors).double(), torch.from_numpy(targets).double()
    codes = coder.encode_single(t64, a64)
    # Decode: random codes, some with dw or dh beyond the clamp (5 · log(1000/16) ≈ 20.68) both ways.
    decode_codes = f32(rng.normal(0, 2.0, size=(50, 4)))
    decode_codes[:6, 2] = [25.0, 40.0, -30.0, 21.0, 100.0, -100.0]
    decode_codes[6:10, 3] = [30.0, 22.0, -25.0, 50.0]
    decoded = coder.decode_single(torch.from_numpy(decode_codes).double(), a64)
    return {"weights": [10.0, 10.0, 5.0, 5.0], "bbox_xform_clip": coder.bbox_xform_clip,
            "anchors": listed(anchors), "targets": listed(targets), "codes": listed(codes),
            "decode_codes": listed(decode_codes), "decoded": listed(decoded)}


def box_iou_case():
    first = random_boxes(10, 5.0, 200.0, extent=300.0)
    second = random_boxes(14, 5.0, 200.0, extent=300.0)
    # Empty boxes: an all-zero padding row in each, zero width, zero height, inverted, inverted in both axes.
    first[7] = [0, 0, 0, 0]
    first[8] = [50, 50, 50, 120]
    first[9] = [120, 80, 60, 140]
    second[11] = [0, 0, 0, 0]
    second[12] = [30, 40, 90, 40]
    second[13] = [200, 200, 150, 150]
    iou = box_iou(torch.from_numpy(first), torch.from_numpy(second))  # float32, as torchvision runs it
    return {"boxes1": listed(first), "boxes2": listed(second), "iou": listed(iou),
            "note": "null = NaN: torchvision divides 0 by a zero union when both boxes have zero area"}


def matcher_case():
    iou = f32(rng.uniform(0.0, 0.9, size=(8, 60)))
    matcher = Matcher(0.5, 0.4, allow_low_quality_matches=False)
    plain = matcher(torch.from_numpy(iou))

    # A matrix where low-quality matching and force_match_for_each_row agree: every row's maximum is unique,
    # below the thresholds, in its own column, and that column's maximum.
    agree = f32(rng.uniform(0.0, 0.25, size=(4, 20)))
    for row, column in enumerate([3, 11, 7, 16]):
        agree[row, column] = 0.35 + 0.03 * row
    low_quality = Matcher(0.5, 0.4, allow_low_quality_matches=True)
    agree_matches = low_quality(torch.from_numpy(agree.copy()))

    # A matrix where they differ (worked out in the C++ test).
    differ = f32([[0.30, 0.30, 0.10, 0.00], [0.35, 0.05, 0.20, 0.00]])
    differ_matches = low_quality(torch.from_numpy(differ.copy()))
    return {"high": 0.5, "low": 0.4, "iou": listed(iou), "matches": listed(plain),
            "agree_iou": listed(agree), "agree_low_quality_matches": listed(agree_matches),
            "differ_iou": listed(differ), "differ_low_quality_matches": listed(differ_matches)}


def focal_case():
    logits = f32(rng.uniform(-8.0, 8.0, size=(40, 5)))
    targets = f32(rng.integers(0, 2, size=(40, 5)))
    x = torch.from_numpy(logits).double().requires_grad_(True)
    value = sigmoid_focal_loss(x, torch.from_numpy(targets).double(), alpha=0.25, gamma=2.0, reduction="sum")
    value.backward()
    return {"alpha": 0.25, "gamma": 2.0, "logits": listed(logits), "targets": listed(targets),
            "value": value.item(), "gradient": listed(x.grad)}


def smooth_l1_case():
    prediction = f32(rng.normal(0, 0.5, size=(50, 4)))
    target = f32(prediction + rng.normal(0, 0.15, size=(50, 4)).astype(np.float32))  # residuals on both sides of 0.1
    result = {"prediction": listed(prediction), "target": listed(target)}
    for beta in (0.1, 1.0):
        p = torch.from_numpy(prediction).double().requires_grad_(True)
        value = F.smooth_l1_loss(p, torch.from_numpy(target).double(), beta=beta, reduction="sum")
        value.backward()
        result[f"beta_{beta}"] = {"beta": beta, "value": value.item(), "gradient": listed(p.grad)}
    # L1 on residuals all beyond 0.1: Tessera's linear part is δ(|x| − δ/2), i.e. δ·l1 − n·δ²/2.
    far_target = f32(prediction + np.sign(rng.normal(size=(50, 4))) * rng.uniform(0.15, 1.0, size=(50, 4)))
    p = torch.from_numpy(prediction).double().requires_grad_(True)
    value = F.l1_loss(p, torch.from_numpy(far_target).double(), reduction="sum")
    value.backward()
    result["l1"] = {"target": listed(far_target), "value": value.item(), "gradient": listed(p.grad)}
    return result


def main():
    reference = {
        "generator": "tests/engine/detection/reference/make_torchvision_reference.py",
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "box_coder": box_coder_case(), "box_iou": box_iou_case(), "matcher": matcher_case(),
        "sigmoid_focal_loss": focal_case(), "smooth_l1_loss": smooth_l1_case(),
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchvision_reference.json")
    with open(path, "w") as out:
        json.dump(reference, out, allow_nan=False)
        out.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
