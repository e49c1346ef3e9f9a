#!/usr/bin/env python3
"""The bad-input catalogue: everything a user can feed Tessera that is wrong, one line per case.

Each case builds its input in a fresh folder, runs a command, and expects an exit code and a fragment of
the message. Cases that open an image also go through the studio's own open path (`tessera --check-open`,
File ▸ Open scripted), which must show the same problem and not abort. A case that crashes (a signal, exit
134), hangs (past its time limit) or passes silently fails.

    catalogue.py <tessera-cli> <tessera or -> <work dir> [case-name-substring ...]

Exit codes: 0 success (a warning case passes with 0 and its warning), 2 bad input, 1 a failure after the
work started (a run that diverged), as the CLI documents.
"""
import gzip
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import zlib

# ---- inputs -----------------------------------------------------------------------------------------


def nifti_header(dims=(8, 8, 4), datatype=16, bitpix=32, pixdim=(1.0, 1.0, 1.0), vox_offset=352.0, slope=0.0,
                 intercept=0.0, magic=b"n+1\0", ndim=None, sizeof_hdr=348):
    """A NIfTI-1 header (348 bytes + the 4-byte extension flag), written field by field."""
    header = bytearray(352)
    struct.pack_into("<i", header, 0, sizeof_hdr)
    full = list(dims) + [1] * (7 - len(dims))
    struct.pack_into("<8h", header, 40, len(dims) if ndim is None else ndim, *[min(max(d, -32768), 32767) for d in full])
    struct.pack_into("<hh", header, 70, datatype, bitpix)
    struct.pack_into("<8f", header, 76, 1.0, *(list(pixdim) + [1.0] * (7 - len(pixdim))))
    struct.pack_into("<fff", header, 108, vox_offset, slope, intercept)
    header[344:348] = magic
    return bytes(header)


def float_voxels(count, special=None):
    values = [1.0] * count
    for index, value in (special or {}).items():
        values[index] = value
    return struct.pack(f"<{count}f", *values)


def write(path, data, compress=False):
    with open(path, "wb") as f:
        f.write(gzip.compress(data, 1) if compress else data)


def nii(name, data):
    def make(work):
        path = os.path.join(work, name)
        write(path, data, name.endswith(".gz"))
        return path
    return make


def raw(name, data):
    def make(work):
        path = os.path.join(work, name)
        write(path, data if isinstance(data, bytes) else data.encode())
        return path
    return make


def gzip_bomb(work):
    """A real .nii.gz whose header truthfully promises 512×512×128 float32 voxels (128 MiB of zeros in a
    ~130 KiB file): with TESSERA_MAX_VOLUME_BYTES=64MiB it is more than a volume may use."""
    path = os.path.join(work, "bomb.nii.gz")
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(compressor.compress(nifti_header(dims=(512, 512, 128))))
        block = bytes(1 << 20)
        for _ in range(128):
            f.write(compressor.compress(block))
        f.write(compressor.flush())
    return path


def fifo(name):
    def make(work):
        path = os.path.join(work, name)
        os.mkfifo(path)
        return path
    return make


def link_to(name, target):
    def make(work):
        path = os.path.join(work, name)
        os.symlink(target, path)
        return path
    return make


def folder(name, files=()):
    def make(work):
        path = os.path.join(work, name)
        os.makedirs(path)
        for file_name, data in files:
            write(os.path.join(path, file_name), data)
        return path
    return make


def metaimage(name, header_lines, data=b"", raw_name=None, raw_data=None, subfolder=None):
    def make(work):
        where = os.path.join(work, subfolder) if subfolder else work
        os.makedirs(where, exist_ok=True)
        path = os.path.join(where, name)
        write(path, ("\n".join(header_lines) + "\n").encode() + data)
        if raw_name is not None:
            write(os.path.join(work, raw_name), raw_data)
        return path
    return make


def tiff_file(pages, big=False, pad=0):
    """Little-endian TIFF (or BigTIFF) bytes: each page a dict of tag -> value (an int, SHORT or LONG by
    size) and optionally "data": bytes placed before the directories, StripOffsets pointing at them."""
    header_size = 16 if big else 8
    blob = bytearray(b"\0" * header_size)
    data_offsets = []
    for page in pages:
        data_offsets.append(len(blob))
        blob += page.get("data", b"")
    blob += b"\0" * pad
    entry_size, count_format, offset_format = (20, "<Q", "<Q") if big else (12, "<H", "<I")
    ifd_offsets = []
    for index, page in enumerate(pages):
        if len(blob) % 2:
            blob += b"\0"
        ifd_offsets.append(len(blob))
        tags = {k: v for k, v in page.items() if k != "data"}
        if "data" in page:
            tags.setdefault(273, data_offsets[index])
        blob += struct.pack(count_format, len(tags))
        for tag in sorted(tags):
            value = tags[tag]
            kind = 3 if value < 65536 else 4
            if big:
                blob += struct.pack("<HHQQ", tag, kind, 1, value)
            else:
                blob += struct.pack("<HHII", tag, kind, 1, value)
        blob += struct.pack(offset_format, 0)  # the next directory, patched below
    for index, offset in enumerate(ifd_offsets):
        entries = struct.unpack_from(count_format, blob, offset)[0]
        next_at = offset + struct.calcsize(count_format) + entry_size * entries
        struct.pack_into(offset_format, blob, next_at, ifd_offsets[index + 1] if index + 1 < len(ifd_offsets) else 0)
    if big:
        blob[0:8] = b"II+\0\x08\0\0\0"
        struct.pack_into("<Q", blob, 8, ifd_offsets[0])
    else:
        blob[0:4] = b"II*\0"
        struct.pack_into("<I", blob, 4, ifd_offsets[0])
    return bytes(blob)


def tiff_page(width, height, compression=1, data=None, byte_counts=True, bits=8):
    data = bytes(width * height * bits // 8) if data is None else data
    page = {256: width, 257: height, 258: bits, 259: compression, 262: 1, 277: 1, 278: height, "data": data}
    if byte_counts:
        page[279] = len(data)
    return page


def tiff_repeating_width():
    """A 4×4 page whose second entry (ImageLength) is turned into a second ImageWidth."""
    blob = bytearray(tiff_file([tiff_page(4, 4)]))
    first_entry = struct.unpack_from("<I", blob, 4)[0] + 2
    assert struct.unpack_from("<H", blob, first_entry + 12)[0] == 257
    struct.pack_into("<H", blob, first_entry + 12, 256)
    return bytes(blob)


def tiff_retyped_width(new_type):
    """A 60000×60000 page (4 bytes of strips) whose ImageWidth is stored with another TIFF type."""
    blob = bytearray(tiff_file([tiff_page(60000, 60000, data=b"\0" * 4)]))
    first_entry = struct.unpack_from("<I", blob, 4)[0] + 2
    assert struct.unpack_from("<H", blob, first_entry)[0] == 256
    struct.pack_into("<H", blob, first_entry + 2, new_type)
    return bytes(blob)


MHA = ["ObjectType = Image", "NDims = 3", "DimSize = 4 4 2", "ElementType = MET_FLOAT", "ElementSpacing = 1 1 1"]


def dicom_file(rows=4, columns=4, slope=b"1 ", pixel_bytes=None):
    """A single-slice explicit-VR little-endian DICOM, element by element (16-bit unsigned pixels)."""
    def element(group, number, vr, value):
        if vr in (b"OB", b"OW"):
            return struct.pack("<HH", group, number) + vr + b"\0\0" + struct.pack("<I", len(value)) + value
        return struct.pack("<HH", group, number) + vr + struct.pack("<H", len(value)) + value
    us = lambda value: struct.pack("<H", value)
    pixels = b"\1\0" * rows * columns if pixel_bytes is None else pixel_bytes
    return (b"\0" * 128 + b"DICM" + element(0x0002, 0x0010, b"UI", b"1.2.840.10008.1.2.1\0")
            + element(0x0028, 0x0002, b"US", us(1)) + element(0x0028, 0x0010, b"US", us(rows))
            + element(0x0028, 0x0011, b"US", us(columns)) + element(0x0028, 0x0100, b"US", us(16))
            + element(0x0028, 0x0103, b"US", us(0)) + element(0x0028, 0x1053, b"DS", slope)
            + element(0x7fe0, 0x0010, b"OW", pixels))


def hdf5(name, make_datasets, cut=None):
    """An HDF5 file written by h5py (python3-h5py, a test dependency): make_datasets(f) fills it; cut keeps
    that many bytes of it."""
    def make(work):
        import h5py
        path = os.path.join(work, name)
        with h5py.File(path, "w") as f:
            make_datasets(f)
        if cut is not None:
            with open(path, "rb") as f:
                data = f.read()
            write(path, data[:cut])
        return path
    return make


def cremi_like(f):
    import numpy
    f.create_dataset("volumes/raw", data=numpy.arange(8 * 16 * 16, dtype=numpy.uint8).reshape(8, 16, 16), chunks=(4, 8, 8),
                     compression="gzip").attrs["resolution"] = [40.0, 4.0, 4.0]
    f.create_dataset("volumes/labels/clefts", data=numpy.zeros((8, 16, 16), dtype=numpy.uint64))


def volume_experiment(image, labels, **data):
    """A 3D U-Net on one HDF5 volume (the "volume" source)."""
    def make(work):
        hdf5("cremi.h5", cremi_like)(work)
        return experiment(model={"kind": "unet", "depth": 2, "base_width": 4, "num_classes": 2}, input={"channels": 1, "size": [8, 8, 8]},
                          input_partition_dims=[[1, 2, 1, 1, 1], None],
                          data={"source": "volume", "image": image, "labels": labels, "holdout_fraction": 0, **data})(work)
    return make


def tiny_experiment(**changes):
    """A 2D U-Net small enough to train in a second: the base the training cases change."""
    e = {
        "version": 1, "name": "tiny",
        "model": {"kind": "unet", "depth": 2, "base_width": 4, "num_classes": 2},
        "input": {"channels": 1, "size": [32, 32]},
        "global_batch": 2, "num_cores_per_replica": 2, "input_partition_dims": [[1, 2, 1, 1], None],
        "optimizer": {"kind": "adam"},
        "data": {"source": "synthetic_em", "image_size": [64, 64], "num_train_images": 2, "num_eval_images": 1},
        "schedule": {"kind": "constant", "learning_rate": 0.01},
        "steps": 2, "steps_per_eval": 0, "steps_per_checkpoint": 1, "keep_checkpoints": 3, "seed": 3,
    }
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(e.get(key), dict):
            e[key] = {**e[key], **value}
        else:
            e[key] = value
    return e


def experiment(name="exp.json", text=None, **changes):
    def make(work):
        path = os.path.join(work, name)
        with open(path, "w") as f:
            f.write(text if text is not None else json.dumps(tiny_experiment(**changes)))
        return path
    return make


def with_nan_image_folder(work):
    """A folder source whose image holds a NaN voxel (NIfTI float32), and its labels."""
    data = os.path.join(work, "data")
    os.makedirs(data)
    write(os.path.join(data, "case.nii"), nifti_header(dims=(64, 64, 1)) + float_voxels(64 * 64, {100: float("nan")}))
    write(os.path.join(data, "case_seg.nii"), nifti_header(dims=(64, 64, 1), datatype=2, bitpix=8) + bytes(64 * 64))
    return experiment(data={"source": "folder", "images": "data", "labels": "data"})(work)


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def tfrecord(data):
    """One TFRecord: length, masked CRC-32C of it, data, masked CRC-32C of the data."""
    def masked(blob):
        crc = crc32c(blob)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data))


def tf_example(image, label):
    """A tf.Example with image/encoded and image/class/label, in protobuf's wire format by hand."""
    def varint(value):
        out = b""
        while True:
            low = value & 0x7F
            value >>= 7
            out += bytes([low | (0x80 if value else 0)])
            if not value:
                return out
    def field(number, payload):  # length-delimited
        return varint(number << 3 | 2) + varint(len(payload)) + payload
    def entry(key, feature):
        return field(1, field(1, key.encode()) + field(2, feature))
    encoded = field(1, field(1, image))                      # Feature.bytes_list = BytesList{value}
    labelled = field(3, field(1, varint(label)))             # Feature.int64_list = Int64List{packed value}
    return field(1, entry("image/encoded", encoded) + entry("image/class/label", labelled))


def grey_png(width, height, level):
    rows = b"".join(b"\x00" + bytes([level]) * width for _ in range(height))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def classifier_on_shards(records=None, change=None, data=None):
    """A tiny ResNet reading shards/train-00000-of-00001 (4 labelled PNGs, or `records`), the file then
    changed by `change(bytes) -> bytes`."""
    def make(work):
        os.makedirs(os.path.join(work, "shards"))
        blob = b"".join(tfrecord(r) for r in (records or [tf_example(grey_png(12, 10, 40 * i), 1 + i % 2) for i in range(4)]))
        write(os.path.join(work, "shards", "train-00000-of-00001"), change(blob) if change else blob)
        e = tiny_experiment(model={"kind": "resnet", "depth": 18, "num_classes": 2}, input={"channels": 3, "size": [32, 32]},
                            num_cores_per_replica=1, input_partition_dims=[[1, 1, 1, 1], None], global_batch=4,
                            steps_per_checkpoint=0)
        e["data"] = data or {"source": "tfrecord", "records": "shards/train-*", "holdout_fraction": 0}
        return experiment(text=json.dumps(e))(work)
    return make


def flip_byte(offset):
    return lambda blob: blob[:offset] + bytes([blob[offset] ^ 0x20]) + blob[offset + 1:]


def trained(steps=2, then=None, **changes):
    """A model_dir trained `steps` steps by the CLI under test, then changed by `then(model_dir)`."""
    def make(work, cli):
        path = experiment(**changes)(work)
        result = subprocess.run([cli, "train", path, "--steps", str(steps), "--model-dir", os.path.join(work, "run"), "--plain"],
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise RuntimeError("could not train the case's model_dir:\n" + result.stdout + result.stderr)
        if then:
            then(os.path.join(work, "run"))
        return path
    make.needs_cli = True
    return make


def hold_lock(model_dir):
    """Another process holds the model_dir's lock, as a second tessera-cli train would."""
    code = ("import fcntl,json,os,sys,time\n"
            f"f=open({os.path.join(model_dir, 'lock')!r},'w')\n"
            "fcntl.flock(f,fcntl.LOCK_EX)\n"
            "f.write(json.dumps({'pid':os.getpid(),'host':'testhost','started':'today','command':'other train'}));f.flush()\n"
            "print('locked',flush=True)\ntime.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    process.stdout.readline()
    LOCK_HOLDERS.append(process)


LOCK_HOLDERS = []


def truncate(name, size):
    return lambda model_dir: os.truncate(os.path.join(model_dir, name), size)


def remove(name):
    return lambda model_dir: os.remove(os.path.join(model_dir, name))


def index_pointing_outside(model_dir):
    with open(os.path.join(model_dir, "checkpoint"), "w") as f:
        json.dump({"format": "tessera-checkpoints", "version": 1, "checkpoints": [
            {"step": 2, "weights": "../../../../etc/passwd", "state": "state.ckpt-000002.safetensors"}]}, f)


def nan_weights_checkpoint(model_dir):
    """Rewrites every listed weights file so one tensor holds a NaN (a diverged run's checkpoint)."""
    for name in os.listdir(model_dir):
        if not name.startswith("model.ckpt-"):
            continue
        path = os.path.join(model_dir, name)
        with open(path, "rb") as f:
            blob = f.read()
        length = struct.unpack("<Q", blob[:8])[0]
        header = json.loads(blob[8:8 + length])
        header.get("__metadata__", {}).pop("tessera.data_crc32", None)  # as a tool that keeps no checksum writes it
        first = next(k for k in sorted(header) if k != "__metadata__")
        begin = header[first]["data_offsets"][0]
        data = bytearray(blob[8 + length:])
        data[begin:begin + 4] = struct.pack("<f", float("nan"))
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + bytes(data))


def device_dir(work):
    devices = os.path.join(work, "devices")
    os.makedirs(devices)
    shutil.copy(os.path.join(RESOURCES, "devices", "tpu_v3.json"), devices)
    with open(os.path.join(devices, "tpu_v3.json")) as f:
        device = json.load(f)
    device["peak_flops_per_core"]["f32"]["value"] = 1e308
    with open(os.path.join(devices, "fast.json"), "w") as f:
        json.dump(device, f)
    return experiment(device="fast")(work)


RESOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "resources")

# ---- the catalogue: name, input, command ({in} is the input, {work} the case's folder), exit code, fragment,
# whether the studio's open path runs it too, and (optionally) environment variables. ----------------------
H = nifti_header
V = float_voxels(8 * 8 * 4)
VARIED = struct.pack("<256f", *[i * 0.37 for i in range(256)])  # does not compress away
CASES = [
    # NIfTI
    ("nii_missing", lambda w: os.path.join(w, "absent.nii.gz"), ["info", "{in}"], 2, "no such file", True),
    ("nii_empty", nii("empty.nii", b""), ["info", "{in}"], 2, "holds only 0 bytes", True),
    ("nii_text", nii("notes.nii", b"these are notes, not an image\n" * 20), ["info", "{in}"], 2, "is not a NIfTI image", True),
    ("nii_gz_text", nii("notes.nii.gz", b"these are notes, not an image\n" * 20), ["info", "{in}"], 2, "is not a NIfTI image", True),
    ("nii_header_truncated", nii("cut.nii", H()[:200]), ["info", "{in}"], 2, "truncated", True),
    ("nii_gz_stream_cut", lambda w: (write(os.path.join(w, "cut.nii.gz"), gzip.compress(H() + VARIED)[:300]), os.path.join(w, "cut.nii.gz"))[1],
     ["info", "{in}"], 2, "truncated", True),
    ("nii_voxels_truncated", nii("short.nii", H() + V[:100]), ["info", "{in}"], 2, "is truncated", True),
    ("nii_gz_voxels_truncated", nii("short.nii.gz", H() + V[:100]), ["info", "{in}"], 2, "compressed data ends", True),
    ("nii_gz_corrupt_deflate", lambda w: (write(os.path.join(w, "bad.nii.gz"), (lambda b: b[:40] + bytes(x ^ 0xff for x in b[40:80]) + b[80:])(gzip.compress(H() + V))),
                                         os.path.join(w, "bad.nii.gz"))[1], ["info", "{in}"], 2, "damaged", True),
    ("nii_dim0_zero", nii("d0.nii", H(ndim=0) + V), ["info", "{in}"], 2, "dim[0] (the number of axes) is 0", True),
    ("nii_negative_dim", nii("neg.nii", H(dims=(8, -8, 4)) + V), ["info", "{in}"], 2, "zero or negative dimension", True),
    ("nii_4d", nii("t.nii", H(dims=(8, 8, 4, 3)) + V * 3), ["info", "{in}"], 2, "more than one volume", True),
    ("nii_complex", nii("c.nii", H(datatype=32, bitpix=64) + V * 2), ["info", "{in}"], 2, "unsupported voxel type", True),
    ("nii_unknown_datatype", nii("u.nii", H(datatype=999, bitpix=32) + V), ["info", "{in}"], 2, "unknown voxel type", True),
    ("nii_bitpix_mismatch", nii("b.nii", H(bitpix=16) + V), ["info", "{in}"], 2, "bitpix is 16", True),
    ("nii_vox_offset_in_header", nii("o.nii", H(vox_offset=100) + V), ["info", "{in}"], 2, "inside the 348-byte header", True),
    ("nii_vox_offset_1e20", nii("far.nii", H(vox_offset=1e20) + V), ["info", "{in}"], 2, "past the end of the file", True),
    ("nii_gz_vox_offset_1e20", nii("far.nii.gz", H(vox_offset=1e20) + V), ["info", "{in}"], 2, "expand to", True),
    ("nii_claims_1e12_voxels", nii("huge.nii", H(dims=(10000, 10000, 10000)) + V), ["info", "{in}"], 2, "is truncated", True),
    ("nii_gz_claims_1e12_voxels", nii("huge.nii.gz", H(dims=(10000, 10000, 10000)) + V), ["info", "{in}"], 2, "damaged header", True),
    ("nii_gz_bomb_over_budget", gzip_bomb, ["info", "{in}"], 2, "TESSERA_MAX_VOLUME_BYTES", True),
    ("nii_pixdim_nan", nii("pn.nii", H(pixdim=(float("nan"), 1, 1)) + V), ["info", "{in}"], 2, "pixdim[1] is nan", True),
    ("nii_pixdim_inf", nii("pi.nii", H(pixdim=(1, float("inf"), 1)) + V), ["info", "{in}"], 2, "pixdim[2] is inf", True),
    ("nii_pixdim_zero_warns", nii("pz.nii", H(pixdim=(1, 1, 0)) + V), ["info", "{in}"], 0, "1 mm assumed", True),
    ("nii_slope_inf", nii("si.nii", H(slope=float("inf")) + V), ["info", "{in}"], 2, "scl_slope is inf", True),
    ("nii_intercept_nan", nii("inan.nii", H(slope=2.0, intercept=float("nan")) + V), ["info", "{in}"], 2, "scl_inter is nan", True),
    ("nii_nan_voxels_warn", nii("nan.nii", H() + float_voxels(256, {5: float("nan"), 9: float("inf")})), ["info", "{in}"], 0,
     "2 voxels are NaN or infinite (the first at i, j, k = 5, 0, 0)", True),
    ("nii_hdr_img_pair", nii("pair.nii", H(magic=b"ni1\0") + V), ["info", "{in}"], 2, ".hdr/.img pair", True),
    ("nii_analyze", nii("an.nii", H(magic=b"\0\0\0\0") + V), ["info", "{in}"], 2, "Analyze", True),
    ("nii_bad_sizeof_hdr", nii("sz.nii", H(sizeof_hdr=1234) + V), ["info", "{in}"], 2, "header size of 1234", True),
    # Not regular files
    ("fifo_nii_gz", fifo("pipe.nii.gz"), ["info", "{in}"], 2, "a FIFO (named pipe)", True),
    ("char_device_nii", link_to("null.nii", "/dev/null"), ["info", "{in}"], 2, "a character device", True),
    ("folder_named_nii_gz", folder("dir.nii.gz"), ["info", "{in}"], 2, "DICOM", True),
    ("unknown_extension", raw("image.xyz", b"data"), ["info", "{in}"], 2, "cannot tell the format", True),
    ("no_extension", raw("image", b"data"), ["info", "{in}"], 2, "it has no extension", True),
    # MetaImage
    ("mha_no_elementdatafile", metaimage("a.mha", MHA), ["info", "{in}"], 2, "no ElementDataFile", True),
    ("mha_binary", raw("b.mha", bytes(range(256)) * 4), ["info", "{in}"], 2, "is not a MetaImage file", True),
    ("mha_truncated_data", metaimage("t.mha", MHA + ["ElementDataFile = LOCAL"], b"\0" * 20), ["info", "{in}"], 2, "is truncated", True),
    ("mhd_data_file_absolute", metaimage("e.mhd", MHA + ["ElementDataFile = /etc/passwd"]), ["info", "{in}"], 2,
     "outside the header's folder", True),
    ("mhd_data_file_dotdot", metaimage("e.mhd", MHA + ["ElementDataFile = ../secret.raw"], raw_name="secret.raw",
                                       raw_data=b"\0" * 128, subfolder="inner"), ["info", "{in}"], 2, "outside the header's folder", True),
    ("mhd_data_file_missing", metaimage("m.mhd", MHA + ["ElementDataFile = m.raw"]), ["info", "{in}"], 2, "which does not exist", True),
    ("mhd_data_file_fifo", lambda w: (os.mkfifo(os.path.join(w, "p.raw")), metaimage("p.mhd", MHA + ["ElementDataFile = p.raw"])(w))[1],
     ["info", "{in}"], 2, "not a regular file", True),
    ("mha_two_channels", metaimage("c.mha", MHA + ["ElementNumberOfChannels = 2", "ElementDataFile = LOCAL"], b"\0" * 256),
     ["info", "{in}"], 2, "values per voxel", True),
    ("mha_ascii", metaimage("asc.mha", MHA + ["BinaryData = False", "ElementDataFile = LOCAL"], b"0 " * 32), ["info", "{in}"], 2, "ASCII", True),
    ("mha_zero_spacing", metaimage("z.mha", MHA[:4] + ["ElementSpacing = 1 0 1", "ElementDataFile = LOCAL"], b"\0" * 128),
     ["info", "{in}"], 2, "zero or negative voxel spacing", True),
    ("mha_dimsize_huge", metaimage("h.mha", ["ObjectType = Image", "NDims = 3", "DimSize = 100000 100000 100000",
                                             "ElementType = MET_FLOAT", "ElementDataFile = LOCAL"]), ["info", "{in}"], 2, "not plausible", True),
    ("mha_over_budget", metaimage("ob.mha", ["ObjectType = Image", "NDims = 3", "DimSize = 4096 4096 64", "ElementType = MET_FLOAT",
                                             "ElementDataFile = LOCAL"]), ["info", "{in}"], 2, "TESSERA_MAX_VOLUME_BYTES", True),
    ("mha_repeated_key", metaimage("r.mha", MHA + ["NDims = 2", "ElementDataFile = LOCAL"], b"\0" * 128), ["info", "{in}"], 2,
     "gives NDims again", True),
    ("mha_list_of_files", metaimage("l.mha", MHA + ["ElementDataFile = LIST"]), ["info", "{in}"], 2, "several files", True),
    # MetaIO reads "LOcAL" as a file name: refused by name, before VTK opens (and leaks) a stream for it.
    ("mha_local_misspelt", metaimage("m.mha", MHA + ["ElementDataFile = LOcAL"], b"\0" * 128), ["info", "{in}"], 2,
     "LOCAL, Local or local", True),
    # VTK's MetaIO strcpy's a string value into a 255-byte field (CI's fuzz smoke: a heap-buffer-overflow).
    ("mha_long_comment", metaimage("lc.mha", MHA[:1] + ["Comment = " + "x" * 300] + MHA[1:] + ["ElementDataFile = LOCAL"],
                                   b"\0" * 128), ["info", "{in}"], 2, "at most 254 per value", True),
    # MetaIO matches keys with their case: a lower-case key is another field to it.
    ("mha_key_case", metaimage("kc.mha", MHA + ["elementDataFile = LOCAL"], b"\0" * 128), ["info", "{in}"], 2,
     "MetaImage keys are case-sensitive", True),
    # NRRD: a file of another kind, and a detached header whose data file is missing.
    ("nrrd_text", raw("notes.nrrd", "not a volume\n" * 10), ["info", "{in}"], 2, "does not start with the magic NRRD0001", True),
    ("nhdr_missing_data", raw("m.nhdr", "NRRD0004\ntype: uchar\ndimension: 3\nsizes: 4 4 2\nencoding: raw\ndata file: m.raw\n"),
     ["info", "{in}"], 2, "which does not exist", True),
    # FreeSurfer's MGH: a file of another kind, and a 4D volume.
    ("mgh_text", raw("notes.mgh", "not a volume\n" * 40), ["info", "{in}"], 2, "is not an MGH volume", True),
    ("mgh_frames", raw("f.mgh", bytes([0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 0]) + bytes(284 - 24 + 40)),
     ["info", "{in}"], 2, "holds 5 frames", True),
    # 2D images and DICOM
    ("png_text", raw("notes.png", "not a picture\n" * 10), ["info", "{in}"], 2, "notes.png", True),
    ("png_truncated", raw("cut.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 30), ["info", "{in}"], 2, "cut.png", True),
    ("tiff_garbage", raw("g.tif", b"II*\0" + b"\xff" * 60), ["info", "{in}"], 2, "g.tif", True),
    ("tiff_unknown_compression", raw("u.tif", tiff_file([tiff_page(64, 64, compression=225, data=b"\x55" * 40)])),
     ["info", "{in}"], 2, "compression scheme 225", True),
    # libtiff computes the missing counts from the page size: the whole file bounds what LZW can expand to.
    ("tiff_no_byte_counts", raw("n.tif", tiff_file([tiff_page(10752, 29284, compression=5, data=b"\x80" * 40, byte_counts=False)])),
     ["info", "{in}"], 2, "but the file holds", True),
    ("tiff_second_page_too_big", raw("p.tif", tiff_file([tiff_page(4, 4), tiff_page(60000, 60000, data=b"\0" * 16)])),
     ["info", "{in}"], 2, "its page 1 declares 60000×60000", True),
    ("bigtiff_too_big", raw("b.tif", tiff_file([tiff_page(100000, 100000, data=b"\0" * 64)], big=True)),
     ["info", "{in}"], 2, "its page 0 declares 100000×100000", True),
    ("tiff_rows_per_strip_huge", raw("rps.tif", tiff_file([{**tiff_page(4000, 4), 278: 60000}])), ["info", "{in}"], 2,
     "60000 rows per strip", True),
    ("tiff_repeated_tag", raw("r.tif", tiff_repeating_width()), ["info", "{in}"], 2, "gives TIFF tag 256 twice", True),
    # libtiff reads a size from any integer type: an SSHORT width (8) is checked like a SHORT one.
    ("tiff_signed_short_width", raw("ss.tif", tiff_retyped_width(8)), ["info", "{in}"], 2, "declares 60000×60000", True),
    ("tiff_width_as_rational", raw("rw.tif", tiff_retyped_width(5)), ["info", "{in}"], 2, "not as an integer", True),
    # Deflate may expand 1100×: 1 MiB of strips can hold 8192×8192 pixels, over the catalogue's 64 MiB budget.
    ("tiff_stack_over_budget", raw("s.tif", tiff_file([tiff_page(8192, 8192, compression=8, data=b"\0" * (1 << 20))])),
     ["info", "{in}"], 2, "TESSERA_MAX_VOLUME_BYTES", True),
    ("dicom_empty_folder", folder("series"), ["info", "{in}"], 2, "DICOM", True),
    ("dicom_garbage_file", raw("x.dcm", b"\0" * 128 + b"DICM" + b"\xff" * 64), ["info", "{in}"], 2, "x.dcm", True),
    ("dicom_pixels_short", raw("s.dcm", dicom_file(rows=256, columns=256, pixel_bytes=b"\0" * 512)), ["info", "{in}"], 2,
     "promises 256×256 pixels", True),
    ("dicom_zero_rescale_slope", raw("z.dcm", dicom_file(slope=b"0 ")), ["info", "{in}"], 2, "unusable Rescale Slope", True),
    # Label maps
    ("labels_not_whole_numbers", lambda w: (write(os.path.join(w, "img.nii"), H() + V),
                                           write(os.path.join(w, "lab.nii"), H() + float_voxels(256, {3: 0.5})), os.path.join(w, "img.nii"))[2],
     ["info", "{in}", "--labels", "{work}/lab.nii"], 2, "whole number", True),
    ("labels_other_grid", lambda w: (write(os.path.join(w, "img.nii"), H() + V),
                                    write(os.path.join(w, "lab.nii"), H(dims=(4, 4, 4)) + float_voxels(64)), os.path.join(w, "img.nii"))[2],
     ["info", "{in}", "--labels", "{work}/lab.nii"], 2, "not on the image's grid", True),
    # Experiment files
    ("experiment_missing", lambda w: os.path.join(w, "absent.json"), ["validate", "{in}"], 2, "no such file", False),
    ("experiment_is_folder", folder("exp.json"), ["validate", "{in}"], 2, "is a folder, not a file", False),
    ("experiment_is_fifo", fifo("exp.json"), ["validate", "{in}"], 2, "a FIFO (named pipe)", False),
    ("experiment_not_json", experiment(text="version: 1\nmodel: unet\n"), ["validate", "{in}"], 2, "not valid JSON at byte", False),
    ("experiment_empty", experiment(text=""), ["validate", "{in}"], 2, "not valid JSON", False),
    ("experiment_duplicate_key", experiment(text='{"version": 1, "version": 1}'), ["validate", "{in}"], 2, "duplicate key", False),
    ("experiment_typo_field", experiment(text='{"version": 1, "modle": {}}'), ["validate", "{in}"], 2, 'did you mean "model"', False),
    # label_mapping keys: a range written another way, and two keys covering one label.
    ("label_mapping_range_dots", experiment(data={"source": "synthetic_em", "label_mapping": {"1..255": 1}}), ["validate", "{in}"], 2,
     'did you mean "1-255"?', False),
    ("label_mapping_overlap", experiment(data={"source": "synthetic_em", "label_mapping": {">0": 1, "4": 0}}), ["validate", "{in}"], 2,
     "both cover label 4", False),
    ("experiment_dims_product", experiment(input_partition_dims=[[1, 3, 1, 1], None]), ["validate", "{in}"], 2, "multiply to 3", False),
    ("experiment_dims_zero", experiment(input_partition_dims=[[1, 0, 1, 1], None]), ["validate", "{in}"], 2, "input_partition_dims", False),
    ("experiment_input_4096", experiment(input={"size": [8192, 8192]}, data={"image_size": [8192, 8192]}), ["validate", "{in}"], 2,
     "TESSERA_HOST_MEMORY", False),
    ("preset_input_4096", lambda w: experiment(text=json.dumps(dict(json.load(open(os.path.join(RESOURCES, "experiments", "unet2d_em_4way.json"))),
                                                                    input={"channels": 1, "size": [4096, 4096]},
                                                                    data={"source": "synthetic_em", "image_size": [4096, 4096]})))(w),
     ["validate", "{in}"], 2, "TESSERA_HOST_MEMORY", False),
    ("experiment_input_4096_train", experiment(input={"size": [8192, 8192]}, data={"image_size": [8192, 8192]}),
     ["train", "{in}", "--model-dir", "{work}/run"], 2, "TESSERA_HOST_MEMORY", False),
    ("experiment_empty_data_folder", lambda w: (os.makedirs(os.path.join(w, "data")), experiment(data={"source": "folder", "images": "data"})(w))[1],
     ["validate", "{in}"], 2, "data", False),
    ("experiment_non_finite_option", experiment(data={"non_finite": "ignore"}), ["validate", "{in}"], 2, "data.non_finite", False),
    ("model_dir_with_nul", experiment(model_dir="runs/a\u0000b"), ["train", "{in}"], 2, "control character", False),
    ("device_flops_1e308", device_dir, ["plan", "{in}"], 2, "implausibly large", False, {"TESSERA_DEVICES_DIR": "{work}/devices"}),
    ("device_unknown", experiment(device="tpu_v9"), ["plan", "{in}"], 2, 'got "tpu_v9"; did you mean', False),
    # Command-line arguments
    ("steps_zero", experiment(), ["train", "{in}", "--steps", "0"], 2, "--steps must be a whole number from 1", False),
    ("steps_text", experiment(), ["train", "{in}", "--steps", "many"], 2, "--steps must be a whole number", False),
    ("threads_zero", experiment(), ["train", "{in}", "--threads", "0"], 2, "--threads must be a whole number from 1 to 256", False),
    ("threads_negative", experiment(), ["train", "{in}", "--threads", "-1"], 2, "--threads must be", False),
    ("calibrate_threads_zero", lambda w: w, ["calibrate", "--threads", "0"], 2, "--threads must be", False),
    ("phantom_bad_size", lambda w: os.path.join(w, "p.nii.gz"), ["phantom", "{in}", "--size", "40,32"], 2, "--size", False),
    ("convert_to_png", nii("img.nii", H() + V), ["convert", "{in}", "{work}/out.png"], 2, "cannot write", False),
    # TFRecord shards (a classifier's data.source "tfrecord"): refused at the start when the pattern or the
    # framing is wrong; a record's data, example and label are read with its batch, so those stop the run (exit 1).
    ("tfrecord_no_shard", classifier_on_shards(data={"source": "tfrecord", "records": "shards/valid-*", "holdout_fraction": 0}),
     ["train", "{in}", "--model-dir", "{work}/run"], 2, "matches no file", False),
    ("tfrecord_truncated", classifier_on_shards(change=lambda blob: blob[:-9]), ["train", "{in}", "--model-dir", "{work}/run"], 2,
     "the file is truncated", False),
    ("tfrecord_length_crc", classifier_on_shards(change=flip_byte(2)), ["validate", "{in}"], 2,
     "corrupt record at byte offset 0: the CRC of its length", False),
    ("tfrecord_data_crc", classifier_on_shards(change=flip_byte(40)), ["train", "{in}", "--model-dir", "{work}/run"], 1,
     "corrupt record at byte offset 0: the CRC of its", False),
    ("tfrecord_not_an_example", classifier_on_shards(records=[b"\x0a\x05hello"] * 4), ["train", "{in}", "--model-dir", "{work}/run"], 1,
     "is not a tf.Example", False),
    ("tfrecord_label_out_of_range", classifier_on_shards(records=[tf_example(grey_png(8, 8, 9), 7)] * 4),
     ["train", "{in}", "--model-dir", "{work}/run"], 1, "has image/class/label 7, which is class 6 with data.first_label 1", False),
    ("tfrecord_image_undecodable", classifier_on_shards(records=[tf_example(b"GIF89a not supported", 1)] * 4),
     ["train", "{in}", "--model-dir", "{work}/run"], 1, "is not a PNG, JPEG or BMP file", False),
    ("tfrecord_for_a_unet", experiment(data={"source": "tfrecord", "records": "shards/*"}), ["validate", "{in}"], 2,
     "a U-Net segments", False),
    # HDF5 volumes (python3-h5py writes them)
    ("hdf5_not_hdf5", nii("notes.h5", b"these are notes, not HDF5\n" * 20), ["info", "{in}"], 2, "is not an HDF5 file", True),
    ("hdf5_truncated", hdf5("cut.h5", cremi_like, cut=3000), ["convert", "{in}:/volumes/raw", "{work}/out.nii"], 2, "cut.h5", True),
    ("hdf5_missing_dataset", hdf5("cremi.h5", cremi_like), ["convert", "{in}:/volumes/nothing", "{work}/out.nii"], 2,
     "has no dataset /volumes/nothing. Its datasets: /volumes/labels/clefts, /volumes/raw", False),
    ("hdf5_several_datasets", hdf5("pair.h5", lambda f: (f.create_dataset("a", data=[[1, 2], [3, 4]]), f.create_dataset("b", data=[[1, 2], [3, 4]]))),
     ["convert", "{in}", "{work}/out.nii"], 2, "holds several datasets: name one", True),
    ("hdf5_four_axes", hdf5("stack.h5", lambda f: f.create_dataset("stack", data=[[[[1, 2]]]])), ["convert", "{in}", "{work}/out.nii"], 2,
     "holds no 2D or 3D numeric dataset", True),
    ("hdf5_strings", hdf5("names.h5", lambda f: f.create_dataset("names", data=[b"a", b"b"])), ["convert", "{in}:/names", "{work}/out.nii"],
     2, "not integers or floats", False),
    ("hdf5_lzf", hdf5("lzf.h5", lambda f: f.create_dataset("raw", data=[[1, 2], [3, 4]], chunks=(1, 2), compression="lzf")),
     ["convert", "{in}:/raw", "{work}/out.nii"], 2, "compressed with lzf, which this machine's HDF5 library does not have", False),
    ("hdf5_fractional_labels", hdf5("floats.h5", lambda f: f.create_dataset("labels", data=[[0.5, 1.0]])),
     ["convert", "--labels", "{in}:/labels", "{work}/out.nii"], 2, "whole number", False),
    ("volume_source_missing_labels", volume_experiment("cremi.h5:/volumes/raw", "cremi.h5:/volumes/labels/none", read_by_region=True),
     ["train", "{in}", "--model-dir", "{work}/run"], 2, "has no dataset /volumes/labels/none", False),
    ("volume_source_gz_by_region", volume_experiment("img.nii.gz", "img.nii.gz", read_by_region=True),
     ["train", "{in}", "--model-dir", "{work}/run"], 2, "region by region", False),
    ("volume_source_resize_by_region", volume_experiment("cremi.h5:/volumes/raw", "cremi.h5:/volumes/labels/clefts", read_by_region=True,
                                                         static_shape="resize"),
     ["train", "{in}", "--model-dir", "{work}/run"], 2, 'use "crop"', False),
    ("volume_source_without_labels", volume_experiment("cremi.h5:/volumes/raw", ""), ["validate", "{in}"], 2, "data.labels", False),
    ("volume_source_read_by_region_text", volume_experiment("cremi.h5:/volumes/raw", "cremi.h5:/volumes/labels/clefts", read_by_region="yes"),
     ["validate", "{in}"], 2, "data.read_by_region", False),
    # Runs and their model_dirs
    ("train_nan_voxels", with_nan_image_folder, ["train", "{in}", "--model-dir", "{work}/run"], 2, "NaN or infinite voxel", False),
    ("validate_nan_voxels", with_nan_image_folder, ["validate", "{in}"], 2, "data.non_finite", False),
    ("train_nan_voxels_as_zero", lambda w: (with_nan_image_folder(w), experiment(data={"source": "folder", "images": "data",
                                                                                         "labels": "data", "non_finite": "zero"})(w))[1],
     ["train", "{in}", "--model-dir", "{work}/run", "--plain"], 0, "summary", False),
    ("train_diverges", experiment(model={"batch_norm": False}, optimizer={"kind": "sgd"}, schedule={"kind": "constant", "learning_rate": 100},
                                  steps=30),
     ["train", "{in}", "--model-dir", "{work}/run", "--plain"], 1, "NaN or infinite", False),
    ("train_model_dir_locked", trained(then=hold_lock), ["train", "{in}", "--steps", "3", "--model-dir", "{work}/run"], 2,
     "in use by another run: pid", False),
    ("train_index_lost", trained(then=remove("checkpoint")), ["train", "{in}", "--steps", "3", "--model-dir", "{work}/run", "--plain"], 0,
     "rebuilt from 2 checkpoints", False),
    ("train_index_outside", trained(then=index_pointing_outside), ["train", "{in}", "--steps", "3", "--model-dir", "{work}/run", "--plain"],
     0, "not a plain file name", False),
    ("train_latest_truncated", trained(then=truncate("model.ckpt-000002.safetensors", 64)),
     ["train", "{in}", "--steps", "3", "--model-dir", "{work}/run", "--plain"], 0, "skipped the checkpoint of step 2", False),
    ("train_latest_state_missing", trained(then=remove("state.ckpt-000002.safetensors")),
     ["train", "{in}", "--steps", "3", "--model-dir", "{work}/run", "--plain"], 0, "resumed from the checkpoint of step 1", False),
    ("train_nan_checkpoints", trained(then=nan_weights_checkpoint), ["train", "{in}", "--steps", "3", "--model-dir", "{work}/run"], 2,
     "holds NaN or infinite values", False),
    ("model_dir_is_a_file", lambda w: (write(os.path.join(w, "run"), b"x"), experiment()(w))[1],
     ["train", "{in}", "--model-dir", "{work}/run"], 2, "cannot create the model_dir", False),
    ("eval_without_checkpoint", lambda w: (os.makedirs(os.path.join(w, "run")), experiment()(w))[1],
     ["eval", "{in}", "--model-dir", "{work}/run"], 2, "holds no checkpoint", False),
    ("eval_missing_model_dir", experiment(), ["eval", "{in}", "--model-dir", "{work}/run", "--no-predictions"], 2, "does not exist", False),
    ("predict_without_checkpoint", lambda w: (os.makedirs(os.path.join(w, "run")), nii("img.nii", H(dims=(64, 64, 1)) + float_voxels(4096))(w),
                                              experiment()(w))[2], ["predict", "{in}", "{work}/img.nii", "--model-dir", "{work}/run"], 2,
     "--random-weights", False),
    ("predict_out_is_a_file", trained(then=lambda d: (write(os.path.join(os.path.dirname(d), "out"), b"x"),
                                                       write(os.path.join(os.path.dirname(d), "img.nii"), H(dims=(64, 64, 1)) + float_voxels(4096)))),
     ["predict", "{in}", "{work}/img.nii", "--model-dir", "{work}/run", "--out", "{work}/out"], 2, "not a folder", False),
    ("predict_nan_input", trained(then=lambda d: write(os.path.join(os.path.dirname(d), "img.nii"),
                                                        H(dims=(64, 64, 1)) + float_voxels(4096, {7: float("nan")}))),
     ["predict", "{in}", "{work}/img.nii", "--model-dir", "{work}/run", "--out", "{work}/out"], 2, "NaN or infinite", False),
]

TIME_LIMIT = 120  # seconds a case may take before it counts as a hang


def run(command, env):
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIME_LIMIT, env=env, errors="replace")
    except subprocess.TimeoutExpired:
        return None, f"hung: no exit after {TIME_LIMIT} s"
    return result.returncode, result.stdout + result.stderr


def check(name, tool, code, output, expected_code, fragment):
    if code is None:
        return f"{name} [{tool}]: {output}"
    if code < 0 or code >= 128:
        return f"{name} [{tool}]: crashed (exit {code}{', signal ' + signal.Signals(-code).name if code < 0 else ''})\n{output}"
    if code != expected_code:
        return f"{name} [{tool}]: expected exit code {expected_code}, got {code}\n{output}"
    if fragment not in output:
        return f"{name} [{tool}]: expected {fragment!r} in the message, got\n{output}"
    return None


def main():
    cli, studio, work = sys.argv[1:4]
    wanted = sys.argv[4:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSERA_MAX_VOLUME_BYTES="64MiB", OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    names = [case[0] for case in CASES]
    assert len(names) == len(set(names)), "case names must be unique"
    failures, count = [], 0
    for name, make, arguments, expected_code, fragment, in_studio, *extra in CASES:
        if wanted and not any(w in name for w in wanted):
            continue
        count += 1
        case_dir = os.path.join(work, name)
        os.makedirs(case_dir)
        try:
            path = make(case_dir, cli) if getattr(make, "needs_cli", False) else make(case_dir)
        except Exception as error:  # a broken generator is a failure of the catalogue, named
            failures.append(f"{name}: could not build the input: {error}")
            continue
        command = [cli] + [a.replace("{in}", path).replace("{work}", case_dir) for a in arguments]
        case_env = dict(env, **{k: v.replace("{work}", case_dir) for k, v in (extra[0] if extra else {}).items()})
        code, output = run(command, case_env)
        problem = check(name, "tessera-cli", code, output, expected_code, fragment)
        if problem is None and in_studio and studio != "-":
            # The studio's File ▸ Open path: same outcome, and it must not abort.
            studio_command = [studio, "--check-open", path]
            if "--labels" in arguments:
                studio_command += ["--labels", arguments[arguments.index("--labels") + 1].replace("{work}", case_dir)]
            studio_env = dict(case_env)
            if os.environ.get("TESSERA_STUDIO_PRELOAD"):  # ASan builds: see tests/CMakeLists.txt
                studio_env["LD_PRELOAD"] = os.environ["TESSERA_STUDIO_PRELOAD"]
            code, output = run(studio_command, studio_env)
            problem = check(name, "studio", code, output, expected_code, fragment)
        for holder in LOCK_HOLDERS:
            holder.kill()
            holder.wait()
        LOCK_HOLDERS.clear()
        print(("FAIL " if problem else "ok   ") + name, flush=True)
        if problem:
            failures.append(problem)
    for failure in failures:
        print("\n" + failure)
    print(f"\n{count - len(failures)} passed, {len(failures)} failed")
    return 1 if failures or count == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
