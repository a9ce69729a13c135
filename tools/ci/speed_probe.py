#!/usr/bin/env python3
"""The CI machine's speed, for the lane budgets (tools/ci/lanes.yml `speed`): CPU seconds this interpreter spends on
a fixed mix of what the tests spend theirs on (JSON, regular expressions, sorting, building dicts). lanes.py runs it
in fresh processes before any lane starts and keeps the least, the run least disturbed by anything else."""

import json
import re
import time

ROUNDS = 40
RECORDS = 5000
ITEM = re.compile(r"(\w+)-(\d+)")


def workload():
    total = 0
    for _round in range(ROUNDS):
        records = [{"name": "item-%d" % i, "size": (i * 7919) % 1009, "tags": ["a", "b", str(i % 13)]}
                   for i in range(RECORDS)]
        text = json.dumps(records)
        total += len(json.loads(text))
        total += sum(int(match.group(2)) for match in ITEM.finditer(text, 0, 200000))
        total += len(sorted(records, key=lambda record: (record["size"], record["name"])))
    return total


if __name__ == "__main__":
    started = time.process_time()
    workload()
    print("%.3f" % (time.process_time() - started))
