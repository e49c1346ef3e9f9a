#!/usr/bin/env python3
"""HDF5 volumes against independent tools: h5py writes and reads, nibabel reads what tessera-cli converts.

    hdf5_checks.py <tessera-cli> <work folder>

1. h5py writes a CREMI-like file: /volumes/raw (uint8 [z, y, x] = 7 × 50 × 66, chunked 4 × 32 × 32, gzip,
   resolution [40, 4, 4] nm, offset [80, 8, 4] nm), /volumes/labels/clefts (uint64, chunked, shuffle + gzip),
   /volumes/labels/big_endian (float32 stored big-endian, contiguous), /volumes/labels/lzf (h5py's own
   LZF filter, which the HDF5 library does not have), a 2D /section and a 4-axis /stack.
2. `tessera-cli info file.h5` lists every dataset with its shape, type and storage, says why /stack and
   /volumes/labels/lzf cannot be read, and describes /volumes/raw (CREMI's default) with its spacing.
3. `tessera-cli convert file.h5:/volumes/raw raw.nii.gz` (and the labels with --labels, the big-endian
   floats, the 2D section): nibabel's voxels equal h5py's exactly (transposed to x, y, z), spacing
   4e-6 × 4e-6 × 4e-5 mm (4 × 4 × 40 nm) and the origin from offset (LPS → RAS), both to 1e-6 relative.
4. `tessera-cli convert raw.nii.gz out.h5:/volumes/raw` then labels into the same file: h5py reads both
   datasets back (exact voxels, [z, y, x]), chunked with gzip, resolution [40, 4, 4] and offset [80, 8, 4].
5. Errors (exit 2, nothing written): the LZF dataset (names the filter and h5repack), a missing dataset
   (lists the file's datasets), a file that is not HDF5, a labels dataset holding 2.5.
Exits 0 when all hold, 1 naming the first that does not; 77 (skipped) when h5py or nibabel is missing and
CI is not set."""

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

Z, Y, X = 7, 50, 66


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(command, expect=0):
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != expect:
        fail("%s exited %d, expected %d:\n%s%s" % (" ".join(command), done.returncode, expect, done.stdout, done.stderr))
    return done.stdout + done.stderr


def expect_in(text, parts, what):
    for part in parts:
        if part not in text:
            fail("%s: expected %r in:\n%s" % (what, part, text))


def main():
    cli, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    rng = np.random.default_rng(5)
    raw = rng.integers(0, 256, size=(Z, Y, X), dtype=np.uint8)
    clefts = np.zeros((Z, Y, X), dtype=np.uint64)
    clefts[2:5, 10:30, 20:50] = 3
    clefts[0, 0:5, 0:5] = 1000
    floats = rng.normal(size=(Z, Y, X)).astype(np.float32)
    section = rng.integers(-300, 300, size=(Y, X), dtype=np.int16)

    cremi = os.path.join(work, "sample_A.h5")
    with h5py.File(cremi, "w") as f:
        d = f.create_dataset("volumes/raw", data=raw, chunks=(4, 32, 32), compression="gzip")
        d.attrs["resolution"] = np.array([40.0, 4.0, 4.0])
        d.attrs["offset"] = np.array([80.0, 8.0, 4.0])
        d = f.create_dataset("volumes/labels/clefts", data=clefts, chunks=(7, 25, 33), shuffle=True, compression="gzip")
        d.attrs["resolution"] = np.array([40.0, 4.0, 4.0])
        f.create_dataset("volumes/labels/big_endian", data=floats.astype(">f4"))
        f.create_dataset("volumes/labels/lzf", data=raw, chunks=(7, 25, 33), compression="lzf")
        f.create_dataset("section", data=section)
        f.create_dataset("stack", data=np.zeros((2, 3, 4, 5), dtype=np.uint8))

    # 2. info
    text = run([cli, "info", cremi])
    expect_in(text, ["/volumes/raw", "7×50×66", "uint8", "chunked 4×32×32, gzip level 4", "/volumes/labels/clefts", "uint64",
                     "shuffle", "/volumes/labels/lzf", "lzf", "h5repack", "/stack", "4 axes", "/section", "int16",
                     "66×50×7 voxels", "4e-06×4e-06×4e-05 mm"], "info")

    # 3. convert out, read with nibabel
    def converted(name, flags=()):
        out = os.path.join(work, name.replace("/", "_").strip("_") + ".nii.gz")
        run([cli, "convert", *flags, cremi + ":" + name, out])
        return nibabel.load(out)

    image = converted("/volumes/raw")
    if not np.array_equal(np.asarray(image.dataobj), raw.transpose(2, 1, 0)):
        fail("/volumes/raw through NIfTI differs from what h5py wrote")
    zooms = image.header.get_zooms()
    if not np.allclose(zooms, (4e-6, 4e-6, 4e-5), rtol=1e-6, atol=0):
        fail("spacing %s, expected 4 × 4 × 40 nm = 4e-6 × 4e-6 × 4e-5 mm" % (zooms,))
    # offset [z, y, x] = [80, 8, 4] nm is LPS (4e-6, 8e-6, 8e-5) mm, RAS (-x, -y, z).
    if not np.allclose(image.affine[:3, 3], (-4e-6, -8e-6, 8e-5), rtol=1e-6, atol=0):
        fail("origin %s from the offset attribute" % (image.affine[:3, 3],))
    labels = converted("/volumes/labels/clefts", ["--labels"])
    if not np.array_equal(np.asarray(labels.dataobj), clefts.astype(np.int64).transpose(2, 1, 0)):
        fail("/volumes/labels/clefts through NIfTI differs")
    big = converted("/volumes/labels/big_endian")
    if not np.array_equal(np.asarray(big.dataobj), floats.transpose(2, 1, 0)):
        fail("the big-endian floats through NIfTI differ")
    flat = converted("/section")
    if not np.array_equal(np.asarray(flat.dataobj).reshape(X, Y), section.transpose(1, 0)):
        fail("the 2D section through NIfTI differs")

    # 4. convert in, read with h5py
    written = os.path.join(work, "written.h5")
    run([cli, "convert", os.path.join(work, "volumes_raw.nii.gz"), written + ":/volumes/raw"])
    run([cli, "convert", "--labels", os.path.join(work, "volumes_labels_clefts.nii.gz"), written + ":volumes/labels/clefts"])
    with h5py.File(written, "r") as f:
        d = f["volumes/raw"]
        if not np.array_equal(d[...], raw) or d.dtype != np.uint8:
            fail("written /volumes/raw: %s %s differs from the original" % (d.dtype, d.shape))
        if d.chunks is None or d.compression != "gzip":
            fail("written /volumes/raw is not chunked with gzip: chunks %s, compression %s" % (d.chunks, d.compression))
        if not np.allclose(d.attrs["resolution"], (40, 4, 4), atol=1e-6) or not np.allclose(d.attrs["offset"], (80, 8, 4), atol=1e-6):
            fail("written attributes resolution %s offset %s" % (d.attrs.get("resolution"), d.attrs.get("offset")))
        if not np.array_equal(f["volumes/labels/clefts"][...], clefts.astype(np.int64)):
            fail("written /volumes/labels/clefts differs")

    # 5. errors
    text = run([cli, "convert", cremi + ":/volumes/labels/lzf", os.path.join(work, "lzf.nii")], expect=2)
    expect_in(text, ["lzf", "h5repack"], "lzf dataset")
    text = run([cli, "convert", cremi + ":/volumes/nothing", os.path.join(work, "nothing.nii")], expect=2)
    expect_in(text, ["no dataset /volumes/nothing", "/volumes/raw", "/section"], "missing dataset")
    not_hdf5 = os.path.join(work, "text.h5")
    with open(not_hdf5, "w") as f:
        f.write("hello")
    text = run([cli, "info", not_hdf5], expect=2)
    expect_in(text, ["is not an HDF5 file"], "not HDF5")
    text = run([cli, "convert", "--labels", cremi + ":/volumes/labels/big_endian", os.path.join(work, "floats.nii")], expect=2)
    expect_in(text, ["whole number"], "fractional labels")
    for name in ("lzf.nii", "nothing.nii", "floats.nii"):
        if os.path.exists(os.path.join(work, name)):
            fail("%s was written by a failed convert" % name)
    print("hdf5 checks: h5py and nibabel agree with tessera-cli on %d datasets" % 6)


main()
