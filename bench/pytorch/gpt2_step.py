#!/usr/bin/python3
"""GPT-2 124M training-step throughput in PyTorch on the CPU, for comparison with
`ndtrain bench train --preset gpt2-124m`.

Benchmark only: PyTorch is not a dependency of ndtrain. See README.md here.

The model has the shapes of ndtrain's `gpt2-124m` preset (src/model/config.cpp):
12 layers, 12 heads, d_model 768, MLP 4x (3072), vocabulary 50257 (not padded;
--vocab changes it), 1024 learned positions, LayerNorm eps 1e-5 with biases,
separate Q/K/V projections with biases, GELU (tanh approximation), tied token
embedding / output layer without bias, no dropout. One step, as ndtrain's bench
times it: zero the gradients, forward, mean cross-entropy over B*T tokens,
backward, global-norm clipping to 1.0, AdamW. The same random tokens (fixed seed)
are used for every step.
"""

import argparse
import inspect
import json
import math
import os
import statistics
import sys
import time


def use_the_best_blas_kernels():
    """As ndtrain does at start-up (src/kernels/cpu/blas_core.cpp): where OpenBLAS picked a
    generic/pre-AVX2 core for this CPU, restart with SkylakeX (AVX-512) or Haswell (AVX2).
    Must run before torch loads libopenblas. A user's OPENBLAS_CORETYPE is kept."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
    except Exception:
        return
    weak = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Sandybridge", "Atom", "Katmai"}
    if core not in weak:
        return
    flags = cpu_flags_set()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        better = "SkylakeX"
    elif {"avx2", "fma"} <= flags:
        better = "Haswell"
    else:
        return
    os.environ["OPENBLAS_CORETYPE"] = better
    os.environ["NDT_OPENBLAS_CORE_DETECTED"] = core
    os.execv(sys.executable, [sys.executable] + sys.argv)


def cpu_flags_set():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


if __name__ == "__main__":
    use_the_best_blas_kernels()

import torch  # noqa: E402
import torch.nn as nn
import torch.nn.functional as F  # noqa: E402


class Config:
    vocab_size = 50257
    max_seq_len = 1024
    n_layer = 12
    n_head = 12
    d_model = 768
    d_ff = 4 * 768
    norm_eps = 1e-5
    init_std = 0.02


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.wq = nn.Linear(c.d_model, c.d_model)
        self.wk = nn.Linear(c.d_model, c.d_model)
        self.wv = nn.Linear(c.d_model, c.d_model)
        self.wo = nn.Linear(c.d_model, c.d_model)
        mask = torch.tril(torch.ones(c.max_seq_len, c.max_seq_len, dtype=torch.bool))
        self.register_buffer("causal", mask.view(1, 1, c.max_seq_len, c.max_seq_len), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H = self.n_head
        q = self.wq(x).view(B, T, H, C // H).transpose(1, 2)  # B H T hd
        k = self.wk(x).view(B, T, H, C // H).transpose(1, 2)
        v = self.wv(x).view(B, T, H, C // H).transpose(1, 2)
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if sdpa is not None:  # PyTorch >= 2.0
            y = sdpa(q, k, v, is_causal=True)
        else:  # explicit scores, causal mask, softmax
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            scores = scores.masked_fill(~self.causal[:, :, :T, :T], float("-inf"))
            y = F.softmax(scores, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.wo(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = nn.Linear(c.d_model, c.d_ff)
        self.proj = nn.Linear(c.d_ff, c.d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.d_model, eps=c.norm_eps)
        self.attn = CausalSelfAttention(c)
        self.ln2 = nn.LayerNorm(c.d_model, eps=c.norm_eps)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT2(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c.vocab_size, c.d_model)
        self.wpe = nn.Embedding(c.max_seq_len, c.d_model)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.lnf = nn.LayerNorm(c.d_model, eps=c.norm_eps)
        # Initialisation as ndtrain: N(0, init_std), residual projections
        # init_std / sqrt(2 n_layer), biases zero, norms one/zero.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 1:
                nn.init.ones_(p)
            elif name.endswith("wo.weight") or name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, c.init_std / math.sqrt(2 * c.n_layer))
            else:
                nn.init.normal_(p, 0.0, c.init_std)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        x = self.lnf(x)
        logits = F.linear(x, self.wte.weight)  # tied output layer, no bias
        return F.cross_entropy(logits.float().view(B * T, -1), targets.view(B * T))


def cpu_flags():
    flags = set()
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                elif line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    wanted = ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"]
    return model, {w: (w in flags) for w in wanted}


def mkldnn_bf16_supported():
    """oneDNN's own bf16 check (avx512bw/vl/dq or better); None where this torch lacks it."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:
        return None


def openblas_core():
    """The kernel set OpenBLAS chose (torch's fp32 matmuls on Debian go through libblas.so.3)."""
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except Exception:
        return None


def make_optimizer(model, lr, weight_decay):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    params = inspect.signature(torch.optim.AdamW).parameters
    kwargs, mode = {}, "for-loop"
    # fused AdamW runs on CPU only from PyTorch 2.4; before that it is CUDA only.
    fused_cpu = "fused" in params and tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 4)
    if fused_cpu:
        kwargs["fused"], mode = True, "fused"
    elif "foreach" in params:
        kwargs["foreach"], mode = True, "foreach"
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, **kwargs)
    return opt, mode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: torch.autocast('cpu', bfloat16) around forward+loss, fp32 master weights")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before the timed ones")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (ndtrain's default is 1)")
    ap.add_argument("--vocab", type=int, default=0, help="override the vocabulary (e.g. 50304); 0: 50257")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(a.seed)
    c = Config()
    if a.vocab > 0:
        c.vocab_size = a.vocab
    if a.seq > c.max_seq_len:
        sys.exit(f"--seq {a.seq} exceeds max_seq_len {c.max_seq_len}")

    model = GPT2(c)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    opt, opt_mode = make_optimizer(model, a.lr, a.weight_decay)

    g = torch.Generator().manual_seed(a.seed)
    data = torch.randint(0, c.vocab_size, (a.batch, a.seq + 1), generator=g)
    idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    bf16 = a.precision == "bf16"
    print(f"pytorch {torch.__version__}: gpt2-124m ({n_params / 1e6:.2f}M parameters, vocab {c.vocab_size}), "
          f"B={a.batch} T={a.seq}, {a.threads} thread(s), {a.precision}, AdamW {opt_mode}", flush=True)

    def step():
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(idx, targets)
        else:
            loss = model(idx, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return time.perf_counter() - t0, loss.item(), float(norm)

    times = []
    for s in range(a.warmup + a.steps):
        dt, loss, norm = step()
        warm = s < a.warmup
        print(f"  step {s}: {dt:.3f} s, loss {loss:.4f}, grad norm {norm:.3f}"
              + (" (warm-up, not counted)" if warm else ""), flush=True)
        if not warm:
            times.append(dt)

    step_s = statistics.median(times)
    cpu_model, flags = cpu_flags()
    result = {
        "bench": "pytorch_gpt2_step",
        "model": "gpt2-124m",
        "parameters": n_params,
        "vocab_size": c.vocab_size,
        "batch": a.batch,
        "seq": a.seq,
        "precision": a.precision,
        "threads": torch.get_num_threads(),
        "steps": a.steps,
        "warmup": a.warmup,
        "median_step_s": step_s,
        "tokens_per_s": a.batch * a.seq / step_s,
        "step_times_s": times,
        "torch_version": torch.__version__,
        "adamw": opt_mode,
        "mkldnn_available": torch.backends.mkldnn.is_available(),
        "mkldnn_bf16_supported": mkldnn_bf16_supported(),
        "openblas_core": openblas_core(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "openblas_core_detected": os.environ.get("NDT_OPENBLAS_CORE_DETECTED"),
        "cpu": cpu_model,
        "cpu_flags": flags,
        "logical_cpus": os.cpu_count(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
