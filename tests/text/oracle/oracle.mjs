// oracle.mjs - independent tokenizers used only as test oracles for llmsys's BPE:
//   node oracle.mjs gpt2-json OUT              GPT-2's real ranks (js-tiktoken) as a tokenizer.json
//   node oracle.mjs tiktoken-gpt2 TEXTFILE     GPT-2 ids of a UTF-8 file by js-tiktoken
//   node oracle.mjs hf TOKENIZER_JSON TEXTFILE ids by Hugging Face's tokenizers.js
import { readFileSync, writeFileSync } from "node:fs";
import { Tiktoken } from "js-tiktoken/lite";
import gpt2 from "js-tiktoken/ranks/gpt2";
import { Tokenizer } from "@huggingface/tokenizers";

// GPT-2's byte <-> printable character table (printable bytes show as themselves).
function byteChars() {
  const keep = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const out = [];
  let n = 0;
  for (let b = 0; b < 256; b++) out.push(String.fromCodePoint(keep(b) ? b : 0x100 + n++));
  return out;
}

function gpt2Json(outPath) {
  const enc = new Tiktoken(gpt2);
  const chars = byteChars();
  const shown = (bytes) => Array.from(bytes, (b) => chars[b]).join("");
  const ranks = enc.rankMap; // "b1,b2,..." -> rank
  const vocab = {};
  const merges = [];
  const n = gpt2.explicit_n_vocab - 1; // 50256 ordinary tokens
  for (let r = 0; r < n; r++) {
    const bytes = enc.textMap.get(r);
    vocab[shown(bytes)] = r;
    if (bytes.length < 2) continue;
    // merge the token's bytes with the ranks below r only: the last two parts are its merge
    let parts = Array.from(bytes, (b) => [b]);
    for (;;) {
      let best = -1, at = -1;
      for (let i = 0; i + 1 < parts.length; i++) {
        const k = ranks.get([...parts[i], ...parts[i + 1]].join(","));
        if (k !== undefined && k < r && (best < 0 || k < best)) { best = k; at = i; }
      }
      if (at < 0) break;
      parts.splice(at, 2, [...parts[at], ...parts[at + 1]]);
    }
    if (parts.length !== 2) throw new Error(`rank ${r}: ${parts.length} parts`);
    merges.push(`${shown(parts[0])} ${shown(parts[1])}`);
  }
  vocab["<|endoftext|>"] = n;
  const bl = (p, t) => ({ type: "ByteLevel", add_prefix_space: p, trim_offsets: t, use_regex: true });
  const json = {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [{ id: n, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false,
                     normalized: true, special: true }],
    normalizer: null, pre_tokenizer: bl(false, true), post_processor: bl(true, false), decoder: bl(true, true),
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
             fuse_unk: false, byte_fallback: false, vocab, merges },
  };
  writeFileSync(outPath, JSON.stringify(json));
}

const [mode, a, b] = process.argv.slice(2);
if (mode === "gpt2-json") gpt2Json(a);
else if (mode === "tiktoken-gpt2") {
  const enc = new Tiktoken(gpt2);
  console.log(enc.encode(readFileSync(a, "utf8"), "all").join(" "));
} else if (mode === "hf") {
  const tok = new Tokenizer(JSON.parse(readFileSync(a, "utf8")), {});
  console.log(tok.encode(readFileSync(b, "utf8"), { add_special_tokens: false }).ids.join(" "));
} else {
  console.error("usage: node oracle.mjs gpt2-json OUT | tiktoken-gpt2 FILE | hf TOKENIZER_JSON FILE");
  process.exit(2);
}
