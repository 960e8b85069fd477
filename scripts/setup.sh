#!/usr/bin/env bash
# Installs every build and run dependency of swarm from Debian 12 packages.
# Idempotent: packages already installed are skipped, and apt is not touched at all
# when nothing is missing. Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev                       # C++ Actor Framework 0.17.6: core, io, openssl
  libssl-dev openssl               # mutual TLS (net/tls.*) and the certificate script
  libtorch-dev                     # libtorch 1.13.1, CPU
  libopenblas0-pthread             # without it libtorch runs on the reference BLAS (10-20x slower)
  libprotobuf-dev protobuf-compiler
  libspdlog-dev
  catch2                           # Catch2 2.13 (single header)
  libcli11-dev                     # command-line parsing
  fortunes                         # default training corpus (/usr/share/games/fortunes)
  python3                          # benchmark and metrics scripts
  python3-matplotlib               # scripts/plot_metrics.py
  python3-prometheus-client        # the status test parses /metrics with the reference parser
  libcpp-httplib-dev               # the tests' HTTP client for the status page
  chromium                         # headless browser of the status page test
  iproute2                         # ip/tc for scripts/regions.sh (namespaces, HTB shaping)
  iptables                         # NFQUEUE rule inside the regions router namespace
  libnetfilter-queue-dev           # delay_shim (scripts/regions/delay_shim.c) links it
  iputils-ping                     # RTT check in regions.sh selftest
  libsimgrid-dev                   # swarm-sim (optional target; SimGrid 3.32 via pkg-config)
  libjemalloc-dev                  # swarm-sim's allocator (SimGrid allocates per message)
  libsentencepiece-dev             # --role tokenizer / prepare: SentencePiece 0.1.97 (BPE training, encoding)
  python3-sentencepiece            # the tests' independent check of the ids, and scripts/bench_data.sh
  nlohmann-json3-dev               # JSON: metrics events, /api/status, simulator events, safetensors headers
  prometheus-cpp-dev               # /metrics: the Prometheus text exposition (observe/ only)
  python3-numpy                    # the tests' NumPy reference forward (tests/reference_forward.py)
  python3-torch                    # scripts/bench_llama.sh: the PyTorch side (reference benchmarks only)
  etcd-server etcd-client          # --control etcd://: standby coordinators elected through etcd 3.4
  clang-format-14                  # the house style (.clang-format), checked by test_format
)
# --fuzz: also what scripts/fuzz.sh builds with (the test suite replays the
# fuzz corpora without them).
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang-14 libfuzzer-14-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
