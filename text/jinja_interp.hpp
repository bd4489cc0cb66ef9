#pragma once
// The chat-template interpreter: walks the tree jinja_parse.cpp builds with
// Jinja2's semantics under transformers' ImmutableSandboxedEnvironment (the
// sandbox's attribute rules, Undefined, the scoping of loops and macros) and
// counts every step against the render's limits. The builtins (filters,
// tests, methods, global functions) are in jinja_builtins.cpp.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja.hpp"
#include "text/jinja_parse.hpp"
#include "text/jinja_value.hpp"

namespace mmgpt::jinja {

struct Program {
  std::string name;
  Body body;
};

using Kwargs = std::vector<std::pair<std::string, Value>>;

// Variables of one frame (the template, a loop iteration, a macro call, a
// block); lookups go outwards to the caller's variables and then the globals.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  Value* find(std::string_view name);
  void set(const std::string& name, Value value);
};

// A macro, or the caller() of a {% call %} block: its node, and the scope it
// was defined in (a closure, as in Jinja2). The scope holds the macro, so the
// macro holds it weakly: no reference cycle outlives the render.
struct MacroObject : Object {
  MacroObject() : Object(Type::Macro) {}
  std::string repr() const override { return "<Macro '" + name + "'>"; }
  std::string name;
  const Node* node = nullptr;
  size_t first_default = 0;  // node->exprs from here are the defaults of the last params
  std::weak_ptr<Scope> closure;
};

// The `loop` variable of a for loop.
struct LoopObject : Object {
  LoopObject() : Object(Type::Loop) {}
  std::string repr() const override;
  std::shared_ptr<const ValueList> items;
  size_t index0 = 0;
  bool changed_seen = false;
  Value last_changed;
};

// A function value: a global (range, namespace, ...), a bound method of a
// value (self.method), or a method of the loop object.
struct CallableObject : Object {
  enum class Fn : uint8_t { Range, Namespace, Dict, RaiseException, StrftimeNow, Method, LoopCycle, LoopChanged };
  explicit CallableObject(Fn f) : Object(Type::Callable), fn(f) {}
  Fn fn;
  std::string method;
  Value self;
  std::shared_ptr<LoopObject> loop;
};

// Positional and keyword arguments as a Python signature binds them.
class Args {
 public:
  Args(std::string what, ValueList positional, Kwargs keywords)
      : what_(std::move(what)), pos_(std::move(positional)), kw_(std::move(keywords)) {}
  // The argument at `index` or named `name`; nullptr when absent.
  const Value* get(size_t index, const char* name);
  Value get_or(size_t index, const char* name, Value fallback) {
    const Value* v = get(index, name);
    return v ? *v : fallback;
  }
  // Refuses arguments past `count` positional or not named in `names`.
  void check(size_t count, std::initializer_list<const char*> names) const;
  const ValueList& positional() const { return pos_; }
  const Kwargs& keywords() const { return kw_; }
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  ValueList pos_;
  Kwargs kw_;
};

class Interpreter {
 public:
  Interpreter(const std::string& name, const TemplateLimits& limits) : name_(name), limits_(limits) {}

  std::string render(const Body& body, const Value& variables);
  // The line being run, for errors.
  uint32_t line() const { return line_; }

  // --- shared with the builtins
  void step(uint64_t n = 1);
  // Refuses a string or list past the output limit before it is built.
  void check_size(uint64_t bytes);
  void check_items(uint64_t items);
  ValueList iterate(const Value& v);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value call(const Value& callee, ValueList args, Kwargs kwargs);
  Value filter(int id, const Value& subject, ValueList args, Kwargs kwargs);
  bool test(int id, const Value& subject, ValueList args, Kwargs kwargs);
  Value binary(ExprType op, const Value& a, const Value& b);
  bool compare(CmpOp op, const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item);
  Value string(std::string s) {
    check_size(s.size());
    step(s.size() / 64);
    return Value::string(std::move(s));
  }
  Value list(ValueList items, Origin origin = Origin::Plain) {
    check_items(items.size());
    step(items.size() / 8);
    Value v = Value::list(std::move(items));
    v.origin = origin;
    return v;
  }

 private:
  enum class Flow { Normal, Break, Continue };

  const std::string& name_;
  const TemplateLimits& limits_;
  uint64_t steps_ = 0;
  uint32_t line_ = 0;
  uint32_t macro_depth_ = 0;
  uint32_t eval_depth_ = 0;
  const Dict* variables_ = nullptr;
  // The namespaces of this render: emptied when it ends, so that a namespace
  // holding itself (ns.x = ns) is freed.
  std::vector<std::weak_ptr<NamespaceObject>> namespaces_;

  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_node(const Node& n, const std::shared_ptr<Scope>& scope, std::string& out);
  void exec_for(const Node& n, const std::shared_ptr<Scope>& scope, std::string& out);
  std::string render_body(const Body& body, const std::shared_ptr<Scope>& parent);
  void assign(const Target& t, const Value& v, Scope& scope);
  void append(std::string& out, std::string_view text);

  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* subject = nullptr);
  Value eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* subject);
  Value lookup(const std::string& name, const std::shared_ptr<Scope>& scope);
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
  Value call_macro(const MacroObject& m, ValueList args, Kwargs kwargs, const Value* caller);
  Value call_builtin(const CallableObject& f, ValueList args, Kwargs kwargs);
  Value call_method(const Value& self, const std::string& method, ValueList args, Kwargs kwargs);
  Value method_attr(const Value& obj, const std::string& name);
};

// Python's str.split / splitlines semantics (used by filters and methods).
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
// Whether Python's type of `obj` has a method `name` (the sandbox refuses
// those that would modify their object).
bool has_method(const Value& obj, const std::string& name);
// markupsafe.escape's text: & < > " ' as HTML entities.
std::string html_escape_text(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);

}  // namespace mmgpt::jinja
