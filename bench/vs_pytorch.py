#!/usr/bin/env python3
# bench/vs_pytorch.py — the PyTorch-eager twin of `build/train --device cpu --data
# synthetic`, for bench/vs_pytorch.sh: it measures training throughput (tokens/s) of
# the same LLaMA, batch, threads and optimizer written as a plain Python program.
#
#   python bench/vs_pytorch.py --threads 2 --steps 30 --seq-len 128 --micro-batch-size 4 \
#       --hidden-size 576 --intermediate-size 1152 --num-hidden-layers 4 \
#       --num-attention-heads 9 --num-key-value-heads 3 --vocab-size 256 --metrics-file py.jsonl
#   python bench/vs_pytorch.py --dry-run ...     # print the parameter count and exit
#
# What is the same as picotron (picotron/model.cpp, optim.cpp, train.cpp):
#   model  embedding -> L x [RMSNorm (fp32 statistics) -> GQA attention (RoPE, Hugging
#          Face rotate_half; k/v heads repeat_interleave'd; F.scaled_dot_product_attention
#          is_causal) -> residual -> RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm ->
#          tied head (embedding^T); bias-free linears; mean cross-entropy; fp32
#   init   weight matrices and embedding ~ N(0, 0.02^2), norm gains 1
#   optim  torch.optim.AdamW(betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on >= 2-D
#          parameters only), clip_grad_norm_(1.0), linear warmup then cosine LR
#   data   uniform random tokens in [0, V), B rows of S + 1 tokens per step
#   timer  one step = make the batch, forward, backward, clip, AdamW step, loss.item()
# Each step writes {"step": n, "loss": ..., "tokens_per_s": ...} to --metrics-file, the
# fields of picotron's metrics file that the benchmark reads.
#
# GPU mode (--device cuda, bench/vs_pytorch.sh with DEVICE=cuda): what a user would
# otherwise run, with picotron's bf16 recipe (fp32 weights under torch.autocast(bf16),
# torch.optim.AdamW(fused=True)), the same clipping and schedule; the timer waits for the
# GPU (loss.item()). Two models:
#   --impl minimal       the model above as a student writes it for a GPU: one GEMM for
#                        q/k/v and one for gate/up, SDPA with enable_gqa (no K/V copies);
#                        --compile runs it under torch.compile
#   --impl transformers  LlamaForCausalLM as the transformers library builds it
#                        (attn_implementation="sdpa", tied embeddings)
# Each step also writes peak_mem_bytes (torch.cuda.max_memory_allocated of that step).
import argparse
import json
import math
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # a venv without numpy: harmless
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):  # [..., H] -> [..., H], statistics in fp32
        xf = x.float()
        inv_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)  # [..., 1]
        return self.weight * (xf * inv_rms).to(x.dtype)


def rope_tables(head_dim, theta, seq_len, dtype):  # cos, sin [S, Hd]; computed in fp64
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # [Hd/2]
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)           # [S, Hd/2]
    angles = torch.cat([freqs, freqs], dim=-1)                                           # [S, Hd]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):  # x [B, n, S, Hd]; rotate_half([x1, x2]) = [-x2, x1]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.nh, self.nkv, self.hd = a.num_attention_heads, a.num_key_value_heads, a.hidden_size // a.num_attention_heads
        h = a.hidden_size
        self.fused = a.device == "cuda"  # GPU: q, k, v from one GEMM, and SDPA reads K/V per group
        if self.fused:
            self.qkv_proj = nn.Linear(h, (self.nh + 2 * self.nkv) * self.hd, bias=False)
        else:
            self.q_proj = nn.Linear(h, self.nh * self.hd, bias=False)
            self.k_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
            self.v_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, h, bias=False)

    def forward(self, x, cos, sin):  # [B, S, H] -> [B, S, H]
        b, s, _ = x.shape
        if self.fused:
            q, k, v = self.qkv_proj(x).split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, s, self.nh, self.hd).transpose(1, 2)    # [B, nH, S, Hd]
        k = k.view(b, s, self.nkv, self.hd).transpose(1, 2)   # [B, nKV, S, Hd]
        v = v.view(b, s, self.nkv, self.hd).transpose(1, 2)   # [B, nKV, S, Hd]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.fused:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # [B, nH, S, Hd]
        else:
            group = self.nh // self.nkv
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # [B, nH, S, Hd]
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)               # [B, nH, S, Hd]
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.fused = a.device == "cuda"  # GPU: gate and up from one GEMM
        if self.fused:
            self.gate_up_proj = nn.Linear(a.hidden_size, 2 * a.intermediate_size, bias=False)
        else:
            self.gate_proj = nn.Linear(a.hidden_size, a.intermediate_size, bias=False)
            self.up_proj = nn.Linear(a.hidden_size, a.intermediate_size, bias=False)
        self.down_proj = nn.Linear(a.intermediate_size, a.hidden_size, bias=False)

    def forward(self, x):  # [B, S, H] -> [B, S, H]
        if self.fused:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # [B, S, I] each
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.input_layernorm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.self_attn = Attention(a)
        self.post_attention_layernorm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.mlp = MLP(a)

    def forward(self, x, cos, sin):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class Llama(nn.Module):  # tied head: logits = norm(x) @ embed_tokens.weight^T
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(a) for _ in range(a.num_hidden_layers))
        self.norm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        table_dtype = torch.bfloat16 if a.device == "cuda" else torch.float32  # the compute dtype (autocast)
        cos, sin = rope_tables(a.hidden_size // a.num_attention_heads, a.rope_theta, a.seq_len, table_dtype)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, tokens, targets):  # [B, S], [B, S] -> scalar: the mean loss
        x = self.embed_tokens(tokens)                                   # [B, S, H]
        cos, sin = self.cos[: tokens.size(1)], self.sin[: tokens.size(1)]
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.norm(x) @ self.embed_tokens.weight.t()            # [B, S, V]
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def lr_at(step, a):  # picotron's lr_at: linear warmup, then cosine to min_lr at the last step
    if step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    progress = min(1.0, (step - a.warmup_steps) / max(1, a.steps - a.warmup_steps - 1))
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * progress))


def transformers_llama(a):
    """The model as the transformers library builds it, on the GPU, fp32 weights."""
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402 (only the GPU mode needs it)

    config = LlamaConfig(hidden_size=a.hidden_size, intermediate_size=a.intermediate_size,
                         num_hidden_layers=a.num_hidden_layers, num_attention_heads=a.num_attention_heads,
                         num_key_value_heads=a.num_key_value_heads, vocab_size=a.vocab_size,
                         rope_theta=a.rope_theta, rms_norm_eps=a.rms_norm_eps, tie_word_embeddings=True,
                         max_position_embeddings=a.seq_len, attention_bias=False, mlp_bias=False)
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa").to("cuda")

    def loss(tokens, targets):  # [B, S], [B, S] -> scalar: mean cross-entropy, as picotron's
        logits = model(input_ids=tokens, use_cache=False).logits  # [B, S, V]
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    model.loss = loss
    return model


def build(a):
    """-> (the module whose parameters train, loss(tokens, targets))."""
    if a.impl == "transformers":
        model = transformers_llama(a)
        return model, model.loss
    model = Llama(a).to(a.device)
    return model, (torch.compile(model) if a.compile else model)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--hidden-size", type=int, default=128)
    p.add_argument("--intermediate-size", type=int, default=384)
    p.add_argument("--num-hidden-layers", type=int, default=4)
    p.add_argument("--num-attention-heads", type=int, default=4)
    p.add_argument("--num-key-value-heads", type=int, default=2)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rms-norm-eps", type=float, default=1e-5)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--micro-batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr", type=float, default=3e-4)
    p.add_argument("--warmup-steps", type=int, default=1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--metrics-file", default="")
    p.add_argument("--dry-run", action="store_true", help="print the parameter count and exit")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: bf16 autocast over fp32 weights, fused AdamW")
    p.add_argument("--impl", choices=["minimal", "transformers"], default="minimal",
                   help="minimal: the model of this file; transformers: LlamaForCausalLM (sdpa), cuda only")
    p.add_argument("--compile", action="store_true", help="the minimal model under torch.compile")
    a = p.parse_args()
    if a.impl == "transformers" and (a.device != "cuda" or a.compile):
        p.error("--impl transformers runs on --device cuda, without --compile")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model, loss_of = build(a)
    total = sum(t.numel() for t in model.parameters())  # the tied head is counted once
    print(f"total parameters   {total} ({total:,})", flush=True)
    if a.dry_run:
        return
    decay = [t for t in model.parameters() if t.dim() >= 2]
    no_decay = [t for t in model.parameters() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=a.device == "cuda")
    precision = "fp32" if a.device == "cpu" else "bf16 autocast, fp32 weights, sdpa, fused AdamW"
    precision += f", {a.impl}" + (" under torch.compile" if a.compile else "")
    print(f"pytorch {torch.__version__}, {a.device}, {torch.get_num_threads()} thread(s), {precision}, "
          f"batch {a.micro_batch_size} x {a.seq_len}", flush=True)
    tokens_per_step = a.micro_batch_size * a.seq_len
    gen = torch.Generator()
    metrics = open(a.metrics_file, "w") if a.metrics_file else None
    for step in range(a.steps):
        t0 = time.perf_counter()
        gen.manual_seed(a.seed * 1_000_003 + step)
        rows = torch.randint(0, a.vocab_size, (a.micro_batch_size, a.seq_len + 1), generator=gen)  # [B, S+1]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        opt.zero_grad(set_to_none=True)
        rows = rows.to(a.device)
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.device == "cuda"):
            loss = loss_of(rows[:, :-1], rows[:, 1:])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = loss.item()
        seconds = time.perf_counter() - t0
        tps = tokens_per_step / seconds
        if metrics:
            row = {"step": step + 1, "loss": loss_value, "lr": lr_at(step, a), "grad_norm": norm.item(),
                   "tokens_per_s": tps}
            if a.device == "cuda":
                row["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
            metrics.write(json.dumps(row) + "\n")
            metrics.flush()
        if step == 0 or step + 1 == a.steps:
            print(f"step {step + 1:5d}/{a.steps} | loss {loss_value:.6g} | {tps:,.0f} tok/s", flush=True)


if __name__ == "__main__":
    main()
