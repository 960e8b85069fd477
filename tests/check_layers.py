#!/usr/bin/env python3
"""The layers' allowed arrows, checked against the code (ctest: test_layers).

The build already refuses an include of a project header whose layer is not
linked (CMakeLists.txt, swarm_layer). This check holds the arrows themselves,
so that widening one is a visible change here and in docs/design.md, and it
covers what include paths cannot: system headers (no CAF in the policies or
the model, no torch in the ground floor) and the libraries each folder's
CMakeLists.txt links.

Usage: check_layers.py SOURCE_DIR   (exit 0: clean; 1: each violation printed)
"""
import re
import sys
from pathlib import Path

# Layer -> the layers it may use. Longest folder prefix wins.
LAYERS = {
    "base": [],
    "config": ["policy", "base"],
    "policy": ["base"],
    "models/shape": ["config", "policy", "base"],
    "models": ["models/shape", "config", "policy", "base"],
    "messages": ["base"],
    "net": ["messages", "base"],
    "observe": ["policy", "base"],
    "data": ["base"],
    "actors": ["policy", "models", "models/shape", "data", "messages", "net", "observe", "config", "base"],
    "apps": ["actors", "policy", "models", "models/shape", "data", "messages", "net", "observe", "config", "base"],
    "sim": ["policy", "models/shape", "config", "base"],
}

# The CMake library of each layer.
LIBRARY = {
    "base": "swarm_base", "config": "swarm_config", "policy": "swarm_policy",
    "models/shape": "swarm_shape", "models": "swarm_models", "messages": "swarm_messages",
    "net": "swarm_net", "data": "swarm_data", "observe": "swarm_observe", "actors": "swarm_actors", "apps": "swarm_apps",
    "sim": "swarm_sim_core",
}

CAF = ("caf/",)
TORCH = ("torch/", "ATen/", "c10/")
PROTOBUF = ("google/protobuf/",)
SOCKETS = ("sys/socket.h", "netinet/", "arpa/inet.h", "netdb.h", "poll.h", "openssl/")
# Layer -> system headers it must not include.
FORBIDDEN = {
    "base": CAF + TORCH + PROTOBUF + SOCKETS,
    "config": CAF + TORCH + PROTOBUF + SOCKETS,
    "policy": CAF + TORCH + PROTOBUF + SOCKETS,
    "models/shape": CAF + TORCH + PROTOBUF + SOCKETS,
    "models": CAF + PROTOBUF + SOCKETS,
    "messages": SOCKETS,
    "observe": CAF + TORCH + PROTOBUF + SOCKETS,
    "data": CAF + TORCH + PROTOBUF + SOCKETS,
    "sim": CAF + TORCH + PROTOBUF + SOCKETS,
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def layer_of(path: str):
    """The layer a repository path belongs to, or None (tests, scripts...)."""
    best = None
    for layer in LAYERS:
        if path == layer or path.startswith(layer + "/"):
            if best is None or len(layer) > len(best):
                best = layer
    return best


def check_sources(root: Path):
    problems = []
    for f in sorted(root.rglob("*")):
        if f.suffix not in (".cpp", ".hpp", ".h", ".c") or "build" in f.relative_to(root).parts[:1]:
            continue
        rel = f.relative_to(root).as_posix()
        here = layer_of(rel)
        if here is None:
            continue
        for kind, name in INCLUDE.findall(f.read_text(errors="replace")):
            if kind == '"':
                there = "messages" if name == "swarm.pb.h" else layer_of(name)
                if there is None:
                    problems.append(f"{rel}: includes \"{name}\", which is in no layer")
                elif there != here and there not in LAYERS[here]:
                    problems.append(f"{rel}: {here} may not use {there} (includes \"{name}\")")
            elif name.startswith(FORBIDDEN.get(here, ())):
                problems.append(f"{rel}: {here} may not include <{name}>")
    return problems


def check_cmake(root: Path):
    problems = []
    by_library = {lib: layer for layer, lib in LIBRARY.items()}
    for layer, lib in LIBRARY.items():
        cmake = root / layer / "CMakeLists.txt"
        if not cmake.exists():
            problems.append(f"{layer}/CMakeLists.txt is missing: every layer is one library")
            continue
        text = cmake.read_text()
        m = re.search(r"swarm_layer\(\s*(\S+)\s+(\S+)(.*?)\)", text, re.S)
        if not m or m.group(1) != lib or m.group(2) != layer:
            problems.append(f"{layer}/CMakeLists.txt: expected swarm_layer({lib} {layer} ...)")
            continue
        uses = re.search(r"USES(.*)", m.group(3), re.S)
        for used in (uses.group(1).split() if uses else []):
            there = by_library.get(used)
            if there is not None and there not in LAYERS[layer]:
                problems.append(f"{layer}/CMakeLists.txt: {lib} links {used}, but {layer} may not use {there}")
    return problems


# A stage router's choice of server is made in one place, the attempt planner,
# which swarm's load balancer and swarm-sim both call: a choice made elsewhere
# is where the simulator would drift from the binary.
ROUTER_CHOICE = re.compile(r"\.(choose|choose_backward|choose_only)\(")
CHOOSES = {"policy/attempt.cpp", "policy/routing.cpp"}


def check_choices(root: Path):
    problems = []
    for layer in LAYERS:
        for f in sorted((root / layer).glob("*.[ch]pp")):
            rel = f.relative_to(root).as_posix()
            if rel not in CHOOSES and ROUTER_CHOICE.search(f.read_text(errors="replace")):
                problems.append(f"{rel}: chooses a server itself; call policy::next_server (policy/attempt.hpp)")
    return problems


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    problems = check_sources(root) + check_cmake(root) + check_choices(root)
    for p in problems:
        print(p)
    print(f"layers: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
