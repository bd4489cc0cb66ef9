"""A zero-weight model to carry a real tokenizer through `mmgpt convert`
(tests/tokenizer/test_hf_conformance.py, bench/tokenizer_vs_hf.py)."""
import json
import os
import struct


def write_safetensors(tensors, path):
    """tensors: {name: (shape, f32 zeros)}: a safetensors file of zero-filled f32 tensors."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        n = 4
        for d in shape:
            n *= d
        header[name] = {'dtype': 'F32', 'shape': list(shape), 'data_offsets': [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b' ' * (-len(blob) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(blob)))
        f.write(blob)
        f.truncate(8 + len(blob) + offset)


def tiny_llama_dir(outdir, vocab):
    """A one-layer Llama with a zero embedding of `vocab` rows, only there to carry a tokenizer."""
    os.makedirs(outdir, exist_ok=True)
    d, ff, layer = 8, 16, 'model.layers.0.'
    config = {'architectures': ['LlamaForCausalLM'], 'model_type': 'llama', 'hidden_size': d,
              'intermediate_size': ff, 'num_hidden_layers': 1, 'num_attention_heads': 2, 'num_key_value_heads': 2,
              'max_position_embeddings': 64, 'rms_norm_eps': 1e-5, 'vocab_size': vocab, 'rope_theta': 10000.0,
              'tie_word_embeddings': True, 'hidden_act': 'silu'}
    with open(os.path.join(outdir, 'config.json'), 'w') as f:
        json.dump(config, f)
    tensors = {'model.embed_tokens.weight': (vocab, d), 'model.norm.weight': (d,),
               layer + 'input_layernorm.weight': (d,), layer + 'post_attention_layernorm.weight': (d,),
               layer + 'self_attn.q_proj.weight': (d, d), layer + 'self_attn.k_proj.weight': (d, d),
               layer + 'self_attn.v_proj.weight': (d, d), layer + 'self_attn.o_proj.weight': (d, d),
               layer + 'mlp.gate_proj.weight': (ff, d), layer + 'mlp.up_proj.weight': (ff, d),
               layer + 'mlp.down_proj.weight': (d, ff)}
    write_safetensors(tensors, os.path.join(outdir, 'model.safetensors'))


def tokenizer_model_dir(src, model_dir, extra_rows=0):
    """A zero-weight model directory carrying the tokenizer.json and tokenizer_config.json
    of `src`, with an embedding of the tokenizer's size plus extra_rows (a padded
    vocabulary). Returns the tokenizer's size and its tokenizer.json."""
    import shutil
    with open(os.path.join(src, 'tokenizer.json'), encoding='utf-8') as f:
        tj = json.load(f)
    n_tokens = max([max(tj['model']['vocab'].values())] + [a['id'] for a in tj['added_tokens']]) + 1
    tiny_llama_dir(model_dir, n_tokens + extra_rows)
    for name in ('tokenizer.json', 'tokenizer_config.json'):
        shutil.copy(os.path.join(src, name), model_dir)
    return n_tokens, tj

