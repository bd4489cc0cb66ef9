#!/usr/bin/python3
"""Llama3Model and Qwen3Model of "Build a Large Language Model (From Scratch)",
re-implemented in plain PyTorch (Debian's torch 1.13 has no nn.RMSNorm and no
F.scaled_dot_product_attention, so both are written out by hand with the same math).

Matched against github:rasbt/LLMs-from-scratch at commit
28c65cdfbc3338e2e040016eea4b7fdf556e4d57 (2026-04-16), line for line:
  * pkg/llms_from_scratch/llama3.py          (Llama3Model, GroupedQueryAttention, FeedForward,
                                               compute_rope_params, apply_rope, load_weights_into_llama)
  * ch05/07_gpt_to_llama/standalone-llama32.ipynb   (same classes, same code)
  * ch05/07_gpt_to_llama/converting-llama2-to-llama3.ipynb  (RMSNorm taken from
    converting-gpt-to-llama2.ipynb: a hand-written class with `.weight`, eps 1e-5)
  * pkg/llms_from_scratch/qwen3.py           (Qwen3Model, RMSNorm with .scale/.shift,
                                               GroupedQueryAttention with q_norm/k_norm)
  * ch05/11_qwen3/standalone-qwen3.ipynb     (same classes, same code)
History that changes what a saved state_dict holds (all read in that repo's git log):
  * Llama 3.2 notebook b44096a..c21bfe4 (2024-10-05 .. 2025-04-05): every block's attention
    registered PERSISTENT buffers trf_blocks.N.att.mask ([ctx, ctx] float 0/1, triu diag 1),
    trf_blocks.N.att.cos / .sin ([ctx, head_dim], cast to cfg dtype from 1eb0b38 on);
    67e0680 (2025-04-06) made them persistent=False; c4cde1c (2025-06-12) moved cos/sin to the
    model (non-persistent) and builds the mask on the fly.
  * pkg llama3.py aedad7e (2025-03-31, one day): a persistent model-level 'mask' (bool [ctx, ctx]).
  * Before 8add26c (2025-09-14) the weight loaders' assign() returned a NEW nn.Parameter
    (so every parameter took the HF checkpoint's dtype, bf16, including Qwen3's norm scales) and
    a tied out_head got a separate COPY of the embedding; from 8add26c on assign() copies into
    the existing parameter (Qwen3's RMSNorm scales stay float32, since that class is created
    without dtype) and tying is `model.out_head.weight = model.tok_emb.weight` (one storage).

What each version calls the RMSNorm parameter:
  * Llama3Model (every version of llama3.py / standalone-llama32): torch.nn.RMSNorm  -> '.weight'
  * converting-llama2-to-llama3 (hand-written RMSNorm)                                -> '.weight'
  * Qwen3Model (every version of qwen3.py / standalone-qwen3):  custom RMSNorm        -> '.scale'
    (and '.shift' only if built with bias=True, which no Qwen3 code path does)
Both model classes here take norm_param='weight'|'scale' to produce either spelling.

The math runs in the module's dtype (tests call .double()). Two deliberate, documented
deviations that only matter below float32:
  * the Qwen3 RMSNorm upcasts to float32 in the book; here it upcasts to
    promote_types(x.dtype, float32), so a float64 model stays float64 (identical for bf16/f16/f32);
  * the book computes the RoPE tables in float32 (compute_rope_params(dtype=torch.float32) with a
    hard `.float()`); rope_dtype=torch.float64 (the default here) computes the same formula in
    float64; pass rope_dtype=torch.float32 to reproduce the book's float32 tables bit for bit.
The out_head input is cast to the out_head weight's dtype (the book: x.to(cfg["dtype"]), the
same thing for a model built from cfg; for a .double() model it keeps float64).
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402

BOOK_REPO = 'github:rasbt/LLMs-from-scratch'
BOOK_COMMIT = '28c65cdfbc3338e2e040016eea4b7fdf556e4d57'

_DTYPE_NAMES = {torch.float32: 'float32', torch.float16: 'float16', torch.bfloat16: 'bfloat16',
                torch.float64: 'float64'}
_NAME_DTYPES = {v: k for k, v in _DTYPE_NAMES.items()}


# =============================================================================
# Configs (the book's key names)

def llama3_config(vocab_size=128, context_length=64, emb_dim=64, n_heads=4, n_kv_groups=2,
                  n_layers=2, hidden_dim=160, rope_base=500_000.0, rope_freq='tiny',
                  dtype=torch.bfloat16):
    """A LLAMA32_CONFIG-shaped dict. rope_freq: 'tiny' (llama3 scaling whose three bands all
    occur for head_dim 16 at context 64), None (no frequency scaling), or a dict with
    factor / low_freq_factor / high_freq_factor / original_context_length."""
    if rope_freq == 'tiny':
        rope_freq = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_context_length": 64}
    return {
        "vocab_size": vocab_size,
        "context_length": context_length,
        "emb_dim": emb_dim,
        "n_heads": n_heads,
        "n_layers": n_layers,
        "hidden_dim": hidden_dim,
        "n_kv_groups": n_kv_groups,
        "rope_base": rope_base,
        "dtype": dtype,
        "rope_freq": rope_freq,
    }


# The real Llama 3.2 1B config (pkg/llms_from_scratch/llama3.py LLAMA32_CONFIG_1B), for shapes.
LLAMA32_CONFIG_1B = llama3_config(vocab_size=128_256, context_length=131_072, emb_dim=2048, n_heads=32,
                                  n_kv_groups=8, n_layers=16, hidden_dim=8192, rope_base=500_000.0,
                                  rope_freq={"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                             "original_context_length": 8192})


def qwen3_config(vocab_size=128, context_length=64, emb_dim=64, n_heads=4, head_dim=24, n_kv_groups=2,
                 n_layers=2, hidden_dim=96, qk_norm=True, rope_base=1_000_000.0, dtype=torch.bfloat16):
    """A QWEN3_CONFIG-shaped dict (head_dim may be None: emb_dim // n_heads)."""
    return {
        "vocab_size": vocab_size,
        "context_length": context_length,
        "emb_dim": emb_dim,
        "n_heads": n_heads,
        "n_layers": n_layers,
        "hidden_dim": hidden_dim,
        "head_dim": head_dim,
        "qk_norm": qk_norm,
        "n_kv_groups": n_kv_groups,
        "rope_base": rope_base,
        "dtype": dtype,
    }


# The real Qwen3 0.6B config (pkg/llms_from_scratch/qwen3.py QWEN_CONFIG_06_B), for shapes.
QWEN3_CONFIG_06_B = qwen3_config(vocab_size=151_936, context_length=40_960, emb_dim=1024, n_heads=16,
                                 head_dim=128, n_kv_groups=8, n_layers=28, hidden_dim=3072, qk_norm=True,
                                 rope_base=1_000_000.0)


def config_json(cfg, dtype=None, dtype_style='name'):
    """The cfg dict as JSON text, as a user keeps it beside the .pth: dtype as a string
    ('bfloat16'; dtype_style='torch' writes 'torch.bfloat16', what str(torch.bfloat16) gives),
    rope_freq a nested object or null, head_dim an integer or null. dtype overrides cfg['dtype']."""
    d = dict(cfg)
    dt = d.get('dtype') if dtype is None else dtype
    if isinstance(dt, torch.dtype):
        dt = _DTYPE_NAMES[dt]
    if dt is not None and dtype_style == 'torch' and not str(dt).startswith('torch.'):
        dt = 'torch.' + dt
    d['dtype'] = dt
    if 'rope_freq' in d and d['rope_freq'] is not None:
        d['rope_freq'] = dict(d['rope_freq'])
    return json.dumps(d, indent=2)


def config_from_json(text):
    """Inverse of config_json (dtype string -> torch.dtype)."""
    d = json.loads(text)
    dt = d.get('dtype')
    if isinstance(dt, str):
        d['dtype'] = _NAME_DTYPES[dt[len('torch.'):] if dt.startswith('torch.') else dt]
    return d


def is_qwen3_config(cfg):
    return 'qk_norm' in cfg or 'head_dim' in cfg


# =============================================================================
# RMSNorm, both kinds

class TorchRMSNorm(nn.Module):
    """torch.nn.RMSNorm(dim, eps, dtype) as Llama3Model uses it (param '.weight').
    Math (aten rms_norm): u = x.to(opmath) (float32 for f16/bf16, else x's dtype);
    y = u * rsqrt(mean(u^2, -1) + eps) * weight; return y.type_as(x).
    (torch 2.4 multiplied by the weight after the cast back; the same for f32/f64.)
    param='scale' names the parameter '.scale' instead (same math)."""

    def __init__(self, dim, eps=1e-5, dtype=None, param='weight'):
        super().__init__()
        self.eps = eps
        self.param = param
        setattr(self, param, nn.Parameter(torch.ones(dim, dtype=dtype)))

    def forward(self, x):
        opmath = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        u = x.to(opmath)
        y = u * torch.rsqrt(u.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        y = y * getattr(self, self.param)
        return y.type_as(x)


class RMSNorm(nn.Module):
    """The book's own RMSNorm (qwen3.py / standalone-qwen3): params '.scale' (float32, since the
    book passes no dtype) and, with bias=True, '.shift'. Upcasts to float32 when
    qwen3_compatible (here: to promote_types(x.dtype, float32), see the module docstring).
    param='weight' names the scale '.weight' instead (same math)."""

    def __init__(self, emb_dim, eps=1e-6, bias=False, qwen3_compatible=True, param='scale'):
        super().__init__()
        self.eps = eps
        self.qwen3_compatible = qwen3_compatible
        self.param = param
        setattr(self, param, nn.Parameter(torch.ones(emb_dim)))
        self.shift = nn.Parameter(torch.zeros(emb_dim)) if bias else None

    def forward(self, x):
        input_dtype = x.dtype

        if self.qwen3_compatible:
            x = x.to(torch.promote_types(x.dtype, torch.float32))

        variance = x.pow(2).mean(dim=-1, keepdim=True)
        norm_x = x * torch.rsqrt(variance + self.eps)
        norm_x = norm_x * getattr(self, self.param)

        if self.shift is not None:
            norm_x = norm_x + self.shift

        return norm_x.to(input_dtype)


# =============================================================================
# RoPE (split-halves convention: dim i pairs with dim i + head_dim/2)

def compute_rope_params(head_dim, theta_base=10_000, context_length=4096, freq_config=None,
                        dtype=torch.float32):
    """llama3.py compute_rope_params (qwen3.py's is the same without freq_config). The book's
    `.float()` on the exponent is `.to(dtype)` here (identical for the book's float32)."""
    assert head_dim % 2 == 0, "Embedding dimension must be even"

    # Compute the inverse frequencies
    inv_freq = 1.0 / (theta_base ** (torch.arange(0, head_dim, 2, dtype=dtype)[: (head_dim // 2)].to(dtype) / head_dim))

    # Frequency adjustments
    if freq_config is not None:
        low_freq_wavelen = freq_config["original_context_length"] / freq_config["low_freq_factor"]
        high_freq_wavelen = freq_config["original_context_length"] / freq_config["high_freq_factor"]

        wavelen = 2 * torch.pi / inv_freq

        inv_freq_llama = torch.where(
            wavelen > low_freq_wavelen, inv_freq / freq_config["factor"], inv_freq
        )

        smooth_factor = (freq_config["original_context_length"] / wavelen - freq_config["low_freq_factor"]) / (
            freq_config["high_freq_factor"] - freq_config["low_freq_factor"]
        )

        smoothed_inv_freq = (
            (1 - smooth_factor) * (inv_freq / freq_config["factor"]) + smooth_factor * inv_freq
        )

        is_medium_freq = (wavelen <= low_freq_wavelen) & (wavelen >= high_freq_wavelen)
        inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
        inv_freq = inv_freq_llama

    # Generate position indices
    positions = torch.arange(context_length, dtype=dtype)

    # Compute the angles
    angles = positions.unsqueeze(1) * inv_freq.unsqueeze(0)  # Shape: (context_length, head_dim // 2)

    # Expand angles to match the head_dim
    angles = torch.cat([angles, angles], dim=1)  # Shape: (context_length, head_dim)

    # Precompute sine and cosine
    cos = torch.cos(angles)
    sin = torch.sin(angles)

    return cos, sin


def apply_rope(x, cos, sin):
    # x: (batch_size, num_heads, seq_len, head_dim)
    batch_size, num_heads, seq_len, head_dim = x.shape
    assert head_dim % 2 == 0, "Head dimension must be even"

    # Split x into first half and second half
    x1 = x[..., : head_dim // 2]  # First half
    x2 = x[..., head_dim // 2:]  # Second half

    # Adjust sin and cos shapes
    cos = cos[:seq_len, :].unsqueeze(0).unsqueeze(0)  # Shape: (1, 1, seq_len, head_dim)
    sin = sin[:seq_len, :].unsqueeze(0).unsqueeze(0)

    # Apply the rotary transformation
    rotated = torch.cat((-x2, x1), dim=-1)
    x_rotated = (x * cos) + (rotated * sin)

    # It's ok to use lower-precision after applying cos and sin rotation
    return x_rotated.to(dtype=x.dtype)


# =============================================================================
# Shared pieces

class FeedForward(nn.Module):
    """SwiGLU: fc3(silu(fc1(x)) * fc2(x)); fc1 = HF gate_proj, fc2 = up_proj, fc3 = down_proj."""

    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], dtype=cfg["dtype"], bias=False)
        self.fc2 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], dtype=cfg["dtype"], bias=False)
        self.fc3 = nn.Linear(cfg["hidden_dim"], cfg["emb_dim"], dtype=cfg["dtype"], bias=False)

    def forward(self, x):
        x_fc1 = self.fc1(x)
        x_fc2 = self.fc2(x)
        x = nn.functional.silu(x_fc1) * x_fc2
        return self.fc3(x)


class _Block(nn.Module):
    def forward(self, x, mask, cos, sin):
        # Shortcut connection for attention block
        shortcut = x
        x = self.norm1(x)
        x = self.att(x, mask, cos, sin)  # Shape [batch_size, num_tokens, emb_size]
        x = x + shortcut  # Add the original input back

        # Shortcut connection for feed-forward block
        shortcut = x
        x = self.norm2(x)
        x = self.ff(x)
        x = x + shortcut  # Add the original input back

        return x


class _Model(nn.Module):
    @property
    def block_size(self):
        return self.cfg['context_length']

    def forward(self, in_idx):
        # Forward pass
        tok_embeds = self.tok_emb(in_idx)
        x = tok_embeds

        num_tokens = x.shape[1]
        mask = torch.triu(torch.ones(num_tokens, num_tokens, device=x.device, dtype=torch.bool), diagonal=1)

        for block in self.trf_blocks:
            x = block(x, mask, self.cos, self.sin)
        x = self.final_norm(x)
        logits = self.out_head(x.to(self.out_head.weight.dtype))  # book: x.to(self.cfg["dtype"])
        return logits

    def tie_weights_(self):
        """What load_weights_into_llama / load_weights_into_qwen do when the HF checkpoint has no
        lm_head.weight (Llama 3.2 1B/3B, Qwen3 0.6B/1.7B/4B): one shared Parameter."""
        self.out_head.weight = self.tok_emb.weight
        return self


# =============================================================================
# Llama 3 (pkg/llms_from_scratch/llama3.py)

class Llama3GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, num_kv_groups, dtype=None):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        assert num_heads % num_kv_groups == 0, "num_heads must be divisible by num_kv_groups"

        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads

        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
        self.num_kv_groups = num_kv_groups
        self.group_size = num_heads // num_kv_groups

        self.W_query = nn.Linear(d_in, d_out, bias=False, dtype=dtype)
        self.out_proj = nn.Linear(d_out, d_out, bias=False, dtype=dtype)

    def forward(self, x, mask, cos, sin):
        b, num_tokens, d_in = x.shape

        queries = self.W_query(x)  # Shape: (b, num_tokens, d_out)
        keys = self.W_key(x)  # Shape: (b, num_tokens, num_kv_groups * head_dim)
        values = self.W_value(x)  # Shape: (b, num_tokens, num_kv_groups * head_dim)

        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)
        keys = keys.view(b, num_tokens, self.num_kv_groups, self.head_dim)
        values = values.view(b, num_tokens, self.num_kv_groups, self.head_dim)

        keys = keys.transpose(1, 2)  # Shape: (b, num_kv_groups, num_tokens, head_dim)
        values = values.transpose(1, 2)
        queries = queries.transpose(1, 2)  # Shape: (b, num_heads, num_tokens, head_dim)

        # Apply RoPE
        keys = apply_rope(keys, cos, sin)
        queries = apply_rope(queries, cos, sin)

        # Expand keys and values to match the number of heads: [K1, K2] -> [K1, K1, K2, K2]
        keys = keys.repeat_interleave(self.group_size, dim=1)
        values = values.repeat_interleave(self.group_size, dim=1)

        attn_scores = queries @ keys.transpose(2, 3)  # Dot product for each head
        attn_scores = attn_scores.masked_fill(mask[:num_tokens, :num_tokens], -torch.inf)

        attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
        assert keys.shape[-1] == self.head_dim

        context_vec = (attn_weights @ values).transpose(1, 2)  # (b, num_tokens, num_heads, head_dim)
        context_vec = context_vec.reshape(b, num_tokens, self.d_out)
        context_vec = self.out_proj(context_vec)  # optional projection

        return context_vec


class Llama3TransformerBlock(_Block):
    def __init__(self, cfg, norm_param='weight'):
        super().__init__()
        self.att = Llama3GroupedQueryAttention(
            d_in=cfg["emb_dim"],
            d_out=cfg["emb_dim"],
            num_heads=cfg["n_heads"],
            num_kv_groups=cfg["n_kv_groups"],
            dtype=cfg["dtype"]
        )
        self.ff = FeedForward(cfg)
        self.norm1 = TorchRMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"], param=norm_param)
        self.norm2 = TorchRMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"], param=norm_param)


class Llama3Model(_Model):
    """Llama3Model(cfg). norm_param: 'weight' (the book) or 'scale'; tie_weights: share
    out_head.weight with tok_emb.weight; rope_dtype: dtype the RoPE tables are computed in
    (book: float32)."""

    def __init__(self, cfg, norm_param='weight', tie_weights=False, rope_dtype=torch.float64):
        super().__init__()

        # Main model parameters
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])

        self.trf_blocks = nn.ModuleList(
            [Llama3TransformerBlock(cfg, norm_param) for _ in range(cfg["n_layers"])]
        )

        self.final_norm = TorchRMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"], param=norm_param)
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False, dtype=cfg["dtype"])

        # Reusable utilities
        cos, sin = compute_rope_params(
            head_dim=cfg["emb_dim"] // cfg["n_heads"],
            theta_base=cfg["rope_base"],
            context_length=cfg["context_length"],
            freq_config=cfg["rope_freq"],
            dtype=rope_dtype,
        )
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.cfg = cfg
        if tie_weights:
            self.tie_weights_()


# =============================================================================
# Qwen3 (pkg/llms_from_scratch/qwen3.py)

class Qwen3GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, num_heads, num_kv_groups, head_dim=None, qk_norm=False, dtype=None,
                 norm_param='scale'):
        super().__init__()
        assert num_heads % num_kv_groups == 0, "num_heads must be divisible by num_kv_groups"

        self.num_heads = num_heads
        self.num_kv_groups = num_kv_groups
        self.group_size = num_heads // num_kv_groups

        if head_dim is None:
            assert d_in % num_heads == 0, "`d_in` must be divisible by `num_heads` if `head_dim` is not set"
            head_dim = d_in // num_heads

        self.head_dim = head_dim
        self.d_out = num_heads * head_dim

        self.W_query = nn.Linear(d_in, self.d_out, bias=False, dtype=dtype)
        self.W_key = nn.Linear(d_in, num_kv_groups * head_dim, bias=False, dtype=dtype)
        self.W_value = nn.Linear(d_in, num_kv_groups * head_dim, bias=False, dtype=dtype)

        self.out_proj = nn.Linear(self.d_out, d_in, bias=False, dtype=dtype)

        if qk_norm:
            self.q_norm = RMSNorm(head_dim, eps=1e-6, param=norm_param)
            self.k_norm = RMSNorm(head_dim, eps=1e-6, param=norm_param)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x, mask, cos, sin):
        b, num_tokens, _ = x.shape

        # Apply projections
        queries = self.W_query(x)  # (b, num_tokens, num_heads * head_dim)
        keys = self.W_key(x)       # (b, num_tokens, num_kv_groups * head_dim)
        values = self.W_value(x)   # (b, num_tokens, num_kv_groups * head_dim)

        # Reshape
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys = keys.view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
        values = values.view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)

        # Optional normalization (per head, over head_dim, BEFORE RoPE)
        if self.q_norm:
            queries = self.q_norm(queries)
        if self.k_norm:
            keys = self.k_norm(keys)

        # Apply RoPE
        queries = apply_rope(queries, cos, sin)
        keys = apply_rope(keys, cos, sin)

        # Expand K and V to match number of heads
        keys = keys.repeat_interleave(self.group_size, dim=1)
        values = values.repeat_interleave(self.group_size, dim=1)

        # Attention
        attn_scores = queries @ keys.transpose(2, 3)
        attn_scores = attn_scores.masked_fill(mask, -torch.inf)
        attn_weights = torch.softmax(attn_scores / self.head_dim**0.5, dim=-1)

        context = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
        return self.out_proj(context)


class Qwen3TransformerBlock(_Block):
    def __init__(self, cfg, norm_param='scale'):
        super().__init__()
        self.att = Qwen3GroupedQueryAttention(
            d_in=cfg["emb_dim"],
            num_heads=cfg["n_heads"],
            head_dim=cfg["head_dim"],
            num_kv_groups=cfg["n_kv_groups"],
            qk_norm=cfg["qk_norm"],
            dtype=cfg["dtype"],
            norm_param=norm_param,
        )
        self.ff = FeedForward(cfg)
        self.norm1 = RMSNorm(cfg["emb_dim"], eps=1e-6, param=norm_param)
        self.norm2 = RMSNorm(cfg["emb_dim"], eps=1e-6, param=norm_param)


class Qwen3Model(_Model):
    """Qwen3Model(cfg) (dense; the MoE variant is not covered). norm_param: 'scale' (the book)
    or 'weight'; tie_weights; rope_dtype as for Llama3Model. Like the book, the RMSNorm
    parameters are created float32 whatever cfg['dtype'] is."""

    def __init__(self, cfg, norm_param='scale', tie_weights=False, rope_dtype=torch.float64):
        super().__init__()

        # Main model parameters
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])

        self.trf_blocks = nn.ModuleList(
            [Qwen3TransformerBlock(cfg, norm_param) for _ in range(cfg["n_layers"])]
        )
        self.final_norm = RMSNorm(cfg["emb_dim"], param=norm_param)
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False, dtype=cfg["dtype"])

        # Reusable utilities
        if cfg["head_dim"] is None:
            head_dim = cfg["emb_dim"] // cfg["n_heads"]
        else:
            head_dim = cfg["head_dim"]
        cos, sin = compute_rope_params(
            head_dim=head_dim,
            theta_base=cfg["rope_base"],
            context_length=cfg["context_length"],
            dtype=rope_dtype,
        )
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.cfg = cfg
        if tie_weights:
            self.tie_weights_()


def build_model(cfg, **kw):
    """Llama3Model or Qwen3Model, by the config's keys (qk_norm/head_dim -> Qwen3)."""
    return Qwen3Model(cfg, **kw) if is_qwen3_config(cfg) else Llama3Model(cfg, **kw)


# =============================================================================
# Initialisation, storage, writing

def is_norm_param(name, p):
    return p.dim() == 1 and 'norm' in name


def randomize_modern_(model, seed, tie='none'):
    """Every parameter influences the logits: norm weights/scales (incl. q_norm/k_norm)
    1 + N(0, 0.2), norm shifts N(0, 0.1), matrices width-aware so activations stay O(1) and
    logits are O(1..10). tie: 'none' | 'shared' (out_head.weight IS tok_emb.weight, what the
    book's loader does today) | 'copy' (an equal but separate tensor, the loader before 8add26c).
    (mmgpt_ref.randomize_ also handles these names; this one is tuned for SwiGLU/RMSNorm.)"""
    if tie == 'shared':
        model.tie_weights_()
    g = torch.Generator().manual_seed(seed)
    emb_dim = model.cfg['emb_dim']
    tied = model.out_head.weight is model.tok_emb.weight
    with torch.no_grad():
        for name, p in model.named_parameters():  # a shared parameter is listed once
            shape = p.shape
            if is_norm_param(name, p):
                if name.endswith('shift'):
                    v = 0.1 * torch.randn(shape, generator=g)
                else:
                    v = 1.0 + 0.2 * torch.randn(shape, generator=g)
            elif name == 'tok_emb.weight':
                # As the (tied) head it gives logits of std ~3 on unit-RMS inputs.
                v = (3.0 if tied or tie == 'copy' else 1.0) / math.sqrt(emb_dim) * torch.randn(shape, generator=g)
            elif name == 'out_head.weight':
                v = 3.0 / math.sqrt(shape[-1]) * torch.randn(shape, generator=g)
            elif '.att.W_query' in name or '.att.W_key' in name:
                v = 1.5 / math.sqrt(shape[-1]) * torch.randn(shape, generator=g)
            elif '.ff.fc1' in name or '.ff.fc2' in name:
                v = 1.5 / math.sqrt(shape[-1]) * torch.randn(shape, generator=g)
            else:  # W_value, out_proj, fc3
                v = 1.0 / math.sqrt(shape[-1]) * torch.randn(shape, generator=g)
            p.copy_(v.to(p.dtype))
        if tie == 'copy':
            model.out_head.weight.copy_(model.tok_emb.weight)
    return model


def storage_dtypes(model, dtype, norm_dtype='book'):
    """{parameter name: dtype it is saved in}. norm_dtype: 'book' = what torch.save(
    model.state_dict()) of the book's model gives today (Qwen3: RMSNorm scales float32, the
    rest cfg dtype; Llama3: everything the same dtype); None = everything in dtype; or a dtype."""
    if norm_dtype == 'book':
        norm_dtype = torch.float32 if isinstance(model, Qwen3Model) else None
    out = {}
    for name, p in model.state_dict(keep_vars=True).items():  # tied names both listed
        if isinstance(p, nn.Parameter):
            out[name] = norm_dtype if (norm_dtype is not None and is_norm_param(name, p)) else dtype
    return out


def stored_roundtrip_modern_(model, dtype, norm_dtype='book'):
    """Round each parameter through the dtype it is saved in (see storage_dtypes), so the
    float64 reference sees exactly the stored values."""
    dts = storage_dtypes(model, dtype, norm_dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(p.to(dts[name]).to(p.dtype))
    return model


def _legacy_buffers(model, cfg, kind):
    """State_dict entries that older book versions saved (converters must ignore them)."""
    ctx = cfg['context_length']
    if kind == 'model_mask':  # pkg llama3.py aedad7e: model-level persistent bool mask
        return {'mask': torch.triu(torch.ones(ctx, ctx), diagonal=1).bool()}
    if kind == 'block':  # standalone-llama32 1eb0b38..c21bfe4: per-block shared mask/cos/sin
        hd = cfg['emb_dim'] // cfg['n_heads']
        cos, sin = compute_rope_params(hd, cfg['rope_base'], ctx, cfg.get('rope_freq'), dtype=torch.float32)
        mask = torch.triu(torch.ones(ctx, ctx), diagonal=1)
        dt = cfg['dtype'] if isinstance(cfg['dtype'], torch.dtype) else _NAME_DTYPES[cfg['dtype']]
        cos, sin = cos.to(dt), sin.to(dt)
        out = {}
        for i in range(cfg['n_layers']):
            out[f'trf_blocks.{i}.att.mask'] = mask
            out[f'trf_blocks.{i}.att.cos'] = cos
            out[f'trf_blocks.{i}.att.sin'] = sin
        return out
    raise ValueError(kind)


def modern_state_dict(model, dtype, norm_dtype='book', extra_buffers=None):
    """model.state_dict() cast as storage_dtypes says, tied tensors kept tied (one storage),
    in the model's own key order; extra_buffers: None | 'block' | 'model_mask' (old versions'
    persistent buffers, inserted where those versions had them)."""
    sd = model.state_dict()
    dts = storage_dtypes(model, dtype, norm_dtype)
    out, seen = {}, {}
    for k, v in sd.items():
        want = dts.get(k, v.dtype)
        if torch.is_floating_point(v) and v.dtype != want:
            key = (v.data_ptr(), tuple(v.shape), v.stride(), want)
            if key not in seen:
                seen[key] = v.to(want)
            v = seen[key]
        out[k] = v
    if extra_buffers:
        # A module's own buffers precede its children's entries in a state_dict: the model-level
        # 'mask' comes first, each block's att.mask/cos/sin just before its att.W_key.weight.
        extra = _legacy_buffers(model, model.cfg, extra_buffers)
        merged = {k: v for k, v in extra.items() if '.' not in k}
        for k, v in out.items():
            if k.endswith('.att.W_key.weight'):
                pre = k[:-len('W_key.weight')]
                for suffix in ('mask', 'cos', 'sin'):
                    if pre + suffix in extra:
                        merged[pre + suffix] = extra[pre + suffix]
            merged[k] = v
        out = merged
    return out


def write_llms_modern(model, cfg, outdir, name, dtype, legacy=False, norm_dtype='book',
                      extra_buffers=None, dtype_style='name', config_name='config.json'):
    """torch.save(model.state_dict()) as the book's user does, to outdir/name.pth (cast to dtype,
    Qwen3 norms float32 by default as the book leaves them, tied tensors kept tied; legacy=True
    uses the pre-1.6 non-zip format), plus outdir/config.json (config_json(cfg) with dtype set to
    the storage dtype; config_name=None writes none). Returns (pth path, config path or None)."""
    os.makedirs(outdir, exist_ok=True)
    sd = modern_state_dict(model, dtype, norm_dtype, extra_buffers)
    pth = os.path.join(outdir, name + '.pth')
    R.torch_save(sd, pth, legacy=legacy)
    cpath = None
    if config_name:
        cpath = os.path.join(outdir, config_name)
        with open(cpath, 'w') as f:
            f.write(config_json(cfg, dtype=dtype, dtype_style=dtype_style) + '\n')
    return pth, cpath


def load_llms_modern(pth, config_path, norm_param=None, rope_dtype=torch.float64):
    """A float64 reference model from a written .pth + config.json (strict load; old buffer
    keys dropped; tied if the file's out_head.weight is missing or shares storage)."""
    with open(config_path) as f:
        cfg = config_from_json(f.read())
    sd = torch.load(pth, map_location='cpu')
    sd = {k: v for k, v in sd.items() if not (k == 'mask' or k.endswith('.att.mask') or
                                              k.endswith('.att.cos') or k.endswith('.att.sin'))}
    kw = {'rope_dtype': rope_dtype}
    if norm_param is None:
        norm_param = 'scale' if any(k.endswith('norm.scale') for k in sd) else 'weight'
    kw['norm_param'] = norm_param
    tied = 'out_head.weight' not in sd or sd['out_head.weight'].data_ptr() == sd['tok_emb.weight'].data_ptr()
    model = build_model(cfg, tie_weights=tied, **kw)
    if 'out_head.weight' not in sd:
        sd['out_head.weight'] = sd['tok_emb.weight']
    model.load_state_dict(sd, strict=True)
    return model.double().eval(), cfg


# =============================================================================
# The spec, written out independently (explicit loops, float64), to check the text above

def spec_forward(sd, cfg, ids):
    """Logits [T, vocab] from a state_dict by the written spec alone (see the report)."""
    f = {k: v.double() for k, v in sd.items()}
    qwen = is_qwen3_config(cfg)
    D, H, G = cfg['emb_dim'], cfg['n_heads'], cfg['n_kv_groups']
    hd = (cfg.get('head_dim') or D // H) if qwen else D // H
    eps = 1e-6 if qwen else 1e-5
    nk = 'scale' if any(k.endswith('norm.scale') for k in f) else 'weight'
    T = len(ids)

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    # inverse frequencies, scalar by scalar
    inv = []
    for i in range(hd // 2):
        w = cfg['rope_base'] ** (-(2.0 * i) / hd)
        rf = None if qwen else cfg.get('rope_freq')
        if rf:
            wl = 2 * math.pi / w
            lo = rf['original_context_length'] / rf['low_freq_factor']
            hi = rf['original_context_length'] / rf['high_freq_factor']
            if wl > lo:
                w = w / rf['factor']
            elif wl >= hi:
                s = (rf['original_context_length'] / wl - rf['low_freq_factor']) / (rf['high_freq_factor'] - rf['low_freq_factor'])
                w = (1 - s) * w / rf['factor'] + s * w
        inv.append(w)

    def rope(v, p):  # v [hd]; pairs (j, j + hd/2)
        out = v.clone()
        for j in range(hd // 2):
            c, s = math.cos(p * inv[j]), math.sin(p * inv[j])
            a, b = v[j], v[j + hd // 2]
            out[j] = a * c - b * s
            out[j + hd // 2] = b * c + a * s
        return out

    x = f['tok_emb.weight'][ids]  # [T, D]
    for li in range(cfg['n_layers']):
        P = f'trf_blocks.{li}.'
        h = rms(x, f[P + 'norm1.' + nk])
        q = h @ f[P + 'att.W_query.weight'].T   # [T, H*hd]
        k = h @ f[P + 'att.W_key.weight'].T     # [T, G*hd]
        v = h @ f[P + 'att.W_value.weight'].T
        ctx = torch.zeros(T, H * hd, dtype=torch.float64)
        for hh in range(H):
            g = hh // (H // G)  # repeat_interleave: query head hh uses kv group hh // group_size
            qs = [q[t, hh * hd:(hh + 1) * hd] for t in range(T)]
            ks = [k[t, g * hd:(g + 1) * hd] for t in range(T)]
            if qwen and cfg['qk_norm']:
                qs = [rms(a, f[P + 'att.q_norm.' + nk]) for a in qs]
                ks = [rms(a, f[P + 'att.k_norm.' + nk]) for a in ks]
            qs = [rope(a, t) for t, a in enumerate(qs)]
            ks = [rope(a, t) for t, a in enumerate(ks)]
            for t in range(T):
                sc = torch.stack([qs[t] @ ks[u] for u in range(t + 1)]) / math.sqrt(hd)
                pw = torch.softmax(sc, 0)
                ctx[t, hh * hd:(hh + 1) * hd] = sum(pw[u] * v[u, g * hd:(g + 1) * hd] for u in range(t + 1))
        x = x + ctx @ f[P + 'att.out_proj.weight'].T
        h = rms(x, f[P + 'norm2.' + nk])
        a = h @ f[P + 'ff.fc1.weight'].T
        b = h @ f[P + 'ff.fc2.weight'].T
        x = x + ((a * torch.sigmoid(a)) * b) @ f[P + 'ff.fc3.weight'].T
    x = rms(x, f['final_norm.' + nk])
    W = f.get('out_head.weight', f['tok_emb.weight'])
    return x @ W.T


def expected_keys(cfg, norm_param=None):
    """[(key, shape)] in state_dict order, per the spec."""
    qwen = is_qwen3_config(cfg)
    np_ = norm_param or ('scale' if qwen else 'weight')
    D, H, G, F = cfg['emb_dim'], cfg['n_heads'], cfg['n_kv_groups'], cfg['hidden_dim']
    hd = (cfg.get('head_dim') or D // H) if qwen else D // H
    keys = [('tok_emb.weight', (cfg['vocab_size'], D))]
    for i in range(cfg['n_layers']):
        P = f'trf_blocks.{i}.'
        wq, wk, wv = ((P + 'att.W_query.weight', (H * hd, D)), (P + 'att.W_key.weight', (G * hd, D)),
                      (P + 'att.W_value.weight', (G * hd, D)))
        # Llama3's attention creates W_key, W_value before W_query; Qwen3's W_query first.
        keys += [wq, wk, wv] if qwen else [wk, wv, wq]
        keys += [(P + 'att.out_proj.weight', (D, H * hd))]
        if qwen and cfg['qk_norm']:
            keys += [(P + 'att.q_norm.' + np_, (hd,)), (P + 'att.k_norm.' + np_, (hd,))]
        keys += [(P + 'ff.fc1.weight', (F, D)), (P + 'ff.fc2.weight', (F, D)), (P + 'ff.fc3.weight', (D, F)),
                 (P + 'norm1.' + np_, (D,)), (P + 'norm2.' + np_, (D,))]
    keys += [('final_norm.' + np_, (D,)), ('out_head.weight', (cfg['vocab_size'], D))]
    return keys


# =============================================================================
# Self-check

def _selfcheck():
    import tempfile
    import time
    torch.set_num_threads(1)
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix='ref_llms_modern_')
    log = []

    # The book's tables in float32 equal this file's float32 path; float64 agrees to ~1e-6.
    rf = llama3_config()['rope_freq']
    c32, s32 = compute_rope_params(16, 500_000.0, 64, rf, dtype=torch.float32)
    c64, s64 = compute_rope_params(16, 500_000.0, 64, rf, dtype=torch.float64)
    assert c32.dtype == torch.float32 and float((c32.double() - c64).abs().max()) < 1e-5
    # All three llama3 bands occur in the tiny config.
    inv = 1.0 / (500_000.0 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    wl = 2 * math.pi / inv
    bands = (int((wl < 16).sum()), int(((wl >= 16) & (wl <= 64)).sum()), int((wl > 64).sum()))
    assert all(b > 0 for b in bands), bands
    log.append(f"llama3 rope bands high/medium/low = {bands}")

    cases = [
        ('llama3_gqa', llama3_config(), {}, 'none', torch.bfloat16),
        ('llama3_tied', llama3_config(n_heads=4, n_kv_groups=1, rope_freq=None), {}, 'shared', torch.float16),
        ('llama3_scale', llama3_config(), {'norm_param': 'scale'}, 'copy', torch.float32),
        ('qwen3_qknorm', qwen3_config(), {}, 'none', torch.bfloat16),
        ('qwen3_tied_weight', qwen3_config(head_dim=None, n_kv_groups=4), {'norm_param': 'weight'}, 'shared',
         torch.bfloat16),
        ('qwen3_noqk', qwen3_config(qk_norm=False, n_kv_groups=1), {}, 'none', torch.float32),
    ]
    for ci, (name, cfg, kw, tie, dtype) in enumerate(cases):
        model = build_model(cfg, **kw)
        randomize_modern_(model, seed=100 + ci, tie=tie)
        # keys and shapes
        sd = model.state_dict()
        got = [(k, tuple(v.shape)) for k, v in sd.items()]
        want = expected_keys(cfg, kw.get('norm_param'))
        assert got == want, f"{name}: keys\n{got}\n!=\n{want}"
        assert not any('bias' in k or 'shift' in k for k in sd), name
        # f64 reference of the stored values
        stored_roundtrip_modern_(model, dtype)
        model.double().eval()
        ids = R.prompt_ids(7 + ci, 24, cfg['vocab_size'])
        with torch.no_grad():
            full = model(torch.tensor([ids]))[0]
            pre = model(torch.tensor([ids[:9]]))[0]
        assert full.dtype == torch.float64
        err_causal = float((full[:9] - pre).abs().max())
        assert err_causal < 1e-12, f"{name}: causal {err_causal}"
        # spec re-implementation (loops)
        spec = spec_forward(model.state_dict(), cfg, ids)
        err_spec = float((spec - full).abs().max())
        assert err_spec < 1e-10, f"{name}: spec vs module {err_spec}"
        # write, reload strict, identical logits
        pth, cpath = write_llms_modern(model, cfg, os.path.join(tmp, name), name, dtype, legacy=(ci % 2 == 1))
        raw = torch.load(pth, map_location='cpu')
        if tie == 'shared':
            assert raw['out_head.weight'].data_ptr() == raw['tok_emb.weight'].data_ptr(), f"{name}: tie lost"
        norm_dts = {str(v.dtype) for k, v in raw.items() if 'norm' in k}
        other_dts = {str(v.dtype) for k, v in raw.items() if 'norm' not in k}
        m2, cfg2 = load_llms_modern(pth, cpath)
        assert cfg2 == dict(cfg, dtype=dtype), f"{name}: config round trip {cfg2}"
        with torch.no_grad():
            again = m2(torch.tensor([ids]))[0]
        assert torch.equal(again, full), f"{name}: reload differs by {float((again - full).abs().max())}"
        # perturbation: every norm matters
        sens = []
        for pname in ('final_norm.' + (kw.get('norm_param') or ('scale' if 'qk_norm' in cfg else 'weight')),):
            p = dict(model.named_parameters())[pname]
            with torch.no_grad():
                p.mul_(1.1)
                d = float((model(torch.tensor([ids]))[0] - full).abs().max())
                p.div_(1.1)
            sens.append(d)
        assert min(sens) > 1e-3
        log.append(f"{name}: logits std {float(full.std()):.2f} max|.| {float(full.abs().max()):.2f}; "
                   f"causal {err_causal:.1e}; spec {err_spec:.1e}; reload exact; stored norms {sorted(norm_dts)} "
                   f"others {sorted(other_dts)}{' legacy' if ci % 2 == 1 else ''}")

    # old versions' persistent buffers: present in the file, ignorable on load
    cfg = llama3_config()
    model = randomize_modern_(Llama3Model(cfg), seed=5)
    for kind in ('block', 'model_mask'):
        pth, cpath = write_llms_modern(model, cfg, os.path.join(tmp, 'buf_' + kind), 'm', torch.bfloat16,
                                       extra_buffers=kind)
        raw = torch.load(pth, map_location='cpu')
        extra = [k for k in raw if k.endswith(('.mask', '.cos', '.sin')) or k == 'mask']
        assert extra, kind
        m2, _ = load_llms_modern(pth, cpath)
    log.append(f"old persistent buffers written and skipped: e.g. {extra[:3]}")

    # mmgpt_ref.randomize_ also accepts these names
    m = R.randomize_(Qwen3Model(qwen3_config()), seed=3).double()
    with torch.no_grad():
        lg = m(torch.tensor([list(range(16))]))[0]
    log.append(f"mmgpt_ref.randomize_ on Qwen3: logits std {float(lg.std()):.2f} (works)")

    # real configs' shapes (meta-free: just the expected key list)
    k1 = dict(expected_keys(LLAMA32_CONFIG_1B))
    k2 = dict(expected_keys(QWEN3_CONFIG_06_B))
    assert k1['trf_blocks.0.att.W_key.weight'] == (512, 2048) and k2['trf_blocks.0.att.W_query.weight'] == (2048, 1024)
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    for line in log:
        print(line)
    print(f"ref_llms_modern self-check OK ({time.time() - t0:.1f}s)")


if __name__ == '__main__':
    _selfcheck()
