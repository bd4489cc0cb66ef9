// The converter end to end on small checkpoints PyTorch writes at test time:
// one per layout and container, converted, reopened with ModelFile::open and
// compared value by value with the canonical tensors Python computes
// (transposes, Q/K/V concatenation); then every refusal the converter owes
// the user, each with a useful message and no output file left behind.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/panel_layout.hpp"
#include "core/quant_layout.hpp"
#include "formats/error.hpp"
#include "formats/mmgpt_file.hpp"
#include "tools/convert/converter.hpp"

namespace fs = std::filesystem;
using mmgpt::ConvertOptions;
using mmgpt::ConvertSummary;

namespace {

// Writes every fixture under argv[1]/<case>/, with the canonical tensors the
// converter must produce under <case>/expected/ (manifest.txt + NAME.f32).
const char* kGenerator = R"PY(
import sys, os, json, struct, pickle, torch
root = sys.argv[1]
g = torch.Generator().manual_seed(1234)
def rnd(*s, dtype=torch.float32): return torch.randn(*s, generator=g).to(dtype)
def mkdir(*p):
    d = os.path.join(root, *p); os.makedirs(d, exist_ok=True); return d
def expect(case, canon):
    d = mkdir(case, 'expected')
    with open(os.path.join(d, 'manifest.txt'), 'w') as m:
        for name, t in canon.items():
            t = t.detach().to(torch.float32).contiguous()
            m.write(name + ' ' + ' '.join(str(x) for x in t.shape) + '\n')
            with open(os.path.join(d, name + '.f32'), 'wb') as f: f.write(t.numpy().astype('<f4').tobytes())
def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, t in tensors.items():
        t = t.contiguous()
        dt = {torch.float32: 'F32', torch.float16: 'F16', torch.bfloat16: 'BF16'}[t.dtype]
        b = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {'dtype': dt, 'shape': list(t.shape), 'data_offsets': [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(header).encode(); h += b' ' * ((8 - len(h) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h))); f.write(h)
        for b in blobs: f.write(b)

# GPT-2 names; canonical matrices are [out, in]; HF Conv1D stores [in, out].
def gpt2_sd(L, d, ff, V, T, conv1d, prefix, bias=True, dtype=torch.float32, view_t=False):
    sd, canon = {}, {}
    def mat(src, dst, rows, cols):
        w = rnd(rows, cols, dtype=dtype)
        sd[prefix + src] = (w.t() if view_t else w.t().contiguous()) if conv1d else w
        canon[dst] = w
    def vec(src, dst, n):
        v = rnd(n, dtype=dtype); sd[prefix + src] = v; canon[dst] = v
    mat('wte.weight', 'wte', V, d); sd[prefix + 'wte.weight'] = canon['wte']
    mat('wpe.weight', 'wpe', T, d); sd[prefix + 'wpe.weight'] = canon['wpe']
    for l in range(L):
        s, t = f'h.{l}.', f'h.{l}.'
        vec(s + 'ln_1.weight', t + 'ln_1.weight', d)
        if bias: vec(s + 'ln_1.bias', t + 'ln_1.bias', d)
        mat(s + 'attn.c_attn.weight', t + 'attn.qkv.weight', 3 * d, d)
        if bias: vec(s + 'attn.c_attn.bias', t + 'attn.qkv.bias', 3 * d)
        mat(s + 'attn.c_proj.weight', t + 'attn.proj.weight', d, d)
        if bias: vec(s + 'attn.c_proj.bias', t + 'attn.proj.bias', d)
        vec(s + 'ln_2.weight', t + 'ln_2.weight', d)
        if bias: vec(s + 'ln_2.bias', t + 'ln_2.bias', d)
        mat(s + 'mlp.c_fc.weight', t + 'mlp.fc.weight', ff, d)
        if bias: vec(s + 'mlp.c_fc.bias', t + 'mlp.fc.bias', ff)
        mat(s + 'mlp.c_proj.weight', t + 'mlp.proj.weight', d, ff)
        if bias: vec(s + 'mlp.c_proj.bias', t + 'mlp.proj.bias', d)
    vec('ln_f.weight', 'ln_f.weight', d)
    if bias: vec('ln_f.bias', 'ln_f.bias', d)
    return sd, canon

def hf_config(path, L, H, d, V, T, act='gelu_new', eps=1e-5, n_inner=None, ctx_key='n_positions'):
    cfg = {'model_type': 'gpt2', 'n_layer': L, 'n_head': H, 'n_embd': d, 'vocab_size': V, ctx_key: T,
           'activation_function': act, 'layer_norm_epsilon': eps, 'n_inner': n_inner}
    with open(path, 'w') as f: json.dump(cfg, f)

def bpe_files(d, vocab_name='vocab.json', merges_name='merges.txt', merges='#version: 0.2\na b\nab Ġ\n'):
    vocab = {'a': 0, 'b': 1, 'ab': 2, 'Ġ': 3, '<|endoftext|>': 4}
    with open(os.path.join(d, vocab_name), 'w', encoding='utf-8') as f: json.dump(vocab, f)
    with open(os.path.join(d, merges_name), 'w', encoding='utf-8') as f: f.write(merges)

def meta_pkl(path, itos):
    with open(path, 'wb') as f:
        pickle.dump({'vocab_size': len(itos), 'itos': itos, 'stoi': {v: k for k, v in itos.items()}}, f)

# --- hf-gpt2: HF directory with model.safetensors (no prefix), config.json, vocab.json + merges.txt
d = mkdir('hf_safetensors')
sd, canon = gpt2_sd(2, 8, 32, 11, 7, True, '')
for l in range(2): sd[f'h.{l}.attn.bias'] = torch.tril(torch.ones(7, 7)).view(1, 1, 7, 7)
write_safetensors(os.path.join(d, 'model.safetensors'), sd)
hf_config(os.path.join(d, 'config.json'), 2, 2, 8, 11, 7)
bpe_files(d); expect('hf_safetensors', canon)

# --- hf-gpt2: legacy torch.save, no 'transformer.' prefix (the original GPT-2 file),
#     Conv1D weights saved as transposed views, exact GELU, eps 1e-6, n_ctx, OpenAI tokenizer names
d = mkdir('hf_legacy')
sd, canon = gpt2_sd(3, 12, 20, 13, 5, True, '', view_t=True)
for l in range(3):
    sd[f'h.{l}.attn.bias'] = torch.tril(torch.ones(5, 5)).view(1, 1, 5, 5)
    sd[f'h.{l}.attn.masked_bias'] = torch.tensor(-1e4)
torch.save(sd, os.path.join(d, 'pytorch_model.bin'), _use_new_zipfile_serialization=False)
hf_config(os.path.join(d, 'config.json'), 3, 3, 12, 13, 5, act='gelu', eps=1e-6, n_inner=20, ctx_key='n_ctx')
bpe_files(d, 'encoder.json', 'vocab.bpe'); expect('hf_legacy', canon)

# --- hf-gpt2: zip torch.save, 'transformer.' prefix, float16 storage, tied lm_head sharing wte's storage
d = mkdir('hf_zip_f16')
sd, canon = gpt2_sd(1, 16, 64, 9, 6, True, 'transformer.', dtype=torch.float16)
sd['lm_head.weight'] = sd['transformer.wte.weight']
torch.save(sd, os.path.join(d, 'pytorch_model.bin'))
hf_config(os.path.join(d, 'config.json'), 1, 4, 16, 9, 6)
expect('hf_zip_f16', canon)

# --- hf-gpt2: separate lm_head (untied), no config.json (needs --n-head)
d = mkdir('hf_untied')
sd, canon = gpt2_sd(1, 8, 32, 10, 4, True, 'transformer.')
sd['lm_head.weight'] = canon['lm_head.weight'] = rnd(10, 8)
torch.save(sd, os.path.join(d, 'model.pt'))
expect('hf_untied', canon)

# --- the same with one weight too large for a q8_0 / q4_0 block's f16 scale
d = mkdir('hf_huge_weight')
sd['transformer.h.0.mlp.c_fc.weight'][3, 5] = 1e30
torch.save(sd, os.path.join(d, 'model.pt'))

# --- nanoGPT ckpt.pt: _orig_mod. prefix, model_args, optimizer state, 0-d best_val_loss, meta.pkl beside
d = mkdir('nanogpt_char')
sd, canon = gpt2_sd(2, 12, 48, 6, 8, False, 'transformer.')
sd['lm_head.weight'] = sd['transformer.wte.weight']  # weight tying: one storage
for l in range(2): sd[f'transformer.h.{l}.attn.bias'] = torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8)
sd = {'_orig_mod.' + k: v for k, v in sd.items()}
ckpt = {'model': sd, 'optimizer': {'state': {0: {'step': torch.tensor(3.0), 'exp_avg': torch.zeros(6, 12)}},
                                   'param_groups': [{'lr': 6e-4, 'params': [0]}]},
        'model_args': {'n_layer': 2, 'n_head': 3, 'n_embd': 12, 'block_size': 8, 'bias': True,
                       'vocab_size': 6, 'dropout': 0.0},
        'iter_num': 100, 'best_val_loss': torch.tensor(1.25), 'config': {'dataset': 'shakespeare_char'}}
torch.save(ckpt, os.path.join(d, 'ckpt.pt'))
meta_pkl(os.path.join(d, 'meta.pkl'), {0: '\n', 1: ' ', 2: 'a', 3: 'b', 4: 'é', 5: '€'})
expect('nanogpt_char', canon)

# --- nanoGPT bias=False, GPT-2 sized vocabulary padded to 50304, no tokenizer files beside it
d = mkdir('nanogpt_nobias')
sd, canon = gpt2_sd(1, 4, 16, 50304, 3, False, 'transformer.', bias=False)
sd['lm_head.weight'] = sd['transformer.wte.weight']
torch.save({'model': sd, 'model_args': {'n_layer': 1, 'n_head': 2, 'n_embd': 4, 'block_size': 3, 'bias': False,
                                         'vocab_size': 50304, 'dropout': 0.0}}, os.path.join(d, 'ckpt.pt'))
expect('nanogpt_nobias', canon)

# --- nanoGPT small vocabulary, no tokenizer: runs on ids
d = mkdir('nanogpt_ids')
sd, canon = gpt2_sd(1, 4, 16, 7, 3, False, 'transformer.')
torch.save({'model': sd, 'model_args': {'n_layer': 1, 'n_head': 1, 'n_embd': 4, 'block_size': 3, 'bias': True,
                                         'vocab_size': 7}}, os.path.join(d, 'ckpt.pt'))
expect('nanogpt_ids', canon)

# --- LLMs-from-scratch GPTModel state_dict, with and without qkv_bias
def lfs_sd(L, d, ff, V, T, qkv_bias):
    sd, canon = {}, {}
    sd['tok_emb.weight'] = canon['wte'] = rnd(V, d)
    sd['pos_emb.weight'] = canon['wpe'] = rnd(T, d)
    for l in range(L):
        s, t = f'trf_blocks.{l}.', f'h.{l}.'
        q, k, v = rnd(d, d), rnd(d, d), rnd(d, d)
        sd[s + 'att.W_query.weight'], sd[s + 'att.W_key.weight'], sd[s + 'att.W_value.weight'] = q, k, v
        canon[t + 'attn.qkv.weight'] = torch.cat([q, k, v], 0)
        if qkv_bias:
            qb, kb, vb = rnd(d), rnd(d), rnd(d)
            sd[s + 'att.W_query.bias'], sd[s + 'att.W_key.bias'], sd[s + 'att.W_value.bias'] = qb, kb, vb
            canon[t + 'attn.qkv.bias'] = torch.cat([qb, kb, vb], 0)
        sd[s + 'att.out_proj.weight'] = canon[t + 'attn.proj.weight'] = rnd(d, d)
        sd[s + 'att.out_proj.bias'] = canon[t + 'attn.proj.bias'] = rnd(d)
        sd[s + 'att.mask'] = torch.triu(torch.ones(T, T), diagonal=1)
        sd[s + 'ff.layers.0.weight'] = canon[t + 'mlp.fc.weight'] = rnd(ff, d)
        sd[s + 'ff.layers.0.bias'] = canon[t + 'mlp.fc.bias'] = rnd(ff)
        sd[s + 'ff.layers.2.weight'] = canon[t + 'mlp.proj.weight'] = rnd(d, ff)
        sd[s + 'ff.layers.2.bias'] = canon[t + 'mlp.proj.bias'] = rnd(d)
        sd[s + 'norm1.scale'] = canon[t + 'ln_1.weight'] = rnd(d)
        sd[s + 'norm1.shift'] = canon[t + 'ln_1.bias'] = rnd(d)
        sd[s + 'norm2.scale'] = canon[t + 'ln_2.weight'] = rnd(d)
        sd[s + 'norm2.shift'] = canon[t + 'ln_2.bias'] = rnd(d)
    sd['final_norm.scale'] = canon['ln_f.weight'] = rnd(d)
    sd['final_norm.shift'] = canon['ln_f.bias'] = rnd(d)
    sd['out_head.weight'] = canon['lm_head.weight'] = rnd(V, d)
    return sd, canon
d = mkdir('lfs_qkv_bias')
sd, canon = lfs_sd(2, 10, 40, 17, 9, True)
torch.save(sd, os.path.join(d, 'model.pth')); expect('lfs_qkv_bias', canon)
d = mkdir('lfs_no_qkv_bias')
sd, canon = lfs_sd(3, 6, 24, 5, 4, False)
torch.save({'model_state_dict': sd, 'optimizer_state_dict': {'state': {}, 'param_groups': []}},
           os.path.join(d, 'gpt.pt'))
expect('lfs_no_qkv_bias', canon)

# --- broken inputs
def nano(dirname, mutate, meta=None):
    d = mkdir(dirname)
    sd, _ = gpt2_sd(2, 4, 16, 6, 3, False, 'transformer.')
    mutate(sd)
    torch.save({'model': sd, 'model_args': {'n_layer': 2, 'n_head': 2, 'n_embd': 4, 'block_size': 3,
                                             'bias': True, 'vocab_size': 6}}, os.path.join(d, 'ckpt.pt'))
    if meta is not None:
        with open(os.path.join(d, 'meta.pkl'), 'wb') as f: pickle.dump(meta, f)
nano('bad_missing_tensor', lambda sd: sd.pop('transformer.h.1.mlp.c_fc.weight'))
nano('bad_shape', lambda sd: sd.__setitem__('transformer.h.1.ln_2.weight', torch.zeros(5)))
nano('bad_extra_key', lambda sd: sd.__setitem__('transformer.h.0.attn.rotary.weight', torch.zeros(2)))
def drop_layer(sd):
    for k in [k for k in sd if k.startswith('transformer.h.1.')]: sd.pop(k)
    for k in [k for k in sd if k.startswith('transformer.h.0.')]: sd[k.replace('h.0.', 'h.2.')] = sd[k]
nano('bad_layer_gap', drop_layer)
nano('bad_meta_gap', lambda sd: None, meta={'vocab_size': 2, 'itos': {0: 'a', 2: 'b'}})
nano('bad_meta_big', lambda sd: None, meta={'itos': {i: chr(65 + i) for i in range(7)}})
d = mkdir('bad_config_json')
sd, _ = gpt2_sd(2, 8, 32, 11, 7, True, '')
write_safetensors(os.path.join(d, 'model.safetensors'), sd)
hf_config(os.path.join(d, 'config.json'), 2, 2, 16, 11, 7)
d = mkdir('bad_activation')
write_safetensors(os.path.join(d, 'model.safetensors'), sd)
hf_config(os.path.join(d, 'config.json'), 2, 2, 8, 11, 7, act='relu')
d = mkdir('bad_merges')
write_safetensors(os.path.join(d, 'model.safetensors'), sd)
hf_config(os.path.join(d, 'config.json'), 2, 2, 8, 11, 7)
bpe_files(d, merges='#version: 0.2\na b\nab Ġ x\n')
d = mkdir('bad_garbage')
with open(os.path.join(d, 'weights.bin'), 'wb') as f: f.write(b'\x00\x01not a checkpoint at all' * 10)
d = mkdir('bad_two_checkpoints')
torch.save({'x': torch.zeros(1)}, os.path.join(d, 'a.pt')); torch.save({'x': torch.zeros(1)}, os.path.join(d, 'b.pt'))
mkdir('bad_empty_dir')
with open(os.path.join(root, 'done'), 'w') as f: f.write('ok')
)PY";

std::string tmp_root() {
  static const std::string root = [] {
    const fs::path dir = fs::path(MMGPT_TEST_TMP) / "convert_checkpoints";
    fs::remove_all(dir);
    fs::create_directories(dir / "fixtures");
    const fs::path script = dir / "generate.py";
    std::ofstream(script) << kGenerator;
    const std::string cmd = std::string(MMGPT_PYTHON) + " " + script.string() + " " + (dir / "fixtures").string();
    const int rc = std::system(cmd.c_str());
    if (rc != 0 || !fs::exists(dir / "fixtures" / "done"))
      FAIL("fixture generation failed (needs " MMGPT_PYTHON " with torch): " << cmd);
    return dir.string();
  }();
  return root;
}

std::string fixture(const std::string& name) { return (fs::path(tmp_root()) / "fixtures" / name).string(); }

std::string out_path(const std::string& name) {
  const fs::path dir = fs::path(tmp_root()) / "out" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return (dir / "model.mmgpt").string();
}

ConvertSummary convert(const std::string& input, const std::string& out, const std::string& layout = "auto",
                       int n_head = 0, const std::string& tokenizer = "") {
  ConvertOptions o;
  o.input = input;
  o.output = out;
  o.layout = layout;
  o.n_head = n_head;
  o.tokenizer = tokenizer;
  return convert_checkpoint(o);
}

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot open " << p);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// Every tensor of the file equals the expected canonical tensor bit for bit,
// and the file holds exactly the expected set.
void check_tensors(const mmgpt::ModelFile& m, const std::string& case_name) {
  const fs::path dir = fs::path(fixture(case_name)) / "expected";
  std::ifstream manifest(dir / "manifest.txt");
  REQUIRE(manifest);
  std::string line;
  size_t count = 0;
  while (std::getline(manifest, line)) {
    std::istringstream ls(line);
    std::string name;
    ls >> name;
    std::vector<uint64_t> shape;
    for (uint64_t s; ls >> s;) shape.push_back(s);
    CAPTURE(name);
    const mmgpt::TensorView* t = m.find(name);
    REQUIRE(t != nullptr);
    CHECK(t->shape == shape);
    const std::vector<float> want = read_f32(dir / (name + ".f32"));
    REQUIRE(t->numel() == want.size());
    // Matrices are written in the panel layout: compare each element where it lives.
    const bool packed = t->layout == mmgpt::Layout::Panel16;
    CHECK(packed == (shape.size() == 2 && name != "wpe"));
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const size_t at = packed ? mmgpt::panel_index(shape[1], i / shape[1], i % shape[1]) : i;
      bad += std::memcmp(&t->f32()[at], &want[i], sizeof(float)) != 0;
    }
    CHECK(bad == 0);
    ++count;
  }
  CHECK(m.tensors().size() == count);
}

bool has_note(const ConvertSummary& s, const std::string& part) {
  for (const auto& n : s.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

// Conversion fails with mmgpt::Error mentioning every one of `parts`, and leaves no file at all.
void expect_failure(const std::string& input, const std::vector<std::string>& parts, const std::string& layout = "auto",
                    int n_head = 0, const std::string& tokenizer = "") {
  const std::string out = out_path("failure");
  std::string message;
  try {
    convert(input, out, layout, n_head, tokenizer);
  } catch (const mmgpt::Error& e) {
    message = e.what();
  }
  CAPTURE(message);
  REQUIRE_FALSE(message.empty());
  for (const auto& p : parts) CHECK_MESSAGE(message.find(p) != std::string::npos, "missing: " << p);
  CHECK(fs::is_empty(fs::path(out).parent_path()));
}

}  // namespace

TEST_CASE("hf-gpt2 directory with model.safetensors, config.json, vocab.json + merges.txt") {
  const std::string out = out_path("hf_safetensors");
  const ConvertSummary s = convert(fixture("hf_safetensors"), out);
  CHECK(s.layout == "hf-gpt2");
  CHECK(s.container == "safetensors");
  CHECK(s.checkpoint.find("model.safetensors") != std::string::npos);
  const auto m = mmgpt::ModelFile::open(out);
  const auto& c = m.config();
  CHECK(c.n_layer == 2);
  CHECK(c.n_head == 2);
  CHECK(c.n_embd == 8);
  CHECK(c.n_ff == 32);
  CHECK(c.n_ctx == 7);
  CHECK(c.vocab_size == 11);
  CHECK(c.gelu == mmgpt::GeluKind::Tanh);
  CHECK(c.norm_eps == 1e-5f);
  CHECK(c.tied_lm_head);
  CHECK((c.qkv_bias && c.linear_bias && c.norm_bias));
  const auto& t = m.tokenizer();
  CHECK(t.kind == mmgpt::TokenizerKind::Gpt2Bpe);
  CHECK(t.tokens == std::vector<std::string>{"a", "b", "ab", "\xC4\xA0", "<|endoftext|>"});
  CHECK(t.eos_id == 4);
  REQUIRE(t.merges.size() == 2);
  CHECK(t.merges[1] == std::pair<std::string, std::string>{"ab", "\xC4\xA0"});
  CHECK(s.tokenizer_kind == mmgpt::TokenizerKind::Gpt2Bpe);
  CHECK(s.tokenizer_size == 5);
  check_tensors(m, "hf_safetensors");
  CHECK(s.tensors == m.tensors().size());
}

TEST_CASE("hf-gpt2 legacy torch.save without the transformer. prefix, strided Conv1D views, erf GELU") {
  const std::string out = out_path("hf_legacy");
  const ConvertSummary s = convert(fixture("hf_legacy") + "/pytorch_model.bin", out);
  CHECK(s.layout == "hf-gpt2");
  CHECK(s.container == "legacy torch.save");
  const auto m = mmgpt::ModelFile::open(out);
  CHECK(m.config().n_layer == 3);
  CHECK(m.config().n_head == 3);
  CHECK(m.config().n_ff == 20);
  CHECK(m.config().n_ctx == 5);
  CHECK(m.config().gelu == mmgpt::GeluKind::Erf);
  CHECK(m.config().norm_eps == 1e-6f);
  CHECK(m.tokenizer().kind == mmgpt::TokenizerKind::Gpt2Bpe);  // encoder.json + vocab.bpe
  CHECK(s.tokenizer_source.find("encoder.json") != std::string::npos);
  check_tensors(m, "hf_legacy");
}

TEST_CASE("hf-gpt2 zip with transformer. prefix, float16 storage and a tied lm_head") {
  const std::string out = out_path("hf_zip_f16");
  const ConvertSummary s = convert(fixture("hf_zip_f16"), out);
  CHECK(s.container == "torch zip");
  const auto m = mmgpt::ModelFile::open(out);
  CHECK(m.config().tied_lm_head);
  CHECK(m.find("lm_head.weight") == nullptr);
  CHECK(m.config().n_head == 4);
  CHECK(has_note(s, "float16"));
  CHECK(m.tokenizer().kind == mmgpt::TokenizerKind::None);
  CHECK(has_note(s, "token ids"));
  check_tensors(m, "hf_zip_f16");
}

TEST_CASE("hf-gpt2 with a separate lm_head and no config.json") {
  SUBCASE("--n-head is required") { expect_failure(fixture("hf_untied"), {"hf_untied", "config.json", "--n-head"}); }
  SUBCASE("converted with --n-head") {
    const std::string out = out_path("hf_untied");
    const ConvertSummary s = convert(fixture("hf_untied"), out, "hf-gpt2", 2);
    const auto m = mmgpt::ModelFile::open(out);
    CHECK_FALSE(m.config().tied_lm_head);
    CHECK(m.config().n_head == 2);
    CHECK(has_note(s, "no config.json"));
    check_tensors(m, "hf_untied");
  }
}

TEST_CASE("--dtype q8_0 / --dtype-head q4_0: block-quantized matrices within half a step (q4_0: one) of the source") {
  ConvertOptions o;
  o.input = fixture("hf_untied");
  o.output = out_path("hf_untied_q");
  o.n_head = 2;
  o.dtype = "q8_0";
  o.dtype_head = "q4_0";
  const ConvertSummary s = convert_checkpoint(o);
  CHECK(has_note(s, "q8_0"));
  const auto m = mmgpt::ModelFile::open(o.output);
  // (No structured bindings here: clang 14 cannot capture them in CAPTURE.)
  for (const auto& expected :
       std::vector<std::pair<std::string, mmgpt::WeightType>>{{"h.0.mlp.fc.weight", mmgpt::WeightType::Q8_0},
                                                              {"wte", mmgpt::WeightType::Q8_0},
                                                              {"lm_head.weight", mmgpt::WeightType::Q4_0},
                                                              {"h.0.ln_1.weight", mmgpt::WeightType::F32}}) {
    const std::string& name = expected.first;
    const mmgpt::WeightType want_dtype = expected.second;
    CAPTURE(name);
    const mmgpt::TensorView& t = m.tensor(name);
    CHECK(t.dtype == want_dtype);
    if (t.dtype == mmgpt::WeightType::F32) continue;
    const auto want = read_f32(fs::path(fixture("hf_untied")) / "expected" / (name + ".f32"));
    const size_t N = t.shape[0], K = t.shape[1];
    REQUIRE(want.size() == N * K);
    const auto wt = static_cast<mmgpt::WeightType>(t.dtype);
    std::vector<float> row(K);
    for (size_t n = 0; n < N; ++n) {
      mmgpt::dequantize_panel_row(static_cast<const uint8_t*>(t.data), wt, K, n, row.data());
      float amax = 0;
      for (size_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(want[n * K + k]));  // K <= 32: one block
      const double step = (wt == mmgpt::WeightType::Q8_0 ? amax / 127.0 : amax / 8.0) * (1 + 0x1p-10);
      for (size_t k = 0; k < K; ++k)
        CHECK(std::fabs(row[k] - want[n * K + k]) <= (wt == mmgpt::WeightType::Q8_0 ? 0.5 : 1.0) * step + 1e-7);
    }
  }
}

TEST_CASE("--dtype q8_0 refuses a weight its block scale cannot hold, naming it, and leaves no output") {
  for (const char* dt : {"q8_0", "q4_0"}) {
    CAPTURE(dt);
    ConvertOptions o;
    o.input = fixture("hf_huge_weight");
    o.output = out_path("huge");
    o.n_head = 2;
    o.dtype = dt;
    std::string message;
    try {
      convert_checkpoint(o);
    } catch (const mmgpt::Error& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(message.find("h.0.mlp.fc.weight") != std::string::npos);
    CHECK(message.find(dt) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
    CHECK_FALSE(fs::exists(o.output));
  }
  // f32 stores it as it is.
  ConvertOptions o;
  o.input = fixture("hf_huge_weight");
  o.output = out_path("huge_f32");
  o.n_head = 2;
  CHECK_NOTHROW(convert_checkpoint(o));
}

TEST_CASE("nanoGPT ckpt.pt: _orig_mod. prefix, model_args, optimizer skipped, meta.pkl beside it") {
  const std::string out = out_path("nanogpt_char");
  const ConvertSummary s = convert(fixture("nanogpt_char"), out);
  CHECK(s.layout == "nanogpt");
  const auto m = mmgpt::ModelFile::open(out);
  const auto& c = m.config();
  CHECK(c.n_layer == 2);
  CHECK(c.n_head == 3);
  CHECK(c.n_embd == 12);
  CHECK(c.n_ctx == 8);
  CHECK(c.vocab_size == 6);
  CHECK(c.gelu == mmgpt::GeluKind::Erf);
  CHECK(c.tied_lm_head);
  CHECK((c.qkv_bias && c.linear_bias && c.norm_bias));
  const auto& t = m.tokenizer();
  CHECK(t.kind == mmgpt::TokenizerKind::Char);
  CHECK(t.tokens == std::vector<std::string>{"\n", " ", "a", "b", "\xC3\xA9", "\xE2\x82\xAC"});
  CHECK(t.eos_id == -1);
  CHECK(s.tokenizer_source.find("meta.pkl") != std::string::npos);
  check_tensors(m, "nanogpt_char");
}

TEST_CASE("nanoGPT bias=False with a padded GPT-2 vocabulary gets the bundled GPT-2 tokenizer") {
  REQUIRE_MESSAGE(!mmgpt::bundled_data_dir().empty(),
                  "mmgpt_convert needs MMGPT_DATA_DIR: target_compile_definitions(mmgpt_convert PRIVATE "
                  "MMGPT_DATA_DIR=\"${PROJECT_SOURCE_DIR}/data\")");
  const std::string out = out_path("nanogpt_nobias");
  const ConvertSummary s = convert(fixture("nanogpt_nobias") + "/ckpt.pt", out);
  const auto m = mmgpt::ModelFile::open(out);
  const auto& c = m.config();
  CHECK_FALSE(c.qkv_bias);
  CHECK_FALSE(c.linear_bias);
  CHECK_FALSE(c.norm_bias);
  CHECK(c.vocab_size == 50304);
  CHECK(m.find("h.0.ln_1.bias") == nullptr);
  CHECK(m.tokenizer().kind == mmgpt::TokenizerKind::Gpt2Bpe);
  CHECK(m.tokenizer().tokens.size() == 50257);
  CHECK(m.tokenizer().merges.size() == 50000);
  CHECK(m.tokenizer().eos_id == 50256);
  CHECK(has_note(s, "bundled GPT-2"));
  check_tensors(m, "nanogpt_nobias");
}

TEST_CASE("nanoGPT with a small vocabulary and no tokenizer runs on ids; --tokenizer supplies one") {
  SUBCASE("none") {
    const std::string out = out_path("nanogpt_ids");
    const ConvertSummary s = convert(fixture("nanogpt_ids"), out);
    CHECK(s.tokenizer_kind == mmgpt::TokenizerKind::None);
    CHECK(s.tokenizer_source.empty());
    CHECK(has_note(s, "the model runs on token ids"));
    const auto m = mmgpt::ModelFile::open(out);
    CHECK(m.tokenizer().kind == mmgpt::TokenizerKind::None);
    check_tensors(m, "nanogpt_ids");
  }
  SUBCASE("--tokenizer DIR with vocab.json + merges.txt") {
    const std::string out = out_path("nanogpt_ids_tok");
    const ConvertSummary s = convert(fixture("nanogpt_ids"), out, "nanogpt", 0, fixture("hf_safetensors"));
    CHECK(s.tokenizer_kind == mmgpt::TokenizerKind::Gpt2Bpe);
    CHECK(mmgpt::ModelFile::open(out).tokenizer().tokens.size() == 5);
  }
  SUBCASE("--tokenizer meta.pkl") {
    const std::string out = out_path("nanogpt_ids_meta");
    const ConvertSummary s = convert(fixture("nanogpt_ids"), out, "auto", 0, fixture("nanogpt_char") + "/meta.pkl");
    CHECK(s.tokenizer_kind == mmgpt::TokenizerKind::Char);
    CHECK(mmgpt::ModelFile::open(out).tokenizer().tokens.size() == 6);
  }
}

TEST_CASE("llms-from-scratch GPTModel state_dict") {
  SUBCASE("qkv_bias") {
    const std::string out = out_path("lfs_qkv_bias");
    const ConvertSummary s = convert(fixture("lfs_qkv_bias"), out, "auto", 5);
    CHECK(s.layout == "llms-from-scratch");
    const auto m = mmgpt::ModelFile::open(out);
    const auto& c = m.config();
    CHECK(c.n_layer == 2);
    CHECK(c.n_head == 5);
    CHECK(c.n_embd == 10);
    CHECK(c.n_ff == 40);
    CHECK(c.vocab_size == 17);
    CHECK(c.n_ctx == 9);
    CHECK(c.qkv_bias);
    CHECK_FALSE(c.tied_lm_head);
    CHECK(c.gelu == mmgpt::GeluKind::Tanh);
    check_tensors(m, "lfs_qkv_bias");
  }
  SUBCASE("no qkv_bias, weights under model_state_dict") {
    const std::string out = out_path("lfs_no_qkv_bias");
    convert(fixture("lfs_no_qkv_bias") + "/gpt.pt", out, "llms-from-scratch", 2);
    const auto m = mmgpt::ModelFile::open(out);
    CHECK_FALSE(m.config().qkv_bias);
    CHECK(m.config().linear_bias);
    CHECK(m.config().n_layer == 3);
    check_tensors(m, "lfs_no_qkv_bias");
  }
}

TEST_CASE("refusals name the problem and leave no output file") {
  SUBCASE("llms-from-scratch without --n-head") {
    expect_failure(fixture("lfs_qkv_bias"), {"model.pth", "--n-head is required for llms-from-scratch"});
  }
  SUBCASE("--n-head that does not divide the width") {
    expect_failure(fixture("lfs_qkv_bias"), {"--n-head 3", "10"}, "auto", 3);
  }
  SUBCASE("--layout that does not match") {
    expect_failure(fixture("hf_safetensors"), {"model.safetensors", "llms-from-scratch", "tok_emb.weight"},
                   "llms-from-scratch", 2);
    expect_failure(fixture("hf_safetensors"), {"model.safetensors", "nanogpt", "transformer.wte.weight"}, "nanogpt");
    expect_failure(fixture("nanogpt_char"), {"ckpt.pt", "transformer.h.0.attn.c_attn.weight", "[36, 12]", "[12, 36]"},
                   "hf-gpt2");
  }
  SUBCASE("unknown --layout") { expect_failure(fixture("hf_safetensors"), {"--layout", "gpt3"}, "gpt3"); }
  SUBCASE("missing layer tensor") {
    expect_failure(fixture("bad_missing_tensor"), {"ckpt.pt", "transformer.h.1.mlp.c_fc.weight", "missing"});
  }
  SUBCASE("missing layer") { expect_failure(fixture("bad_layer_gap"), {"ckpt.pt", "layer 1 is missing"}); }
  SUBCASE("wrong shape") {
    expect_failure(fixture("bad_shape"), {"ckpt.pt", "transformer.h.1.ln_2.weight", "[5]", "[4]"});
  }
  SUBCASE("unknown extra key") {
    expect_failure(fixture("bad_extra_key"), {"ckpt.pt", "transformer.h.0.attn.rotary.weight", "unknown"});
  }
  SUBCASE("config.json disagreeing with the tensors") {
    expect_failure(fixture("bad_config_json"), {"config.json", "n_embd", "16", "8"});
  }
  SUBCASE("unsupported activation") { expect_failure(fixture("bad_activation"), {"config.json", "relu"}); }
  SUBCASE("meta.pkl with a gap in the ids") { expect_failure(fixture("bad_meta_gap"), {"meta.pkl", "id 2"}); }
  SUBCASE("character vocabulary larger than the model's") {
    expect_failure(fixture("bad_meta_big"), {"meta.pkl", "7 tokens", "6"});
  }
  SUBCASE("bad merges line") { expect_failure(fixture("bad_merges"), {"merges.txt", "line 3"}); }
  SUBCASE("input that does not exist") {
    expect_failure(fixture("no_such_thing.pt"), {"no_such_thing.pt", "no such file"});
  }
  SUBCASE("directory without a checkpoint") {
    expect_failure(fixture("bad_empty_dir"), {"bad_empty_dir", "no checkpoint"});
  }
  SUBCASE("directory with two checkpoints") {
    expect_failure(fixture("bad_two_checkpoints"), {"a.pt", "b.pt", "name one of them"});
  }
  SUBCASE("not a checkpoint") {
    expect_failure(fixture("bad_garbage"), {"weights.bin", "not a recognised checkpoint"});
  }
  SUBCASE("--tokenizer that does not exist") {
    expect_failure(fixture("nanogpt_ids"), {"nope.json", "no such"}, "auto", 0, fixture("nope.json"));
  }
}

TEST_CASE("a failed conversion leaves an existing output file untouched") {
  const std::string out = out_path("keep");
  std::ofstream(out) << "previous";
  CHECK_THROWS_AS(convert(fixture("bad_shape"), out), mmgpt::Error);
  std::ifstream in(out);
  std::string content;
  std::getline(in, content);
  CHECK(content == "previous");
  CHECK(std::distance(fs::directory_iterator(fs::path(out).parent_path()), fs::directory_iterator()) == 1);
}
