#!/usr/bin/env bash
# Peer benchmark: Tessera's training step against PyTorch's (Debian's python3-torch, oneDNN inside),
# same machine, same 2 threads, runs interleaved so both see the same load. Ends with one line per case:
#   case=<name> tessera_ms=<median> pytorch_ms=<median> ratio=<pytorch/tessera>
# Cases: the 2D and 3D U-Nets of the engine issue, in f32 and in bf16 (PyTorch: bf16 autocast). For
# the bf16 cases both sides also print which convolutions ran in bf16 (their precision maps: Tessera
# keeps layers narrower than 16 channels in f32, autocast runs every convolution in bf16), so a ratio
# is read knowing whether the same layers were in bf16 on both sides. retinanet50 (f32 only): RetinaNet
# ResNet-50 FPN at 640², one image, against torchvision's retinanet_resnet50_fpn (pytorch_step.py says
# what differs); both sides print parameters=<count>, which must agree.
# Usage: bench/peer/run.sh [build-dir] [rounds]     (make peer-bench installs python3-torch and runs it)
#   CASES="retinanet50 unet2d_f32" picks cases (default: all of unet2d_f32 unet3d_f32 unet2d_bf16
#   unet3d_bf16 retinanet50); STEPS and WARMUP override the steps per round (default 4 after 2 warmup,
#   retinanet50 2 after 1: its step is some 50 U-Net steps).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
rounds=${2:-5}
python=/usr/bin/python3
"$python" -c "import torch" 2>/dev/null || { echo "PyTorch is missing: make peer-deps (Debian's python3-torch)" >&2; exit 1; }
tessera=$build/bench/tessera_step
[ -x "$tessera" ] || { echo "build first: $tessera is missing" >&2; exit 1; }
export OMP_WAIT_POLICY=PASSIVE
peaks=$("$build/bench/fma_peak" 2)
peak=$(echo "$peaks" | sed -n 's/fma_peak_gflops=//p')
echo "machine FMA peak (fp32, 2 threads): $peak GFLOP/s"
bf16_peak=$(echo "$peaks" | sed -n 's/bf16_dot_peak_gflops=//p')
[ -n "$bf16_peak" ] && echo "machine bf16 dot-product peak (VDPBF16PS, 2 threads): $bf16_peak GFLOP/s — bf16 convolutions can beat f32 only if this is well above the FMA peak (or with AMX)"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
median() { sort -n | awk '{v[NR]=$1} END {if (NR % 2) print v[(NR+1)/2]; else printf "%.3f\n", (v[NR/2]+v[NR/2+1])/2}'; }
spread() { sort -n | awk '{v[NR]=$1} END {printf "%.1f–%.1f", v[1], v[NR]}'; }
all_cases="unet2d_f32 unet3d_f32 unet2d_bf16 unet3d_bf16 retinanet50"
for case in ${CASES:-$all_cases}; do
  [[ " $all_cases " == *" $case "* ]] || { echo "unknown case '$case' in CASES: pick from $all_cases" >&2; exit 2; }
done
summary=()
for case in ${CASES:-$all_cases}; do
  case $case in
    retinanet50) model=retinanet50; precision=f32; steps=${STEPS:-2}; warmup=${WARMUP:-1} ;;
    *) model=${case%_*}; precision=${case#*_}; steps=${STEPS:-4}; warmup=${WARMUP:-2} ;;
  esac
  for round in $(seq "$rounds"); do
    "$tessera" --case "$model" --precision "$precision" --steps "$steps" --warmup "$warmup" >"$work/t.$case.$round"
    "$python" "$root/bench/peer/pytorch_step.py" --case "$model" --precision "$precision" --steps "$steps" \
      --warmup "$warmup" >"$work/p.$case.$round"
  done
  t_parameters=$(grep -h '^parameters=' "$work/t.$case.1" | sed 's/parameters=//')
  p_parameters=$(grep -h '^parameters=' "$work/p.$case.1" | sed 's/parameters=//')
  [ "$t_parameters" = "$p_parameters" ] \
    || echo "$case: WARNING: the models differ: tessera $t_parameters parameters, pytorch $p_parameters"
  flops=$(grep -h flops_per_step "$work"/t.$case.* | head -1 | sed 's/flops_per_step=//')
  t_ms=$(grep -h step_ms "$work"/t.$case.* | sed 's/step_ms=//' | median)
  p_ms=$(grep -h step_ms "$work"/p.$case.* | sed 's/step_ms=//' | median)
  t_spread=$(grep -h step_ms "$work"/t.$case.* | sed 's/step_ms=//' | spread)
  p_spread=$(grep -h step_ms "$work"/p.$case.* | sed 's/step_ms=//' | spread)
  gflops=$(awk -v f="$flops" -v ms="$t_ms" 'BEGIN {printf "%.1f", f / ms / 1e6}')
  echo "$case: tessera $t_ms ms (spread $t_spread), pytorch $p_ms ms (spread $p_spread), tessera $gflops GFLOP/s of $peak peak," \
    "$t_parameters parameters"
  summary+=("case=${case} tessera_ms=$t_ms pytorch_ms=$p_ms ratio=$(awk -v a="$p_ms" -v b="$t_ms" 'BEGIN {printf "%.2f", a / b}')")
  if [ "$precision" = bf16 ]; then
    "$tessera" --case "$model" --precision bf16 --steps 1 --warmup 0 --precision-map 1 | grep '^precision ' >"$work/tmap"
    "$python" "$root/bench/peer/pytorch_step.py" --case "$model" --precision bf16 --steps 1 --warmup 0 --precision-map 1 \
      | grep '^precision ' >"$work/pmap"
    echo "$case precision map (convolutions in forward order: tessera / pytorch):"
    paste -d' ' "$work/tmap" "$work/pmap" | awk '{
      split($3, tn, "="); split($4, tc, "="); split($5, tp, "="); split($10, pp, "=");
      mark = tp[2] == pp[2] ? "" : "   <- differs";
      printf "  %-18s %-12s %-4s / %-4s%s\n", tn[2], tc[2], tp[2], pp[2], mark;
      tb += tp[2] == "bf16"; pb += pp[2] == "bf16"; n++; misaligned += $4 != $9
    } END { printf "  in bf16: tessera %d of %d convolutions, pytorch %d of %d\n", tb, n, pb, n;
            if (misaligned) printf "  WARNING: %d rows pair layers of different channels: the maps do not align\n", misaligned }'
  fi
done
printf '%s\n' "${summary[@]}"
