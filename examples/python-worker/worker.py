"""The step worker of research.yaml: a plain Python function the agent's `summarise` tool
calls. Run it against a server: `python worker.py URL KEY` (main.py starts one for you)."""

import re
import sys
from collections import Counter

from stepwright import Worker


def make_worker(url: str, key: str) -> Worker:
    worker = Worker(url, key, queue="py", slots=4)

    @worker.handler("summarise")
    def summarise(ctx, task_input):
        text = task_input["text"]
        first = re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]
        words = re.findall(r"[a-z']+", text.lower())
        common = [w for w, _ in Counter(w for w in words if len(w) > 3).most_common(3)]
        return {"first_sentence": first, "words": len(words), "top_words": common}

    return worker


if __name__ == "__main__":
    make_worker(sys.argv[1], sys.argv[2]).run()
