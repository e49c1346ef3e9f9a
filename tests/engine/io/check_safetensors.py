#!/usr/bin/env python3
"""Checks Tessera's safetensors files against the format, read with the Python standard library only.

    check_safetensors.py RUN_FILES_TOOL

1. Runs `RUN_FILES_TOOL write-samples DIR` and parses DIR/sample.safetensors following the spec
   (8-byte little-endian header length, JSON header, packed little-endian data), independently of
   the C++ reader, and compares every value with the formulas run_files_tool.cpp uses.
2. Writes a file the way other tools may (unsorted keys, no padding, metadata last, data not in key
   order) and checks that `RUN_FILES_TOOL read-safetensors` reads it back exactly.
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import zlib

FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL: " + message)


# Element sizes and struct codes per safetensors dtype ("bf16" is decoded by hand).
DTYPES = {"F32": (4, "f"), "F16": (2, "e"), "BF16": (2, None), "I32": (4, "i"), "U8": (1, "B")}


def sample_value(dtype, i):
    """Element i (row-major) of run_files_tool's sample tensors."""
    if dtype == "F32":
        return i * 0.25 - 3.0
    if dtype in ("BF16", "F16"):
        return i * 0.5 - 2.0
    if dtype == "I32":
        return i * 7 - 20
    if dtype == "U8":
        return i * 37 % 256
    raise ValueError(dtype)


def decode_values(dtype, raw):
    size, code = DTYPES[dtype]
    count = len(raw) // size
    if dtype == "BF16":  # the upper half of a float32
        halves = struct.unpack("<%dH" % count, raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    return list(struct.unpack("<%d%s" % (count, code), raw))


def product(shape):
    result = 1
    for extent in shape:
        result *= extent
    return result


def parse_file(path):
    """(header length, header text, header object, data bytes), checking the framing."""
    with open(path, "rb") as f:
        blob = f.read()
    check(len(blob) >= 8, "%s: shorter than 8 bytes" % path)
    (header_length,) = struct.unpack("<Q", blob[:8])
    check(8 + header_length <= len(blob), "header length %d runs past the file" % header_length)
    text = blob[8:8 + header_length].decode("utf-8")
    header = json.loads(text)
    return header_length, text, header, blob[8 + header_length:]


def check_tessera_file(path):
    header_length, text, header, data = parse_file(path)

    # Layout promises: padded with spaces to 8-byte alignment, compact JSON with sorted keys.
    check((8 + header_length) % 8 == 0, "data starts at byte %d, not a multiple of 8" % (8 + header_length))
    stripped = text.rstrip(" ")
    check(len(text) - len(stripped) < 8, "more than 7 bytes of padding")
    check(stripped == json.dumps(header, separators=(",", ":"), sort_keys=True, ensure_ascii=False),
          "header is not compact JSON with sorted keys: %r" % stripped[:200])

    # The metadata given, plus the CRC-32 of the data section, checked here with Python's own zlib.
    metadata = dict(header.get("__metadata__", {}))
    stored_crc = metadata.pop("tessera.data_crc32", None)
    check(metadata == {"format": "pt", "producer": "tessera", "step": "1200"}, "metadata: %r" % header.get("__metadata__"))
    check(stored_crc == "%08x" % zlib.crc32(data), "tessera.data_crc32 is %r, zlib.crc32 of the data is %08x" % (stored_crc, zlib.crc32(data)))

    # The tensors in the order run_files_tool writes them; the data must follow that order.
    f32_parent = [sample_value("F32", i) for i in range(4 * 6)]
    tile = [f32_parent[(1 + r) * 6 + (2 + c)] for r in range(2) for c in range(3)]
    expected = [
        ("conv.weight", "F32", [2, 3, 4], [sample_value("F32", i) for i in range(24)]),
        ("norm.scale", "BF16", [5], [sample_value("BF16", i) for i in range(5)]),
        ("head.bias", "F16", [2, 2], [sample_value("F16", i) for i in range(4)]),
        ("labels", "I32", [3, 1, 2], [sample_value("I32", i) for i in range(6)]),
        ("mask", "U8", [7], [sample_value("U8", i) for i in range(7)]),
        ("loss_scale", "F32", [], [42.5]),
        ("empty", "F32", [0, 3], []),
        ("tile", "F32", [2, 3], tile),
    ]
    names = sorted(k for k in header if k != "__metadata__")
    check(names == sorted(e[0] for e in expected), "tensor names: %r" % names)

    offset = 0
    for name, dtype, shape, values in expected:
        entry = header.get(name)
        if entry is None:
            continue
        check(set(entry) == {"dtype", "shape", "data_offsets"}, "%s: keys %r" % (name, sorted(entry)))
        check(entry["dtype"] == dtype, "%s: dtype %r, expected %r" % (name, entry["dtype"], dtype))
        check(entry["shape"] == shape, "%s: shape %r, expected %r" % (name, entry["shape"], shape))
        begin, end = entry["data_offsets"]
        size = product(shape) * DTYPES[dtype][0]
        check(begin == offset, "%s: begins at %d, expected %d (packed in write order)" % (name, begin, offset))
        check(end - begin == size, "%s: %d bytes, expected %d" % (name, end - begin, size))
        got = decode_values(dtype, data[begin:end])
        check(got == values, "%s: values %r, expected %r" % (name, got[:8], values[:8]))
        offset = end
    check(offset == len(data), "data is %d bytes, the tensors cover %d" % (len(data), offset))


def check_foreign_file(tool, directory):
    """A file laid out as other writers may: C++ must read exactly what Python put there."""
    tensors = [  # name, dtype, shape, values: data written in this order
        ("z.last_in_keys", "F32", [3], [1.5, -0.0, 3.0e38]),
        ("a.first_in_keys", "I32", [2, 2], [-(2 ** 31), 2 ** 31 - 1, 0, 7]),
        ("m", "BF16", [2], [1.0, -2.5]),
        ("h", "F16", [], [65504.0]),
        ("u", "U8", [0, 5], []),
        ("b", "U8", [3], [0, 128, 255]),
    ]
    header = {}
    data = b""
    for name, dtype, shape, values in tensors:
        size, code = DTYPES[dtype]
        if dtype == "BF16":
            raw = b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16) for v in values)
        else:
            raw = struct.pack("<%d%s" % (len(values), code), *values)
        header[name] = {"shape": shape, "data_offsets": [len(data), len(data) + len(raw)], "dtype": dtype}
        data += raw
    header["__metadata__"] = {"written by": "python", "ü": "ß"}
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")  # keys unsorted, spaces, no padding
    if (8 + len(text)) % 8 == 0:
        text += b"\n"  # make sure the data is not aligned: readers must not assume it
    path = os.path.join(directory, "foreign.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)

    result = subprocess.run([tool, "read-safetensors", path], capture_output=True, text=True)
    check(result.returncode == 0, "read-safetensors failed: %s" % result.stderr.strip())
    if result.returncode != 0:
        return
    read = json.loads(result.stdout)
    check(read["metadata"] == header["__metadata__"], "metadata read back as %r" % read["metadata"])
    got_names = [t["name"] for t in read["tensors"]]
    # In data order, which is the order written here (the empty "u" shares its offset with "b" and,
    # holding no bytes, comes first).
    check(got_names == [t[0] for t in tensors], "names read back in the order %r" % got_names)
    by_name = {t["name"]: t for t in read["tensors"]}
    for name, dtype, shape, values in tensors:
        t = by_name.get(name)
        if t is None:
            continue
        check(t["dtype"] == dtype and t["shape"] == shape, "%s read back as %s %r" % (name, t["dtype"], t["shape"]))
        expected = values
        if dtype == "F32":
            expected = [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]
        same = len(t["values"]) == len(expected) and all(
            a == b and math.copysign(1, a) == math.copysign(1, b) for a, b in zip(t["values"], expected))
        check(same, "%s values read back as %r, expected %r" % (name, t["values"], expected))

    # A damaged copy must be refused with a message naming the file.
    broken = os.path.join(directory, "broken.safetensors")
    with open(path, "rb") as f:
        blob = f.read()
    with open(broken, "wb") as f:
        f.write(blob[:-1])
    result = subprocess.run([tool, "read-safetensors", broken], capture_output=True, text=True)
    check(result.returncode == 1 and "broken.safetensors" in result.stderr and "run past the end" in result.stderr,
          "a truncated file gave status %d: %s" % (result.returncode, result.stderr.strip()))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_safetensors.py RUN_FILES_TOOL")
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="tessera_safetensors_check_") as directory:
        result = subprocess.run([tool, "write-samples", directory], capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit("run_files_tool write-samples failed: " + result.stderr)
        check_tessera_file(os.path.join(directory, "sample.safetensors"))
        check_foreign_file(tool, directory)
    if FAILURES:
        sys.exit("%d check(s) failed" % len(FAILURES))
    print("safetensors: Tessera's file parses per the spec, and a foreign layout reads back exactly")


if __name__ == "__main__":
    main()
