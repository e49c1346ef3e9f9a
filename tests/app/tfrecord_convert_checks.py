#!/usr/bin/env python3
"""`tessera-cli convert <class folders> <prefix> --tfrecord`: the shards read by the real protobuf library.

    tfrecord_convert_checks.py <tessera-cli> <work folder>

Class folders of PNG images (written here with zlib, each a different size) become two shards; every
record's CRCs hold (a CRC-32C written in tests/engine/io/tfrecord_check.py), it parses as a tf.Example (TensorFlow's
messages declared at run time there), its image/encoded is the file's bytes, its label, synset, format,
filename, height and width are the ones expected, and every image is in exactly one shard. Bad folders
exit 2 naming the problem.

Then a ResNet trains on shards (data.source "tfrecord"): on the converted ones, and on shards written here by
protobuf with labels counted from 0 (data.first_label 0); its evaluation covers the held-out records; a
damaged record stops the run with exit 2 naming the shard and the record's byte offset."""

import json
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
    os.rmdir(os.path.join(photos, "empty"))
    train_on_shards(cli, work)
    print("PASS: 5 images in 2 shards, each record as protobuf reads it; bad folders refused; a ResNet trained on "
          "converted and on protobuf-written shards; a damaged record refused by name")


def experiment(records, first_label, eval_records=None):
    data = {"source": "tfrecord", "records": records, "first_label": first_label, "augment": {"flip_axes": [1]}}
    if eval_records:
        data["eval_records"] = eval_records
    return {"version": 1, "model": {"kind": "resnet", "depth": 18, "num_classes": 2},
            "input": {"channels": 3, "size": [32, 32]}, "global_batch": 2, "steps": 3, "steps_per_eval": 3,
            "optimizer": {"kind": "sgd", "momentum": 0.9}, "data": data, "seed": 3}


def metrics(model_dir):
    with open(os.path.join(model_dir, "metrics.jsonl")) as lines:
        return [json.loads(line) for line in lines if line.strip()]


def train_on_shards(cli, work):
    # The converted shards: 5 records, labels from 1; the last of them held out (holdout_fraction 0.25).
    path = os.path.join(work, "converted.json")
    json.dump(experiment("shards/photos-*", 1), open(path, "w"))
    done = run([cli, "train", path, "--model-dir", os.path.join(work, "run_converted"), "--plain"])
    if done.returncode != 0:
        fail("training on the converted shards failed")
    records = metrics(os.path.join(work, "run_converted"))
    trained = [r for r in records if r.get("kind") == "train"]
    evaluated = [r for r in records if r.get("kind") == "eval"]
    if len(trained) != 3 or not evaluated:
        fail("expected 3 training steps and an evaluation in metrics.jsonl, got %d and %d" % (len(trained), len(evaluated)))
    if not all(r["loss"] == r["loss"] and r["loss"] > 0 for r in trained):
        fail("a training loss is not a positive number: %r" % [r["loss"] for r in trained])

    # Shards written by protobuf itself, labels 0 and 1, PNGs of their own; held-out shard separate.
    Example = check_tf_example.Example
    folder = os.path.join(work, "protobuf_shards")
    os.makedirs(folder, exist_ok=True)
    for shard, count in (("train-00000-of-00002", 3), ("train-00001-of-00002", 3), ("valid-00000-of-00001", 2)):
        blob = b""
        for i in range(count):
            example = Example()
            f = example.features.feature
            f["image/encoded"].bytes_list.value.append(png(9 + i, 7, 31 * i + len(shard)))
            f["image/class/label"].int64_list.value.append(i % 2)
            f["image/text"].bytes_list.value.append(b"ignored by the source")
            blob += tfrecord_check.frame(example.SerializeToString())
        open(os.path.join(folder, shard), "wb").write(blob)
    path = os.path.join(work, "protobuf.json")
    json.dump(experiment("protobuf_shards/train-*", 0, "protobuf_shards/valid-*"), open(path, "w"))
    done = run([cli, "train", path, "--model-dir", os.path.join(work, "run_protobuf"), "--plain"])
    if done.returncode != 0:
        fail("training on protobuf-written shards failed")
    evaluated = [r for r in metrics(os.path.join(work, "run_protobuf")) if r.get("kind") == "eval"]
    if not evaluated:
        fail("no evaluation of the held-out shard")

    # A damaged image byte in the second record of the first shard: exit 2 naming the shard and the offset.
    shard = os.path.join(folder, "train-00000-of-00002")
    blob = bytearray(open(shard, "rb").read())
    second = tfrecord_check.split_records(bytes(blob), "train-00000-of-00002")[1][0]
    blob[second + 12 + 30] ^= 0x40
    open(shard, "wb").write(bytes(blob))
    done = run([cli, "train", path, "--model-dir", os.path.join(work, "run_damaged"), "--plain"])
    if done.returncode == 0 or "train-00000-of-00002" not in done.stderr or \
            "corrupt record at byte offset %d" % second not in done.stderr:
        fail("a damaged record should stop the run naming the shard and byte offset %d" % second)
    # The steps done before it are not lost: a checkpoint of the last one, and the message says so.
    steps_done = done.stdout.count("/3 loss")
    if steps_done:
        checkpoint = "model.ckpt-%06d.safetensors" % steps_done
        if not os.path.exists(os.path.join(work, "run_damaged", checkpoint)) or \
                "the checkpoint of step %d is kept" % steps_done not in done.stderr:
            fail("%d step(s) were done before the damaged record, but %s was not written and named" % (steps_done, checkpoint))
    elif "no step had been done" not in done.stderr:
        fail("the message should say no step had been done")


if __name__ == "__main__":
    main()
