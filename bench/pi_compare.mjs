// Times pi's OWN session and compaction code on pi session files, for bench/bench_pi.py.
//
// Nothing of pi is copied here: every timed call is an export of the installed
// @mariozechner/pi-coding-agent (bench/install-pi.sh puts it in build/pi-bench/):
//   open     SessionManager.open(file)             read, parse, migrate check, index by id
//   context  sessionManager.buildSessionContext()  the messages pi sends, walked from the leaf
//   prepare  prepareCompaction(getBranch(), DEFAULT_COMPACTION_SETTINGS)
//            what pi runs before every compaction: the branch, tokensBefore (chars/4 estimate),
//            the cut point, the messages to summarize and the file operations
//   cut      findCutPoint(branch, 0, branch.length, keepRecentTokens)  the cut point alone
// prepareCompaction is exported by dist/core/compaction/ but not re-exported by the package's
// index, so that one module is imported by its file URL (still the installed package's code).
//
// Usage: node bench/pi_compare.mjs --pkg build/pi-bench [--repeat 1] [--warmup 1] [--clock process|wall] FILE...
// Prints one JSON object: {"version", "settings", "files": [{file, entries, ..., open_ms, ...}]},
// each *_ms the best of --repeat timed passes (passes interleave the files), after --warmup
// untimed passes that let the JIT compile pi's code. It never writes to FILE: a session whose
// header is older than pi's current version would be migrated and rewritten by pi on open, so
// it refuses such files instead.

import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";

const PACKAGE = "@mariozechner/pi-coding-agent";

function parseArgs(argv) {
  const args = { pkg: null, repeat: 1, warmup: 1, clock: "process", files: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--pkg") args.pkg = argv[++i];
    else if (a === "--repeat") args.repeat = Number(argv[++i]);
    else if (a === "--warmup") args.warmup = Number(argv[++i]);
    else if (a === "--clock") args.clock = argv[++i];
    else args.files.push(a);
  }
  if (!args.pkg || args.files.length === 0 || !(args.repeat >= 1) || !(args.warmup >= 0)
      || !["process", "wall"].includes(args.clock)) {
    throw new Error("usage: node pi_compare.mjs --pkg DIR [--repeat N] [--warmup N] [--clock process|wall] FILE...");
  }
  return args;
}

// --clock process (default): CPU time of this process, user + system, from process.cpuUsage(),
// as bench_pi.py's time.process_time(), so other jobs on a loaded machine count on neither side;
// --clock wall: performance.now().
let CLOCK = "process";

function time(fn) {
  if (CLOCK === "wall") {
    const start = performance.now();
    const value = fn();
    return [performance.now() - start, value];
  }
  const start = process.cpuUsage();
  const value = fn();
  const used = process.cpuUsage(start);
  return [(used.user + used.system) / 1000, value];
}

function headerVersion(file) {
  const first = readFileSync(file, "utf8").split("\n", 1)[0];
  return JSON.parse(first).version ?? 1;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  CLOCK = args.clock;
  const root = join(resolve(args.pkg), "node_modules", ...PACKAGE.split("/"));
  const dist = join(root, "dist");
  const pi = await import(pathToFileURL(join(dist, "index.js")).href);
  const compaction = await import(pathToFileURL(join(dist, "core", "compaction", "compaction.js")).href);
  const version = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).version;
  const settings = pi.DEFAULT_COMPACTION_SETTINGS;

  for (const file of args.files) {
    if (headerVersion(file) < pi.CURRENT_SESSION_VERSION) {
      throw new Error(`${file}: session version older than ${pi.CURRENT_SESSION_VERSION}; pi would rewrite it on open`);
    }
  }

  const measure = (file) => {
    const [open, sm] = time(() => pi.SessionManager.open(file));
    const [context, ctx] = time(() => sm.buildSessionContext());
    const [prepare, prep] = time(() => compaction.prepareCompaction(sm.getBranch(), settings));
    const branch = sm.getBranch();
    const [cut, point] = time(() => pi.findCutPoint(branch, 0, branch.length, settings.keepRecentTokens));
    return {
      open, context, prepare, cut,
      facts: {
        entries: sm.getEntries().length,
        path: branch.length,
        messages: ctx.messages.length,
        tokensBefore: prep ? prep.tokensBefore : null,
        firstKeptEntryIndex: point.firstKeptEntryIndex,
        isSplitTurn: point.isSplitTurn,
        summarizedMessages: prep ? prep.messagesToSummarize.length : null,
      },
    };
  };

  for (let w = 0; w < args.warmup; w++) for (const file of args.files) measure(file);
  const best = new Map(args.files.map((f) => [f, null]));
  for (let r = 0; r < args.repeat; r++) {
    for (const file of args.files) {
      const m = measure(file);
      const prev = best.get(file);
      if (prev === null) best.set(file, m);
      else for (const k of ["open", "context", "prepare", "cut"]) prev[k] = Math.min(prev[k], m[k]);
    }
  }
  const files = args.files.map((file) => {
    const m = best.get(file);
    return { file, ...m.facts, open_ms: m.open, context_ms: m.context, prepare_ms: m.prepare, cut_ms: m.cut };
  });
  process.stdout.write(`${JSON.stringify({ version, node: process.version, settings, files })}\n`);
}

main().catch((err) => {
  process.stderr.write(`pi_compare: ${err.message}\n`);
  process.exit(1);
});
