#!/usr/bin/env python3
"""Plots `--metrics` JSON-lines files of the swarm binary into one PNG.

Usage: plot_metrics.py METRICS.jsonl [MORE.jsonl ...] -o out.png [--title TEXT]
                       [--detail N]

Four panels (fields as in docs/metrics.md):
  1. Loss against samples seen, one line per file (labelled by the file name
     without .jsonl), raw values faint, a centred moving average solid.
     y: `step.loss`; x: samples completed by all trainers of the file, summed
     from each trainer's `step.samples` counter. A trainer resumed from a
     checkpoint continues its counter, so its first step counts only what it
     did past `checkpoint_load.samples` (stage -1, same `trainer`).
  2. Tokens per second against seconds since the file's first event, per file.
     One trainer: its `step.tokens_per_s` (the step's own tokens over the
     step's own time), moving average. Several trainers: their steps' token
     increments (`step.tokens` differences) summed in fixed time bins, since
     per-trainer rates cannot simply be added at differing times.
  3. Servers per stage over time (`stage_load.stage`, `stage_load.servers`)
     for the detail file, with a strip of event markers above it: `chaos`
     (`action` kill / stop / wipe, `process` tells a server from the
     coordinator), `server_down`, moves (`rebalance` with `from` != -1),
     `reload`, `checkpoint_load`, `stage_lost`, `process_start`.
  4. Averaging round durations per stage (`round_end.seconds` against `t`,
     per `round_end.stage`), log scale because a round stalled by a frozen
     peer takes minutes and would flatten the rest; rounds with
     `round_end.applied` == 0 (no member applied a step) drawn as red crosses.
The detail file (panels 3 and 4) is --detail N (0-based), by default the
first file with `chaos` events, else the first file: comparing a fault-free
run with a chaos run is the usual case, and the chaos run is the one worth
the detail.

Lines that are not JSON objects with a numeric `t` and a string `event` are
skipped and counted on stderr. A missing file, or no events in any file,
exits 2. stdout: one line per file (steps, first and last `step.loss`, mean
tokens/s as drawn in panel 2 before smoothing, rounds and failed rounds,
chaos actions, seconds covered), then the output path.
"""
import argparse
import math
import os
import sys
from collections import defaultdict

from metrics_file import read_events

try:
    import matplotlib
except ImportError:
    # Debian's python3-matplotlib lives with /usr/bin/python3; a `python3` found
    # first on PATH (pyenv, a venv) may lack it, so retry under the system one.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("plot_metrics.py: needs matplotlib (Debian: apt-get install python3-matplotlib)")

matplotlib.use("Agg")  # no display on cluster hosts; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402

# Marker kinds of panel 3, top to bottom: (key, label, colour, marker).
# Labels stay short: they are the strip's y tick labels, left of the plot.
MARKER_KINDS = [
    ("kill", "kill server", "tab:red", "|"),
    ("stop", "stop server", "tab:orange", "|"),
    ("wipe", "wipe stage", "black", "D"),
    ("coord_kill", "kill coordinator", "tab:purple", "X"),
    ("process_start", "coord. restarted", "tab:pink", "P"),
    ("server_down", "server_down", "tab:brown", "v"),
    ("move", "move", "tab:green", "^"),
    ("reload", "reload", "tab:blue", "|"),
    ("checkpoint_load", "checkpoint_load", "tab:cyan", "s"),
    ("stage_lost", "stage_lost", "tab:gray", "x"),
]
# Stages get their own palette so they are not mistaken for the files of panels 1-2 (tab10).
STAGE_COLORS = plt.get_cmap("Dark2").colors


def stage_color(i):
    return STAGE_COLORS[i % len(STAGE_COLORS)]


class InputError(Exception):
    """An input problem the user must fix; reported with exit status 2."""


def num(value):
    """A finite float, or None: the binary writes non-finite numbers as null."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def load_events(path):
    """Valid events of one file sorted by time (scripts/metrics_file.py)."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    try:
        events, bad, first_bad = read_events(path)
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror}") from err
    if bad:
        print(f"{path}: skipped {bad} malformed line(s), first at line {first_bad}", file=sys.stderr)
    return events


def trainer_key(event):
    # A `local` run's step has no `trainer` field: it is its own single trainer.
    return event.get("trainer", event.get("role", "?"))


def step_series(events, t0):
    """Per step: time since t0, cumulative samples of all trainers, loss, tokens/s, trainer.
    Validation (eval events) as rows with "eval": True, at the samples seen when it was written."""
    resumed, last_samples, last_tokens = {}, {}, {}
    total, rows = 0.0, []
    for e in events:
        if e["event"] == "eval" and num(e.get("loss")) is not None:
            rows.append({"t": e["t"] - t0, "samples": total, "loss": num(e["loss"]), "tps": None,
                         "tokens_delta": None, "trainer": trainer_key(e), "eval": True})
            continue
        if e["event"] == "checkpoint_load" and e.get("stage") == -1 and num(e.get("samples")) is not None:
            resumed[trainer_key(e)] = num(e["samples"])
            continue
        if e["event"] != "step":
            continue
        key = trainer_key(e)
        samples, tokens = num(e.get("samples")), num(e.get("tokens"))
        if samples is not None:
            base = last_samples.get(key, resumed.get(key, 0.0))
            # A counter that goes back means a fresh trainer under a reused id: count from 0.
            total += samples - base if samples >= base else samples
            last_samples[key] = samples
        tokens_delta = None
        if tokens is not None:
            prev = last_tokens.get(key)
            if prev is None and samples is not None and samples > 0:
                prev = tokens * resumed.get(key, 0.0) / samples  # tokens = samples x seq_len
            tokens_delta = max(tokens - (prev or 0.0), 0.0)
            last_tokens[key] = tokens
        rows.append({"t": e["t"] - t0, "samples": total, "loss": num(e.get("loss")),
                     "tps": num(e.get("tokens_per_s")), "tokens_delta": tokens_delta, "trainer": key})
    return rows


def markers(events, t0):
    """Times (since t0) of the panel-3 event kinds, keyed as in MARKER_KINDS."""
    out = defaultdict(list)
    for e in events:
        kind, t = e["event"], e["t"] - t0
        if kind == "chaos":
            action, process = e.get("action"), str(e.get("process", ""))
            if action == "kill":
                out["coord_kill" if process.startswith("coordinator") else "kill"].append(t)
            elif action in ("stop", "wipe"):
                out[action].append(t)
        elif kind == "rebalance":
            if e.get("from", -1) != -1:
                out["move"].append(t)
        elif kind in ("server_down", "reload", "checkpoint_load", "stage_lost", "process_start"):
            out[kind].append(t)
    return out


def summarize_run(path, events):
    """Everything the panels and the summary line need from one file."""
    t0 = events[0]["t"]
    stage_load, rounds = defaultdict(list), defaultdict(list)
    for e in events:
        if e["event"] == "stage_load" and num(e.get("servers")) is not None:
            stage_load[e.get("stage")].append((e["t"] - t0, num(e["servers"])))
        elif e["event"] == "round_end" and num(e.get("seconds")) is not None:
            rounds[e.get("stage")].append((e["t"] - t0, num(e["seconds"]), num(e.get("applied"))))
    name = os.path.basename(path)
    return {
        "name": name[:-len(".jsonl")] if name.endswith(".jsonl") else name,
        "steps": step_series(events, t0),
        "stage_load": stage_load,
        "rounds": rounds,
        "markers": markers(events, t0),
        "chaos": sum(1 for e in events if e["event"] == "chaos"),
        "duration": events[-1]["t"] - t0,
    }


def moving_average(values, window):
    """Centred mean over about `window` points, narrowed symmetrically at the ends.

    Centred rather than trailing so a falling loss is not drawn late (above
    its raw points) and a throughput dip stays at the time it happened;
    symmetric at the ends so the steep first steps are not averaged away.
    """
    half = window // 2
    sums = [0.0]
    for v in values:
        sums.append(sums[-1] + v)
    out = []
    for i in range(len(values)):
        h = min(half, i, len(values) - 1 - i)
        lo, hi = i - h, i + h + 1
        out.append((sums[hi] - sums[lo]) / (hi - lo))
    return out


def smoothing_window(n):
    # About 2% of the points, 5 to 25 steps: light enough to keep a wipe's loss
    # bump visible, enough to calm per-step noise in a short run too.
    return max(min(5, n), min(25, n // 50))


def note(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=12, color="gray")


def no_data(ax, text):
    """An empty panel: the note, without the meaningless 0-1 ticks."""
    ax.set_xticks([])
    ax.set_yticks([])
    note(ax, text)


def plot_loss(ax, runs, colors):
    ax.set_title("Loss against samples seen")
    plotted = False
    for run, color in zip(runs, colors):
        pts = [(r["samples"], r["loss"]) for r in run["steps"] if r["loss"] is not None and not r.get("eval")]
        val = [(r["samples"], r["loss"]) for r in run["steps"] if r.get("eval")]
        if not pts and not val:
            continue
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, color=color, alpha=0.2, linewidth=0.7)
            ax.plot(xs, moving_average(list(ys), smoothing_window(len(ys))), color=color, linewidth=1.6,
                    label=run["name"])
        if val:
            vx, vy = zip(*val)
            ax.plot(vx, vy, color=color, linestyle="--", marker="o", markersize=3, linewidth=1.2,
                    label=run["name"] + " validation")
        plotted = True
    if not plotted:
        return no_data(ax, "no step events with a loss")
    ax.set_xlabel("samples completed (all trainers)")
    ax.set_ylabel("loss (nats per token)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")


def throughput_series(run):
    """(time, tokens/s) points of one run; see the module docstring for the method."""
    steps = [r for r in run["steps"] if not r.get("eval")]
    if len({r["trainer"] for r in steps}) <= 1:
        pts = [(r["t"], r["tps"]) for r in steps if r["tps"] is not None]
        if not pts:
            return [], [], "none"
        xs, ys = zip(*pts)
        return list(xs), moving_average(list(ys), smoothing_window(len(ys))), "tokens_per_s"
    pts = [(r["t"], r["tokens_delta"]) for r in steps if r["tokens_delta"] is not None]
    if not pts:
        return [], [], "none"
    width = max(5.0, run["duration"] / 200)  # about 200 bins over the run
    start = pts[0][0]
    bins = defaultdict(float)
    for t, delta in pts[1:]:  # the first step's tokens were made before the first timestamp
        bins[int((t - start) // width)] += delta
    last = int((pts[-1][0] - start) // width)
    xs = [start + (i + 0.5) * width for i in range(last + 1)]
    return xs, [bins.get(i, 0.0) / width for i in range(last + 1)], "binned tokens"


def plot_throughput(ax, runs, colors):
    ax.set_title("Training throughput")
    plotted = False
    for run, color in zip(runs, colors):
        xs, ys, _ = throughput_series(run)
        if xs:
            ax.plot(xs, ys, color=color, linewidth=1.2, label=run["name"])
            plotted = True
    if not plotted:
        return no_data(ax, "no step events with tokens")
    ax.set_xlabel("seconds since the run's first event")
    ax.set_ylabel("tokens/s (moving average)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")


def plot_servers(fig, cell, run):
    """Panel 3: an event strip above a step plot of servers per stage, sharing x."""
    kinds = [k for k in MARKER_KINDS if run["markers"].get(k[0])]
    if not run["stage_load"]:
        ax = fig.add_subplot(cell)
        ax.set_title(f"Servers per stage: {run['name']}")
        return no_data(ax, "no stage_load events")
    # The strip grows with the number of kinds shown, so a fault-free run keeps a tall panel.
    grid = cell.subgridspec(2, 1, height_ratios=[max(len(kinds), 1), 6], hspace=0.05)
    strip = fig.add_subplot(grid[0])
    ax = fig.add_subplot(grid[1], sharex=strip)
    strip.set_title(f"Servers per stage and events: {run['name']}")
    for row, (key, label, color, marker) in enumerate(kinds):
        times = run["markers"][key]
        y = len(kinds) - 1 - row
        size = 9 if marker == "|" else 6
        strip.plot(times, [y] * len(times), linestyle="none", marker=marker, color=color, markersize=size,
                   alpha=0.8 if len(times) < 100 else 0.5)
    strip.set_yticks(range(len(kinds)))
    strip.set_yticklabels([f"{k[1]} ({len(run['markers'][k[0]])})" for k in reversed(kinds)], fontsize=8)
    strip.set_ylim(-0.7, max(len(kinds), 1) - 0.3)
    strip.tick_params(axis="x", labelbottom=False)
    strip.grid(axis="x", alpha=0.3)
    if not kinds:
        strip.set_yticks([])
        note(strip, "no chaos, down, move, reload or checkpoint events")  # ticks shared with the plot below
    top, stages = 0, sorted(run["stage_load"], key=lambda s: (s is None, s))
    spread = min(0.4, 0.12 * (len(stages) - 1))
    for i, stage in enumerate(stages):
        xs, ys = zip(*run["stage_load"][stage])
        # Offset each stage so equal counts (the usual case) do not hide one another.
        offset = (i / (len(stages) - 1) - 0.5) * spread if len(stages) > 1 else 0.0
        ax.step(xs, [y + offset for y in ys], where="post", linewidth=1.2, color=stage_color(i),
                label=f"stage {stage}")
        top = max(top, max(ys))
    ax.set_ylim(-0.3, top + 1.5)  # headroom for the legend
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("seconds since the run's first event")
    ax.set_ylabel("servers (stage_load)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8, ncol=min(4, len(stages)))


def plot_rounds(ax, run):
    ax.set_title(f"Averaging round durations: {run['name']}")
    if not run["rounds"]:
        return no_data(ax, "no round_end events")
    failed_x, failed_y = [], []
    all_secs = [s for pts in run["rounds"].values() for _, s, _ in pts if s > 0]
    floor = min(all_secs) if all_secs else 1e-3  # log scale: a 0 s round is drawn at the smallest
    for i, stage in enumerate(sorted(run["rounds"], key=lambda s: (s is None, s))):
        pts = run["rounds"][stage]
        ok = [(t, max(s, floor)) for t, s, applied in pts if applied != 0]
        failed_x += [t for t, s, applied in pts if applied == 0]
        failed_y += [max(s, floor) for t, s, applied in pts if applied == 0]
        if ok:
            xs, ys = zip(*ok)
            ax.plot(xs, ys, linestyle="none", marker=".", markersize=4, alpha=0.5, color=stage_color(i),
                    label=f"stage {stage} ({len(pts)} rounds)")
    if failed_x:
        ax.plot(failed_x, failed_y, linestyle="none", marker="x", color="red", markersize=7, markeredgewidth=2,
                label=f"failed: applied = 0 ({len(failed_x)})")
    # Coordinator kills and wipes explain the gaps and the stalled rounds: faint lines.
    for key, label, style in (("coord_kill", "coordinator killed", ":"), ("wipe", "stage wiped", "--")):
        for j, t in enumerate(run["markers"].get(key, [])):
            ax.axvline(t, color="gray", linestyle=style, linewidth=1, alpha=0.7, label=None if j else label)
    ax.set_yscale("log")
    # Headroom above the slowest round for the legend: over a decade on the log scale.
    ax.set_ylim(top=max([floor] + all_secs) * 25)
    ax.set_xlabel("seconds since the run's first event")
    ax.set_ylabel("round_end seconds (log)")
    ax.grid(alpha=0.3, which="major")
    ax.legend(loc="upper center", fontsize=8, ncol=3)


def pick_detail(runs, index):
    if index is not None:
        if not 0 <= index < len(runs):
            raise InputError(f"--detail {index}: there are {len(runs)} file(s) with events")
        return runs[index]
    return next((r for r in runs if r["chaos"]), runs[0])


def summary_line(run):
    steps = [r for r in run["steps"] if not r.get("eval")]
    losses = [r["loss"] for r in steps if r["loss"] is not None]
    tps = [r["tps"] for r in steps if r["tps"] is not None]
    _, binned, method = throughput_series(run)
    if method == "binned tokens":
        tps = binned  # several trainers: their per-step rates do not add up; the binned total does
    rounds = sum(len(p) for p in run["rounds"].values())
    failed = sum(1 for p in run["rounds"].values() for _, _, applied in p if applied == 0)
    loss = f"loss {losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "no loss"
    rate = f"mean tokens/s {sum(tps) / len(tps):.0f}" if tps else "no tokens/s"
    return (f"{run['name']}: {len(steps)} steps, {loss}, {rate}, {rounds} rounds ({failed} failed), "
            f"{run['chaos']} chaos actions, {run['duration']:.0f} s")


def parse_args(argv):
    parser = argparse.ArgumentParser(description="Plot swarm --metrics JSON-lines files into one PNG.")
    parser.add_argument("files", nargs="+", metavar="METRICS.jsonl")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.png")
    parser.add_argument("--title", help="figure title (default: the file names)")
    parser.add_argument("--detail", type=int, metavar="N",
                        help="0-based index of the file for the servers and rounds panels "
                             "(default: the first file with chaos events, else the first)")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    runs = []
    for path in args.files:
        events = load_events(path)
        if events:
            runs.append(summarize_run(path, events))
        else:
            print(f"{path}: no events, left out", file=sys.stderr)
    if not runs:
        raise InputError("no events in any input file")
    detail = pick_detail(runs, args.detail)
    colors = [plt.get_cmap("tab10")(i % 10) for i in range(len(runs))]

    fig = plt.figure(figsize=(16, 11), dpi=100)
    grid = fig.add_gridspec(2, 2, hspace=0.28, wspace=0.22, left=0.1, right=0.98, top=0.93, bottom=0.06)
    plot_loss(fig.add_subplot(grid[0, 0]), runs, colors)
    plot_throughput(fig.add_subplot(grid[0, 1]), runs, colors)
    plot_servers(fig, grid[1, 0], detail)
    plot_rounds(fig.add_subplot(grid[1, 1]), detail)
    fig.suptitle(args.title or ", ".join(r["name"] for r in runs), fontsize=15)
    try:
        fig.savefig(args.output)
    except OSError as err:
        raise InputError(f"{args.output}: cannot write: {err.strerror}") from err
    plt.close(fig)

    for run in runs:
        print(summary_line(run))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except InputError as err:
        print(f"plot_metrics.py: error: {err}", file=sys.stderr)
        sys.exit(2)
