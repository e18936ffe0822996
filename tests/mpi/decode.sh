#!/usr/bin/env bash
# Decoding under mpirun -np 2 (2 stages, one a process): the cache needs every stage in one
# process, so --beam 4 (--eval-only) and --generate are refused in one line with a non-zero
# exit before any work, while greedy translation falls back to the uncached path, says so, and
# gives the one-process (cached) run's translations.
set -u
train=$1; srcdir=$2
. "$srcdir/tests/mpi/common.sh"
mpi=(timeout 120 "${mpi[@]}" -np 2)
d=$tmp/corpus; mkdir -p "$d"
{ printf '<pad>\t0\n<unk>\t0\n<s>\t0\n</s>\t0\n'
  for w in a b c d e f g h i j k l m n o p; do printf '\xe2\x96\x81%s\t-1\n' "$w$w"; done; } > "$d/spm.vocab"
for part in train:600:1 valid:32:2 test:48:3; do # target = source, 1 to 12 words of 16
  IFS=: read -r p n s <<< "$part"
  awk -v n="$n" -v s="$s" -v dir="$d" -v part="$p" 'BEGIN {
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
      print ids > (dir "/" part ".lm.ids");
    } }'
done
nmt=("$srcdir/models/transformer-nmt.yaml" --set data.path="$d" --set blocks.embed.params.vocab=20
     --set layers.4.out_features=20 --set blocks.embed.params.d=32 --set blocks.embed.params.max_len=16
     --set blocks.embed.params.p=0 --set blocks.enc.params.d=32 --set blocks.enc.params.heads=2
     --set blocks.enc.params.ff=64 --set blocks.enc.params.p=0 --set blocks.dec.params.d=32
     --set blocks.dec.params.heads=2 --set blocks.dec.params.ff=64 --set blocks.dec.params.p=0
     --set layers.1.repeat=1 --set layers.3.repeat=2 --set train.optimizer.lr=3e-3
     --set train.schedule.warmup_steps=10 --set data.bleu_samples=0 --batch-size 16 --threads 1)
for i in src src_seg src_pos tgt_in tgt_seg tgt_pos label; do nmt+=(--set inputs.$i.shape.0=16); done
lm=("$srcdir/models/transformer-lm.yaml" --set data.dataset=text --set data.path="$d"
    --set data.target=lm --set layers.0.num_embeddings=20 --set layers.0.dim=32
    --set layers.1.max_len=16 --set blocks.layer.params.d=32 --set blocks.layer.params.heads=2
    --set blocks.layer.params.ff=64 --set layers.3.repeat=2 --set layers.5.out_features=20
    --batch-size 16 --threads 1)
for i in tokens label seg pos; do lm+=(--set inputs.$i.shape.0=16); done
"$train" "${nmt[@]}" --steps 60 --quiet --save "$tmp/nmt.safetensors" > "$tmp/nmt.log" 2>&1 ||
  { cat "$tmp/nmt.log"; echo "FAIL: training the translation model"; exit 1; }
"$train" "${lm[@]}" --steps 2 --quiet --save "$tmp/lm.safetensors" > "$tmp/lm.log" 2>&1 ||
  { cat "$tmp/lm.log"; echo "FAIL: training the language model"; exit 1; }
printf '4 5 6\n12 13\n' > "$tmp/prompts.txt"

refused() { # name, expected message, command...: a non-zero exit, one gpipe-train line, no work
  local name=$1 want=$2; shift 2
  "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
  local rc=$?
  [ $rc != 0 ] || { bad "$name: accepted: $(tail -2 "$tmp/$name.err")"; return; }
  [ $rc != 124 ] || { bad "$name: timed out"; return; }
  [ "$(grep -c '^gpipe-train: ' "$tmp/$name.err")" = 1 ] &&
    grep '^gpipe-train: ' "$tmp/$name.err" | grep -q -- "$want" && ok ||
    bad "$name: rc $rc, want one line '$want': $(grep -v '^--\|^ *$' "$tmp/$name.err" | head -4)"
  grep -q "^model \|^eval " "$tmp/$name.out" "$tmp/$name.err" &&
    bad "$name: it worked before refusing: $(grep -h "^model \|^eval " "$tmp/$name.out" "$tmp/$name.err" | head -2)" || ok
}
refused beam "--beam decodes with the key/value cache, which needs every stage in one process; this launch has 2" \
  "${mpi[@]}" "$train" "${nmt[@]}" --stages 2 --eval-only --load "$tmp/nmt.safetensors" --beam 4
refused generate "--generate decodes with the key/value cache, which needs every stage in one process" \
  "${mpi[@]}" "$train" "${lm[@]}" --stages 2 --load "$tmp/lm.safetensors" --generate 5 \
  --prompts "$tmp/prompts.txt"

# greedy: uncached at W = 2, the cached one-process run's translations
"$train" "${nmt[@]}" --stages 2 --eval-only --load "$tmp/nmt.safetensors" \
  --translations "$tmp/w1.txt" > "$tmp/w1.out" 2> "$tmp/w1.err" || bad "W=1: $(tail -2 "$tmp/w1.err")"
"${mpi[@]}" "$train" "${nmt[@]}" --stages 2 --eval-only --load "$tmp/nmt.safetensors" \
  --translations "$tmp/w2.txt" > "$tmp/w2.out" 2> "$tmp/w2.err" || bad "W=2: $(tail -3 "$tmp/w2.err")"
grep -q "48 sentences, greedy, [0-9]" "$tmp/w1.err" && ok || bad "W=1 not cached: $(grep sentences "$tmp/w1.err")"
grep -q "48 sentences, greedy, uncached: a stage runs in another process" "$tmp/w2.err" && ok ||
  bad "W=2 does not say it ran uncached: $(grep sentences "$tmp/w2.err")"
[ -s "$tmp/w1.txt" ] && cmp -s "$tmp/w1.txt" "$tmp/w2.txt" && ok ||
  bad "W=2's translations differ from W=1's: $(diff "$tmp/w1.txt" "$tmp/w2.txt" 2>&1 | head -4)"
finish
