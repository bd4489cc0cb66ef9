// The chat-template interpreter: each construct, Jinja2's whitespace rules,
// Python's text for values, errors with their line, unbalanced and unknown
// tags, and the limits that stop hostile templates. Expected outputs are what
// Python's Jinja2 renders under transformers' settings (the whole-template
// comparison with Jinja2 itself is tests/tokenizer/test_chat_templates.py).
#include <doctest/doctest.h>

#include <string>

#include "formats/error.hpp"
#include "text/jinja.hpp"

using namespace mmgpt;

namespace {

const char* kVars = R"({
  "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "Yo"}],
  "xs": [3, 1, 2], "s": "Hello", "n": null, "d": {"b": 1, "a": [1, "x"]}, "t": true,
  "add_generation_prompt": true, "bos_token": "<s>"
})";

std::string render(const std::string& source, const char* vars = kVars, const TemplateLimits& limits = {}) {
  return ChatTemplate::compile(source, "t").render(nlohmann::ordered_json::parse(vars), limits);
}

// The one-line error compiling or rendering gives ("" when there is none).
std::string error_of(const std::string& source, const char* vars = kVars, const TemplateLimits& limits = {}) {
  try {
    render(source, vars, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("text, expressions and Python's str() of values") {
  CHECK(render("plain text") == "plain text");
  CHECK(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 ** 2 }}") ==
        "7 3 -4 2 3.5 64");
  CHECK(render("{{ none }} {{ true }} {{ False }} {{ 1.0 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }}") ==
        "None True False 1.0 1e+16 1000000000000000.0 0.0001 1e-05");
  CHECK(render("{{ 0.1 + 0.2 }} {{ -0.0 }} {{ 1 / 3 }}") == "0.30000000000000004 -0.0 0.3333333333333333");
  CHECK(render("{{ [1, 'a', none, [true]] }} {{ (1,) }} {{ (1, 2) }} {{ {'k': 1.5, 2: 'v'} }}") ==
        "[1, 'a', None, [True]] (1,) (1, 2) {'k': 1.5, 2: 'v'}");
  CHECK(render(R"({{ ["it's", 'say "x"', "both ' \"", "a\nb\\"] }})") ==
        R"(["it's", 'say "x"', 'both \' "', 'a\nb\\'])");
  CHECK(render("{{ d }} {{ d.a }} {{ xs[1:] }} {{ xs[::-1] }} {{ s[1:3] }} {{ s[-1] }}") ==
        "{'b': 1, 'a': [1, 'x']} [1, 'x'] [1, 2] [2, 1, 3] el o");
  CHECK(render("{{ 'a' ~ 1 ~ none ~ nope }} {{ 'ab' * 2 }} {{ 'x' + 'y' }}") == "a1None abab xy");
  CHECK(render("{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'l' in s }} {{ 4 not in xs }} {{ not n }}") ==
        "True True True True True");
  CHECK(render("{{ 'y' if t else 'n' }}[{{ 'y' if n }}]{{ n or 'd' }}{{ 0 and 1 }}") == "y[]d0");
  CHECK(render("{{ range(3) }} {{ range(3)|list }} {{ d.items() }}") ==
        "range(0, 3) [0, 1, 2] dict_items([('b', 1), ('a', [1, 'x'])])");
  CHECK(render("{{ '\\u00e9\\x41\\101\\t|\\q' }}") == "\xC3\xA9" "AA\t|\\q");
}

TEST_CASE("statements: if, for, set, namespace, macros, call, filter blocks, loop controls") {
  CHECK(render("{% if n %}a{% elif xs %}b{% else %}c{% endif %}") == "b");
  CHECK(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
               "{{ loop.length }}{{ loop.revindex }},{% endfor %}") ==
        "10TrueFalse33,21FalseFalse32,32FalseTrue31,");
  CHECK(render("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}") == "3222");
  CHECK(render("{% for x in [] %}x{% else %}none{% endfor %}") == "none");
  CHECK(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}") == "b=1;a=[1, 'x'];");
  CHECK(render("{% for x in range(9) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
               "{% endif %}{{ x }}{% endfor %}") == "023");
  // A set inside a loop lives for one iteration; namespace() carries values out.
  CHECK(render("{% set c = 0 %}{% for x in xs %}{% set c = c + x %}{% endfor %}{{ c }}") == "0");
  CHECK(render("{% set ns = namespace(c=0) %}{% for x in xs %}{% set ns.c = ns.c + x %}{% endfor %}{{ ns.c }}") ==
        "6");
  CHECK(render("{% set b | upper %}a{{ s }}{% endset %}{{ b }}") == "AHELLO");
  CHECK(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}{{ m() }}") ==
        "1B12B");
  CHECK(render("{% macro w() %}[{{ caller('x') }}]{% endmacro %}{% call(v) w() %}<{{ v }}>{% endcall %}") ==
        "[<x>]");
  CHECK(render("{% filter upper %}ab{% endfilter %}{% with q = 2 %}{{ q }}{% endwith %}") == "AB2");
  CHECK(render("{% raw %}{{ x }}{% endraw %}{# comment #}") == "{{ x }}");
  CHECK(render("{% generation %}g{% endgeneration %}") == "g");
}

TEST_CASE("whitespace: trim_blocks, lstrip_blocks, - and +, the trailing newline") {
  CHECK(render("  {% if t %}\n    x\n  {% endif %}\ny\n") == "    x\ny");
  CHECK(render("a  {%- if t -%}  b  {%- endif -%}  c") == "abc");
  CHECK(render("a\n  {{- 'b' -}}  \n c") == "abc");
  CHECK(render("  {%+ if t %}x{% endif %}") == "  x");
  CHECK(render("{% if t +%}\nx{% endif %}") == "\nx");
  CHECK(render("  {{ 'v' }}\n") == "  v");  // lstrip_blocks leaves variable tags alone
  CHECK(render("a\r\n{% if t %}\r\nb\r\n{% endif %}\r\n") == "a\nb\n");
  CHECK(render("x  {# c #}\ny") == "x  y");
  CHECK(render("x\n  {# c #}\ny") == "x\ny");
  CHECK(render("text\n\n") == "text\n");
}

TEST_CASE("filters, tests and methods") {
  CHECK(render("{{ '  a  '|trim }}|{{ s|upper }}|{{ s|length }}|{{ xs|join(',') }}|{{ xs|sort }}|{{ xs|first }}") ==
        "a|HELLO|5|3,1,2|[1, 2, 3]|3");
  CHECK(render("{{ nope|default('d') }} {{ ''|default('e', true) }} {{ s|replace('l', 'L') }}") == "d e HeLLo");
  CHECK(render("{{ d|tojson }} {{ d|tojson(indent=2) }}") ==
        "{\"b\": 1, \"a\": [1, \"x\"]} {\n  \"b\": 1,\n  \"a\": [\n    1,\n    \"x\"\n  ]\n}");
  CHECK(render("{{ '\xC3\xA9'|tojson }} {{ '\xC3\xA9'|tojson(ensure_ascii=true) }} {{ d|tojson(sort_keys=true) }}") ==
        "\"\xC3\xA9\" \"\\u00e9\" {\"a\": [1, \"x\"], \"b\": 1}");
  CHECK(render("{{ messages|map(attribute='role')|join(' ') }} {{ messages|selectattr('role', 'eq', 'user')|list|length }}") ==
        "system user assistant 1");
  CHECK(render("{{ 'a<b'|e }} {{ 2.5|round }} {{ '4.7'|int }} {{ '1.5'|float }} {{ [1, 2]|sum }} {{ 'ab'|reverse }}") ==
        "a&lt;b 2.0 4 1.5 3 ba");
  CHECK(render("{{ n is none }} {{ nope is defined }} {{ s is string }} {{ 3 is odd }} {{ d is mapping }} "
               "{{ xs is iterable }} {{ 9 is divisibleby 3 }} {{ 1 is eq 1 }}") ==
        "True False True True True True True True");
  CHECK(render("{{ s.startswith('He') }} {{ s.split('l') }} {{ ' x '.strip() }} {{ s.lower() }} {{ d.get('z', 0) }}") ==
        "True ['He', '', 'o'] x hello 0");
  CHECK(render("{{ 'a b'.title() }} {{ '{} {}'.format(1, 'x') }} {{ d.keys()|list }}") == "A B 1 x ['b', 'a']");
  CHECK(render("{{ '\xC3\x9F'|upper }}") == "SS");
}

TEST_CASE("undefined values are quiet until used, as Jinja2's default Undefined") {
  CHECK(render("[{{ nope }}][{{ d.nokey }}][{{ xs[9] }}][{{ nope|length }}]{% for x in nope %}x{% endfor %}") ==
        "[][][][0]");
  CHECK(error_of("{{ nope.attr }}") == "t: line 1: 'nope' is undefined");
  CHECK(error_of("{{ d.nokey.attr }}") == "t: line 1: 'dict object' has no attribute 'nokey'");
  CHECK(error_of("{{ nope + 1 }}") == "t: line 1: 'nope' is undefined");
  // The sandbox: methods that modify are refused when called.
  CHECK(render("[{{ xs.append }}]") == "[]");
  CHECK(error_of("{{ xs.append(1) }}") == "t: line 1: access to attribute 'append' of 'list' object is unsafe.");
}

TEST_CASE("errors name the template and the line") {
  CHECK(error_of("a\n{{ raise_exception('Roles must alternate') }}") == "t: line 2: Roles must alternate");
  CHECK(error_of("x\n\n{% if t %}\nno end") ==
        "t: line 4: unexpected end of template: the 'if' block opened on line 3 is not closed (expected '{% endif %}')");
  CHECK(error_of("{% endfor %}").find("t: line 1: unexpected '{% endfor %}'") == 0);
  CHECK(error_of("{% if t %}{% for x in xs %}{% endif %}").find("does not close the innermost open block, 'for'") !=
        std::string::npos);
  CHECK(error_of("{% for x in xs %}{% endif %}").find("no block is open that it could continue or close") !=
        std::string::npos);
  CHECK(error_of("ok\n{{ 1 + ").find("t: line 2: the tag opened here is not closed") == 0);
  CHECK(error_of("{{ 'unterminated }}").find("t: line 1: the string starting here is not closed") == 0);
  CHECK(error_of("{# never closed").find("t: line 1: the comment opened here is not closed") == 0);
  CHECK(error_of("{% frobnicate %}") == "t: line 1: unknown tag 'frobnicate'");
  CHECK(error_of("{% include 'x' %}").find("is not supported") != std::string::npos);
  CHECK(error_of("{{ x|nofilter }}") == "t: line 1: no filter named 'nofilter'");
  CHECK(error_of("{{ x|groupby('a') }}") == "t: line 1: the filter 'groupby' is not supported");
  CHECK(error_of("{{ x is nosuchtest }}") == "t: line 1: no test named 'nosuchtest'");
  CHECK(error_of("{{ (1 ]}}").find("unexpected ']', expected ')'") != std::string::npos);
  CHECK(error_of("{% break %}") == "t: line 1: 'break' outside of a for loop");
  CHECK(error_of("{{ 'a' + 1 }}") == "t: line 1: can only concatenate str (not \"int\") to str");
  CHECK(error_of("{{ '%s' % 1 }}").find("printf-style") != std::string::npos);
  CHECK(error_of("{{ xs.zfill }}").empty());  // an attribute Python lacks is just undefined
  CHECK(error_of("{{ s.casefold() }}") == "t: line 1: the str method 'casefold' is not supported");
  CHECK(error_of("\xFF").find("not valid UTF-8") != std::string::npos);
  CHECK(error_of("{{ d.items }}").find("cannot print") != std::string::npos);
  CHECK(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow") != std::string::npos);
}

TEST_CASE("limits stop loops, recursion, huge strings and deep nesting") {
  TemplateLimits small;
  small.max_steps = 100000;
  small.max_output_bytes = 1 << 16;
  CHECK(error_of("{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", kVars, small)
            .find("limit of 100000 steps (max_steps)") != std::string::npos);
  CHECK(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("(max_depth)") != std::string::npos);
  CHECK(error_of("{{ 'a' * 10 ** 9 }}").find("(max_output_bytes)") != std::string::npos);
  CHECK(error_of("{{ 'a' * 9223372036854775807 }}").find("(max_output_bytes)") != std::string::npos);
  CHECK(error_of("{{ [1] * 10 ** 9 }}").find("(max_output_bytes)") != std::string::npos);
  CHECK(error_of("{% for x in range(100) %}{{ 'x' * 1000 }}{% endfor %}", kVars, small).find("(max_output_bytes)") !=
        std::string::npos);
  CHECK(error_of("{% set ns = namespace(s='ab') %}{% for x in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}")
            .find("(max_output_bytes)") != std::string::npos);
  CHECK(error_of("{{ range(100001) }}").find("MAX_RANGE (100000)") != std::string::npos);
  CHECK(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nested too deeply") != std::string::npos);
  CHECK(error_of("{{ " + std::string(5000, '-') + "1 }}").find("nests more than") != std::string::npos);
  std::string nested_ifs;
  for (int k = 0; k < 500; ++k) nested_ifs += "{% if t %}";
  CHECK(error_of(nested_ifs).find("nests more than") != std::string::npos);
  CHECK(error_of("{% set ns = namespace(l=[]) %}{% for x in range(500) %}{% set ns.l = [ns.l] %}{% endfor %}")
            .find("nested more than") != std::string::npos);
  // Printing is bounded too: a list of lists sharing one string would print as gigabytes.
  CHECK(error_of("{% set a = ['x' * 1000] * 1000 %}{% set b = [a] * 1000 %}{{ b|length }}{{ b }}")
            .find("(max_output_bytes)") != std::string::npos);
  CHECK(error_of("{% set a = ['x' * 1000] * 1000 %}{{ [a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a]|tojson }}")
            .find("(max_output_bytes)") != std::string::npos);
  // A render within its limits is unaffected by them.
  CHECK(render("{% for m in messages %}{{ m.content }}{% endfor %}", kVars, small) == "SHiYo");
}

TEST_CASE("values that refer to themselves are freed (LeakSanitizer checks)") {
  CHECK(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}") == "True");
  CHECK(render("{% set ns = namespace() %}{% macro m() %}x{{ ns.n }}{% endmacro %}{% set ns.m = m %}{% set ns.n = 1 %}"
               "{{ ns.m() }}") == "x1");
  CHECK(render("{% for x in xs %}{{ loop.changed(loop) }}{% endfor %}") == "TrueFalseFalse");
  CHECK(render("{% macro w() %}{% set ns = namespace(c=caller) %}{{ ns.c() }}{% endmacro %}{% call w() %}y{% endcall %}") ==
        "y");
}

TEST_CASE("the variables: any JSON object, its key order kept") {
  CHECK(render("{{ o|tojson }}", R"({"o": {"z": 1, "a": 2}})") == "{\"z\": 1, \"a\": 2}");
  CHECK(ChatTemplate::compile("{{ o|tojson }}", "t").render(nlohmann::json::parse(R"({"o": {"z": 1, "a": 2}})")) ==
        "{\"a\": 2, \"z\": 1}");
  CHECK_THROWS_AS(ChatTemplate::compile("x", "t").render(nlohmann::ordered_json::array()), Error);
  CHECK(ChatTemplate::compile("x", "name.jinja").name() == "name.jinja");
}
