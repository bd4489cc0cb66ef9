#pragma once
// The syntax tree of a chat template, and the parser that builds it: Jinja2's
// lexer (with trim_blocks, lstrip_blocks and the whitespace-control signs
// applied to the text, as Jinja2 does while lexing) and its grammar, for the
// statements and expressions chat templates use. Anything else is refused
// here, at compile time, with the line it is on.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja_value.hpp"

namespace mmgpt::jinja {

enum class ExprType : uint8_t {
  Const,    // value
  Name,     // name
  List,     // args: the items
  Tuple,    // args: the items
  Dict,     // args: key, value, key, value, ...
  Attr,     // args[0].name
  Item,     // args[0][args[1]]
  Slice,    // args[0][args[1]:args[2]:args[3]] (absent parts are null)
  Call,     // args[0](args[1:], kwargs)
  Filter,   // args[0] | name(args[1:], kwargs); a null args[0] is a block's body
  Test,     // args[0] is name(args[1:], kwargs)
  Neg,
  Pos,
  Not,
  Add,
  Sub,
  Mul,
  Div,
  FloorDiv,
  Mod,
  Pow,
  Concat,   // args joined with ~
  Compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (a Python chain)
  And,
  Or,
  Cond,  // args[1] if args[0] else args[2] (absent else: undefined)
};

enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprType type = ExprType::Const;
  uint32_t line = 0;
  int id = -1;  // Filter, Test: the builtin's index
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<CmpOp> ops;
};

// Where a for loop, set or with binds: a name, a namespace attribute
// (ns.attr, set only) or a tuple of targets to unpack into.
struct Target {
  enum class Type : uint8_t { Name, NsAttr, Tuple };
  Type type = Type::Name;
  uint32_t line = 0;
  std::string name, attr;
  std::vector<Target> items;
};

enum class NodeType : uint8_t {
  Data,         // text
  Output,       // exprs: printed one after another
  If,           // exprs: one condition per branch; bodies: one per branch, then else
  For,          // exprs: iterable, then the filter or null; bodies: body, else
  Set,          // target = exprs[0]
  SetBlock,     // target = bodies[0] rendered, through filter when there is one
  Macro,        // name(params = exprs defaults, aligned to the last params); bodies[0]
  CallBlock,    // exprs[0] is the call; params: caller's; bodies[0] is caller()
  FilterBlock,  // filter applied to bodies[0] rendered
  With,         // targets = exprs; bodies[0]
  Scope,        // bodies[0] (the transformers {% generation %} tag renders its body)
  Break,
  Continue,
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  NodeType type = NodeType::Data;
  uint32_t line = 0;
  std::string text;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  Target target;
  std::vector<Target> targets;
  std::vector<std::string> params;
  ExprPtr filter;
};

// Builtin filters and tests: the parser resolves names to these indices.
int filter_id(std::string_view name);  // -1: not a filter
int test_id(std::string_view name);
const char* filter_name(int id);
const char* test_name(int id);

// Parses a whole template; throws mmgpt::Error "NAME: line L: what is wrong".
Body parse_template(std::string_view source, const std::string& name);

}  // namespace mmgpt::jinja
