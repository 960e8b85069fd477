#!/usr/bin/env bash
# The data side's costs, as figures measured in one run (docs/benchmarks.md):
#   1. tokenizer: swarm's encoder (the C++ library, 1 and 2 threads) against
#      Debian's python3-sentencepiece (1 thread, and its 2-thread batch call)
#      on the same lines of the corpus: MB/s of text, and whether the ids agree;
#   2. --role prepare with --threads 1 and 2 on the same text: MB/s;
#   3. a trainer's memory against the corpus size: --role local --data on the
#      corpus' shards and on a copy of at least 1 G tokens (the shards
#      repeated), RSS split into its anonymous part (the process's own) and its
#      file part (mapped shards: the kernel's page cache);
#   4. the sampler: microseconds per microbatch from shards and from bytes.
# Needs the corpus (scripts/corpus.sh, build/corpus) and a build.
#   scripts/bench_data.sh [CORPUS_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=${1:-build/corpus}
py=/usr/bin/python3
bash scripts/build.sh swarm swarm_bench_data >/dev/null
[ -f "$corpus/shards/prepared.txt" ] || bash scripts/corpus.sh "$corpus"
tok=$corpus/shards/tokenizer.model
work=$(mktemp -d /tmp/swarm-bench-data-XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "bench_data: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"

# 1. Tokenizer throughput on 20 MB of lines (the kernel docs and the dictionary).
find "$corpus/text/linux-doc" "$corpus/text/gcide" -type f -print0 | sort -z | xargs -0 cat 2>/dev/null | head -c 20000000 >"$work/text.txt" || true  # cat ends on SIGPIPE
echo "== 1. encode $(wc -c <"$work/text.txt") bytes, $(wc -l <"$work/text.txt") lines"
./build/swarm_bench_data "$tok" "$work/text.txt" "$corpus/shards" 128 8 | tee "$work/bench.txt" | grep encode
./build/swarm --role tokenizer --tokenizer "$tok" --encode <"$work/text.txt" >"$work/ids.swarm"
$py - "$tok" "$work/text.txt" "$work/ids.swarm" <<'PY'
import sys, time
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
raw = open(sys.argv[2], 'rb').read()
lines = raw.decode('utf-8').split('\n')
if lines and lines[-1] == '':
    lines.pop()
for threads in (1, 2):
    t = time.perf_counter()
    ids = sp.encode(lines, num_threads=threads) if threads > 1 else [sp.encode(l) for l in lines]
    s = time.perf_counter() - t
    print(f"python3-sentencepiece {spm.__version__} threads={threads} tokens={sum(map(len, ids))} "
          f"seconds={s:.3f} mb_per_s={len(raw) / 1e6 / s:.2f}")
ours = open(sys.argv[3]).read().split('\n')[:-1]
same = sum(1 for a, b in zip(ours, ids) if [int(x) for x in a.split()] == b)
print(f"ids agree on {same} of {len(lines)} lines")
PY

# 2. Prepare throughput.
echo "== 2. prepare"
mkdir -p "$work/in" && cp "$work/text.txt" "$work/in/"
for threads in 1 2; do
  ./build/swarm --role prepare --input "$work/in" --tokenizer "$tok" --out "$work/p$threads" --threads "$threads" |
    grep "done in" | sed "s/^/threads=$threads /"
done

# 3. Trainer memory against corpus size.
echo "== 3. trainer RSS (--role local --data, config/small, 30 steps)"
tokens=$(awk '/^  train:/ {print $4}' "$corpus/shards/prepared.txt")
copies=$(( (1000000000 + tokens - 1) / tokens ))
mkdir -p "$work/big"
cp "$corpus/shards/val-"*.bin "$corpus/shards/tokenizer.model" "$work/big/"
n=0
for c in $(seq 1 "$copies"); do
  for f in "$corpus/shards/train-"*.bin; do
    cp "$f" "$work/big/$(printf 'train-%05d.bin' $n)"
    n=$((n + 1))
  done
done
for dir in "$corpus/shards" "$work/big"; do
  $py - "$dir" "$tok" <<'PY'
import os, subprocess, sys, time
d, tok = sys.argv[1], sys.argv[2]
size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.startswith('train-'))
p = subprocess.Popen(['./build/swarm', '--role', 'local', '--config', 'config/small', '--data', d, '--tokenizer', tok,
                      '--max-steps', '30', '--threads', '2'], stdout=subprocess.DEVNULL)
peak = {}
def sample():
    try:
        f = {l.split(':')[0]: int(l.split()[1]) for l in open(f'/proc/{p.pid}/status') if l.startswith(('VmRSS', 'RssAnon', 'RssFile'))}
    except (OSError, ValueError, IndexError):
        return
    for k, v in f.items():
        peak[k] = max(peak.get(k, 0), v)
while p.poll() is None:
    sample()
    time.sleep(0.1)
print(f"shards {size / 1e9:.2f} GB ({size // 2 / 1e9:.2f} G tokens): peak RSS {peak.get('VmRSS', 0) / 1024:.0f} MiB, "
      f"anonymous {peak.get('RssAnon', 0) / 1024:.0f} MiB, file-backed {peak.get('RssFile', 0) / 1024:.0f} MiB "
      f"(exit {p.returncode})")
PY
done

# 4. The sampler.
echo "== 4. sampler"
grep sample "$work/bench.txt"
