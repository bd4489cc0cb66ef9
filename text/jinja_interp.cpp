// The chat-template interpreter's statements, expressions, operators, the
// sandbox's attribute and item access, and macro calls (see jinja_interp.hpp).
#include "text/jinja_interp.hpp"

#include <algorithm>
#include <cmath>

namespace mmgpt::jinja {

namespace {

// Recursion of expressions, statements and macro calls together; keeps the
// C++ stack bounded whatever max_depth the caller asks for.
constexpr uint32_t kMaxEvalDepth = 3000;

struct DepthGuard {
  uint32_t& depth;
  explicit DepthGuard(uint32_t& d) : depth(d) {
    if (++depth > kMaxEvalDepth) raise("the template nests too deeply while rendering");
  }
  ~DepthGuard() { --depth; }
};

// Python's own errors for operands of the wrong type.
[[noreturn]] void unsupported_operands(const char* op, const Value& a, const Value& b) {
  raise(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

[[noreturn]] void overflow() { raise("integer overflow (past int64): Python's unbounded integers are not supported"); }
int64_t add_i(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub_i(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul_i(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

// Python's floor division and modulo of ints (rounding towards minus infinity).
int64_t floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
double float_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0) {
    if ((b < 0) != (r < 0)) r += b;
  } else {
    r = std::copysign(0.0, b);
  }
  return r;
}

// markupsafe.escape: what `+` does to a plain string joined to a Markup one.
std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::string html_escape_text(const std::string& s) { return html_escape(s); }

// --- scopes

Value* Scope::find(std::string_view name) {
  for (Scope* s = this; s; s = s->parent.get())
    for (auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars)
    if (k == name) {
      v = std::move(value);
      return;
    }
  vars.emplace_back(name, std::move(value));
}

std::string LoopObject::repr() const {
  return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(items->size()) + ">";
}

// --- arguments

const Value* Args::get(size_t index, const char* name) {
  const Value* found = index < pos_.size() ? &pos_[index] : nullptr;
  for (const auto& [k, v] : kw_)
    if (k == name) {
      if (found) raise(what_ + "() got multiple values for argument '" + name + "'");
      found = &v;
    }
  return found;
}

void Args::check(size_t count, std::initializer_list<const char*> names) const {
  if (pos_.size() > count)
    raise(what_ + "() takes at most " + std::to_string(count) + " positional argument(s) (" +
          std::to_string(pos_.size()) + " given)");
  for (const auto& kv : kw_) {
    const std::string& k = kv.first;
    if (std::find_if(names.begin(), names.end(), [&](const char* n) { return k == n; }) == names.end())
      raise(what_ + "() got an unexpected keyword argument '" + k + "'");
  }
}

// --- limits

void Interpreter::step(uint64_t n) {
  steps_ += n + (n == 0 ? 1 : 0);
  if (steps_ > limits_.max_steps)
    raise("the template ran past its limit of " + std::to_string(limits_.max_steps) + " steps (max_steps)");
}

void Interpreter::check_size(uint64_t bytes) {
  if (bytes > limits_.max_output_bytes)
    raise("a string of " + std::to_string(bytes) + " bytes would pass the output limit of " +
          std::to_string(limits_.max_output_bytes) + " bytes (max_output_bytes)");
}

void Interpreter::check_items(uint64_t items) {
  // A list is held to the output limit too, counting each item as a byte.
  if (items > limits_.max_output_bytes)
    raise("a list of " + std::to_string(items) + " items would pass the limit of " +
          std::to_string(limits_.max_output_bytes) + " (max_output_bytes)");
}

void Interpreter::append(std::string& out, std::string_view text) {
  check_size(out.size() + text.size());
  step(text.size() / 64);
  out += text;
}

// --- rendering

std::string Interpreter::render(const Body& body, const Value& variables) {
  struct EmptyNamespaces {
    std::vector<std::weak_ptr<NamespaceObject>>& all;
    ~EmptyNamespaces() {
      for (auto& w : all) {
        Dict attrs;
        if (auto ns = w.lock()) std::swap(attrs, ns->attrs);  // destroyed here, after the namespace lets go
      }
    }
  } empty_namespaces{namespaces_};
  const TextLimit text_limit(limits_.max_output_bytes);
  variables_ = variables.d.get();
  auto scope = std::make_shared<Scope>();
  std::string out;
  exec(body, scope, out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
  for (const auto& n : body) {
    Flow f = exec_node(*n, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

std::string Interpreter::render_body(const Body& body, const std::shared_ptr<Scope>& parent) {
  auto inner = std::make_shared<Scope>();
  inner->parent = parent;
  std::string out;
  exec(body, inner, out);
  return out;
}

Interpreter::Flow Interpreter::exec_node(const Node& n, const std::shared_ptr<Scope>& scope, std::string& out) {
  DepthGuard guard(eval_depth_);
  line_ = n.line;
  step();
  switch (n.type) {
    case NodeType::Data: append(out, n.text); break;
    case NodeType::Output:
      for (const auto& e : n.exprs) {
        const std::string text = py_str(eval(*e, scope));
        line_ = n.line;
        append(out, text);
      }
      break;
    case NodeType::If:
      for (size_t k = 0; k < n.bodies.size(); ++k) {
        if (k == n.exprs.size() || truthy(eval(*n.exprs[k], scope))) return exec(n.bodies[k], scope, out);
      }
      break;
    case NodeType::For: exec_for(n, scope, out); break;
    case NodeType::Set: assign(n.target, eval(*n.exprs[0], scope), *scope); break;
    case NodeType::SetBlock: {
      Value v = string(render_body(n.bodies[0], scope));
      if (n.filter) v = eval(*n.filter, scope, &v);
      line_ = n.line;
      assign(n.target, v, *scope);
      break;
    }
    case NodeType::FilterBlock: {
      Value v = string(render_body(n.bodies[0], scope));
      append(out, py_str(eval(*n.filter, scope, &v)));
      break;
    }
    case NodeType::Macro: {
      auto m = std::make_shared<MacroObject>();
      m->name = n.target.name;
      m->node = &n;
      m->closure = scope;
      scope->set(n.target.name, Value::object(std::move(m)));
      break;
    }
    case NodeType::CallBlock: {
      // caller() renders the block's body, with the block's own parameters.
      auto caller = std::make_shared<MacroObject>();
      caller->name = "caller";
      caller->node = &n;
      caller->first_default = 1;
      caller->closure = scope;
      const Expr& call = *n.exprs[0];
      Value callee = eval(*call.args[0], scope);
      ValueList args;
      for (size_t k = 1; k < call.args.size(); ++k) args.push_back(eval(*call.args[k], scope));
      Kwargs kwargs;
      for (const auto& [k, e] : call.kwargs) kwargs.emplace_back(k, eval(*e, scope));
      line_ = n.line;
      if (callee.kind != Kind::Object || callee.o->type != Object::Type::Macro)
        raise("{% call %} needs a macro, not a " + std::string(type_name(callee)));
      Value c = Value::object(caller);
      append(out, py_str(call_macro(static_cast<const MacroObject&>(*callee.o), std::move(args), std::move(kwargs), &c)));
      break;
    }
    case NodeType::With: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      ValueList values;
      for (const auto& e : n.exprs) values.push_back(eval(*e, scope));
      for (size_t k = 0; k < n.targets.size(); ++k) assign(n.targets[k], values[k], *inner);
      return exec(n.bodies[0], inner, out);
    }
    case NodeType::Scope: return exec(n.bodies[0], scope, out);
    case NodeType::Break: return Flow::Break;
    case NodeType::Continue: return Flow::Continue;
  }
  return Flow::Normal;
}

void Interpreter::exec_for(const Node& n, const std::shared_ptr<Scope>& scope, std::string& out) {
  ValueList all = iterate(eval(*n.exprs[0], scope));
  // `for x in xs if cond`: the loop (and loop.index, loop.length) sees only the items that pass.
  if (n.exprs[1]) {
    ValueList kept;
    for (Value& item : all) {
      step();
      auto test_scope = std::make_shared<Scope>();
      test_scope->parent = scope;
      assign(n.target, item, *test_scope);
      if (truthy(eval(*n.exprs[1], test_scope))) kept.push_back(std::move(item));
    }
    all = std::move(kept);
  }
  if (all.empty()) {
    exec(n.bodies[1], scope, out);
    return;
  }
  auto loop = std::make_shared<LoopObject>();
  loop->items = std::make_shared<const ValueList>(std::move(all));
  const Value loop_value = Value::object(loop);
  for (size_t k = 0; k < loop->items->size(); ++k) {
    step();
    line_ = n.line;
    loop->index0 = k;
    // Each iteration has its own variables: a set inside the body does not outlive it.
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    inner->set("loop", loop_value);
    assign(n.target, (*loop->items)[k], *inner);
    if (exec(n.bodies[0], inner, out) == Flow::Break) break;
  }
  loop->last_changed = Value();  // it may hold the loop itself (loop.changed(loop))
}

void Interpreter::assign(const Target& t, const Value& v, Scope& scope) {
  switch (t.type) {
    case Target::Type::Name: scope.set(t.name, v); return;
    case Target::Type::NsAttr: {
      Value* ns = scope.find(t.name);
      Value root = ns ? *ns : Value();
      if (!ns && variables_) {
        if (const Value* g = variables_->find(std::string_view(t.name))) root = *g;
      }
      if (root.kind != Kind::Object || root.o->type != Object::Type::Namespace)
        raise("cannot assign attribute on non-namespace object");
      static_cast<NamespaceObject&>(*root.o).attrs.set(Value::string(t.attr), v);
      return;
    }
    case Target::Type::Tuple: {
      ValueList items = iterate(v);
      if (items.size() < t.items.size())
        raise("not enough values to unpack (expected " + std::to_string(t.items.size()) + ", got " +
              std::to_string(items.size()) + ")");
      if (items.size() > t.items.size())
        raise("too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
      for (size_t k = 0; k < items.size(); ++k) assign(t.items[k], items[k], scope);
      return;
    }
  }
}

// --- expressions

Value Interpreter::lookup(const std::string& name, const std::shared_ptr<Scope>& scope) {
  if (Value* v = scope->find(name)) return *v;
  if (variables_)
    if (const Value* v = variables_->find(std::string_view(name))) return *v;
  using Fn = CallableObject::Fn;
  static const std::pair<const char*, Fn> kGlobals[] = {
      {"range", Fn::Range},
      {"namespace", Fn::Namespace},
      {"dict", Fn::Dict},
      {"raise_exception", Fn::RaiseException},
      {"strftime_now", Fn::StrftimeNow}};
  for (const auto& [n, fn] : kGlobals)
    if (name == n) return Value::object(std::make_shared<CallableObject>(fn));
  if (name == "cycler" || name == "joiner" || name == "lipsum")
    raise("the global '" + name + "' is not supported in chat templates");
  return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* subject) {
  DepthGuard guard(eval_depth_);
  line_ = e.line;
  step();
  return eval_inner(e, scope, subject);
}

Value Interpreter::eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* subject) {
  switch (e.type) {
    case ExprType::Const: return e.value;
    case ExprType::Name: return lookup(e.name, scope);
    case ExprType::List:
    case ExprType::Tuple: {
      ValueList items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      Value v = Value::list(std::move(items), e.type == ExprType::Tuple);
      return v;
    }
    case ExprType::Dict: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], scope);
        d.set(std::move(key), eval(*e.args[k + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprType::Attr: {
      Value obj = eval(*e.args[0], scope);
      line_ = e.line;
      return get_attr(obj, e.name);
    }
    case ExprType::Item: {
      Value obj = eval(*e.args[0], scope);
      Value key = eval(*e.args[1], scope);
      line_ = e.line;
      return get_item(obj, key);
    }
    case ExprType::Slice: {
      Value obj = eval(*e.args[0], scope);
      Value parts[3];
      for (int k = 0; k < 3; ++k) parts[k] = e.args[k + 1] ? eval(*e.args[k + 1], scope) : Value::none();
      line_ = e.line;
      return slice(obj, parts[0], parts[1], parts[2]);
    }
    case ExprType::Call: {
      Value callee = eval(*e.args[0], scope);
      ValueList args;
      for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k], scope));
      Kwargs kwargs;
      for (const auto& [k, a] : e.kwargs) kwargs.emplace_back(k, eval(*a, scope));
      line_ = e.line;
      return call(callee, std::move(args), std::move(kwargs));
    }
    case ExprType::Filter:
    case ExprType::Test: {
      Value subj = e.args[0] ? eval(*e.args[0], scope, subject) : (subject ? *subject : Value());
      ValueList args;
      for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k], scope));
      Kwargs kwargs;
      for (const auto& [k, a] : e.kwargs) kwargs.emplace_back(k, eval(*a, scope));
      line_ = e.line;
      if (e.type == ExprType::Filter) return filter(e.id, subj, std::move(args), std::move(kwargs));
      return Value::boolean(test(e.id, subj, std::move(args), std::move(kwargs)));
    }
    case ExprType::Neg:
    case ExprType::Pos: {
      Value v = eval(*e.args[0], scope);
      line_ = e.line;
      if (v.is_undefined()) raise_undefined(v);
      const char* op = e.type == ExprType::Neg ? "-" : "+";
      if (v.kind == Kind::Float) return Value::number(e.type == ExprType::Neg ? -v.f : v.f);
      if (v.kind == Kind::Int || v.kind == Kind::Bool) {
        if (e.type == ExprType::Pos) return Value::integer(v.as_int());
        return Value::integer(sub_i(0, v.as_int()));
      }
      raise(std::string("bad operand type for unary ") + op + ": '" + type_name(v) + "'");
    }
    case ExprType::Not: return Value::boolean(!truthy(eval(*e.args[0], scope)));
    case ExprType::And: {
      Value a = eval(*e.args[0], scope);
      return truthy(a) ? eval(*e.args[1], scope) : a;
    }
    case ExprType::Or: {
      Value a = eval(*e.args[0], scope);
      return truthy(a) ? a : eval(*e.args[1], scope);
    }
    case ExprType::Cond: {
      if (truthy(eval(*e.args[0], scope))) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprType::Concat: {
      std::string s;
      for (const auto& a : e.args) {
        s += py_str(eval(*a, scope));
        check_size(s.size());
      }
      return string(std::move(s));
    }
    case ExprType::Compare: {
      Value left = eval(*e.args[0], scope);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k + 1], scope);
        line_ = e.line;
        if (!compare(e.ops[k], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    default: {
      Value a = eval(*e.args[0], scope);
      Value b = eval(*e.args[1], scope);
      line_ = e.line;
      return binary(e.type, a, b);
    }
  }
}

// --- operators

Value Interpreter::binary(ExprType op, const Value& a, const Value& b) {
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  const bool ints = (a.kind == Kind::Int || a.kind == Kind::Bool) && (b.kind == Kind::Int || b.kind == Kind::Bool);
  const bool nums = a.is_number() && b.is_number();
  switch (op) {
    case ExprType::Add:
      if (ints) return Value::integer(add_i(a.as_int(), b.as_int()));
      if (nums) return Value::number(a.as_double() + b.as_double());
      if (a.kind == Kind::String && b.kind == Kind::String) {
        // A Markup string escapes the plain one it is joined to (markupsafe's __add__/__radd__).
        const bool markup = a.b || b.b;
        std::string s = (markup && !a.b ? html_escape(*a.s) : *a.s) + (markup && !b.b ? html_escape(*b.s) : *b.s);
        check_size(s.size());
        Value v = string(std::move(s));
        v.b = markup;
        return v;
      }
      if (a.kind == Kind::String) raise(std::string("can only concatenate str (not \"") + type_name(b) + "\") to str");
      if (a.is_sequence() && a.origin == Origin::Plain) {
        if (b.kind != a.kind || b.origin != Origin::Plain)
          raise(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) + "\") to " +
                type_name(a));
        check_items(a.l->size() + b.l->size());
        ValueList items = *a.l;
        items.insert(items.end(), b.l->begin(), b.l->end());
        step(items.size() / 8);
        return Value::list(std::move(items), a.kind == Kind::Tuple);
      }
      unsupported_operands("+", a, b);
    case ExprType::Sub:
      if (ints) return Value::integer(sub_i(a.as_int(), b.as_int()));
      if (nums) return Value::number(a.as_double() - b.as_double());
      unsupported_operands("-", a, b);
    case ExprType::Mul: {
      if (ints) return Value::integer(mul_i(a.as_int(), b.as_int()));
      if (nums) return Value::number(a.as_double() * b.as_double());
      const Value* seq = (a.kind == Kind::Int || a.kind == Kind::Bool) ? &b : &a;
      const Value* count = seq == &a ? &b : &a;
      const bool repeatable = seq->kind == Kind::String || (seq->is_sequence() && seq->origin == Origin::Plain);
      if (repeatable && (count->kind == Kind::Int || count->kind == Kind::Bool)) {
        const int64_t n = std::max<int64_t>(0, count->as_int());
        if (seq->kind == Kind::String) {
          const uint64_t total = static_cast<uint64_t>(n) * seq->s->size();
          if (n > 0 && total / static_cast<uint64_t>(n) != seq->s->size()) check_size(UINT64_MAX);
          check_size(total);
          std::string s;
          s.reserve(total);
          for (int64_t k = 0; k < n; ++k) s += *seq->s;
          Value v = string(std::move(s));
          v.b = seq->b;
          return v;
        }
        const uint64_t total = static_cast<uint64_t>(n) * seq->l->size();
        if (n > 0 && total / static_cast<uint64_t>(n) != seq->l->size()) check_items(UINT64_MAX);
        check_items(total);
        ValueList items;
        for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq->l->begin(), seq->l->end());
        step(items.size() / 8);
        return Value::list(std::move(items), seq->kind == Kind::Tuple);
      }
      if (repeatable) raise(std::string("can't multiply sequence by non-int of type '") + type_name(*count) + "'");
      unsupported_operands("*", a, b);
    }
    case ExprType::Div:
      if (nums) {
        if (b.as_double() == 0) raise("division by zero");
        return Value::number(a.as_double() / b.as_double());
      }
      unsupported_operands("/", a, b);
    case ExprType::FloorDiv:
      if (ints) {
        if (b.as_int() == 0) raise("integer division or modulo by zero");
        return Value::integer(floor_div(a.as_int(), b.as_int()));
      }
      if (nums) {
        if (b.as_double() == 0) raise("float floor division by zero");
        const double x = a.as_double(), y = b.as_double();
        return Value::number(std::floor((x - float_mod(x, y)) / y + 0.0));
      }
      unsupported_operands("//", a, b);
    case ExprType::Mod:
      if (ints) {
        if (b.as_int() == 0) raise("integer division or modulo by zero");
        return Value::integer(floor_mod(a.as_int(), b.as_int()));
      }
      if (nums) {
        if (b.as_double() == 0) raise("float modulo");
        return Value::number(float_mod(a.as_double(), b.as_double()));
      }
      if (a.kind == Kind::String) raise("the % operator on strings (printf-style formatting) is not supported");
      unsupported_operands("%", a, b);
    case ExprType::Pow:
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), e = b.as_int(), acc = 1;
        while (e > 0) {
          if (e & 1) acc = mul_i(acc, base);
          e >>= 1;
          if (e > 0) base = mul_i(base, base);
        }
        return Value::integer(acc);
      }
      if (nums) {
        const double x = a.as_double(), y = b.as_double();
        if (x == 0 && y < 0) raise("0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) raise("complex results of ** are not supported");
        return Value::number(std::pow(x, y));
      }
      unsupported_operands("** or pow()", a, b);
    default: raise("internal error: not a binary operator");
  }
}

bool Interpreter::contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::String:
      if (item.kind != Kind::String)
        raise(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
      step(container.s->size() / 64);
      return container.s->find(*item.s) != std::string::npos;
    case Kind::List:
    case Kind::Tuple:
      if (container.origin == Origin::DictItems || container.origin == Origin::DictKeys) {
        for (const Value& v : *container.l)
          if (equals(v, item)) return true;
        return false;
      }
      for (const Value& v : *container.l) {
        step();
        if (equals(v, item)) return true;
      }
      return false;
    case Kind::Dict:
      if (item.kind == Kind::List || item.kind == Kind::Dict)
        raise(std::string("unhashable type: '") + type_name(item) + "'");
      return container.d->find(item) != nullptr;
    case Kind::Undefined: return false;  // Undefined iterates as empty
    default: raise(std::string("argument of type '") + type_name(container) + "' is not iterable");
  }
}

bool Interpreter::compare(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::Eq: return equals(a, b);
    case CmpOp::Ne: return !equals(a, b);
    case CmpOp::Lt: return less(a, b, "<");
    case CmpOp::Gt: return less(b, a, ">");
    case CmpOp::Le: return !less(b, a, "<=") && (equals(a, b) || less(a, b, "<="));
    case CmpOp::Ge: return !less(a, b, ">=") && (equals(a, b) || less(b, a, ">="));
    case CmpOp::In: return contains(b, a);
    case CmpOp::NotIn: return !contains(b, a);
  }
  return false;
}

ValueList Interpreter::iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List:
    case Kind::Tuple: return *v.l;
    case Kind::Dict: {
      ValueList keys;
      keys.reserve(v.d->items.size());
      for (const auto& kv : v.d->items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::String: {
      ValueList chars;
      for (char32_t c : to_u32(*v.s)) {
        std::string one;
        append_utf8(one, c);
        chars.push_back(Value::string(std::move(one)));
      }
      step(chars.size() / 8);
      return chars;
    }
    default: raise(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

// --- attributes and items (the sandbox's getattr and getitem)

namespace {

bool is_in(std::string_view name, std::initializer_list<const char*> names) {
  return std::find_if(names.begin(), names.end(), [&](const char* n) { return name == n; }) != names.end();
}

}  // namespace

bool has_method(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::String:
      return is_in(name, {"capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find",
                          "format", "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
                          "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper",
                          "join", "ljust", "lower", "lstrip", "maketrans", "partition", "removeprefix",
                          "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip",
                          "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper",
                          "zfill"});
    case Kind::Dict:
      return is_in(name, {"clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem", "setdefault",
                          "update", "values"});
    case Kind::List:
      if (obj.origin != Origin::Plain) return false;
      return is_in(name, {"append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove",
                          "reverse", "sort"});
    case Kind::Tuple: return is_in(name, {"count", "index"});
    case Kind::Int:
    case Kind::Bool:
      return is_in(name, {"as_integer_ratio", "bit_count", "bit_length", "conjugate", "from_bytes", "to_bytes"});
    case Kind::Float: return is_in(name, {"as_integer_ratio", "conjugate", "fromhex", "hex", "is_integer"});
    default: return false;
  }
}

namespace {

bool is_unsafe_method(const Value& obj, const std::string& name) {
  if (obj.kind == Kind::Dict) return is_in(name, {"clear", "pop", "popitem", "setdefault", "update"});
  if (obj.kind == Kind::List)
    return is_in(name, {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"});
  return false;
}

}  // namespace

// A method as an attribute: a bound method, or the undefined the sandbox
// returns for one that would modify its object.
Value Interpreter::method_attr(const Value& obj, const std::string& name) {
  if (is_unsafe_method(obj, name))
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.");
  auto f = std::make_shared<CallableObject>(CallableObject::Fn::Method);
  f->method = name;
  f->self = obj;
  return Value::object(std::move(f));
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) raise_undefined(obj);
  const bool dunder = name.size() > 1 && name[0] == '_' && name[1] == '_';
  if (dunder && obj.kind != Kind::Dict)
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.");
  if (has_method(obj, name)) return method_attr(obj, name);
  switch (obj.kind) {
    case Kind::Dict:
      if (const Value* v = obj.d->find(std::string_view(name))) return *v;
      break;
    case Kind::Int:
    case Kind::Bool:
      if (name == "real" || name == "numerator") return Value::integer(obj.as_int());
      if (name == "imag") return Value::integer(0);
      if (name == "denominator") return Value::integer(1);
      break;
    case Kind::Float:
      if (name == "real") return obj;
      if (name == "imag") return Value::number(0);
      break;
    case Kind::Object:
      if (obj.o->type == Object::Type::Namespace) {
        if (const Value* v = static_cast<const NamespaceObject&>(*obj.o).attrs.find(std::string_view(name))) return *v;
      } else if (obj.o->type == Object::Type::Loop) {
        auto loop = std::static_pointer_cast<LoopObject>(obj.o);
        const int64_t i = static_cast<int64_t>(loop->index0), n = static_cast<int64_t>(loop->items->size());
        if (name == "index") return Value::integer(i + 1);
        if (name == "index0") return Value::integer(i);
        if (name == "revindex") return Value::integer(n - i);
        if (name == "revindex0") return Value::integer(n - i - 1);
        if (name == "first") return Value::boolean(i == 0);
        if (name == "last") return Value::boolean(i == n - 1);
        if (name == "length") return Value::integer(n);
        if (name == "depth") return Value::integer(1);
        if (name == "depth0") return Value::integer(0);
        if (name == "previtem")
          return i > 0 ? (*loop->items)[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
        if (name == "nextitem")
          return i + 1 < n ? (*loop->items)[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
        if (name == "cycle" || name == "changed") {
          auto f = std::make_shared<CallableObject>(name == "cycle" ? CallableObject::Fn::LoopCycle
                                                                     : CallableObject::Fn::LoopChanged);
          f->loop = loop;
          return Value::object(std::move(f));
        }
      } else if (obj.o->type == Object::Type::Macro) {
        if (name == "name") return Value::string(static_cast<const MacroObject&>(*obj.o).name);
      }
      break;
    default: break;
  }
  return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) raise_undefined(obj);
  auto index_of = [&](size_t size) -> int64_t {  // Python's index with negative wrap; -1 when out of range
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(size);
    return i >= 0 && i < static_cast<int64_t>(size) ? i : -1;
  };
  const bool int_key = key.kind == Kind::Int || key.kind == Kind::Bool;
  switch (obj.kind) {
    case Kind::Dict:
      if (key.kind == Kind::List || key.kind == Kind::Dict)
        break;  // unhashable: Python's TypeError, which the sandbox turns into undefined
      if (const Value* v = obj.d->find(key)) return *v;
      break;
    case Kind::List:
    case Kind::Tuple:
      if (int_key && (obj.origin == Origin::Plain || obj.origin == Origin::Range)) {
        int64_t i = index_of(obj.l->size());
        if (i >= 0) return (*obj.l)[static_cast<size_t>(i)];
      }
      break;
    case Kind::String:
      if (int_key) {
        step(obj.s->size() / 64);  // reading a string costs by its length
        std::u32string u = to_u32(*obj.s);
        int64_t i = index_of(u.size());
        if (i >= 0) return Value::string(to_utf8(u.substr(static_cast<size_t>(i), 1)));
      }
      break;
    default: break;
  }
  // obj[key] failed: a string key falls back to the attribute (a method, the
  // loop's or a namespace's), as the sandbox's getitem does.
  if (key.kind == Kind::String) {
    if (obj.kind != Kind::Dict) return get_attr(obj, *key.s);
    if (has_method(obj, *key.s)) return method_attr(obj, *key.s);
  }
  if (key.kind == Kind::String)
    return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + *key.s + "'");
  return Value::undefined("'" + object_type_repr(obj) + "' has no element " + py_repr(key));
}

Value Interpreter::slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  if (obj.is_undefined()) raise_undefined(obj);
  const bool sliceable =
      obj.kind == Kind::String || ((obj.kind == Kind::List || obj.kind == Kind::Tuple) && obj.origin == Origin::Plain);
  auto ok = [](const Value& v) { return v.kind == Kind::None || v.kind == Kind::Int || v.kind == Kind::Bool; };
  if (!sliceable || !ok(start) || !ok(stop) || !ok(step_v))
    return Value::undefined("'" + object_type_repr(obj) + "' has no element slice");
  std::u32string u;
  size_t len;
  if (obj.kind == Kind::String) {
    step(obj.s->size() / 64);
    u = to_u32(*obj.s);
    len = u.size();
  } else {
    len = obj.l->size();
  }
  const int64_t n = static_cast<int64_t>(len);
  const int64_t st = step_v.kind == Kind::None ? 1 : step_v.as_int();
  if (st == 0) raise("slice step cannot be zero");
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](const Value& v, int64_t dflt) {
    if (v.kind == Kind::None) return dflt;
    int64_t i = v.as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t b = adjust(start, st < 0 ? n - 1 : 0), e = adjust(stop, st < 0 ? -1 : n);
  std::vector<size_t> picks;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(static_cast<size_t>(i));
  step(picks.size() / 8);
  if (obj.kind == Kind::String) {
    std::u32string r;
    for (size_t i : picks) r.push_back(u[i]);
    return Value::string(to_utf8(r));
  }
  ValueList items;
  for (size_t i : picks) items.push_back((*obj.l)[i]);
  return Value::list(std::move(items), obj.kind == Kind::Tuple);
}

// --- calls

Value Interpreter::call(const Value& callee, ValueList args, Kwargs kwargs) {
  if (callee.is_undefined()) raise_undefined(callee);
  if (callee.kind == Kind::Object) {
    if (callee.o->type == Object::Type::Macro)
      return call_macro(static_cast<const MacroObject&>(*callee.o), std::move(args), std::move(kwargs), nullptr);
    if (callee.o->type == Object::Type::Callable)
      return call_builtin(static_cast<const CallableObject&>(*callee.o), std::move(args), std::move(kwargs));
  }
  raise(std::string("'") + type_name(callee) + "' object is not callable");
}

Value Interpreter::call_macro(const MacroObject& m, ValueList args, Kwargs kwargs, const Value* caller) {
  step();
  if (macro_depth_ >= limits_.max_depth)
    raise("macro calls nest more than " + std::to_string(limits_.max_depth) + " deep (max_depth)");
  const Node& n = *m.node;
  const std::vector<std::string>& params = n.params;
  if (args.size() > params.size())
    raise("macro '" + m.name + "' takes not more than " + std::to_string(params.size()) + " argument(s)");
  auto scope = std::make_shared<Scope>();
  scope->parent = m.closure.lock();
  if (!scope->parent)
    raise("macro '" + m.name + "' is called after the block that defined it ended (not supported)");
  std::vector<bool> bound(params.size(), false);
  for (size_t k = 0; k < args.size(); ++k) {
    scope->set(params[k], std::move(args[k]));
    bound[k] = true;
  }
  for (auto& [key, v] : kwargs) {
    auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end()) raise("macro '" + m.name + "' takes no keyword argument '" + key + "'");
    const size_t k = static_cast<size_t>(it - params.begin());
    if (bound[k]) raise("macro '" + m.name + "' got multiple values for argument '" + key + "'");
    scope->set(key, std::move(v));
    bound[k] = true;
  }
  if (caller) scope->set("caller", *caller);
  // Defaults belong to the last parameters and are evaluated at call time, in the macro's scope.
  const size_t n_defaults = n.exprs.size() - m.first_default;
  for (size_t k = 0; k < params.size(); ++k) {
    if (bound[k]) continue;
    const size_t first_with_default = params.size() - n_defaults;
    if (k >= first_with_default)
      scope->set(params[k], eval(*n.exprs[m.first_default + (k - first_with_default)], scope));
    else
      scope->set(params[k], Value::undefined("parameter '" + params[k] + "' was not provided"));
  }
  ++macro_depth_;
  std::string out;
  exec(n.bodies[0], scope, out);
  --macro_depth_;
  return Value::string(std::move(out));
}

}  // namespace mmgpt::jinja
