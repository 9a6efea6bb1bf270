// bench/tokenize/hf_bench.js — the peer: Hugging Face's Rust tokenizer (npm `tokenizers`) on
// the same lines; encodeBatch runs on RAYON_NUM_THREADS threads. Prints a line like
// bench_tokenize's.
//   RAYON_NUM_THREADS=N node hf_bench.js TOKENIZER_JSON TEXT_FILE [REPEATS]
'use strict';
const fs = require('fs');
const hf = require('tokenizers');

async function main() {
  const [tokPath, textPath, repeatsArg] = process.argv.slice(2);
  const repeats = Number(repeatsArg || 1);
  const tok = hf.Tokenizer.fromFile(tokPath);
  const lines = fs.readFileSync(textPath, 'utf8').split('\n').filter((l) => l.length);
  await tok.encodeBatch(lines.slice(0, 200), { addSpecialTokens: false }); // warm up
  const t0 = process.hrtime.bigint();
  let tokens = 0;
  for (let r = 0; r < repeats; r++) {
    const encs = await tok.encodeBatch(lines, { addSpecialTokens: false });
    for (const e of encs) tokens += e.getLength();
  }
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const threads = process.env.RAYON_NUM_THREADS || 'all';
  console.log(`hf threads=${threads} lines=${lines.length * repeats} tokens=${tokens} ` +
              `seconds=${secs.toFixed(3)} tokens_per_s=${Math.round(tokens / secs)}`);
}
main().catch((e) => { console.error(e); process.exit(1); });
