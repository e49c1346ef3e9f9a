#!/usr/bin/env python3
"""tessera-cli train spread over MPI ranks, as a user starts it (mpirun -np K … --backend mpi):

- the same losses and checkpoint files, byte for byte, as one process (reduction "reproducible"), for a
  small 2D U-Net on 2 replicas and for the 3D U-Net preset (training and evaluation losses);
- a checkpoint written with 4 ranks resumed with 2 and then in one process, the losses continuing
  bit-exactly those of an uninterrupted run;
- reduction "fast" within a stated tolerance of one process;
- Ctrl-C on mpirun: the run stops after the step with a checkpoint;
- a rank killed mid-run: the job ends within 10 s, non-zero, naming the rank; the model_dir holds no
  half-written file and the run resumes from its last checkpoint;
- started by mpirun without --backend mpi: refused, saying what to add;
- calibrate --network adds the network to a host preset, and plan --host-ranks predicts from it;
- eval and predict on 2 ranks: one process's scores and label volume.

Usage: cli_mpi_checks.py <tessera-cli> <mpirun> <scratch folder>
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

# A small 2D U-Net, 4 cores per replica × 2 replicas, checkpoints every 2 steps (8 cores: 1, 2, 4 ranks).
EXPERIMENT = {
    "version": 1,
    "name": "MPI check: 2D U-Net, 2 replicas x 4 cores",
    "model": {"kind": "unet", "depth": 3, "base_width": 8, "num_classes": 2, "batch_norm": True},
    "input": {"channels": 1, "size": [96, 96]},
    "global_batch": 2,
    "num_cores_per_replica": 4,
    "num_replicas": 2,
    "input_partition_dims": [[1, 2, 2, 1], None],
    "device": "tpu_v3",
    "precision": "f32",
    "optimizer": {"kind": "adam"},
    "data": {"source": "synthetic_em", "image_size": [128, 128], "num_train_images": 6, "num_eval_images": 1,
             "normalization": "zscore", "augment": {"flip_axes": [0, 1]}},
    "schedule": {"kind": "constant", "learning_rate": 0.002},
    "loss": "cross_entropy",
    "steps": 6,
    "steps_per_eval": 0,
    "steps_per_checkpoint": 2,
    "seed": 3,
}


def command(cli, mpirun, ranks, *args):
    base = [cli, "train", *args, "--plain", "--threads", "1"]
    if ranks is None:
        return base
    return [mpirun, "-np", str(ranks), "--oversubscribe", *base, "--backend", "mpi"]


def run(argv, expect_code=0, expect=()):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    shown = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))
    if result.returncode != expect_code:
        sys.exit(f"{shown}: expected exit code {expect_code}, got {result.returncode}\n{output}")
    for text in expect:
        if text not in output:
            sys.exit(f"{shown}: expected {text!r} in the output\n{output}")
    print(f"ok: {shown}")
    return output


def losses(model_dir):
    with open(os.path.join(model_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return {r["step"]: r["loss"] for r in records if r.get("kind") == "train"}


def same_bytes(a, b):
    with open(a, "rb") as x, open(b, "rb") as y:
        return x.read() == y.read()


def main():
    cli, mpirun, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    experiment = os.path.join(work, "mpi_check.json")
    with open(experiment, "w") as f:
        json.dump(EXPERIMENT, f, indent=1)
    folder = lambda name: os.path.join(work, name)

    # The reference: one process, 6 steps.
    run(command(cli, mpirun, None, experiment, "--model-dir", folder("alone")))
    reference = losses(folder("alone"))
    assert sorted(reference) == [1, 2, 3, 4, 5, 6], reference

    # 2 ranks (4 cores each), 6 steps: the same bits, the same checkpoint files.
    run(command(cli, mpirun, 2, experiment, "--model-dir", folder("two")))
    if losses(folder("two")) != reference:
        sys.exit(f"2 ranks: losses differ from one process\n{losses(folder('two'))}\n{reference}")
    for name in ("model.ckpt-000006.safetensors", "state.ckpt-000006.safetensors"):
        if not same_bytes(os.path.join(folder("alone"), name), os.path.join(folder("two"), name)):
            sys.exit(f"2 ranks: {name} differs from one process's")
    print("ok: 2 ranks give one process's losses and checkpoint bytes")

    # The 3D U-Net preset (8 cores, cross-entropy + Dice), 2 steps and its evaluation on 4 ranks: the bits of one process.
    preset = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "resources", "experiments", "unet3d_ct_8way.json")
    run(command(cli, mpirun, None, preset, "--model-dir", folder("preset_alone"), "--steps", "2"))
    run(command(cli, mpirun, 4, preset, "--model-dir", folder("preset_four"), "--steps", "2"))
    with open(os.path.join(folder("preset_alone"), "metrics.jsonl")) as a, open(os.path.join(folder("preset_four"), "metrics.jsonl")) as b:
        # Training and evaluation records (a session's start record names its ranks, so it differs).
        alone_losses = [r["loss"] for r in map(json.loads, filter(str.strip, a)) if r["kind"] in ("train", "eval")]
        four_losses = [r["loss"] for r in map(json.loads, filter(str.strip, b)) if r["kind"] in ("train", "eval")]
    if alone_losses != four_losses or not same_bytes(os.path.join(folder("preset_alone"), "model.ckpt-000002.safetensors"),
                                                     os.path.join(folder("preset_four"), "model.ckpt-000002.safetensors")):
        sys.exit(f"unet3d_ct_8way on 4 ranks: differs from one process\n{four_losses}\n{alone_losses}")
    print("ok: the 3D U-Net preset on 4 ranks: one process's training and evaluation losses and weights")

    # The network calibrated into a host preset, and the planner's prediction for ranks from it.
    preset_file = folder("host.json")
    run([cli, "calibrate", "--quick", "--threads", "1", "--out", preset_file])
    out = run([mpirun, "-np", "2", "--oversubscribe", cli, "calibrate", "--network", "--quick", "--out", preset_file],
              expect=("network between 2 ranks", "latency", "bandwidth", "wrote"))
    with open(preset_file) as f:
        measured = json.load(f)["measured"]
    for key in ("cluster_latency_us", "cluster_bandwidth_gbs", "cluster_gather_us", "cluster_ranks"):
        if not measured.get(key, 0) > 0:
            sys.exit(f"calibrate --network: {key} missing or not positive in {preset_file}\n{out}")
    run([cli, "plan", experiment, "--host-ranks", "1,2,4", "--host-preset", preset_file],
        expect=("1 process  predicted", "2 ranks    predicted", "4 ranks    predicted"))
    run([cli, "plan", experiment, "--host-ranks", "2", "--host-preset", preset_file, "--host-threads", "2"], expect_code=2,
        expect=("calibrated for 1 thread(s) per rank", "tessera-cli calibrate --threads 2"))

    # 4 ranks for 2 steps, 2 ranks to step 4, one process to step 6: one run's losses.
    run(command(cli, mpirun, 4, experiment, "--model-dir", folder("resumed"), "--steps", "2"))
    run(command(cli, mpirun, 2, experiment, "--model-dir", folder("resumed"), "--steps", "4"))
    run(command(cli, mpirun, None, experiment, "--model-dir", folder("resumed")))
    if losses(folder("resumed")) != reference:
        sys.exit(f"4 → 2 → 1 ranks: losses differ from an uninterrupted run\n{losses(folder('resumed'))}\n{reference}")
    if not same_bytes(os.path.join(folder("alone"), "model.ckpt-000006.safetensors"),
                      os.path.join(folder("resumed"), "model.ckpt-000006.safetensors")):
        sys.exit("4 → 2 → 1 ranks: the final weights differ from an uninterrupted run's")
    print("ok: a checkpoint of 4 ranks resumed with 2 and with 1 continues bit-exactly")

    # Evaluation and prediction on 2 ranks: one process's scores and label volumes.
    evaluated_alone = run([cli, "eval", experiment, "--model-dir", folder("alone"), "--no-predictions", "--threads", "1"])
    evaluated_spread = run([mpirun, "-np", "2", "--oversubscribe", cli, "eval", experiment, "--model-dir", folder("alone"),
                            "--no-predictions", "--threads", "1", "--backend", "mpi"])
    # The scores, per class too, without the evaluation's time.
    score = lambda out: [re.sub(r", [0-9.]+ (ms|s)\)", ")", line) for line in out.splitlines()
                         if line.startswith("eval ") or line.startswith("      ")]
    if not score(evaluated_alone) or score(evaluated_alone) != score(evaluated_spread):
        sys.exit(f"eval on 2 ranks differs from one process\n{evaluated_spread}\n{evaluated_alone}")
    image = os.path.join(work, "section.nii.gz")
    run([cli, "phantom", image, "--size", "100,90,1"])
    run([cli, "predict", experiment, image, "--model-dir", folder("alone"), "--out", folder("predicted_alone"), "--threads", "1"])
    run([mpirun, "-np", "2", "--oversubscribe", cli, "predict", experiment, image, "--model-dir", folder("alone"),
         "--out", folder("predicted_spread"), "--threads", "1", "--backend", "mpi"])
    if not same_bytes(os.path.join(folder("predicted_alone"), "section_prediction.nii.gz"),
                      os.path.join(folder("predicted_spread"), "section_prediction.nii.gz")):
        sys.exit("predict on 2 ranks: the label volume differs from one process's")
    print("ok: eval and predict on 2 ranks give one process's scores and label volume")

    # Fast: the library's all-reduce; within 1e-4 of the loss after 6 Adam steps (measured here: 6.7e-6).
    run(command(cli, mpirun, 4, experiment, "--model-dir", folder("fast"), "--reduction", "fast"))
    fast = losses(folder("fast"))
    worst = max(abs(fast[s] - reference[s]) / abs(reference[s]) for s in reference)
    if worst > 1e-4:
        sys.exit(f"fast reduction: losses {worst:.2e} from one process's (tolerance 1e-4)\n{fast}\n{reference}")
    print(f"ok: fast reduction within {worst:.1e} of one process")

    # Refused: mpirun without --backend mpi.
    run([mpirun, "-np", "2", "--oversubscribe", cli, "train", experiment, "--model-dir", folder("refused")],
        expect_code=2, expect=("without --backend mpi", "Add --backend mpi"))

    # Ctrl-C on mpirun: every rank gets it, rank 0 stops after the step with a checkpoint (tessera-cli exits
    # 130; OpenMPI's mpirun, itself interrupted, reports 1).
    interrupted = folder("interrupted")
    started = subprocess.Popen(command(cli, mpirun, 2, experiment, "--model-dir", interrupted, "--steps", "1000000"),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not glob.glob(os.path.join(interrupted, "model.ckpt-*.safetensors")):
        time.sleep(0.2)
    started.send_signal(signal.SIGINT)
    try:
        output, _ = started.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        started.kill()
        sys.exit("Ctrl-C: mpirun still running 60 s after SIGINT")
    if started.returncode == 0 or "stopped after step" not in output:
        sys.exit(f"Ctrl-C: expected a non-zero exit and a stop after the step, got {started.returncode}\n{output}")
    stopped_at = max(losses(interrupted))
    if not os.path.exists(os.path.join(interrupted, f"model.ckpt-{stopped_at:06d}.safetensors")):
        sys.exit(f"Ctrl-C: no checkpoint of the last step ({stopped_at})\n{output}")
    print(f"ok: Ctrl-C on mpirun stops both ranks after step {stopped_at} with its checkpoint, exit {started.returncode}")

    # A rank killed mid-run (a run far longer than the test: a step takes ~20 ms here).
    killed = folder("killed")
    started = subprocess.Popen(command(cli, mpirun, 2, experiment, "--model-dir", killed, "--steps", "1000000"),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    victim = None
    while time.time() < deadline and victim is None:
        time.sleep(0.2)
        if glob.glob(os.path.join(killed, "model.ckpt-*.safetensors")):
            # mpirun's children are the ranks; the second one started is rank 1 (the follower).
            children = subprocess.run(["pgrep", "-P", str(started.pid)], capture_output=True, text=True).stdout.split()
            ranks = [int(pid) for pid in children if open(f"/proc/{pid}/comm").read().strip() == "tessera-cli"]
            if len(ranks) == 2:
                victim = max(ranks)
    if victim is None:
        started.kill()
        started.communicate()
        sys.exit("killed rank: the run never reached its first checkpoint")
    os.kill(victim, signal.SIGKILL)
    killed_at = time.time()
    try:
        output, _ = started.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        started.kill()
        sys.exit("killed rank: mpirun was still running 30 s after a rank died")
    ended_after = time.time() - killed_at
    if ended_after > 10:
        sys.exit(f"killed rank: the job ended {ended_after:.1f} s after a rank died (10 s allowed)\n{output}")
    if started.returncode == 0:
        sys.exit(f"killed rank: the job exited 0\n{output}")
    if "rank 1" not in output:
        sys.exit(f"killed rank: the output does not name rank 1\n{output}")
    leftovers = [p for p in os.listdir(killed) if ".tmp" in p or p.startswith(".")]
    if leftovers:
        sys.exit(f"killed rank: half-written files left in the model_dir: {leftovers}")
    print(f"ok: a killed rank ends the job in {ended_after:.1f} s, exit {started.returncode}, naming the rank")
    # … and the run resumes from its last whole checkpoint.
    kept = sorted(glob.glob(os.path.join(killed, "model.ckpt-*.safetensors")))
    last = int(os.path.basename(kept[-1]).split("-")[1].split(".")[0])
    out = run(command(cli, mpirun, 2, experiment, "--model-dir", killed, "--steps", str(last + 1)))
    resumed = losses(killed)
    if last + 1 not in resumed:
        sys.exit(f"killed rank: the resumed run did not train step {last + 1}\n{out}")
    print(f"ok: the killed run resumes from step {last}")


if __name__ == "__main__":
    main()
