"""`mmgpt serve`'s POST /v1/chat/completions.

A chat completion is the model's chat template rendered over the messages
(with the assistant's header), encoded without adding special tokens again,
then generated as a completion: its text must equal `mmgpt generate` on the
prompt `mmgpt chat-template` renders, streamed or not, greedy or seeded, raw
and through the official OpenAI client (openai_client.mjs). Servers:
  the bundled demo model with --chat-template FILE;
  the same without one: chat gets a 400 that says why;
  a model whose tokenizer carries its chat format (nanochat's tokenizer.pkl).
Every field OpenAI defines that the server does not honour is refused naming it.
"""
import json
import os
import sys

from server_harness import ROOT, W, Server, check, demo_model, finish, generate_cli, openai_client, run

sys.path.insert(0, os.path.join(ROOT, 'tests', 'tokenizer'))
from hf_models import tiny_llama_dir  # noqa: E402
from tiktoken_files import NANOCHAT_PATTERN, NANOCHAT_SPECIALS, write_encoding_pickle  # noqa: E402


TEMPLATE = os.path.join(W, 'chat.jinja')
with open(TEMPLATE, 'w') as f:
    f.write("{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}"
            "{{ m['role'] | upper }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}{{ 'ASSISTANT' if not shout else 'ASSISTANT!' }}:{% endif %}")
DEMO = demo_model()


def rendered(model_args, messages, gen=True, **variables):
    """What `mmgpt chat-template` renders for these messages."""
    path = os.path.join(W, 'messages.json')
    with open(path, 'w') as f:
        json.dump({'messages': messages, **variables}, f)
    rc, out, err = run('chat-template', *model_args, '--messages', path, *(['--add-generation-prompt'] if gen else []))
    assert rc == 0, err
    return out



CONVERSATION = [{'role': 'system', 'content': 'You speak as Shakespeare.'},
                {'role': 'user', 'content': 'ROMEO: What light through yonder window breaks?'}]
srv = Server(DEMO, '--chat-template', TEMPLATE, name='chat')
try:
    prompt = rendered(['--template', TEMPLATE], CONVERSATION)
    check('the template renders', prompt.endswith('ASSISTANT:') and 'SYSTEM: You speak' in prompt, prompt)
    for name, opts, body_opts in [('greedy', {'greedy': True}, {'temperature': 0}),
                                  ('seeded', {'temperature': 0.9, 'seed': 7}, {'temperature': 0.9, 'seed': 7})]:
        want = generate_cli(DEMO, prompt, 24, **opts)
        body = {'messages': CONVERSATION, 'max_tokens': 24, 'top_k': 200, **body_opts}
        status, r = srv.json('POST', '/v1/chat/completions', body)
        ok = status == 200 and r['object'] == 'chat.completion' and r['id'].startswith('chatcmpl-')
        check(f'{name}: a chat.completion', ok, r)
        if ok:
            choice = r['choices'][0]
            check(f'{name}: the text is mmgpt generate\'s on the rendered prompt',
                  choice['message'] == {'role': 'assistant', 'content': want}, (choice, want))
            check(f'{name}: finish_reason and usage', choice['finish_reason'] == 'length' and
                  r['usage']['completion_tokens'] == 24 and r['usage']['prompt_tokens'] == len(prompt.encode()),
                  r['usage'])
        status, events, done = srv.stream('/v1/chat/completions', **body)
        check(f'{name}: streamed', status == 200 and done and all(e['object'] == 'chat.completion.chunk'
                                                                  for e in events), events[:2])
        if status == 200 and events:
            check(f'{name}: the first delta carries the role', events[0]['choices'][0]['delta'].get('role') ==
                  'assistant', events[0])
            text = ''.join(e['choices'][0]['delta'].get('content', '') for e in events if e['choices'])
            check(f'{name}: the deltas make the same text', text == want, (text, want))
            check(f'{name}: the last chunk ends it', events[-1]['choices'][0]['finish_reason'] == 'length',
                  events[-1])
    # max_completion_tokens is max_tokens' newer name; both, differing, are refused.
    status, r = srv.json('POST', '/v1/chat/completions', {'messages': CONVERSATION, 'max_completion_tokens': 5})
    check('max_completion_tokens', status == 200 and r['usage']['completion_tokens'] == 5, r)
    # Neither: the completion may run to the context's end.
    n_ctx = json.loads(run('inspect', DEMO, '--json')[1])['config']['n_ctx']
    status, r = srv.json('POST', '/v1/chat/completions', {'messages': CONVERSATION, 'temperature': 0})
    check('no max_tokens: up to the context', status == 200 and r['usage']['total_tokens'] == n_ctx and
          r['choices'][0]['finish_reason'] == 'length', r)
    # Template variables (vLLM's chat_template_kwargs) and add_generation_prompt.
    status, r = srv.json('POST', '/v1/chat/completions', {'messages': CONVERSATION, 'max_tokens': 3, 'temperature': 0,
                                                         'chat_template_kwargs': {'shout': True}})
    check('chat_template_kwargs', status == 200 and r['usage']['prompt_tokens'] ==
          len(rendered(['--template', TEMPLATE], CONVERSATION, shout=True).encode()), r)
    status, r = srv.json('POST', '/v1/chat/completions', {'messages': CONVERSATION, 'max_tokens': 3,
                                                         'add_generation_prompt': False})
    check('add_generation_prompt false', status == 200 and r['usage']['prompt_tokens'] ==
          len(rendered(['--template', TEMPLATE], CONVERSATION, gen=False).encode()), r)

    # Refused, naming the field.
    for case, extra, param, message in [
        ('no messages', {'messages': None}, 'messages', 'required'),
        ('empty messages', {'messages': []}, 'messages', 'non-empty'),
        ('a message without a role', {'messages': [{'content': 'x'}]}, 'messages[0].role', 'non-empty string'),
        ('an image part', {'messages': [{'role': 'user', 'content': [{'type': 'image_url', 'image_url': {}}]}]},
         'messages[0].content[0].type', 'reads text'),
        ('tools', {'tools': [{'type': 'function', 'function': {'name': 'f'}}]}, 'tools', 'does not call tools'),
        ('top_logprobs without logprobs', {'top_logprobs': 2}, 'top_logprobs', "needs 'logprobs': true"),
        ('json mode where no token spells "{"', {'response_format': {'type': 'json_object'}}, 'response_format',
         'allows no token of this vocabulary'),
        ('n 17', {'n': 17}, 'n', 'at most 16'),
        ('audio', {'audio': {'voice': 'alloy'}}, 'audio', 'not supported'),
        ('stored', {'store': True}, 'store', 'not stored'),
        ('both max fields', {'max_tokens': 3, 'max_completion_tokens': 4}, 'max_tokens', 'differ'),
        ('the template refuses', {'messages': [{'role': 'tool', 'content': 'x'}]}, 'messages', 'no tools here'),
    ]:
        status, r = srv.json('POST', '/v1/chat/completions', {'messages': CONVERSATION, **extra})
        err = r.get('error', {}) if isinstance(r, dict) else {}
        check(f'refused: {case}', status == 400 and err.get('param') == param and message in err.get('message', ''),
              (status, r))
    # Huge message arrays: rendered and refused for the context quickly, or refused for the body's size.
    import time
    t0 = time.monotonic()
    status, r = srv.json('POST', '/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}] * 20000})
    check('20,000 messages: 400 for the context, within seconds', status == 400 and
          r['error']['code'] == 'context_length_exceeded' and time.monotonic() - t0 < 20, (status, r))
    status, _, _ = srv.request('POST', '/v1/chat/completions',
                               {'messages': [{'role': 'user', 'content': 'hi'}] * 100000})
    check('100,000 messages: 413, the body is over --max-body', status == 413, status)
    check('the server still answers after them', srv.alive())
    status, r = srv.json('POST', '/v1/chat/completions', {'messages': CONVERSATION, 'model': 'nope'})
    check('an unknown model: 404', status == 404 and r['error']['code'] == 'model_not_found', r)

    # The official client, streamed and not.
    body = {'model': srv.ready_line.split('(model ')[1].split(',')[0], 'messages': CONVERSATION, 'max_tokens': 16,
            'temperature': 0}
    out = openai_client(srv, [{'name': 'chat', 'op': 'chat', 'body': body},
                              {'name': 'stream', 'op': 'chat_stream', 'body': {**body, 'stream_options':
                                                                               {'include_usage': True}}}])
    want = generate_cli(DEMO, prompt, 16, greedy=True)
    got = out.get('chat', {}).get('response', {})
    check('openai client: chat.completions.create', got.get('choices', [{}])[0].get('message', {}).get('content') ==
          want, got)
    chunks = out.get('stream', {}).get('chunks', [])
    text = ''.join((c['choices'][0]['delta'].get('content') or '') for c in chunks if c.get('choices'))
    check('openai client: streamed', text == want and chunks and chunks[-1].get('usage', {}).get(
        'completion_tokens') == 16, (text, want, chunks[-1:] if chunks else None))
finally:
    check('the server stops cleanly', srv.stop() == 0)

# A template that blows up: its output limit answers 400 quickly; the server stays up.
blow = os.path.join(W, 'blow.jinja')
with open(blow, 'w') as f:
    f.write("{% for i in range(100000) %}{% for j in range(100000) %}{{ messages[0]['content'] * 1000 }}"
            "{% endfor %}{% endfor %}")
big = Server(DEMO, '--chat-template', blow, name='chat-blow')
try:
    status, r = big.json('POST', '/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}]})
    check('a template that blows up: 400 naming its limit', status == 400 and 'output limit' in r['error']['message'],
          (status, r))
    check('... and the server goes on', big.alive())
finally:
    big.stop()

# Without a template: a 400 that says why.
plain = Server(DEMO, name='chat-plain')
try:
    status, r = plain.json('POST', '/v1/chat/completions', {'messages': CONVERSATION})
    check('no template: 400', status == 400 and 'no chat template' in r['error']['message'] and
          '--chat-template' in r['error']['message'], r)
finally:
    plain.stop()

# A model whose tokenizer carries its chat format: nanochat's tokenizer.pkl (56 ranks
# and its 9 special tokens) on a zero-weight model of 65 rows.
d = os.path.join(W, 'nanochat-chat')
tiny_llama_dir(d, 65)
small = [bytes([c]) for c in b' abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,!']
write_encoding_pickle(os.path.join(d, 'tokenizer.pkl'), 'rustbpe', NANOCHAT_PATTERN, small, NANOCHAT_SPECIALS)
model = os.path.join(W, 'nanochat-chat.mmgpt')
rc, _, err = run('convert', d, '-o', model)
check('the nanochat model converts', rc == 0, err)
nc = Server(model, name='chat-nanochat')
try:
    messages = [{'role': 'user', 'content': 'Hi there'}]
    prompt = rendered(['-m', model], messages)
    check('nanochat: its template', prompt == '<|bos|><|user_start|>Hi there<|user_end|><|assistant_start|>', prompt)
    rc, ids, _ = run('tokenize', '-m', model, '-p', prompt)
    status, r = nc.json('POST', '/v1/chat/completions', {'messages': messages, 'max_tokens': 4, 'temperature': 0})
    check('nanochat: the prompt is the template\'s, specials included', status == 200 and
          r['usage']['prompt_tokens'] == len(ids.split()), (r, ids))
    status, r = nc.json('POST', '/v1/chat/completions', {'messages': messages * 2})
    check('nanochat: its template refuses turns that do not alternate', status == 400 and
          'should be from assistant' in r['error']['message'], r)
finally:
    nc.stop()
finish()
