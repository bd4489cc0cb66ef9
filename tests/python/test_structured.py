"""Structured output in the Python package: response_format (OpenAI's
json_object and json_schema) and grammar (GBNF) on generate, generate_batch,
stream and chat, against python3-jsonschema, and equal to `mmgpt generate
--json-schema` for the same seed. The model is tiny-gpt2-hf (GPT-2's real
vocabulary, random weights): a valid answer is the constraint's doing."""
import json
import re

import jsonschema
import pytest

import mmgpt

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 20},
        "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
        "genres": {"type": "array", "items": {"enum": ["drama", "comedy", "noir"]}, "minItems": 1, "maxItems": 2},
        "rating": {"type": ["number", "null"]},
    },
    "required": ["title", "year", "genres"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "film", "schema": SCHEMA, "strict": True}}


def test_json_schema_on_every_call(gpt2):
    for seed in range(5):
        r = gpt2.generate("A film:", 300, seed=seed, temperature=1.0, response_format=FORMAT)
        assert r.stop_reason == "eos", r
        jsonschema.validate(json.loads(r.text), SCHEMA)
        assert list(json.loads(r.text))[:2] == ["title", "year"]  # the schema's order
    batch = gpt2.generate_batch(["A film:", "Another:"], 300, seed=7, response_format=FORMAT)
    assert batch[0].text == gpt2.generate("A film:", 300, seed=7, response_format=FORMAT).text
    for r in batch:
        jsonschema.validate(json.loads(r.text), SCHEMA)
    s = gpt2.stream("A film:", 300, seed=7, response_format=FORMAT)
    assert "".join(s) == batch[0].text
    template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    c = gpt2.chat([{"role": "user", "content": "Name a film."}], 300, chat_template=template, seed=3,
                  response_format=FORMAT)
    jsonschema.validate(json.loads(c.text), SCHEMA)


def test_equal_to_the_cli(cli, work, gpt2):
    schema_file = work / "film.json"
    schema_file.write_text(json.dumps(SCHEMA))
    for seed in (1, 2):
        want = cli("generate", "-m", gpt2.path, "-p", "A film:", "-n", 300, "--seed", seed, "--json-schema",
                   schema_file).stdout
        got = gpt2.generate("A film:", 300, seed=seed, response_format=FORMAT)
        assert b"A film:" + got.text_bytes + b"\n" == want


def test_json_object_and_grammar(gpt2):
    results = [gpt2.generate("x", 300, seed=seed, response_format={"type": "json_object"}) for seed in range(4)]
    ended = [r for r in results if r.stop_reason == "eos"]
    assert ended, [r.text[:60] for r in results]  # the random model closes some object within 300 tokens
    for r in ended:
        assert isinstance(json.loads(r.text), dict)
    r = gpt2.generate("x", 30, seed=4, grammar='root ::= "yes" | "no" | [0-9]{1,3}')
    assert re.fullmatch(r"yes|no|[0-9]{1,3}", r.text)
    assert gpt2.generate("x", 5, seed=1, response_format={"type": "text"}).text == gpt2.generate("x", 5, seed=1).text


def test_errors(gpt2):
    with pytest.raises(mmgpt.Error, match="'pattern' is not supported"):
        gpt2.generate("x", 5, response_format={"type": "json_schema",
                                               "json_schema": {"schema": {"type": "string", "pattern": "a"}}})
    with pytest.raises(mmgpt.Error, match="needs"):
        gpt2.generate("x", 5, response_format={"type": "json_schema"})
    with pytest.raises(mmgpt.Error, match="type must be"):
        gpt2.generate("x", 5, response_format={"type": "yaml"})
    with pytest.raises(mmgpt.Error, match="not both"):
        gpt2.generate("x", 5, response_format={"type": "json_object"}, grammar='root ::= "a"')
    with pytest.raises(mmgpt.Error, match="no 'root'"):
        gpt2.generate("x", 5, grammar='start ::= "a"')
    with pytest.raises(mmgpt.Error, match="left recursion"):
        gpt2.generate("x", 5, response_format={"type": "json_schema", "json_schema": {"schema": {"$ref": "#"}}})
