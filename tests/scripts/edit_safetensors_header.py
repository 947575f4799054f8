#!/usr/bin/env python3
"""tests/scripts/edit_safetensors_header.py FILE TENSOR FIELD JSON — rewrite one field of one
tensor's entry in a safetensors header, leaving the data as it is: the damage that a
checksum of the bytes cannot see (a dtype I32 over F32 bytes, a shape [-1, -64]).
TENSOR "*" edits every tensor; TENSOR "first" the first one in the header.

  python3 tests/scripts/edit_safetensors_header.py ck/step-000002/rank-00000.safetensors first dtype '"I32"'
"""
import json
import struct
import sys

path, tensor, field, value = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
names = [k for k in header if k != "__metadata__"]
for name in names if tensor == "*" else [names[0]] if tensor == "first" else [tensor]:
    header[name][field] = value
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
print(f"{path}: {field} = {json.dumps(value)} in {tensor}")
