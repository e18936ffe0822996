#!/usr/bin/env bash
# The real English-Spanish corpus: runs scripts/bible-corpus.sh into a temp dir, checks the
# counts, a known verse pair, and loads the id files through data/tokens.h (tokens_tool).
# Skipped (77) where the SWORD modules, mod2vpl or sentencepiece are not installed: the test
# never installs anything itself.
# Usage: bible_corpus.sh SCRIPT TOKENS_TOOL
set -euo pipefail
script=$1
tool=$2

for p in sword-text-kjv sword-text-sparv libsword-utils sentencepiece python3; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "SKIP: $p is not installed (scripts/bible-corpus.sh installs it)"
    exit 77
  fi
done
if ! command -v mod2vpl >/dev/null || ! command -v spm_train >/dev/null; then
  echo "SKIP: mod2vpl or spm_train not found"
  exit 77
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/gp_bible_XXXXXX")
trap 'rm -rf "$out"' EXIT
fail=0
check() { # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=$((fail + 1)); fi
}
between() { [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }

"$script" "$out"

n_train=$(wc -l <"$out/train.en")
n_valid=$(wc -l <"$out/valid.en")
n_test=$(wc -l <"$out/test.en")
total=$((n_train + n_valid + n_test))
check "about 31,000 pairs ($total)" between "$total" 30500 31102
check "train $n_train" between "$n_train" 29000 30500
check "valid $n_valid (1-2%)" between "$n_valid" 300 650
check "test $n_test" between "$n_test" 300 650
for s in train valid test; do
  for x in es ref en.ids es.ids; do
    check "$s.$x has $(wc -l <"$out/$s.en") lines" [ "$(wc -l <"$out/$s.$x")" = "$(wc -l <"$out/$s.en")" ]
  done
done
check "no markup left" bash -c "! grep -q '[<>]\\|&[a-z]*;\\|strong:[HG][0-9]' '$out'/*.en '$out'/*.es"
check "no empty verse" bash -c "! grep -qx '' '$out'/*.en '$out'/*.es"
check "8000 pieces" [ "$(wc -l <"$out/spm.vocab")" = 8000 ]

# Known verses, on the same line of .ref, .en and .es.
verse() { # verse SPLIT REF LANG
  local k
  k=$(grep -nx "$2" "$out/$1.ref" | cut -d: -f1)
  [ -n "$k" ] && sed -n "${k}p" "$out/$1.$3"
}
check "Genesis 1:1 en" [ "$(verse train 'Genesis 1:1' en)" = \
  "In the beginning God created the heaven and the earth." ]
check "Genesis 1:1 es" [ "$(verse train 'Genesis 1:1' es)" = \
  "EN el principio crió Dios los cielos y la tierra." ]
check "John 11:35 en" [ "$(verse train 'John 11:35' en)" = "Jesus wept." ]
check "John 11:35 es" [ "$(verse train 'John 11:35' es)" = "Y lloró Jesús." ]

# The id files through the reader: every line a pair, every id < 8000, EOS on each side.
for s in train valid test; do
  res=$("$tool" "$out/spm.vocab" "$out/$s.en.ids" "$out/$s.es.ids") || {
    echo "FAIL: tokens_tool $s"
    fail=$((fail + 1))
    continue
  }
  echo "$s: $res"
  n=$(wc -l <"$out/$s.en")
  en=$(($(wc -w <"$out/$s.en.ids") + n))
  es=$(($(wc -w <"$out/$s.es.ids") + n))
  check "$s through data/tokens.h" \
    [ "$(echo "$res" | cut -d' ' -f1-10)" = "vocab 8000 pairs $n skipped 0 src_tokens $en tgt_tokens $es" ]
done

if [ "$fail" -gt 0 ]; then
  echo "$fail failed"
  exit 1
fi
echo "all passed"
