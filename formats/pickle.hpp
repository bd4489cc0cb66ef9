#pragma once
// A restricted unpickler: a small stack machine for the pickle opcodes of
// protocols 2 to 5 that torch.save, meta.pkl files and optimizer states use.
// It executes nothing. GLOBAL/STACK_GLOBAL may only name an allow-listed
// global (torch tensor rebuild functions, storage types, collections.OrderedDict,
// tiktoken's Encoding, _codecs.encode of latin1 text, ...); any other is
// refused by name with mmgpt::Error before anything runs.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "formats/pickle_value.hpp"

namespace mmgpt::pickle {

// Resolves a persistent id (torch storages): receives the id tuple, returns the value to push.
using PersistentLoad = std::function<ValuePtr(const Value& pid)>;

// Caps the float elements one load may materialise (storages converted to f32
// and the tensors rebuilt from them). Each storage byte is read into at most
// one element and each tensor usually copies its own slice, so real files
// need at most about two elements per file byte; without a cap, a small file
// could rebuild one big storage a million times. take() throws mmgpt::Error,
// naming `source`, when the budget is spent.
class ElementBudget {
 public:
  explicit ElementBudget(uint64_t limit) : limit_(limit), left_(limit) {}
  void take(uint64_t n, const std::string& source);

 private:
  uint64_t limit_, left_;
};

// `source` names the file (or zip entry) in error messages. Tensor rebuilds
// draw on `budget` when one is given; identical views of one storage are
// rebuilt once and shared.
ValuePtr unpickle(const void* data, size_t size, const std::string& source, const PersistentLoad& persistent_load = {},
                  ElementBudget* budget = nullptr);

// Added for the legacy torch.save format, which is several pickles in a row:
// the length of the pickle starting at `data` (up to and including its STOP
// opcode), found by walking the opcodes without building anything.
size_t pickle_length(const void* data, size_t size, const std::string& source);

// Conventions of unpickle()'s results beyond pickle_value.hpp:
// - An allow-listed global that ends up inside the data (a storage type or a
//   dtype in a persistent id) is a String "module.name", e.g. "torch.FloatStorage".
// - Sets and frozensets are Lists; OrderedDict is a Dict; BUILD state is ignored,
//   except a tiktoken.core.Encoding's: the Encoding is the Dict of its state
//   (name, pat_str, mergeable_ranks, special_tokens; or name alone, for one
//   tiktoken pickles by reference) with "__class__": "tiktoken.core.Encoding".
// - _codecs.encode(text, "latin1") (bytes in protocols 0 to 2) is the Bytes.
// - Tensor rebuild functions take their storage as a 1-D Tensor value (what a
//   PersistentLoad returns). A storage whose data is empty although its shape is
//   not is a placeholder: tensors rebuilt from it are validated and shaped but
//   carry no data (used to read persistent ids before storage bytes are located).
// - Recursive (cyclic) structures are refused; nesting depth is bounded.

}  // namespace mmgpt::pickle
