#!/usr/bin/python3
"""PyTorch side of the peer benchmark: the same U-Net training steps Tessera runs, timed per step.

Usage: pytorch_step.py --case unet2d|unet3d [--precision f32|bf16] [--steps N] [--warmup W] [--precision-map 1]
Prints one line per timed step: `step_ms=<ms>`. With --precision-map, then one line per convolution and
transposed convolution in forward order, `precision layer=<i> name=<module> channels=<in>to<out>
compute=<f32|bf16>`: the dtype of the layer's output in the first step, which under autocast is the
type the op ran in. Same block design as Tessera's U-Net: [3×3 conv (no
bias) → BN → ReLU] × 2, 2× max-pool, 2×2 stride-2 transposed conv (bias), skip concatenation, 1×1 head;
softmax cross-entropy; SGD momentum 0.9.
"""
import argparse
import time

import torch
import torch.nn as nn


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
}


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
    model = UNet(spec["rank"], spec["widths"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    computed = []  # (module name, in, out, dtype) per convolution, first forward only
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, (nn.Conv2d, nn.Conv3d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
            def record(module, _inputs, output, name=name):
                if len(computed) < len(hooks):
                    computed.append((name, module.in_channels, module.out_channels, output.dtype))
            hooks.append(module.register_forward_hook(record))
    images = torch.randn(*spec["input"])
    labels = (torch.rand(spec["input"][0], *spec["input"][2:]) > 0.5).long()
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(images)
            loss = loss_fn(logits.float(), labels)
        loss.backward()
        optimizer.step()
        elapsed_ms = (time.perf_counter() - start) * 1e3
        if step >= args.warmup:
            print(f"step_ms={elapsed_ms:.3f}", flush=True)
    if args.precision_map:
        for layer, (name, c_in, c_out, dtype) in enumerate(computed):
            compute = "bf16" if dtype == torch.bfloat16 else "f32"
            print(f"precision layer={layer} name={name} channels={c_in}to{c_out} compute={compute}")


if __name__ == "__main__":
    main()
