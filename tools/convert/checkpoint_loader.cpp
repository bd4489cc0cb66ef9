#include "tools/convert/checkpoint_loader.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "formats/torch_checkpoint.hpp"

namespace fs = std::filesystem;

namespace mmgpt::convert {

const char* container_name(Container c) {
  switch (c) {
    case Container::TorchZip: return "torch zip";
    case Container::TorchLegacy: return "legacy torch.save";
    case Container::Safetensors: return "safetensors";
  }
  return "?";
}

namespace {

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return s;
}

bool is_checkpoint_extension(const fs::path& p) {
  const std::string ext = lower(p.extension().string());
  return ext == ".pt" || ext == ".pth" || ext == ".bin" || ext == ".safetensors";
}

}  // namespace

std::string find_checkpoint_file(const std::string& input) {
  std::error_code ec;
  const fs::file_status st = fs::status(input, ec);
  if (ec || !fs::exists(st)) throw Error(input + ": no such file or directory");
  if (!fs::is_directory(st)) return input;

  // Hugging Face names first; safetensors preferred as it needs no unpickling;
  // a whole file before a shard index.
  for (const char* name :
       {"model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json"}) {
    const fs::path p = fs::path(input) / name;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  std::vector<std::string> found;
  // nanochat's checkpoint directory: model_<step>.pt (beside meta_<step>.json
  // and optim_<step>_rank<r>.pt), the last step the one loaded.
  std::string nanochat;
  uint64_t last_step = 0;
  for (fs::directory_iterator it(input, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().filename().string();
    if (is_checkpoint_extension(it->path())) found.push_back(it->path().string());
    if (name.size() > 9 && name.rfind("model_", 0) == 0 && it->path().extension() == ".pt") {
      const std::string digits = name.substr(6, name.size() - 9);
      if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      const uint64_t step = std::stoull(digits);
      if (nanochat.empty() || step > last_step) nanochat = it->path().string(), last_step = step;
    }
  }
  if (ec) throw Error(input + ": cannot list directory: " + ec.message());
  if (!nanochat.empty()) return nanochat;
  if (found.empty())
    throw Error(input +
                ": no checkpoint in this directory (expected model.safetensors, pytorch_model.bin, "
                "nanochat's model_<step>.pt, or a single *.pt, *.pth, *.bin or *.safetensors file)");
  if (found.size() > 1) {
    std::sort(found.begin(), found.end());
    throw Error(input + ": " + std::to_string(found.size()) +
                " candidate checkpoints in this directory, name one of them: " + name_list(found));
  }
  return found[0];
}

bool is_shard_index(const std::string& file) {
  const std::string suffix = ".index.json";
  return file.size() > suffix.size() && file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<Shard> read_shard_index(const std::string& index_path) {
  const nlohmann::json j =
      nlohmann::json::parse(read_small_file(index_path, 64 << 20), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error(index_path + ": not a JSON object");
  if (!j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
    throw Error(index_path + ": no \"weight_map\" object of tensor names and shard files");
  std::error_code ec;
  const fs::path dir = fs::path(index_path).parent_path().empty() ? fs::path(".") : fs::path(index_path).parent_path();
  const fs::path real_dir = fs::canonical(dir, ec);
  if (ec) throw Error(index_path + ": cannot resolve its directory: " + ec.message());
  std::vector<Shard> shards;
  for (const auto& [tensor, value] : j["weight_map"].items()) {
    if (!value.is_string())
      throw Error(index_path + ": weight_map entry '" + tensor + "' is " + value.dump() + ", expected a file name");
    const std::string name = value.get<std::string>();
    if (name.empty() || name == "." || name == ".." || is_shard_index(name) || name.find('/') != std::string::npos ||
        name.find('\\') != std::string::npos || name.find('\0') != std::string::npos)
      throw Error(index_path + ": weight_map entry '" + tensor + "' names \"" + name +
                  "\", not a file in the index's own directory");
    auto it =
        std::find_if(shards.begin(), shards.end(), [&](const Shard& s) { return fs::path(s.path).filename() == name; });
    if (it == shards.end()) {
      const fs::path p = dir / name;
      const fs::path real = fs::canonical(p, ec);
      if (ec || !fs::is_regular_file(real, ec))
        throw Error(index_path + ": shard \"" + name + "\" (for tensor '" + tensor + "') is missing");
      if (real.parent_path() != real_dir)
        throw Error(index_path + ": shard \"" + name + "\" leads outside the index's directory (to " + real.string() +
                    ")");
      shards.push_back({p.string(), {}});
      it = shards.end() - 1;
    }
    it->tensors.push_back(tensor);
  }
  return shards;
}

Container detect_container(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(file + ": cannot open for reading");
  unsigned char head[16] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  const size_t got = size_t(in.gcount());

  if (got >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return Container::TorchZip;
  // Legacy torch.save starts with the pickled magic number 0x1950a86a20f9469cfc6c
  // (protocol 2, LONG1 of 10 bytes).
  static const unsigned char legacy[14] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c,
                                           0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  if (got >= sizeof legacy && std::memcmp(head, legacy, sizeof legacy) == 0) return Container::TorchLegacy;
  // safetensors: u64 little-endian header length, then a JSON object.
  if (got >= 9) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | head[i];
    std::error_code ec;
    const uintmax_t size = fs::file_size(file, ec);
    if (!ec && head[8] == '{' && n >= 2 && n <= size - 8) return Container::Safetensors;
  }
  throw Error(file + ": not a recognised checkpoint (neither a torch.save zip or legacy file nor safetensors)");
}

StateDict find_state_dict(const pickle::Value& root, const std::string& file, std::string* weights_key,
                          std::vector<std::string>* skipped) {
  if (!root.is_dict()) throw Error(file + ": the checkpoint's top-level object is not a dict of tensors");
  auto count_tensors = [](const pickle::Value& d) {
    size_t n = 0;
    for (const auto& [k, v] : d.entries) n += (v && v->is_tensor()) ? 1 : 0;
    return n;
  };

  // Training scripts wrap the weights: nanoGPT under 'model', others under
  // 'state_dict' / 'model_state_dict', beside optimizer state and settings
  // (which may hold stray tensors: nanoGPT's best_val_loss is a 0-d tensor),
  // so a named dict of tensors wins over the root's own tensors.
  std::vector<std::string> candidates;
  for (const char* name : {"model", "state_dict", "model_state_dict"}) {
    const pickle::Value* v = root.get(name);
    if (v && v->is_dict() && count_tensors(*v) > 0) candidates.push_back(name);
  }
  if (candidates.size() > 1)
    throw Error(file + ": ambiguous checkpoint: several entries hold tensors (" + name_list(candidates) +
                "); extract the model's state dict and convert that");
  const std::string key = candidates.empty() ? std::string() : candidates[0];
  const pickle::Value* dict = key.empty() ? &root : root.get(key);
  if (key.empty() && count_tensors(root) == 0) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : root.entries)
      if (k && k->is_str()) keys.push_back("'" + k->text + "'");
    throw Error(file +
                ": no model weights found: the top-level dict holds no tensors and no dict of tensors under "
                "'model', 'state_dict' or 'model_state_dict' (its keys: " +
                (keys.empty() ? std::string("none") : name_list(keys)) + ")");
  }

  StateDict out;
  for (const auto& [k, v] : dict->entries) {
    if (!k || !k->is_str())
      throw Error(file + ": the state dict" + (key.empty() ? "" : " under '" + key + "'") + " has a non-string key");
    if (v && v->is_tensor())
      out.entries.emplace_back(k->text, v->tensor);
    else if (skipped)
      skipped->push_back(k->text);
  }
  if (weights_key) *weights_key = key;
  return out;
}

void strip_wrapper_prefixes(StateDict& weights, const std::string& file) {
  std::set<std::string> seen;
  for (auto& [name, tensor] : weights.entries) {
    const std::string original = name;
    for (bool again = true; again;) {
      again = false;
      for (std::string_view prefix : {std::string_view("_orig_mod."), std::string_view("module.")})
        if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
          name.erase(0, prefix.size());
          again = true;
        }
    }
    if (!seen.insert(name).second)
      throw Error(file + ": tensor '" + original + "' duplicates '" + name +
                  "' once the _orig_mod./module. prefixes are removed");
  }
}

namespace {

// Every shard an index names, loaded and checked against it: each tensor in
// the shard the index says, none twice, none unlisted; all shards of one container.
LoadedCheckpoint load_shards(const std::string& index) {
  LoadedCheckpoint ck;
  ck.file = index;
  std::set<std::string> seen;
  bool first = true;
  for (const Shard& shard : read_shard_index(index)) {
    LoadedCheckpoint part = load_checkpoint(shard.path);
    if (first) {
      ck.container = part.container;
      first = false;
    } else if (part.container != ck.container) {
      throw Error(index + ": shard " + shard.path + " is " + container_name(part.container) + ", the others " +
                  container_name(ck.container));
    }
    const std::set<std::string> listed(shard.tensors.begin(), shard.tensors.end());
    for (const std::string& name : shard.tensors)
      if (!part.weights.has(name))
        throw Error(index + ": tensor '" + name + "' is not in shard " + shard.path + ", where the index puts it");
    for (auto& [name, tensor] : part.weights.entries) {
      if (!listed.count(name))
        throw Error(index + ": shard " + shard.path + " holds tensor '" + name +
                    "', which the index does not put there");
      if (!seen.insert(name).second) throw Error(index + ": tensor '" + name + "' is in more than one shard");
      ck.weights.entries.emplace_back(name, std::move(tensor));
    }
    ck.skipped.insert(ck.skipped.end(), part.skipped.begin(), part.skipped.end());
  }
  return ck;
}

}  // namespace

LoadedCheckpoint load_checkpoint(const std::string& file) {
  if (is_shard_index(file)) return load_shards(file);
  LoadedCheckpoint ck;
  ck.file = file;
  ck.container = detect_container(file);
  if (ck.container == Container::Safetensors) {
    for (auto& [name, tensor] : load_safetensors(file))
      ck.weights.entries.emplace_back(name, std::make_shared<HostTensor>(std::move(tensor)));
  } else {
    ck.root = load_torch_file(file);
    if (!ck.root) throw Error(file + ": empty checkpoint");
    ck.weights = find_state_dict(*ck.root, file, &ck.weights_key, &ck.skipped);
  }
  if (ck.weights.entries.empty()) throw Error(file + ": the checkpoint holds no tensors");
  strip_wrapper_prefixes(ck.weights, file);
  return ck;
}

}  // namespace mmgpt::convert
