#!/bin/bash
# The core mesh over MPI ranks against the same mesh in one process, on this host (bench/bm_mpi.cpp):
# the 3D U-Net preset's 8-core mesh (unet3d_ct_8way: 64³, depth 3, width 8) in one process with 2 threads
# and on 1 (2 threads), 2, 4 and 8 ranks (1 thread each; 4 and 8 oversubscribe a 2-core machine), then a
# 2-core mesh in one process (2 threads) and on 2 ranks of one core each, and both 2-rank meshes again
# with halo messages that overlap nothing (--overlap 0, the mesh before session 26). Rounds interleave the
# configurations (the machine's speed drifts). The closing lines give the medians over rounds and the
# ratios to the in-process mesh.
#
# With a host preset calibrated for 1 thread and the network (tessera-cli calibrate --threads 1 --out P;
# mpirun -np 2 tessera-cli calibrate --network --out P), the ranks' rows also print the cost model's
# prediction of the step and its error (never fitted on these cases).
#
# Usage: bench/mpi/run.sh [build dir] [rounds] [host preset]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
preset=${3:-}
bench=$build/bench/bm_mpi
predict=()
[ -n "$preset" ] && predict=(--preset "$preset")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun=(mpirun --oversubscribe --bind-to none)
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
results=$(mktemp)
for round in $(seq 1 "$rounds"); do
  echo "# round $round"
  { "$bench" --backend single --threads 2
    "${mpirun[@]}" -np 1 "$bench" --threads 2
    "${mpirun[@]}" -np 2 "$bench" --threads 1 "${predict[@]}"
    "${mpirun[@]}" -np 4 "$bench" --threads 1 "${predict[@]}"
    "${mpirun[@]}" -np 8 "$bench" --threads 1 "${predict[@]}"
    "$bench" --backend single --threads 2 --pieces 2,1,1 | sed 's/^/mesh=2core /'
    "${mpirun[@]}" -np 2 "$bench" --threads 1 --pieces 2,1,1 | sed 's/^/mesh=2core /'
    "${mpirun[@]}" -np 4 "$bench" --threads 1 --reduction fast | sed 's/^/fast /'
    "${mpirun[@]}" -np 2 "$bench" --threads 1 --overlap 0
    "${mpirun[@]}" -np 2 "$bench" --threads 1 --pieces 2,1,1 --overlap 0 | sed 's/^/mesh=2core /'
  } | tee -a "$results"
done
python3 - "$results" <<'PY'
import re, statistics, sys
rows = {}
predictions = {}
last_key = None
for line in open(sys.argv[1]):
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    if line.startswith("predicted_ms"):
        predictions.setdefault(last_key, []).append(float(fields["error"].rstrip("%")))
        continue
    if "backend" not in fields:  # a rank's memory line
        continue
    key = (("2core " if line.startswith("mesh=2core") else "8core ") + ("fast " if line.startswith("fast") else "") +
           ("no-overlap " if fields.get("overlap") == "0" else "") + f"{fields['backend']} ranks={fields['ranks']}")
    rows.setdefault(key, []).append(fields)
    last_key = key
base = {}
for key, runs in rows.items():
    step = statistics.median(float(r["step_ms"]) for r in runs)
    if "single" in key:
        base[key.split()[0]] = step
for key, runs in rows.items():
    step = statistics.median(float(r["step_ms"]) for r in runs)
    halo = statistics.median(float(r["halo_wait_ms"]) for r in runs)
    grad = statistics.median(float(r["gradient_ms"]) for r in runs)
    last = runs[-1]
    print(f"summary {key:28s} step_ms={step:7.1f} over_in_process={step / base[key.split()[0]]:.3f} halo_wait_ms={halo:.2f} "
          f"gradient_ms={grad:.2f} sent_kib_per_rank={last['sent_kib_per_rank']} messages_per_rank={last['messages_per_rank']} "
          f"peak_rss_mib={last['peak_rss_mib']}")
    if key in predictions:
        print(f"prediction {key:25s} errors=" + ",".join(f"{e:+.1f}%" for e in predictions[key]))
PY
rm -f "$results"
