// tests/data/whisper-tokenizer/make_tokenizer.js — writes tokenizer.json beside it: the layout of
// openai/whisper-tiny.en's (English-only Whisper) tokenizer, made by Hugging Face's own library
// (the npm package `tokenizers`) from GPT-2's vocabulary and merges.
//
//   NODE_PATH=.cache/npm/node_modules node make_tokenizer.js ENCODER_JSON VOCAB_BPE OUT_JSON
//
// GPT-2's byte-level BPE (ids 0..50255, <|endoftext|> 50256) with Whisper's tokens added after
// it, in Whisper's order: <|startoftranscript|> 50257, the 99 language tokens 50258..50356
// (<|en|> first), <|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>,
// <|nocaptions|>, <|notimestamps|> 50362, then the 1501 timestamps <|0.00|>..<|30.00|>
// 50363..51863: 51864 ids. The timestamps are added tokens that are not special (a decoder
// keeps them), as Hugging Face's Whisper tokenizers have them. The post-processor is the one
// WhisperTokenizerFast writes for an English-only model: <|startoftranscript|>
// <|notimestamps|> $A <|endoftext|>.
'use strict';
const fs = require('fs');
const hf = require('tokenizers');

// Whisper's language codes, in the order of openai/whisper's tokenizer.py (LANGUAGES), the first
// 99 (large-v3 appends "yue").
const LANGUAGES = [
  'en', 'zh', 'de', 'es', 'ru', 'ko', 'fr', 'ja', 'pt', 'tr', 'pl', 'ca', 'nl', 'ar', 'sv', 'it',
  'id', 'hi', 'fi', 'vi', 'he', 'uk', 'el', 'ms', 'cs', 'ro', 'da', 'hu', 'ta', 'no', 'th', 'ur',
  'hr', 'bg', 'lt', 'la', 'mi', 'ml', 'cy', 'sk', 'te', 'fa', 'lv', 'bn', 'sr', 'az', 'sl', 'kn',
  'et', 'mk', 'br', 'eu', 'is', 'hy', 'ne', 'mn', 'bs', 'kk', 'sq', 'sw', 'gl', 'mr', 'pa', 'si',
  'km', 'sn', 'yo', 'so', 'af', 'oc', 'ka', 'be', 'tg', 'sd', 'gu', 'am', 'yi', 'lo', 'uz', 'fo',
  'ht', 'ps', 'tk', 'nn', 'mt', 'sa', 'lb', 'my', 'bo', 'tl', 'mg', 'as', 'tt', 'haw', 'ln', 'ha',
  'ba', 'jw', 'su',
];

async function main() {
  const [encoder, merges, out] = process.argv.slice(2);
  if (!out) throw new Error('usage: make_tokenizer.js ENCODER_JSON VOCAB_BPE OUT_JSON');
  if (LANGUAGES.length !== 99) throw new Error(`${LANGUAGES.length} languages, not 99`);
  const tok = new hf.Tokenizer(await hf.BPE.fromFile(encoder, merges));
  tok.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));
  tok.addSpecialTokens(['<|endoftext|>']);
  const specials = ['<|startoftranscript|>', ...LANGUAGES.map((l) => `<|${l}|>`), '<|translate|>',
    '<|transcribe|>', '<|startoflm|>', '<|startofprev|>', '<|nocaptions|>', '<|notimestamps|>'];
  tok.addSpecialTokens(specials);
  const stamps = [];
  for (let i = 0; i <= 1500; i++) stamps.push(`<|${(i * 0.02).toFixed(2)}|>`);
  tok.addAddedTokens(stamps.map((s) => new hf.AddedToken(s, false, { normalized: false })));
  const sot = tok.tokenToId('<|startoftranscript|>');
  const nots = tok.tokenToId('<|notimestamps|>');
  const eot = tok.tokenToId('<|endoftext|>');
  if (eot !== 50256 || sot !== 50257 || nots !== 50362 || tok.tokenToId('<|30.00|>') !== 51863 ||
      tok.getVocabSize(true) !== 51864)
    throw new Error('unexpected ids: the GPT-2 files are not GPT-2\'s?');
  tok.setPostProcessor(hf.templateProcessing(
    '<|startoftranscript|> <|notimestamps|> $A:0 <|endoftext|>:0',
    '<|startoftranscript|> <|notimestamps|> $A:0 $B:1 <|endoftext|>:1',
    [['<|startoftranscript|>', sot], ['<|notimestamps|>', nots], ['<|endoftext|>', eot]]));
  tok.save(out, false);
  // The node binding has no ByteLevel decoder to set; add the one Whisper's tokenizer.json has.
  const json = JSON.parse(fs.readFileSync(out, 'utf8'));
  json.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  fs.writeFileSync(out, JSON.stringify(json));
  console.log(`${out}: ${tok.getVocabSize(true)} ids`);
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
