"""mmgpt: run GPT-family language models converted to .mmgpt files, on the CPU.

    import mmgpt
    lm = mmgpt.load("model.mmgpt")
    print(lm.generate("ROMEO:", max_new_tokens=50, seed=1).text)
    for piece in lm.stream("ROMEO:", max_new_tokens=50):
        print(piece, end="", flush=True)
    print(lm.perplexity(open("test.txt").read()).perplexity)

Every call gives what the mmgpt command line gives for the same inputs,
options and seed. Errors raise mmgpt.Error (a ValueError) with the command
line's one-line message. The engine runs with the GIL released, so Python
threads can run models in parallel; Ctrl-C stops a long call within a token,
a window, or a 256-token step of a long prompt.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple, Union

from . import _mmgpt
from ._mmgpt import Config, Error

# The bundled GPT-2 vocabulary (setup.py copies it beside this file), for
# checkpoints converted without tokenizer files.
_mmgpt._set_data_dir(os.path.join(os.path.dirname(__file__), "data"))

__all__ = ["Error", "Config", "Model", "GenerationResult", "TokenLogprob", "ScoreResult", "PerplexityResult",
           "TextStream", "load", "convert"]

Prompt = Union[str, Sequence[int]]


@dataclass(frozen=True)
class TokenLogprob:
    """A token and its log-probability given the tokens before it (the
    log-softmax of the model's logits, before any sampling option), with the
    most likely tokens at that position: `top`, [(token, logprob), ...], most
    likely first (the lower id first among equal logits)."""

    token: int
    logprob: float
    top: List[Tuple[int, float]] = field(default_factory=list)


@dataclass(frozen=True)
class ScoreResult:
    """How likely a continuation is after a context (Model.score):
    lm-evaluation-harness's loglikelihood, (logprob, greedy)."""

    logprob: float  # the sum of the continuation tokens' log-probabilities
    greedy: bool  # every continuation token is the most likely one at its position
    tokens: List[TokenLogprob]  # each continuation token's


@dataclass(frozen=True)
class GenerationResult:
    """One continuation: its text (without the prompt), the generated ids,
    and why it stopped: "length" (max_new_tokens), "eos" (the end-of-text
    token), "stop" (a stop string) or "interrupted"."""

    text: str
    tokens: List[int]
    stop_reason: str
    text_bytes: bytes = field(repr=False)  # the exact bytes (text decodes them, invalid UTF-8 replaced)
    prompt_tokens: int = 0
    logprobs: Optional[List[TokenLogprob]] = None  # with logprobs=N: one per generated token


@dataclass(frozen=True)
class PerplexityResult:
    """Perplexity over sliding windows, as `mmgpt perplexity` reports it."""

    perplexity: float
    mean_nll: float  # nats per scored token
    tokens: int  # tokens whose prediction was scored
    windows: int = 0
    ctx: int = 0
    stride: int = 0


def _result(d: dict) -> GenerationResult:
    raw = d["text"]
    return GenerationResult(
        text=raw.decode("utf-8", errors="replace"),
        tokens=list(d["tokens"]),
        stop_reason=d["stop_reason"],
        text_bytes=raw,
        prompt_tokens=d["prompt_tokens"],
        logprobs=_logprobs(d["logprobs"]) if "logprobs" in d else None,
    )


def _logprobs(native) -> List[TokenLogprob]:
    return [TokenLogprob(token, logprob, [tuple(t) for t in top]) for token, logprob, top in native]


def _grammar(response_format, grammar) -> Optional[str]:
    """The GBNF text constraining the output: from OpenAI's response_format
    ({"type": "json_object"} or {"type": "json_schema", "json_schema":
    {"schema": {...}}}; {"type": "text"} is none) or a grammar given as is."""
    if grammar is not None:
        if response_format is not None and response_format != {"type": "text"}:
            raise Error("give response_format or grammar, not both")
        if not isinstance(grammar, str) or not grammar:
            raise Error(f"grammar: must be GBNF text, not {grammar!r}")
        return grammar
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or not isinstance(response_format.get("type"), str):
        raise Error(f"response_format: must be a dict with a 'type', not {response_format!r}")
    kind = response_format["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return _mmgpt.json_object_grammar()
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if schema is None:
            raise Error("response_format: a json_schema needs {'json_schema': {'schema': ...}}")
        return _mmgpt.json_schema_grammar(schema if isinstance(schema, str) else json.dumps(schema))
    raise Error(f"response_format: type must be 'text', 'json_object' or 'json_schema', not {kind!r}")


def _top_count(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 20):
        raise Error(f"{name}: must be an integer in [0, 20] or None, not {value!r}")


def _threads(threads: Optional[int]) -> int:
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise Error(f"threads: must be a positive integer or None, not {threads!r}")
    return threads


def _sampling(max_new_tokens, greedy, temperature, top_k, top_p, min_p, repetition_penalty, seed, stop, ignore_eos):
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 0 <= max_new_tokens <= 2**24:
        raise Error(f"max_new_tokens: must be an integer in [0, 2**24], not {max_new_tokens!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 <= top_k < 2**32:
        raise Error(f"top_k: must be an integer in [0, 2**32) (0 = all tokens), not {top_k!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64):
        raise Error(f"seed: must be an integer in [0, 2**64) or None, not {seed!r}")
    if isinstance(stop, str):
        stop = (stop,)
    for name, value in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p),
                        ("repetition_penalty", repetition_penalty)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise Error(f"{name}: must be a number, not {value!r}")
    return dict(max_new_tokens=max_new_tokens, greedy=bool(greedy), temperature=float(temperature), top_k=top_k,
                top_p=None if top_p is None else float(top_p), min_p=None if min_p is None else float(min_p),
                repetition_penalty=float(repetition_penalty), seed=seed, stop=list(stop),
                ignore_eos=bool(ignore_eos))


class Model:
    """A loaded .mmgpt model (mmgpt.load). Its weights are memory-mapped and
    shared by every call; calls from several Python threads run in parallel."""

    def __init__(self, native: "_mmgpt.Model", path: str):
        self._m = native
        self.path = path

    def __repr__(self) -> str:
        return f"mmgpt.Model({self.path!r}, {self.config!r})"

    @property
    def config(self) -> Config:
        """n_layer, n_head, n_embd, vocab_size and n_ctx."""
        return self._m.config

    def encode(self, text: str, allow_special: bool = True) -> List[int]:
        """Text -> token ids. With allow_special, "<|endoftext|>" is the end-of-text token."""
        return self._m.encode(text, allow_special)

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """Token ids -> their exact bytes."""
        return self._m.decode_bytes(list(ids))

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids -> text (bytes that are not valid UTF-8 become U+FFFD)."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def logits(self, ids: Sequence[int], *, threads: Optional[int] = None):
        """The logits after every token: a float32 numpy array [len(ids), vocab_size],
        the values `mmgpt logits` prints. At most n_ctx ids."""
        return self._m.logits(list(ids), _threads(threads))

    def generate(self, prompt: Prompt, max_new_tokens: int = 256, *, greedy: bool = False, temperature: float = 0.8,
                 top_k: int = 200, top_p: Optional[float] = None, min_p: Optional[float] = None,
                 repetition_penalty: float = 1.0, seed: Optional[int] = None, stop: Sequence[str] = (),
                 ignore_eos: bool = False, threads: Optional[int] = None,
                 logprobs: Optional[int] = None, response_format: Optional[dict] = None,
                 grammar: Optional[str] = None) -> GenerationResult:
        """A continuation of `prompt` (a str, or a list of token ids): exactly
        what `mmgpt generate` prints after the prompt for the same options and seed.
        logprobs=N (0 to 20): each generated token's log-probability and the N
        most likely tokens at its step, in the result's `logprobs` (what the
        server's completions answer with logprobs N).
        response_format (OpenAI's: {"type": "json_object"} or {"type":
        "json_schema", "json_schema": {"schema": {...}}}) or grammar (GBNF
        text) constrains the output to what they accept."""
        return self.generate_batch([prompt], max_new_tokens, greedy=greedy, temperature=temperature, top_k=top_k,
                                   top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty, seed=seed,
                                   stop=stop, ignore_eos=ignore_eos, threads=threads, logprobs=logprobs,
                                   response_format=response_format, grammar=grammar)[0]

    def generate_batch(self, prompts: Sequence[Prompt], max_new_tokens: int = 256, *, greedy: bool = False,
                       temperature: float = 0.8, top_k: int = 200, top_p: Optional[float] = None,
                       min_p: Optional[float] = None, repetition_penalty: float = 1.0, seed: Optional[int] = None,
                       stop: Sequence[str] = (), ignore_eos: bool = False,
                       threads: Optional[int] = None, logprobs: Optional[int] = None,
                       response_format: Optional[dict] = None,
                       grammar: Optional[str] = None) -> List[GenerationResult]:
        """Continuations of several prompts, run together in batched steps;
        each is what generate() gives for that prompt alone."""
        if isinstance(prompts, (str, bytes)):
            raise Error("prompts: give a list of prompts (for one prompt, use generate)")
        opts = _sampling(max_new_tokens, greedy, temperature, top_k, top_p, min_p, repetition_penalty, seed, stop,
                         ignore_eos)
        _top_count("logprobs", logprobs)
        return [_result(d) for d in self._m.generate_batch(list(prompts), threads=_threads(threads),
                                                           logprobs=logprobs,
                                                           grammar=_grammar(response_format, grammar), **opts)]

    def stream(self, prompt: Prompt, max_new_tokens: int = 256, *, greedy: bool = False, temperature: float = 0.8,
               top_k: int = 200, top_p: Optional[float] = None, min_p: Optional[float] = None,
               repetition_penalty: float = 1.0, seed: Optional[int] = None, stop: Sequence[str] = (),
               ignore_eos: bool = False, threads: Optional[int] = None,
               logprobs: Optional[int] = None, response_format: Optional[dict] = None,
               grammar: Optional[str] = None) -> TextStream:
        """generate(), as an iterator of text pieces while they are made (never
        half a UTF-8 character, never part of a stop string). Joined, they are
        generate()'s text; afterwards the stream's `result` is generate()'s
        GenerationResult. Leaving the loop early stops generation."""
        opts = _sampling(max_new_tokens, greedy, temperature, top_k, top_p, min_p, repetition_penalty, seed, stop,
                         ignore_eos)
        _top_count("logprobs", logprobs)
        return TextStream(self._m.stream(prompt, threads=_threads(threads), logprobs=logprobs,
                                         grammar=_grammar(response_format, grammar), **opts))

    def score(self, context: Prompt, continuation: Prompt, *, top_logprobs: int = 0,
              threads: Optional[int] = None) -> ScoreResult:
        """How likely `continuation` is after `context`: lm-evaluation-harness's
        loglikelihood request. Texts are encoded as the harness encodes a pair
        (spaces ending the context move to the continuation; the continuation's
        tokens are those of context + continuation after the context's); token
        ids are taken as they are. An empty context starts from the BOS the
        tokenizer adds, else the end-of-text token. The same values as the
        server's completions with echo and logprobs."""
        _top_count("top_logprobs", top_logprobs)
        if isinstance(context, str) != isinstance(continuation, str):
            raise Error("score: give the context and the continuation both as text or both as token ids")
        if isinstance(context, str):
            if not continuation:
                raise Error("continuation: the text is empty")
            spaces = len(context) - len(context.rstrip())
            if spaces:
                context, continuation = context[:-spaces], context[-spaces:] + continuation
            whole = self.encode(context + continuation)
            ctx = self.encode(context) if context else []
            ctx_ids, cont_ids = ctx, whole[len(ctx):]
        else:
            ctx_ids, cont_ids = list(context), list(continuation)
        d = self._m.score(ctx_ids, cont_ids, top_logprobs, _threads(threads))
        return ScoreResult(logprob=d["logprob"], greedy=d["greedy"], tokens=_logprobs(d["logprobs"]))

    def apply_chat_template(self, messages: Sequence[dict], *, add_generation_prompt: bool = True,
                            chat_template: Optional[str] = None, **template_variables) -> str:
        """The prompt the model's chat template (or `chat_template`: a Jinja
        template, or a tokenizer_config.json's text) renders for `messages`,
        as transformers' apply_chat_template(..., tokenize=False) does; extra
        keyword arguments are more template variables (Qwen3's enable_thinking, say)."""
        variables = {**template_variables, "messages": list(messages)}
        return self._m.render_chat(json.dumps(variables, ensure_ascii=False), add_generation_prompt,
                                   chat_template)

    def chat(self, messages: Sequence[dict], max_new_tokens: int = 256, *, chat_template: Optional[str] = None,
             chat_template_kwargs: Optional[dict] = None, **options) -> GenerationResult:
        """The assistant's reply to `messages`: the prompt apply_chat_template
        renders, generated as generate() does (the same options; generation
        stops at any end-of-turn token) -- what the server's
        /v1/chat/completions answers for the same options and seed."""
        prompt = self.apply_chat_template(messages, chat_template=chat_template, **(chat_template_kwargs or {}))
        return self.generate(prompt, max_new_tokens, **options)

    def chat_stream(self, messages: Sequence[dict], max_new_tokens: int = 256, *, chat_template: Optional[str] = None,
                    chat_template_kwargs: Optional[dict] = None, **options) -> "TextStream":
        """chat(), streamed: a TextStream of the reply's pieces."""
        prompt = self.apply_chat_template(messages, chat_template=chat_template, **(chat_template_kwargs or {}))
        return self.stream(prompt, max_new_tokens, **options)

    def perplexity(self, text_or_ids: Union[str, Sequence[int]], ctx: Optional[int] = None,
                   stride: Optional[int] = None, *, threads: Optional[int] = None) -> PerplexityResult:
        """Perplexity of a text (or token ids) over sliding windows of ctx tokens
        advancing by stride (defaults as `mmgpt perplexity`): the same figures."""
        for name, value in (("ctx", ctx), ("stride", stride)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise Error(f"{name}: must be a positive integer or None, not {value!r}")
        ids = text_or_ids if isinstance(text_or_ids, str) else list(text_or_ids)
        d = self._m.perplexity(ids, ctx, stride, _threads(threads))
        return PerplexityResult(perplexity=d["perplexity"], mean_nll=d["mean_nll"], tokens=d["tokens"],
                                windows=d["windows"], ctx=d["ctx"], stride=d["stride"])


class TextStream:
    """The text pieces of one generation while they are made (Model.stream).

    Iterate it for str pieces; joined, they are generate()'s text. Once the
    iteration has ended, `result` is the GenerationResult generate() would
    have given (its stop_reason says why it stopped). Leaving the loop early
    and calling close() (or dropping the stream) stops generation at the next
    step; `result` then says "interrupted" (unless generation had already
    ended)."""

    def __init__(self, native):
        self._native = native
        self._result: Optional[GenerationResult] = None

    def __iter__(self) -> TextStream:
        return self

    def __next__(self) -> str:
        if self._native is None:
            raise StopIteration
        try:
            piece = self._native.next()
        except BaseException:
            self.close()
            raise
        if piece is None:
            self.close()
            raise StopIteration
        return piece.decode("utf-8", errors="replace")

    @property
    def result(self) -> Optional[GenerationResult]:
        """The whole GenerationResult once generation has ended; None before."""
        return self._result

    def close(self) -> None:
        """Stops generation (at its next token) and waits for it to end."""
        if self._native is not None:
            native, self._native = self._native, None
            native.close()
            d = native.result()
            if d is not None:
                self._result = _result(d)

    def __del__(self):
        self.close()


def load(path: str) -> Model:
    """Maps and validates a .mmgpt file (as the command line does); raises mmgpt.Error naming what is wrong."""
    path = os.fspath(path)
    return Model(_mmgpt.Model.load(path), path)


def convert(src, out, *, layout: Optional[str] = None, n_head: Optional[int] = None, dtype: str = "f32",
            dtype_head: Optional[str] = None, tokenizer: Optional[str] = None, config=None) -> None:
    """Converts a PyTorch model to the .mmgpt file `out`, as `mmgpt convert` does.

    src is a checkpoint path (a file, or a folder holding one), a checkpoint as
    torch.load returns it (nanoGPT's dict with 'model' and 'model_args'), a
    state dict (name -> torch.Tensor or numpy array), or an nn.Module (its
    state_dict()). In-memory input is read where it lies: nothing is written
    but `out`, nothing is pickled. The file equals what the command line
    writes for the same weights saved with torch.save.

    layout: "hf-gpt2", "nanogpt", "llms-from-scratch", "hf-llama", "hf-gpt-neox"
    or "nanochat" (None: detected; hf-llama and hf-gpt-neox read a path, whose
    config.json says the family).
    n_head: needed where neither the checkpoint nor a module's config says it.
    dtype, dtype_head: "f32", "bf16", "f16", "q8_0" or "q4_0" for the weight
    matrices and the LM head (dtype_head None: as dtype).
    tokenizer: meta.pkl, vocab.json/merges.txt or encoder.json/vocab.bpe, or a
    folder holding them (a path src also finds them beside the checkpoint).
    config: the model's config, for a state dict in memory whose layout needs
    one (Hugging Face Llama / Qwen / GPT-NeoX, the book's Llama3Model /
    Qwen3Model, nanochat): a dict (config.json's keys, the book's config
    dict, nanochat's meta or its model_config; a torch dtype in it is written
    as its name), a JSON string, an object with to_dict() (a transformers
    config) or a dataclass (nanochat's GPTConfig). None: taken from an
    nn.Module's .config (transformers, nanochat) or .cfg (the book), else read
    beside a path.
    """
    if n_head is not None and (isinstance(n_head, bool) or not isinstance(n_head, int) or n_head < 1):
        raise Error(f"n_head: must be a positive integer or None, not {n_head!r}")
    args = (os.fspath(out), layout or "auto", n_head or 0, dtype, dtype_head or "",
            "" if tokenizer is None else os.fspath(tokenizer))
    if isinstance(src, (str, os.PathLike)):
        if config is not None:
            raise Error("config: give it with a checkpoint in memory; a path's config.json is read beside it")
        _mmgpt.convert(os.fspath(src), *args)
        return
    if config is not None:
        config_json = _config_json(config)
    else:  # an nn.Module's own: the book's keep a dict in .cfg, transformers' an object in .config
        config_json = ""
        found = getattr(src, "cfg", None) if not isinstance(src, dict) else None
        hf = getattr(src, "config", None) if not isinstance(src, dict) else None
        if found is None and (callable(getattr(hf, "to_dict", None)) or
                              (dataclasses.is_dataclass(hf) and not isinstance(hf, type))):
            found = hf
        if found is not None:
            try:
                config_json = _config_json(found)
            except Error:  # not a config the modern layouts read; the others need none
                config_json = ""
    if not isinstance(src, dict) and callable(getattr(src, "state_dict", None)):
        if n_head is None:  # nanoGPT's and Hugging Face's modules say it in their config
            n_head = getattr(getattr(src, "config", None), "n_head", None)
            if isinstance(n_head, int) and not isinstance(n_head, bool) and n_head > 0:
                args = args[:2] + (n_head,) + args[3:]
        src = src.state_dict()
    _mmgpt.convert_object(src, *args, config_json)


def _config_json(config) -> str:
    """The model config as JSON text for the converter ("" for none)."""
    if config is None:
        return ""
    if isinstance(config, str):
        return config
    if callable(getattr(config, "to_dict", None)) and not isinstance(config, dict):
        config = config.to_dict()
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    if not isinstance(config, dict):
        raise Error(f"config: must be a dict, a JSON string, an object with to_dict() or a dataclass, "
                    f"not {type(config).__name__}")

    def plain(v):  # torch.bfloat16 -> "bfloat16"; anything else JSON cannot hold is an error
        text = str(v)
        if text.startswith("torch."):
            return text[len("torch."):]
        raise Error(f"config: value {v!r} cannot be written as JSON")
    return json.dumps(config, default=plain)
