#!/usr/bin/env python3
"""Writes the GGUF twin of a Hugging Face Llama directory, for llama.cpp side-by-side runs.

    python3 bench/gguf_twin.py HF_DIR OUT.gguf --llama-cpp LLAMA_CPP_DIR            # F32
    python3 bench/gguf_twin.py HF_DIR OUT.gguf --llama-cpp LLAMA_CPP_DIR --outtype f16   # or bf16
    llama-quantize --pure OUT.gguf OUT-Q8_0.gguf Q8_0      # every matrix Q8_0, as `mmgpt convert --dtype q8_0`

HF_DIR is a LlamaForCausalLM directory as bench/llama_shaped.py (or
save_pretrained) writes it: config.json and one model.safetensors, f32, f16
or bf16. Why this script: llama.cpp's own converter (convert_hf_to_gguf.py)
needs torch and transformers' tokenizer files, and Debian has no
transformers; the shaped directories have no tokenizer either. This script
needs only numpy and llama.cpp's gguf-py (DIR/gguf-py, put on sys.path).

It writes what convert_hf_to_gguf.py's LlamaModel writes for such a
directory: the `llama` architecture's keys (context, width, blocks, MLP
width, heads, key/value heads, rope dimensions and theta, RMS epsilon,
vocabulary size, key/value lengths when config.json has head_dim), the
rope_freqs tensor for rope scaling of type llama3, the tensor names
token_embd / blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,
ffn_gate,ffn_up,ffn_down} / output_norm / output (only when untied), and Q
and K rows permuted from Hugging Face's split-half rotary layout into GGUF's
interleaved one. Norms and rope_freqs stay F32 whatever --outtype says.

llama.cpp needs a vocabulary to load a model, so the twin gets a synthetic
byte-level BPE one ("gpt2" model, "default" pre-tokenizer) of exactly
vocab_size tokens: the 256 byte symbols, then two- and three-symbol tokens,
each with the merge that makes it. It tokenizes any text, but not as the
real model's tokenizer would: the twin is for speed runs (llama-bench feeds
random ids) and for comparing logits on token ids.

Tensors are written one at a time (a bf16 Llama-3.2-1B needs about one
matrix of memory beyond the mapped input).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

ST_DTYPES = {'F32': np.float32, 'F16': np.float16, 'BF16': np.uint16}


def read_safetensors(path):
    """{name: (dtype string, shape, offset, nbytes)} and the mapped data section."""
    with open(path, 'rb') as f:
        (n,) = struct.unpack('<Q', f.read(8))
        header = json.loads(f.read(n))
    header.pop('__metadata__', None)
    data = np.memmap(path, dtype=np.uint8, mode='r', offset=8 + n)
    out = {}
    for name, info in header.items():
        if info['dtype'] not in ST_DTYPES:
            sys.exit('gguf_twin.py: %s: dtype %s not supported (F32, F16, BF16)' % (name, info['dtype']))
        b, e = info['data_offsets']
        out[name] = (info['dtype'], info['shape'], b, e - b)
    return out, data


def load_f32(entry, data):
    """The tensor as float32 (bf16 widened by shifting into the high 16 bits)."""
    dt, shape, off, nbytes = entry
    raw = data[off:off + nbytes]
    if dt == 'F32':
        a = raw.view(np.float32)
    elif dt == 'F16':
        a = raw.view(np.float16).astype(np.float32)
    else:
        a = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return a.reshape(shape)


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute: split-half rotary rows -> interleaved pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(rope, base, dim):
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors, in float32 as there (torch)."""
    f32 = np.float32
    freqs = (f32(1.0) / (f32(base) ** (np.arange(0, dim, 2, dtype=f32) / f32(dim)))).astype(f32)
    factor = rope.get('factor', 8.0)
    low = rope.get('low_freq_factor', 1.0)
    high = rope.get('high_freq_factor', 4.0)
    old_ctx = rope.get('original_max_position_embeddings', 8192)
    low_wavelen = old_ctx / low
    high_wavelen = old_ctx / high
    out = []
    for freq in freqs:
        wavelen = f32(2 * math.pi) / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (f32(old_ctx) / wavelen - f32(low)) / f32(high - low)
            out.append(f32(1) / ((f32(1) - smooth) / f32(factor) + smooth))
    return np.array(out, dtype=np.float32)


def bytes_to_unicode():
    """GPT-2's byte -> printable character table."""
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(ord('\xa1'), ord('\xac') + 1)) \
        + list(range(ord('\xae'), ord('\xff') + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def synthetic_vocab(n):
    """n byte-level BPE tokens and the n - 256 merges that build the longer ones."""
    if n < 256:
        sys.exit('gguf_twin.py: vocab_size %d: the synthetic vocabulary needs at least 256 tokens' % n)
    sym = [bytes_to_unicode()[b] for b in range(256)]

    def merge_rules():  # two symbols, then a pair and a third symbol
        for a in sym:
            for b in sym:
                yield a, b
        for a in sym:
            for b in sym:
                for c in sym:
                    yield a + b, c
    tokens, merges = list(sym), []
    for left, right in merge_rules():
        if len(tokens) == n:
            return tokens, merges
        tokens.append(left + right)
        merges.append(left + ' ' + right)
    sys.exit('gguf_twin.py: vocab_size %d: more than the synthetic vocabulary holds' % n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('hf_dir', help='LlamaForCausalLM directory: config.json + model.safetensors')
    ap.add_argument('out', help='GGUF file to write')
    ap.add_argument('--llama-cpp', required=True, metavar='DIR', help='llama.cpp checkout (DIR/gguf-py is used)')
    ap.add_argument('--outtype', choices=('f32', 'f16', 'bf16'), default='f32',
                    help='type of the weight matrices (default f32); norms and rope_freqs stay F32')
    a = ap.parse_args()

    sys.path.insert(0, os.path.join(a.llama_cpp, 'gguf-py'))
    import gguf  # noqa: E402

    with open(os.path.join(a.hf_dir, 'config.json')) as f:
        cfg = json.load(f)
    if cfg.get('architectures', ['LlamaForCausalLM'])[0] != 'LlamaForCausalLM':
        sys.exit('gguf_twin.py: %s: not a LlamaForCausalLM' % a.hf_dir)
    st_path = os.path.join(a.hf_dir, 'model.safetensors')
    entries, data = read_safetensors(st_path)

    n_layer = cfg['num_hidden_layers']
    n_head = cfg['num_attention_heads']
    n_kv = cfg.get('num_key_value_heads', n_head)
    width = cfg['hidden_size']
    head_dim = cfg.get('head_dim') or width // n_head
    vocab = cfg['vocab_size']
    tied = cfg.get('tie_word_embeddings', False) and 'lm_head.weight' not in entries

    qtype, ftype = {
        'f32': (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
        'f16': (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
        'bf16': (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    }[a.outtype]

    w = gguf.GGUFWriter(a.out, 'llama')
    # Metadata, in the order convert_hf_to_gguf.py adds it.
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(os.path.basename(os.path.normpath(a.hf_dir)))
    w.add_block_count(n_layer)
    w.add_context_length(cfg['max_position_embeddings'])
    w.add_embedding_length(width)
    w.add_feed_forward_length(cfg['intermediate_size'])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    rope = cfg.get('rope_scaling') or {}
    rope_type = rope.get('rope_type', rope.get('type'))
    if rope_type not in (None, 'default', 'llama3'):
        sys.exit('gguf_twin.py: rope scaling %r: only llama3 is handled' % rope_type)
    w.add_rope_freq_base(cfg.get('rope_theta', 10000.0))
    w.add_layer_norm_rms_eps(cfg['rms_norm_eps'])
    if cfg.get('head_dim') is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(ftype)
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(head_dim)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tokens, merges = synthetic_vocab(vocab)
    w.add_tokenizer_model('gpt2')
    w.add_tokenizer_pre('default')
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * vocab)
    w.add_token_merges(merges)
    for key, add in (('bos_token_id', w.add_bos_token_id), ('eos_token_id', w.add_eos_token_id)):
        if isinstance(cfg.get(key), int) and 0 <= cfg[key] < vocab:
            add(cfg[key])
    w.add_add_bos_token(False)

    # Tensors: rope_freqs first (generate_extra_tensors), then the checkpoint's order.
    plan = []  # (gguf name, producer of the f32 array, keep F32, shape)
    if rope_type == 'llama3':
        factors = llama3_rope_factors(rope, cfg.get('rope_theta', 10000.0), head_dim)
        plan.append(('rope_freqs.weight', lambda: factors, True, [head_dim // 2]))
    block_map = {
        'input_layernorm.weight': 'attn_norm', 'post_attention_layernorm.weight': 'ffn_norm',
        'self_attn.q_proj.weight': 'attn_q', 'self_attn.k_proj.weight': 'attn_k',
        'self_attn.v_proj.weight': 'attn_v', 'self_attn.o_proj.weight': 'attn_output',
        'mlp.gate_proj.weight': 'ffn_gate', 'mlp.up_proj.weight': 'ffn_up', 'mlp.down_proj.weight': 'ffn_down',
    }
    top_map = {'model.embed_tokens.weight': 'token_embd', 'model.norm.weight': 'output_norm',
               'lm_head.weight': 'output'}
    for name in sorted(entries, key=lambda k: entries[k][2]):
        if name.endswith('.rotary_emb.inv_freq'):
            continue
        if name == 'lm_head.weight' and tied:
            continue
        if name in top_map:
            new = top_map[name]
        else:
            parts = name.split('.')
            if parts[:2] != ['model', 'layers'] or '.'.join(parts[3:]) not in block_map:
                sys.exit('gguf_twin.py: %s: tensor not handled' % name)
            new = 'blk.%s.%s' % (parts[2], block_map['.'.join(parts[3:])])
        e = entries[name]

        def load(e=e, new=new):
            t = load_f32(e, data)
            if new.endswith('attn_q'):
                t = permute(t, n_head, n_head)
            elif new.endswith('attn_k'):
                t = permute(t, n_head, n_kv)
            return t
        keep = len(e[1]) <= 1 or new.endswith('_norm')
        plan.append((new + '.weight', load, keep, list(e[1])))

    def encode(arr, keep):
        if keep or qtype == gguf.GGMLQuantizationType.F32:
            return np.ascontiguousarray(arr, dtype=np.float32), gguf.GGMLQuantizationType.F32
        if qtype == gguf.GGMLQuantizationType.F16:
            return np.ascontiguousarray(arr, dtype=np.float16), qtype
        return gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), qtype), qtype

    elt = {gguf.GGMLQuantizationType.F32: 4, gguf.GGMLQuantizationType.F16: 2, gguf.GGMLQuantizationType.BF16: 2}
    for new, _, keep, shape in plan:
        t = gguf.GGMLQuantizationType.F32 if (keep or qtype == gguf.GGMLQuantizationType.F32) else qtype
        nbytes = int(np.prod(shape)) * elt[t]
        if t == gguf.GGMLQuantizationType.BF16:
            # quantize() hands back the bytes (uint8); the info takes the byte shape, as add_tensor records it
            w.add_tensor_info(new, shape[:-1] + [shape[-1] * 2], np.dtype(np.uint8), nbytes, raw_dtype=t)
        else:
            w.add_tensor_info(new, shape, np.dtype(np.float32 if t == gguf.GGMLQuantizationType.F32 else np.float16),
                              nbytes, raw_dtype=t)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for new, load, keep, _shape in plan:
        arr, _ = encode(load(), keep)
        w.write_tensor_data(arr)
    w.close()
    print('%s: llama, %d blocks, %d heads (%d key/value), width %d, vocabulary %d, %s%s, %d tensors'
          % (a.out, n_layer, n_head, n_kv, width, vocab, a.outtype.upper(),
             ', llama3 rope_freqs' if rope_type == 'llama3' else '', len(plan)))


if __name__ == '__main__':
    main()
