#!/usr/bin/env bash
# Checks the coordinator's live status page in headless chromium.
# Usage: bash tests/process/test_status_page.sh URL    (e.g. http://127.0.0.1:8080/)
# Fetches URL's api/status, renders URL with chromium --dump-dom (virtual time,
# so ~3 polls happen) and checks: chromium exits 0; the DOM has the elements
# stages, trainers, loss-chart, speed-chart, events; it shows every server id
# and trainer id that api/status lists (both lists must be non-empty); the loss
# chart has a polyline/path with points; no SVG attribute holds NaN/Infinity;
# chromium's stderr has no "Uncaught" and no console message from the page.
# Note: chromium logs every page console message (console.log as well as
# console.error) as "INFO:CONSOLE..." whatever its level, so any CONSOLE line
# fails the test; the page is meant to log nothing.
# Env: CHROMIUM (default: chromium, else chromium-browser, google-chrome).
# Exits 1 with a message on the first failure.
set -u

url=${1:-}
[ -n "$url" ] || { echo "usage: $0 URL" >&2; exit 2; }

fail() { echo "FAIL: $*" >&2; exit 1; }

browser=${CHROMIUM:-}
if [ -z "$browser" ]; then
  for b in chromium chromium-browser google-chrome; do
    command -v "$b" >/dev/null 2>&1 && { browser=$b; break; }
  done
fi
[ -n "$browser" ] || fail "no chromium found (run scripts/setup.sh or set CHROMIUM)"
command -v python3 >/dev/null 2>&1 || fail "python3 is required"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. The JSON the page will see, and the ids it must show.
python3 -u - "$url" "$tmp" <<'EOF' || exit 1
import json, sys, urllib.parse, urllib.request
url, tmp = sys.argv[1], sys.argv[2]
api = urllib.parse.urljoin(url, "api/status")
try:
    with urllib.request.urlopen(api, timeout=10) as r:
        d = json.load(r)
except Exception as e:
    sys.exit(f"FAIL: cannot fetch {api}: {e}")
if not isinstance(d, dict):
    sys.exit(f"FAIL: {api} is not a JSON object")
def objs(x):
    return [v for v in x if isinstance(v, dict)] if isinstance(x, list) else []
stages = objs(d.get("stages"))
trainers = objs(d.get("trainers"))
if not stages:
    sys.exit(f"FAIL: {api} lists no stages; the page has nothing to show")
if not trainers:
    sys.exit(f"FAIL: {api} lists no trainers; the page has nothing to show")
servers = [str(s["id"]) for st in stages for s in objs(st.get("servers")) if s.get("id") not in (None, "")]
if not servers:
    sys.exit(f"FAIL: {api} lists stages but no servers; the page has nothing to show")
ids = [str(t["id"]) for t in trainers if t.get("id") not in (None, "")]
with open(f"{tmp}/ids.json", "w") as f:
    json.dump({"servers": servers, "trainers": ids}, f)
print(f"ok: {api}: {len(stages)} stages, {len(servers)} servers, {len(ids)} trainers")
EOF

# 2. Render the page.
mkdir "$tmp/profile"
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
  --user-data-dir="$tmp/profile" --no-first-run --virtual-time-budget=6000 \
  --enable-logging=stderr --v=0 --dump-dom "$url" >"$tmp/dom.html" 2>"$tmp/stderr.txt"
rc=$?
[ $rc -eq 124 ] && fail "chromium timed out after 60 s"
if [ $rc -ne 0 ]; then
  tail -n 20 "$tmp/stderr.txt" | sed 's/^/  | /' >&2
  fail "chromium exited with status $rc"
fi
echo "ok: chromium exited 0 ($(wc -c <"$tmp/dom.html") bytes of DOM)"

# 3. Check the DOM and chromium's log.
python3 -u - "$tmp" <<'EOF'
import json, re, sys
from html.parser import HTMLParser
tmp = sys.argv[1]
dom = open(f"{tmp}/dom.html", encoding="utf-8", errors="replace").read()
want = json.load(open(f"{tmp}/ids.json"))

class P(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.text, self.stack, self.svg_attrs = set(), [], [], []
        self.marks = {"loss-chart": [], "speed-chart": []}
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "svg":
            self.stack.append(a.get("id"))
        chart = next((c for c in reversed(self.stack) if c), None) if self.stack else None
        if self.stack:
            self.svg_attrs += [(tag, k, v or "") for k, v in attrs]
        if chart in self.marks and tag in ("polyline", "path"):
            self.marks[chart].append(a.get("points") or a.get("d") or "")
    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag == "svg":
            self.stack.pop()
    def handle_endtag(self, tag):
        if tag == "svg" and self.stack:
            self.stack.pop()
    def handle_data(self, data):
        self.text.append(data)

p = P()
p.feed(dom)
text = "".join(p.text)
errors = []

for e in ("stages", "trainers", "loss-chart", "speed-chart", "events"):
    if e not in p.ids:
        errors.append(f"no element with id '{e}' in the DOM")
print("checked: elements stages, trainers, loss-chart, speed-chart, events")

for kind in ("servers", "trainers"):
    missing = [i for i in want[kind] if i not in text]
    if missing:
        errors.append(f"{kind} not shown on the page: {missing}")
print(f"checked: the page text shows the {len(want['servers'])} server ids and {len(want['trainers'])} trainer ids of api/status")

def npoints(s):
    return len(re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", s)) // 2
best = max([npoints(s) for s in p.marks["loss-chart"]] or [0])
if best < 2:
    errors.append("the loss chart has no polyline/path with at least 2 points")
print(f"checked: loss chart has {len(p.marks['loss-chart'])} polyline/path(s), longest {best} points")

bad = [(t, k, v[:60]) for t, k, v in p.svg_attrs if re.search(r"NaN|Infinity|undefined", v)]
if bad:
    errors.append(f"SVG attributes with NaN/Infinity/undefined: {bad[:5]}")
print(f"checked: {len(p.svg_attrs)} SVG attributes for NaN/Infinity/undefined: {len(bad)} found")

log = open(f"{tmp}/stderr.txt", encoding="utf-8", errors="replace").read().splitlines()
# Page console messages look like '[pid:tid:date:INFO:CONSOLE:12] "msg", source: URL (12)'
# (older chromium: 'INFO:CONSOLE(12)'); uncaught exceptions are console
# messages starting with "Uncaught".
console = [l for l in log if re.search(r"CONSOLE[:(\]]|console\.error", l)]
uncaught = [l for l in log if "Uncaught" in l]
for l in (uncaught + [l for l in console if l not in uncaught])[:10]:
    print("  | " + l, file=sys.stderr)
if uncaught:
    errors.append(f"{len(uncaught)} 'Uncaught' line(s) in chromium's stderr")
if console:
    errors.append(f"{len(console)} console message(s) from the page in chromium's stderr")
print(f"checked: chromium stderr ({len(log)} lines) for 'Uncaught' and CONSOLE/console.error lines: "
      f"{len(uncaught)} uncaught, {len(console)} console")

if errors:
    for e in errors:
        print("FAIL: " + e, file=sys.stderr)
    sys.exit(1)
print("PASS: status page renders")
EOF
