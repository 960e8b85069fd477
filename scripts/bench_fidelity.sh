#!/usr/bin/env bash
# Fidelity of the swarm against `--role local`: loss against samples seen, same
# model, batch size, learning rate and seed, measured in one run; one swarm run
# per compression setting, each with its wire bytes per sample, tokens/s and
# averaging rounds (time, bytes per server against the ideal all-reduce).
#   scripts/bench_fidelity.sh [config] [steps] [servers-per-stage] [in-flight]   (defaults: config/small 100 2 4)
# SETTINGS: the swarm runs, each "compression/averaging-compression[/stale-wait]"
#   (default: "none/none fp16/fp16 blockwise8/fp16 blockwise8/blockwise8 blockwise8/fp16/0";
#   the last lets rounds overlap compute fully: a step-stale gradient for every
#   request computed during a round, see docs/design.md, Staleness).
# RUNS: swarm runs per setting (default 1), same seeds; the summary shows each.
# FLAGS: more flags for the local run and every swarm run alike (e.g. "--batch-size 256").
# BASELINE: another build's swarm binary (e.g. one built from the commit before a
#   change): each swarm run is preceded by the same run of it, and the summary
#   ends with this build's tokens/s against it per setting. Its runs leave out
#   --stale-wait (builds before 2026-12-05 lack it and never wait).
# in-flight: the trainer's microbatches in the pipeline; those in flight when a
# stage steps are computed partly on the old parameters (see docs/design.md, Staleness).
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-config/small}
steps=${2:-100}
servers=${3:-2}
in_flight=${4:-4}
settings=${SETTINGS:-none/none fp16/fp16 blockwise8/fp16 blockwise8/blockwise8 blockwise8/fp16/0}
runs_each=${RUNS:-1}
read -r -a flags <<< "${FLAGS:-}"
bash scripts/build.sh swarm > /dev/null
out=$(mktemp -d /tmp/swarm-fidelity-XXXXXX)
echo "config $config${FLAGS:+ $FLAGS}, $steps steps of --batch-size samples each, $servers servers per stage, in-flight $in_flight, $(nproc) cores; metrics in $out"
./build/swarm --role local --config "$config" --max-steps "$steps" "${flags[@]}" --metrics "$out/local.jsonl" --log-level warn > /dev/null
runs=()
for s in $settings; do
  IFS=/ read -r c a w <<< "$s"
  name="$c-$a${w:+-wait$w}"
  for i in $(seq "$runs_each"); do
    tag=$name${RUNS:+-run$i}
    for bin in ${BASELINE:+"$BASELINE"} ./build/swarm; do
      wait=$w file=$out/swarm-$tag.jsonl
      [[ $bin == ./build/swarm ]] || { wait= file=$out/swarm-baseline-$tag.jsonl; }
      echo "swarm ($bin): --compression $c --averaging-compression $a${wait:+ --stale-wait $wait} (run $i of $runs_each)"
      "$bin" --role cluster --config "$config" --max-steps "$steps" --servers-per-stage "$servers" --in-flight "$in_flight" \
        --compression "$c" --averaging-compression "$a" ${wait:+--stale-wait "$wait"} "${flags[@]}" --metrics "$file" --log-level warn > /dev/null
      runs+=("$file")
    done
  done
done
python3 scripts/fidelity_summary.py "$out/local.jsonl" "${runs[@]}"
python3 scripts/plot_metrics.py "$out/local.jsonl" "${runs[@]}" -o "$out/fidelity.png" | tail -1
