// Reference ids and decodings from Hugging Face's tokenizers, for test_hf_conformance.py.
// Usage: node hf_reference.js TOKENIZER_JSON LIST_FILE OUT_JSON
//   LIST_FILE: one path per line, each a UTF-8 text file.
//   OUT_JSON: {"rust": {"plain": [[ids]...], "special": [[ids]...], "decoded": [text...]},
//              "js": {same}, "js_error": null or why the JS port could not load the tokenizer}
// "rust" is the Rust library (@anush008/tokenizers: tokenizers 0.22 through
// N-API), the reference; "js" is the pure JavaScript port
// (@huggingface/tokenizers), a cross-check. "plain" is encode(text,
// add_special_tokens = false), "special" encode(text) with the
// post-processor's tokens, "decoded" decode(plain ids, skip_special_tokens = false).
"use strict";
const fs = require("fs");
const path = require("path");
const rust = require("@anush008/tokenizers");

async function main() {
  const [tokenizerJson, listFile, outFile] = process.argv.slice(2);
  const paths = fs.readFileSync(listFile, "utf8").split("\n").filter(Boolean);
  const texts = paths.map((p) => fs.readFileSync(p, "utf8"));
  const out = { rust: { plain: [], special: [], decoded: [] }, js: { plain: [], special: [], decoded: [] }, js_error: null };

  const r = rust.Tokenizer.fromFile(tokenizerJson);
  for (const text of texts) {
    const plain = Array.from((await r.encode(text, null, { addSpecialTokens: false })).getIds());
    out.rust.plain.push(plain);
    out.rust.special.push(Array.from((await r.encode(text, null, { addSpecialTokens: true })).getIds()));
    out.rust.decoded.push(await r.decode(plain, false));
  }

  try {
    const { Tokenizer } = await import("@huggingface/tokenizers");
    const json = JSON.parse(fs.readFileSync(tokenizerJson, "utf8"));
    const cfgPath = path.join(path.dirname(tokenizerJson), "tokenizer_config.json");
    const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
    const t = new Tokenizer(json, cfg);
    for (const text of texts) {
      const plain = Array.from(t.encode(text, { add_special_tokens: false }).ids);
      out.js.plain.push(plain);
      out.js.special.push(Array.from(t.encode(text, { add_special_tokens: true }).ids));
      // The port refuses to decode no ids at all; the Rust library gives "".
      out.js.decoded.push(plain.length ? t.decode(plain, { skip_special_tokens: false }) : "");
    }
  } catch (e) {
    out.js_error = String(e && e.stack || e);
  }
  fs.writeFileSync(outFile, JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
