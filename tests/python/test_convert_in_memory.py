"""mmgpt.convert on models held in memory: a nanoGPT GPT, a Hugging Face-style
GPT-2 and an "LLMs from scratch" GPTModel, built here with the reference
tests' re-implementations (tests/reference/mmgpt_ref.py). Each is converted
from the module, its state dict, a checkpoint dict or numpy arrays, and must
give the file the command line writes from the same weights saved with
torch.save, and PyTorch's logits."""
import sys

import numpy as np
import pytest
import torch

import mmgpt
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "reference"))
import mmgpt_ref as R  # noqa: E402


def nanogpt(bias=True):
    cfg = dict(n_layer=2, n_head=4, n_embd=64, block_size=48, vocab_size=97, bias=bias, dropout=0.0)
    return R.randomize_(R.NanoGPT(cfg), 11), 4


def hf():
    cfg = dict(n_layer=2, n_head=2, n_embd=48, n_positions=40, vocab_size=101, layer_norm_epsilon=1e-5)
    return R.randomize_(R.HFGPT2LMHeadModel(cfg), 12), 2


def llms():
    cfg = dict(vocab_size=89, context_length=32, emb_dim=64, n_heads=8, n_layers=2, drop_rate=0.0, qkv_bias=True)
    return R.randomize_(R.LLMsGPTModel(cfg), 13), 8


def check_logits(path, model):
    lm = mmgpt.load(path)
    ids = R.prompt_ids(5, min(20, model.block_size), lm.config.vocab_size)
    got = torch.from_numpy(lm.logits(ids)).double()
    R.compare_logits(got, R.ref_logits(model.double(), ids))


def cli_convert(cli, obj, work, name, *extra):
    src = work / (name + ".pt")
    torch.save(obj, src)
    out = work / (name + "-cli.mmgpt")
    cli("convert", src, "-o", out, *extra)
    return out.read_bytes()


@pytest.mark.parametrize("make,layout", [(nanogpt, "nanogpt"), (hf, "hf-gpt2"), (llms, "llms-from-scratch")])
def test_module_and_state_dict(cli, work, make, layout):
    model, n_head = make()
    name = "mem-" + layout
    expected = cli_convert(cli, model.state_dict(), work, name, "--n-head", n_head)
    from_module = work / (name + "-module.mmgpt")
    mmgpt.convert(model, from_module, n_head=n_head)
    assert from_module.read_bytes() == expected
    from_sd = work / (name + "-sd.mmgpt")
    mmgpt.convert(model.state_dict(), from_sd, n_head=n_head, layout=layout)
    assert from_sd.read_bytes() == expected
    check_logits(from_module, model)


def test_nanogpt_checkpoint_dict(cli, work):
    # train.py's dict: the weights under 'model' (torch.compile's prefix on
    # them), model_args beside them (so no n_head is needed), an optimizer state.
    model, _ = nanogpt(bias=False)
    ckpt = R.nanogpt_checkpoint(model, compiled=True, with_optimizer=True)
    expected = cli_convert(cli, ckpt, work, "nano-ckpt")
    out = work / "nano-ckpt.mmgpt"
    mmgpt.convert(ckpt, out)
    assert out.read_bytes() == expected
    check_logits(out, model)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_tensors_and_dtypes(cli, work, dtype):
    model, n_head = hf()
    R.stored_roundtrip_(model, dtype)
    sd = R.cast_state_dict(model.state_dict(), dtype)
    name = f"hf-{str(dtype)[6:]}"
    expected = cli_convert(cli, sd, work, name, "--n-head", n_head, "--dtype", "q8_0", "--dtype-head", "f16")
    out = work / (name + ".mmgpt")
    mmgpt.convert(sd, out, n_head=n_head, dtype="q8_0", dtype_head="f16")
    assert out.read_bytes() == expected


def test_numpy_arrays(cli, work):
    model, n_head = llms()
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    # Non-contiguous arrays are read as their values, not their memory.
    sd["out_head.weight"] = np.asfortranarray(sd["out_head.weight"])
    expected = cli_convert(cli, model.state_dict(), work, "llms-np", "--n-head", n_head)
    out = work / "llms-np.mmgpt"
    mmgpt.convert(sd, out, n_head=n_head)
    assert out.read_bytes() == expected


def test_tokenizer_option(cli, work, data):
    model, n_head = hf()
    tok = data / "gpt2"
    out = work / "hf-tok.mmgpt"
    # 101 rows: fewer than the GPT-2 vocabulary given as the tokenizer, which is refused
    with pytest.raises(mmgpt.Error, match="tokenizer has 50257 tokens"):
        mmgpt.convert(model, out, n_head=n_head, tokenizer=tok)
    assert not out.exists()


def test_in_memory_errors(work):
    model, _ = hf()
    out = work / "bad.mmgpt"
    with pytest.raises(mmgpt.Error, match="n-head|n_head|head count"):
        mmgpt.convert(model.state_dict(), out)
    sd = dict(model.state_dict())
    del sd["transformer.h.1.mlp.c_fc.weight"]
    with pytest.raises(mmgpt.Error, match="c_fc"):
        mmgpt.convert(sd, out, n_head=2)
    with pytest.raises(mmgpt.Error):
        mmgpt.convert({"just": "strings"}, out)
    with pytest.raises(mmgpt.Error, match="complex"):
        mmgpt.convert({"w": torch.zeros(3, dtype=torch.complex64)}, out)
    with pytest.raises(mmgpt.Error, match="n_head"):
        mmgpt.convert(model, out, n_head=0)
    assert not out.exists()


def test_bundled_gpt2_vocabulary(work):
    # A nanoGPT model of GPT-2's padded vocabulary, converted without tokenizer
    # files: the package's own copy of the GPT-2 BPE files is used, as the
    # command line uses its share/mmgpt copy.
    cfg = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=50304, bias=True, dropout=0.0)
    model = R.randomize_(R.NanoGPT(cfg), 14)
    out = work / "nano-gpt2-vocab.mmgpt"
    mmgpt.convert({"model": model.state_dict(), "model_args": cfg}, out)
    lm = mmgpt.load(out)
    assert lm.encode("Hello world") == [15496, 995]
    assert lm.decode([15496, 995]) == "Hello world"


def test_modern_block_in_memory(cli, work):
    """A Hugging Face Qwen3 state dict with its config dict, and the book's
    Llama3Model module (its .cfg, a torch dtype in it), give the files the
    command line writes from the directory and the saved state dict."""
    import ref_hf_modern as M
    import ref_llms_modern as L
    cfg = M.config_json("qwen3", hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                        vocab_size=90)
    model = M.randomize_(M.build(cfg, rope_fp32=True), 14)
    M.write_hf_modern_dir(model, work / "qwen3-dir")
    cli("convert", work / "qwen3-dir", "-o", work / "qwen3-cli.mmgpt")
    from_sd = work / "qwen3-sd.mmgpt"
    mmgpt.convert(model.state_dict(), from_sd, config=cfg)
    assert from_sd.read_bytes() == (work / "qwen3-cli.mmgpt").read_bytes()
    check_logits(from_sd, model)
    c = mmgpt.load(from_sd).config
    assert (c.n_head, c.n_kv_head, c.head_dim) == (4, 2, 8), c
    import json
    from_text = work / "qwen3-text.mmgpt"
    mmgpt.convert(model.state_dict(), from_text, config=json.dumps(cfg))
    assert from_text.read_bytes() == from_sd.read_bytes()

    book_cfg = L.llama3_config(dtype=torch.float32)
    book = L.randomize_modern_(L.build_model(book_cfg), 15)
    pth, _ = L.write_llms_modern(book, book_cfg, str(work / "book"), "model", torch.float32)
    cli("convert", pth, "-o", work / "book-cli.mmgpt")
    from_module = work / "book-module.mmgpt"
    mmgpt.convert(book, from_module)
    assert from_module.read_bytes() == (work / "book-cli.mmgpt").read_bytes()

    # nanochat: the GPT module (its GPTConfig dataclass in .config), the state dict with the meta dict.
    import dataclasses
    import ref_nanochat as N
    nc_cfg = N.nanochat_config(sequence_len=64, vocab_size=100, n_layer=2, n_head=2, n_kv_head=1, n_embd=32)
    nc = N.randomize_nanochat_(N.NanochatGPT(nc_cfg), 16)
    model_path, _ = N.write_nanochat_checkpoint(nc, str(work / "nanochat"), 20)
    cli("convert", model_path, "-o", work / "nanochat-cli.mmgpt")
    GPTConfig = dataclasses.make_dataclass("GPTConfig", list(nc_cfg))
    nc.config = GPTConfig(**nc_cfg)
    mmgpt.convert(nc, work / "nanochat-module.mmgpt")
    assert (work / "nanochat-module.mmgpt").read_bytes() == (work / "nanochat-cli.mmgpt").read_bytes()
    meta = N.nanochat_meta(nc, 20)
    mmgpt.convert(N.nanochat_state_dict(nc, compiled_prefix=True), work / "nanochat-sd.mmgpt", config=meta)
    assert (work / "nanochat-sd.mmgpt").read_bytes() == (work / "nanochat-cli.mmgpt").read_bytes()
    with pytest.raises(mmgpt.Error, match="needs its model_config"):
        mmgpt.convert(nc.state_dict(), work / "nanochat-no-config.mmgpt")

    with pytest.raises(mmgpt.Error, match="needs its config dict beside it"):
        mmgpt.convert(book.state_dict(), work / "no-config.mmgpt")
    with pytest.raises(mmgpt.Error, match="config: must be a dict"):
        mmgpt.convert(book.state_dict(), work / "bad-config.mmgpt", config=3)
    with pytest.raises(mmgpt.Error, match="give it with a checkpoint in memory"):
        mmgpt.convert(work / "qwen3-dir", work / "path-config.mmgpt", config=cfg)
