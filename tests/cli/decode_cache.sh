#!/usr/bin/env bash
# Decoding with a cache (core/eval/kvdec.c): a tiny Transformer half-trained on a copy task
# (its translations are imperfect, so a wrong key, value or position shows) must translate the
# test split with the cache exactly as the uncached path does (every token of every sentence),
# on 1 stage and on 2; beam 1 must equal greedy; beam 4 runs and says so; a position table
# shorter than the decoded rows and bad flags (--beam 0, --lenpen x) are one clear line.
set -u
train=$1; srcdir=$2
tmp=${KEEP_TMP:-$(mktemp -d)}; [ -n "${KEEP_TMP:-}" ] || trap 'rm -rf "$tmp"' EXIT; mkdir -p "$tmp"
fail() { echo "FAIL: $*"; exit 1; }
d=$tmp/corpus; mkdir -p "$d"
{ printf '<pad>\t0\n<unk>\t0\n<s>\t0\n</s>\t0\n'
  for w in a b c d e f g h i j k l m n o p; do printf '\xe2\x96\x81%s\t-1\n' "$w$w"; done; } > "$d/spm.vocab"
gen() { # split pairs seed: target = source, 1 to 12 words of 16
  awk -v n="$2" -v s="$3" -v dir="$d" -v part="$1" 'BEGIN {
    split("aa bb cc dd ee ff gg hh ii jj kk ll mm nn oo pp", w, " ");
    for (i = 0; i < n; i++) {
      s = (s * 1103515245 + 12345) % 2147483648; len = 1 + int(s / 65536) % 12;
      ids = ""; txt = "";
      for (j = 0; j < len; j++) {
        s = (s * 1103515245 + 12345) % 2147483648; t = int(s / 65536) % 16;
        ids = ids (j ? " " : "") (4 + t); txt = txt (j ? " " : "") w[t + 1];
      }
      print ids > (dir "/" part ".en.ids"); print ids > (dir "/" part ".es.ids");
      print txt > (dir "/" part ".en"); print txt > (dir "/" part ".es");
    } }'
}
gen train 3000 1; gen valid 64 2; gen test 96 3
small=(--set data.path="$d" --set blocks.embed.params.vocab=20 --set layers.4.out_features=20
       --set blocks.embed.params.d=32 --set blocks.embed.params.max_len=16 --set blocks.embed.params.p=0
       --set blocks.enc.params.d=32 --set blocks.enc.params.heads=2 --set blocks.enc.params.ff=64
       --set blocks.enc.params.p=0 --set blocks.dec.params.d=32 --set blocks.dec.params.heads=2
       --set blocks.dec.params.ff=64 --set blocks.dec.params.p=0
       --set layers.1.repeat=1 --set layers.3.repeat=2 --set loss.label_smoothing=0
       --set train.optimizer.lr=3e-3 --set train.schedule.warmup_steps=30 --set data.bleu_samples=-1)
for i in src src_seg src_pos tgt_in tgt_seg tgt_pos label; do small+=(--set inputs.$i.shape.0=16); done
"$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --steps 150 --batch-size 16 --threads 2 \
  --save "$tmp/w.safetensors" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/err"; fail "training"; }
ev=("$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --set data.bleu_samples=0
    --batch-size 16 --threads 2 --eval-only --load "$tmp/w.safetensors")
run() { # name, flags...: translations to $tmp/NAME.txt, output to $tmp/NAME.out
  local name=$1; shift
  "${ev[@]}" "$@" --translations "$tmp/$name.txt" > "$tmp/$name.out" 2> "$tmp/$name.err" ||
    { cat "$tmp/$name.err"; fail "$name: gpipe-train $*"; }
}
bleu() { sed -n 's/.*BLEU = \([0-9.]*\) .*(96 sentences.*/\1/p' "$tmp/$1.err"; }
run ref --no-kv-cache
run cached
run cached2 --stages 2
run beam1 --beam 1
run beam4 --beam 4 --lenpen 1
grep -q "96 sentences, greedy, uncached: --no-kv-cache" "$tmp/ref.err" || fail "the reference ran cached: $(cat "$tmp/ref.err")"
grep -q "96 sentences, greedy, [0-9]" "$tmp/cached.err" || fail "not cached: $(cat "$tmp/cached.err")"
b=$(bleu ref); echo "uncached greedy BLEU $b, beam 4 $(bleu beam4)"
awk -v b="$b" 'BEGIN { exit !(b > 5 && b < 99) }' || fail "BLEU $b: the model should be half-trained"
for r in cached cached2 beam1; do
  cmp -s "$tmp/ref.txt" "$tmp/$r.txt" ||
    fail "$r's translations differ from the uncached ones: $(diff "$tmp/ref.txt" "$tmp/$r.txt" | head -4)"
  [ "$(bleu $r)" = "$b" ] || fail "$r: BLEU $(bleu $r), uncached $b"
done
grep -q "96 sentences, beam 4, lenpen 1" "$tmp/beam4.err" || fail "beam 4: $(cat "$tmp/beam4.err")"
grep -q "96 sentences, beam 1, lenpen 1" "$tmp/beam1.err" || fail "beam 1 did not search: $(cat "$tmp/beam1.err")"
[ "$(wc -l < "$tmp/beam4.txt")" = 96 ] || fail "beam 4 wrote $(wc -l < "$tmp/beam4.txt") lines"

bad() { # expected message, flags...: one line on stderr, non-zero exit
  local want=$1; shift
  "${ev[@]}" "$@" > "$tmp/bad.out" 2> "$tmp/bad.err" && fail "accepted: $*"
  [ "$(grep -c '^gpipe-train: ' "$tmp/bad.err")" = 1 ] || fail "$*: not one error line: $(cat "$tmp/bad.err")"
  grep '^gpipe-train: ' "$tmp/bad.err" | grep -q -- "$want" || fail "$*: $(cat "$tmp/bad.err"), want '$want'"
}
bad "--beam" --beam 0
bad "--lenpen x: not a number" --lenpen x
bad "--no-kv-cache is greedy only" --beam 1 --no-kv-cache
# a learned position table of 13 rows holds every sentence of the data (12 pieces and EOS or
# BOS), but decoding may run to 1.5 x 12 + 10 pieces: its initial weights never stop early,
# and the cached path refuses position 13 in one line (the uncached one, which feeds every
# position of the row, refuses row position 13 as the positional layer always has)
ev=("$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --set data.bleu_samples=0
    --batch-size 16 --threads 2 --eval-only --set blocks.embed.layers.1.kind=learned
    --set blocks.embed.params.max_len=13)
bad "decoding position 13 is past the 13 positions that layer tgt_embed.pos's position embedding holds"
echo ok
