"""Parses Prometheus text exposition from stdin with prometheus_client's own parser (an
independent reader of what `/metrics` serves) and prints every sample as a JSON line:
{"family": ..., "type": ..., "name": ..., "labels": {...}, "value": ...}.
A document the parser refuses ends this with a non-zero status and its error."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families

for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        print(json.dumps({
            "family": family.name,
            "type": family.type,
            "name": sample.name,
            "labels": sample.labels,
            "value": sample.value,
        }))
