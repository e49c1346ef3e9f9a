#!/usr/bin/env bash
# Regenerates the README's screenshots from the built studio, under Xvfb with Qt's xcb platform.
# Usage: resources/screenshots/regenerate.sh [build-dir]   (make screenshots does this)
#   QUICK=1 keeps the trained detector's two shots as they are (they train it for ~13 minutes first).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=$root/resources/screenshots
app=$build/app/tessera
[ -x "$app" ] || { echo "build the studio first (make build): $app is missing" >&2; exit 1; }
data=/usr/share/doc/insighttoolkit5-examples/examples/Data
# A scratch settings folder, so the screenshots do not depend on (or change) the user's window layout.
export XDG_CONFIG_HOME=$(mktemp -d)
trap 'rm -rf "$XDG_CONFIG_HOME"' EXIT
shoot() {  # shoot <png> <arguments...>: the window a first start opens (1240×760; the docks scroll)
  local png=$1; shift
  QT_QPA_PLATFORM=xcb xvfb-run -a -s "-screen 0 1280x800x24" "$app" --size 1240x760 --screenshot "$out/$png" "$@"
}
shoot viewer_mri.png "$data/KmeansTest_T1UCharRaw.nii.gz" --labels "$data/KmeansTest_T1RawSkullStrip.nii.gz"
shoot viewer_ct_phantom.png --phantom 3d
# A 3D Slicer segmentation written by tessera-cli: its segment names in the legend.
segmentation=$(mktemp -d)
"$build/app/tessera-cli" phantom "$segmentation/phantom.nii.gz" --labels "$segmentation/phantom.seg.nrrd" > /dev/null
shoot segmentation_names.png "$segmentation/phantom.nii.gz" --labels "$segmentation/phantom.seg.nrrd"
# The DICOM series browser over a folder of four series (pydicom's CT, MR, RT dose and a JPEG 2000 CT): its
# UI test takes the shot.
QT_QPA_PLATFORM=xcb xvfb-run -a -s "-screen 0 1280x800x24" "$build/tests/ui/tst_dicom_browser" > /dev/null
cp "$build/tests/ui/dicom_browser_screens/dicom_series_browser.png" "$out/dicom_series_browser.png"
# A phantom opened by region (overview 1:8, full-resolution slices): its UI test takes the shot.
QT_QPA_PLATFORM=xcb xvfb-run -a -s "-screen 0 1280x800x24" "$build/tests/ui/tst_streamed_volume" > /dev/null
cp "$build/tests/ui/streamed_volume_screens/streamed_volume.png" "$out/streamed_volume.png"
shoot viewer_2d.png "$data/BrainProtonDensitySliceBorder20.png" --labels "$data/BrainProtonDensitySliceBorder20Mask.png" || \
  shoot viewer_2d.png --phantom 2d
# The partition editor: a 2D U-Net's 4-way split over an EM section, a 3D U-Net's 2×2×2 split over the
# head MRI, the planner's table and charts, and the predicted step's timeline.
experiments=$root/resources/experiments
shoot editor_2d.png --experiment "$experiments/unet2d_em_4way.json"
shoot editor_3d.png --experiment "$experiments/unet3d_mri_skullstrip.json"
shoot planner.png --experiment "$experiments/unet3d_ct_256_16cores.json" --grab planner
shoot timeline.png --experiment "$experiments/unet3d_ct_256_16cores.json" --grab timeline
# Training from the studio: a run of the 2D preset with its charts and the prediction overlay, the
# timeline of a real step, a 3D run's prediction as surfaces, and the equivalence view.
runs=$(mktemp -d)
shoot training_2d.png --experiment "$experiments/unet2d_em_4way.json" --train 150 --shot-at-step 120 --model-dir "$runs/em"
shoot run_timeline.png --experiment "$experiments/unet2d_em_4way.json" --train 2 --model-dir "$runs/em_timeline" --grab run-timeline
shoot training_3d.png --experiment "$experiments/unet3d_ct_8way.json" --train 40 --model-dir "$runs/ct"
shoot equivalence.png --experiment "$experiments/unet2d_em_4way.json" --grab equivalence
# A run's HTML report (tessera-cli report) as headless Chromium renders it: its top 2400 pixels.
"$build/app/tessera-cli" train "$experiments/unet2d_em_4way.json" --steps 100 --model-dir "$runs/report" --plain > /dev/null
"$build/app/tessera-cli" report "$runs/report" --out "$runs/report.html"
chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars --user-data-dir="$runs/chromium" \
  --virtual-time-budget=10000 --window-size=1100,2400 --screenshot="$out/report.png" "file://$runs/report.html" 2> /dev/null
# A detector's design: the shapes preset's first held-out image with its objects in the Detections tab.
shoot detections_preview.png --experiment "$experiments/retinanet_shapes_4way.json"
# The shapes preset trained (from the command line: about 13 minutes on 2 cores), opened in the studio:
# its last evaluation's boxes, and the Run dock's per-class AP table and precision–recall curves.
if [ -z "${QUICK:-}" ]; then
  "$build/app/tessera-cli" train "$experiments/retinanet_shapes_4way.json" --model-dir "$runs/shapes" --plain > /dev/null
  shoot detections_trained.png --experiment "$experiments/retinanet_shapes_4way.json" --open-run "$runs/shapes"
  shoot detections_scores.png --experiment "$experiments/retinanet_shapes_4way.json" --open-run "$runs/shapes" --grab run
fi
rm -rf "$runs"
echo "screenshots written to $out"
