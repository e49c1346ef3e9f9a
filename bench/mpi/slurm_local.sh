#!/bin/bash
# A Slurm job on this machine: starts slurmctld and slurmd on localhost with a throwaway configuration
# (no munge: auth/none, state in a temporary folder, ports of its own), submits a 2-task batch job that
# runs `srun --mpi=pmix tessera-cli train … --backend mpi`, waits for it, and checks its losses and final
# weights are bitwise those of the same experiment trained in one process. Stops both daemons on exit.
# Needs root (slurmd) and Debian's slurm-wlm (make slurm-deps). Not in CI: it starts system daemons.
#
# Usage: bench/mpi/slurm_local.sh [build dir]
set -euo pipefail
build=$(realpath "${1:-build}")
cli=$build/app/tessera-cli
[ "$(id -u)" = 0 ] || { echo "slurm_local.sh: slurmd needs root" >&2; exit 2; }
command -v slurmctld >/dev/null || { echo "slurm_local.sh: slurm-wlm is not installed (make slurm-deps)" >&2; exit 2; }

work=$(mktemp -d /tmp/tessera-slurm.XXXXXX)
host=$(hostname -s)
memory=$(( $(free -m | awk '/^Mem:/ {print $2}') * 9 / 10 ))
mkdir -p "$work/ctld" "$work/slurmd"
cat > "$work/slurm.conf" <<CONF
ClusterName=tessera
SlurmctldHost=$host
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/ctld
SlurmdSpoolDir=$work/slurmd
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
NodeName=$host CPUs=$(nproc) RealMemory=$memory State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$work/slurm.conf
cleanup() {
  scancel --quiet --user=root 2>/dev/null || true
  for daemon in slurmd slurmctld; do
    [ -f "$work/$daemon.pid" ] && kill "$(cat "$work/$daemon.pid")" 2>/dev/null || true
  done
  sleep 1
}
trap cleanup EXIT
slurmctld -i
slurmd
for _ in $(seq 1 30); do
  sinfo -h -o %t 2>/dev/null | grep -q -E '^idle' && break
  sleep 1
done
sinfo

# The experiment: a small 2D U-Net, 2 replicas × 4 cores, 4 steps.
python3 - "$work/experiment.json" <<'PY'
import json, sys
json.dump({"version": 1, "name": "Slurm check: 2D U-Net, 2 replicas x 4 cores",
           "model": {"kind": "unet", "depth": 3, "base_width": 8, "num_classes": 2, "batch_norm": True},
           "input": {"channels": 1, "size": [96, 96]}, "global_batch": 2, "num_cores_per_replica": 4, "num_replicas": 2,
           "input_partition_dims": [[1, 2, 2, 1], None], "device": "tpu_v3", "precision": "f32", "optimizer": {"kind": "adam"},
           "data": {"source": "synthetic_em", "image_size": [128, 128], "num_train_images": 6, "num_eval_images": 1,
                    "normalization": "zscore"},
           "schedule": {"kind": "constant", "learning_rate": 0.002}, "steps": 4, "seed": 3}, open(sys.argv[1], "w"))
PY
cat > "$work/job.sh" <<JOB
#!/bin/bash
#SBATCH --job-name=tessera-mpi
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --output=$work/job.out
export OMP_NUM_THREADS=1
srun --mpi=pmix $cli train $work/experiment.json --backend mpi --threads 1 --plain --model-dir $work/slurm_run
JOB
start=$(date +%s.%N)
sbatch --wait "$work/job.sh"
echo "job finished in $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
tail -n 6 "$work/job.out"
OMP_NUM_THREADS=1 "$cli" train "$work/experiment.json" --threads 1 --plain --model-dir "$work/alone" > /dev/null
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def losses(run):
    return [json.loads(l)["loss"] for l in open(f"{work}/{run}/metrics.jsonl") if '"kind":"train"' in l]
slurm, alone = losses("slurm_run"), losses("alone")
weights = [open(f"{work}/{run}/model.ckpt-000004.safetensors", "rb").read() for run in ("slurm_run", "alone")]
print("slurm 2-task job losses:", slurm)
print("one process losses:     ", alone)
ok = slurm == alone and weights[0] == weights[1]
print("slurm_2task_bitwise_equal_to_one_process=" + ("yes" if ok else "NO"))
sys.exit(0 if ok else 1)
PY
