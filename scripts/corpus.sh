#!/usr/bin/env bash
# A real English corpus for --data, installed from Debian packages and
# prepared once (the demo calls this when its corpus is missing):
#
#   package          what                                        licence
#   linux-doc-6.1    the kernel's documentation (reST sources)    GPL-2
#   dict-gcide       GCIDE, Webster's 1913 + WordNet (dictd)      GPL-2+
#   perl-doc         Perl's manual (POD)                          GPL-1+ or Artistic
#   git-doc          Git's manual (AsciiDoc)                      GPL-2, GPL-2+ and others
#   fortunes         fortune's cookies                            BSD (the program); the cookies as collected
#
# about 80 MB of UTF-8 text (GCIDE's few non-UTF-8 bytes are dropped). Each
# package's Debian copyright file is copied into OUT/licences/.
#
#   scripts/corpus.sh [OUT]   (default build/corpus): writes OUT/text/ (the
#   text), OUT/tokenizer.model (--vocab-size VOCAB, default 8000), OUT/shards/
#   (--role prepare), OUT/README.txt (what is there). Steps already done are
#   skipped; delete OUT to start again.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/corpus}
vocab=${VOCAB:-8000}
swarm=./build/swarm
packages=(linux-doc-6.1 dict-gcide perl-doc git-doc fortunes)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "corpus: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

text=$out/text
if [ ! -f "$out/text.done" ]; then
  echo "corpus: collecting the text into $text"
  rm -rf "$text" && mkdir -p "$text"/{linux-doc,perl-doc,git-doc,gcide,fortunes} "$out/licences"
  dest=$(realpath "$text")
  (cd /usr/share/doc/linux-doc-6.1/html/_sources && find . -name '*.txt' -exec cp --parents -t "$dest/linux-doc" {} +)
  cp "$(ls -d /usr/share/perl/5.*/pod | head -1)"/*.pod "$text/perl-doc/"
  (cd /usr/share/doc/git-doc && find . -name '*.txt' -exec cp --parents -t "$dest/git-doc" {} +)
  zcat /usr/share/dictd/gcide.dict.dz | iconv -f UTF-8 -t UTF-8 -c >"$text/gcide/gcide.txt"
  for f in /usr/share/games/fortunes/*; do
    case "$f" in *.dat|*.u8) continue ;; esac
    [ -f "$f" ] && [ ! -L "$f" ] && iconv -f UTF-8 -t UTF-8 "$f" >"$text/fortunes/$(basename "$f")" 2>/dev/null || true
  done
  for p in "${packages[@]}"; do
    cp "/usr/share/doc/$p/copyright" "$out/licences/$p.copyright"
  done
  touch "$out/text.done"
fi
echo "corpus: $(du -sb "$text" | cut -f1 | awk '{printf "%.1f MB", $1/1e6}') of text in $(find "$text" -type f | wc -l) files"

if [ ! -f "$out/tokenizer.model" ]; then
  echo "corpus: first preparation, once: the tokenizer takes about 2 minutes on 2 cores, the shards 20 s"
  start=$(date +%s)
  "$swarm" --role tokenizer --input "$text" --vocab-size "$vocab" --out "$out/tokenizer.model"
  echo "corpus: tokenizer trained in $(( $(date +%s) - start )) s"
fi
if [ ! -f "$out/shards/prepared.txt" ]; then
  start=$(date +%s)
  "$swarm" --role prepare --input "$text" --tokenizer "$out/tokenizer.model" --out "$out/shards"
  echo "corpus: prepared in $(( $(date +%s) - start )) s"
fi
cat >"$out/README.txt" <<TXT
swarm's demo corpus, made by scripts/corpus.sh on $(date -u +%Y-%m-%d).
text/        the text, one folder per Debian package (see licences/ for each one's terms)
tokenizer.model  SentencePiece BPE, $vocab ids, trained on text/
shards/      token shards and the validation split (docs/data.md); shards/prepared.txt is the report
TXT
echo "corpus: ready in $out (train with --data $out/shards --tokenizer $out/shards/tokenizer.model)"
