#!/usr/bin/python3
"""PyTorch side of the peer benchmark: the U-Net and RetinaNet training steps Tessera runs, timed per step.

Usage: pytorch_step.py --case unet2d|unet3d|retinanet50 [--precision f32|bf16] [--steps N] [--warmup W]
                       [--precision-map 1]
Prints `parameters=<count>` once, then one line per timed step: `step_ms=<ms>` (retinanet50: `loss=`
per step too). With --precision-map, then one line per convolution and transposed convolution in
forward order, `precision layer=<i> name=<module> channels=<in>to<out> compute=<f32|bf16>`: the dtype
of the layer's output in the first step, which under autocast is the type the op ran in (the hooks that
record it are only installed then). Same block design as Tessera's U-Net: [3×3 conv (no bias) → BN →
ReLU] × 2, 2× max-pool, 2×2 stride-2 transposed conv (bias), skip concatenation, 1×1 head; softmax
cross-entropy; SGD momentum 0.9.

retinanet50 (f32 only): torchvision's retinanet_resnet50_fpn(weights=None, weights_backbone=None,
num_classes=90, min_size=640, max_size=640) in training mode on 1 image of 640² with the boxes of
RETINANET_OBJECTS (tessera_step.cpp's retinanet_objects), SGD momentum 0.9, learning rate 1e-5. 90
classes on both sides (34,047,374 parameters each): the sigmoid heads need no background class,
torchvision's default 91 only keeps COCO's category ids 1..90 usable as indices; labels are the same
0-based ids on both sides.
What is the same and what differs from Tessera's step:
  - Backbone training. Without pretrained weights torchvision builds the ResNet with nn.BatchNorm2d
    (batch statistics, trainable scale and shift) and trains all 5 stages: FrozenBatchNorm2d and the
    default trainable_backbone_layers=3 apply only when weights or weights_backbone are given
    (_validate_trainable_layers falls back to 5, and warns if the argument is passed, so it is not).
    Tessera also trains every layer with real BN, so the models train the same parameters; the script
    checks that no FrozenBatchNorm2d is left and every parameter requires a gradient.
  - Input path. GeneralizedRCNNTransform normalizes each image and resizes it so its short side is
    min_size and its long side at most max_size (800 and 1333 by default): min_size=max_size=640
    keeps 640² (a bilinear resize by 1.0 still runs), and batching pads to a multiple of 32 (none at
    640). Tessera takes the tensor as is. Both cost a few ms of a step of seconds.
  - Initialisation. Tessera's heads start He-normal, torchvision's N(0, 0.01²), so Tessera's first loss
    is thousands of times larger (hence the small rate); the work of a step is the same.
  - Layers. Stem padding: symmetric (torchvision) against TF's fixed padding (Tessera), same shapes.
    BN ε 1e-5 and running-average momentum 0.1 (Tessera's 0.9 in the other convention) on both sides.
  - Targets and loss. Both have 9 anchors per cell on P3..P7 (76,725 at 640²) and a sigmoid focal
    loss (α 0.25, γ 2). torchvision matches per image with IoU 0.5 / 0.4 and low-quality matches and
    takes an L1 box loss per image in Python loops; Tessera matches as the TPU model (0.5 / 0.5, force
    match per box) and takes a Huber box loss (δ 0.1, weight 50) over the batch. torchvision also
    builds its anchors anew each step.
"""
import argparse
import time

import torch
import torch.nn as nn
import torchvision


class DoubleConv(nn.Sequential):
    def __init__(self, conv, bn, c_in, c_out):
        super().__init__(conv(c_in, c_out, 3, padding=1, bias=False), bn(c_out), nn.ReLU(inplace=True),
                         conv(c_out, c_out, 3, padding=1, bias=False), bn(c_out), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, rank, widths, in_channels=1, classes=2):
        super().__init__()
        conv = nn.Conv2d if rank == 2 else nn.Conv3d
        bn = nn.BatchNorm2d if rank == 2 else nn.BatchNorm3d
        up = nn.ConvTranspose2d if rank == 2 else nn.ConvTranspose3d
        self.pool = nn.MaxPool2d(2) if rank == 2 else nn.MaxPool3d(2)
        self.down = nn.ModuleList()
        c = in_channels
        for w in widths[:-1]:
            self.down.append(DoubleConv(conv, bn, c, w))
            c = w
        self.bottleneck = DoubleConv(conv, bn, c, widths[-1])
        self.ups = nn.ModuleList()
        self.up_blocks = nn.ModuleList()
        c = widths[-1]
        for w in reversed(widths[:-1]):
            self.ups.append(up(c, w, 2, stride=2))
            self.up_blocks.append(DoubleConv(conv, bn, 2 * w, w))
            c = w
        self.head = conv(c, classes, 1)

    def forward(self, x):
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for upconv, block in zip(self.ups, self.up_blocks):
            x = block(torch.cat([skips.pop(), upconv(x)], dim=1))
        return self.head(x)


CASES = {
    "unet2d": dict(rank=2, widths=[16, 32, 64, 128], input=(4, 1, 256, 256)),
    "unet3d": dict(rank=3, widths=[8, 16, 32], input=(1, 1, 64, 64, 64)),
    "retinanet50": dict(input=(1, 3, 640, 640), num_classes=90),  # batch: see tessera_step.cpp
}

# retinanet50's ground truth: per image, (x_min, y_min, x_max, y_max) in pixels of the 640² input and a
# 0-based class of 90. tessera_step.cpp's retinanet_objects is the same list.
RETINANET_OBJECTS = [
    [((40, 60, 200, 220), 0), ((300, 120, 520, 280), 17), ((150, 380, 330, 600), 61)],
    [((20, 20, 120, 140), 2), ((260, 240, 600, 600), 44), ((420, 40, 610, 180), 89)],
]


def retinanet_step_inputs(spec):
    """The model, its images (a list, as torchvision's detectors take them) and targets."""
    batch, channels, height, width = spec["input"]
    model = torchvision.models.detection.retinanet_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=spec["num_classes"], min_size=height, max_size=width)
    frozen = [name for name, m in model.named_modules() if isinstance(m, torchvision.ops.FrozenBatchNorm2d)]
    assert not frozen, f"expected every batch norm trainable, got FrozenBatchNorm2d in {frozen[:3]}"
    assert all(p.requires_grad for p in model.parameters()), "expected every parameter trainable"
    model.train()
    images = list(torch.randn(batch, channels, height, width))
    targets = [{"boxes": torch.tensor([box for box, _ in objects], dtype=torch.float32),
                "labels": torch.tensor([label for _, label in objects], dtype=torch.int64)}
               for objects in RETINANET_OBJECTS[:batch]]
    return model, images, targets


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=CASES, required=True)
    parser.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision-map", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    spec = CASES[args.case]
    detection = args.case == "retinanet50"
    if detection and args.precision != "f32":
        parser.error(f"retinanet50 runs in f32 only, got --precision {args.precision}")
    if detection:
        model, images, targets = retinanet_step_inputs(spec)
    else:
        model = UNet(spec["rank"], spec["widths"])
        images = torch.randn(*spec["input"])
        labels = (torch.rand(spec["input"][0], *spec["input"][2:]) > 0.5).long()
    print(f"parameters={sum(p.numel() for p in model.parameters())}", flush=True)
    # retinanet50: 1e-5, the rate that keeps Tessera's step finite (see tessera_step.cpp); same on both sides.
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-5 if detection else 0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    computed = []  # (module name, in, out, dtype) per convolution, first forward only
    hooks = []
    for name, module in model.named_modules() if args.precision_map else []:
        if isinstance(module, (nn.Conv2d, nn.Conv3d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
            def record(module, _inputs, output, name=name):
                if len(computed) < len(hooks):
                    computed.append((name, module.in_channels, module.out_channels, output.dtype))
            hooks.append(module.register_forward_hook(record))
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            if detection:  # classification (focal) + bbox_regression
                loss = sum(model(images, targets).values())
            else:
                logits = model(images)
                loss = loss_fn(logits.float(), labels)
        loss.backward()
        optimizer.step()
        elapsed_ms = (time.perf_counter() - start) * 1e3
        if detection:
            print(f"loss={loss.item():.6g}", flush=True)  # a smoke check that the step trains
        if step >= args.warmup:
            print(f"step_ms={elapsed_ms:.3f}", flush=True)
    if args.precision_map:
        for layer, (name, c_in, c_out, dtype) in enumerate(computed):
            compute = "bf16" if dtype == torch.bfloat16 else "f32"
            print(f"precision layer={layer} name={name} channels={c_in}to{c_out} compute={compute}")


if __name__ == "__main__":
    main()
