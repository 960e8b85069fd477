#!/usr/bin/env bash
# The house style, .clang-format, on every tracked C++ file.
# Usage: scripts/format.sh          rewrite the files that differ
#        scripts/format.sh --check  list them and fail (ctest: test_format, so CI)
set -euo pipefail
cd "$(dirname "$0")/.."
format=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$format" ]; then
  echo "format: clang-format-14 is missing (bash scripts/setup.sh installs it)"
  exit 1
fi
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.c')
else  # a copy without .git: the same folders
  mapfile -t files < <(find . -path ./build -prune -o -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.c' \) -print | sed 's|^\./||' | sort)
fi
if [ "${1:-}" = "--check" ]; then
  # Fifty files per clang-format, two at a time: one process per file took
  # 12 s of the README's test command, this takes about 1 s.
  errors=$(printf '%s\0' "${files[@]}" | xargs -0 -n 50 -P 2 "$format" --dry-run -Werror 2>&1 >/dev/null) && rc=0 || rc=$?
  mapfile -t bad < <(printf '%s\n' "$errors" | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*/\1/p' | sort -u)
  if [ $rc -ne 0 ] && [ ${#bad[@]} -eq 0 ]; then
    printf 'format: clang-format failed:\n%s\n' "$errors"
    exit 1
  fi
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'format: differs from .clang-format: %s\n' "${bad[@]}"
    echo "format: ${#bad[@]} of ${#files[@]} files; run scripts/format.sh to rewrite them"
    exit 1
  fi
  echo "format: ${#files[@]} files in the house style"
  exit 0
fi
"$format" -i "${files[@]}"
echo "format: ${#files[@]} files formatted"
