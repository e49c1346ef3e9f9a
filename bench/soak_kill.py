#!/usr/bin/env python3
"""Soak: a long run killed with SIGKILL at random moments and resumed each time must lose nothing.

    bench/soak_kill.py build/app/tessera-cli [--steps 1000] [--kills 20] [--every 50] [--seed 1] [--work /tmp/soak]

Trains a small 2D U-Net (2 simulated cores) once without interruption, then again in another model_dir,
killing `tessera-cli train` with SIGKILL `--kills` times at random moments (uniform over the expected
duration of the steps left, some during checkpoints) and resuming it each time with the same command. Prints:
  - whether every step's loss equals the uninterrupted run's, bit for bit (JSON round-trips doubles exactly);
  - the resident memory (VmRSS) of the uninterrupted run sampled along its steps, and of each resumed
    segment (its peak), to show it stays flat;
  - files left in a temporary state (*.tmp.<pid>) or not listed by the checkpoint index at the end.
Exit status 0 when losses are identical and nothing is left behind.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

EXPERIMENT = {
    "version": 1, "name": "soak",
    "model": {"kind": "unet", "depth": 2, "base_width": 8, "num_classes": 2},
    "input": {"channels": 1, "size": [48, 48]},
    "global_batch": 2, "num_cores_per_replica": 2, "input_partition_dims": [[1, 2, 1, 1], None],
    "optimizer": {"kind": "adam"},
    "data": {"source": "synthetic_em", "image_size": [96, 96], "num_train_images": 4, "num_eval_images": 1},
    "schedule": {"kind": "cosine", "learning_rate": 0.005, "warmup_steps": 20},
    "steps": 1000, "steps_per_eval": 250, "steps_per_checkpoint": 50, "keep_checkpoints": 3, "seed": 11,
}


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def steps_done(model_dir):
    path = os.path.join(model_dir, "metrics.jsonl")
    try:
        with open(path) as f:
            return sum(1 for line in f if '"kind":"train"' in line.replace(" ", ""))
    except OSError:
        return 0


def losses(model_dir):
    result = {}
    with open(os.path.join(model_dir, "metrics.jsonl")) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("kind") == "train":
                result[record["step"]] = record["loss"]
    return result


def train(cli, experiment, model_dir, kill_after=None, samples=None):
    """Runs one `train` segment; kills it after `kill_after` seconds. Returns (exit code, peak RSS MiB)."""
    process = subprocess.Popen([cli, "train", experiment, "--model-dir", model_dir, "--plain"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    start, peak = time.monotonic(), 0.0
    while process.poll() is None:
        rss = rss_mib(process.pid)
        if rss is not None:
            peak = max(peak, rss)
            if samples is not None:
                samples.append((time.monotonic() - start, steps_done(model_dir), rss))
        if kill_after is not None and time.monotonic() - start >= kill_after:
            process.send_signal(signal.SIGKILL)
            process.wait()
            break
        time.sleep(0.05)
    error = process.stderr.read()
    if process.returncode not in (0, -signal.SIGKILL):
        sys.exit(f"train failed (exit {process.returncode}):\n{error}")
    return process.returncode, peak


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cli")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--every", type=int, default=50, help="steps per checkpoint")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", default="/tmp/tessera_soak")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    experiment = dict(EXPERIMENT, steps=args.steps, steps_per_checkpoint=args.every)
    experiment_path = os.path.join(args.work, "soak.json")
    with open(experiment_path, "w") as f:
        json.dump(experiment, f)

    whole_dir, killed_dir = os.path.join(args.work, "whole"), os.path.join(args.work, "killed")
    samples = []
    start = time.monotonic()
    train(args.cli, experiment_path, whole_dir, samples=samples)
    whole_seconds = time.monotonic() - start
    print(f"uninterrupted: {args.steps} steps in {whole_seconds:.1f} s")
    print("resident memory of the uninterrupted run (step: MiB):")
    marks = sorted({max(1, args.steps * k // 10) for k in range(1, 11)})
    for mark in marks:
        at = [rss for _, step, rss in samples if step >= mark]
        if at:
            print(f"  step {mark:5d}: {at[0]:7.1f} MiB")
    steady = [rss for _, step, rss in samples if step >= args.steps // 10]
    if steady:
        print(f"  from step {args.steps // 10} on: min {min(steady):.1f}, max {max(steady):.1f} MiB "
              f"(growth {max(steady) - min(steady):.1f} MiB)")

    # Where a segment's time goes: starting (and resuming) before the first step, then a steady rate.
    # Each kill lands at a random moment of the next share of the remaining steps (0.2 to 1.8 times
    # it), so that all `--kills` happen before the run ends whatever the machine's speed.
    first_step = next((t for t, step, _ in samples if step >= 1), 0.0)
    step_seconds = max(whole_seconds - first_step, 1e-3) / args.steps
    rng = random.Random(args.seed)
    peaks = []
    for kill in range(args.kills):
        if steps_done(killed_dir) >= args.steps and os.path.exists(os.path.join(killed_dir, "summary.json")):
            break
        share = (args.steps - steps_done(killed_dir)) / (args.kills - kill + 1)
        kill_after = first_step + rng.uniform(0.2, 1.8) * share * step_seconds
        code, peak = train(args.cli, experiment_path, killed_dir, kill_after=kill_after)
        peaks.append(peak)
        print(f"kill {kill + 1:2d}: after {kill_after:5.2f} s at step {steps_done(killed_dir):5d}, "
              f"{'killed' if code != 0 else 'finished first'}, peak {peak:.1f} MiB")
    code, peak = train(args.cli, experiment_path, killed_dir)
    peaks.append(peak)
    print(f"resumed to the end: peak {peak:.1f} MiB; segment peaks {min(peaks):.1f}-{max(peaks):.1f} MiB")

    reference, resumed = losses(whole_dir), losses(killed_dir)
    missing = [s for s in reference if s not in resumed]
    different = [s for s in reference if s in resumed and resumed[s] != reference[s]]
    print(f"losses: {len(reference)} steps uninterrupted, {len(resumed)} after {len(peaks) - 1} kills; "
          f"{len(missing)} missing, {len(different)} different")
    for step in different[:5]:
        print(f"  step {step}: {reference[step]!r} vs {resumed[step]!r}")

    leftovers = [n for n in os.listdir(killed_dir) if ".tmp." in n]
    with open(os.path.join(killed_dir, "checkpoint")) as f:
        listed = {name for c in json.load(f)["checkpoints"] for name in (c["weights"], c["state"])}
    unlisted = [n for n in os.listdir(killed_dir) if n.endswith(".safetensors") and n not in listed]
    print(f"left behind: {len(leftovers)} temporaries {leftovers}, {len(unlisted)} unlisted checkpoint files {unlisted}")
    ok = not missing and not different and not leftovers and not unlisted
    print("soak: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
