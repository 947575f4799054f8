#!/usr/bin/env python3
"""tests/scripts/hf_untrusted.py WORK TRAIN — Hugging Face folders nobody checked (--init-from):
each damage is one line naming the file and what is wrong, and a non-zero exit:
  an index that names a shard outside the folder ("../", an absolute path);
  a tensor the config does not describe (an lm_head under tied embeddings; a layer past
  num_hidden_layers); non-finite weights; two tensors whose bytes overlap.
Prints "hf untrusted ok" when every case is refused as it should be.
"""
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

work, train = Path(sys.argv[1]), sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
work.mkdir(parents=True)
flags = ["--device", "cpu", "--threads", "1", "--seq-len", "16", "--micro-batch-size", "2", "--generate", "0"]
subprocess.run([train, *flags, "--steps", "1", "--export-hf", str(work / "good")], check=True, capture_output=True)
failures = []


def case(name, expect, edit):
    folder = work / name
    shutil.copytree(work / "good", folder)
    edit(folder)
    r = subprocess.run([train, *flags, "--steps", "0", "--init-from", str(folder)], capture_output=True, text=True)
    lines = [l for l in (r.stdout + r.stderr).splitlines() if "error" in l]
    ok = r.returncode != 0 and any(expect in l for l in lines)
    print(("ok: " if ok else "FAILED: ") + name + (f": {lines[0] if lines else (r.stdout + r.stderr)[-300:]}"))
    if not ok:
        failures.append(name)


def index_pointing_to(target):
    def edit(folder):
        weights = load_file(folder / "model.safetensors")
        (folder / "model.safetensors").rename(folder / "shard.safetensors")
        wmap = {name: "shard.safetensors" for name in weights}
        wmap["model.norm.weight"] = target
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    return edit


def add_tensor(name, like):
    def edit(folder):
        w = load_file(folder / "model.safetensors")
        w[name] = w[like].clone()
        save_file(w, folder / "model.safetensors", metadata={"format": "pt"})
    return edit


def nan_weight(folder):
    w = load_file(folder / "model.safetensors")
    w["model.layers.0.mlp.up_proj.weight"][0, 0] = float("nan")
    save_file(w, folder / "model.safetensors", metadata={"format": "pt"})


def overlap(folder):
    data = (folder / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    a, b = "model.norm.weight", "model.layers.0.input_layernorm.weight"  # same shape: point b at a's bytes
    header[b]["data_offsets"] = header[a]["data_offsets"]
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])


def header_edit(tensor, field, value):  # the header rewritten, the bytes untouched
    def edit(folder):
        path = folder / "model.safetensors"
        data = path.read_bytes()
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        for name in [k for k in header if k != "__metadata__"] if tensor == "*" else [tensor]:
            header[name][field] = value
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])
    return edit


def config_edit(field, value):
    def edit(folder):
        config = json.loads((folder / "config.json").read_text())
        config[field] = value
        (folder / "config.json").write_text(json.dumps(config))
    return edit


case("index_parent", "not a file of the folder", index_pointing_to("../good/model.safetensors"))
case("index_absolute", "not a file of the folder", index_pointing_to(str((work / "good" / "model.safetensors").resolve())))
case("lm_head_under_tied", "'lm_head.weight' (in model.safetensors) is not part of the model", add_tensor("lm_head.weight", "model.embed_tokens.weight"))
case("extra_layer", "'model.layers.9.mlp.up_proj.weight' (in model.safetensors) is not part of the model",
     add_tensor("model.layers.9.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"))
case("nan_weights", "holds non-finite values", nan_weight)
case("overlapping_offsets", "overlap", overlap)
# Headers that cannot be right, named before any tensor is used (LibTorch's "Trying to
# create tensor with negative dimension" and "Storage size calculation overflowed" before).
case("every_dtype_i32", "is I32, not a floating-point dtype", header_edit("*", "dtype", "I32"))
case("negative_dims", "impossible shape [-1, -128]: a negative dimension", header_edit("model.norm.weight", "shape", [-1, -128]))
case("overflowing_shape", "impossible shape [4611686018427387904, 4]: more than 2^63", header_edit("model.norm.weight", "shape", [2**62, 4]))
case("shape_not_config", "'model.norm.weight' is [2, 64], the config says [128]", header_edit("model.norm.weight", "shape", [2, 64]))
# config.json's values are named as config.json's, not as flags nobody gave.
case("config_layers_2_31", "config.json: num_hidden_layers must be <= 1024, got 2147483648", config_edit("num_hidden_layers", 2**31))
case("config_kv_heads_3", "config.json: num_attention_heads 4 is not divisible by num_key_value_heads 3", config_edit("num_key_value_heads", 3))
print("hf untrusted ok" if not failures else f"FAILED: {failures}")
sys.exit(1 if failures else 0)
