#!/usr/bin/python3
"""Train a small modern-block character model on tinyshakespeare, in a family's own files.

The demo model (tools/train_demo.py) is a GPT-2 block. The models here are the
modern block, trained so that the weight types' accuracy budgets are measured
on trained weights, as they are on the demo (random weights have no outliers
and no structure for quantization to lose):

  --family qwen3     a Hugging Face Qwen3ForCausalLM directory: RMSNorm, rotary
                     positions, grouped-query attention with per-head QK-norm,
                     SwiGLU, tied head. config.json, generation_config.json,
                     model.safetensors (f32).
  --family pythia    a Hugging Face GPTNeoXForCausalLM directory (Pythia's
                     block): LayerNorm, parallel residual, rotary positions
                     on a quarter of each head, exact GELU, untied head.
  --family nanochat  a nanochat checkpoint directory (model_<step>.pt and
                     meta_<step>.json): ReLU^2, QK-norm, norm after the
                     embedding, smear, value embeddings with their gate,
                     residual mixing with x0, backout, sliding windows (SSSL),
                     softcap, an untied head over a padded vocabulary.

The modules are the PyTorch references the parity tests use
(tests/reference/ref_hf_modern.py, ref_nanochat.py), so the files are exactly
what transformers' save_pretrained and nanochat's checkpoint manager write.
The recipe (data, split, AdamW, schedule, clip) is train_demo.py's; meta.pkl
holds the character vocabulary (mmgpt convert finds it beside the weights).

Usage (from the repository root):
    bash scripts/setup.sh --train        # torch, numpy and OpenBLAS, as root
    /usr/bin/python3 tools/train_modern_demo.py --family qwen3|nanochat [--out DIR] [--max-iters N]
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_demo as T  # noqa: E402  (sets OPENBLAS_CORETYPE before torch loads)

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

sys.path.insert(0, os.path.join(T.REPO, 'tests', 'reference'))
import ref_hf_modern as HF  # noqa: E402
import ref_nanochat as NC  # noqa: E402


def hf_model(family, vocab_size, args, **cfg_keys):
    """A Hugging Face family's reference module, initialised as transformers'
    _init_weights does: normal(0, initializer_range) for linear and embedding
    weights, zero biases, norm weights 1 (and LayerNorm biases 0)."""
    cfg = HF.config_json(family, vocab_size=vocab_size, hidden_size=args.n_embd, num_hidden_layers=args.n_layer,
                         num_attention_heads=args.n_head, max_position_embeddings=args.block_size,
                         bos_token_id=None, eos_token_id=None, **cfg_keys)
    model = HF.build(cfg)
    for name, p in model.named_parameters():
        if 'norm' in name.split('.')[-2]:
            (torch.nn.init.ones_ if name.endswith('weight') else torch.nn.init.zeros_)(p)
        elif name.endswith('bias'):
            torch.nn.init.zeros_(p)
        else:
            torch.nn.init.normal_(p, mean=0.0, std=cfg['initializer_range'])
    return model


def qwen3_model(args, vocab_size):
    return hf_model('qwen3', vocab_size, args, num_key_value_heads=args.n_kv_head, head_dim=args.n_embd // args.n_head,
                    intermediate_size=args.n_ff, tie_word_embeddings=True)


def pythia_model(args, vocab_size):
    return hf_model('gpt_neox', vocab_size, args, intermediate_size=4 * args.n_embd, tie_word_embeddings=False)


def nanochat_model(args, vocab_size):
    cfg = NC.nanochat_config(sequence_len=args.block_size, vocab_size=vocab_size, n_layer=args.n_layer,
                             n_head=args.n_head, n_kv_head=args.n_kv_head, n_embd=args.n_embd,
                             window_pattern='SSSL')
    model = NC.NanochatGPT(cfg)
    # nanochat's GPT.init_weights.
    s = 3 ** 0.5 * cfg['n_embd'] ** -0.5
    with torch.no_grad():
        torch.nn.init.normal_(model.transformer.wte.weight, mean=0.0, std=1.0)
        torch.nn.init.normal_(model.lm_head.weight, mean=0.0, std=0.001)
        for block in model.transformer.h:
            for lin in (block.attn.c_q, block.attn.c_k, block.attn.c_v, block.mlp.c_fc):
                torch.nn.init.uniform_(lin.weight, -s, s)
            torch.nn.init.zeros_(block.attn.c_proj.weight)
            torch.nn.init.zeros_(block.mlp.c_proj.weight)
            if block.attn.ve_gate is not None:
                torch.nn.init.zeros_(block.attn.ve_gate.weight)
        for ve in model.value_embeds.values():
            torch.nn.init.uniform_(ve.weight, -s, s)
        model.resid_lambdas.fill_(1.0)
        model.x0_lambdas.fill_(0.1)
        torch.nn.init.zeros_(model.smear_gate.weight)
    return model


def write_nanochat_meta(path, model, args, val_loss):
    """meta_<step>.json with this run's figures: the step, the validation loss
    as bits per byte (the text is ASCII: one byte a character), the model_config
    nanochat's loader reads, and this script's arguments as the user_config."""
    meta = {'step': args.max_iters, 'val_bpb': val_loss / math.log(2),
            'model_config': {k: model.cfg[k] for k in NC.GPTCONFIG_DEFAULTS},
            'user_config': {k: v for k, v in vars(args).items() if k not in ('data', 'out')}}
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(meta, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    ap.add_argument('--family', choices=('qwen3', 'pythia', 'nanochat'), required=True)
    ap.add_argument('--out', default=None, help='default: models/demo-<family>')
    ap.add_argument('--n-layer', type=int, default=4)
    ap.add_argument('--n-head', type=int, default=4)
    ap.add_argument('--n-kv-head', type=int, default=2)
    ap.add_argument('--n-embd', type=int, default=128)
    ap.add_argument('--n-ff', type=int, default=384, help='qwen3 intermediate_size (nanochat: 4 x n_embd)')
    T.add_recipe_args(ap, max_iters=1000, block_size=256, batch_size=16, lr=2e-3, min_lr=2e-4)
    args = ap.parse_args()
    args.out = args.out or os.path.join(T.REPO, 'models', f'demo-{args.family}')

    T.openblas_note(args)
    t_start = time.time()
    stoi, itos, train_ids, val_ids = T.char_dataset(args.data, args.out)
    model = {'qwen3': qwen3_model, 'pythia': pythia_model, 'nanochat': nanochat_model}[args.family](args, len(stoi))
    print(f"{args.family}: {sum(p.numel() for p in model.parameters())} parameters", flush=True)

    def loss_of(x, y):
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))

    losses = T.train(model, loss_of, args, train_ids, val_ids, t_start)
    train_seconds = time.time() - t_start
    val_full, val_count = T.whole_split_loss(model, model, val_ids, args.block_size)
    print(f"whole validation split: loss {val_full:.4f} over {val_count} predicted characters", flush=True)

    model.eval()
    if args.family in ('qwen3', 'pythia'):
        HF.write_hf_modern_dir(model, args.out)
        saved = os.path.join(args.out, 'model.safetensors')
    else:
        for f in os.listdir(args.out):  # only the last step's files, as one run leaves them
            if f.startswith(('model_', 'meta_')):
                os.remove(os.path.join(args.out, f))
        saved, meta_path = NC.write_nanochat_checkpoint(model, args.out, args.max_iters)
        write_nanochat_meta(meta_path, model, args, val_full)
    print(f"saved {saved}: final train loss {losses['train']:.4f}, val loss {losses['val']:.4f} "
          f"({args.eval_iters}-batch estimates), whole validation split {val_full:.4f}; "
          f"training {train_seconds:.1f}s, total time {time.time() - t_start:.1f}s")
    print('--- sample ---')
    print(T.sample(model, stoi, itos, args.seed, args.block_size))


if __name__ == '__main__':
    main()
