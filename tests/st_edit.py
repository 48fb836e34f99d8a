"""Edits a safetensors checkpoint the way a hostile or careless tool would, then (unless told not
to) recomputes its checksums as sdp writes them, so that sdp's own validation is what the test
exercises rather than the checksum.

usage: st_edit.py FILE... EDIT... (each file edited alike) where EDIT is one of
  meta KEY=VALUE    set a metadata string          drop KEY        remove a metadata key
  poke NAME I X     set float I of tensor NAME     rename OLD NEW  rename a tensor
  set NAME FIELD JSON  set a field of tensor NAME's header entry (dtype, shape, data_offsets)
  stale             keep the stored checksums as they were (the edit is then damage)
"""
import json
import os
import struct
import sys
import zlib

FILE_CRC = "sdp.file_crc32"  # whole file but its own 8 digits; first key of the header
DATA_CRC = "sdp.crc32"  # the data section alone (checkpoints from before the file checksum)


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    return header, bytearray(raw[8 + n :])


def encode(header):
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    return text + b" " * (-len(text) % 8)


def save(path, header, data, fix):
    meta = header.get("__metadata__", {})
    if fix and DATA_CRC in meta:
        meta[DATA_CRC] = "%08x" % zlib.crc32(data)
    if fix and FILE_CRC in meta:
        # The checksum must open the header for sdp to find it.
        rest = {k: v for k, v in meta.items() if k != FILE_CRC}
        header["__metadata__"] = {FILE_CRC: "00000000", **rest}
        body = {k: v for k, v in header.items() if k != "__metadata__"}
        header = {"__metadata__": header["__metadata__"], **body}
    text = encode(header)
    out = bytearray(struct.pack("<Q", len(text)) + text + data)
    if fix and FILE_CRC in meta:
        at = out.index(b'"%s":"' % FILE_CRC.encode()) + len(FILE_CRC) + 4
        crc = zlib.crc32(out[at + 8 :], zlib.crc32(out[:at]))
        out[at : at + 8] = b"%08x" % crc
    open(path, "wb").write(out)


def main(argv):
    n = 1
    while n < len(argv) and os.path.isfile(argv[n]):
        n += 1
    for path in argv[1:n]:
        edit(path, argv[n:])


def edit(path, args):
    args = list(args)
    header, data = load(path)
    meta = header.setdefault("__metadata__", {})
    fix = True
    while args:
        op = args.pop(0)
        if op == "meta":
            key, value = args.pop(0).split("=", 1)
            meta[key] = value
        elif op == "drop":
            meta.pop(args.pop(0), None)
        elif op == "poke":
            name, i, x = args.pop(0), int(args.pop(0)), float(args.pop(0))
            begin = header[name]["data_offsets"][0] + 4 * i
            data[begin : begin + 4] = struct.pack("<f", x)
        elif op == "rename":
            old, new = args.pop(0), args.pop(0)
            header = {(new if k == old else k): v for k, v in header.items()}
        elif op == "set":
            name, field, value = args.pop(0), args.pop(0), json.loads(args.pop(0))
            header[name][field] = value
        elif op == "stale":
            fix = False
        else:
            sys.exit("st_edit.py: unknown edit '%s'" % op)
    save(path, header, data, fix)


if __name__ == "__main__":
    main(sys.argv)
