#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds swarm into build/.
# Usage: scripts/build.sh [target...]   (default: everything)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 || { cat build.log; exit 1; }
# -j2: a torch translation unit takes ~1 GB and ~20 s; this machine has 2 cores.
ninja -C build -j "${SWARM_BUILD_JOBS:-2}" "$@"
