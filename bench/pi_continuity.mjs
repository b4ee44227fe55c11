// Replays one session through pi's OWN compaction rules, for bench/pi_continuity.py.
//
// Nothing of pi is copied here: every decision is an export of the installed
// @mariozechner/pi-coding-agent (bench/install-pi.sh puts it in build/pi-bench/):
//   when      as pi's AgentSession does: at the end of each agent run (an assistant message that
//             calls no tool) and before each new prompt, "threshold": shouldCompact(context tokens,
//             contextWindow, settings); and mid-run, "overflow": a request whose context no longer
//             fits contextWindow (the provider would refuse it; pi compacts and retries)
//   where     prepareCompaction(path, settings): pi's cut point (findCutPoint, keepRecentTokens)
//             and its file operations over the summarized messages, rolled from the previous
//             compaction's details
//   lists     computeFileLists(fileOps): the readFiles / modifiedFiles pi stores in the
//             compaction's details, and formatFileOperations: the part of the summary pi writes
// What is not pi's: the summary's model text (pi asks a model for it; none is called here, so the
// compaction entry holds pi's file-list part only), and the token count that decides when: pi reads
// the last reply's usage, which a replay at a smaller window does not have, so the messages carry
// no usage and pi's own estimate (chars/4 per message) stands in for it.
//
// Usage: node bench/pi_continuity.mjs --pkg build/pi-bench --context N --reserve N --keep N FILE
// FILE holds one pi message entry per line (type "message", id; parentId is set here, in order).
// Prints one JSON object: {"version", "settings", "compactions": [{reason, afterEntryId, firstKeptEntryId,
// isSplitTurn, tokensBefore, tokensAfter, summarizedMessages, readFiles, modifiedFiles}]}.

import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const PACKAGE = "@mariozechner/pi-coding-agent";

function parseArgs(argv) {
  const args = { pkg: null, context: NaN, reserve: NaN, keep: NaN, file: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--pkg") args.pkg = argv[++i];
    else if (a === "--context") args.context = Number(argv[++i]);
    else if (a === "--reserve") args.reserve = Number(argv[++i]);
    else if (a === "--keep") args.keep = Number(argv[++i]);
    else args.file = a;
  }
  if (!args.pkg || !args.file || !(args.context > 0) || !(args.reserve >= 0) || !(args.keep > 0)) {
    throw new Error("usage: node pi_continuity.mjs --pkg DIR --context N --reserve N --keep N FILE");
  }
  return args;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const root = join(resolve(args.pkg), "node_modules", ...PACKAGE.split("/"));
  const dist = join(root, "dist");
  const pi = await import(pathToFileURL(join(dist, "index.js")).href);
  const compaction = await import(pathToFileURL(join(dist, "core", "compaction", "compaction.js")).href);
  const utils = await import(pathToFileURL(join(dist, "core", "compaction", "utils.js")).href);
  const version = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).version;
  const settings = { ...pi.DEFAULT_COMPACTION_SETTINGS, reserveTokens: args.reserve, keepRecentTokens: args.keep };

  const entries = readFileSync(args.file, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
  const path = [];
  const compactions = [];
  const contextTokens = () => compaction.estimateContextTokens(pi.buildSessionContext(path).messages).tokens;
  const append = (entry) => path.push({ ...entry, parentId: path.length ? path[path.length - 1].id : null });
  const compact = (reason) => {
    const prep = compaction.prepareCompaction(path, settings);
    if (!prep) return; // nothing to compact: the last entry is a compaction already
    const { readFiles, modifiedFiles } = utils.computeFileLists(prep.fileOps);
    const leaf = path[path.length - 1];
    append({
      type: "compaction", id: `pi-compaction-${compactions.length + 1}`, timestamp: leaf.timestamp,
      summary: utils.formatFileOperations(readFiles, modifiedFiles), firstKeptEntryId: prep.firstKeptEntryId,
      tokensBefore: prep.tokensBefore, details: { readFiles, modifiedFiles },
    });
    compactions.push({
      reason, afterEntryId: leaf.id, firstKeptEntryId: prep.firstKeptEntryId, isSplitTurn: prep.isSplitTurn,
      tokensBefore: prep.tokensBefore, tokensAfter: contextTokens(),
      summarizedMessages: prep.messagesToSummarize.length + prep.turnPrefixMessages.length, readFiles, modifiedFiles,
    });
  };
  const threshold = () => {
    if (path.length && compaction.shouldCompact(contextTokens(), args.context, settings)) compact("threshold");
  };
  for (const entry of entries) {
    const role = entry.type === "message" ? entry.message.role : null;
    if (role === "user") threshold(); // before a new prompt
    if (role === "assistant" && path.length && contextTokens() > args.context) compact("overflow");
    append(entry);
    const calls = role === "assistant" ? entry.message.content.filter((b) => b.type === "toolCall") : [];
    if (role === "assistant" && calls.length === 0) threshold(); // agent_end
  }
  process.stdout.write(`${JSON.stringify({ version, node: process.version, settings, compactions })}\n`);
}

main().catch((err) => {
  process.stderr.write(`pi_continuity: ${err.message}\n`);
  process.exit(1);
});
