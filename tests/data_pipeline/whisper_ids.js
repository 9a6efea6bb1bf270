// tests/data_pipeline/whisper_ids.js — a clip's decoder tokens as Hugging Face's own tokenizer
// (npm `tokenizers`) makes them, for the audio cache's tests.
//
//   NODE_PATH=... node whisper_ids.js TOKENIZER_JSON IN_JSONL OUT_JSONL
//
// Each IN line {"audio", "text", "language"?} gets "ids": without a language, the tokenizer's
// own post-processor (add_special_tokens: <|startoftranscript|> <|notimestamps|> $A
// <|endoftext|>); with one, <|startoftranscript|> <|xx|> <|transcribe|> <|notimestamps|> then
// the text's ids and <|endoftext|>, as WhisperTokenizer's prefix_tokens.
'use strict';
const fs = require('fs');
const hf = require('tokenizers');

async function main() {
  const [tokPath, inPath, outPath] = process.argv.slice(2);
  const tok = hf.Tokenizer.fromFile(tokPath);
  const id = (t) => {
    const v = tok.tokenToId(t);
    if (v === undefined || v === null) throw new Error(`no token ${t}`);
    return v;
  };
  const out = [];
  for (const line of fs.readFileSync(inPath, 'utf8').split('\n')) {
    if (!line.length) continue;
    const rec = JSON.parse(line);
    if (rec.language) {
      const text = await tok.encode(rec.text, null, { addSpecialTokens: false });
      rec.ids = [id('<|startoftranscript|>'), id(`<|${rec.language}|>`), id('<|transcribe|>'),
        id('<|notimestamps|>'), ...text.getIds(), id('<|endoftext|>')];
    } else {
      rec.ids = (await tok.encode(rec.text, null, { addSpecialTokens: true })).getIds();
    }
    out.push(JSON.stringify(rec));
  }
  fs.writeFileSync(outPath, out.join('\n') + '\n');
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
