"""What the Python checks of TFRecord files share (check_tensorboard_events.py, check_tf_example.py and
tests/app/tfrecord_convert_checks.py): failures collected as they come, a CRC-32C written here (independent of
Tessera's), TFRecord framing and splitting, and message classes from a FileDescriptorProto built at run time
(Debian has no TensorFlow, so TensorFlow's messages are declared with its field numbers).
"""

import struct
import sys

try:
    from google.protobuf import descriptor_pool, message_factory
except ImportError as error:
    sys.exit("the Python module google.protobuf is missing (%s) for %s. Install the Debian package python3-protobuf "
             "(it is in the Makefile's DEBIAN_PACKAGES: `make deps`)." % (error, sys.executable))

FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL: " + message)


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ CRC32C_TABLE[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283, "the CRC-32C of tfrecord_check.py is wrong"


def frame(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def split_records(blob, name):
    """[(offset, data)], checking lengths and both CRCs of every record."""
    records = []
    offset = 0
    while offset < len(blob):
        if len(blob) - offset < 16:
            check(False, "%s: %d stray bytes at offset %d" % (name, len(blob) - offset, offset))
            break
        length_bytes = blob[offset:offset + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", blob[offset + 8:offset + 12])
        check(length_crc == masked_crc32c(length_bytes), "%s: bad length CRC at offset %d" % (name, offset))
        data = blob[offset + 12:offset + 12 + length]
        check(len(data) == length and offset + 16 + length <= len(blob), "%s: record at %d cut short" % (name, offset))
        (data_crc,) = struct.unpack("<I", blob[offset + 12 + length:offset + 16 + length])
        check(data_crc == masked_crc32c(data), "%s: bad data CRC at offset %d" % (name, offset))
        records.append((offset, data))
        offset += 16 + length
    return records


def message_classes(proto, full_names):
    """The message classes `full_names` ("tensorflow.Event", …) of the FileDescriptorProto `proto`."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    factory = None if hasattr(message_factory, "GetMessageClass") else message_factory.MessageFactory(pool)
    classes = []
    for full_name in full_names:
        descriptor = pool.FindMessageTypeByName(full_name)
        classes.append(message_factory.GetMessageClass(descriptor) if factory is None  # protobuf >= 4.22
                       else factory.GetPrototype(descriptor))
    return classes
