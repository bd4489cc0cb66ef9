"""PyTorch reference of Karpathy's nanochat GPT (nanochat/gpt.py), for mmgpt's parity tests.

Matched against github:karpathy/nanochat at commit NANOCHAT_COMMIT (the newest commit
that touches nanochat/gpt.py, "clean up fragile code"), together with
nanochat/checkpoint_manager.py, nanochat/flash_attention.py (SDPA fallback semantics of
FA3's window_size) and nanochat/common.py (COMPUTE_DTYPE) of the same commit.

Written for Debian's torch 1.13 (no F.rms_norm, no F.scaled_dot_product_attention, no
flash-attention): those are written out by hand with the same math.  Module names,
registration order, parameter names and shapes are nanochat's, so state_dict() has exactly
nanochat's keys (in nanochat's order) and a checkpoint written here is what
checkpoint_manager.save_checkpoint writes.

What is reproduced is GPT.forward(idx, targets=None, kv_cache=None): the whole sequence,
positions 0..T-1, logits for every position.  The reference normally runs in float64
(model.double()); the places where nanochat casts dtypes are kept (see the comments
marked "nanochat dtype:"), and `compute_dtype` / `rope_dtype` let one emulate nanochat's
bf16 GPU path or fp32 CPU path.

Forward pass, in order (C = n_embd, H = n_head, Hkv = n_kv_head, D = C / H, V = vocab_size,
Vp = V padded up to a multiple of 64, norm(x) = x * rsqrt(mean(x^2 over last dim) + eps),
eps = 2^-23 (float32 machine epsilon) for fp32/bf16/fp16 inputs, 2^-52 for float64 inputs):
   x  = norm(wte[idx])
   smear (t >= 1): x[t] = x[t] + smear_lambda * sigmoid(smear_gate . x[t][:24]) * x[t-1]
   x0 = x
   for layer i:  x = resid_lambdas[i] * x + x0_lambdas[i] * x0
                 x = x + attn_i(norm(x), idx)      (rotary, QK-norm*1.2, GQA, sliding window,
                                                    value embedding on layers i%2 == (L-1)%2)
                 x = x + c_proj(relu(c_fc(norm(x)))^2)
                 if i == L // 2: x_backout = x
   x = norm(x - backout_lambda * x_backout)
   logits = 15 * tanh((x @ lm_head^T)[..., :V] / 15)
See the report / the functions below for the exact details.
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn
from torch.nn import functional as F

NANOCHAT_REPO = 'github:karpathy/nanochat'
NANOCHAT_COMMIT = '92d63d4e8bb4df75c3b71618f31ddde2378b2bcd'  # newest commit touching nanochat/gpt.py

# Constants hard-coded in nanochat/gpt.py
PAD_VOCAB_TO = 64          # GPT.__init__(config, pad_vocab_size_to=64)
ROPE_BASE = 100000         # _precompute_rotary_embeddings(..., base=100000)
ROPE_OVERCOMPUTE = 10      # rotary cache covers sequence_len * 10 positions (T beyond that asserts)
QK_SCALE = 1.2             # q = norm(q) * 1.2; k = norm(k) * 1.2
VE_GATE_CHANNELS = 12      # ve_gate = Linear(12, n_kv_head) on x[..., :12]
VE_GATE_RANGE = 3.0        # gate = 3 * sigmoid(...)
SMEAR_CHANNELS = 24        # smear_gate = Linear(24, 1) on x[..., :24]
SOFTCAP = 15.0             # logits = 15 * tanh(logits / 15)
MLP_RATIO = 4

# GPTConfig defaults (the dataclass in gpt.py), in field order (asdict order = meta json order).
GPTCONFIG_DEFAULTS = {
    'sequence_len': 2048,
    'vocab_size': 32768,
    'n_layer': 12,
    'n_head': 6,
    'n_kv_head': 6,
    'n_embd': 768,
    'window_pattern': 'SSSL',
}


def nanochat_config(**kw):
    """A GPTConfig as a plain dict (same fields, same defaults, same order)."""
    unknown = set(kw) - set(GPTCONFIG_DEFAULTS)
    if unknown:
        raise TypeError(f'unknown GPTConfig fields: {sorted(unknown)}')
    cfg = dict(GPTCONFIG_DEFAULTS)
    cfg.update(kw)
    return cfg


def padded_vocab_size(vocab_size, pad_to=PAD_VOCAB_TO):
    return ((vocab_size + pad_to - 1) // pad_to) * pad_to


def has_ve(layer_idx, n_layer):
    """Value embedding on alternating layers, the last layer always included."""
    return layer_idx % 2 == (n_layer - 1) % 2


def compute_window_sizes(cfg):
    """Per-layer (left, right) FA3 window sizes, exactly GPT._compute_window_sizes.

    L = sequence_len, S = ceil(ceil(sequence_len / 4) / 128) * 128 (= ceil(sequence_len/512)*128;
    2048 -> 512, 256 -> 128, 64 -> 128 (!) -- note S can exceed L for sequence_len < 512).
    The pattern is tiled over layers; the last layer is always L.  A query at position i sees
    keys j with i - left <= j <= i, i.e. left + 1 keys including itself."""
    pattern = cfg['window_pattern'].upper()
    assert pattern and all(c in 'SL' for c in pattern), f'Invalid window_pattern: {pattern}. Use only S and L.'
    long_window = cfg['sequence_len']
    short_window = -(-long_window // 4 // 128) * 128  # nanochat's expression, verbatim
    char_to_window = {'L': (long_window, 0), 'S': (short_window, 0)}
    sizes = [char_to_window[pattern[i % len(pattern)]] for i in range(cfg['n_layer'])]
    sizes[-1] = (long_window, 0)
    return sizes


# =============================================================================
# Ops written out by hand (torch 1.13 has neither F.rms_norm nor SDPA)

def rms_norm(x, eps=None):
    """F.rms_norm(x, (x.size(-1),)) with eps=None and no weight, as ATen computes it:
    fp16/bf16 are up-cast to float32 for the computation, the default eps is
    numeric_limits<float>::epsilon() (2^-23) when the computation dtype is float32 and
    numeric_limits<double>::epsilon() (2^-52) for float64; the result is cast back."""
    comp = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    xu = x.to(comp)
    if eps is None:
        eps = torch.finfo(torch.float32).eps if comp == torch.float32 else torch.finfo(torch.float64).eps
    r = torch.rsqrt(xu.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xu * r).to(x.dtype)


# The eps of norm(): None is F.rms_norm's default for the input's dtype. A float64
# reference of nanochat's fp32 / bf16 runs sets float32's epsilon (2^-23), the one
# those runs use (and mmgpt, which computes in float32).
NORM_EPS = None


def norm(x):
    return rms_norm(x, NORM_EPS)


def rotary_cos_sin(seq_len, head_dim, dtype, base=ROPE_BASE):
    """GPT._precompute_rotary_embeddings: computed in float32, then cast to COMPUTE_DTYPE.
    Returns cos, sin of shape (1, seq_len, 1, head_dim // 2).

    nanochat dtype: channel_range, inv_freq, t, freqs, cos, sin are all float32 tensors
    (inv_freq = 1 / 100000 ** (arange(0, D, 2) / D) in float32; freqs = outer(t, inv_freq)
    rounded to float32), then cast to COMPUTE_DTYPE (bf16 on Ampere+ CUDA, fp32 on CPU/MPS).
    Here `dtype` plays COMPUTE_DTYPE; with float64 one gets the float32 values exactly."""
    channel_range = torch.arange(0, head_dim, 2, dtype=torch.float32)
    inv_freq = 1.0 / (base ** (channel_range / head_dim))
    t = torch.arange(seq_len, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    cos, sin = freqs.cos(), freqs.sin()
    cos, sin = cos.to(dtype), sin.to(dtype)
    return cos[None, :, None, :], sin[None, :, None, :]


def apply_rotary_emb(x, cos, sin):
    """nanochat's rotary: halves (x[..., i], x[..., i + D/2]) are paired and rotated by -theta:
    y1 = x1 cos + x2 sin, y2 = -x1 sin + x2 cos.  x: (B, T, H, D)."""
    assert x.ndim == 4
    d = x.shape[3] // 2
    x1, x2 = x[..., :d], x[..., d:]
    y1 = x1 * cos + x2 * sin
    y2 = x1 * (-sin) + x2 * cos
    return torch.cat([y1, y2], 3)


def window_mask(T, window, device=None):
    """Bool (T, T) mask, True = may attend: causal and (i - j) <= window (window < 0: unlimited).
    Identical to FA3's window_size=(window, 0) with causal=True, and to nanochat's SDPA fallback
    (which uses is_causal when window >= T and an explicit mask otherwise)."""
    i = torch.arange(T, device=device).unsqueeze(1)
    j = torch.arange(T, device=device).unsqueeze(0)
    m = j <= i
    if window >= 0:
        m = m & ((i - j) <= window)
    return m


def attention(q, k, v, window):
    """flash_attn_func(q, k, v, causal=True, window_size=(window, 0)) in plain PyTorch.
    q: (B, T, H, D), k/v: (B, T, Hkv, D); query head h uses kv head h // (H // Hkv)
    (SDPA enable_gqa = repeat_interleave; FA3 does the same).  Scale 1/sqrt(D)."""
    B, T, H, D = q.shape
    Hkv = k.shape[2]
    assert H % Hkv == 0
    group = H // Hkv
    q = q.transpose(1, 2)                                            # (B, H, T, D)
    k = k.transpose(1, 2).repeat_interleave(group, dim=1)
    v = v.transpose(1, 2).repeat_interleave(group, dim=1)
    att = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    att = att.masked_fill(~window_mask(T, window, q.device), float('-inf'))
    att = F.softmax(att, dim=-1)
    y = torch.matmul(att, v)                                         # (B, H, T, D)
    return y.transpose(1, 2)                                         # (B, T, H, D)


# =============================================================================
# Modules (same names, registration order and shapes as nanochat/gpt.py)

class Linear(nn.Linear):
    """nanochat's Linear: casts the (fp32 master) weight to the activation dtype."""

    def forward(self, x):
        return F.linear(x, self.weight.to(dtype=x.dtype))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_head = cfg['n_head']
        self.n_kv_head = cfg['n_kv_head']
        self.n_embd = cfg['n_embd']
        self.head_dim = self.n_embd // self.n_head
        assert self.n_embd % self.n_head == 0
        assert self.n_kv_head <= self.n_head and self.n_head % self.n_kv_head == 0
        self.c_q = Linear(self.n_embd, self.n_head * self.head_dim, bias=False)
        self.c_k = Linear(self.n_embd, self.n_kv_head * self.head_dim, bias=False)
        self.c_v = Linear(self.n_embd, self.n_kv_head * self.head_dim, bias=False)
        self.c_proj = Linear(self.n_embd, self.n_embd, bias=False)
        self.ve_gate_channels = VE_GATE_CHANNELS
        self.ve_gate = (Linear(self.ve_gate_channels, self.n_kv_head, bias=False)
                        if has_ve(layer_idx, cfg['n_layer']) else None)

    def forward(self, x, ve, cos_sin, window_size):
        B, T, C = x.size()
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim)
        k = self.c_k(x).view(B, T, self.n_kv_head, self.head_dim)
        v = self.c_v(x).view(B, T, self.n_kv_head, self.head_dim)
        if ve is not None:
            ve = ve.view(B, T, self.n_kv_head, self.head_dim)
            gate = VE_GATE_RANGE * torch.sigmoid(self.ve_gate(x[..., :self.ve_gate_channels]))  # (B, T, Hkv)
            v = v + gate.unsqueeze(-1) * ve
        cos, sin = cos_sin
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        q, k = norm(q), norm(k)
        q = q * QK_SCALE
        k = k * QK_SCALE
        y = attention(q, k, v, window_size[0])
        y = y.contiguous().view(B, T, -1)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Linear(cfg['n_embd'], MLP_RATIO * cfg['n_embd'], bias=False)
        self.c_proj = Linear(MLP_RATIO * cfg['n_embd'], cfg['n_embd'], bias=False)

    def forward(self, x):
        x = self.c_fc(x)
        x = F.relu(x).square()
        return self.c_proj(x)


class Block(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.attn = CausalSelfAttention(cfg, layer_idx)
        self.mlp = MLP(cfg)

    def forward(self, x, ve, cos_sin, window_size):
        x = x + self.attn(norm(x), ve, cos_sin, window_size)
        x = x + self.mlp(norm(x))
        return x


class NanochatGPT(nn.Module):
    """nanochat's GPT.  Parameters are created in float32 (like nanochat's meta-device build);
    call .double() for the float64 reference.  compute_dtype=None means "the dtype of
    lm_head.weight" (nanochat: COMPUTE_DTYPE); rope_dtype=None means compute_dtype."""

    def __init__(self, cfg, pad_vocab_size_to=PAD_VOCAB_TO, compute_dtype=None, rope_dtype=None):
        super().__init__()
        cfg = nanochat_config(**cfg)
        assert cfg['n_embd'] >= SMEAR_CHANNELS and cfg['n_embd'] // cfg['n_head'] * cfg['n_kv_head'] >= 1
        self.cfg = cfg
        self.compute_dtype = compute_dtype
        self.rope_dtype = rope_dtype
        self.window_sizes = compute_window_sizes(cfg)
        self.padded_vocab_size = padded_vocab_size(cfg['vocab_size'], pad_vocab_size_to)
        Vp, C = self.padded_vocab_size, cfg['n_embd']
        # Registration order as in nanochat, so state_dict() keys come out in nanochat's order:
        # own parameters (resid_lambdas, x0_lambdas, smear_lambda, backout_lambda) first, then
        # the children transformer, lm_head, smear_gate, value_embeds.
        self.transformer = nn.ModuleDict({
            'wte': nn.Embedding(Vp, C),
            'h': nn.ModuleList([Block(cfg, i) for i in range(cfg['n_layer'])]),
        })
        self.lm_head = Linear(C, Vp, bias=False)
        self.resid_lambdas = nn.Parameter(torch.ones(cfg['n_layer']))
        self.x0_lambdas = nn.Parameter(torch.zeros(cfg['n_layer']))
        self.smear_gate = Linear(SMEAR_CHANNELS, 1, bias=False)
        self.smear_lambda = nn.Parameter(torch.zeros(1))
        self.backout_lambda = nn.Parameter(0.2 * torch.ones(1))
        head_dim = C // cfg['n_head']
        kv_dim = cfg['n_kv_head'] * head_dim
        self.value_embeds = nn.ModuleDict({str(i): nn.Embedding(Vp, kv_dim)
                                           for i in range(cfg['n_layer']) if has_ve(i, cfg['n_layer'])})
        self.rotary_seq_len = cfg['sequence_len'] * ROPE_OVERCOMPUTE

    @property
    def block_size(self):
        """Longest T nanochat's forward accepts (rotary cache size)."""
        return self.rotary_seq_len

    def forward(self, idx, return_padded=False):
        """Logits (B, T, vocab_size) as GPT.forward(idx) returns them (sliced to the real vocab,
        soft-capped).  return_padded=True keeps the Vp - V padding columns (debug only;
        nanochat never returns them)."""
        B, T = idx.size()
        assert T <= self.rotary_seq_len, f'Sequence length grew beyond the rotary embeddings cache: {T}'
        cdt = self.compute_dtype or self.lm_head.weight.dtype
        rdt = self.rope_dtype or cdt
        head_dim = self.cfg['n_embd'] // self.cfg['n_head']
        # nanochat slices a cache of rotary_seq_len rows; values per position are identical.
        cos_sin = rotary_cos_sin(T, head_dim, rdt)

        x = self.transformer.wte(idx)
        x = x.to(cdt)                      # nanochat dtype: x.to(COMPUTE_DTYPE)
        x = norm(x)

        # Smear.  nanochat (kv_cache=None) asserts T > 1; for T == 1 no smear is applied, which is
        # what its KV-cache path does for the first token of a sequence.
        if T > 1:
            gate = self.smear_lambda.to(x.dtype) * torch.sigmoid(self.smear_gate(x[:, 1:, :SMEAR_CHANNELS]))
            x = torch.cat([x[:, :1], x[:, 1:] + gate * x[:, :-1]], dim=1)

        x0 = x
        n_layer = self.cfg['n_layer']
        backout_layer = n_layer // 2
        x_backout = None
        for i, block in enumerate(self.transformer.h):
            # nanochat: fp32 0-dim scalar * bf16 tensor -> bf16 tensor (type promotion)
            x = self.resid_lambdas[i].to(x.dtype) * x + self.x0_lambdas[i].to(x.dtype) * x0
            ve = self.value_embeds[str(i)](idx).to(x.dtype) if str(i) in self.value_embeds else None
            x = block(x, ve, cos_sin, self.window_sizes[i])
            if i == backout_layer:
                x_backout = x
        if x_backout is not None:
            x = x - self.backout_lambda.to(x.dtype) * x_backout
        x = norm(x)

        logits = self.lm_head(x)
        if not return_padded:
            logits = logits[..., :self.cfg['vocab_size']]
        # nanochat dtype: logits.float() before the softcap (bf16 -> fp32); float64 is kept here.
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        logits = SOFTCAP * torch.tanh(logits / SOFTCAP)
        return logits


def build_from_meta(meta, compute_dtype=None):
    """checkpoint_manager.build_model's config handling: meta['model_config'] -> GPTConfig,
    with window_pattern defaulting to 'L' for old checkpoints."""
    mc = dict(meta['model_config'])
    mc.setdefault('window_pattern', 'L')
    return NanochatGPT(mc, compute_dtype=compute_dtype)


def load_nanochat_state_dict(model_data, n_layer):
    """checkpoint_manager.build_model's state-dict handling: strip '_orig_mod.', patch missing
    resid_lambdas (ones) / x0_lambdas (zeros).  (bf16 -> float on CPU is left to the caller.)"""
    sd = {(k[len('_orig_mod.'):] if k.startswith('_orig_mod.') else k): v for k, v in model_data.items()}
    if 'resid_lambdas' not in sd:
        sd['resid_lambdas'] = torch.ones(n_layer)
    if 'x0_lambdas' not in sd:
        sd['x0_lambdas'] = torch.zeros(n_layer)
    return sd


# =============================================================================
# Initialisation that makes every parameter matter

def randomize_nanochat_(model, seed, logit_std=4.0):
    """Random, non-trivial values for every parameter (nanochat's own init zeroes c_proj,
    smear_lambda, x0 etc., which would hide bugs).  Logits come out O(1..10) before the
    softcap (std ~ logit_std), so the 15*tanh(x/15) cap bends them visibly.  The padding rows
    of lm_head get 3x the scale: an engine that forgot to slice logits to vocab_size would
    pick padding ids in greedy decoding."""
    cfg = model.cfg
    C, V, n_layer = cfg['n_embd'], cfg['vocab_size'], cfg['n_layer']
    g = torch.Generator().manual_seed(seed)

    def randn(shape, std, mean=0.0):
        return mean + std * torch.randn(shape, generator=g, dtype=torch.float64)

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=g, dtype=torch.float64)

    with torch.no_grad():
        def put(p, val):
            p.copy_(val.to(p.dtype))
        put(model.transformer.wte.weight, randn(model.transformer.wte.weight.shape, 1.0))
        lm = randn(model.lm_head.weight.shape, logit_std / math.sqrt(C))
        lm[V:] *= 3.0
        put(model.lm_head.weight, lm)
        for blk in model.transformer.h:
            a, m = blk.attn, blk.mlp
            put(a.c_q.weight, randn(a.c_q.weight.shape, 1.0 / math.sqrt(C)))
            put(a.c_k.weight, randn(a.c_k.weight.shape, 1.0 / math.sqrt(C)))
            put(a.c_v.weight, randn(a.c_v.weight.shape, 1.0 / math.sqrt(C)))
            put(a.c_proj.weight, randn(a.c_proj.weight.shape, 0.7 / math.sqrt(C)))
            if a.ve_gate is not None:
                # pre-activation std ~1 -> gates spread over (0, 3)
                put(a.ve_gate.weight, randn(a.ve_gate.weight.shape, 1.0 / math.sqrt(VE_GATE_CHANNELS)))
            put(m.c_fc.weight, randn(m.c_fc.weight.shape, 1.0 / math.sqrt(C)))
            put(m.c_proj.weight, randn(m.c_proj.weight.shape, 0.5 / math.sqrt(MLP_RATIO * C)))
        put(model.resid_lambdas, uniform((n_layer,), 0.85, 1.15))
        put(model.x0_lambdas, uniform((n_layer,), 0.05, 0.4))
        put(model.smear_gate.weight, randn(model.smear_gate.weight.shape, 1.0 / math.sqrt(SMEAR_CHANNELS)))
        put(model.smear_lambda, uniform((1,), 0.4, 0.8))
        put(model.backout_lambda, uniform((1,), 0.2, 0.4))
        for ve in model.value_embeds.values():
            put(ve.weight, randn(ve.weight.shape, 1.0))
    return model


def nanochat_roundtrip_(model, dtype=torch.float32, embed_dtype=None):
    """Round the parameters through the dtypes a checkpoint stores them in, so the float64
    reference sees exactly what the engine reads: embed_dtype for transformer.wte and
    value_embeds.* (nanochat's init_weights casts those to COMPUTE_DTYPE = bf16 on GPU),
    dtype for everything else (fp32 master weights)."""
    embed_dtype = embed_dtype or dtype
    with torch.no_grad():
        for name, p in model.named_parameters():
            dt = embed_dtype if _is_embedding_key(name) else dtype
            p.copy_(p.to(dt).to(p.dtype))
    return model


# =============================================================================
# Checkpoints, as nanochat/checkpoint_manager.save_checkpoint writes them

def _is_embedding_key(name):
    return name.startswith('transformer.wte.') or name.startswith('value_embeds.')


def nanochat_state_dict(model, dtype=torch.float32, embed_dtype=None, compiled_prefix=False):
    """model.state_dict() with nanochat's stored dtypes: embed_dtype (default: dtype) for
    transformer.wte.weight and value_embeds.<i>.weight, dtype for all the rest.
    A GPU (bf16) run of nanochat stores dtype=float32, embed_dtype=bfloat16; a CPU/MPS run
    stores everything in float32.  compiled_prefix adds '_orig_mod.' to every key (what a
    torch.compile'd module's state_dict has; nanochat saves the uncompiled orig_model, but its
    loader strips the prefix, so both occur in the wild)."""
    embed_dtype = embed_dtype or dtype
    out = {}
    for k, v in model.state_dict().items():
        v = v.detach().to(embed_dtype if _is_embedding_key(k) else dtype).clone()
        out[('_orig_mod.' + k) if compiled_prefix else k] = v
    return out


def base_train_user_config(cfg):
    """vars(args) of scripts/base_train.py (defaults), as stored in meta['user_config']."""
    return {
        'run': 'dummy', 'device_type': '', 'fp8': False, 'fp8_recipe': 'tensorwise',
        'depth': cfg['n_layer'], 'aspect_ratio': 64, 'head_dim': cfg['n_embd'] // cfg['n_head'],
        'max_seq_len': cfg['sequence_len'], 'window_pattern': cfg['window_pattern'],
        'num_iterations': -1, 'target_flops': -1.0, 'target_param_data_ratio': 12,
        'device_batch_size': 32, 'total_batch_size': -1, 'embedding_lr': 0.3, 'unembedding_lr': 0.008,
        'weight_decay': 0.28, 'matrix_lr': 0.02, 'scalar_lr': 0.5, 'warmup_steps': 40,
        'warmdown_ratio': 0.65, 'final_lr_frac': 0.05, 'resume_from_step': -1, 'eval_every': 250,
        'eval_tokens': 80 * 524288, 'core_metric_every': 2000, 'core_metric_max_per_task': 500,
        'sample_every': 2000, 'save_every': -1, 'model_tag': None,
    }


def nanochat_meta(model, step, kind='base', omit_window_pattern=False):
    """meta_<step:06d>.json contents.  kind: 'base' (scripts/base_train.py), 'sft'
    (scripts/chat_sft.py) or 'rl' (scripts/chat_rl.py: only model_config).  The engine must
    only rely on meta['model_config'] (sequence_len, vocab_size, n_layer, n_head, n_kv_head,
    n_embd, window_pattern; window_pattern may be missing in old checkpoints -> 'L')."""
    cfg = model.cfg
    model_config = {k: cfg[k] for k in GPTCONFIG_DEFAULTS}
    if omit_window_pattern:
        del model_config['window_pattern']
    if kind == 'rl':
        return {'model_config': model_config}
    if kind == 'sft':
        return {'step': step, 'val_bpb': 0.4187, 'model_config': model_config,
                'user_config': {'run': 'dummy', 'device_type': '', 'model_tag': None, 'model_step': None}}
    assert kind == 'base', kind
    return {
        'step': step,
        'val_bpb': 0.8123,
        'model_config': model_config,
        'user_config': base_train_user_config(cfg),
        'device_batch_size': 32,
        'max_seq_len': cfg['sequence_len'],
        'total_batch_size': 524288,
        'dataloader_state_dict': {'pq_idx': 7, 'rg_idx': 3, 'epoch': 1},
        'loop_state': {'min_val_bpb': 0.8101, 'smooth_train_loss': 2.7312, 'total_training_time': 10822.5},
    }


def write_nanochat_checkpoint(model, outdir, step, dtype=torch.float32, compiled_prefix=False,
                              embed_dtype=None, kind='base', omit_window_pattern=False,
                              omit_keys=(), with_optimizer=False):
    """Write <outdir>/model_<step:06d>.pt (torch.save of the state dict, zip format) and
    <outdir>/meta_<step:06d>.json (json.dump(meta, indent=2)), exactly as
    checkpoint_manager.save_checkpoint does.  with_optimizer also writes
    optim_<step:06d>_rank0.pt (a stand-in dict; the engine must ignore it).  omit_keys drops
    state-dict entries (e.g. ('resid_lambdas', 'x0_lambdas') for an old checkpoint, which
    nanochat's loader patches with ones / zeros).  Returns (model_path, meta_path)."""
    os.makedirs(outdir, exist_ok=True)
    sd = nanochat_state_dict(model, dtype, embed_dtype, compiled_prefix)
    for k in omit_keys:
        sd.pop(('_orig_mod.' + k) if compiled_prefix else k)
    model_path = os.path.join(outdir, f'model_{step:06d}.pt')
    torch.save(sd, model_path)
    meta_path = os.path.join(outdir, f'meta_{step:06d}.json')
    with open(meta_path, 'w', encoding='utf-8') as f:
        json.dump(nanochat_meta(model, step, kind, omit_window_pattern), f, indent=2)
    if with_optimizer:
        torch.save({'state': {}, 'param_groups': [{'kind': 'adamw', 'lr': 0.004, 'params': [0]}]},
                   os.path.join(outdir, f'optim_{step:06d}_rank0.pt'))
    return model_path, meta_path


def load_nanochat_checkpoint(outdir, step, dtype=torch.float64):
    """Read back what write_nanochat_checkpoint (or nanochat) wrote, the way build_model does,
    into a reference model in `dtype` (strict load)."""
    with open(os.path.join(outdir, f'meta_{step:06d}.json'), encoding='utf-8') as f:
        meta = json.load(f)
    model = build_from_meta(meta).to(dtype)
    data = torch.load(os.path.join(outdir, f'model_{step:06d}.pt'), map_location='cpu')
    sd = load_nanochat_state_dict(data, model.cfg['n_layer'])
    sd = {k: v.to(dtype) for k, v in sd.items()}
    model.load_state_dict(sd, strict=True)
    return model, meta


def state_dict_spec(model):
    """[(key, shape)] in state_dict order."""
    return [(k, tuple(v.shape)) for k, v in model.state_dict().items()]


# =============================================================================
# Optional: differential check against the real nanochat/gpt.py source (needs the file;
# set NANOCHAT_GPT_PY=/path/to/gpt.py).  Runs the upstream code on torch 1.13 through shims
# for F.rms_norm and F.scaled_dot_product_attention (the shims are independent of the code
# above), with COMPUTE_DTYPE=float64, and compares logits on the same weights.

def check_against_upstream(gpt_py, flash_py=None, seed=0):
    import types

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        Tq, Tk, D = q.size(-2), k.size(-2), q.size(-1)
        if enable_gqa:
            k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)
            v = v.repeat_interleave(q.size(-3) // v.size(-3), dim=-3)
        s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else 1.0 / math.sqrt(D))
        if is_causal:
            s = s.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool).tril(), float('-inf'))
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float('-inf'))
        return torch.softmax(s, -1) @ v

    def rms(x, normalized_shape, weight=None, eps=None):
        xf = x.double()
        e = torch.finfo(torch.float64).eps if eps is None else eps
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + e)).to(x.dtype)

    F.rms_norm = rms
    F.scaled_dot_product_attention = sdpa
    common = types.ModuleType('nanochat.common')
    common.COMPUTE_DTYPE = torch.float64
    common.get_dist_info = lambda: (False, 0, 0, 1)
    common.print0 = lambda *a, **k: None
    optim = types.ModuleType('nanochat.optim')
    optim.MuonAdamW = object
    fa = types.ModuleType('nanochat.flash_attention')
    if flash_py is None:
        flash_py = os.path.join(os.path.dirname(gpt_py), 'flash_attention.py')
    exec(compile(open(flash_py).read(), flash_py, 'exec'), fa.__dict__)
    pkg = types.ModuleType('nanochat')
    pkg.__path__ = []
    sys.modules.update({'nanochat': pkg, 'nanochat.common': common, 'nanochat.optim': optim,
                        'nanochat.flash_attention': fa})
    up = types.ModuleType('nanochat.gpt')
    sys.modules['nanochat.gpt'] = up
    exec(compile(open(gpt_py).read(), gpt_py, 'exec'), up.__dict__)

    cfg = nanochat_config(sequence_len=256, vocab_size=200, n_layer=4, n_head=4, n_kv_head=2,
                          n_embd=64, window_pattern='SSL')
    theirs = up.GPT(up.GPTConfig(**cfg))
    theirs.init_weights()
    ours = randomize_nanochat_(NanochatGPT(cfg), seed).double()
    keys_t = list(theirs.state_dict().keys())
    keys_o = list(ours.state_dict().keys())
    assert keys_t == keys_o, f'state_dict keys/order differ:\n{keys_t}\n{keys_o}'
    for k, v in theirs.state_dict().items():
        assert tuple(v.shape) == tuple(ours.state_dict()[k].shape), k
    theirs.load_state_dict(ours.state_dict(), strict=True)
    theirs.double()
    theirs.cos, theirs.sin = theirs._precompute_rotary_embeddings(theirs.rotary_seq_len,
                                                                  cfg['n_embd'] // cfg['n_head'])
    assert theirs.window_sizes == ours.window_sizes
    # nanochat returns logits.float() (fp32) even with COMPUTE_DTYPE=float64, so the final
    # logits agree to fp32 rounding only; the lm_head outputs (before the cast) are compared tightly.
    raw = {}
    theirs.lm_head.register_forward_hook(lambda mod, inp, out: raw.__setitem__('theirs', out))
    ours.lm_head.register_forward_hook(lambda mod, inp, out: raw.__setitem__('ours', out))
    g = torch.Generator().manual_seed(seed + 1)
    worst_raw = worst = 0.0
    for T in (2, 7, 129, 200):
        idx = torch.randint(cfg['vocab_size'], (2, T), generator=g)
        with torch.no_grad():
            a = theirs(idx)
            b = ours(idx)
        assert a.dtype == torch.float32 and a.shape == b.shape == (2, T, cfg['vocab_size']), (a.shape, b.shape)
        worst = max(worst, (a.double() - b).abs().max().item())
        worst_raw = max(worst_raw, (raw['theirs'] - raw['ours']).abs().max().item())
    return worst_raw, worst


# =============================================================================
# Self-check

def _max_diff(a, b):
    return (a.double() - b.double()).abs().max().item()


def _self_check():
    import tempfile
    import time
    torch.set_num_threads(1)
    t0 = time.time()
    ok = True

    def check(cond, msg):
        nonlocal ok
        print(('ok   ' if cond else 'FAIL ') + msg)
        ok = ok and bool(cond)

    # 1. window sizes as nanochat computes them
    check(compute_window_sizes(nanochat_config(n_layer=12)) ==
          [(512, 0)] * 3 + [(2048, 0)] + [(512, 0)] * 3 + [(2048, 0)] + [(512, 0)] * 3 + [(2048, 0)],
          'default SSSL windows for sequence_len 2048: S = 512, L = 2048, last layer L')
    check(compute_window_sizes(nanochat_config(sequence_len=64, n_layer=3, window_pattern='SL')) ==
          [(128, 0), (64, 0), (64, 0)], 'sequence_len 64: S = 128 > L = 64')
    check(padded_vocab_size(200) == 256 and padded_vocab_size(65536) == 65536, 'vocab padding to 64')

    # 2. attention against a per-query loop (GQA + window)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 11, 4, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 11, 2, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 11, 2, 8, generator=g, dtype=torch.float64)
    for w in (3, 11, -1):
        y = attention(q, k, v, w)
        ref = torch.empty_like(y)
        for b in range(2):
            for h in range(4):
                for i in range(11):
                    lo = 0 if w < 0 else max(0, i - w)
                    kk, vv = k[b, lo:i + 1, h // 2], v[b, lo:i + 1, h // 2]
                    p = torch.softmax(kk @ q[b, i, h] / math.sqrt(8), 0)
                    ref[b, i, h] = p @ vv
        check(_max_diff(y, ref) < 1e-12, f'attention == per-query loop (window {w}: keys i-{w}..i)')

    # 3. the tiny model: 4 layers, width 64, 4 heads, 2 kv heads, SSSL with S = 128 < T
    cfg = nanochat_config(sequence_len=256, vocab_size=200, n_layer=4, n_head=4, n_kv_head=2,
                          n_embd=64, window_pattern='SSSL')
    model = randomize_nanochat_(NanochatGPT(cfg), seed=1).double().eval()
    print('windows:', model.window_sizes, '| value embeds on layers', sorted(model.value_embeds.keys()))
    T = 200
    idx = torch.randint(cfg['vocab_size'], (2, T), generator=g)
    with torch.no_grad():
        logits = model(idx)
        padded = model(idx, return_padded=True)
    check(logits.shape == (2, T, 200) and logits.dtype == torch.float64, f'logits shape {tuple(logits.shape)}')
    check(padded.shape == (2, T, 256) and _max_diff(padded[..., :200], logits) == 0, 'padded logits')
    amax = logits.abs().max().item()
    std = logits.std().item()
    check(1.0 < std < 10.0 and amax < SOFTCAP, f'logits O(1..10): std {std:.2f}, max |logit| {amax:.2f}')
    check(padded[..., 200:].abs().max().item() > amax, 'padding rows of lm_head are louder (slicing is visible)')

    # causal invariance, at a few prefix lengths (including one inside the S window)
    with torch.no_grad():
        for P in (2, 100, 150):
            check(_max_diff(model(idx[:, :P]), logits[:, :P]) < 1e-10, f'causal: prefix {P} == first rows')
    with torch.no_grad():
        one = model(idx[:, :1])
    check(one.shape == (2, 1, 200), 'T == 1 runs (no smear)')

    # every parameter matters
    with torch.no_grad():
        base = model(idx[:, :160])
        for name, p in model.named_parameters():
            saved = p.detach().clone()
            if name in ('transformer.wte.weight', 'lm_head.weight') or name.startswith('value_embeds.'):
                rows = idx[:, :160].flatten().unique()
                p[rows] += 0.05 * torch.randn(p[rows].shape, generator=g, dtype=p.dtype)
            else:
                p += 0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype)
            d = _max_diff(model(idx[:, :160]), base)
            p.copy_(saved)
            if d < 1e-6:
                check(False, f'parameter {name} does not influence the logits ({d:.2e})')
    check(True, 'every parameter influences the logits')

    # window semantics (off-by-one): 1 layer, T > sequence_len so the (last, L) layer is windowed.
    cfg1 = nanochat_config(sequence_len=64, vocab_size=100, n_layer=1, n_head=2, n_kv_head=1,
                           n_embd=32, window_pattern='L')
    m1 = randomize_nanochat_(NanochatGPT(cfg1), seed=5).double().eval()
    ids1 = torch.randint(100, (1, 100), generator=g)
    i = 99
    with torch.no_grad():
        base1 = m1(ids1)[0, i]
        for j, expect in ((i - 64 - 2, False), (i - 64 - 1, True), (i - 64, True)):
            ids2 = ids1.clone()
            ids2[0, j] = (ids2[0, j] + 1) % 100
            changed = _max_diff(m1(ids2)[0, i], base1) > 1e-12
            check(changed == expect, f'window 64: token {j} {"affects" if expect else "does not affect"} '
                                     f'logit {i} (keys {i - 64}..{i}, smear reaches one further)')

    # 4. checkpoint round trip (fp32 + bf16 embeddings like a GPU run, compiled prefix, strict load)
    with tempfile.TemporaryDirectory() as d:
        for dt, edt, comp in ((torch.float32, None, False), (torch.float32, torch.bfloat16, True),
                              (torch.bfloat16, None, False)):
            m = randomize_nanochat_(NanochatGPT(cfg), seed=2).double().eval()
            nanochat_roundtrip_(m, dt, edt)
            sub = os.path.join(d, f'{dt}_{edt}_{comp}')
            mp, jp = write_nanochat_checkpoint(m, sub, 1234, dtype=dt, compiled_prefix=comp, embed_dtype=edt)
            check(os.path.basename(mp) == 'model_001234.pt' and os.path.basename(jp) == 'meta_001234.json',
                  'file names model_001234.pt / meta_001234.json')
            raw_sd = torch.load(mp)
            dts = {k.replace('_orig_mod.', ''): v.dtype for k, v in raw_sd.items()}
            check(all(v == (edt or dt) for k, v in dts.items() if _is_embedding_key(k)) and
                  all(v == dt for k, v in dts.items() if not _is_embedding_key(k)),
                  f'stored dtypes: {dt} / embeddings {edt or dt}' + (' / _orig_mod.' if comp else ''))
            m2, meta = load_nanochat_checkpoint(sub, 1234)
            with torch.no_grad():
                check(_max_diff(m2(idx), m(idx)) == 0.0, 'reload (strict) gives identical logits')
            check(list(meta['model_config']) == list(GPTCONFIG_DEFAULTS), 'meta model_config keys')

    # 5. fp32 compute path (nanochat on CPU) stays close to the float64 truth
    m32 = randomize_nanochat_(NanochatGPT(cfg), seed=1).eval()
    with torch.no_grad():
        d32 = _max_diff(m32(idx), logits)
    check(d32 < 1e-3, f'float32 compute vs float64: {d32:.2e}')

    print('state_dict:')
    for k, s in state_dict_spec(model):
        print(f'  {k:40s} {list(s)}')

    up = os.environ.get('NANOCHAT_GPT_PY')
    if up:
        worst_raw, worst = check_against_upstream(up)
        check(worst_raw < 1e-10, f'upstream nanochat/gpt.py (shimmed, float64): lm_head outputs differ by {worst_raw:.2e}')
        check(worst < 1e-5, f'upstream nanochat/gpt.py: final (fp32, soft-capped) logits differ by {worst:.2e}')
    print(f'{time.time() - t0:.1f} s')
    print('ALL OK' if ok else 'SOME CHECKS FAILED')
    return ok


if __name__ == '__main__':
    sys.exit(0 if _self_check() else 1)
