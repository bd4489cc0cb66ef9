// Reference GPT-2 token ids from js-tiktoken, for test_bpe_conformance.py.
// Usage: node reference.js LIST_FILE OUT_JSON
//   LIST_FILE: one path per line, each a UTF-8 text file.
//   OUT_JSON: {"stock": [[ids]...], "white_space": [[ids]...]} in list order.
// "stock" is js-tiktoken's gpt2 encoding as shipped. "white_space" is the same
// ranks and algorithm with JavaScript's \s replaced by Unicode White_Space,
// the \s of OpenAI's original (Python's `regex`) that mmgpt follows: the two
// differ only on U+0085 (space in White_Space, not in JS) and U+FEFF (the reverse).
// "<|endoftext|>" is encoded as the special token, as mmgpt does by default.
"use strict";
const fs = require("fs");
const { Tiktoken } = require("js-tiktoken/lite");
const gpt2 = require("js-tiktoken/ranks/gpt2");

const GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
if (gpt2.pat_str !== GPT2_PATTERN) throw new Error("js-tiktoken's gpt2 pattern is not GPT-2's: " + gpt2.pat_str);
const WS = "\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const whiteSpacePattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + WS + "\\p{L}\\p{N}]+|[" + WS +
  "]+(?![^" + WS + "])|[" + WS + "]+";

const stock = new Tiktoken(gpt2);
const whiteSpace = new Tiktoken({ ...gpt2, pat_str: whiteSpacePattern });
const [listFile, outFile] = process.argv.slice(2);
const paths = fs.readFileSync(listFile, "utf8").split("\n").filter(Boolean);
const out = { stock: [], white_space: [] };
for (const p of paths) {
  const text = fs.readFileSync(p, "utf8");
  out.stock.push(stock.encode(text, "all"));
  out.white_space.push(whiteSpace.encode(text, "all"));
}
fs.writeFileSync(outFile, JSON.stringify(out));
