#!/usr/bin/env bash
# Builds a real English-Spanish parallel corpus from two public-domain Bibles packaged by
# Debian (King James Version and Reina-Valera 1909, SWORD modules), verse by verse, with one
# joint SentencePiece model and id files that data/tokens.h reads.
#
# Usage: scripts/bible-corpus.sh OUT_DIR
# Writes OUT_DIR/{train,valid,test}.{en,es,ref} (plain text, one verse a line; .ref holds
# "Book C:V"), OUT_DIR/{train,valid,test}.{en,es}.ids (spm_encode --output_format=id),
# OUT_DIR/spm.model and OUT_DIR/spm.vocab (unigram, 8000 pieces: pad 0, unk 1, bos 2,
# eos 3). Split: whole chapters, numbered 0.. in canonical order; chapter k goes to valid when
# k % 64 == 13, to test when k % 64 == 45, else to train (about 1.5% each). Safe to run again:
# every output is rewritten. Installs what it lacks with apt-get (sudo when not root).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
out=$1
vocab=${BIBLE_VOCAB:-8000}
start=$(date +%s.%N)

packages=(sword-text-kjv sword-text-sparv libsword-utils sentencepiece python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bible-corpus: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The module name is the [section] of the .conf the package installs (engKJV2006eb and
# spaRV1909eb in bookworm; older releases called them KJV and SpaRV).
module_of() {
  local conf
  conf=$(dpkg -L "$1" | grep -m1 '/mods.d/.*\.conf$') || {
    echo "bible-corpus: $1 installs no SWORD module .conf" >&2
    exit 1
  }
  sed -n 's/^\[\(.*\)\][[:space:]]*$/\1/p' "$conf" | head -n1
}
en_mod=$(module_of sword-text-kjv)
es_mod=$(module_of sword-text-sparv)

mkdir -p "$out"
tmp=$(mktemp -d "$out/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Only the system library: a user's ~/.sword could hold other versions of the same modules.
export SWORD_PATH=/usr/share/sword
mod2vpl "$en_mod" 1 >"$tmp/en.vpl" &
en_pid=$!
mod2vpl "$es_mod" 1 >"$tmp/es.vpl"
wait "$en_pid"

python3 - "$tmp" <<'EOF'
import html, re, sys

tmp = sys.argv[1]
REF = re.compile(r'^(.+?) (\d+):(\d+)(?: (.*))?$')
# Notes are dropped with their content: OSIS/ThML <note>, GBF footnotes <RF>..<Rf>.
NOTE = re.compile(r'<note\b[^>]*/>|<note\b.*?</note>|<RF>.*?<Rf>', re.S | re.I)
# Every other tag (OSIS <w>, GBF <WH0430>, ThML <sync/>) goes. A run of tags becomes a space
# where one element closes and another opens ("también</transChange><w>bdelio"), nothing
# otherwise: the modules also split words ("afrai</w>d", "hécho<transChange>lo").
TAGS = re.compile(r'(?:<[^>]*>)+')
BETWEEN = re.compile(r'</[^>]*>.*<[^/][^>]*[^/]>|</[^>]*>.*<[^/>]>')
STRONG = re.compile(r'\b[HG]\d{1,5}[a-z]?\b')  # bare Strong's numbers, if any leak out
SPACE = re.compile(r'\s+')

def clean(s):
    s = TAGS.sub(lambda m: ' ' if BETWEEN.search(m.group(0)) else '', NOTE.sub(' ', s))
    s = STRONG.sub(' ', html.unescape(s)).replace('\u00b6', ' ')  # pilcrow paragraph marks
    s = SPACE.sub(' ', s).strip()
    return re.sub(r' ([,.;:?!)])', r'\1', s)  # tags removed before punctuation left a space

def verses(path):
    order, text = [], {}
    with open(path, encoding='utf-8') as f:
        for line in f:
            m = REF.match(line.rstrip('\n'))
            if not m or int(m.group(3)) == 0:  # headings, book and chapter intros
                continue
            key = (m.group(1), int(m.group(2)), int(m.group(3)))
            order.append(key)
            text[key] = clean(m.group(4) or '')
    return order, text

en_order, en = verses(tmp + '/en.vpl')
_, es = verses(tmp + '/es.vpl')
files = {s: [open('%s/%s.%s' % (tmp, s, x), 'w', encoding='utf-8') for x in ('en', 'es', 'ref')]
         for s in ('train', 'valid', 'test')}
chapters, counts = {}, {'train': 0, 'valid': 0, 'test': 0}
unpaired = 0
for key in en_order:
    k = chapters.setdefault(key[:2], len(chapters))
    if not en[key] or not es.get(key):
        unpaired += 1
        continue
    split = 'valid' if k % 64 == 13 else 'test' if k % 64 == 45 else 'train'
    e, s, r = files[split]
    e.write(en[key] + '\n')
    s.write(es[key] + '\n')
    r.write('%s %d:%d\n' % key)
    counts[split] += 1
for fs in files.values():
    for f in fs:
        f.close()
print('bible-corpus: %d English verses, %d Spanish, %d chapters; %d not paired '
      '(missing or empty in one)' % (len(en), len(es), len(chapters), unpaired))
EOF

# One joint model for both languages. Every sentence is used (no sampling), so with a fixed
# seed the model depends only on the text (paths are relative: the model records them).
(cd "$tmp" && spm_train --input=train.en,train.es --model_prefix=spm \
  --vocab_size="$vocab" --model_type=unigram --character_coverage=1.0 \
  --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3 --random_seed=1 --input_sentence_size=0 \
  --minloglevel=2 >spm_train.log 2>&1) || {
  cat "$tmp/spm_train.log" >&2
  exit 1
}
for s in train valid test; do
  for l in en es; do
    spm_encode --model="$tmp/spm.model" --output_format=id <"$tmp/$s.$l" >"$tmp/$s.$l.ids" &
  done
  wait
done

for f in spm.model spm.vocab {train,valid,test}.{en,es,ref} {train,valid,test}.{en,es}.ids; do
  mv -f "$tmp/$f" "$out/$f"
done
for s in train valid test; do
  printf 'bible-corpus: %-5s %6d pairs, %8d en ids, %8d es ids\n' "$s" \
    "$(wc -l <"$out/$s.en")" "$(wc -w <"$out/$s.en.ids")" "$(wc -w <"$out/$s.es.ids")"
done
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "bible-corpus: vocabulary $(wc -l <"$out/spm.vocab") pieces; $out ($en_mod, $es_mod) in ${elapsed} s"
