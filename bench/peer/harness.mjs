// sudocode's agent-execution-engine on the bytes bench/peer_compare.py wrote: its normalizer for
// the protocol against Node's own floor (split lines + JSON.parse each), best of REPEAT runs each.
//   node harness.mjs PROTOCOL FILE REPEAT CHUNK   (CHUNK: 0 = whole, else bytes per piece)
// Prints one JSON object: seconds for the floor and the engine, entries the engine yielded.
import { readFileSync } from "node:fs";
import { normalizeMessage, createNormalizerState } from "agent-execution-engine/agents/claude";
import { CodexExecutor } from "agent-execution-engine/agents/codex";
import { normalizeOutput as cursorNormalize } from "agent-execution-engine/agents";

const [protocol, file, repeatArg, chunkArg] = process.argv.slice(2);
const data = readFileSync(file);
const repeat = Number(repeatArg || 5);
const chunk = Number(chunkArg || 0);
const pieces = [];
for (let i = 0; i < data.length; i += chunk || data.length) pieces.push(data.subarray(i, i + (chunk || data.length)));

async function* chunks() {
  for (const p of pieces) yield { type: "stdout", data: p, timestamp: new Date() };
}

function floor() {
  let buffer = "", n = 0;
  for (const p of pieces) {
    buffer += p.toString("utf-8");
    const lines = buffer.split("\n");
    buffer = lines.pop() || "";
    for (const line of lines) {
      if (!line.trim()) continue;
      try { JSON.parse(line); } catch {}
      n++;
    }
  }
  return n;
}

async function engine() {
  let n = 0;
  if (protocol === "claude-stream-json") {
    // The engine's Claude path: its caller frames and parses lines, normalizeMessage maps each.
    const state = createNormalizerState();
    let buffer = "";
    for (const p of pieces) {
      buffer += p.toString("utf-8");
      const lines = buffer.split("\n");
      buffer = lines.pop() || "";
      for (const line of lines) {
        if (!line.trim()) continue;
        let msg;
        try { msg = JSON.parse(line); } catch { continue; }
        if (normalizeMessage(msg, "/scratch/work", state)) n++;
      }
    }
  } else if (protocol === "codex-exec") {
    for await (const _ of new CodexExecutor({}).normalizeOutput(chunks(), "/scratch/work")) n++;
  } else if (protocol === "cursor-jsonl") {
    for await (const _ of cursorNormalize(chunks(), "/scratch/work")) n++;
  } else {
    throw new Error(`the engine has no normalizer for ${protocol}`);
  }
  return n;
}

async function best(fn) {
  let t = Infinity, out = 0;
  for (let i = 0; i < repeat; i++) {
    const start = process.hrtime.bigint();
    out = await fn();
    t = Math.min(t, Number(process.hrtime.bigint() - start) / 1e9);
  }
  return [t, out];
}

const [floorSeconds] = await best(async () => floor());
const [engineSeconds, entries] = await best(engine);
console.log(JSON.stringify({ floor: floorSeconds, engine: engineSeconds, entries }));
