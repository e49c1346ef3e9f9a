#!/usr/bin/env python3
"""DICOM through GDCM against independent tools: pydicom writes, gdcmconv compresses, nibabel reads back.

    dicom_gdcm_checks.py <tessera-cli> <work folder>

1. pydicom writes a CT series of 5 single-frame slices (int16, 40 columns × 32 rows, Rescale Intercept -1024,
   an oblique orientation, slices 2.5 mm apart, files named against their order) and, from the same pixels,
   one enhanced multi-frame CT object (per-frame Plane Position, shared Plane Orientation and Pixel Measures).
2. gdcmconv re-encodes every file as JPEG lossless, JPEG-LS, JPEG 2000 (lossless) and RLE; gdcminfo confirms
   each syntax.
3. `tessera-cli convert <folder> out.nii` reads each folder; nibabel reads the NIfTI: the voxels must equal
   the written values plus the intercept exactly, and the affine the geometry (to 1e-4 mm) — for every syntax
   and for the multi-frame object.
4. A folder holding the series twice over (two series UIDs) is listed by `tessera-cli info` (both, with their
   descriptions) and read by --series; without --series a read names both.
5. A series with a slice missing and one tilted (positions stepping off the normal) read with a warning each.
Exits 0 when all hold, 1 naming the first that does not; 77 (skipped) when gdcmconv, pydicom or nibabel is
missing and CI is not set."""

import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    import nibabel
    import pydicom
    from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid
except ImportError as missing:
    print("SKIP: %s (install python3-pydicom and python3-nibabel)" % missing)
    sys.exit(1 if os.environ.get("CI") else 77)

SYNTAXES = {  # gdcmconv option: (transfer syntax UID, name)
    "--jpeg": ("1.2.840.10008.1.2.4.70", "JPEG lossless"),
    "--jpegls": ("1.2.840.10008.1.2.4.80", "JPEG-LS lossless"),
    "--j2k": ("1.2.840.10008.1.2.4.90", "JPEG 2000 lossless"),
    "--rle": ("1.2.840.10008.1.2.5", "RLE lossless"),
}
ROWS, COLUMNS, SLICES = 32, 40, 5
SPACING = (0.7, 0.8, 2.5)  # between columns, rows, slices (mm)
ROW_DIRECTION = np.array([np.cos(0.3), np.sin(0.3), 0.0])
COLUMN_DIRECTION = np.array([-np.sin(0.3) * np.cos(0.2), np.cos(0.3) * np.cos(0.2), np.sin(0.2)])
NORMAL = np.cross(ROW_DIRECTION, COLUMN_DIRECTION)
ORIGIN = np.array([-12.5, 30.25, 104.0])
INTERCEPT = -1024


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(command, check=True):
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        fail("%s exited %d:\n%s%s" % (" ".join(command), done.returncode, done.stdout, done.stderr))
    return done


def stored_pixels():
    """[slice, row, column] int16: a ramp plus a checker, every slice different."""
    k, j, i = np.meshgrid(np.arange(SLICES), np.arange(ROWS), np.arange(COLUMNS), indexing="ij")
    return (k * 300 + j * 7 + i * 3 + ((i + j) % 2) * 50 - 200).astype(np.int16)


def base_dataset(path, sop_class, series_uid, description, series_number):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(path, {}, file_meta=meta, preamble=b"\0" * 128)
    ds.is_little_endian, ds.is_implicit_VR = True, False
    ds.SOPClassUID, ds.SOPInstanceUID = sop_class, meta.MediaStorageSOPInstanceUID
    ds.PatientName, ds.PatientID, ds.StudyDate = "Phantom^Tessera", "T-001", "20261128"
    ds.StudyInstanceUID, ds.SeriesInstanceUID = "1.2.826.0.1.3680043.8.498.1", series_uid
    ds.StudyDescription, ds.SeriesDescription, ds.SeriesNumber = "GDCM checks", description, series_number
    ds.Modality = "CT"
    ds.Rows, ds.Columns = ROWS, COLUMNS
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
    ds.RescaleIntercept, ds.RescaleSlope = INTERCEPT, 1
    return ds


def position(k, tilt=0.0, missing=None):
    offset = k + (1 if missing is not None and k >= missing else 0)
    return ORIGIN + offset * SPACING[2] * NORMAL + offset * tilt * ROW_DIRECTION


def write_series(folder, pixels, series_uid, description, series_number, tilt=0.0, missing=None):
    os.makedirs(folder, exist_ok=True)
    orientation = [float(v) for v in np.concatenate([ROW_DIRECTION, COLUMN_DIRECTION])]
    for k in range(SLICES):
        path = os.path.join(folder, "im%02d.dcm" % (SLICES - 1 - k))  # names against the order
        ds = base_dataset(path, "1.2.840.10008.5.1.4.1.1.2", series_uid, description, series_number)
        ds.InstanceNumber = k + 1
        ds.ImagePositionPatient = [float(v) for v in position(k, tilt, missing)]
        ds.ImageOrientationPatient = orientation
        ds.PixelSpacing = [SPACING[1], SPACING[0]]
        ds.SliceThickness = SPACING[2]
        ds.PixelData = pixels[k].tobytes()
        ds.save_as(path, write_like_original=False)


def write_multiframe(path, pixels):
    ds = base_dataset(path, "1.2.840.10008.5.1.4.1.1.2.1", generate_uid(), "enhanced", 9)  # Enhanced CT
    ds.NumberOfFrames = SLICES
    shared = Dataset()
    orientation = Dataset()
    orientation.ImageOrientationPatient = [float(v) for v in np.concatenate([ROW_DIRECTION, COLUMN_DIRECTION])]
    measures = Dataset()
    measures.PixelSpacing = [SPACING[1], SPACING[0]]
    measures.SliceThickness = SPACING[2]
    shared.PlaneOrientationSequence = Sequence([orientation])
    shared.PixelMeasuresSequence = Sequence([measures])
    transformation = Dataset()
    transformation.RescaleIntercept, transformation.RescaleSlope, transformation.RescaleType = INTERCEPT, 1, "HU"
    shared.PixelValueTransformationSequence = Sequence([transformation])
    ds.SharedFunctionalGroupsSequence = Sequence([shared])
    frames = []
    order = [3, 0, 4, 1, 2]  # frames stored out of spatial order: the reader sorts by position
    for k in order:
        frame = Dataset()
        plane = Dataset()
        plane.ImagePositionPatient = [float(v) for v in position(k)]
        frame.PlanePositionSequence = Sequence([plane])
        frames.append(frame)
    ds.PerFrameFunctionalGroupsSequence = Sequence(frames)
    del ds.RescaleIntercept, ds.RescaleSlope  # only in the functional groups, as enhanced objects carry them
    ds.PixelData = np.stack([pixels[k] for k in order]).tobytes()
    ds.save_as(path, write_like_original=False)


def check_nifti(nifti_path, expected_values, what, spacing_z=SPACING[2]):
    image = nibabel.load(nifti_path)
    data = np.asarray(image.dataobj)  # [i, j, k]
    if data.shape != (COLUMNS, ROWS, SLICES):
        fail("%s: %s has shape %s, expected %s" % (what, nifti_path, data.shape, (COLUMNS, ROWS, SLICES)))
    got = np.transpose(data, (2, 1, 0)).astype(np.float64)  # [k, j, i]
    if not np.array_equal(got, expected_values):
        worst = np.unravel_index(np.argmax(np.abs(got - expected_values)), got.shape)
        fail("%s: voxel (k, j, i) = %s is %g, expected %g" % (what, worst, got[worst], expected_values[worst]))
    # NIfTI's affine is RAS; DICOM's geometry LPS: flip x and y.
    ras = np.diag([-1.0, -1.0, 1.0])
    expected = np.eye(4)
    expected[:3, 0] = ras @ ROW_DIRECTION * SPACING[0]
    expected[:3, 1] = ras @ COLUMN_DIRECTION * SPACING[1]
    expected[:3, 2] = ras @ NORMAL * spacing_z
    expected[:3, 3] = ras @ ORIGIN
    if not np.allclose(image.affine, expected, atol=1e-4):
        fail("%s: affine\n%s\nexpected\n%s" % (what, image.affine, expected))


def main():
    cli, work = sys.argv[1], sys.argv[2]
    if not shutil.which("gdcmconv"):
        print("SKIP: gdcmconv is missing (install libgdcm-tools)")
        sys.exit(1 if os.environ.get("CI") else 77)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    pixels = stored_pixels()
    expected = pixels.astype(np.float64) + INTERCEPT
    original = os.path.join(work, "original")
    write_series(original, pixels, generate_uid(), "axial oblique", 3)

    run([cli, "convert", original, os.path.join(work, "original.nii")])
    check_nifti(os.path.join(work, "original.nii"), expected, "uncompressed series")

    for option, (uid, name) in SYNTAXES.items():
        folder = os.path.join(work, option.strip("-"))
        os.makedirs(folder)
        for file in sorted(os.listdir(original)):
            run(["gdcmconv", option, os.path.join(original, file), os.path.join(folder, file)])
            stored = pydicom.dcmread(os.path.join(folder, file), stop_before_pixels=True).file_meta.TransferSyntaxUID
            if stored != uid:
                fail("gdcmconv %s wrote transfer syntax %s, expected %s" % (option, stored, uid))
        info = run([cli, "info", folder])
        if name not in info.stdout:
            fail("tessera-cli info %s does not name the syntax %r:\n%s" % (folder, name, info.stdout))
        run([cli, "convert", folder, os.path.join(work, option.strip("-") + ".nii")])
        check_nifti(os.path.join(work, option.strip("-") + ".nii"), expected, name + " series")
        print("ok   %s: voxels and geometry equal the uncompressed series" % name)

    multiframe = os.path.join(work, "multiframe")
    os.makedirs(multiframe)
    write_multiframe(os.path.join(multiframe, "enhanced.dcm"), pixels)
    run(["gdcmconv", "--jpegls", os.path.join(multiframe, "enhanced.dcm"), os.path.join(multiframe, "enhanced_jls.dcm")])
    os.remove(os.path.join(multiframe, "enhanced.dcm"))
    run([cli, "convert", multiframe, os.path.join(work, "multiframe.nii")])
    check_nifti(os.path.join(work, "multiframe.nii"), expected, "enhanced multi-frame object (JPEG-LS)")
    print("ok   enhanced multi-frame CT (JPEG-LS): frames sorted by their per-frame positions")

    # Two series in one folder: listed, picked by number, refused without a pick.
    both = os.path.join(work, "two_series")
    shutil.copytree(original, both)
    second = os.path.join(work, "second")
    write_series(second, pixels[::-1].copy(), generate_uid(), "reversed copy", 7)
    for file in os.listdir(second):
        shutil.copy(os.path.join(second, file), os.path.join(both, "b_" + file))
    info = run([cli, "info", both])
    for fragment in ("2 series", "axial oblique", "reversed copy", "--series"):
        if fragment not in info.stdout:
            fail("tessera-cli info on two series does not show %r:\n%s" % (fragment, info.stdout))
    run([cli, "convert", both, os.path.join(work, "picked.nii"), "--series", "3"])
    check_nifti(os.path.join(work, "picked.nii"), expected, "series 3 picked from two")
    unpicked = run([cli, "convert", both, os.path.join(work, "unpicked.nii")], check=False)
    if unpicked.returncode != 2 or "holds 2 DICOM series" not in unpicked.stderr or "reversed copy" not in unpicked.stderr:
        fail("reading a folder of two series without --series should exit 2 listing them:\n" + unpicked.stderr)
    print("ok   two series in one folder: listed, picked with --series, refused without")

    # Reported, not resampled: a missing slice, a gantry tilt.
    gap = os.path.join(work, "gap")
    write_series(gap, pixels, generate_uid(), "gap", 4, missing=2)
    info = run([cli, "info", gap])
    if "uneven slice spacing" not in info.stdout:
        fail("a missing slice should be reported as uneven spacing:\n" + info.stdout)
    tilted = os.path.join(work, "tilted")
    write_series(tilted, pixels, generate_uid(), "tilted", 5, tilt=0.5)
    info = run([cli, "info", tilted])
    if "gantry tilt" not in info.stdout or "11.3" not in info.stdout:
        fail("a tilted series should be reported with its angle (atan(0.5 / 2.5) = 11.3°):\n" + info.stdout)
    print("ok   a missing slice and a gantry tilt are reported")
    print("PASS")


if __name__ == "__main__":
    main()
