#!/usr/bin/env python3
"""hf_roundtrip.py WORKDIR TRAIN [MPIRUN...] — picotron against transformers, not against itself.

For each variant (GQA + untied + rope_theta 500000; tied; weights stored in bf16; a sharded
checkpoint) a small random transformers.LlamaForCausalLM is saved with save_pretrained;
build/train --init-from it --steps 0 evaluates a fixed batch (--eval) and greedily continues
a prompt (--prompt-ids); loss, logits and continuation must match transformers' own (fp32:
logits within 1e-5 of the largest logit, loss within 1e-5 relative; the continuation exactly).
Then the round trip: train 3 steps from it, --export-hf, and transformers' from_pretrained
of the export must give our logits. And the same import on tp 2 under mpirun.
Prints "hf ok" or "FAILED: ...".
"""
import json, os, shutil, subprocess, sys

import torch
import transformers

work, train = sys.argv[1], sys.argv[2]
mpirun = sys.argv[3:]
os.makedirs(work, exist_ok=True)
RTOL = 1e-5
torch.manual_seed(0)
ids = torch.randint(0, 256, (2, 24))
eval_path = os.path.join(work, "eval.json")
json.dump({"input_ids": ids.tolist()}, open(eval_path, "w"))
prompt = [10, 20, 30, 40]
failures = []


def check(what, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {detail}")
    if not ok:
        failures.append(what)


def hf_reference(model):
    with torch.no_grad():
        out = model(ids, labels=ids)  # transformers shifts the labels: mean over B x (S-1)
        gen = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=0)
    return out.loss.item(), out.logits.double(), gen[0, len(prompt):].tolist()


def ours(folder, name, extra=(), launcher=()):
    logits = os.path.join(work, name + ".logits.json")
    cmd = [*launcher, train, "--device", "cpu", "--dtype", "fp32", "--init-from", folder, "--steps", "0", "--eval",
           eval_path, "--eval-logits", logits, "--prompt-ids", ",".join(map(str, prompt)), "--generate", "8",
           "--threads", "1", *extra]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        raise SystemExit(f"FAILED: {' '.join(cmd)}")
    got = json.load(open(logits))
    line = [l for l in run.stdout.splitlines() if l.startswith("prompt ids:")][0]
    continuation = [int(t) for t in line.split("->")[1].split("[")[0].split()]
    return got["loss"], torch.tensor(got["logits"], dtype=torch.float64), continuation, run.stdout


def compare(what, ref, got):
    (ref_loss, ref_logits, ref_gen), (loss, logits, gen) = ref, got[:3]
    err = ((logits - ref_logits).abs().max() / ref_logits.abs().max()).item()
    check(what + " logits", err <= RTOL, f"max |ours - transformers| / max |logit| = {err:.2e}")
    lerr = abs(loss - ref_loss) / abs(ref_loss)
    check(what + " loss", lerr <= RTOL, f"{loss:.9f} vs {ref_loss:.9f} (rel {lerr:.1e})")
    check(what + " greedy continuation", gen == ref_gen, f"{gen} vs {ref_gen}")


def variant(name, tied, theta, dtype=torch.float32, shard=None):
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                      max_position_embeddings=128, rope_theta=theta, rms_norm_eps=1e-5,
                                      tie_word_embeddings=tied)
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():  # norm gains away from 1, so a missing norm weight would show
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(0.1 * torch.randn_like(p))
    folder = os.path.join(work, name)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.to(dtype).save_pretrained(folder, safe_serialization=True, **kwargs)
    # The reference: what transformers itself loads from the folder, computing in fp32.
    return folder, transformers.LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()


folders = {}
for name, tied, theta, dtype, shard in [("gqa_untied_theta", False, 500000.0, torch.float32, None),
                                        ("tied", True, 10000.0, torch.float32, None),
                                        ("bf16_weights", False, 10000.0, torch.bfloat16, None),
                                        ("sharded", False, 500000.0, torch.float32, "60KB")]:
    folder, model = variant(name, tied, theta, dtype, shard)
    files = sorted(os.listdir(folder))
    print(f"== {name}: {', '.join(files)}")
    ref = hf_reference(model)
    compare(name, ref, ours(folder, name))
    folders[name] = (folder, model, ref)

# The same import on tp 2 (each rank reads its slices), when mpirun is given.
if mpirun:
    folder, model, ref = folders["gqa_untied_theta"]
    compare("tp2 import", ref, ours(folder, "tp2", ["--tp", "2"], mpirun + ["-np", "2"]))

# Round trip: train from the import, export, and load the export with transformers.
for name in ("gqa_untied_theta", "tied"):
    folder = folders[name][0]
    export = os.path.join(work, name + "_export")
    loss, logits, gen, out = ours(folder, name + "_trained", ["--steps", "3", "--seq-len", "32", "--micro-batch-size", "2",
                                                               "--warmup-steps", "1", "--data", "synthetic",
                                                               "--export-hf", export])
    back = transformers.LlamaForCausalLM.from_pretrained(export).float().eval()
    compare(name + " export -> transformers", hf_reference(back), (loss, logits, gen))
    check(name + " export tied", back.config.tie_word_embeddings == (name == "tied"), str(back.config.tie_word_embeddings))

# Our own files are safetensors too: Python reads a checkpoint's rank file and --save-params.
import safetensors.torch
ckpt, params = os.path.join(work, "ckpt"), os.path.join(work, "params.safetensors")
shutil.rmtree(ckpt, ignore_errors=True)  # a fresh run: a --save-dir holding an earlier run's checkpoints is refused
subprocess.run([train, "--device", "cpu", "--steps", "2", "--seq-len", "32", "--micro-batch-size", "2", "--generate", "0",
                "--save-dir", ckpt, "--save-params", params, "--threads", "1"], check=True, capture_output=True)
pieces = safetensors.torch.load_file(os.path.join(ckpt, "step-000002", "rank-00000.safetensors"))
full = safetensors.torch.load_file(params)
same = torch.equal(pieces["model.norm.weight/master"], full["model.norm.weight"])
check("checkpoint and --save-params files read by safetensors.torch", same and len(pieces) == 3 * len(full),
      f"{len(pieces)} checkpoint tensors (master, exp_avg, exp_avg_sq of {len(full)} parameters)")

print("hf ok" if not failures else "FAILED: " + ", ".join(failures))
