// Reference ids from js-tiktoken (a port of tiktoken's encoder) for any
// vocabulary, for test_tiktoken_conformance.py.
// Usage: node tiktoken_reference.js SPEC_JSON LIST_FILE OUT_JSON
//   SPEC_JSON: {"pat_str": tiktoken's pattern, "special_tokens": {text: id},
//               "bpe_ranks": js-tiktoken's rank string}
//   LIST_FILE: one path per line, each a UTF-8 text file.
//   OUT_JSON: {"special": [[ids]...], "ordinary": [[ids]...], "decoded": [text...]}
//     special: encode(text, "all"); ordinary: the special tokens' text as plain
//     text (tiktoken's encode_ordinary); decoded: decode(special ids).
//
// tiktoken's patterns are Rust regexes, run here as JavaScript ones, rewritten
// to mean the same:
//   \s and \S: Unicode White_Space (Rust's \s), not JavaScript's \s, which
//     also holds U+FEFF and leaves out U+0085;
//   (?i:...) of ASCII letters: each letter as a class of its cases, with
//     U+017F (long s) beside s, as Unicode case folding has it (JavaScript
//     before ES2025 has no inline flags);
//   possessive ?+ and ++: greedy, which matches the same where, as in these
//     patterns, what follows cannot start inside what the quantifier took.
"use strict";
const fs = require("fs");
const { Tiktoken } = require("js-tiktoken/lite");

const WS = "\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

function caseClass(c) {
  const lo = c.toLowerCase(), up = c.toUpperCase();
  if (lo === up) return c;
  return "[" + lo + up + (lo === "s" ? "\\u017f" : "") + "]";
}

function toJs(pattern) {
  let out = "", inClass = false, caseless = 0, depth = 0;
  const caselessAt = [];
  for (let i = 0; i < pattern.length; ++i) {
    const c = pattern[i];
    if (c === "\\") {
      const e = pattern[i + 1];
      ++i;
      if ((e === "p" || e === "P") && pattern[i + 1] === "{") {  // a property, copied whole
        const end = pattern.indexOf("}", i);
        out += "\\" + pattern.slice(i, end + 1);
        i = end;
      } else if (e === "s") out += inClass ? WS : "[" + WS + "]";
      else if (e === "S") {
        if (inClass) throw new Error("\\S inside a class is not rewritten");
        out += "[^" + WS + "]";
      } else out += "\\" + e;
      continue;
    }
    if (inClass) {
      if (c === "]") inClass = false;
      out += caseless && /[a-zA-Z]/.test(c) ? caseClass(c).slice(1, -1) : c;
      continue;
    }
    if (c === "[") {
      inClass = true;
      out += c;
      continue;
    }
    if (c === "(" && pattern.startsWith("(?i:", i)) {
      out += "(?:";
      i += 3;
      ++depth;
      caselessAt.push(depth);
      ++caseless;
      continue;
    }
    if (c === "(") ++depth;
    if (c === ")") {
      if (caselessAt.length && caselessAt[caselessAt.length - 1] === depth) {
        caselessAt.pop();
        --caseless;
      }
      --depth;
    }
    if ("?+*}".includes(c) && pattern[i + 1] === "+") {
      out += c;
      ++i;  // possessive -> greedy
      continue;
    }
    out += caseless && /[a-zA-Z]/.test(c) ? caseClass(c) : c;
  }
  return out;
}

const [specFile, listFile, outFile] = process.argv.slice(2);
const spec = JSON.parse(fs.readFileSync(specFile, "utf8"));
const enc = new Tiktoken({ ...spec, pat_str: toJs(spec.pat_str) });
const paths = fs.readFileSync(listFile, "utf8").split("\n").filter(Boolean);
const out = { pattern: toJs(spec.pat_str), special: [], ordinary: [], decoded: [] };
for (const p of paths) {
  const text = fs.readFileSync(p, "utf8");
  const ids = enc.encode(text, "all");
  out.special.push(ids);
  out.ordinary.push(enc.encode(text, [], []));
  out.decoded.push(enc.decode(ids));
}
fs.writeFileSync(outFile, JSON.stringify(out));
