// The step worker of research.yaml: a plain function the agent's `summarise` tool calls.
// Run it against a server: `node worker.mjs URL KEY` (main.mjs starts one for you).
import { Worker } from "@stepwright/sdk";

export function makeWorker(url, key) {
  return new Worker(url, key, { queue: "ts", slots: 4 }).handler("summarise", (ctx, { text }) => {
    const first = text.trim().split(/(?<=[.!?])\s/, 1)[0];
    const words = text.toLowerCase().match(/[a-z']+/g) ?? [];
    const counts = new Map();
    for (const word of words.filter((w) => w.length > 3)) counts.set(word, (counts.get(word) ?? 0) + 1);
    // Most frequent first; ties in order of first appearance (as Python's Counter does).
    const top = [...counts.entries()].sort((a, b) => b[1] - a[1]).slice(0, 3).map(([w]) => w);
    return { first_sentence: first, words: words.length, top_words: top };
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await makeWorker(process.argv[2], process.argv[3]).run();
}
