#pragma once
// From what the user typed to a flat state dict: find the checkpoint file in
// a directory, recognise its container by content (never by extension), load
// it, find the model weights inside (root dict, or under 'model' /
// 'state_dict' / 'model_state_dict') and strip wrapper prefixes
// (`_orig_mod.` from torch.compile, `module.` from DDP).
#include <string>
#include <vector>

#include "formats/pickle_value.hpp"
#include "tools/convert/state_dict.hpp"

namespace mmgpt::convert {

enum class Container { TorchZip, TorchLegacy, Safetensors };
const char* container_name(Container c);

// `input` itself when it is a file; for a directory, model.safetensors, else
// pytorch_model.bin, else the shard index model.safetensors.index.json, else
// pytorch_model.bin.index.json, else its only *.pt / *.pth / *.bin /
// *.safetensors file.
std::string find_checkpoint_file(const std::string& input);

// A Hugging Face shard index ({"metadata": ..., "weight_map": {tensor: file}}):
// its shard files in order of first mention, each with the tensors the index
// puts in it. A file name must be a plain name in the index's own directory
// (no path separators, no "..", not a link leading out of it) that exists.
struct Shard {
  std::string path;
  std::vector<std::string> tensors;
};
std::vector<Shard> read_shard_index(const std::string& index_path);
bool is_shard_index(const std::string& file);  // a name ending in ".index.json"

// Reads the first bytes of `file`: zip magic, legacy torch.save magic, or a
// safetensors header. Throws naming the file when it is none of them.
Container detect_container(const std::string& file);

struct LoadedCheckpoint {
  std::string file;
  Container container = Container::Safetensors;
  StateDict weights;                 // tensors only, wrapper prefixes stripped
  pickle::ValuePtr root;             // torch files: the unpickled top-level object (nanoGPT's model_args lives here)
  std::string weights_key;           // "" when the weights are the root dict, else the key they sat under
  std::vector<std::string> skipped;  // non-tensor entries of the weights dict that were left out
};

LoadedCheckpoint load_checkpoint(const std::string& file);

// The state dict inside an unpickled torch object (exposed for tests).
StateDict find_state_dict(const pickle::Value& root, const std::string& file, std::string* weights_key,
                          std::vector<std::string>* skipped);

// Strips `_orig_mod.` and `module.` from the front of every key (any order, repeated);
// two keys that become equal are an error.
void strip_wrapper_prefixes(StateDict& weights, const std::string& file);

}  // namespace mmgpt::convert
