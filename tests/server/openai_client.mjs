// Performs requests against `mmgpt serve` through the official OpenAI client
// (the npm package 'openai', pinned by tests/server/openai/package-lock.json)
// for test_openai_client.py, which compares what this prints with
// `mmgpt generate`.
//
//   node openai_client.mjs SPEC.json
//
// SPEC: {"baseURL": "http://127.0.0.1:PORT/v1", "apiKey": "...", "timeoutMs": N,
//        "ops": [OP, ...]}, each OP {"name": ..., "op": ..., ...}:
//   models                        models.list()                  -> {ids}
//   complete {body, apiKey?}      completions.create(body)       -> {response}
//   stream   {body, apiKey?}      the same with stream: true,
//                                 read with for await            -> {chunks}
//   chat     {body, apiKey?}      chat.completions.create(body)  -> {response}
//   chat_stream {body, apiKey?}   the same with stream: true     -> {chunks}
//   abort    {body, how, waitMs?} a stream left after its first chunk:
//                                 'break' out of for await, or 'controller':
//                                 stream.controller.abort() then break (the
//                                 client may not end an iteration on its own
//                                 once aborted); then GET /metrics polled
//                                 until mmgpt_sequences_running is 0
//                                                                -> {first, running, waitedMs}
//   parallel {ops}                its ops at once (Promise.all)  -> {results: {name: result}}
// Ops run one after the other. An op that throws gives {error: {...}} instead,
// naming the OpenAI error classes the exception is an instance of; one that
// has not settled after its own timeoutMs (default 60 s) gives {error: {hung: true}}.
// Prints {name: result, ...} as JSON on stdout.
//
// The script is run from a directory whose node_modules leads to
// tests/server/openai/node_modules (test_openai_client.py copies it into its
// work directory and links node_modules there), so that 'openai' resolves.
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';
import http from 'node:http';

const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'));

function client(apiKey) {
  return new OpenAI({
    baseURL: spec.baseURL,
    apiKey: apiKey ?? spec.apiKey ?? 'sk-no-key',
    maxRetries: 0,
    timeout: spec.timeoutMs ?? 30000,
  });
}

const ERROR_CLASSES = ['APIError', 'APIConnectionError', 'APIConnectionTimeoutError', 'APIUserAbortError',
  'BadRequestError', 'AuthenticationError', 'PermissionDeniedError', 'NotFoundError', 'ConflictError',
  'UnprocessableEntityError', 'RateLimitError', 'InternalServerError'];

function describe(e) {
  return {
    kinds: ERROR_CLASSES.filter((k) => OpenAI[k] && e instanceof OpenAI[k]),
    constructor: e?.constructor?.name ?? null,
    status: e?.status ?? null,
    message: String(e?.message ?? e),
    error: e?.error ?? null,  // the body's "error" object, for an APIError
    cause: causes(e?.cause),
  };
}

// "TypeError: fetch failed <- SocketError: other side closed (UND_ERR_SOCKET)" and the like.
function causes(c) {
  const out = [];
  for (let depth = 0; c && depth < 5; c = c.cause, depth++) out.push(`${c}${c.code ? ` (${c.code})` : ''}`);
  return out.length ? out.join(' <- ') : null;
}

// GET on the server's root (not under /v1), with the bearer key if any.
function get(path) {
  const url = new URL(path, spec.baseURL);
  const headers = spec.apiKey ? { Authorization: `Bearer ${spec.apiKey}` } : {};
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, timeout: 10000 }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: data }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on('error', reject);
  });
}

async function metric(name) {
  const { body } = await get('/metrics');
  const line = body.split('\n').find((l) => l.startsWith(name + ' '));
  return line === undefined ? null : Number(line.split(' ').pop());
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function perform(op) {
  const c = client(op.apiKey);
  switch (op.op) {
    case 'models': {
      const ids = [];
      for await (const m of c.models.list()) ids.push(m.id);
      return { ids };
    }
    case 'complete':
      return { response: await c.completions.create(op.body) };
    case 'stream': {
      const stream = await c.completions.create({ ...op.body, stream: true });
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      return { chunks };
    }
    case 'chat':
      return { response: await c.chat.completions.create(op.body) };
    case 'chat_stream': {
      const stream = await c.chat.completions.create({ ...op.body, stream: true });
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      return { chunks };
    }
    case 'abort': {
      const stream = await c.completions.create({ ...op.body, stream: true });
      let first = null;
      for await (const chunk of stream) {
        first = chunk;
        if (op.how === 'controller') stream.controller.abort();
        break;
      }
      const t0 = Date.now();
      let running = await metric('mmgpt_sequences_running');
      while (running !== 0 && Date.now() - t0 < (op.waitMs ?? 5000)) {
        await sleep(20);
        running = await metric('mmgpt_sequences_running');
      }
      return { first, running, waitedMs: Date.now() - t0 };
    }
    case 'parallel': {
      const results = await Promise.all(op.ops.map(run));
      return { results: Object.fromEntries(op.ops.map((o, i) => [o.name, results[i]])) };
    }
    default:
      throw new Error(`unknown op '${op.op}'`);
  }
}

async function run(op) {
  const ms = op.timeoutMs ?? 60000;
  let timer;
  const hung = new Promise((resolve) => {
    timer = setTimeout(() => resolve({ error: { hung: true, kinds: [], message: `not settled after ${ms} ms` } }), ms);
  });
  try {
    return await Promise.race([perform(op), hung]);
  } catch (e) {
    return { error: describe(e) };
  } finally {
    clearTimeout(timer);
  }
}

const out = {};
for (const op of spec.ops) out[op.name] = await run(op);
// Exit once written (a pipe takes it in pieces), whatever a hung op left pending.
process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
