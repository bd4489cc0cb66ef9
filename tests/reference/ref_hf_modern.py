"""PyTorch re-implementation of the "modern" Hugging Face causal LMs, for parity tests.

Families (eager attention path, no KV cache, positions 0..T-1, no padding):
  * LlamaForCausalLM   (model_type "llama")    -- also what MistralForCausalLM is
  * MistralForCausalLM (model_type "mistral")  -- Llama block, never any bias, optional sliding window
  * Qwen2ForCausalLM   (model_type "qwen2")    -- Llama block + q/k/v biases (o_proj and MLP: no bias)
  * Qwen3ForCausalLM   (model_type "qwen3")    -- Llama block + per-head RMSNorm on q and k before RoPE
  * GPTNeoXForCausalLM (model_type "gpt_neox") -- Pythia / GPT-NeoX: LayerNorm, fused per-head QKV,
                                                  partial rotary, parallel or sequential residual

Followed line for line (read from github:huggingface/transformers through the code index):
  src/transformers/models/llama/modeling_llama.py   @ 5dd4a63548857797727ae73eeb6a6e886ea02a3e (~v4.48,
        LlamaRMSNorm, LlamaRotaryEmbedding, rotate_half, apply_rotary_pos_emb, LlamaMLP, repeat_kv,
        eager_attention_forward, LlamaAttention, LlamaDecoderLayer, LlamaModel, LlamaForCausalLM);
        and the older  @ 002272831fba584eb30dca9729c1be456836960a (~v4.38: per-attention rotary_emb,
        pretraining_tp slicing, same math)
  src/transformers/modeling_rope_utils.py            @ 0044e3b3facff1a1ad60b235c69d5b45beae75a4
        (_compute_default_rope_parameters, _compute_llama3_parameters, ROPE_INIT_FUNCTIONS). Newer
        versions (v4.5x, "transformers 4.57 _compute_default_rope_parameters") take
        dim = int((config.head_dim or hidden_size // num_attention_heads) * partial_rotary_factor);
        the older one above used hidden_size // num_attention_heads -- we follow the newer (head_dim).
  src/transformers/models/qwen2/modular_qwen2.py     @ 022c4a9b8834f5bac216562fae138b8124814ce3
  src/transformers/models/qwen3/modeling_qwen3.py    @ 000c33fdfde12e1ffafbfcdb3c926df5727a00b6 (v5-era)
  src/transformers/models/qwen3/configuration_qwen3.py (defaults; head_dim defaults to 128)
  src/transformers/models/gpt_neox/modular_gpt_neox.py @ 00dcc6dda6f6d8e69541a6b51f97986a80242367
        (qkv .view(B, T, -1, 3*head_size).transpose(1, 2).chunk(3, -1); partial rotary; parallel residual)
  src/transformers/models/gpt_neox/configuration_gpt_neox.py @ 35aa9bd7c6c1121a4ae03fb9679bcbff6bb75c1b
        (defaults; v4.45+ also sets rope_theta = rotary_emb_base, partial_rotary_factor = rotary_pct)
  src/transformers/masking_utils.py (sliding_window_overlay: kv_idx > q_idx - sliding_window)
  Older GPT-NeoX (<= ~4.30, what Pythia was saved with) registered persistent buffers
  attention.bias (tril mask), attention.masked_bias (-1e9) and attention.rotary_emb.inv_freq; older
  Llama (<= 4.30) a persistent self_attn.rotary_emb.inv_freq. Both end up in real checkpoints, so the
  modules can include them (legacy_buffers=...); converters must ignore them.

Precision: the modules compute in their own dtype (tests call .double()), i.e. the exact math. HF
itself does some things in float32 whatever the model dtype; the differences are documented where
they occur (RMSNorm upcast, RoPE inv_freq/cos/sin in float32, softmax in float32). rope_fp32=True
reproduces HF's float32 RoPE bit for bit (cos/sin computed in float32, then cast).
"""
import copy
import json
import math
import os
import sys
import tempfile
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402

TRANSFORMERS_VERSION = '4.46.3'  # what config_json writes as "transformers_version"
FAMILIES = ('llama', 'mistral', 'qwen2', 'qwen3', 'gpt_neox')


# =============================================================================
# Activations (transformers/activations.py ACT2FN)

def _act(name):
    if name in ('silu', 'swish'):
        return F.silu
    if name == 'gelu':  # GELUActivation: exact erf GELU
        return F.gelu
    if name == 'gelu_new':  # NewGELUActivation
        return R.gelu_new
    if name == 'gelu_pytorch_tanh':  # PytorchGELUTanh: same function as gelu_new, torch's kernel
        return lambda x: F.gelu(x, approximate='tanh')
    if name == 'gelu_fast':  # FastGELUActivation (gpt-neox-20b uses it); note the truncated constant
        return lambda x: 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))
    if name == 'quick_gelu':
        return lambda x: x * torch.sigmoid(1.702 * x)
    if name == 'relu':
        return F.relu
    raise ValueError(f"unsupported hidden_act {name!r}")


# =============================================================================
# Rotary embeddings (modeling_rope_utils.py + LlamaRotaryEmbedding)

def rope_settings(cfg, default_theta=10000.0):
    """(theta, rope_scaling dict or None) from a config.json dict. Understands the v4 keys
    (rope_theta, rope_scaling with "rope_type" or the older "type") and v5's rope_parameters."""
    rp = cfg.get('rope_parameters')
    if isinstance(rp, dict):
        theta = rp.get('rope_theta', cfg.get('rope_theta', default_theta))
        scaling = rp if rp.get('rope_type', 'default') != 'default' else None
        return float(theta), scaling
    theta = cfg.get('rope_theta', default_theta)
    scaling = cfg.get('rope_scaling')
    if scaling is not None and scaling.get('rope_type', scaling.get('type')) == 'default':
        scaling = None
    return float(theta), scaling


def rope_inv_freq(dim, theta, scaling=None, dtype=torch.float64):
    """inv_freq [dim/2] as ROPE_INIT_FUNCTIONS computes it ("default" and "llama3" only), in dtype
    (HF: float32)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim))
    if scaling is None:
        return inv_freq
    rope_type = scaling.get('rope_type', scaling.get('type'))
    if rope_type != 'llama3':
        raise ValueError(f"rope_scaling type {rope_type!r} is not supported by this reference "
                         f"(only null/'default' and 'llama3')")
    # _compute_llama3_parameters, line for line
    factor = scaling['factor']  # `8` in the original implementation
    low_freq_factor = scaling['low_freq_factor']  # `1`
    high_freq_factor = scaling['high_freq_factor']  # `4`
    old_context_len = scaling['original_max_position_embeddings']  # `8192`
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    # wavelen < high_freq_wavelen: do nothing; wavelen > low_freq_wavelen: divide by factor
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    # otherwise: interpolate between the two, using a smooth factor
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rope_cos_sin(dim, theta, scaling, T, dtype, rope_fp32=False):
    """cos, sin [T, dim] for positions 0..T-1: emb = cat(freqs, freqs), freqs[t, i] = t * inv_freq[i].
    rope_fp32=True: inv_freq, products, cos and sin in float32 (exactly as HF), then cast to dtype."""
    cdt = torch.float32 if rope_fp32 else dtype
    inv_freq = rope_inv_freq(dim, theta, scaling, cdt)
    pos = torch.arange(T, dtype=torch.int64).to(cdt)
    freqs = pos[:, None] * inv_freq[None, :]  # HF: inv_freq[:, None] @ pos[None, :] (K=1: same products)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    """q, k [B, H, T, hd]; cos, sin [T, rot]. rot < hd: only the first rot dims of each head rotate
    (GPT-NeoX partial rotary); with rot == hd this is Llama's apply_rotary_pos_emb."""
    rot = cos.shape[-1]
    q_rot, q_pass = q[..., :rot], q[..., rot:]
    k_rot, k_pass = k[..., :rot], k[..., rot:]
    q_embed = (q_rot * cos) + (rotate_half(q_rot) * sin)
    k_embed = (k_rot * cos) + (rotate_half(k_rot) * sin)
    return torch.cat([q_embed, q_pass], dim=-1), torch.cat([k_embed, k_pass], dim=-1)


def repeat_kv(hidden_states, n_rep):
    """[B, n_kv, T, hd] -> [B, n_kv * n_rep, T, hd]: query head h reads kv head h // n_rep."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def causal_mask(T, dtype, sliding_window=None):
    """Additive [1, 1, T, T] mask: 0 where key j is visible to query i (j <= i and, with a sliding
    window W, j > i - W), finfo(dtype).min elsewhere (as HF's eager mask)."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    visible = j <= i
    if sliding_window is not None:
        visible = visible & (j > i - sliding_window)
    m = torch.zeros(T, T, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)
    return m[None, None]


def eager_attention(query, key, value, mask, scaling, n_rep):
    """eager_attention_forward: softmax((q @ k^T) * scaling + mask) @ v. HF runs the softmax in
    float32 (dtype=torch.float32) and casts back; here it runs in the tensors' dtype."""
    key_states = repeat_kv(key, n_rep)
    value_states = repeat_kv(value, n_rep)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    attn_weights = attn_weights + mask
    attn_weights = F.softmax(attn_weights, dim=-1)
    attn_output = torch.matmul(attn_weights, value_states)
    return attn_output.transpose(1, 2).contiguous()  # [B, T, H, hd]


# =============================================================================
# Llama / Mistral / Qwen2 / Qwen3

class RMSNorm(nn.Module):
    """LlamaRMSNorm / Qwen3RMSNorm: weight * (x * rsqrt(mean(x^2, -1) + eps)). HF computes the
    normalisation in float32 and casts back to the input dtype before the weight product; here it is
    done in x's dtype (the math)."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


class _LegacyRotary(nn.Module):
    """Only to hold the persistent inv_freq buffer old transformers saved (never used in forward)."""

    def __init__(self, inv_freq):
        super().__init__()
        self.register_buffer('inv_freq', inv_freq)


def decoder_settings(cfg):
    """Resolved hyper-parameters of a Llama-like config.json dict, with each family's class
    defaults (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config)."""
    mt = cfg.get('model_type', 'llama')
    if mt not in ('llama', 'mistral', 'qwen2', 'qwen3'):
        raise ValueError(f"not a Llama-like model_type: {mt!r}")
    H = cfg['num_attention_heads']
    D = cfg['hidden_size']
    s = dict(model_type=mt, hidden_size=D, num_heads=H, vocab_size=cfg['vocab_size'],
             num_layers=cfg['num_hidden_layers'], intermediate_size=cfg['intermediate_size'])
    s['num_kv_heads'] = cfg.get('num_key_value_heads') or H
    if mt == 'qwen3':
        s['head_dim'] = cfg.get('head_dim', 128) or D // H  # Qwen3Config: head_dim=128 by default
    else:
        s['head_dim'] = cfg.get('head_dim') or D // H
    s['rms_norm_eps'] = cfg.get('rms_norm_eps', 1e-6)
    s['hidden_act'] = cfg.get('hidden_act', 'silu')
    s['tie'] = cfg.get('tie_word_embeddings', False)
    s['theta'], s['rope_scaling'] = rope_settings(cfg, 10000.0)
    if s['rope_scaling'] is not None:  # validate now (raises on unsupported types)
        rope_inv_freq(s['head_dim'], s['theta'], s['rope_scaling'])
    # Biases: Llama reads attention_bias (q,k,v,o) and mlp_bias; Mistral has none; Qwen2 has q,k,v
    # biases always and never o_proj/MLP ones; Qwen3 reads attention_bias (q,k,v,o), MLP none.
    if mt == 'llama':
        ab = cfg.get('attention_bias', False)
        s.update(qkv_bias=ab, o_bias=ab, mlp_bias=cfg.get('mlp_bias', False))
    elif mt == 'mistral':
        s.update(qkv_bias=False, o_bias=False, mlp_bias=False)
    elif mt == 'qwen2':
        s.update(qkv_bias=True, o_bias=False, mlp_bias=False)
    else:
        ab = cfg.get('attention_bias', False)
        s.update(qkv_bias=ab, o_bias=ab, mlp_bias=False)
    s['qk_norm'] = mt == 'qwen3'
    # Sliding window per layer. Mistral: every layer when sliding_window is not null. Qwen2/3:
    # only with use_sliding_window true, for layers >= max_window_layers (config.layer_types wins).
    L = s['num_layers']
    sw = cfg.get('sliding_window')
    qwen_off = mt in ('qwen2', 'qwen3') and not cfg.get('use_sliding_window', False)
    if qwen_off:  # Qwen2Config / Qwen3Config: sliding_window = ... if use_sliding_window else None
        windows = [None] * L
    elif cfg.get('layer_types') and sw is not None:
        windows = [sw if t == 'sliding_attention' else None for t in cfg['layer_types']]
    elif mt == 'mistral':
        windows = [sw] * L
    elif mt in ('qwen2', 'qwen3') and cfg.get('use_sliding_window', False) and sw is not None:
        mwl = cfg.get('max_window_layers', 28)
        windows = [sw if i >= mwl else None for i in range(L)]
    else:
        windows = [None] * L
    s['windows'] = windows
    return s


class LlamaLikeAttention(nn.Module):
    def __init__(self, s, legacy_inv_freq=None):
        super().__init__()
        D, H, KV, hd = s['hidden_size'], s['num_heads'], s['num_kv_heads'], s['head_dim']
        self.head_dim = hd
        self.num_key_value_groups = H // KV
        self.scaling = hd ** -0.5
        self.q_proj = nn.Linear(D, H * hd, bias=s['qkv_bias'])
        self.k_proj = nn.Linear(D, KV * hd, bias=s['qkv_bias'])
        self.v_proj = nn.Linear(D, KV * hd, bias=s['qkv_bias'])
        self.o_proj = nn.Linear(H * hd, D, bias=s['o_bias'])
        self.qk_norm = s['qk_norm']
        if self.qk_norm:
            self.q_norm = RMSNorm(hd, eps=s['rms_norm_eps'])  # over head_dim, per head
            self.k_norm = RMSNorm(hd, eps=s['rms_norm_eps'])
        if legacy_inv_freq is not None:
            self.rotary_emb = _LegacyRotary(legacy_inv_freq)

    def forward(self, hidden_states, cos, sin, mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(hidden_shape)
        k = self.k_proj(hidden_states).view(hidden_shape)
        if self.qk_norm:  # Qwen3: RMSNorm over head_dim, before the transpose and before RoPE
            q = self.q_norm(q)
            k = self.k_norm(k)
        query_states = q.transpose(1, 2)
        key_states = k.transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attn_output = eager_attention(query_states, key_states, value_states, mask, self.scaling,
                                      self.num_key_value_groups)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output)


class LlamaLikeMLP(nn.Module):
    def __init__(self, s):
        super().__init__()
        D, I, b = s['hidden_size'], s['intermediate_size'], s['mlp_bias']
        self.gate_proj = nn.Linear(D, I, bias=b)
        self.up_proj = nn.Linear(D, I, bias=b)
        self.down_proj = nn.Linear(I, D, bias=b)
        self.act_fn = _act(s['hidden_act'])

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaLikeDecoderLayer(nn.Module):
    def __init__(self, s, legacy_inv_freq=None):
        super().__init__()
        self.self_attn = LlamaLikeAttention(s, legacy_inv_freq)
        self.mlp = LlamaLikeMLP(s)
        self.input_layernorm = RMSNorm(s['hidden_size'], eps=s['rms_norm_eps'])
        self.post_attention_layernorm = RMSNorm(s['hidden_size'], eps=s['rms_norm_eps'])

    def forward(self, hidden_states, cos, sin, mask):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, cos, sin, mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class LlamaLikeModel(nn.Module):
    def __init__(self, s, legacy_buffers=False):
        super().__init__()
        self.embed_tokens = nn.Embedding(s['vocab_size'], s['hidden_size'])
        legacy = None
        if legacy_buffers:  # transformers <= 4.30: persistent inv_freq in every attention
            legacy = rope_inv_freq(s['head_dim'], s['theta'], None, torch.float32)
        self.layers = nn.ModuleList([LlamaLikeDecoderLayer(s, None if legacy is None else legacy.clone())
                                     for _ in range(s['num_layers'])])
        self.norm = RMSNorm(s['hidden_size'], eps=s['rms_norm_eps'])


class HFLlamaLikeForCausalLM(nn.Module):
    """LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM, chosen by the
    config's model_type. state_dict keys are exactly what save_pretrained writes:
      model.embed_tokens.weight
      model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ .bias where the family has one)
      model.layers.{i}.self_attn.{q,k}_norm.weight     (Qwen3 only)
      model.layers.{i}.mlp.{gate,up,down}_proj.weight  (+ .bias with Llama mlp_bias)
      model.layers.{i}.{input,post_attention}_layernorm.weight
      model.norm.weight, lm_head.weight
    plus model.layers.{i}.self_attn.rotary_emb.inv_freq with legacy_buffers=True."""

    def __init__(self, cfg, legacy_buffers=False, rope_fp32=False):
        super().__init__()
        self.cfg = dict(cfg)
        self.s = s = decoder_settings(cfg)
        self.rope_fp32 = rope_fp32
        self.model = LlamaLikeModel(s, legacy_buffers)
        self.lm_head = nn.Linear(s['hidden_size'], s['vocab_size'], bias=False)
        if s['tie']:
            self.lm_head.weight = self.model.embed_tokens.weight

    tied_key = 'lm_head.weight'
    tied_to = 'model.embed_tokens.weight'

    @property
    def tied(self):
        return self.s['tie']

    @property
    def block_size(self):
        return self.cfg.get('max_position_embeddings', 2048)

    def forward(self, idx):
        s = self.s
        T = idx.shape[1]
        x = self.model.embed_tokens(idx)
        cos, sin = rope_cos_sin(s['head_dim'], s['theta'], s['rope_scaling'], T, x.dtype, self.rope_fp32)
        masks = {}
        for layer, w in zip(self.model.layers, s['windows']):
            if w not in masks:
                masks[w] = causal_mask(T, x.dtype, w)
            x = layer(x, cos, sin, masks[w])
        return self.lm_head(self.model.norm(x))


# =============================================================================
# GPT-NeoX (Pythia)

def neox_settings(cfg):
    D, H = cfg['hidden_size'], cfg['num_attention_heads']
    if D % H:
        raise ValueError("hidden_size must be divisible by num_attention_heads")
    s = dict(hidden_size=D, num_heads=H, head_size=D // H, vocab_size=cfg['vocab_size'],
             num_layers=cfg['num_hidden_layers'], intermediate_size=cfg.get('intermediate_size', 4 * D))
    # rotary_pct / rotary_emb_base are the canonical keys (v4.45+ also write partial_rotary_factor /
    # rope_theta, set equal to them); v5 configs hold rope_parameters.
    rp = cfg.get('rope_parameters') if isinstance(cfg.get('rope_parameters'), dict) else {}
    pct = cfg.get('rotary_pct', cfg.get('partial_rotary_factor', rp.get('partial_rotary_factor', 0.25)))
    base = cfg.get('rotary_emb_base', cfg.get('rope_theta', rp.get('rope_theta', 10000)))
    s['rotary_pct'] = pct
    s['rotary_ndims'] = int(s['head_size'] * pct)
    s['theta'] = float(base)
    _, s['rope_scaling'] = rope_settings(dict(cfg, rope_theta=base), 10000.0)
    if s['rope_scaling'] is not None:
        rope_inv_freq(s['rotary_ndims'], s['theta'], s['rope_scaling'])
    s['hidden_act'] = cfg.get('hidden_act', 'gelu')
    s['layer_norm_eps'] = cfg.get('layer_norm_eps', 1e-5)
    s['parallel'] = cfg.get('use_parallel_residual', True)
    s['bias'] = cfg.get('attention_bias', True)
    s['tie'] = cfg.get('tie_word_embeddings', False)
    s['max_pos'] = cfg.get('max_position_embeddings', 2048)
    return s


class GPTNeoXAttention(nn.Module):
    def __init__(self, s, legacy_buffers=False):
        super().__init__()
        D = s['hidden_size']
        self.head_size = s['head_size']
        self.rotary_ndims = s['rotary_ndims']
        self.scaling = self.head_size ** -0.5
        if legacy_buffers:
            # transformers <= ~4.30 (Pythia's checkpoints): persistent buffers, in this order.
            # bias was uint8 before ~4.28 and bool after it; masked_bias is -1e9 (-inf once cast to f16).
            P = s['max_pos']
            mdt = torch.uint8 if legacy_buffers == 'uint8' else torch.bool
            self.register_buffer('bias', torch.tril(torch.ones((P, P), dtype=mdt)).view(1, 1, P, P))
            self.register_buffer('masked_bias', torch.tensor(-1e9))
            self.rotary_emb = _LegacyRotary(rope_inv_freq(self.rotary_ndims, s['theta'], None, torch.float32))
        self.query_key_value = nn.Linear(D, 3 * D, bias=s['bias'])
        self.dense = nn.Linear(D, D, bias=s['bias'])

    def forward(self, hidden_states, cos, sin, mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, 3 * self.head_size)
        # Output features of query_key_value are laid out [num_heads, 3, head_size]:
        # row h*3*hs + j*hs + d is (q, k, v)[j] of head h, dim d.
        qkv = self.query_key_value(hidden_states).view(hidden_shape).transpose(1, 2)
        query_states, key_states, value_states = qkv.chunk(3, dim=-1)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attn_output = eager_attention(query_states, key_states, value_states, mask, self.scaling, 1)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.dense(attn_output)


class GPTNeoXMLP(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(s['hidden_size'], s['intermediate_size'])
        self.dense_4h_to_h = nn.Linear(s['intermediate_size'], s['hidden_size'])
        self.act = _act(s['hidden_act'])

    def forward(self, hidden_states):
        return self.dense_4h_to_h(self.act(self.dense_h_to_4h(hidden_states)))


class GPTNeoXLayer(nn.Module):
    def __init__(self, s, legacy_buffers=False):
        super().__init__()
        self.use_parallel_residual = s['parallel']
        self.input_layernorm = nn.LayerNorm(s['hidden_size'], eps=s['layer_norm_eps'])
        self.post_attention_layernorm = nn.LayerNorm(s['hidden_size'], eps=s['layer_norm_eps'])
        self.attention = GPTNeoXAttention(s, legacy_buffers)
        self.mlp = GPTNeoXMLP(s)

    def forward(self, hidden_states, cos, sin, mask):
        attn_output = self.attention(self.input_layernorm(hidden_states), cos, sin, mask)
        if self.use_parallel_residual:
            # x = x + attn(ln1(x)) + mlp(ln2(x))
            mlp_output = self.mlp(self.post_attention_layernorm(hidden_states))
            return mlp_output + attn_output + hidden_states
        # x = x + attn(ln1(x)); x = x + mlp(ln2(x))
        attn_output = attn_output + hidden_states
        mlp_output = self.mlp(self.post_attention_layernorm(attn_output))
        return mlp_output + attn_output


class GPTNeoXModel(nn.Module):
    def __init__(self, s, legacy_buffers=False):
        super().__init__()
        self.embed_in = nn.Embedding(s['vocab_size'], s['hidden_size'])
        self.layers = nn.ModuleList([GPTNeoXLayer(s, legacy_buffers) for _ in range(s['num_layers'])])
        self.final_layer_norm = nn.LayerNorm(s['hidden_size'], eps=s['layer_norm_eps'])


class HFGPTNeoXForCausalLM(nn.Module):
    """GPTNeoXForCausalLM. state_dict keys:
      gpt_neox.embed_in.weight
      gpt_neox.layers.{i}.input_layernorm.{weight,bias}, .post_attention_layernorm.{weight,bias}
      gpt_neox.layers.{i}.attention.query_key_value.{weight,bias}, .attention.dense.{weight,bias}
      gpt_neox.layers.{i}.mlp.dense_h_to_4h.{weight,bias}, .mlp.dense_4h_to_h.{weight,bias}
      gpt_neox.final_layer_norm.{weight,bias}, embed_out.weight
    legacy_buffers=True / 'bool' / 'uint8' adds gpt_neox.layers.{i}.attention.{bias,masked_bias,
    rotary_emb.inv_freq} as Pythia-era checkpoints have them."""

    def __init__(self, cfg, legacy_buffers=False, rope_fp32=False):
        super().__init__()
        self.cfg = dict(cfg)
        self.s = s = neox_settings(cfg)
        self.rope_fp32 = rope_fp32
        self.gpt_neox = GPTNeoXModel(s, legacy_buffers)
        self.embed_out = nn.Linear(s['hidden_size'], s['vocab_size'], bias=False)
        if s['tie']:
            self.embed_out.weight = self.gpt_neox.embed_in.weight

    tied_key = 'embed_out.weight'
    tied_to = 'gpt_neox.embed_in.weight'

    @property
    def tied(self):
        return self.s['tie']

    @property
    def block_size(self):
        return self.s['max_pos']

    def forward(self, idx):
        s = self.s
        T = idx.shape[1]
        x = self.gpt_neox.embed_in(idx)
        cos, sin = rope_cos_sin(s['rotary_ndims'], s['theta'], s['rope_scaling'], T, x.dtype, self.rope_fp32)
        mask = causal_mask(T, x.dtype)
        for layer in self.gpt_neox.layers:
            x = layer(x, cos, sin, mask)
        return self.embed_out(self.gpt_neox.final_layer_norm(x))


def neox_split_qkv(weight, num_heads):
    """query_key_value.weight [3D, D] (or bias [3D]) -> (Wq, Wk, Wv), each [D, ...] with the usual
    head-major layout (rows h*hs .. h*hs+hs-1 belong to head h)."""
    three_d = weight.shape[0]
    hs = three_d // (3 * num_heads)
    w = weight.reshape(num_heads, 3, hs, *weight.shape[1:])
    return tuple(w[:, j].reshape(num_heads * hs, *weight.shape[1:]) for j in range(3))


# =============================================================================
# Construction, config.json, randomisation

def build(cfg, **kw):
    """The module for a config.json dict (by model_type)."""
    if cfg.get('model_type') == 'gpt_neox':
        return HFGPTNeoXForCausalLM(cfg, **kw)
    return HFLlamaLikeForCausalLM(cfg, **kw)


def config_json(family, vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=None, max_position_embeddings=64, num_key_value_heads=None,
                head_dim=None, tie_word_embeddings=None, torch_dtype='float32', legacy=False, **extra):
    """config.json as save_pretrained (transformers ~4.46) writes it for that family, with the
    family's real default values; extra keys are added / override (e.g. rope_scaling, attention_bias,
    mlp_bias, rope_theta, rms_norm_eps, use_parallel_residual, rotary_pct, hidden_act, sliding_window).
    legacy=True (gpt_neox only): the Pythia-era (4.24) key set."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}")
    D, H = hidden_size, num_attention_heads
    if family == 'gpt_neox':
        c = {
            'architectures': ['GPTNeoXForCausalLM'], 'bos_token_id': 0, 'classifier_dropout': 0.1,
            'eos_token_id': 0, 'hidden_act': 'gelu', 'hidden_size': D, 'initializer_range': 0.02,
            'intermediate_size': intermediate_size or 4 * D, 'layer_norm_eps': 1e-05,
            'max_position_embeddings': max_position_embeddings, 'model_type': 'gpt_neox',
            'num_attention_heads': H, 'num_hidden_layers': num_hidden_layers, 'rotary_emb_base': 10000,
            'rotary_pct': 0.25, 'tie_word_embeddings': bool(tie_word_embeddings), 'torch_dtype': torch_dtype,
            'transformers_version': '4.24.0' if legacy else TRANSFORMERS_VERSION, 'use_cache': True,
            'use_parallel_residual': True, 'vocab_size': vocab_size,
        }
        if not legacy:
            c.update({'attention_bias': True, 'attention_dropout': 0.0, 'hidden_dropout': 0.0,
                      'rope_scaling': None})
        c.update(extra)
        if not legacy:  # v4.45+: rope_theta = rotary_emb_base, partial_rotary_factor = rotary_pct
            c['rope_theta'] = c['rotary_emb_base']
            c['partial_rotary_factor'] = c['rotary_pct']
        return c
    kv = num_key_value_heads or H
    common = {
        'attention_dropout': 0.0, 'hidden_act': 'silu', 'hidden_size': D, 'initializer_range': 0.02,
        'intermediate_size': intermediate_size or 3 * D, 'max_position_embeddings': max_position_embeddings,
        'num_attention_heads': H, 'num_hidden_layers': num_hidden_layers, 'num_key_value_heads': kv,
        'torch_dtype': torch_dtype, 'transformers_version': TRANSFORMERS_VERSION, 'use_cache': True,
        'vocab_size': vocab_size,
    }
    if family == 'llama':
        c = dict(common, architectures=['LlamaForCausalLM'], model_type='llama', attention_bias=False,
                 bos_token_id=1, eos_token_id=2, head_dim=head_dim or D // H, mlp_bias=False,
                 pretraining_tp=1, rms_norm_eps=1e-06, rope_scaling=None, rope_theta=10000.0,
                 tie_word_embeddings=bool(tie_word_embeddings))
    elif family == 'mistral':
        c = dict(common, architectures=['MistralForCausalLM'], model_type='mistral', bos_token_id=1,
                 eos_token_id=2, head_dim=head_dim or D // H, rms_norm_eps=1e-05, rope_theta=1000000.0,
                 sliding_window=None, tie_word_embeddings=bool(tie_word_embeddings))
    elif family == 'qwen2':
        c = dict(common, architectures=['Qwen2ForCausalLM'], model_type='qwen2', bos_token_id=151643,
                 eos_token_id=151643, max_window_layers=num_hidden_layers, rms_norm_eps=1e-06,
                 rope_scaling=None, rope_theta=1000000.0, sliding_window=max_position_embeddings,
                 tie_word_embeddings=True if tie_word_embeddings is None else tie_word_embeddings,
                 use_sliding_window=False)
        if head_dim is not None:
            c['head_dim'] = head_dim
    else:  # qwen3
        c = dict(common, architectures=['Qwen3ForCausalLM'], model_type='qwen3', attention_bias=False,
                 bos_token_id=151643, eos_token_id=151645, head_dim=head_dim or 128,
                 max_window_layers=num_hidden_layers, rms_norm_eps=1e-06, rope_scaling=None,
                 rope_theta=1000000.0, sliding_window=None,
                 tie_word_embeddings=True if tie_word_embeddings is None else tie_word_embeddings,
                 use_sliding_window=False)
    c.update(extra)
    return c


def llama3_scaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192):
    return {'factor': factor, 'high_freq_factor': high_freq_factor, 'low_freq_factor': low_freq_factor,
            'original_max_position_embeddings': original_max_position_embeddings, 'rope_type': 'llama3'}


def randomize_(model, seed, std=0.08, bias_std=0.25):
    """R.randomize_ (norm weights ~ 1 + N(0, 0.2), LayerNorm biases ~ N(0, 0.1), matrices width-aware,
    embeddings N(0, std)), then every non-norm bias re-drawn ~ N(0, bias_std) so that a converter
    that drops any bias (q/k/v/o, MLP, NeoX qkv/dense) moves the logits far past the tolerance.
    q_norm / k_norm weights match '*norm*' and get 1 + N(0, 0.2)."""
    R.randomize_(model, seed, std)
    g = torch.Generator().manual_seed(seed + 7919)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('.bias') and 'norm' not in name:
                p.copy_(bias_std * torch.randn(p.shape, generator=g))
    return model


# =============================================================================
# Writing and reading save_pretrained-style directories

_DTYPE_NAMES = {torch.float32: 'float32', torch.float16: 'float16', torch.bfloat16: 'bfloat16',
                torch.float64: 'float64'}


def _nbytes(t):
    return t.numel() * t.element_size()


def _storage_ptr(t):
    return t.untyped_storage().data_ptr() if hasattr(t, 'untyped_storage') else t.storage().data_ptr()


def _shard_groups(names, sd, shards):
    """Split names (state_dict order) into `shards` contiguous, non-empty, size-balanced groups; a
    tensor sharing storage with an earlier one goes where that one went (HF keeps shared tensors in
    one shard). Returns a list of lists."""
    uniq, owner, seen = [], {}, {}
    for n in names:
        key = _storage_ptr(sd[n])
        if key in seen:
            owner[n] = seen[key]
        else:
            seen[key] = n
            uniq.append(n)
    shards = max(1, min(shards, len(uniq)))
    sizes = [_nbytes(sd[n]) for n in uniq]
    total = sum(sizes)
    groups, cum, g = [[] for _ in range(shards)], 0, 0
    for i, n in enumerate(uniq):
        left = len(uniq) - i
        # advance when this shard has reached its share, or when the rest are needed one per shard
        if groups[g] and g < shards - 1 and (cum >= total * (g + 1) / shards or left <= shards - 1 - g):
            g += 1
        groups[g].append(n)
        cum += sizes[i]
    where = {n: gi for gi, grp in enumerate(groups) for n in grp}
    for n, o in owner.items():
        groups[where[o]].append(n)
    return [grp for grp in groups if grp]


def hf_modern_state_dict(model, dtype):
    """What save_pretrained hands to the serializer: the state_dict (legacy buffers included if the
    module has them) cast to dtype, tied tensors still sharing one storage."""
    return R.cast_state_dict(model.state_dict(), dtype)


def write_hf_modern_dir(model, outdir, fmt='safetensors', dtype=torch.float32, shards=1,
                        drop_tied_in_bin=False, generation_config=True):
    """A save_pretrained-style directory: config.json (+ generation_config.json) and the weights.
    fmt 'safetensors': model.safetensors, or model-0000i-of-0000N.safetensors +
        model.safetensors.index.json; the tied output matrix (lm_head.weight / embed_out.weight) is
        left out, as HF does for safetensors (no aliasing allowed).
    fmt 'bin' / 'bin_legacy' (pre-1.6 torch pickle): pytorch_model.bin, or
        pytorch_model-0000i-of-0000N.bin + pytorch_model.bin.index.json; HF's torch.save path keeps
        the tied key, sharing the embedding's storage (drop_tied_in_bin=True leaves it out).
    Index files: {"metadata": {"total_size": bytes}, "weight_map": {name: file}}, json indent 2,
    sorted keys, trailing newline. Returns the list of weight files written."""
    os.makedirs(outdir, exist_ok=True)
    cfg = dict(model.cfg)
    cfg['torch_dtype'] = _DTYPE_NAMES[dtype]
    with open(os.path.join(outdir, 'config.json'), 'w') as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + '\n')
    if generation_config:
        gc = {'_from_model_config': True, 'transformers_version': cfg.get('transformers_version', TRANSFORMERS_VERSION)}
        for k in ('bos_token_id', 'eos_token_id'):
            if cfg.get(k) is not None:
                gc[k] = cfg[k]
        with open(os.path.join(outdir, 'generation_config.json'), 'w') as f:
            f.write(json.dumps(gc, indent=2, sort_keys=True) + '\n')
    sd = hf_modern_state_dict(model, dtype)
    st = fmt == 'safetensors'
    if fmt not in ('safetensors', 'bin', 'bin_legacy'):
        raise ValueError(f"fmt must be safetensors, bin or bin_legacy, not {fmt!r}")
    if model.tied and (st or drop_tied_in_bin):
        sd.pop(model.tied_key)
    names = list(sd)
    groups = _shard_groups(names, sd, shards)
    n = len(groups)
    if st:
        files = ['model.safetensors'] if n == 1 else [f'model-{i + 1:05d}-of-{n:05d}.safetensors' for i in range(n)]
    else:
        files = ['pytorch_model.bin'] if n == 1 else [f'pytorch_model-{i + 1:05d}-of-{n:05d}.bin' for i in range(n)]
    weight_map, total, counted = {}, 0, set()
    for fname, grp in zip(files, groups):
        part = {k: sd[k] for k in names if k in set(grp)}  # keep state_dict order inside a shard
        for k, v in part.items():
            weight_map[k] = fname
            ptr = _storage_ptr(v)
            if ptr not in counted:
                counted.add(ptr)
                total += _nbytes(v)
        path = os.path.join(outdir, fname)
        if st:
            R.write_safetensors(part, path, {'format': 'pt'})
        else:
            R.torch_save(part, path, legacy=(fmt == 'bin_legacy'))
    if n > 1:
        index = {'metadata': {'total_size': total}, 'weight_map': weight_map}
        iname = 'model.safetensors.index.json' if st else 'pytorch_model.bin.index.json'
        with open(os.path.join(outdir, iname), 'w') as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + '\n')
    return files


def read_hf_modern_dir(outdir):
    """(config dict, {name: tensor}) of a directory written above (or by HF): follows the index when
    there is one."""
    with open(os.path.join(outdir, 'config.json')) as f:
        cfg = json.load(f)
    sd = {}
    for base, reader in (('model.safetensors', R.read_safetensors),
                         ('pytorch_model.bin', lambda p: torch.load(p, map_location='cpu'))):
        idx = os.path.join(outdir, base + '.index.json')
        if os.path.isfile(idx):
            with open(idx) as f:
                index = json.load(f)
            for fname in sorted(set(index['weight_map'].values())):
                part = reader(os.path.join(outdir, fname))
                assert set(part) == {k for k, v in index['weight_map'].items() if v == fname}, \
                    f"{fname}: tensors differ from the index's weight_map"
                sd.update(part)
            return cfg, sd
        if os.path.isfile(os.path.join(outdir, base)):
            return cfg, reader(os.path.join(outdir, base))
    raise FileNotFoundError(f"no weights in {outdir}")


def load_hf_modern_dir(outdir, **kw):
    """A fresh module built from outdir/config.json with the stored weights, load_state_dict
    strict=True (the tied key is re-filled from the embedding when the file leaves it out, as HF's
    tie_weights does). kw: legacy_buffers / rope_fp32 for the module."""
    cfg, sd = read_hf_modern_dir(outdir)
    model = build(cfg, **kw)
    if model.tied and model.tied_key not in sd:
        sd[model.tied_key] = sd[model.tied_to]
    model.load_state_dict(sd, strict=True)
    return model


def expected_layer_keys(model, i=0):
    """The state_dict keys of layer i (parameters and, if present, legacy buffers)."""
    if isinstance(model, HFGPTNeoXForCausalLM):
        p = f'gpt_neox.layers.{i}.'
    else:
        p = f'model.layers.{i}.'
    return sorted(k for k in model.state_dict() if k.startswith(p))


# =============================================================================
# Self-check

def _self_check():
    torch.set_num_threads(1)
    t0 = time.time()
    V, T = 97, 13
    g = torch.Generator().manual_seed(1234)
    idx = torch.randint(V, (2, T), generator=g)
    cases = [
        # name, config, module kwargs
        ('llama-mha-tied', config_json('llama', V, 32, 2, 4, 48, tie_word_embeddings=True), {}),
        ('llama-gqa-bias-llama3',
         config_json('llama', V, 32, 2, 4, 48, num_key_value_heads=2, head_dim=16, attention_bias=True,
                     mlp_bias=True, rms_norm_eps=1e-5, rope_theta=10000.0,
                     rope_scaling=llama3_scaling(8.0, 1.0, 4.0, 512)), {}),
        ('llama-mqa-headdim12-legacy', config_json('llama', V, 32, 2, 4, 40, num_key_value_heads=1, head_dim=12),
         {'legacy_buffers': True}),
        ('mistral-gqa', config_json('mistral', V, 32, 2, 4, 48, num_key_value_heads=2), {}),
        ('mistral-sliding5', config_json('mistral', V, 32, 2, 4, 48, num_key_value_heads=2, sliding_window=5), {}),
        ('qwen2-gqa-tied', config_json('qwen2', V, 32, 2, 4, 48, num_key_value_heads=2), {}),
        ('qwen3-gqa-hd16-tied', config_json('qwen3', V, 32, 2, 4, 48, num_key_value_heads=2, head_dim=16), {}),
        ('qwen3-bias-untied', config_json('qwen3', V, 32, 2, 4, 48, num_key_value_heads=1, head_dim=8,
                                          attention_bias=True, tie_word_embeddings=False), {}),
        ('neox-parallel-pct0.25', config_json('gpt_neox', V, 64, 2, 4, 96), {}),
        ('neox-seq-pct0.5-legacy', config_json('gpt_neox', V, 64, 2, 4, 96, legacy=True, rotary_pct=0.5,
                                               use_parallel_residual=False, hidden_act='gelu_new'),
         {'legacy_buffers': 'uint8'}),
        ('neox-full-rotary-tied', config_json('gpt_neox', V, 48, 2, 3, 96, rotary_pct=1.0,
                                              hidden_act='gelu_pytorch_tanh', tie_word_embeddings=True,
                                              layer_norm_eps=1e-6, rotary_emb_base=500), {}),
    ]
    fmts = [('safetensors', 1, torch.float32), ('safetensors', 3, torch.bfloat16),
            ('bin', 1, torch.float16), ('bin', 3, torch.float32), ('bin_legacy', 1, torch.bfloat16)]
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for ci, (name, cfg, kw) in enumerate(cases):
            base = randomize_(build(cfg, **kw), 100 + ci)
            full = base.double()(idx)
            mx = float(full.abs().max())
            assert 0.3 < mx < 30, f"{name}: max|logit| {mx:.3g} outside O(1..10)"
            # causal invariance: a prefix gives the first rows of the full sequence
            for k in (1, 5, T - 1):
                d = float((base(idx[:, :k]) - full[:, :k]).abs().max())
                assert d < 1e-12, f"{name}: prefix {k} differs by {d:.3g}"
            # changing a later token leaves earlier rows bit-identical
            idx2 = idx.clone()
            idx2[:, 7] = (idx2[:, 7] + 1) % V
            other = base(idx2)
            assert torch.equal(other[:, :7], full[:, :7]) and float((other[:, 7] - full[:, 7]).abs().max()) > 0
            # rope in float32 (HF's way) is a small perturbation only
            rf = build(cfg, rope_fp32=True, **kw).double()
            rf.load_state_dict(base.state_dict())
            drf = float((rf(idx) - full).abs().max())
            assert drf < 1e-4 * max(1.0, mx), f"{name}: float32 rope moves logits by {drf:.3g}"
            # every state_dict key is an HF name, and every bias / norm matters
            keys = expected_layer_keys(base)
            for k, v in base.named_parameters():
                if k.endswith('.bias') or 'norm' in k:
                    m2 = copy.deepcopy(base)
                    with torch.no_grad():
                        dict(m2.named_parameters())[k].copy_(torch.zeros_like(v) if k.endswith('.bias')
                                                             else torch.ones_like(v))
                    moved = float((m2(idx) - full).abs().max())
                    assert moved > 1e-3, f"{name}: resetting {k} moves logits only {moved:.3g}"
            for fmt, shards, dtype in fmts:
                m = copy.deepcopy(base)
                R.stored_roundtrip_(m, dtype)
                want = m(idx)
                d = os.path.join(tmp, f'{name}-{fmt}-{shards}-{_DTYPE_NAMES[dtype]}')
                files = write_hf_modern_dir(m, d, fmt, dtype, shards)
                assert len(files) == shards, f"{name}: {len(files)} files for {shards} shards"
                _, stored = read_hf_modern_dir(d)
                if m.tied:
                    if fmt == 'safetensors':
                        assert m.tied_key not in stored, f"{name}: tied {m.tied_key} written to safetensors"
                    else:
                        assert stored[m.tied_key].data_ptr() == stored[m.tied_to].data_ptr(), \
                            f"{name}: tied tensors do not share storage in {fmt}"
                assert all(v.dtype == dtype for v in stored.values() if torch.is_floating_point(v))
                if shards > 1:
                    iname = 'model.safetensors.index.json' if fmt == 'safetensors' else 'pytorch_model.bin.index.json'
                    with open(os.path.join(d, iname)) as f:
                        index = json.load(f)
                    assert set(index) == {'metadata', 'weight_map'} and set(index['weight_map']) == set(stored)
                    uniq = {v.data_ptr(): _nbytes(v) for v in stored.values()}
                    assert index['metadata']['total_size'] == sum(uniq.values())
                got = load_hf_modern_dir(d, **kw).double()
                assert expected_layer_keys(got) == keys
                assert torch.equal(got(idx), want), f"{name} {fmt}x{shards} {dtype}: logits differ after reload"
            if name.startswith('mistral-sliding'):
                nosw = build(dict(cfg, sliding_window=None)).double()
                nosw.load_state_dict(base.state_dict())
                o = nosw(idx)
                assert torch.allclose(o[:, :5], full[:, :5], rtol=0, atol=1e-12) and \
                    float((o[:, 5:] - full[:, 5:]).abs().min(-1).values.max()) > 0, \
                    f"{name}: the sliding window has no effect past it / an effect within it"
            lines.append(f"{name}: max|logit| {mx:.2f}, f32-rope delta {drf:.1e}, layer keys {len(keys)}")
    # NeoX fused QKV layout, checked against an independent per-head slicing
    cfg = config_json('gpt_neox', V, 64, 1, 4, 96)
    m = randomize_(build(cfg), 3).double()
    att = m.gpt_neox.layers[0].attention
    x = torch.randn(1, 5, 64, dtype=torch.float64, generator=g)
    Wq, Wk, Wv = neox_split_qkv(att.query_key_value.weight, 4)
    bq, bk, bv = neox_split_qkv(att.query_key_value.bias, 4)
    qkv = att.query_key_value(x).view(1, 5, -1, 48).transpose(1, 2)
    q, k, v = qkv.chunk(3, dim=-1)
    for got, W, b in ((q, Wq, bq), (k, Wk, bk), (v, Wv, bv)):
        ref = (x @ W.t() + b).view(1, 5, 4, 16).transpose(1, 2)
        assert torch.allclose(got, ref, atol=1e-12, rtol=0)
    # llama3 scaling: the three regimes all occur for the test config (head_dim 16, theta 1e4, 512)
    base_f = rope_inv_freq(16, 10000.0, None)
    l3 = rope_inv_freq(16, 10000.0, llama3_scaling(8.0, 1.0, 4.0, 512))
    wl = 2 * math.pi / base_f
    assert torch.equal(l3[wl < 128], base_f[wl < 128]) and torch.allclose(l3[wl > 512], base_f[wl > 512] / 8)
    med = (wl >= 128) & (wl <= 512)
    sm = (512 / wl[med] - 1.0) / 3.0
    assert med.any() and torch.allclose(l3[med], (1 - sm) * base_f[med] / 8 + sm * base_f[med], rtol=1e-15)
    # unsupported rope scaling types are refused
    for bad in ({'type': 'linear', 'factor': 2.0}, {'rope_type': 'dynamic', 'factor': 2.0},
                {'rope_type': 'yarn', 'factor': 4.0}):
        try:
            build(config_json('llama', rope_scaling=bad))
        except ValueError:
            pass
        else:
            raise AssertionError(f"rope_scaling {bad} accepted")
    # v5-style rope_parameters give the same model as rope_theta
    c4 = config_json('qwen3', V, 32, 1, 4, 48, num_key_value_heads=2, head_dim=8, rope_theta=5000.0)
    c5 = {k: v for k, v in c4.items() if k not in ('rope_theta', 'rope_scaling')}
    c5['rope_parameters'] = {'rope_theta': 5000.0, 'rope_type': 'default'}
    a = randomize_(build(c4), 9).double()
    b5 = build(c5).double()
    b5.load_state_dict(a.state_dict())
    assert torch.equal(a(idx), b5(idx))
    for ln in lines:
        print(ln)
    print(f"ref_hf_modern self-check: {len(cases)} models x {len(fmts)} formats OK ({time.time() - t0:.1f}s)")


if __name__ == '__main__':
    _self_check()
