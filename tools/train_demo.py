#!/usr/bin/python3
"""Train the bundled demo model: a small character-level nanoGPT on tinyshakespeare.

The model definition mirrors nanoGPT's model.py (same module names, so the
state_dict keys are exactly nanoGPT's), and the outputs mirror nanoGPT's
shakespeare_char recipe: meta.pkl from data/shakespeare_char/prepare.py and
ckpt.pt from train.py -- except that the optimizer state is left out so the
committed checkpoint stays small.

Usage (from the repository root):
    bash scripts/setup.sh --train        # torch, numpy and OpenBLAS, as root
    /usr/bin/python3 tools/train_demo.py [--data PATH] [--out models/demo] [--max-iters N]
"""
import argparse
import math
import os
import pickle
import time


def _configure_openblas():
    """Debian's torch runs its matrix products through the system BLAS; with
    libopenblas0-pthread installed that is OpenBLAS. OpenBLAS 0.3.21 does not
    recognise newer CPUs and falls back to a slow generic kernel, so name a core
    type it knows when the CPU has AVX-512 and the user has not chosen one. It
    must be set before torch loads the library."""
    if 'OPENBLAS_CORETYPE' in os.environ:
        return
    try:
        with open('/proc/cpuinfo') as f:
            flags = next((line for line in f if line.startswith('flags')), '')
    except OSError:
        return
    if ' avx512f ' in flags + ' ' and ' avx512vl ' in flags + ' ':
        os.environ['OPENBLAS_CORETYPE'] = 'SkylakeX'
    elif ' avx2 ' in flags + ' ':
        os.environ['OPENBLAS_CORETYPE'] = 'Haswell'


_configure_openblas()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------
# A linear layer on [B, T, C] is a 1x1 conv1d, which Debian's torch runs with
# oneDNN: as fast as OpenBLAS on the large layers, faster on the small ones, and
# ~9x faster than the reference BLAS when OpenBLAS is not installed. It is still
# an nn.Linear (same parameters, same state_dict keys), so the saved checkpoint
# is a plain nanoGPT checkpoint.

class Linear(nn.Linear):
    def forward(self, x):
        if x.dim() != 3:
            return super().forward(x)
        y = F.conv1d(x.transpose(1, 2), self.weight.unsqueeze(-1), self.bias)
        return y.transpose(1, 2)


# ----------------------------------------------------------------------------
# nanoGPT model.py (dropout kept in the structure but set to 0 for the demo)

class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's has no bias=False before 2.1)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg['n_embd'] % cfg['n_head'] == 0
        self.c_attn = Linear(cfg['n_embd'], 3 * cfg['n_embd'], bias=cfg['bias'])
        self.c_proj = Linear(cfg['n_embd'], cfg['n_embd'], bias=cfg['bias'])
        self.attn_dropout = nn.Dropout(cfg['dropout'])
        self.resid_dropout = nn.Dropout(cfg['dropout'])
        self.n_head = cfg['n_head']
        self.n_embd = cfg['n_embd']
        # torch 1.13 has no scaled_dot_product_attention: nanoGPT's slow path,
        # whose mask is a buffer nanoGPT also keeps out of the state_dict keys
        # that matter (it is named 'bias'; we register it non-persistent).
        bs = cfg['block_size']
        self.register_buffer('bias', torch.tril(torch.ones(bs, bs)).view(1, 1, bs, bs),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Linear(cfg['n_embd'], 4 * cfg['n_embd'], bias=cfg['bias'])
        self.gelu = nn.GELU()  # exact erf GELU, as in nanoGPT
        self.c_proj = Linear(4 * cfg['n_embd'], cfg['n_embd'], bias=cfg['bias'])
        self.dropout = nn.Dropout(cfg['dropout'])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = LayerNorm(cfg['n_embd'], bias=cfg['bias'])
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg['n_embd'], bias=cfg['bias'])
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg['vocab_size'], cfg['n_embd']),
            wpe=nn.Embedding(cfg['block_size'], cfg['n_embd']),
            drop=nn.Dropout(cfg['dropout']),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg['n_layer'])]),
            ln_f=LayerNorm(cfg['n_embd'], bias=cfg['bias']),
        ))
        self.lm_head = Linear(cfg['n_embd'], cfg['vocab_size'], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg['n_layer']))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


# ----------------------------------------------------------------------------
# The recipe's pieces, shared with tools/train_modern_demo.py.

def char_dataset(path, out):
    """nanoGPT data/shakespeare_char/prepare.py: the sorted characters of the text
    as the vocabulary, a 90/10 train/val split, and meta.pkl written into out."""
    with open(path, 'r') as f:
        data = f.read()
    chars = sorted(list(set(data)))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    n = len(data)
    train_ids = np.array([stoi[c] for c in data[:int(n * 0.9)]], dtype=np.uint16)
    val_ids = np.array([stoi[c] for c in data[int(n * 0.9):]], dtype=np.uint16)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, 'meta.pkl'), 'wb') as f:
        pickle.dump({'vocab_size': len(chars), 'itos': itos, 'stoi': stoi}, f)
    return stoi, itos, train_ids, val_ids


def train(model, loss_of, args, train_ids, val_ids, t_start):
    """nanoGPT's train.py loop: AdamW (betas 0.9/0.99, weight decay 0.1), linear
    warmup then cosine decay to min_lr, gradient clip 1.0, an estimate of both
    losses every eval_interval. loss_of(x, y) is the model's mean cross-entropy.
    Returns the last estimates."""
    gen = torch.Generator().manual_seed(args.seed)

    def get_batch(split):
        d = train_ids if split == 'train' else val_ids
        ix = torch.randint(len(d) - args.block_size, (args.batch_size,), generator=gen)
        x = torch.stack([torch.from_numpy(d[i:i + args.block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(d[i + 1:i + 1 + args.block_size].astype(np.int64)) for i in ix])
        return x, y

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.1)

    def get_lr(it):  # nanoGPT: linear warmup then cosine decay to min_lr
        if it < args.warmup_iters:
            return args.lr * (it + 1) / (args.warmup_iters + 1)
        ratio = (it - args.warmup_iters) / max(1, args.max_iters - args.warmup_iters)
        return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, ratio))) * (args.lr - args.min_lr)

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = {}
        for split in ('train', 'val'):
            losses = [loss_of(*get_batch(split)).item() for _ in range(args.eval_iters)]
            out[split] = float(np.mean(losses))
        model.train()
        return out

    losses = {}
    t0 = time.time()
    for it in range(args.max_iters + 1):
        if it % args.eval_interval == 0 or it == args.max_iters:
            losses = estimate_loss()
            print(f"iter {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                  f"elapsed {time.time() - t_start:.1f}s", flush=True)
        if it == args.max_iters:
            break
        for g in optimizer.param_groups:
            g['lr'] = get_lr(it)
        x, y = get_batch('train')
        loss = loss_of(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if it % 50 == 0:
            dt = time.time() - t0
            t0 = time.time()
            print(f"iter {it}: loss {loss.item():.4f}, {dt:.2f}s/50 iters", flush=True)
    return losses


@torch.no_grad()
def whole_split_loss(model, logits_of, val_ids, T):
    """The mean loss over the whole validation split (the text's last 10%), in
    windows of T that overlap by half: every character after the first window is
    scored with at least T/2 characters of context. Returns (loss, count)."""
    model.eval()
    ids = torch.from_numpy(val_ids.astype(np.int64))
    stride = T // 2
    last = len(ids) - 1 - T  # the last window's start: its final target is the last character
    starts = list(range(0, last, stride)) + [last]
    total, count, done = 0.0, 0, 0  # done: targets ids[1:done+1] are already scored
    for b in range(0, len(starts), 64):
        chunk = starts[b:b + 64]
        x = torch.stack([ids[i:i + T] for i in chunk])
        y = torch.stack([ids[i + 1:i + 1 + T] for i in chunk])
        logits = logits_of(x)
        nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1),
                              reduction='none').view(len(chunk), T)
        for j, i in enumerate(chunk):
            lo = done - i  # score each target once, with the most context
            total += nll[j, lo:].sum().item()
            count += T - lo
            done = i + T
    model.train()
    return total / count, count


@torch.no_grad()
def sample(logits_of, stoi, itos, seed, block_size, prompt='ROMEO:', n=300, temperature=0.8, top_k=200):
    """nanoGPT's sample.py: temperature and top-k over the last position's logits."""
    torch.manual_seed(seed)
    idx = torch.tensor([[stoi[c] for c in prompt]], dtype=torch.long)
    for _ in range(n):
        logits = logits_of(idx[:, -block_size:])[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float('Inf')
        probs = F.softmax(logits, dim=-1)
        idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
    return ''.join(itos[i] for i in idx[0].tolist())


def openblas_note(args):
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}", flush=True)


def add_recipe_args(ap, max_iters, block_size, batch_size, lr, min_lr):
    ap.add_argument('--data', default=os.path.join(REPO, 'data', 'tinyshakespeare.txt'))
    ap.add_argument('--max-iters', type=int, default=max_iters)
    ap.add_argument('--block-size', type=int, default=block_size)
    ap.add_argument('--batch-size', type=int, default=batch_size)
    ap.add_argument('--lr', type=float, default=lr)
    ap.add_argument('--min-lr', type=float, default=min_lr)
    ap.add_argument('--warmup-iters', type=int, default=100)
    ap.add_argument('--eval-interval', type=int, default=500)
    ap.add_argument('--eval-iters', type=int, default=20)
    ap.add_argument('--threads', type=int, default=os.cpu_count() or 1)
    ap.add_argument('--seed', type=int, default=1337)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    ap.add_argument('--out', default=os.path.join(REPO, 'models', 'demo'))
    ap.add_argument('--n-layer', type=int, default=6)
    ap.add_argument('--n-head', type=int, default=8)
    ap.add_argument('--n-embd', type=int, default=256)
    add_recipe_args(ap, max_iters=3000, block_size=128, batch_size=32, lr=2e-3, min_lr=2e-4)
    args = ap.parse_args()

    openblas_note(args)
    t_start = time.time()
    stoi, itos, train_ids, val_ids = char_dataset(args.data, args.out)
    model_args = dict(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd,
                      block_size=args.block_size, bias=True, vocab_size=len(stoi), dropout=0.0)
    model = GPT(model_args)
    losses = train(model, lambda x, y: model(x, y)[1], args, train_ids, val_ids, t_start)
    train_seconds = time.time() - t_start

    val_full, val_count = whole_split_loss(model, lambda x: model(x)[0], val_ids, args.block_size)
    print(f"whole validation split: loss {val_full:.4f} over {val_count} predicted characters", flush=True)

    config = dict(vars(args))
    config.update(dataset='shakespeare_char', dropout=0.0, weight_decay=0.1, beta1=0.9, beta2=0.99,
                  grad_clip=1.0, decay_lr=True, lr_decay_iters=args.max_iters)
    ckpt = {
        'model': model.state_dict(),
        'model_args': model_args,
        'iter_num': args.max_iters,
        'best_val_loss': torch.tensor(val_full),
        'config': config,
    }
    torch.save(ckpt, os.path.join(args.out, 'ckpt.pt'))
    total = time.time() - t_start
    print(f"saved {os.path.join(args.out, 'ckpt.pt')}: final train loss {losses['train']:.4f}, "
          f"val loss {losses['val']:.4f} ({args.eval_iters}-batch estimates), whole validation "
          f"split {val_full:.4f}; training {train_seconds:.1f}s, total time {total:.1f}s")

    model.eval()
    print('--- sample ---')
    print(sample(lambda x: model(x)[0], stoi, itos, args.seed, args.block_size))


if __name__ == '__main__':
    main()
