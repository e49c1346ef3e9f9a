#!/usr/bin/env python3
"""`tessera-cli convert <class folders> <prefix> --tfrecord`: the shards read by the real protobuf library.

    tfrecord_convert_checks.py <tessera-cli> <work folder>

Class folders of PNG images (written here with zlib, each a different size) become two shards; every
record's CRCs hold (a CRC-32C written in tests/engine/io/tfrecord_check.py), it parses as a tf.Example (TensorFlow's
messages declared at run time there), its image/encoded is the file's bytes, its label, synset, format,
filename, height and width are the ones expected, and every image is in exactly one shard. Bad folders
exit 2 naming the problem."""

import os
import shutil
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine", "io"))
import check_tf_example  # noqa: E402 (TensorFlow's Example, declared at run time)
import tfrecord_check  # noqa: E402 (CRC-32C, framing)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def png(width, height, seed):
    rows = b"".join(b"\x00" + bytes(((x * 7 + y * 13 + seed) % 256) for x in range(width * 3)) for y in range(height))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def run(command):
    print("$ " + " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    print(done.stdout + done.stderr, flush=True)
    return done


def main():
    cli, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    photos = os.path.join(work, "photos")
    expected = {}  # (synset, file name) -> (bytes, label, height, width)
    for label, (synset, count) in enumerate((("cat", 3), ("dog", 2)), start=1):
        os.makedirs(os.path.join(photos, synset))
        for i in range(count):
            width, height = 5 + i + label, 4 + 2 * i
            data = png(width, height, 10 * label + i)
            name = "%03d.png" % i
            open(os.path.join(photos, synset, name), "wb").write(data)
            expected[(synset, name)] = (data, label, height, width)
    open(os.path.join(photos, "cat", ".DS_Store"), "wb").write(b"hidden: skipped")
    prefix = os.path.join(work, "shards", "photos")
    done = run([cli, "convert", photos, prefix, "--tfrecord", "--shards", "2"])
    if done.returncode != 0 or "wrote 5 images of 2 classes into 2 shards" not in done.stdout or "label 2  dog" not in done.stdout:
        fail("convert --tfrecord did not write the shards it should")

    Example = check_tf_example.Example
    seen = {}
    for shard in ("photos-00000-of-00002", "photos-00001-of-00002"):
        blob = open(os.path.join(work, "shards", shard), "rb").read()
        records = tfrecord_check.split_records(blob, shard)
        if not records:
            fail(shard + " holds no records: the images were not dealt over the shards")
        for offset, data in records:
            example = Example()
            example.ParseFromString(data)
            f = example.features.feature
            key = (f["image/class/synset"].bytes_list.value[0].decode(), f["image/filename"].bytes_list.value[0].decode())
            if key not in expected:
                fail("%s at %d: an image that is not in the folder: %r" % (shard, offset, key))
            if key in seen:
                fail("%r is in %s and in %s" % (key, seen[key], shard))
            seen[key] = shard
            data_bytes, label, height, width = expected[key]
            checks = [(f["image/encoded"].bytes_list.value[0] == data_bytes, "image/encoded is not the file's bytes"),
                      (list(f["image/class/label"].int64_list.value) == [label], "image/class/label"),
                      (f["image/format"].bytes_list.value[0] == b"PNG", "image/format"),
                      (list(f["image/height"].int64_list.value) == [height], "image/height"),
                      (list(f["image/width"].int64_list.value) == [width], "image/width"),
                      (list(f["image/channels"].int64_list.value) == [3], "image/channels")]
            for ok, what in checks:
                if not ok:
                    fail("%s at %d (%r): %s" % (shard, offset, key, what))
    if tfrecord_check.FAILURES:
        fail("%d framing or CRC check(s) failed" % len(tfrecord_check.FAILURES))
    if len(seen) != len(expected):
        fail("%d of %d images are in the shards" % (len(seen), len(expected)))

    # Bad folders: exit 2, named.
    open(os.path.join(photos, "dog", "notes.txt"), "w").write("not an image")
    bad = run([cli, "convert", photos, prefix, "--tfrecord"])
    if bad.returncode != 2 or "notes.txt" not in bad.stderr or "neither a JPEG nor a PNG" not in bad.stderr:
        fail("a text file among the images should exit 2 naming it")
    os.remove(os.path.join(photos, "dog", "notes.txt"))
    os.makedirs(os.path.join(photos, "empty"))
    bad = run([cli, "convert", photos, prefix, "--tfrecord"])
    if bad.returncode != 2 or "holds no images" not in bad.stderr:
        fail("an empty class folder should exit 2 naming it")
    bad = run([cli, "convert", os.path.join(work, "missing"), prefix, "--tfrecord"])
    if bad.returncode != 2 or "not a folder of class folders" not in bad.stderr:
        fail("a missing folder should exit 2")
    print("PASS: 5 images in 2 shards, each record as protobuf reads it; bad folders refused")


if __name__ == "__main__":
    main()
