"""`mmgpt serve`: structured output (response_format json_object and
json_schema, llama.cpp's grammar) on both endpoints.

The model is tiny-gpt2-hf (GPT-2's real 50k byte-level vocabulary, random
weights): it has no wish to write JSON, so every valid answer is the
constraint's doing. Every completion that stops ("stop") must parse as JSON
and validate against its schema (python3-jsonschema, with format checks);
one cut by max_tokens ("length") must be a prefix the grammar allows, which
mmgpt's own matcher cannot check here, so the schemas bound their strings
and arrays and max_tokens is generous: every answer below must stop.
Checked too: the same answer from `mmgpt generate --json-schema` with the
same seed, streamed equal to whole, through the official OpenAI client, and
the 400s for what a schema cannot say, $ref loops and schemas too deep.
"""
import json
import os
import re

import jsonschema

from server_harness import W, Server, check, finish, gpt2_model, openai_client, run


SCHEMAS = {
    'person': {
        'type': 'object',
        'properties': {
            'name': {'type': 'string', 'maxLength': 24},
            'age': {'type': 'integer', 'minimum': 0, 'maximum': 130},
            'email': {'type': ['string', 'null'], 'maxLength': 30},
            'born': {'type': 'string', 'format': 'date'},
        },
        'required': ['name', 'age', 'born'],
        'additionalProperties': False,
    },
    'order': {
        'type': 'object',
        'properties': {
            'id': {'type': 'string', 'format': 'uuid'},
            'items': {'type': 'array', 'minItems': 1, 'maxItems': 3, 'items': {
                'type': 'object',
                'properties': {'sku': {'enum': ['A-1', 'B-2', 'C-3']},
                               'qty': {'type': 'integer', 'exclusiveMinimum': 0, 'maximum': 99},
                               'price': {'type': 'number'}},
                'required': ['sku', 'qty', 'price'], 'additionalProperties': False}},
            'status': {'const': 'open'},
            'note': {'anyOf': [{'type': 'null'}, {'type': 'string', 'maxLength': 12}]},
        },
        'required': ['id', 'items', 'status'],
        'additionalProperties': False,
    },
    'tree': {
        '$defs': {'node': {'type': 'object', 'properties': {
            'label': {'type': 'string', 'maxLength': 6},
            'children': {'type': 'array', 'maxItems': 1, 'items': {'$ref': '#/$defs/node'}}},
            'required': ['label', 'children'], 'additionalProperties': False}},
        '$ref': '#/$defs/node',
    },
    'tuple': {'type': 'array', 'prefixItems': [{'type': 'boolean'}, {'type': 'integer', 'minimum': -5, 'maximum': 5},
                                                {'type': 'string', 'format': 'time'}], 'items': False},
}
# jsonschema checks dates and UUIDs; its "time" is not RFC 3339's, so times are checked here.
RFC3339_TIME = re.compile(r'([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])')
FORMATS = jsonschema.FormatChecker(formats=['date', 'uuid'])


@FORMATS.checks('time')
def rfc3339_time(value):
    return not isinstance(value, str) or RFC3339_TIME.fullmatch(value) is not None




def valid(text, schema):
    try:
        instance = json.loads(text)
        jsonschema.validate(instance, schema, format_checker=FORMATS)
        return True, instance
    except (ValueError, jsonschema.ValidationError) as e:
        return False, str(e)[:300]



GPT2 = gpt2_model()
TEMPLATE = os.path.join(W, 'chat.jinja')
with open(TEMPLATE, 'w') as f:
    f.write("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
srv = Server(GPT2, '--chat-template', TEMPLATE, name='structured')
try:
    messages = [{'role': 'user', 'content': 'Give me the record as JSON.'}]
    for name, schema in SCHEMAS.items():
        fmt = {'type': 'json_schema', 'json_schema': {'name': name, 'schema': schema, 'strict': True}}
        bad, lengths = [], 0
        for seed in range(6):
            body = {'messages': messages, 'max_tokens': 600, 'temperature': 1.0, 'seed': seed, 'response_format': fmt}
            status, r = srv.json('POST', '/v1/chat/completions', body)
            if status != 200:
                bad.append((seed, status, r))
                continue
            c = r['choices'][0]
            if c['finish_reason'] == 'length':
                lengths += 1
                bad.append((seed, 'length', c['message']['content'][-80:]))
                continue
            ok, detail = valid(c['message']['content'], schema)
            if not ok:
                bad.append((seed, detail, c['message']['content']))
        check(f'{name}: 6 sampled chat answers parse and validate against the schema', not bad, bad)
    # Greedy, on /v1/completions: the same constraint; equal to mmgpt generate --json-schema with the seed.
    schema_file = os.path.join(W, 'order.json')
    with open(schema_file, 'w') as f:
        json.dump(SCHEMAS['order'], f)
    for seed in (3, 4):
        fmt = {'type': 'json_schema', 'json_schema': {'name': 'order', 'schema': SCHEMAS['order']}}
        status, r = srv.complete(prompt='Order:', max_tokens=400, temperature=0.9, top_k=200, seed=seed,
                                 response_format=fmt)
        text = r['choices'][0]['text'] if status == 200 else ''
        ok, detail = valid(text, SCHEMAS['order'])
        check(f'completions, seed {seed}: valid', status == 200 and ok and r['choices'][0]['finish_reason'] == 'stop',
              (status, detail, text))
        rc, out, err = run('generate', '-m', GPT2, '-p', 'Order:', '-n', '400', '--temperature', '0.9', '--top-k',
                           '200', '--seed', str(seed), '--json-schema', schema_file)
        check(f'completions, seed {seed}: mmgpt generate --json-schema gives the same text',
              rc == 0 and out == 'Order:' + text + '\n', (out, text, err))
        status, events, done = srv.stream(prompt='Order:', max_tokens=400, temperature=0.9, top_k=200, seed=seed,
                                          response_format=fmt)
        check(f'completions, seed {seed}: streamed, the same text',
              status == 200 and done and ''.join(e['choices'][0]['text'] for e in events) == text, events[-2:])
    # json_object: any object.
    objects_ok = []
    for seed in range(4):
        status, r = srv.json('POST', '/v1/chat/completions', {'messages': messages, 'max_tokens': 300, 'seed': seed,
                                                               'response_format': {'type': 'json_object'}})
        c = r['choices'][0] if status == 200 else {}
        if c.get('finish_reason') == 'stop':
            try:
                objects_ok.append(isinstance(json.loads(c['message']['content']), dict))
            except ValueError:
                objects_ok.append(False)
    check('json_object: the answers that stop are JSON objects', objects_ok and all(objects_ok), objects_ok)
    # llama.cpp's grammar field.
    gbnf = 'root ::= "#" [0-9a-f]{6} | "rgb(" [0-9]{1,3} ", " [0-9]{1,3} ", " [0-9]{1,3} ")"'
    status, r = srv.complete(prompt='Colour:', max_tokens=40, seed=1, grammar=gbnf)
    text = r['choices'][0]['text'] if status == 200 else ''
    check('grammar: the output is a sentence of it',
          re.fullmatch(r'#[0-9a-f]{6}|rgb\([0-9]{1,3}, [0-9]{1,3}, [0-9]{1,3}\)', text) is not None, (status, r))

    # Through the official client: chat with a json_schema response_format, streamed and not.
    fmt = {'type': 'json_schema', 'json_schema': {'name': 'person', 'schema': SCHEMAS['person'], 'strict': True}}
    res = openai_client(srv, [
        {'name': 'chat', 'op': 'chat',
         'body': {'model': 'tiny-gpt2', 'messages': messages, 'max_tokens': 400, 'seed': 9, 'response_format': fmt}},
        {'name': 'chat_stream', 'op': 'chat_stream',
         'body': {'model': 'tiny-gpt2', 'messages': messages, 'max_tokens': 400, 'seed': 9, 'response_format': fmt}},
        {'name': 'json_object', 'op': 'chat',
         'body': {'model': 'tiny-gpt2', 'messages': messages, 'max_tokens': 300, 'seed': 2,
                  'response_format': {'type': 'json_object'}}},
        {'name': 'refused', 'op': 'chat',
         'body': {'model': 'tiny-gpt2', 'messages': messages, 'response_format': {
             'type': 'json_schema', 'json_schema': {'name': 'x', 'schema': {'type': 'string', 'pattern': '^a+$'}}}}},
    ])
    whole = res.get('chat', {}).get('response', {}).get('choices', [{}])[0].get('message', {}).get('content', '')
    check('client: the answer validates', valid(whole, SCHEMAS['person'])[0], whole)
    chunks = res.get('chat_stream', {}).get('chunks', [])
    streamed = ''.join(c['choices'][0]['delta'].get('content') or '' for c in chunks if c['choices'])
    check('client: streamed, the same answer', streamed == whole, (streamed, whole))
    jo = res.get('json_object', {}).get('response', {}).get('choices', [{}])[0]
    check('client: json_object answered (an object, when it stops)',
          jo.get('finish_reason') == 'length' or
          (jo.get('finish_reason') == 'stop' and isinstance(json.loads(jo['message']['content']), dict)), jo)
    err = res.get('refused', {}).get('error', {})
    check('client: an unsupported keyword is a BadRequestError naming it',
          'BadRequestError' in err.get('kinds', []) and "'pattern' is not supported" in err.get('message', ''), err)

    # Refused with a 400 naming the field and what is wrong.
    def refused(name, fmt, param, words, path='/v1/chat/completions', extra=None):
        body = {'messages': messages, 'response_format': fmt, **(extra or {})}
        if path == '/v1/completions':
            body = {'prompt': 'x', 'response_format': fmt, **(extra or {})}
        status, r = srv.json('POST', path, body)
        e = r.get('error', {}) if isinstance(r, dict) else {}
        check(f'refused: {name}', status == 400 and e.get('param') == param and words in e.get('message', ''),
              (status, r))

    S = 'response_format.json_schema.schema'
    refused('pattern', {'type': 'json_schema', 'json_schema': {'schema': {'type': 'string', 'pattern': 'a'}}}, S,
            "'pattern' is not supported")
    refused('number bounds', {'type': 'json_schema', 'json_schema': {'schema': {
        'type': 'object', 'properties': {'x': {'type': 'number', 'minimum': 0}}}}}, S, '#/properties/x')
    refused('a $ref loop', {'type': 'json_schema', 'json_schema': {'schema': {
        '$defs': {'a': {'$ref': '#/$defs/b'}, 'b': {'$ref': '#/$defs/a'}}, '$ref': '#/$defs/a'}}}, S, 'left recursion')
    deep = {}
    for _ in range(70):
        deep = {'type': 'array', 'items': deep}
    refused('70 levels deep', {'type': 'json_schema', 'json_schema': {'schema': deep}}, S, 'nested more than 64')
    refused('an unknown type', {'type': 'xml'}, 'response_format.type', 'json_schema')
    refused('no schema', {'type': 'json_schema', 'json_schema': {'name': 'x'}}, S, 'required')
    refused('a bad grammar', None, 'grammar', 'no \'root\'', '/v1/completions', {'grammar': 'start ::= "a"'})
    refused('a grammar and a response_format', {'type': 'json_object'}, 'grammar', 'give one', '/v1/completions',
            {'grammar': 'root ::= "a"'})
    # Bytes no token of this vocabulary spells... every byte has a GPT-2 token; so a grammar the model cannot
    # finish within max_tokens ends with "length".
    status, r = srv.complete(prompt='x', max_tokens=3, grammar='root ::= "abcdefghijklmnopqrstuvwxyz"', seed=1)
    check('a grammar longer than max_tokens: finish_reason length, a prefix of it',
          status == 200 and r['choices'][0]['finish_reason'] == 'length' and
          'abcdefghijklmnopqrstuvwxyz'.startswith(r['choices'][0]['text']), r)
    check('the server still answers', srv.alive())
finally:
    check('the server stops cleanly', srv.stop() == 0)
finish()
