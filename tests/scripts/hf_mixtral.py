#!/usr/bin/env python3
"""hf_mixtral.py WORKDIR TRAIN — picotron's mixture of experts against transformers' MixtralForCausalLM.

A small random Mixtral (H 64, I 96 per expert, 2 layers, 4 heads, 2 kv heads, V 256, E 4
experts, top-2, router_aux_loss_coef 0.02) is saved with save_pretrained. Its router is
scaled up (x20) so that no token sits near a tie between two experts: a tie broken
differently by rounding would route it elsewhere and hide real differences.

  import   build/train --init-from it --steps 0 --eval: logits within 1e-5 of the largest
           logit, loss within 1e-5 relative, the greedy continuation exactly (fp32, as
           tests/scripts/hf_roundtrip.py).
  step     one training step on a token file of exactly --seq-len + 1 tokens (so every row
           of the batch is that one window): our first-step loss (metrics file) equals
           transformers' loss with output_router_logits=True, i.e. cross-entropy +
           router_aux_loss_coef x load-balancing loss, within 1e-5 relative. Then
           transformers' backward and torch.optim.AdamW (no weight decay, no clipping, same
           lr, betas, eps) give the parameters after the step; ours (--save-params) must
           agree. eps is 1 and lr 1, so an update is g / (|g| + 1), about g: the check sees
           each gradient's size, not only its sign. Per tensor, max |ours - torch| over
           max |torch's update| within 1e-4 (fp32 gradients of two implementations that
           sum in different orders; an error of a term, e.g. no aux loss, is O(1)).
  export   --export-hf of the trained model is a Mixtral folder that
           MixtralForCausalLM.from_pretrained loads; its logits and loss equal our --eval of
           the trained parameters (1e-5), its tensors equal --save-params exactly.
  refused  sliding_window shorter than --seq-len, router_jitter_noise > 0: one error line.
Prints "hf mixtral ok" or "FAILED: ...".
"""
import json, os, shutil, struct, subprocess, sys

import safetensors.torch
import torch
import transformers

work, train = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
RTOL, STEP_RTOL = 1e-5, 1e-4
S, B, V = 16, 2, 256
LR, BETAS, EPS = 1.0, (0.9, 0.95), 1.0
torch.manual_seed(0)
ids = torch.randint(0, V, (2, S))  # the --eval batch: two different rows
eval_path = os.path.join(work, "eval.json")
json.dump({"input_ids": ids.tolist()}, open(eval_path, "w"))
window = torch.randint(0, V, (S + 1,))  # the training data: one window of S + 1 tokens
prompt = [10, 20, 30, 40]
failures = []


def check(what, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {detail}")
    if not ok:
        failures.append(what)


def run(cmd, expect_ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if expect_ok and r.returncode != 0:
        print(r.stdout, r.stderr)
        raise SystemExit(f"FAILED: {' '.join(cmd)}")
    return r


def ours(folder, name, extra=()):
    logits = os.path.join(work, name + ".logits.json")
    r = run([train, "--device", "cpu", "--dtype", "fp32", "--init-from", folder, "--eval", eval_path, "--eval-logits",
             logits, "--prompt-ids", ",".join(map(str, prompt)), "--generate", "8", "--threads", "1", *extra])
    got = json.load(open(logits))
    line = [l for l in r.stdout.splitlines() if l.startswith("prompt ids:")][0]
    continuation = [int(t) for t in line.split("->")[1].split("[")[0].split()]
    return got["loss"], torch.tensor(got["logits"], dtype=torch.float64), continuation


def hf_reference(model):
    with torch.no_grad():
        out = model(ids, labels=ids)  # no router logits asked for: cross-entropy alone, as our --eval
        gen = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=0)
    return out.loss.item(), out.logits.double(), gen[0, len(prompt):].tolist()


def compare(what, ref, got):
    (ref_loss, ref_logits, ref_gen), (loss, logits, gen) = ref, got
    err = ((logits - ref_logits).abs().max() / ref_logits.abs().max()).item()
    check(what + " logits", err <= RTOL, f"max |ours - transformers| / max |logit| = {err:.2e}")
    lerr = abs(loss - ref_loss) / abs(ref_loss)
    check(what + " loss", lerr <= RTOL, f"{loss:.9f} vs {ref_loss:.9f} (rel {lerr:.1e})")
    check(what + " greedy continuation", gen == ref_gen, f"{gen} vs {ref_gen}")


# ---- the folder ------------------------------------------------------------------------
config = transformers.MixtralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=V, max_position_embeddings=128,
                                    num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.02)
torch.manual_seed(1)
model = transformers.MixtralForCausalLM(config).float()
with torch.no_grad():
    for n, p in model.named_parameters():
        if "norm" in n:  # gains away from 1, so a missing norm weight would show
            p.add_(0.1 * torch.randn_like(p))
        if n.endswith("block_sparse_moe.gate.weight"):  # decisive routing (see the docstring)
            p.mul_(20.0)
folder = os.path.join(work, "mixtral")
shutil.rmtree(folder, ignore_errors=True)
model.save_pretrained(folder, safe_serialization=True)
saved = json.load(open(os.path.join(folder, "config.json")))
print(f"== {folder}: {', '.join(sorted(os.listdir(folder)))}; sliding_window {saved.get('sliding_window')}, "
      f"router_jitter_noise {saved.get('router_jitter_noise')}")


def reference():  # what transformers itself loads from the folder, in fp32
    return transformers.MixtralForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)


# ---- import: --steps 0 ------------------------------------------------------------------
compare("import", hf_reference(reference().eval()), ours(folder, "import", ["--steps", "0"]))

# ---- one training step ------------------------------------------------------------------
data = os.path.join(work, "window.bin")  # PICOTOK1, 2 bytes a token, S + 1 tokens (docs/data.md)
with open(data, "wb") as f:
    f.write(b"PICOTOK1" + struct.pack("<IIQ", 2, 0, S + 1) + struct.pack(f"<{S + 1}H", *window.tolist()))
metrics, params, export = (os.path.join(work, n) for n in ("metrics.jsonl", "params.safetensors", "export"))
for p in (metrics, params):
    if os.path.exists(p):
        os.remove(p)
shutil.rmtree(export, ignore_errors=True)
trained = ours(folder, "trained", ["--steps", "1", "--seq-len", str(S), "--micro-batch-size", str(B), "--data", data,
                                   "--lr", str(LR), "--warmup-steps", "0", "--weight-decay", "0", "--grad-clip", "0",
                                   "--beta1", str(BETAS[0]), "--beta2", str(BETAS[1]), "--adam-eps", str(EPS),
                                   "--metrics-file", metrics, "--save-params", params, "--export-hf", export])
step_loss = json.loads(open(metrics).readline())["loss"]

hf = reference().train()  # dropout 0 and no jitter: training mode computes what eval mode does
before = {n: p.detach().clone() for n, p in hf.named_parameters()}
x = window[:S].repeat(B, 1)                  # [B, S] our inputs (every row the one window)
y = window[1:].repeat(B, 1).contiguous()     # [B, S] our targets
out = hf(x, labels=x, shift_labels=y, output_router_logits=True)  # loss = CE(y) + coef * aux
ce = torch.nn.functional.cross_entropy(out.logits.reshape(-1, V), y.reshape(-1)).item()
lerr = abs(step_loss - out.loss.item()) / abs(out.loss.item())
check("first-step loss = transformers' CE + coef x aux", lerr <= RTOL,
      f"{step_loss:.9f} vs {out.loss.item():.9f} (rel {lerr:.1e}; CE {ce:.6f}, aux {out.aux_loss.item():.6f})")
out.loss.backward()
torch.optim.AdamW(hf.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0).step()
got = safetensors.torch.load_file(params)
check("parameter names", set(got) == set(before), f"{len(got)} ours, {len(before)} transformers'")
worst, worst_name = 0.0, ""
for n, p in hf.named_parameters():
    update = (p.detach() - before[n]).abs().max().item()
    err = (got[n].float() - p.detach()).abs().max().item() / max(update, 1e-30)
    if err > worst:
        worst, worst_name = err, n
router_update = max((p.detach() - before[n]).abs().max().item() for n, p in hf.named_parameters() if "gate" in n)
check("parameters after one AdamW step", worst <= STEP_RTOL,
      f"max over tensors of max |ours - torch| / max |update| = {worst:.2e} ({worst_name}); router update {router_update:.2e}")

# ---- export: transformers loads the trained model ----------------------------------------
exported = json.load(open(os.path.join(export, "config.json")))
check("export config", exported.get("model_type") == "mixtral" and exported.get("architectures") == ["MixtralForCausalLM"]
      and exported.get("num_local_experts") == 4 and exported.get("num_experts_per_tok") == 2
      and exported.get("router_aux_loss_coef") == 0.02,
      f"{exported.get('architectures')}, E {exported.get('num_local_experts')}, k {exported.get('num_experts_per_tok')}, "
      f"coef {exported.get('router_aux_loss_coef')}")
back = transformers.MixtralForCausalLM.from_pretrained(export).float().eval()
tensors = safetensors.torch.load_file(os.path.join(export, "model.safetensors"))
check("export tensors = --save-params", set(tensors) == set(got) and all(torch.equal(tensors[n], got[n].float()) for n in got),
      f"{len(tensors)} tensors")
compare("export -> transformers", hf_reference(back), trained)

# ---- refused: what this model does not compute -------------------------------------------
for field, value, expect in [("sliding_window", 8, "sliding_window 8 is shorter than --seq-len 16"),
                             ("router_jitter_noise", 0.1, "router_jitter_noise 0.1")]:
    bad = os.path.join(work, "bad_" + field)
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(folder, bad)
    json.dump({**saved, field: value}, open(os.path.join(bad, "config.json"), "w"))
    r = run([train, "--device", "cpu", "--init-from", bad, "--steps", "0", "--seq-len", str(S), "--generate", "0"], False)
    errors = [l for l in (r.stdout + r.stderr).splitlines() if "error" in l]
    check(f"{field} {value} refused", r.returncode != 0 and any(expect in l for l in errors), errors[0] if errors else "no error")

print("hf mixtral ok" if not failures else "FAILED: " + ", ".join(failures))
