#!/usr/bin/env bash
# Decoding with a cache (core/eval/kvdec.c): a tiny Transformer half-trained on a copy task
# (its translations are imperfect, so a wrong key, value or position shows) must translate the
# test split with the cache exactly as the uncached path does (every token of every sentence),
# on 1 stage and on 2; beam 1 must equal greedy; beam 4 runs and says so; a position table
# shorter than the decoded rows and bad flags (--beam 0, --lenpen x) are one clear line. A
# language model generates through 2 stages: greedy continues counting text, sampling repeats
# with its seed, and --top-p 2, --temperature -1 and prompts past the positions are refused.
# GP_DECODE_DEVICES=cuda:0 decodes and generates there (training stays on the CPU):
# scripts/gpu-check.sh's kvdec phase.
set -u
train=$1; srcdir=$2
dev=(${GP_DECODE_DEVICES:+--devices "$GP_DECODE_DEVICES"})
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
    --batch-size 16 --threads 2 --eval-only --load "$tmp/w.safetensors" "${dev[@]}")
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

# a language model on counting text (each id the previous + 1, 4..19 wrapping) continues its
# prompts by counting, through 2 stages; sampling with a seed repeats; bad flags are one line
for part in train:2000:4 valid:64:5 test:96:6; do
  IFS=: read -r p n s <<< "$part"
  awk -v n="$n" -v s="$s" 'BEGIN { for (i = 0; i < n; i++) {
      s = (s * 1103515245 + 12345) % 2147483648; len = 2 + int(s / 65536) % 10;
      s = (s * 1103515245 + 12345) % 2147483648; t = int(s / 65536) % 16; ids = "";
      for (j = 0; j < len; j++) ids = ids (j ? " " : "") (4 + (t + j) % 16);
      print ids } }' > "$d/$p.lm.ids"
done
lm=("$srcdir/models/transformer-lm.yaml" --set data.dataset=text --set data.path="$d"
    --set data.target=lm --set layers.0.num_embeddings=20 --set layers.0.dim=32
    --set layers.1.max_len=16 --set layers.2.p=0 --set blocks.layer.params.d=32
    --set blocks.layer.params.heads=2 --set blocks.layer.params.ff=64 --set blocks.layer.params.p=0
    --set layers.3.repeat=2 --set layers.5.out_features=20 --set inputs.tokens.shape.0=16
    --set inputs.label.shape.0=16 --set inputs.seg.shape.0=16 --set inputs.pos.shape.0=16
    --batch-size 16 --threads 2)
"$train" "${lm[@]}" --steps 200 --set train.optimizer.lr=3e-3 --set train.schedule.warmup_steps=30 \
  --save "$tmp/lm.safetensors" > "$tmp/lm.out" 2> "$tmp/lm.err" || { cat "$tmp/lm.err"; fail "training the LM"; }
printf '4 5 6\n12 13\n17 18 19 4\n' > "$tmp/prompts.txt"
gen0=("$train" "${lm[@]}" --load "$tmp/lm.safetensors" --prompts "$tmp/prompts.txt" "${dev[@]}")
gen=("${gen0[@]}" --generate 5)
"${gen[@]}" --stages 2 > "$tmp/gen.txt" 2> "$tmp/gen.err" || { cat "$tmp/gen.err"; fail "--generate"; }
[ "$(cat "$tmp/gen.txt")" = "$(printf '7 8 9 10 11\n14 15 16 17 18\n5 6 7 8 9')" ] ||
  fail "greedy generation does not count on: $(cat "$tmp/gen.txt")"
"${gen[@]}" --temperature 1 --top-k 3 --top-p 0.9 --seed 7 > "$tmp/s1.txt" 2>&1 || fail "sampling: $(cat "$tmp/s1.txt")"
"${gen[@]}" --temperature 1 --top-k 3 --top-p 0.9 --seed 7 --stages 2 > "$tmp/s2.txt" 2>&1 || fail "sampling at 2 stages"
cmp -s "$tmp/s1.txt" "$tmp/s2.txt" || fail "sampling with one seed differs: $(cat "$tmp/s1.txt") / $(cat "$tmp/s2.txt")"
ev=("${gen0[@]}")
bad "--top-p 2: want a number in (0, 1]" --generate 5 --top-p 2
bad "--temperature -1: want a number" --generate 5 --temperature -1
bad "--generate 14: prompt 3 of 4 ids and 14 more pass the model's 16 positions" --generate 14
echo ok
