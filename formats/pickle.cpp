// The restricted unpickler: a stack machine over the pickle opcodes of
// protocols 0 to 5 that torch.save, meta.pkl and optimizer states use. It
// builds only pickle::Value trees; the only "calls" it performs are the
// allow-listed tensor rebuild functions and OrderedDict, implemented here.
#include "formats/pickle.hpp"

#include <charconv>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "formats/error.hpp"

namespace mmgpt::pickle {
namespace {

// Bounds that keep a hostile pickle from exhausting memory through the
// machine itself (data sizes are already bounded by the input length). A
// value costs about 150 bytes and each opcode byte can make one, so values
// and container items are capped, not just the stack: a few megabytes of
// NONE/APPEND would otherwise cost gigabytes. Real checkpoints and meta.pkl
// files hold thousands to a few hundred thousand values.
constexpr size_t kMaxStack = size_t(1) << 20;
constexpr size_t kMaxMemo = size_t(1) << 20;
constexpr size_t kMaxValues = size_t(1) << 20;
constexpr size_t kMaxItems = size_t(1) << 22;  // list/tuple items and dict entries, all together
constexpr int kMaxDepth = 512;
// A view may read fewer elements than its result holds only through zero
// strides; cap that expansion so a tiny storage cannot request terabytes.
constexpr uint64_t kMaxExpandedNumel = uint64_t(1) << 24;

enum Op : uint8_t {
  MARK = '(',
  STOP = '.',
  POP = '0',
  POP_MARK = '1',
  DUP = '2',
  FLOAT = 'F',
  INT = 'I',
  BININT = 'J',
  BININT1 = 'K',
  LONG = 'L',
  BININT2 = 'M',
  NONE = 'N',
  PERSID = 'P',
  BINPERSID = 'Q',
  REDUCE = 'R',
  STRING = 'S',
  BINSTRING = 'T',
  SHORT_BINSTRING = 'U',
  UNICODE = 'V',
  BINUNICODE = 'X',
  APPEND = 'a',
  BUILD = 'b',
  GLOBAL = 'c',
  DICT = 'd',
  EMPTY_DICT = '}',
  APPENDS = 'e',
  GET = 'g',
  BINGET = 'h',
  INST = 'i',
  LONG_BINGET = 'j',
  LIST = 'l',
  EMPTY_LIST = ']',
  OBJ = 'o',
  PUT = 'p',
  BINPUT = 'q',
  LONG_BINPUT = 'r',
  SETITEM = 's',
  TUPLE = 't',
  EMPTY_TUPLE = ')',
  SETITEMS = 'u',
  BINFLOAT = 'G',
  PROTO = 0x80,
  NEWOBJ = 0x81,
  EXT1 = 0x82,
  EXT2 = 0x83,
  EXT4 = 0x84,
  TUPLE1 = 0x85,
  TUPLE2 = 0x86,
  TUPLE3 = 0x87,
  NEWTRUE = 0x88,
  NEWFALSE = 0x89,
  LONG1 = 0x8a,
  LONG4 = 0x8b,
  BINBYTES = 'B',
  SHORT_BINBYTES = 'C',
  SHORT_BINUNICODE = 0x8c,
  BINUNICODE8 = 0x8d,
  BINBYTES8 = 0x8e,
  EMPTY_SET = 0x8f,
  ADDITEMS = 0x90,
  FROZENSET = 0x91,
  NEWOBJ_EX = 0x92,
  STACK_GLOBAL = 0x93,
  MEMOIZE = 0x94,
  FRAME = 0x95,
  BYTEARRAY8 = 0x96,
  NEXT_BUFFER = 0x97,
  READONLY_BUFFER = 0x98,
};

// How each opcode's inline argument is encoded (shared by the scanner).
enum class Arg { None, U1, U2, U4, U8, Line, TwoLines, Len1, Len4, Len8, Unknown };

Arg arg_of(uint8_t op) {
  switch (op) {
    case MARK:
    case STOP:
    case POP:
    case POP_MARK:
    case DUP:
    case NONE:
    case BINPERSID:
    case REDUCE:
    case APPEND:
    case BUILD:
    case DICT:
    case EMPTY_DICT:
    case APPENDS:
    case LIST:
    case EMPTY_LIST:
    case SETITEM:
    case TUPLE:
    case EMPTY_TUPLE:
    case SETITEMS:
    case NEWOBJ:
    case TUPLE1:
    case TUPLE2:
    case TUPLE3:
    case NEWTRUE:
    case NEWFALSE:
    case EMPTY_SET:
    case ADDITEMS:
    case FROZENSET:
    case NEWOBJ_EX:
    case STACK_GLOBAL:
    case MEMOIZE:
    case NEXT_BUFFER:
    case READONLY_BUFFER:
    case OBJ: return Arg::None;
    case BININT1:
    case BINGET:
    case BINPUT:
    case PROTO:
    case EXT1: return Arg::U1;
    case BININT2:
    case EXT2: return Arg::U2;
    case BININT:
    case LONG_BINGET:
    case LONG_BINPUT:
    case EXT4: return Arg::U4;
    case BINFLOAT:
    case FRAME: return Arg::U8;
    case FLOAT:
    case INT:
    case LONG:
    case PERSID:
    case STRING:
    case UNICODE:
    case GET:
    case PUT: return Arg::Line;
    case GLOBAL:
    case INST: return Arg::TwoLines;
    case SHORT_BINSTRING:
    case SHORT_BINUNICODE:
    case SHORT_BINBYTES:
    case LONG1: return Arg::Len1;
    case BINSTRING:
    case BINUNICODE:
    case BINBYTES:
    case LONG4: return Arg::Len4;
    case BINUNICODE8:
    case BINBYTES8:
    case BYTEARRAY8: return Arg::Len8;
    default: return Arg::Unknown;
  }
}

std::string hex_op(uint8_t op) {
  static const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[op >> 4] + digits[op & 15];
}

// Sequential bounds-checked reads over the pickle bytes.
struct Reader {
  const uint8_t* data;
  size_t size;
  const std::string& source;
  size_t pos = 0;
  size_t op_pos = 0;  // where the current opcode started, for messages

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(source + ": bad pickle: " + what + " (at byte " + std::to_string(op_pos) + ")");
  }
  size_t remaining() const { return size - pos; }
  uint64_t le(int n) {
    if (remaining() < static_cast<size_t>(n)) fail("truncated (needs " + std::to_string(n) + " more bytes)");
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | data[pos + i];
    pos += n;
    return v;
  }
  // A declared length is checked against what is left before anything is allocated.
  std::string_view take(uint64_t n) {
    if (n > remaining())
      fail("declared length " + std::to_string(n) + " exceeds the " + std::to_string(remaining()) + " bytes left");
    std::string_view s(reinterpret_cast<const char*>(data + pos), static_cast<size_t>(n));
    pos += static_cast<size_t>(n);
    return s;
  }
  std::string_view line() {
    const void* nl = std::memchr(data + pos, '\n', remaining());
    if (!nl) fail("unterminated text argument");
    const size_t n = static_cast<const uint8_t*>(nl) - (data + pos);
    std::string_view s(reinterpret_cast<const char*>(data + pos), n);
    pos += n + 1;
    return s;
  }
  uint64_t length_arg(Arg kind) {
    if (kind == Arg::Len1) return le(1);
    if (kind == Arg::Len8) return le(8);
    const int64_t n = static_cast<int32_t>(static_cast<uint32_t>(le(4)));
    if (n < 0) fail("negative length " + std::to_string(n));
    return static_cast<uint64_t>(n);
  }
};

// ---- the allow-list ---------------------------------------------------------

enum class Global {
  OrderedDict,
  RebuildTensor,
  RebuildTensorV2,
  RebuildParameter,
  RebuildParameterWithState,
  RebuildFromTypeV2,
  Type,
  TiktokenEncoding,  // tiktoken.core.Encoding: rebuilt as the dict of its pickled state
  CodecsEncode       // _codecs.encode(text, "latin1"): bytes as protocols 0 to 2 write them
};

const std::unordered_map<std::string, Global>& allow_list() {
  static const std::unordered_map<std::string, Global> table = [] {
    std::unordered_map<std::string, Global> t{
        {"collections.OrderedDict", Global::OrderedDict},
        {"torch._utils._rebuild_tensor", Global::RebuildTensor},
        {"torch._utils._rebuild_tensor_v2", Global::RebuildTensorV2},
        {"torch._utils._rebuild_parameter", Global::RebuildParameter},
        {"torch._utils._rebuild_parameter_with_state", Global::RebuildParameterWithState},
        {"torch._tensor._rebuild_from_type_v2", Global::RebuildFromTypeV2},
        {"torch.Tensor", Global::Type},
        {"torch.nn.parameter.Parameter", Global::Type},
        {"tiktoken.core.Encoding", Global::TiktokenEncoding},
        {"_codecs.encode", Global::CodecsEncode},
    };
    // Storage classes and dtypes only ever appear as data (persistent ids, metadata).
    for (const char* name :
         {"FloatStorage", "HalfStorage", "BFloat16Storage", "DoubleStorage", "LongStorage", "IntStorage",
          "ShortStorage", "CharStorage", "ByteStorage",     "BoolStorage",   "float32",     "float16",
          "bfloat16",     "float64",     "int64",           "int32",         "int16",       "int8",
          "uint8",        "bool"})
      t.emplace(std::string("torch.") + name, Global::Type);
    return t;
  }();
  return table;
}

using Ptr = std::shared_ptr<Value>;

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// ---- the machine ------------------------------------------------------------

class Machine {
 public:
  Machine(const uint8_t* data, size_t size, const std::string& source, const PersistentLoad& load,
          ElementBudget* budget)
      : r_{data, size, source}, load_(load), budget_(budget) {}

  ~Machine() {
    // On failure, containers may reference each other in cycles (a leak), or
    // nest a million levels deep (a recursive destructor would overflow the
    // stack); unlink them all so each is freed on its own.
    if (!done_)
      for (const Ptr& c : containers_) {
        c->items.clear();
        c->entries.clear();
      }
  }

  Ptr run() {
    for (;;) {
      r_.op_pos = r_.pos;
      if (r_.remaining() == 0) r_.fail("ended without a STOP opcode (truncated?)");
      const uint8_t op = r_.data[r_.pos++];
      if (op == STOP) break;
      step(op);
    }
    if (stack_.size() != 1 || !marks_.empty())
      r_.fail("STOP with " + std::to_string(stack_.size()) + " values on the stack, expected 1");
    std::unordered_map<const Value*, int> height;
    check_depth(stack_.back().get(), 0, height);
    done_ = true;
    return stack_.back();
  }

 private:
  Reader r_;
  const PersistentLoad& load_;
  std::vector<Ptr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ptr> memo_;
  std::unordered_map<const Value*, Global> globals_;  // objects pushed by GLOBAL, what they name
  std::unordered_set<const Value*> encodings_;        // tiktoken Encodings made by NEWOBJ, not yet BUILT
  std::vector<Ptr> containers_;                       // every list/tuple/dict made, to unlink on failure
  ElementBudget* budget_;                             // tensor data materialised by rebuilds, or nullptr
  // Rebuilds of the same view of the same storage (tied weights under several
  // keys) share one tensor instead of copying the data again.
  // The storage is held too, so that its address cannot be reused by another.
  using ViewKey = std::tuple<const HostTensor*, int64_t, std::vector<uint64_t>, std::vector<uint64_t>>;
  std::map<ViewKey, std::pair<std::shared_ptr<const HostTensor>, Ptr>> rebuilt_;
  size_t values_ = 0, items_ = 0;
  bool done_ = false;

  [[noreturn]] void fail(const std::string& what) const { r_.fail(what); }

  Ptr make(Value::Kind kind) {
    if (++values_ > kMaxValues) fail("more than " + std::to_string(kMaxValues) + " values");
    auto v = std::make_shared<Value>();
    v->kind = kind;
    return v;
  }
  void count_items(size_t n) {
    items_ += n;
    if (items_ > kMaxItems) fail("more than " + std::to_string(kMaxItems) + " list, tuple and dict items");
  }

  void push(Ptr v) {
    if (stack_.size() >= kMaxStack) fail("stack exceeds " + std::to_string(kMaxStack) + " values");
    stack_.push_back(std::move(v));
  }
  Ptr pop() {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) fail("stack underflow");
    Ptr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Ptr& top() {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) fail("stack underflow");
    return stack_.back();
  }
  std::vector<Ptr> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ptr> items(std::make_move_iterator(stack_.begin() + m), std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  Ptr container(Value::Kind kind) {
    Ptr v = make(kind);
    containers_.push_back(v);
    return v;
  }
  void memo_put(uint64_t index) {
    if (memo_.size() >= kMaxMemo && !memo_.count(index)) fail("memo exceeds " + std::to_string(kMaxMemo) + " entries");
    memo_[index] = top();
  }
  uint64_t memo_index(int64_t index) {  // protocol 0 GET/PUT: as CPython, a negative index is an error
    if (index < 0) fail("negative memo index " + std::to_string(index));
    return static_cast<uint64_t>(index);
  }
  Ptr memo_get(uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo index " + std::to_string(index) + " was never stored");
    return it->second;
  }

  Ptr make_int(int64_t v) {
    Ptr p = make(Value::Kind::Int);
    p->integer = v;
    return p;
  }
  Ptr make_float(double v) {
    Ptr p = make(Value::Kind::Float);
    p->real = v;
    return p;
  }
  Ptr make_bool(bool v) {
    Ptr p = make(Value::Kind::Bool);
    p->boolean = v;
    return p;
  }
  Ptr make_text(Value::Kind kind, std::string s) {
    Ptr p = make(kind);
    p->text = std::move(s);
    return p;
  }
  Ptr make_seq(Value::Kind kind, std::vector<Ptr> items) {
    Ptr p = container(kind);
    count_items(items.size());
    p->items.assign(items.begin(), items.end());
    return p;
  }

  // Little-endian two's complement of any width, which must fit in int64.
  int64_t decode_long(std::string_view b) {
    if (b.empty()) return 0;
    const bool negative = static_cast<uint8_t>(b.back()) & 0x80;
    for (size_t i = 8; i < b.size(); ++i)
      if (static_cast<uint8_t>(b[i]) != (negative ? 0xff : 0x00))
        fail("integer of " + std::to_string(b.size()) + " bytes does not fit in 64 bits");
    uint64_t v = negative ? ~uint64_t(0) : 0;
    const size_t n = std::min<size_t>(b.size(), 8);
    for (size_t i = 0; i < n; ++i) {
      v &= ~(uint64_t(0xff) << (8 * i));
      v |= uint64_t(static_cast<uint8_t>(b[i])) << (8 * i);
    }
    if (b.size() > 8 && (static_cast<int64_t>(v) < 0) != negative) fail("integer does not fit in 64 bits");
    return static_cast<int64_t>(v);
  }

  int64_t parse_decimal(std::string_view s, const char* what) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty())
      fail(std::string(what) + " '" + std::string(s.substr(0, 40)) + "' is not a 64-bit integer");
    return v;
  }

  // Protocol 0 STRING: a Python repr, quoted, with backslash escapes.
  std::string decode_repr(std::string_view s) {
    if (s.size() < 2 || (s.front() != '\'' && s.front() != '"') || s.back() != s.front())
      fail("STRING argument is not quoted");
    s = s.substr(1, s.size() - 2);
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 == s.size()) {
        out += s[i];
        continue;
      }
      const char c = s[++i];
      switch (c) {
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'x':
          if (i + 2 >= s.size() + 0 || hex_digit(s[i + 1]) < 0 || hex_digit(s[i + 2]) < 0)
            fail("bad \\x escape in STRING");
          out += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
          i += 2;
          break;
        default:
          if (c >= '0' && c <= '7') {
            int v = c - '0';
            for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
              v = v * 8 + (s[++i] - '0');
            out += static_cast<char>(v & 0xff);
          } else {
            out += c;  // \\ \' \" and unknown escapes keep the character
          }
      }
    }
    return out;
  }

  // Protocol 0 UNICODE: raw-unicode-escape (latin-1 bytes plus \uXXXX / \UXXXXXXXX).
  std::string decode_raw_unicode(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'u' || s[i + 1] == 'U')) {
        const size_t digits = s[i + 1] == 'u' ? 4 : 8;
        if (i + 2 + digits > s.size()) fail("bad \\u escape in UNICODE");
        uint32_t cp = 0;
        for (size_t k = 0; k < digits; ++k) {
          const int d = hex_digit(s[i + 2 + k]);
          if (d < 0) fail("bad \\u escape in UNICODE");
          cp = cp * 16 + static_cast<uint32_t>(d);
        }
        if (cp > 0x10ffff) fail("code point out of range in UNICODE");
        append_utf8(out, cp);
        i += 1 + digits;
      } else {
        append_utf8(out, static_cast<uint8_t>(s[i]));
      }
    }
    return out;
  }

  void push_global(const std::string& module, const std::string& name) {
    const std::string full = module + "." + name;
    const auto it = allow_list().find(full);
    if (it == allow_list().end())
      throw Error(r_.source + ": refused to load global '" + full +
                  "': only tensor rebuild functions, storage types, dtypes, collections.OrderedDict, "
                  "tiktoken.core.Encoding and _codecs.encode are allowed (nothing was executed)");
    Ptr v = make_text(Value::Kind::String, full);
    globals_.emplace(v.get(), it->second);
    push(std::move(v));
  }

  Global callable(const Ptr& f, const char* op) {
    const auto it = globals_.find(f.get());
    if (it == globals_.end()) fail(std::string(op) + " on a value that is not an allowed global");
    return it->second;
  }

  static const Value& arg(const Value& args, size_t i) { return *args.items[i]; }

  int64_t int_arg(const Value& v, const char* what) {
    if (v.kind != Value::Kind::Int) fail(std::string("tensor rebuild: ") + what + " is not an integer");
    return v.integer;
  }

  Ptr rebuild_tensor(const Value& args) {
    if (args.items.size() < 4) fail("tensor rebuild with " + std::to_string(args.items.size()) + " arguments");
    const Value& storage = arg(args, 0);
    if (storage.kind != Value::Kind::Tensor || !storage.tensor || storage.tensor->shape.size() != 1)
      fail("tensor rebuild: first argument is not a storage");
    const HostTensor& st = *storage.tensor;
    const uint64_t storage_numel = st.shape[0];
    const int64_t offset = int_arg(arg(args, 1), "storage offset");
    const Value& size = arg(args, 2);
    const Value& stride = arg(args, 3);
    auto is_seq = [](const Value& v) { return v.kind == Value::Kind::Tuple || v.kind == Value::Kind::List; };
    if (!is_seq(size) || !is_seq(stride) || size.items.size() != stride.items.size())
      fail("tensor rebuild: size and stride are not sequences of equal length");
    if (offset < 0) fail("tensor rebuild: negative storage offset " + std::to_string(offset));

    auto out = std::make_shared<HostTensor>();
    out->source_dtype = st.source_dtype;
    const size_t dims = size.items.size();
    std::vector<uint64_t> strides(dims);
    uint64_t numel = 1;
    unsigned __int128 last = static_cast<uint64_t>(offset);  // highest storage index read
    for (size_t d = 0; d < dims; ++d) {
      const int64_t n = int_arg(*size.items[d], "size");
      const int64_t s = int_arg(*stride.items[d], "stride");
      if (n < 0 || s < 0)
        fail("tensor rebuild: negative size " + std::to_string(n) + " or stride " + std::to_string(s));
      out->shape.push_back(static_cast<uint64_t>(n));
      strides[d] = static_cast<uint64_t>(s);
      if (n != 0 && numel > (uint64_t(1) << 62) / static_cast<uint64_t>(n))
        fail("tensor rebuild: element count overflows");
      numel *= static_cast<uint64_t>(n);
      if (n > 0) last += static_cast<unsigned __int128>(n - 1) * static_cast<uint64_t>(s);
    }
    if (numel > 0 && last >= storage_numel)
      fail("tensor rebuild: view (offset " + std::to_string(offset) + ") reads past the storage of " +
           std::to_string(storage_numel) + " elements");
    if (numel > storage_numel && numel > kMaxExpandedNumel)
      fail("tensor rebuild: " + std::to_string(numel) + " elements from a storage of " + std::to_string(storage_numel));

    const bool placeholder = !st.readable();
    ViewKey key{&st, offset, out->shape, strides};
    if (!placeholder) {
      if (const auto it = rebuilt_.find(key); it != rebuilt_.end()) return it->second.second;
      if (budget_) budget_->take(numel, r_.source);
      // Read on demand from the storage (its file stays mapped while the tensor lives).
      *out = strided_view(storage.tensor, static_cast<uint64_t>(offset), out->shape, strides);
    }
    Ptr v = make(Value::Kind::Tensor);
    v->tensor = std::move(out);
    if (!placeholder) rebuilt_.emplace(std::move(key), std::make_pair(storage.tensor, v));
    return v;
  }

  Ptr call(Global g, const Ptr& args_ptr) {
    if (args_ptr->kind != Value::Kind::Tuple) fail("REDUCE arguments are not a tuple");
    const Value& args = *args_ptr;
    switch (g) {
      case Global::OrderedDict: {
        Ptr d = container(Value::Kind::Dict);
        if (!args.items.empty()) {
          const Value& pairs = arg(args, 0);
          if (pairs.kind != Value::Kind::List && pairs.kind != Value::Kind::Tuple)
            fail("OrderedDict argument is not a list");
          count_items(pairs.items.size());
          for (const auto& p : pairs.items) {
            if ((p->kind != Value::Kind::Tuple && p->kind != Value::Kind::List) || p->items.size() != 2)
              fail("OrderedDict item is not a pair");
            d->entries.emplace_back(p->items[0], p->items[1]);
          }
        }
        return d;
      }
      case Global::RebuildTensor:
      case Global::RebuildTensorV2: return rebuild_tensor(args);
      case Global::RebuildParameter:
      case Global::RebuildParameterWithState:
        if (args.items.empty() || arg(args, 0).kind != Value::Kind::Tensor) fail("parameter rebuild without a tensor");
        return std::const_pointer_cast<Value>(args.items[0]);
      case Global::RebuildFromTypeV2: {
        // (func, new_type, args, state): the subclass type and its state are dropped.
        if (args.items.size() < 3 || arg(args, 2).kind != Value::Kind::Tuple)
          fail("bad _rebuild_from_type_v2 arguments");
        const Ptr func = std::const_pointer_cast<Value>(args.items[0]);
        const Global inner = callable(func, "_rebuild_from_type_v2");
        if (inner == Global::RebuildFromTypeV2 || inner == Global::Type) fail("bad _rebuild_from_type_v2 function");
        return call(inner, std::const_pointer_cast<Value>(args.items[2]));
      }
      case Global::CodecsEncode: {
        // Python 3 pickles bytes for protocols below 3 as encode(str(b, "latin1"), "latin1").
        if (args.items.size() != 2 || !arg(args, 0).is_str() || !arg(args, 1).is_str() ||
            (arg(args, 1).text != "latin1" && arg(args, 1).text != "latin-1"))
          fail("_codecs.encode is only supported as encode(text, 'latin1')");
        const std::string& text = arg(args, 0).text;
        std::string bytes;
        bytes.reserve(text.size());
        for (size_t i = 0; i < text.size(); ++i) {
          const auto c = static_cast<unsigned char>(text[i]);
          if (c < 0x80) {
            bytes.push_back(static_cast<char>(c));
          } else if ((c == 0xC2 || c == 0xC3) && i + 1 < text.size() &&
                     (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
            bytes.push_back(static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(text[++i]) & 0x3F)));
          } else {
            fail("_codecs.encode: the text has a character past U+00FF, which latin1 cannot encode");
          }
        }
        return make_text(Value::Kind::Bytes, std::move(bytes));
      }
      case Global::Type:
      case Global::TiktokenEncoding: break;
    }
    fail("calling a type or dtype is not supported");
  }

  void set_items(Value& dict, std::vector<Ptr>& kv) {
    if (dict.kind != Value::Kind::Dict) fail("SETITEM(S) on a value that is not a dict");
    if (kv.size() % 2) fail("SETITEMS with an odd number of values");
    count_items(kv.size() / 2);
    // A pickled dict never repeats a key, so entries are appended without a
    // (quadratic) duplicate search; Value::get returns the first match.
    for (size_t i = 0; i < kv.size(); i += 2) dict.entries.emplace_back(kv[i], kv[i + 1]);
  }

  void append_items(Value& list, std::vector<Ptr>& items) {
    if (list.kind != Value::Kind::List) fail("APPEND(S)/ADDITEMS on a value that is not a list");
    count_items(items.size());
    list.items.insert(list.items.end(), items.begin(), items.end());
  }

  void step(uint8_t op) {
    switch (op) {
      case PROTO: {
        const uint64_t v = r_.le(1);
        if (v > 5) fail("unsupported pickle protocol " + std::to_string(v));
        return;
      }
      case FRAME: {
        const uint64_t n = r_.le(8);
        if (n > r_.remaining())
          fail("frame of " + std::to_string(n) + " bytes exceeds the " + std::to_string(r_.remaining()) +
               " bytes left");
        return;
      }
      case MARK:
        if (marks_.size() >= kMaxStack) fail("too many MARKs");
        marks_.push_back(stack_.size());
        return;
      case POP:
        if (!marks_.empty() && stack_.size() == marks_.back())
          marks_.pop_back();  // as CPython: pops a mark
        else
          pop();
        return;
      case POP_MARK: pop_mark(); return;
      case DUP: {
        Ptr t = top();
        push(std::move(t));
        return;
      }
      case NONE: push(make(Value::Kind::None)); return;
      case NEWTRUE: push(make_bool(true)); return;
      case NEWFALSE: push(make_bool(false)); return;
      case INT: {
        const std::string_view s = r_.line();
        if (s == "01")
          push(make_bool(true));
        else if (s == "00")
          push(make_bool(false));
        else
          push(make_int(parse_decimal(s, "INT")));
        return;
      }
      case LONG: {
        std::string_view s = r_.line();
        if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
        push(make_int(parse_decimal(s, "LONG")));
        return;
      }
      case BININT: push(make_int(static_cast<int32_t>(static_cast<uint32_t>(r_.le(4))))); return;
      case BININT1: push(make_int(static_cast<int64_t>(r_.le(1)))); return;
      case BININT2: push(make_int(static_cast<int64_t>(r_.le(2)))); return;
      case LONG1:
      case LONG4: push(make_int(decode_long(r_.take(r_.length_arg(arg_of(op)))))); return;
      case BINFLOAT: {
        uint64_t bits = 0;  // big-endian
        for (char c : r_.take(8)) bits = (bits << 8) | static_cast<uint8_t>(c);
        double d;
        std::memcpy(&d, &bits, sizeof d);
        push(make_float(d));
        return;
      }
      case FLOAT: {
        const std::string_view s = r_.line();
        double d = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
        if (ec != std::errc() || end != s.data() + s.size())
          fail("FLOAT '" + std::string(s.substr(0, 40)) + "' is not a number");
        push(make_float(d));
        return;
      }
      case STRING: push(make_text(Value::Kind::String, decode_repr(r_.line()))); return;
      case UNICODE: push(make_text(Value::Kind::String, decode_raw_unicode(r_.line()))); return;
      case BINSTRING:
      case SHORT_BINSTRING:
      case BINUNICODE:
      case SHORT_BINUNICODE:
      case BINUNICODE8: push(make_text(Value::Kind::String, std::string(r_.take(r_.length_arg(arg_of(op)))))); return;
      case BINBYTES:
      case SHORT_BINBYTES:
      case BINBYTES8:
      case BYTEARRAY8: push(make_text(Value::Kind::Bytes, std::string(r_.take(r_.length_arg(arg_of(op)))))); return;
      case EMPTY_LIST: push(container(Value::Kind::List)); return;
      case EMPTY_SET: push(container(Value::Kind::List)); return;
      case APPEND: {
        std::vector<Ptr> one{pop()};
        append_items(*top(), one);
        return;
      }
      case APPENDS:
      case ADDITEMS: {
        auto items = pop_mark();
        append_items(*top(), items);
        return;
      }
      case LIST:
      case FROZENSET: push(make_seq(Value::Kind::List, pop_mark())); return;
      case EMPTY_TUPLE: push(make(Value::Kind::Tuple)); return;
      case TUPLE: push(make_seq(Value::Kind::Tuple, pop_mark())); return;
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        const size_t n = op - TUPLE1 + 1;
        std::vector<Ptr> items(n);
        for (size_t i = n; i-- > 0;) items[i] = pop();
        push(make_seq(Value::Kind::Tuple, std::move(items)));
        return;
      }
      case EMPTY_DICT: push(container(Value::Kind::Dict)); return;
      case DICT: {
        auto kv = pop_mark();
        Ptr d = container(Value::Kind::Dict);
        set_items(*d, kv);
        push(std::move(d));
        return;
      }
      case SETITEM: {
        std::vector<Ptr> kv(2);
        kv[1] = pop();
        kv[0] = pop();
        set_items(*top(), kv);
        return;
      }
      case SETITEMS: {
        auto kv = pop_mark();
        set_items(*top(), kv);
        return;
      }
      case GET: push(memo_get(memo_index(parse_decimal(r_.line(), "GET index")))); return;
      case BINGET: push(memo_get(r_.le(1))); return;
      case LONG_BINGET: push(memo_get(r_.le(4))); return;
      case PUT: memo_put(memo_index(parse_decimal(r_.line(), "PUT index"))); return;
      case BINPUT: memo_put(r_.le(1)); return;
      case LONG_BINPUT: memo_put(r_.le(4)); return;
      case MEMOIZE: memo_put(memo_.size()); return;
      case GLOBAL: {
        const std::string module(r_.line());
        const std::string name(r_.line());
        push_global(module, name);
        return;
      }
      case STACK_GLOBAL: {
        const Ptr name = pop(), module = pop();
        if (name->kind != Value::Kind::String || module->kind != Value::Kind::String)
          fail("STACK_GLOBAL arguments are not strings");
        push_global(module->text, name->text);
        return;
      }
      case REDUCE: {
        const Ptr args = pop();
        const Ptr f = pop();
        push(call(callable(f, "REDUCE"), args));
        return;
      }
      case NEWOBJ: {
        const Ptr args = pop();
        const Ptr cls = pop();
        const Global g = callable(cls, "NEWOBJ");
        if (g != Global::OrderedDict && g != Global::TiktokenEncoding)
          fail("NEWOBJ is only supported for collections.OrderedDict and tiktoken.core.Encoding");
        Ptr obj = container(Value::Kind::Dict);
        if (g == Global::TiktokenEncoding) encodings_.insert(obj.get());
        push(std::move(obj));
        return;
      }
      case BUILD: {
        const Ptr state = pop();
        Ptr& obj = top();
        // A tiktoken Encoding's state (its __getstate__): the dict of its
        // name, pattern, ranks and special tokens, or the name of one of
        // tiktoken's own encodings. Other states (OrderedDict._metadata,
        // tensor attributes) are not needed.
        if (encodings_.erase(obj.get())) {
          if (state->kind == Value::Kind::Dict) {
            count_items(state->entries.size());
            obj->entries = state->entries;
          } else {
            Ptr key = make_text(Value::Kind::String, "name");
            obj->entries.emplace_back(std::move(key), state);
          }
          obj->entries.emplace_back(make_text(Value::Kind::String, "__class__"),
                                    make_text(Value::Kind::String, "tiktoken.core.Encoding"));
        }
        return;
      }
      case PERSID:
      case BINPERSID: {
        const Ptr pid = op == PERSID ? make_text(Value::Kind::String, std::string(r_.line())) : pop();
        if (!load_) fail("persistent id in a pickle that has no storages");
        ValuePtr v = load_(*pid);
        if (!v) fail("persistent id could not be resolved");
        push(std::const_pointer_cast<Value>(v));
        return;
      }
      case READONLY_BUFFER: top(); return;  // a no-op on in-band data
      default:
        if (arg_of(op) == Arg::Unknown) fail("unknown pickle opcode " + hex_op(op));
        fail("unsupported pickle opcode " + hex_op(op) + " (not used by torch.save)");
    }
  }

  // Refuses cycles and bounds nesting so that consumers may recurse safely.
  // `height` memoizes finished nodes (-1 marks a node being visited).
  int check_depth(const Value* v, int depth, std::unordered_map<const Value*, int>& height) {
    if (v->items.empty() && v->entries.empty()) return 0;
    if (depth > kMaxDepth) fail("values nested deeper than " + std::to_string(kMaxDepth) + " levels");
    const auto [it, fresh] = height.emplace(v, -1);
    if (!fresh) {
      if (it->second < 0) fail("recursive (self-containing) structure");
      return it->second;
    }
    int h = 0;
    for (const auto& item : v->items) h = std::max(h, 1 + check_depth(item.get(), depth + 1, height));
    for (const auto& [k, val] : v->entries) {
      h = std::max(h, 1 + check_depth(k.get(), depth + 1, height));
      h = std::max(h, 1 + check_depth(val.get(), depth + 1, height));
    }
    if (depth + h > kMaxDepth) fail("values nested deeper than " + std::to_string(kMaxDepth) + " levels");
    height[v] = h;
    return h;
  }
};

}  // namespace

void ElementBudget::take(uint64_t n, const std::string& source) {
  if (n > left_)
    throw Error(source + ": the tensors would take more than " + std::to_string(limit_) +
                " float elements in memory, more than a file of this size can hold (" + std::to_string(limit_ - left_) +
                " taken, " + std::to_string(n) + " more asked): many tensors read the same storage bytes");
  left_ -= n;
}

ValuePtr unpickle(const void* data, size_t size, const std::string& source, const PersistentLoad& persistent_load,
                  ElementBudget* budget) {
  Machine m(static_cast<const uint8_t*>(data), size, source, persistent_load, budget);
  return m.run();
}

size_t pickle_length(const void* data, size_t size, const std::string& source) {
  Reader r{static_cast<const uint8_t*>(data), size, source};
  for (;;) {
    r.op_pos = r.pos;
    if (r.remaining() == 0) r.fail("ended without a STOP opcode (truncated?)");
    const uint8_t op = r.data[r.pos++];
    if (op == STOP) return r.pos;
    switch (const Arg a = arg_of(op)) {
      case Arg::None: break;
      case Arg::U1: r.le(1); break;
      case Arg::U2: r.le(2); break;
      case Arg::U4: r.le(4); break;
      case Arg::U8: r.le(8); break;
      case Arg::Line: r.line(); break;
      case Arg::TwoLines:
        r.line();
        r.line();
        break;
      case Arg::Len1:
      case Arg::Len4:
      case Arg::Len8: r.take(r.length_arg(a)); break;
      case Arg::Unknown: r.fail("unknown pickle opcode " + hex_op(op));
    }
  }
}

}  // namespace mmgpt::pickle
