#!/usr/bin/env python3
"""A run's report as a user opens it: tessera-cli trains a small partitioned run and writes its report,
and Debian's Chromium renders the file headless. The HTML must be self-contained (no script, nothing
fetched), every section must reach the browser's DOM, and the screenshot must show what the report
draws: the cores' colours in the memory bars and the timeline, the training curve, and the held-out
images (many grey levels). The PNG is decoded here with zlib alone, independently of Tessera.

Usage: report_in_chromium.py <tessera-cli> <work folder>
Exit 77 (skipped) when Chromium is absent, except under CI=true where `make deps` installs it."""

import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIPPED = 77

EXPERIMENT = """{
  "version": 1,
  "name": "report check: 2D U-Net, 2 x 2 cores",
  "model": {"kind": "unet", "depth": 3, "base_width": 8, "num_classes": 2},
  "input": {"channels": 1, "size": [96, 96]},
  "global_batch": 2,
  "num_cores_per_replica": 4,
  "input_partition_dims": [[1, 2, 2, 1], null],
  "optimizer": {"kind": "adam"},
  "data": {"source": "synthetic_em", "image_size": [128, 128], "num_train_images": 4, "num_eval_images": 2},
  "schedule": {"kind": "cosine", "learning_rate": 0.01, "warmup_steps": 2},
  "steps": 8,
  "steps_per_eval": 4,
  "seed": 3
}
"""

# Colours the report paints as solid fills (svg_chart.cpp, run_report.cpp), as RGB.
CORE_0 = (0x4E, 0x79, 0xA7)      # core 0's bar; also the timeline's forward compute
CORE_1 = (0xF2, 0x8E, 0x2B)      # core 1's bar; also the timeline's halo
BACKWARD = (0x59, 0xA1, 0x4F)    # the timeline's backward compute (core 2's bar too)
ALL_REDUCE = (0xE1, 0x57, 0x59)  # the timeline's all-reduce (core 3's bar too)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(command, timeout=600):
    print("$ " + " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    print(done.stdout + done.stderr, flush=True)
    return done


def decode_png(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG, non-interlaced."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(path + " is not a PNG")
    position, idat, header = 8, b"", None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        chunk = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        position += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        fail("unexpected PNG format: depth %d, colour type %d, interlace %d" % (depth, colour, interlace))
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            up_left = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                predictor = left if pa <= pb and pa <= pc else (up if pb <= pc else up_left)
                line[i] = (line[i] + predictor) & 255
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        previous = line
    return width, height, rows


def main():
    cli, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    experiment = os.path.join(work, "report_check.json")
    with open(experiment, "w") as out:
        out.write(EXPERIMENT)
    model_dir = os.path.join(work, "run")
    if run([cli, "train", experiment, "--model-dir", model_dir]).returncode != 0:
        fail("training the small run failed")
    report = os.path.join(work, "report.html")
    written = run([cli, "report", model_dir, "--out", report])
    if written.returncode != 0 or "wrote " + report not in written.stdout:
        fail("tessera-cli report did not write the report")
    if "left out" in written.stdout:
        fail("the report of a finished, evaluated run left something out")
    # A folder that is no run: exit 2 and a message naming the fix.
    refused = run([cli, "report", work])
    if refused.returncode != 2 or "Train first" not in refused.stderr:
        fail("reporting on a folder without a run should exit 2 and say to train first")

    html = open(report, encoding="utf-8").read()
    if "<script" in html:
        fail("the report carries a script")
    outside = re.sub(r'xmlns="http://www\.w3\.org/2000/svg"', "", html)
    if "http:" in outside or "https:" in outside:
        fail("the report refers to the network")
    for target in re.findall(r'(?:src|href)="([^"#][^"]*)"', html):
        if not target.startswith("data:image/png;base64,"):
            fail("the report refers to a file: " + target[:80])

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        if os.environ.get("CI") == "true":
            fail("Chromium is missing: `make deps` installs Debian's chromium package, which this check needs in CI")
        print("SKIPPED: Chromium is not installed (apt-get install chromium, or `make deps`): the report was written "
              "and checked as HTML, but not rendered")
        sys.exit(SKIPPED)
    profile = tempfile.mkdtemp(prefix="tessera-chromium-")
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
              "--hide-scrollbars", "--user-data-dir=" + profile, "--virtual-time-budget=10000"]
    url = "file://" + os.path.abspath(report)
    try:
        dom = run(common + ["--dump-dom", url], timeout=180)
        for section in ["overview", "partition", "curves", "step-time", "memory", "timeline", "evaluation"]:
            if 'id="%s"' % section not in dom.stdout:
                fail("the browser's DOM has no section " + section)
        screenshot = os.path.join(work, "report.png")
        shot = run(common + ["--window-size=1100,5200", "--screenshot=" + screenshot, url], timeout=180)
        if shot.returncode != 0 or not os.path.exists(screenshot):
            fail("Chromium wrote no screenshot")
    finally:
        shutil.rmtree(profile, ignore_errors=True)

    width, height, rows = decode_png(screenshot)
    print("screenshot %s: %d x %d" % (screenshot, width, height))
    counts = {}
    for line in rows:
        for pixel in line:
            counts[pixel] = counts.get(pixel, 0) + 1
    for name, colour, least in [("core 0's memory bar", CORE_0, 2000), ("core 1's memory bar", CORE_1, 2000),
                                ("the timeline's backward compute", BACKWARD, 300), ("all-reduce", ALL_REDUCE, 300)]:
        found = counts.get(colour, 0)
        print("%-34s %6d pixels of #%02x%02x%02x" % (name, found, *colour))
        if found < least:
            fail("%s is not on the rendered page (%d pixels of its colour, %d expected)" % (name, found, least))
    # An image row: 200 pixels in a row darker than the page, with many levels among them (text has gaps
    # between letters, and lines are one level).
    image_rows = 0
    for line in rows:
        run_levels, run_length, best = set(), 0, 0
        for pixel in line:
            if max(pixel) < 240:
                run_length += 1
                run_levels.add(sum(pixel) // 3)
                if run_length >= 200:
                    best = max(best, len(run_levels))
            else:
                run_levels, run_length = set(), 0
        image_rows += best >= 20
    print("rows crossing a rendered image: %d" % image_rows)
    if image_rows < 300:
        fail("the held-out images did not render (%d rows cross an image, 300 expected)" % image_rows)
    print("PASS: the report renders in Chromium; screenshot in " + screenshot)


if __name__ == "__main__":
    main()
