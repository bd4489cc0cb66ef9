// ChatTemplate: compile (text/jinja_parse.cpp) and render (text/jinja_interp.cpp).
#include "text/jinja.hpp"

#include "formats/error.hpp"
#include "text/jinja_interp.hpp"
#include "text/jinja_parse.hpp"

namespace mmgpt {

ChatTemplate ChatTemplate::compile(std::string_view source, std::string name) {
  auto program = std::make_shared<jinja::Program>();
  program->name = std::move(name);
  program->body = jinja::parse_template(source, program->name);
  ChatTemplate t;
  t.program_ = std::move(program);
  return t;
}

const std::string& ChatTemplate::name() const { return program_->name; }

std::string ChatTemplate::render(const nlohmann::json& variables, const TemplateLimits& limits) const {
  return render(nlohmann::ordered_json(variables), limits);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables, const TemplateLimits& limits) const {
  using namespace jinja;
  if (!variables.is_object()) throw Error(program_->name + ": the template's variables must be a JSON object");
  Interpreter run(program_->name, limits);
  try {
    return run.render(program_->body, from_json(variables));
  } catch (const RenderError& e) {
    throw Error(program_->name + ": line " + std::to_string(run.line()) + ": " + e.message);
  }
}

}  // namespace mmgpt
