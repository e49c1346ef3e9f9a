#!/usr/bin/env python3
"""Checks Tessera's TFRecord shards of tf.Example with the real protobuf library.

    check_tf_example.py RUN_FILES_TOOL

TensorFlow's Example, Features, Feature, BytesList, FloatList and Int64List are declared at run time
in a FileDescriptorProto with the field numbers of tensorflow/core/example/{example,feature}.proto
(Debian has no TensorFlow). The TFRecord framing and both masked CRC-32Cs are checked with a CRC
implemented in this script.

1. `RUN_FILES_TOOL write-examples FILE`: every record's CRCs hold and it parses as an Example holding
   exactly what run_files_tool.cpp writes.
2. Examples written here by protobuf (plus an unpacked int64 list and an unknown field) read back through
   `RUN_FILES_TOOL read-examples` with the same features.
3. Damage is reported by the reader with the file and the byte offset of the bad record: a flipped data
   byte, a flipped length byte, a truncated file, and a record that is not an Example.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

from tfrecord_check import FAILURES, check, frame, message_classes, split_records

from google.protobuf import descriptor_pb2  # noqa: E402 (tfrecord_check says what to install when it is missing)


def build_example_class():
    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="tessera_check/example.proto", package="tensorflow", syntax="proto3")
    for name, kind in (("BytesList", F.TYPE_BYTES), ("FloatList", F.TYPE_FLOAT), ("Int64List", F.TYPE_INT64)):
        message = proto.message_type.add(name=name)
        message.field.add(name="value", number=1, type=kind, label=F.LABEL_REPEATED)
    feature = proto.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate((("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")), 1):
        feature.field.add(name=name, number=number, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".tensorflow." + type_name,
                          oneof_index=0)
    features = proto.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".tensorflow.Feature")
    features.field.add(name="feature", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED, type_name=".tensorflow.Features.FeatureEntry")
    example = proto.message_type.add(name="Example")
    example.field.add(name="features", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".tensorflow.Features")
    (example_class,) = message_classes(proto, ["tensorflow.Example"])
    return example_class


Example = build_example_class()


def f32(value):
    return struct.unpack("<f", struct.pack("<f", value))[0]


def as_plain(example):
    """{key: (kind, [values])} with bytes as hex, as run_files_tool prints them."""
    plain = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind == "bytes_list":
            plain[key] = ("bytes", [value.hex() for value in feature.bytes_list.value])
        elif kind == "float_list":
            plain[key] = ("float", [f32(value) for value in feature.float_list.value])
        else:
            plain[key] = ("int64", list(feature.int64_list.value))
    return plain


def expected_tessera_examples():
    examples = []
    for r in range(3):
        examples.append({
            "image/encoded": ("bytes", [bytes((i * 37) % 256 for i in range(r + 1)).hex()]),
            "image/class/label": ("int64", [1000 * r - 7]),
            "image/bbox": ("float", [f32(0.25 * r), -1.5]),
            "image/class/text": ("bytes", [("class %d" % r).encode().hex(), ""]),
        })
    return examples


def tool(tool_path, *arguments):
    return subprocess.run([tool_path, *arguments], capture_output=True, text=True)


def main():
    tool_path = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="tessera_tf_example_") as work:
        # 1. Tessera's shard read by protobuf.
        shard = os.path.join(work, "tessera.tfrecord")
        done = tool(tool_path, "write-examples", shard)
        check(done.returncode == 0, "write-examples failed: " + done.stderr)
        records = split_records(open(shard, "rb").read(), "tessera.tfrecord")
        check(len(records) == 3, "expected 3 records, found %d" % len(records))
        for (offset, data), expected in zip(records, expected_tessera_examples()):
            example = Example()
            example.ParseFromString(data)
            check(as_plain(example) == expected, "record at %d: %r, expected %r" % (offset, as_plain(example), expected))

        # 2. Shards written by protobuf, read by Tessera.
        ours = []
        for r in range(4):
            example = Example()
            example.features.feature["image/encoded"].bytes_list.value.append(bytes(range(256)) * (r + 1))
            example.features.feature["image/class/label"].int64_list.value.extend([r, -(2 ** 40) - r])
            example.features.feature["image/scale"].float_list.value.extend([0.1 * r, 3.0e38])
            example.features.feature["empty"].bytes_list.SetInParent()
            ours.append(example)
        blob = b"".join(frame(example.SerializeToString()) for example in ours)
        # An unpacked int64 list and an unknown field (number 9) on the Example: both legal protobuf.
        unpacked = bytes([0x0A, 0x16, 0x0A, 0x14, 0x0A, 0x05]) + b"label" + bytes([0x12, 0x0B, 0x1A, 0x09, 0x08, 0x05, 0x08, 0x80, 0x01, 0x08, 0x7F, 0x08, 0x00]) + \
            bytes([0x48, 0x2A])
        blob += frame(unpacked)
        written = os.path.join(work, "protobuf.tfrecord")
        open(written, "wb").write(blob)
        done = tool(tool_path, "read-examples", written)
        check(done.returncode == 0, "read-examples of protobuf's shard failed: " + done.stderr)
        if done.returncode == 0:
            read = json.loads(done.stdout)
            check(len(read) == 5, "expected 5 examples, read %d" % len(read))
            for example, got in zip(ours, read):
                expected = {key: [kind, values] for key, (kind, values) in as_plain(example).items()}
                plain = {key: [value["kind"], value["values"]] for key, value in got["features"].items()}
                check(plain == expected, "protobuf's example read as %r, expected %r" % (plain, expected))
            if len(read) == 5:
                check(read[4]["features"] == {"label": {"kind": "int64", "values": [5, 128, 127, 0]}},
                      "the unpacked list read as %r" % read[4]["features"])
                check(read[1]["offset"] == len(frame(ours[0].SerializeToString())), "the second record's offset is %r" % read[1]["offset"])

        # 3. Damage, named with the file and the record's byte offset.
        second = len(frame(ours[0].SerializeToString()))
        for name, damaged, message in (
                ("data", blob[:second + 20] + bytes([blob[second + 20] ^ 0x40]) + blob[second + 21:],
                 "corrupt record at byte offset %d: the CRC of its" % second),
                ("length", blob[:second + 2] + bytes([blob[second + 2] ^ 0x01]) + blob[second + 3:],
                 "corrupt record at byte offset %d: the CRC of its length" % second),
                ("truncated", blob[:second + 30], "the record at byte offset %d is cut short" % second),
                ("not an example", frame(b"\x0a\x05\x0a\x03\x0a"), "not a tf.Example")):
            path = os.path.join(work, "damaged_%s.tfrecord" % name.replace(" ", "_"))
            open(path, "wb").write(damaged)
            done = tool(tool_path, "read-examples", path)
            check(done.returncode == 1, "%s: read-examples exited %d, expected 1" % (name, done.returncode))
            check(message in done.stderr and (name == "not an example" or os.path.basename(path) in done.stderr),
                  "%s: expected %r naming the file, got %r" % (name, message, done.stderr))

    if FAILURES:
        sys.exit("%d check(s) failed" % len(FAILURES))
    print("tf.Example shards agree with protobuf: 3 records of Tessera's, 5 of protobuf's, 4 kinds of damage named")


if __name__ == "__main__":
    main()
