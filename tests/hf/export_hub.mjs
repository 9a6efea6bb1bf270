// tests/hf/export_hub.mjs — Hugging Face's own safetensors parser (npm @huggingface/hub,
// parseSafetensorsMetadata) run on an exported folder. It reads a Hub repository over HTTP with
// range requests; a fetch that answers those requests from the folder on disk lets it read a
// local folder through exactly the code that reads the Hub (HEAD to find model.safetensors or
// the index, ranged GETs for each header, config.json). Prints one JSON line: whether it is
// sharded, the files, the parameter count by dtype and in all, and each tensor's dtype and shape.
//
// usage: node export_hub.mjs NPM_NODE_MODULES HF_DIR
import { readFileSync, statSync, openSync, readSync, closeSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [npm, dir] = process.argv.slice(2);
const hub = await import(pathToFileURL(join(npm, "@huggingface/hub/dist/index.mjs")).href);

// https://hf.local/{repo}/resolve/{revision}/{path} (or raw/) -> dir/{path}
async function localFetch(input, init = {}) {
  const url = new URL(input instanceof Request ? input.url : String(input));
  const m = url.pathname.match(/\/(?:resolve|raw)\/[^/]+\/(.+)$/);
  const headers = new Headers(init.headers || (input instanceof Request ? input.headers : {}));
  if (!m) return new Response("not found", { status: 404 });
  const file = join(dir, decodeURIComponent(m[1]));
  let size;
  try {
    size = statSync(file).size;
  } catch {
    return new Response("not found", { status: 404 });
  }
  const etag = `"${size}"`; // the Hub's download code wants one
  if ((init.method || "GET") === "HEAD")
    return new Response(null, { status: 200, headers: { "content-length": String(size), etag } });
  const range = headers.get("range");
  if (!range) return new Response(readFileSync(file), { status: 200, headers: { etag } });
  const r = range.match(/bytes=(\d+)-(\d*)/);
  const start = Number(r[1]);
  const end = Math.min(r[2] ? Number(r[2]) : size - 1, size - 1);
  const buf = Buffer.alloc(Math.max(0, end - start + 1));
  const fd = openSync(file, "r");
  readSync(fd, buf, 0, buf.length, start);
  closeSync(fd);
  return new Response(buf, {
    status: 206,
    headers: {
      "content-range": `bytes ${start}-${end}/${size}`,
      "content-length": String(buf.length),
      etag,
    },
  });
}

const res = await hub.parseSafetensorsMetadata({
  repo: { type: "model", name: "local/export" },
  hubUrl: "https://hf.local",
  computeParametersCount: true,
  fetch: localFetch,
});
const tensors = {};
const headers = res.sharded ? Object.values(res.headers) : [res.header];
for (const h of headers)
  for (const [name, info] of Object.entries(h))
    if (name !== "__metadata__") tensors[name] = { dtype: info.dtype, shape: info.shape };
console.log(JSON.stringify({
  sharded: res.sharded,
  files: res.filepaths,
  parameterCount: res.parameterCount,
  parameterTotal: Object.values(res.parameterCount).reduce((a, b) => a + b, 0),
  weight_map: res.sharded ? res.index.weight_map : undefined,
  total_size: res.sharded ? res.index.metadata?.total_size : undefined,
  tensors,
}));
