"""Reading a swarm metrics file (JSON lines, docs/metrics.md) in Python: the
one reader of scripts/plot_metrics.py and scripts/soak_summary.py, as
base/metrics_reader.hpp is the C++ side's."""
import json
import math


def read_events(path):
    """(events, skipped, first_skipped_line) of the file at `path`.

    An event is a JSON object with a finite number "t" and a string "event";
    anything else (a torn line, a foreign one) is skipped and counted. Lines
    from many processes share one file and their clocks can differ by
    milliseconds, so the events come sorted by time (stable: same-t lines keep
    file order). OSError when the file cannot be read.
    """
    events, skipped, first = [], 0, None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            t = event.get("t") if isinstance(event, dict) else None
            if (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)
                    or not isinstance(event.get("event"), str)):
                skipped += 1
                first = first or lineno
                continue
            events.append(event)
    events.sort(key=lambda e: e["t"])
    return events, skipped, first
