// tests/data_pipeline/make_golden.js — golden ids from Hugging Face's own tokenizer (the npm
// package `tokenizers`, its Rust library prebuilt for node), made on the fly for the tests.
//
//   node make_golden.js gpt2-json ENCODER_JSON VOCAB_BPE OUT_TOKENIZER_JSON
//       GPT-2's pair as a Hugging Face tokenizer.json, written by Hugging Face itself
//   node make_golden.js golden TOKENIZER_JSON EDGE_CASES_JSONL BROWN_DIR N_BROWN OUT_JSONL
//       one {"src", "text", "ids", "ids_with_special"} line per edge case and per Brown line
'use strict';
const fs = require('fs');
const path = require('path');
const hf = require('tokenizers');

function brownLines(dir, n) {
  // The tagged Brown files (ca01 .. cr09), de-tagged: word/tag -> word, one sentence a line.
  const files = fs.readdirSync(dir).filter((f) => /^c[a-r][0-9][0-9]$/.test(f)).sort();
  const out = [];
  for (const f of files) {
    for (const line of fs.readFileSync(path.join(dir, f), 'latin1').split('\n')) {
      const words = line.trim().split(/\s+/).filter((w) => w.length);
      if (!words.length) continue;
      out.push(words.map((w) => { const i = w.lastIndexOf('/'); return i > 0 ? w.slice(0, i) : w; }).join(' '));
      if (out.length >= n) return out;
    }
  }
  return out;
}

async function main() {
  const [mode, ...args] = process.argv.slice(2);
  if (mode === 'gpt2-json') {
    const [encoder, merges, out] = args;
    const model = await hf.BPE.fromFile(encoder, merges);
    const tok = new hf.Tokenizer(model);
    tok.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));
    tok.setPostProcessor(hf.byteLevelProcessing(true));
    tok.addSpecialTokens(['<|endoftext|>']);
    tok.save(out, false);
    // The node binding has no ByteLevel decoder to set; decoders do not change ids, so add
    // GPT2TokenizerFast's to the saved file.
    const json = JSON.parse(fs.readFileSync(out, 'utf8'));
    json.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
    fs.writeFileSync(out, JSON.stringify(json));
    return;
  }
  if (mode !== 'golden') throw new Error('usage: make_golden.js gpt2-json|golden ...');
  const [tokPath, edgePath, brownDir, nBrown, out] = args;
  const tok = hf.Tokenizer.fromFile(tokPath);
  const texts = [];
  for (const line of fs.readFileSync(edgePath, 'utf8').split('\n'))
    if (line.length) texts.push(['edge', JSON.parse(line)]);
  for (const line of brownLines(brownDir, Number(nBrown))) texts.push(['brown', line]);
  const lines = [];
  for (const [src, text] of texts) {
    const a = await tok.encode(text, null, { addSpecialTokens: false });
    const b = await tok.encode(text, null, { addSpecialTokens: true });
    lines.push(JSON.stringify({ src, text, ids: a.getIds(), ids_with_special: b.getIds() }));
  }
  fs.writeFileSync(out, lines.join('\n') + '\n');
  console.log(`${out}: ${lines.length} lines from ${tokPath}`);
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
