#!/usr/bin/env python3
"""tessera-cli's experiment commands as a user runs them: validate, train (a few steps of the 2D and
3D presets), eval, predict, Ctrl-C during training and the resume after it, and bad input.

Usage: cli_train_checks.py <tessera-cli> <experiments folder> <scratch folder>
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time


def run(cli, *args, expect_code=0, expect=()):
    result = subprocess.run([cli, *args], capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    if result.returncode != expect_code:
        sys.exit(f"tessera-cli {' '.join(args)}: expected exit code {expect_code}, got {result.returncode}\n{output}")
    for text in expect:
        if text not in output:
            sys.exit(f"tessera-cli {' '.join(args)}: expected {text!r} in the output\n{output}")
    print(f"ok: tessera-cli {' '.join(args)}")
    return output


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    cli, experiments, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    preset = lambda name: os.path.join(experiments, name + ".json")

    # Every preset validates; the trainable ones say so.
    presets = sorted(os.path.join(experiments, f) for f in os.listdir(experiments) if f.endswith(".json"))
    out = run(cli, "validate", *presets)
    if out.count("ok    ") != len(presets):
        sys.exit(f"validate: expected {len(presets)} ok lines\n{out}")
    for name in ("unet2d_em_4way", "unet3d_ct_8way", "retinanet_2560_8cores"):
        if f"{name}.json: " not in out or "trainable" not in out.split(f"{name}.json: ")[1].splitlines()[0]:
            sys.exit(f"validate: {name} should be trainable\n{out}")

    # A bad experiment: exit code 2, the JSON path and a did-you-mean.
    bad = os.path.join(work, "bad.json")
    with open(preset("unet2d_em_4way")) as f:
        text = f.read()
    with open(bad, "w") as f:
        f.write(text.replace('"steps_per_eval"', '"steps_per_evl"'))
    run(cli, "validate", bad, expect_code=2, expect=["steps_per_evl: unknown field; did you mean \"steps_per_eval\"?"])
    run(cli, "train", bad, expect_code=2, expect=["steps_per_evl"])
    run(cli, "train", preset("unet3d_ct_256_16cores"), expect_code=2, expect=["plan-only"])
    run(cli, "train", "--help", expect=["--steps", "--model-dir"])
    run(cli, "predict", preset("unet2d_em_4way"), os.path.join(work, "missing.png"), expect_code=2, expect=["missing.png"])

    # The 2D and 3D presets train for two steps, evaluate and checkpoint.
    em_dir = os.path.join(work, "em")
    out = run(cli, "train", preset("unet2d_em_4way"), "--steps", "2", "--model-dir", em_dir, "--plain",
              expect=["step 1/2 loss", "step 2/2 loss", "eval  step 2", "membrane", "checkpoint step 2", "summary",
                      "the cores hold"])
    records = jsonl(os.path.join(em_dir, "metrics.jsonl"))
    if [r["step"] for r in records if r["kind"] == "train"] != [1, 2] or not any(r["kind"] == "eval" for r in records):
        sys.exit(f"metrics.jsonl: expected steps 1, 2 and an evaluation, got {records}")
    for name in ("checkpoint", "model.ckpt-000002.safetensors", "state.ckpt-000002.safetensors", "train.csv", "eval.csv",
                 "experiment.json"):
        if not os.path.exists(os.path.join(em_dir, name)):
            sys.exit(f"train: {name} missing from the model_dir: {os.listdir(em_dir)}")
    if not any(f.startswith("events.out.tfevents") for f in os.listdir(em_dir)):
        sys.exit("train: no TensorBoard events file")
    run(cli, "eval", preset("unet2d_em_4way"), "--model-dir", em_dir, expect=["evaluated step 2", "mean Dice", "wrote"])

    # The detection preset: a step, then COCO scores and the boxes file.
    shapes_dir = os.path.join(work, "shapes")
    run(cli, "train", preset("retinanet_shapes_4way"), "--steps", "1", "--model-dir", shapes_dir, "--plain",
        expect=["step 1/1 loss", "eval  step 1", "AP50", "triangle", "detections_step_1.json", "checkpoint step 1"])
    evals = [r for r in jsonl(os.path.join(shapes_dir, "metrics.jsonl")) if r["kind"] == "eval"]
    if len(evals) != 1 or "ap50" not in evals[0].get("detection", {}):
        sys.exit(f"metrics.jsonl: expected one evaluation with COCO scores, got {evals}")

    # The same detector with torchvision's rounded-up coarse levels and a ResNeXt backbone: 160 is not a
    # multiple of 128 (P6 3×3, P7 2×2), and training, evaluation and the boxes go through.
    with open(preset("retinanet_shapes_4way")) as source:
        mlperf_like = json.load(source)
    mlperf_like["model"].update({"depth": 50, "groups": 4, "width_per_group": 8, "coarse_levels": "round_up"})
    mlperf_like["input"]["size"] = [160, 160]
    mlperf_like["num_cores_per_replica"] = 1
    mlperf_like["input_partition_dims"] = [[1, 1, 1, 1], None]
    rounded_file = os.path.join(work, "retinanet_round_up.json")
    with open(rounded_file, "w") as out:
        json.dump(mlperf_like, out)
    run(cli, "train", rounded_file, "--steps", "1", "--model-dir", os.path.join(work, "round_up"), "--plain",
        expect=["step 1/1 loss", "eval  step 1", "AP50", "checkpoint step 1"])
    mlperf_like["model"]["coarse_levels"] = "exact"
    with open(rounded_file, "w") as out:
        json.dump(mlperf_like, out)
    run(cli, "train", rounded_file, "--steps", "1", "--model-dir", os.path.join(work, "exact"), "--plain",
        expect_code=2, expect=["divisible by 128", "divisible by 32 is enough"])

    ct_dir = os.path.join(work, "ct")
    run(cli, "train", preset("unet3d_ct_8way"), "--steps", "2", "--model-dir", ct_dir, "--plain",
        expect=["step 2/2 loss", "eval  step 2", "lung"])
    phantom = os.path.join(work, "phantom.nii.gz")
    run(cli, "phantom", phantom, "--size", "80,72,40")
    run(cli, "predict", preset("unet3d_ct_8way"), phantom, "--model-dir", ct_dir, "--out", os.path.join(work, "predicted"),
        expect=["phantom_prediction.nii.gz"])
    run(cli, "info", os.path.join(work, "predicted", "phantom_prediction.nii.gz"), expect=["80", "72", "40"])
    empty = os.path.join(work, "empty.nii.gz")
    open(empty, "wb").close()
    run(cli, "predict", preset("unet3d_ct_8way"), empty, "--model-dir", ct_dir, "--out", os.path.join(work, "predicted"),
        expect_code=2, expect=["empty.nii.gz", "0 bytes"])

    # Ctrl-C: the step finishes, a checkpoint is written, exit code 130; the same command resumes.
    stop_dir = os.path.join(work, "stopped")
    process = subprocess.Popen([cli, "train", preset("unet2d_em_4way"), "--steps", "400", "--model-dir", stop_dir, "--plain"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    deadline = time.time() + 300
    for line in process.stdout:
        seen.append(line)
        if line.startswith("step 2/400"):
            process.send_signal(signal.SIGINT)
            break
        if time.time() > deadline:
            process.kill()
            sys.exit("train: no second step within 300 s\n" + "".join(seen))
    rest = process.communicate(timeout=300)[0]
    output = "".join(seen) + rest
    if process.returncode != 130 or "stopped after step" not in output:
        sys.exit(f"train stopped by SIGINT: expected exit code 130 and a stop message, got {process.returncode}\n{output}")
    stopped_at = int(output.split("stopped after step ")[1].split()[0])
    print(f"ok: SIGINT stopped the run after step {stopped_at}")
    run(cli, "train", preset("unet2d_em_4way"), "--steps", str(stopped_at + 1), "--model-dir", stop_dir, "--plain",
        expect=[f"resuming after step {stopped_at}", f"step {stopped_at + 1}/{stopped_at + 1}"])


if __name__ == "__main__":
    main()
