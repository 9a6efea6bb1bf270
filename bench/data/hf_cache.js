// bench/data/hf_cache.js — the peer for the cache build: Hugging Face's tokenizer (npm
// `tokenizers`, Rust, RAYON_NUM_THREADS threads) encoding every blank-line block of each file
// with encodeBatch, an end-of-text id after each, written as u16 to OUT/NAME.bin.
// usage: node hf_cache.js TOKENIZER_JSON OUT_DIR FILE...
const fs = require("fs"), path = require("path");
const { Tokenizer } = require("tokenizers");
(async () => {
  const [tokPath, outDir, ...files] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  const eos = 50256;
  fs.mkdirSync(outDir, { recursive: true });
  let tokens = 0, bytes = 0;
  const t0 = process.hrtime.bigint();
  for (const f of files) {
    const text = fs.readFileSync(f, "utf8");
    bytes += Buffer.byteLength(text);
    const docs = text.split(/\n[ \t\r]*\n/).map((d) => d.replace(/^\n+|\n+$/g, "")).filter((d) => d.length);
    const enc = await tok.encodeBatch(docs, false);
    let n = 0;
    for (const e of enc) n += e.getIds().length + 1;
    const out = new Uint16Array(n);
    let at = 0;
    for (const e of enc) {
      out.set(e.getIds(), at);
      at += e.getIds().length;
      out[at++] = eos;
    }
    fs.writeFileSync(path.join(outDir, path.basename(f) + ".bin"), out);
    tokens += n;
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`files=${files.length} bytes=${bytes} tokens=${tokens} seconds=${s.toFixed(3)} tokens_per_s=${Math.round(tokens / s)}`);
})();
