#!/usr/bin/env bash
# The paper's compression ablation (its section 4): what crosses a stage cut,
# trained with the same config, steps and seeds, one table against none.
#   scripts/bench_compression.sh [config] [steps] [seeds]   (defaults: config/small 100 2)
# SETTINGS: "compression/boundary" pairs (default: none/none fp16/none blockwise8/none
#   none/bottleneck:2 none/bottleneck:4 none/maxout:2 none/maxout:4): --compression
#   quantizes what crosses the cut; --boundary puts trained layers on either side of it
#   that shrink it K-fold (docs/design.md, "What crosses a stage cut").
# Each run is a local cluster (--role cluster) with the config's servers per stage;
# --seed 1..seeds sets both the initialisation and the data order.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-config/small}
steps=${2:-100}
seeds=${3:-2}
settings=${SETTINGS:-none/none fp16/none blockwise8/none none/bottleneck:2 none/bottleneck:4 none/maxout:2 none/maxout:4}
bash scripts/build.sh swarm > /dev/null
out=$(mktemp -d /tmp/swarm-compression-XXXXXX)
echo "config $config, $steps steps, seeds 1..$seeds, $(nproc) cores; metrics in $out"
runs=()
for s in $settings; do
  IFS=/ read -r c b <<< "$s"
  for seed in $(seq "$seeds"); do
    file="$out/${c}_${b/:/-}_seed$seed.jsonl"
    echo "swarm: --compression $c --boundary $b --seed $seed"
    ./build/swarm --role cluster --config "$config" --max-steps "$steps" --compression "$c" --boundary "$b" \
      --seed "$seed" --metrics "$file" --log-level warn > /dev/null
    runs+=("$file")
  done
done
python3 scripts/compression_summary.py "${runs[@]}"
