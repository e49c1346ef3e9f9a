#!/usr/bin/env python3
"""Regenerates the committed seed corpora under tests/fuzz/corpus/ (a few small files per target).

    tests/fuzz/make_seeds.py <tessera-cli>

Volumes come from `tessera-cli phantom` (the engine's own writers), experiments and device presets from
resources/, DICOM files from python3-pydicom's test files, PNG, TIFF, safetensors and checkpoint indexes
are written here from their specifications (standard library only). Crash reproducers found by fuzzing
live beside the seeds (named repro-*) and are kept: this script only (re)writes seed-* files. So are the
NRRD files Teem wrote (corpus/nrrd/teem_*: `teem-unu make` and `teem-unu save -e gzip|text|hex`).
"""
import json
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORPUS = HERE / "corpus"
PYDICOM = pathlib.Path("/usr/lib/python3/dist-packages/pydicom/data/test_files")
MHD_SEPARATOR = b"#TESSERA-RAW#\n"  # fuzz_metaimage_mhd.cpp


def put(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ("seed-" + name)).write_bytes(data)


def volumes(cli):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        shapes = {"3d": "12,10,6", "2d": "9,7,1"}
        for tag, size in shapes.items():
            for ext in ("nii", "nii.gz", "mha", "mhd", "nrrd", "mgh", "mgz"):
                out = tmp / f"{tag}.{ext}"
                labels = tmp / f"{tag}_labels.{ext}"
                if ext == "mhd":  # the data file must be fuzz.raw, next to fuzz.mhd (fuzz_metaimage_mhd.cpp)
                    (tmp / tag).mkdir(exist_ok=True)
                    out, labels = tmp / tag / "fuzz.mhd", None
                cmd = [cli, "phantom", str(out), "--size", size, "--spacing", "0.8,0.9,2.5", "--seed", "3"]
                if labels:
                    cmd += ["--labels", str(labels)]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        for tag in shapes:
            put("nifti", f"phantom_{tag}.nii", (tmp / f"{tag}.nii").read_bytes())
            put("nifti", f"labels_{tag}.nii", (tmp / f"{tag}_labels.nii").read_bytes())
            put("nifti_gz", f"phantom_{tag}.nii.gz", (tmp / f"{tag}.nii.gz").read_bytes())
            put("nifti_gz", f"labels_{tag}.nii.gz", (tmp / f"{tag}_labels.nii.gz").read_bytes())
            # Uncompressed: fuzz_nifti_gz gzips inputs that lack the gzip magic.
            put("nifti_gz", f"plain_{tag}.nii", (tmp / f"{tag}_labels.nii").read_bytes())
            put("metaimage_mha", f"phantom_{tag}.mha", (tmp / f"{tag}.mha").read_bytes())
            put("metaimage_mha", f"labels_{tag}.mha", (tmp / f"{tag}_labels.mha").read_bytes())
            header = (tmp / tag / "fuzz.mhd").read_bytes()
            raw = (tmp / tag / "fuzz.raw").read_bytes()
            put("metaimage_mhd", f"phantom_{tag}.mhd", header + MHD_SEPARATOR + raw)
            put("nrrd", f"phantom_{tag}.nrrd", (tmp / f"{tag}.nrrd").read_bytes())
            put("nrrd", f"labels_{tag}.nrrd", (tmp / f"{tag}_labels.nrrd").read_bytes())
            # fuzz_mgh reads an input with the gzip magic as .mgz, any other as .mgh.
            put("mgh", f"phantom_{tag}.mgh", (tmp / f"{tag}.mgh").read_bytes())
            put("mgh", f"labels_{tag}.mgh", (tmp / f"{tag}_labels.mgh").read_bytes())
            put("mgh", f"phantom_{tag}.mgz", (tmp / f"{tag}.mgz").read_bytes())
        # A NIfTI-2 header is not written by the engine: make one from the NIfTI-1 file.
        put("nifti", "phantom_3d_nifti2.nii", nifti2_from_nifti1((tmp / "3d.nii").read_bytes()))


def nifti2_from_nifti1(n1):
    """The same image with a NIfTI-2 header (540 bytes + 4 extension bytes)."""
    dim = struct.unpack_from("<8h", n1, 40)
    intent = struct.unpack_from("<3f", n1, 56)
    intent_code, datatype, bitpix, slice_start = struct.unpack_from("<4h", n1, 68)
    pixdim = struct.unpack_from("<8f", n1, 76)
    vox_offset, scl_slope, scl_inter = struct.unpack_from("<3f", n1, 108)
    qform_code, sform_code = struct.unpack_from("<2h", n1, 252)
    quatern = struct.unpack_from("<6f", n1, 256)
    srow = struct.unpack_from("<12f", n1, 280)
    h = bytearray(540)
    struct.pack_into("<i", h, 0, 540)
    h[4:12] = b"n+2\0\r\n\x1a\n"
    struct.pack_into("<hh", h, 12, datatype, bitpix)
    struct.pack_into("<8q", h, 16, *dim)
    struct.pack_into("<3d", h, 80, *intent)
    struct.pack_into("<8d", h, 104, *pixdim)
    struct.pack_into("<q", h, 168, 544)
    struct.pack_into("<2d", h, 176, scl_slope, scl_inter)
    struct.pack_into("<q", h, 224, slice_start)
    struct.pack_into("<2i", h, 344, qform_code, sform_code)
    struct.pack_into("<6d", h, 352, *quatern)
    struct.pack_into("<12d", h, 400, *srow)
    struct.pack_into("<i", h, 504, intent_code)
    return bytes(h) + b"\0\0\0\0" + n1[int(vox_offset):]


def dicom():
    names = ["CT_small.dcm", "MR_small.dcm", "MR_small_bigendian.dcm", "MR_small_implicit.dcm", "MR_small_expb.dcm",
             "MR_truncated.dcm", "MR_small_RLE.dcm", "ExplVR_BigEndNoMeta.dcm", "ExplVR_LitEndNoMeta.dcm",
             "no_meta_group_length.dcm", "rtdose_1frame.dcm", "SC_rgb_small_odd.dcm", "SC_rgb_rle_2frame.dcm",
             "meta_missing_tsyntax.dcm", "badVR.dcm", "JPEG-lossy.dcm", "image_dfl.dcm", "empty_charset_LEI.dcm",
             "nested_priv_SQ.dcm"]
    for name in names:
        if (PYDICOM / name).exists():
            put("dicom", name, (PYDICOM / name).read_bytes())


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width, height, bit_depth, colour, rows, extra=b""):
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour, 0, 0, 0)
    raw = b"".join(b"\0" + row for row in rows)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", zlib.compress(raw))
            + png_chunk(b"IEND", b""))


def pngs():
    w, h = 7, 5
    put("png", "gray8.png", png(w, h, 8, 0, [bytes((x * 30 + y * 7) % 256 for x in range(w)) for y in range(h)]))
    put("png", "gray16.png", png(w, h, 16, 0, [b"".join(struct.pack(">H", x * 9000 + y) for x in range(w))
                                               for y in range(h)]))
    put("png", "rgb8.png", png(w, h, 8, 2, [bytes(v for x in range(w) for v in (x * 30, y * 40, 200)) for y in range(h)]))
    put("png", "rgba8.png", png(w, h, 8, 6, [bytes(v for x in range(w) for v in (x * 30, y * 40, 9, 255))
                                             for y in range(h)]))
    palette = png_chunk(b"PLTE", bytes([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255]))
    put("png", "palette.png", png(w, h, 8, 3, [bytes((x + y) % 4 for x in range(w)) for y in range(h)], palette))
    put("png", "gray1.png", png(16, 2, 1, 0, [b"\xa5\x0f", b"\xff\x00"]))


def tiff(pages, little=True):
    """pages: (width, height, bits, sample_format, samples_per_pixel, compression, data) each."""
    e = "<" if little else ">"
    out = bytearray(b"II*\0" if little else b"MM\0*")
    out += struct.pack(e + "I", 0)
    link = 4  # where the next IFD's offset goes
    for width, height, bits, fmt, spp, compression, data in pages:
        if compression == 8:
            data = zlib.compress(data)
        data_offset = len(out)
        out += data
        if len(out) % 2:
            out += b"\0"
        bits_offset = len(out)
        out += struct.pack(e + "H" * spp, *([bits] * spp))
        entries = [(256, 3, 1, width), (257, 3, 1, height),
                   (258, 3, spp, bits if spp == 1 else bits_offset), (259, 3, 1, compression),
                   (262, 3, 1, 1 if spp == 1 else 2), (273, 4, 1, data_offset), (277, 3, 1, spp),
                   (278, 3, 1, height), (279, 4, 1, len(data)), (284, 3, 1, 1), (339, 3, 1, fmt)]
        ifd = len(out)
        struct.pack_into(e + "I", out, link, ifd)
        out += struct.pack(e + "H", len(entries))
        for tag, kind, count, value in entries:
            if kind == 3 and count == 1:
                out += struct.pack(e + "HHIHH", tag, kind, count, value, 0)
            else:
                out += struct.pack(e + "HHII", tag, kind, count, value)
        link = len(out)
        out += struct.pack(e + "I", 0)
    return bytes(out)


def tiffs():
    w, h = 6, 4
    u8 = bytes((x * 40 + y) % 256 for y in range(h) for x in range(w))
    u16 = b"".join(struct.pack("<H", x * 1000 + y) for y in range(h) for x in range(w))
    u16be = b"".join(struct.pack(">H", x * 1000 + y) for y in range(h) for x in range(w))
    f32 = b"".join(struct.pack("<f", x * 0.5 - y) for y in range(h) for x in range(w))
    rgb = bytes(v for y in range(h) for x in range(w) for v in (x * 40, y * 60, 100))
    put("tiff", "u8.tif", tiff([(w, h, 8, 1, 1, 1, u8)]))
    put("tiff", "u16.tif", tiff([(w, h, 16, 1, 1, 1, u16)]))
    put("tiff", "u16_bigendian.tif", tiff([(w, h, 16, 1, 1, 1, u16be)], little=False))
    put("tiff", "f32.tif", tiff([(w, h, 32, 3, 1, 1, f32)]))
    put("tiff", "rgb8.tif", tiff([(w, h, 8, 1, 3, 1, rgb)]))
    put("tiff", "u8_deflate.tif", tiff([(w, h, 8, 1, 1, 8, u8)]))
    put("tiff", "stack3_u16.tif", tiff([(w, h, 16, 1, 1, 1, u16)] * 3))
    put("tiff", "stack2_u8_deflate.tif", tiff([(w, h, 8, 1, 1, 8, u8), (w, h, 8, 1, 1, 8, u8[::-1])]))


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    f32 = struct.pack("<6f", *[0.5 * i for i in range(6)])
    put("safetensors", "f32.safetensors", safetensors([("conv.weight", "F32", [2, 3], f32)], {"step": "12"}))
    put("safetensors", "mixed.safetensors", safetensors([
        ("a.bf16", "BF16", [2, 2], b"\x80\x3f" * 4), ("b.f16", "F16", [3], b"\x00\x3c" * 3),
        ("c.i32", "I32", [2], struct.pack("<2i", -7, 9)), ("d.u8", "U8", [1, 4], b"\x01\x02\x03\x04"),
        ("e.scalar", "F32", [], struct.pack("<f", 3.0)), ("f.empty", "F32", [0, 3], b"")],
        {"format": "tessera", "experiment": "unet2d"}))
    put("safetensors", "no_metadata.safetensors", safetensors([("x", "F32", [1], struct.pack("<f", 1.0))]))
    put("safetensors", "f64_unsupported.safetensors", safetensors([("x", "F64", [1], struct.pack("<d", 1.0))]))
    put("safetensors", "empty.safetensors", safetensors([], {}))


def checkpoint_index_seeds():
    def index(steps):
        return json.dumps({"format": "tessera-checkpoints", "version": 1, "checkpoints": [
            {"step": s, "weights": f"model.ckpt-{s:06d}.safetensors", "state": f"state.ckpt-{s:06d}.safetensors"}
            for s in steps]}, indent=2).encode() + b"\n"
    put("checkpoint_index", "three", index([100, 200, 300]))
    put("checkpoint_index", "one", index([7]))
    put("checkpoint_index", "empty", index([]))
    put("checkpoint_index", "unsorted", index([300, 100]))


def text_seeds():
    for path in sorted((ROOT / "resources" / "experiments").glob("*.json")):
        put("experiment", path.name, path.read_bytes())
    for path in sorted((ROOT / "resources" / "devices").glob("*.json")):
        put("device", path.name, path.read_bytes())
    dims = ["[[1, 4, 1, 1], None]", "[[1, 2, 2, 2, 1], [1, 2, 2, 2, 1]]", "None", "[1, 1, 4, 1]",
            "{'image': [1, 2, 2, 1], 'mask': None}", "[{'image': [1, 4, 1, 1]}, {'label': [1, 4, 1, 1],}]",
            "(1, 2, 2, 1)", "[[1,4,1,1],null]", "[\n  [1, 8, 1, 1, 1],\n  None,\n]", "[]"]
    for i, text in enumerate(dims):
        put("partition_dims", f"{i:02d}.txt", text.encode())


def varint(value):
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(field, payload):
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def tf_example(features):
    """A tf.Example in protobuf's wire format: features {key: (kind, values)}, kind 1 bytes, 2 float, 3 int64."""
    entries = b""
    for key, (kind, values) in features.items():
        if kind == 1:
            body = b"".join(length_delimited(1, value) for value in values)
        elif kind == 2:
            body = length_delimited(1, b"".join(struct.pack("<f", value) for value in values))
        else:
            body = length_delimited(1, b"".join(varint(value) for value in values))
        entries += length_delimited(1, length_delimited(1, key.encode()) + length_delimited(2, length_delimited(kind, body)))
    return length_delimited(1, entries)


def hdf5_seeds():
    """Small HDF5 files as h5py writes them (python3-h5py): CREMI-like chunked gzip, contiguous 2D, attributes."""
    try:
        import h5py
        import numpy as np
    except ImportError:
        print("python3-h5py missing: HDF5 seeds not written")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "seed.h5"
        with h5py.File(path, "w") as f:
            d = f.create_dataset("volumes/raw", data=(np.arange(4 * 6 * 8) % 251).astype(np.uint8).reshape(4, 6, 8),
                                 chunks=(2, 3, 4), compression="gzip", shuffle=True)
            d.attrs["resolution"] = np.array([40.0, 4.0, 4.0])
            d.attrs["offset"] = np.array([8.0, 4.0, 4.0])
            f.create_dataset("volumes/labels/clefts", data=(np.arange(4 * 6 * 8) % 3).astype(np.uint64).reshape(4, 6, 8), chunks=(4, 6, 8))
        put("hdf5", "cremi.h5", path.read_bytes())
        with h5py.File(path, "w") as f:
            d = f.create_dataset("section", data=np.linspace(-1, 1, 5 * 7).astype(">f4").reshape(5, 7))
            d.attrs["element_size_um"] = np.array([0.5, 0.25])
            d.attrs["direction"] = np.array([0, -1, 0, 1, 0, 0, 0, 0, 1], dtype=np.float64)
        put("hdf5", "section.h5", path.read_bytes())


def tf_example_seeds():
    put("tf_example", "imagenet.bin", tf_example({"image/encoded": (1, [b"\xff\xd8\xff\xe0" + bytes(12)]),
                                                   "image/class/label": (3, [417]), "image/format": (1, [b"JPEG"])}))
    put("tf_example", "lists.bin", tf_example({"bbox": (2, [0.25, -1.5, 3.0e38]), "ids": (3, [-7, 1 << 40, 0]), "empty": (1, [])}))
    put("tf_example", "unpacked.bin", bytes([0x0A, 0x10, 0x0A, 0x0E, 0x0A, 0x01]) + b"x" + bytes([0x12, 0x09, 0x1A, 0x07, 0x08, 0x05, 0x08, 0x80, 0x01, 0x08, 0x7F]))
    put("tf_example", "empty.bin", b"")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for target in CORPUS.glob("*/seed-*"):
        target.unlink()
    volumes(sys.argv[1])
    dicom()
    pngs()
    tiffs()
    safetensors_seeds()
    checkpoint_index_seeds()
    text_seeds()
    tf_example_seeds()
    total = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    print(f"wrote the seeds under {CORPUS}: {total} bytes in all")


if __name__ == "__main__":
    main()
