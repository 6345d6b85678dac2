#!/usr/bin/env python3
"""s3read.py - decode objects of streamwal's s3 backend, without streamwal.

A reader of the object format that walimpls/impls/s3/doc.go documents
("An object"), written from that page alone with Python's standard library,
so that a client no one here wrote checks that the page says what the
backend writes. All integers are big-endian:

    object  := header record* trailer
    header  := "SWL1" | kind u8 (1 data, 2 fence) | 0 u8 | 0 u16 |
               epoch u64 | term i64 | slot u64 | count u32 | nonce [16]byte
    record  := nprops u32 | (klen u16 | key | vlen u32 | value)* |
               plen u32 | payload
    trailer := crc u32      // CRC-32C (Castagnoli) of every byte before it

Usage:

    scripts/s3read.py [--json] [--key KEY] FILE...
    scripts/s3read.py --selftest

FILE is an object as fetched from the bucket (for example with
`aws s3api get-object --bucket B --key K FILE`); "-" reads standard input.
--key KEY, given once per FILE in the same order, is the object's key
("<prefix><channel>/e<epoch>/<slot>"): its epoch and slot must match the
header's. Without --json each object is printed as text: its header, then
each record's properties and payload (escaped). With --json each object is
one line of JSON:

    {"file": ..., "key": ..., "kind": "data"|"fence", "epoch": int,
     "term": int, "slot": int, "count": int, "nonce": hex,
     "records": [{"properties": [[key, value], ...], "payload": base64}]}

Properties keep the object's order; bytes that are not UTF-8 appear as
lone surrogates (Python's surrogateescape). The payload is base64, byte
for byte.

An object that does not decode (bad magic, kind or reserved bytes, a CRC
that does not match, a record that runs past the end, a count that does not
match the records, bytes left over, an epoch or slot that does not match
the key) is reported on standard error with the file, the key and what is
wrong; the exit status is then 1 (2 for a usage error). Like the backend's
reader, it never skips a damaged object.

--selftest checks the CRC-32C against its published check value
(CRC-32C of b"123456789" is 0xE3069283) and exits.
"""

import argparse
import base64
import json
import re
import struct
import sys

MAGIC = b"SWL1"
KINDS = {1: "data", 2: "fence"}
HEADER = struct.Struct(">4sBBHQqQI16s")  # 52 bytes
KEY_RE = re.compile(r"(?:^|/)e(\d{20})/(\d{20})$")


def _crc32c_table():
    # CRC-32C, reflected, polynomial 0x82F63B78 (Castagnoli).
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class Damaged(Exception):
    """An object that does not decode."""


def _take(buf, off, n, what):
    if off + n > len(buf):
        raise Damaged(f"{what} at byte {off} runs past the records' end ({len(buf)})")
    return buf[off:off + n], off + n


def _u(buf, off, fmt, what):
    size = struct.calcsize(fmt)
    raw, off = _take(buf, off, size, what)
    return struct.unpack(fmt, raw)[0], off


def _text(b):
    return b.decode("utf-8", "surrogateescape")


def decode(data, key=None):
    """Decodes one object; raises Damaged."""
    if len(data) < HEADER.size + 4:
        raise Damaged(f"{len(data)} bytes: shorter than a header and a trailer ({HEADER.size + 4})")
    body, (crc,) = data[:-4], struct.unpack(">I", data[-4:])
    magic, kind, zero8, zero16, epoch, term, slot, count, nonce = HEADER.unpack_from(body, 0)
    if magic != MAGIC:
        raise Damaged(f"bad magic {magic!r}, want {MAGIC!r}")
    if kind not in KINDS:
        raise Damaged(f"unknown kind {kind}")
    if zero8 != 0 or zero16 != 0:
        raise Damaged(f"reserved header bytes are {zero8}, {zero16}, want 0")
    got = crc32c(body)
    if got != crc:
        raise Damaged(f"CRC-32C of the object is {got:#010x}, its trailer says {crc:#010x}")
    if key is not None:
        m = KEY_RE.search(key)
        if not m:
            raise Damaged("key is not <prefix><channel>/e<epoch>/<slot>")
        kepoch, kslot = int(m.group(1)), int(m.group(2))
        if (kepoch, kslot) != (epoch, slot):
            raise Damaged(f"header says epoch {epoch} slot {slot}, the key epoch {kepoch} slot {kslot}")
    records = []
    off = HEADER.size
    while off < len(body):
        n = len(records)
        nprops, off = _u(body, off, ">I", f"record {n}: nprops")
        props = []
        for i in range(nprops):
            klen, off = _u(body, off, ">H", f"record {n} property {i}: klen")
            k, off = _take(body, off, klen, f"record {n} property {i}: key")
            vlen, off = _u(body, off, ">I", f"record {n} property {i}: vlen")
            v, off = _take(body, off, vlen, f"record {n} property {i}: value")
            props.append((_text(k), _text(v)))
        plen, off = _u(body, off, ">I", f"record {n}: plen")
        payload, off = _take(body, off, plen, f"record {n}: payload")
        records.append({"properties": props, "payload": bytes(payload)})
    if len(records) != count:
        raise Damaged(f"header says {count} records, the object holds {len(records)}")
    if KINDS[kind] == "fence" and records:
        raise Damaged(f"a fence with {len(records)} records")
    return {"kind": KINDS[kind], "epoch": epoch, "term": term, "slot": slot,
            "count": count, "nonce": nonce.hex(), "records": records}


def _print_text(name, obj, out):
    print(f"{name}: {obj['kind']} epoch {obj['epoch']} slot {obj['slot']} term {obj['term']} "
          f"count {obj['count']} nonce {obj['nonce']}", file=out)
    for i, r in enumerate(obj["records"]):
        props = " ".join(f"{k}={v!r}" for k, v in r["properties"])
        print(f"  record {i}: {props}", file=out)
        print(f"    payload ({len(r['payload'])} bytes): {r['payload']!r}", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Decode objects of streamwal's s3 backend (see the module's doc).")
    ap.add_argument("--json", action="store_true", help="one line of JSON per object")
    ap.add_argument("--key", action="append", default=[], help="the object's key, once per FILE, in order")
    ap.add_argument("--selftest", action="store_true", help="check the CRC-32C and exit")
    ap.add_argument("files", nargs="*", metavar="FILE")
    args = ap.parse_args(argv)
    if args.selftest:
        got = crc32c(b"123456789")
        if got != 0xE3069283:
            print(f"s3read: CRC-32C of 123456789 is {got:#010x}, want 0xe3069283", file=sys.stderr)
            return 1
        print("s3read: CRC-32C ok")
        return 0
    if not args.files:
        ap.error("no FILE")
    if args.key and len(args.key) != len(args.files):
        ap.error(f"{len(args.key)} --key for {len(args.files)} FILE")
    status = 0
    for i, name in enumerate(args.files):
        key = args.key[i] if args.key else None
        try:
            if name == "-":
                data = sys.stdin.buffer.read()
            else:
                with open(name, "rb") as f:
                    data = f.read()
            obj = decode(data, key)
        except (OSError, Damaged) as e:
            where = name if key is None else f"{name} (key {key})"
            print(f"s3read: {where}: {e}", file=sys.stderr)
            status = 1
            continue
        if args.json:
            obj = dict(obj, file=name, key=key, records=[
                {"properties": [list(p) for p in r["properties"]],
                 "payload": base64.b64encode(r["payload"]).decode("ascii")}
                for r in obj["records"]])
            print(json.dumps(obj, sort_keys=True))
        else:
            _print_text(name if key is None else key, obj, sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main())
