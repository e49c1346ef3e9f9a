#!/usr/bin/env python3
"""Checks Tessera's TensorBoard event files with the real protobuf library.

    check_tensorboard_events.py RUN_FILES_TOOL

Debian has no tensorboard package, so the message classes are built at run time from a
FileDescriptorProto declaring tensorflow.Event, Summary, Summary.Value and SessionLog with
TensorFlow's field numbers (tensorflow/core/util/event.proto, core/framework/summary.proto). The
TFRecord framing and both masked CRC-32Cs are checked here with a CRC implemented in this script.

1. `RUN_FILES_TOOL write-samples DIR` writes DIR/events/events.out.tfevents.*; every record must have
   valid CRCs and parse as an Event with exactly the fields and values run_files_tool.cpp writes, in
   protobuf's canonical encoding (re-serializing gives the same bytes).
2. Events written here with protobuf (plus a torn last record) must read back through
   `RUN_FILES_TOOL read-tensorboard`, session start included; a damaged record must be reported with
   its byte offset.
"""

import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile

from tfrecord_check import FAILURES, check, frame, message_classes, split_records

from google.protobuf import descriptor_pb2  # noqa: E402 (tfrecord_check says what to install when it is missing)

# ---- TensorFlow's messages, declared at run time ----------------------------------------------

def build_message_classes():
    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="tessera_check/event.proto", package="tensorflow", syntax="proto3")

    summary = proto.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL, oneof_index=0)
    value.field.add(name="obsolete_old_style_histogram", number=3, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL,
                    oneof_index=0)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tensorflow.Summary.Value")

    session_log = proto.message_type.add(name="SessionLog")
    status = session_log.enum_type.add(name="SessionStatus")
    for name, number in (("STATUS_UNSPECIFIED", 0), ("START", 1), ("STOP", 2), ("CHECKPOINT", 3)):
        status.value.add(name=name, number=number)
    session_log.field.add(name="status", number=1, type=F.TYPE_ENUM, label=F.LABEL_OPTIONAL,
                          type_name=".tensorflow.SessionLog.SessionStatus")
    session_log.field.add(name="checkpoint_path", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    session_log.field.add(name="msg", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)

    event = proto.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="graph_def", number=4, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tensorflow.Summary", oneof_index=0)
    event.field.add(name="session_log", number=7, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tensorflow.SessionLog", oneof_index=0)

    return message_classes(proto, ["tensorflow." + name for name in ("Event", "Summary", "Summary.Value", "SessionLog")])


Event, Summary, SummaryValue, SessionLog = build_message_classes()
START = 1


def f32(value):
    return struct.unpack("<f", struct.pack("<f", value))[0]


# ---- 1. Tessera's file, read by protobuf ------------------------------------------------------

def expected_tessera_events():
    """(kind, tag, step, wall_time, value) as run_files_tool.cpp writes them."""
    events = [("scalar", "loss/train", step, 1700000000.0 + step, f32(1.0 / (1 + step))) for step in range(5)]
    events.append(("scalar", "lr", 4, 1700000004.5, 0.0))
    events.append(("start", None, 3, 1700000010.0, None))
    events.append(("scalar", "loss/train", 3, 1700000011.0, 0.25))
    events.append(("scalar", "loss/train", 1 << 40, 1700000012.0, f32(3.0e38)))
    events.append(("scalar", "\u00fcnicode/tag", 7, 1700000013.0, 1.5))
    return events


def check_tessera_file(events_dir, tool_pid):
    names = os.listdir(events_dir)
    check(len(names) == 1, "expected one event file, found %r" % names)
    if not names:
        return
    name = names[0]
    match = re.fullmatch(r"events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d+)", name)
    check(match is not None, "file name %r is not events.out.tfevents.<secs>.<host>.<pid>.<n>" % name)
    if match:
        check(match.group(2) == socket.gethostname(), "host %r, expected %r" % (match.group(2), socket.gethostname()))
        check(int(match.group(3)) == tool_pid, "pid %s, expected %d" % (match.group(3), tool_pid))
    with open(os.path.join(events_dir, name), "rb") as f:
        blob = f.read()
    records = split_records(blob, name)
    expected = expected_tessera_events()
    check(len(records) == 1 + len(expected), "%d records, expected %d" % (len(records), 1 + len(expected)))

    for index, (offset, data) in enumerate(records):
        event = Event.FromString(data)
        canonical = Event.FromString(data)
        canonical.DiscardUnknownFields()
        check(canonical.SerializeToString() == data,
              "record at %d: not protobuf's canonical encoding of known fields: %s" % (offset, data.hex()))
        if index == 0:
            check(event.WhichOneof("what") == "file_version" and event.file_version == "brain.Event:2",
                  "first record: %r" % event)
            check(event.wall_time > 1.6e9, "first record's wall_time %r" % event.wall_time)
            continue
        if index - 1 >= len(expected):
            break
        kind, tag, step, wall_time, value = expected[index - 1]
        check(event.step == step and event.wall_time == wall_time,
              "record %d: step %d wall_time %r, expected %d %r" % (index, event.step, event.wall_time, step, wall_time))
        if kind == "start":
            check(event.WhichOneof("what") == "session_log" and event.session_log.status == START,
                  "record %d: expected a SessionLog START, got %r" % (index, event))
            continue
        check(event.WhichOneof("what") == "summary" and len(event.summary.value) == 1,
              "record %d: expected one summary value, got %r" % (index, event))
        if event.WhichOneof("what") != "summary" or not event.summary.value:
            continue
        got = event.summary.value[0]
        check(got.tag == tag, "record %d: tag %r, expected %r" % (index, got.tag, tag))
        check(got.WhichOneof("value") == "simple_value",
              "record %d: no simple_value (it must be present even when 0)" % index)
        check(got.simple_value == value, "record %d: value %r, expected %r" % (index, got.simple_value, value))


def run_reader(tool, path):
    result = subprocess.run([tool, "read-tensorboard", path], capture_output=True, text=True)
    return result.returncode, (json.loads(result.stdout) if result.returncode == 0 else None), result.stderr


def check_tessera_file_reads_back(tool, events_dir):
    status, scalars, stderr = run_reader(tool, events_dir)
    check(status == 0, "read-tensorboard failed: " + stderr.strip())
    if status != 0:
        return
    # The session start at step 3 drops what came before at steps >= 3, of every tag.
    expected = [(tag, step, wall_time, value) for kind, tag, step, wall_time, value in expected_tessera_events()
                if kind == "scalar" and (wall_time > 1700000010.0 or step < 3)]
    got = [(s["tag"], s["step"], s["wall_time"], s["value"]) for s in scalars]
    check(got == expected, "read back %r, expected %r" % (got, expected))


# ---- 2. protobuf's file, read by Tessera ------------------------------------------------------

def write_foreign_events(path):
    """Events as TensorFlow would write them; returns the offset of the third record."""
    def scalar_event(wall_time, step, *values):
        summary = Summary(value=[SummaryValue(tag=tag, simple_value=v) for tag, v in values])
        return Event(wall_time=wall_time, step=step, summary=summary)

    events = [
        Event(wall_time=1.0, file_version="brain.Event:2"),
        scalar_event(2.0, 0, ("a", 0.5), ("b", -1.0)),  # two values in one summary, step 0 not on the wire
        Event(wall_time=3.0, step=10, summary=Summary(value=[SummaryValue(tag="histogram-like",
                                                                          obsolete_old_style_histogram=b"x")])),
        scalar_event(4.0, 11, ("a", 0.25)),
        Event(wall_time=5.0, step=5, session_log=SessionLog(status=START)),
        scalar_event(6.0, 5, ("a", 0.75)),
    ]
    blob = b""
    offsets = []
    for event in events:
        offsets.append(len(blob))
        blob += frame(event.SerializeToString())
    torn = frame(scalar_event(7.0, 6, ("a", 9.0)).SerializeToString())
    with open(path, "wb") as f:
        f.write(blob + torn[:len(torn) - 3])  # a writer killed mid-record
    return blob, offsets


def check_foreign_file(tool, directory):
    path = os.path.join(directory, "foreign.tfevents")
    blob, offsets = write_foreign_events(path)
    status, scalars, stderr = run_reader(tool, path)
    check(status == 0, "read-tensorboard of protobuf's file failed: " + stderr.strip())
    if status == 0:
        got = [(s["tag"], s["step"], s["wall_time"], s["value"]) for s in scalars]
        expected = [("a", 0, 2.0, 0.5), ("b", 0, 2.0, -1.0), ("a", 5, 6.0, 0.75)]
        check(got == expected, "protobuf's file read back as %r, expected %r" % (got, expected))

    damaged = bytearray(blob)
    damaged[offsets[2] + 14] ^= 0x20
    damaged_path = os.path.join(directory, "damaged.tfevents")
    with open(damaged_path, "wb") as f:
        f.write(damaged)
    status, _, stderr = run_reader(tool, damaged_path)
    check(status == 1 and "damaged.tfevents" in stderr and "corrupt record at byte offset %d" % offsets[2] in stderr,
          "a damaged record gave status %d: %s" % (status, stderr.strip()))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_tensorboard_events.py RUN_FILES_TOOL")
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="tessera_tensorboard_check_") as directory:
        process = subprocess.Popen([tool, "write-samples", directory], stderr=subprocess.PIPE, text=True)
        _, stderr = process.communicate()
        if process.returncode != 0:
            sys.exit("run_files_tool write-samples failed: " + stderr)
        events_dir = os.path.join(directory, "events")
        check_tessera_file(events_dir, process.pid)
        check_tessera_file_reads_back(tool, events_dir)
        check_foreign_file(tool, directory)
    if FAILURES:
        sys.exit("%d check(s) failed" % len(FAILURES))
    print("tensorboard events: protobuf decodes Tessera's records, and Tessera reads protobuf's")


if __name__ == "__main__":
    main()
