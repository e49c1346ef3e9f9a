#!/usr/bin/env python3
"""A volume read by region trains and predicts as the same volume read whole.

    volume_by_region_checks.py <tessera-cli> <work folder>

1. `tessera-cli phantom` writes a CT phantom (56 × 48 × 40) and its organs; `convert` copies both into one HDF5
   file (ct.h5:/volumes/raw, ct.h5:/volumes/labels/organs) and into uncompressed NIfTI.
2. The same "volume" experiment (3D U-Net, 2 cores, 6 steps, an evaluation) trains twice: on the .nii.gz pair
   read whole and on the HDF5 datasets with read_by_region true. The batches are the same (the engine test
   VolumeSource.* checks them to 1e-5), so every step's loss agrees to 1e-4 relative and the evaluation's Dice
   to 1e-4.
3. predict with TESSERA_MAX_VOLUME_BYTES=1MiB (too little to hold the volume) streams the HDF5 dataset and the
   .nii slab by slab into ct_prediction.h5:/volumes/labels/prediction and ct_prediction.nii; their labels (read
   by h5py and nibabel) equal the prediction of the .nii.gz read whole, voxel for voxel, on the same grid.
4. Bad input: a labels dataset that is not there, read_by_region with a .nii.gz image (exit 2, named).
Exits 0 when all hold, 1 naming the first that does not; 77 (skipped) when h5py or nibabel is missing and CI is not set."""

import json
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import nibabel
    import numpy as np
except ImportError as missing:
    print("SKIP: %s (install python3-h5py and python3-nibabel)" % missing)
    sys.exit(1 if os.environ.get("CI") else 77)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(command, expect=0, env=None):
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != expect:
        fail("%s exited %d, expected %d:\n%s%s" % (" ".join(command), done.returncode, expect, done.stdout, done.stderr))
    return done.stdout + done.stderr


def experiment(work, name, image, labels, by_region):
    data = {"source": "volume", "image": image, "labels": labels, "holdout_fraction": 0.2, "foreground_fraction": 0.7,
            "normalization": "zscore", "label_mapping": {"1": 1, "2-3": 2}, "augment": {"flip_axes": [2]}}
    if by_region:
        data["read_by_region"] = True
    spec = {"version": 1, "name": name,
            "model": {"kind": "unet", "depth": 2, "base_width": 4, "num_classes": 3},
            "input": {"channels": 1, "size": [16, 24, 24]}, "global_batch": 2, "num_cores_per_replica": 2,
            "input_partition_dims": [[1, 1, 2, 1, 1], None], "optimizer": {"kind": "adam"}, "data": data,
            "schedule": {"learning_rate": 0.003}, "steps": 6, "steps_per_eval": 6, "seed": 4}
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def records(model_dir, kind):
    with open(os.path.join(model_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r.get("kind") == kind]


def main():
    cli, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    image, labels = os.path.join(work, "ct.nii.gz"), os.path.join(work, "organs.nii.gz")
    run([cli, "phantom", image, "--labels", labels, "--size", "56,48,40"])
    h5 = os.path.join(work, "ct.h5")
    run([cli, "convert", image, h5 + ":/volumes/raw"])
    run([cli, "convert", "--labels", labels, h5 + ":/volumes/labels/organs"])
    run([cli, "convert", image, os.path.join(work, "ct.nii")])

    whole = experiment(work, "whole", "ct.nii.gz", "organs.nii.gz", False)
    region = experiment(work, "region", "ct.h5:/volumes/raw", "ct.h5:/volumes/labels/organs", True)
    out = run([cli, "train", whole, "--model-dir", os.path.join(work, "run_whole"), "--plain", "--threads", "1"])
    if "read whole" not in out:
        fail("the whole run does not say it reads the volume whole:\n" + out)
    out = run([cli, "train", region, "--model-dir", os.path.join(work, "run_region"), "--plain", "--threads", "1"])
    if "read by region" not in out:
        fail("the region run does not say it reads by region:\n" + out)
    losses_whole = [r["loss"] for r in records(os.path.join(work, "run_whole"), "train")]
    losses_region = [r["loss"] for r in records(os.path.join(work, "run_region"), "train")]
    if len(losses_whole) != 6 or not np.allclose(losses_whole, losses_region, rtol=1e-4, atol=0):
        fail("losses read whole %s and by region %s differ" % (losses_whole, losses_region))
    dice_whole = records(os.path.join(work, "run_whole"), "eval")[-1]["mean_dice"]
    dice_region = records(os.path.join(work, "run_region"), "eval")[-1]["mean_dice"]
    if abs(dice_whole - dice_region) > 1e-4:
        fail("held-out Dice read whole %g, by region %g" % (dice_whole, dice_region))

    model_dir = os.path.join(work, "run_whole")
    predicted = os.path.join(work, "predicted")
    run([cli, "predict", whole, image, "--model-dir", model_dir, "--out", predicted, "--threads", "1"])
    small = dict(os.environ, TESSERA_MAX_VOLUME_BYTES="1MiB")
    out = run([cli, "predict", whole, h5 + ":/volumes/raw", os.path.join(work, "ct.nii"), "--model-dir", model_dir,
               "--out", predicted, "--threads", "1"], env=small)
    reference = np.asarray(nibabel.load(os.path.join(predicted, "ct_prediction.nii.gz")).dataobj)
    streamed_nii = nibabel.load(os.path.join(predicted, "ct_prediction.nii"))
    with h5py.File(os.path.join(predicted, "ct_prediction.h5"), "r") as f:
        streamed_h5 = f["volumes/labels/prediction"][...].transpose(2, 1, 0)
    if not np.array_equal(np.asarray(streamed_nii.dataobj), reference):
        fail("the .nii predicted slab by slab differs from the whole prediction in %d voxels"
             % np.count_nonzero(np.asarray(streamed_nii.dataobj) != reference))
    if not np.array_equal(streamed_h5, reference):
        fail("the HDF5 prediction differs from the whole prediction in %d voxels" % np.count_nonzero(streamed_h5 != reference))
    if not np.allclose(streamed_nii.affine, nibabel.load(image).affine, atol=1e-4):
        fail("the streamed .nii's affine %s is not the image's %s" % (streamed_nii.affine, nibabel.load(image).affine))
    if len(np.unique(reference)) < 2:
        fail("the prediction is one class everywhere: the comparison would prove little")

    missing = experiment(work, "missing", "ct.h5:/volumes/raw", "ct.h5:/volumes/labels/nothing", True)
    out = run([cli, "train", missing, "--model-dir", os.path.join(work, "run_missing"), "--plain"], expect=2)
    if "no dataset /volumes/labels/nothing" not in out:
        fail("a missing labels dataset: " + out)
    gz = experiment(work, "gz", "ct.nii.gz", "organs.nii.gz", True)
    out = run([cli, "train", gz, "--model-dir", os.path.join(work, "run_gz"), "--plain"], expect=2)
    if "region by region" not in out:
        fail("read_by_region with a .nii.gz: " + out)
    print("volume by region: %d steps' losses, Dice %.4f and %d predicted voxels agree with the whole read"
          % (len(losses_whole), dice_whole, reference.size))


main()
