#!/usr/bin/env bash
# gpipe-train on translation and text data: a copy task in a tiny made-up corpus (target =
# source, 16 words, 12 pieces a sentence at most). A tiny Transformer with packed rows,
# trained through 2 stages and 2 micro-batches, must translate the test split by greedy
# decoding with BLEU > 60 (copying is easy; a decoding, detokenizing or BLEU bug is not);
# --translations writes one detokenized line a test sentence. A language model on the same
# text must reach a perplexity well under the vocabulary's. Bad data sections and missing
# files are one clear line and a non-zero exit.
set -u
train=$1; srcdir=$2
tmp=${KEEP_TMP:-$(mktemp -d)}; [ -n "${KEEP_TMP:-}" ] || trap 'rm -rf "$tmp"' EXIT; mkdir -p "$tmp"
fail() { echo "FAIL: $*"; exit 1; }
d=$tmp/corpus; mkdir -p "$d"
# the vocabulary: 4 special pieces, then 16 words
{ printf '<pad>\t0\n<unk>\t0\n<s>\t0\n</s>\t0\n'
  for w in a b c d e f g h i j k l m n o p; do printf '\xe2\x96\x81%s\t-1\n' "$w$w"; done; } > "$d/spm.vocab"
# sentences: ids 4..19, lengths 1..12, from a fixed LCG; text = the words. With a 4th
# argument k, word k is a character the vocabulary lacks: <unk> (id 1) in the ids, a snowman
# in the text.
gen() { # split pairs seed [k]
  awk -v n="$2" -v s="$3" -v dir="$d" -v part="$1" -v unk="${4:--1}" 'BEGIN {
    split("aa bb cc dd ee ff gg hh ii jj kk ll mm nn oo pp", w, " ");
    for (i = 0; i < n; i++) {
      s = (s * 1103515245 + 12345) % 2147483648; len = 1 + int(s / 65536) % 12;
      ids = ""; txt = "";
      for (j = 0; j < len; j++) {
        s = (s * 1103515245 + 12345) % 2147483648; t = int(s / 65536) % 16;
        ids = ids (j ? " " : "") (t == unk ? 1 : 4 + t);
        txt = txt (j ? " " : "") (t == unk ? "\342\230\203" : w[t + 1]);
      }
      print ids > (dir "/" part ".en.ids"); print ids > (dir "/" part ".es.ids");
      print txt > (dir "/" part ".en"); print txt > (dir "/" part ".es");
    } }'
}
gen train 3000 1; gen valid 64 2; gen test 96 3
# text for the language model: counting sentences (each word the one after the previous,
# from a random first word), so that all but the first word can be predicted
for part in train:2000:4 valid:64:5 test:96:6; do
  IFS=: read -r p n s <<< "$part"
  awk -v n="$n" -v s="$s" 'BEGIN { for (i = 0; i < n; i++) {
      s = (s * 1103515245 + 12345) % 2147483648; len = 2 + int(s / 65536) % 10;
      s = (s * 1103515245 + 12345) % 2147483648; t = int(s / 65536) % 16; ids = "";
      for (j = 0; j < len; j++) ids = ids (j ? " " : "") (4 + (t + j) % 16);
      print ids } }' > "$d/$p.lm.ids"
done
small=(--set data.path="$d" --set blocks.embed.params.vocab=20 --set layers.4.out_features=20
       --set blocks.embed.params.d=32 --set blocks.embed.params.max_len=16 --set blocks.embed.params.p=0
       --set blocks.enc.params.d=32 --set blocks.enc.params.heads=2 --set blocks.enc.params.ff=64
       --set blocks.enc.params.p=0 --set blocks.dec.params.d=32 --set blocks.dec.params.heads=2
       --set blocks.dec.params.ff=64 --set blocks.dec.params.p=0
       --set layers.1.repeat=1 --set layers.3.repeat=1 --set loss.label_smoothing=0
       --set train.optimizer.lr=3e-3 --set train.schedule.warmup_steps=30 --set data.bleu_samples=16)
for i in src src_seg src_pos tgt_in tgt_seg tgt_pos label; do small+=(--set inputs.$i.shape.0=16); done
"$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --steps 300 --batch-size 16 \
  --set train.eval_every=150 --stages 2 --micro-batches 2 --threads 2 \
  --translations "$tmp/hyp.txt" --log "$tmp/log.jsonl" --save "$tmp/copy.safetensors" \
  > "$tmp/out" 2> "$tmp/err" ||
  { cat "$tmp/err"; fail "training the copy model"; }
cat "$tmp/out"
grep -q "packed rows of 16/16 tokens" "$tmp/err" || { cat "$tmp/err"; fail "no packed-rows line"; }
bleu=$(sed -n 's/.*BLEU \([0-9.]*\) (96 sentences).*/\1/p' "$tmp/out")
[ -n "$bleu" ] || fail "no test BLEU over the 96 sentences in: $(cat "$tmp/out")"
awk -v b="$bleu" 'BEGIN { exit !(b > 60) }' || fail "copy-task test BLEU $bleu <= 60"
[ "$(wc -l < "$tmp/hyp.txt")" = 96 ] || fail "--translations: $(wc -l < "$tmp/hyp.txt") lines, want 96"
grep -q '"split": "valid".*"bleu"' "$tmp/log.jsonl" || fail "no valid BLEU in the log"
# the same model text through sacreBLEU's tokenizer agrees with the printed score
ok=$(python3 -c 'import sacrebleu' 2>/dev/null && echo 1)
if [ -n "$ok" ]; then
  ref=$(python3 -c "import sacrebleu,sys;print('%.2f'%sacrebleu.corpus_bleu(open('$tmp/hyp.txt').read().splitlines(),[open('$d/test.es').read().splitlines()]).score)")
  [ "$ref" = "$bleu" ] || fail "BLEU $bleu, sacreBLEU on --translations gives $ref"
fi

# --eval-only of the saved weights, on one stage: the same test numbers and translations
"$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --batch-size 16 --threads 2 \
  --eval-only --load "$tmp/copy.safetensors" --translations "$tmp/hyp1.txt" > "$tmp/out1" \
  2> "$tmp/err" || { cat "$tmp/err"; fail "--eval-only of the copy model"; }
strip() { sed -n 's/^final: .*  \(test loss .*\)  ([0-9.]* s)$/\1/p' "$1"; }
[ -n "$(strip "$tmp/out")" ] && [ "$(strip "$tmp/out1")" = "$(strip "$tmp/out")" ] ||
  fail "--eval-only: $(cat "$tmp/out1"), the training run: $(cat "$tmp/out")"
cmp -s "$tmp/hyp.txt" "$tmp/hyp1.txt" || fail "--eval-only's translations differ from the run's"

# the same across 2 processes (a stage each, the predictions gathered from the last one for
# decoding): the same test numbers and translations (skipped without mpirun or MPI)
if command -v mpirun >/dev/null; then
  (. "$srcdir/tests/mpi/sanitize.sh"
   exec timeout 300 mpirun --oversubscribe -np 2 --mca btl tcp,self "$train" \
    "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --batch-size 16 --threads 1 --stages 2 \
    --eval-only --load "$tmp/copy.safetensors" --translations "$tmp/hyp2.txt") > "$tmp/out2" \
    2> "$tmp/err2"
  rc=$?
  if ! grep -q "built without MPI" "$tmp/err2"; then
    [ "$rc" = 0 ] || { cat "$tmp/err2"; fail "--eval-only over 2 processes exited $rc"; }
    [ "$(strip "$tmp/out2")" = "$(strip "$tmp/out")" ] ||
      fail "--eval-only over 2 processes: $(cat "$tmp/out2"), the training run: $(cat "$tmp/out")"
    cmp -s "$tmp/hyp.txt" "$tmp/hyp2.txt" || fail "the translations of 2 processes differ"
  fi
fi

# the same with the embeddings and the output projection tied: the copies live on both
# stages (source embedding on the first, output projection on the last) and must stay equal
"$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --steps 300 --batch-size 16 \
  --set tied.embeddings.enabled=true --stages 2 --micro-batches 2 --threads 2 \
  --save "$tmp/tied.safetensors" > "$tmp/tied.out" 2> "$tmp/tied.err" ||
  { cat "$tmp/tied.err"; fail "training the tied copy model"; }
cat "$tmp/tied.out"
grep -q "pipeline: 2 stages" "$tmp/tied.err" || fail "the tied model did not run on 2 stages"
tbleu=$(sed -n 's/.*BLEU \([0-9.]*\) (96 sentences).*/\1/p' "$tmp/tied.out")
awk -v b="$tbleu" 'BEGIN { exit !(b > 60) }' || fail "tied copy-task test BLEU '$tbleu' <= 60"
python3 - "$tmp/tied.safetensors" <<'PY' || fail "the tied copies differ in the saved weights"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
get = lambda k: d[h[k]["data_offsets"][0]:h[k]["data_offsets"][1]]
names = ["logits.weight", "src_embed.tok.weight", "tgt_embed.tok.weight"]
assert all(get(k) == get(names[0]) for k in names), "copies differ"
PY

# <unk> in the translations is spm_decode's surface, U+2047 between spaces ("aa ⁇  bb", and
# " ⁇  bb" at the start), not a bare U+2047 glued to its neighbours ("aa⁇ bb"), which made
# other BLEU tokens: a copy model over a corpus where word 0 is unknown
u=$tmp/unk; mkdir -p "$u"; cp "$d/spm.vocab" "$u/"
(d=$u; gen train 3000 1 0; gen valid 64 2 0; gen test 96 3 0)
"$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --set data.path="$u" --steps 300 \
  --batch-size 16 --threads 2 --translations "$tmp/unk.txt" > "$tmp/unk.out" 2> "$tmp/unk.err" ||
  { cat "$tmp/unk.err"; fail "training the copy model with <unk>"; }
q=$'\xe2\x81\x87'
[ "$(grep -c "$q" "$tmp/unk.txt")" -gt 10 ] || fail "<unk> is not in the translations: $(head -3 "$tmp/unk.txt")"
bad=$(LC_ALL=C grep -E "(^|[^ ])$q|$q([^ ]|$)" "$tmp/unk.txt" | head -3)
[ -z "$bad" ] || fail "<unk> not decoded as spm_decode's ' $q ': $bad"

# a language model on the counting text: perplexity far below the 20-piece vocabulary's
# (the first word of a sentence is one of 16, the rest and EOS are all but certain)
lm=(--set data.dataset=text --set data.path="$d" --set data.target=lm --set layers.0.num_embeddings=20
    --set layers.0.dim=32 --set layers.1.max_len=16 --set layers.2.p=0 --set blocks.layer.params.d=32
    --set blocks.layer.params.heads=2 --set blocks.layer.params.ff=64 --set blocks.layer.params.p=0
    --set layers.3.repeat=1 --set layers.5.out_features=20 --set inputs.tokens.shape.0=16
    --set inputs.label.shape.0=16 --set inputs.seg.shape.0=16 --set inputs.pos.shape.0=16)
"$train" "$srcdir/models/transformer-lm.yaml" "${lm[@]}" --steps 300 --batch-size 16 --threads 2 \
  --set train.optimizer.lr=3e-3 --set train.schedule.warmup_steps=30 --stages 2 --micro-batches 4 \
  > "$tmp/lm.out" 2> "$tmp/lm.err" || { cat "$tmp/lm.err"; fail "training the language model"; }
cat "$tmp/lm.out"
ppl=$(sed -n 's/.*perplexity \([0-9.]*\).*/\1/p' "$tmp/lm.out")
awk -v p="$ppl" 'BEGIN { exit !(p > 1 && p < 3) }' || fail "LM test perplexity '$ppl' not in (1, 3)"

# rows of one token on synthetic data: each sentence is just EOS (a length bound of 0 made
# the synthetic corpus divide by zero, SIGFPE)
one=(); for i in tokens seg pos label; do one+=(--set inputs.$i.shape.0=1); done
"$train" "$srcdir/models/transformer-lm.yaml" "${lm[@]}" "${one[@]}" --set layers.1.max_len=1 \
  --data synthetic --steps 2 --batch-size 4 --quiet > "$tmp/one.out" 2> "$tmp/one.err" ||
  fail "LM with rows of 1 token on synthetic data: exit $?: $(cat "$tmp/one.err")"
src1=(); for i in src src_seg src_pos; do src1+=(--set inputs.$i.shape.0=1); done
"$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" "${src1[@]}" --data synthetic \
  --steps 2 --batch-size 4 --quiet > "$tmp/one.out" 2> "$tmp/one.err" ||
  fail "NMT with sources of 1 token on synthetic data: exit $?: $(cat "$tmp/one.err")"

# errors: one line, non-zero exit
expect() { # want-substring args...
  local want=$1; shift
  "$train" "$@" > "$tmp/e.out" 2> "$tmp/e.err" && fail "expected an error: $want"
  [ "$(wc -l < "$tmp/e.err")" = 1 ] || fail "more than one line for '$want': $(cat "$tmp/e.err")"
  grep -qF -- "$want" "$tmp/e.err" || fail "want '$want', got: $(cat "$tmp/e.err")"
}
expect "cannot open" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --set data.path="$tmp/none" --steps 1
expect "source: text data has only a target language" "$srcdir/models/transformer-lm.yaml" "${lm[@]}" \
  --set data.source=en --steps 1
expect "transformer-nmt.yaml:89:11: source: text data has only a target language" \
  "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --set data.dataset=text --steps 1
expect "translation data needs source: LANG" "$srcdir/models/transformer-lm.yaml" "${lm[@]}" \
  --set data.dataset=translation --steps 1
# --translations where nothing is translated: refused, no file (it was silently ignored)
expect "--translations: synthetic data has no text to translate" \
  "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --data synthetic --steps 1 \
  --translations "$tmp/syn.txt"
[ -e "$tmp/syn.txt" ] && fail "--translations with synthetic data wrote $tmp/syn.txt"
expect "--translations: $srcdir/models/transformer-lm.yaml is not a translation model" \
  "$srcdir/models/transformer-lm.yaml" "${lm[@]}" --steps 1 --translations "$tmp/lm.txt"
# --translations is checked before training (a bad folder was found after it, with no reason)
expect "--translations $tmp/no/hyp.txt: cannot write: No such file or directory" \
  "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --steps 1 --translations "$tmp/no/hyp.txt"
# and written through a temporary file: a write that fails (files limited to 0 bytes, as on a
# full disk) says why and leaves no file (it left a 0-byte one)
err=$( (trap '' XFSZ; ulimit -f 0
        exec "$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --steps 1 --quiet \
          --translations "$tmp/full.txt" 2>&1 >/dev/null) )
[ "$err" = "gpipe-train: --translations $tmp/full.txt: cannot write: File too large" ] ||
  fail "--translations on a full disk: $err"
[ -n "$(ls "$tmp" | grep '^full\.txt')" ] && fail "--translations on a full disk left $(ls "$tmp")"
cp "$d/test.es" "$tmp/short.es"; head -5 "$tmp/short.es" > "$d/test.es"
expect "test.es: 5 lines, but" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --steps 1
cp "$tmp/short.es" "$d/test.es"
# the vocabulary and reference files: a missing one says why, a folder or an empty vocabulary
# is named (they read as 0 lines: 'tokens: vocab 0 must be > 0', exit 2, no file named)
expect "nope.vocab: cannot open: No such file or directory" "$srcdir/models/transformer-nmt.yaml" \
  "${small[@]}" --set data.vocab_file=nope.vocab --steps 1
mv "$d/spm.vocab" "$tmp/spm.vocab"; : > "$d/spm.vocab"
expect "spm.vocab: holds no pieces" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --steps 1
"$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --steps 1 >/dev/null 2>&1
[ $? = 1 ] || fail "an empty vocabulary is a data error (exit 1)"
mv "$tmp/spm.vocab" "$d/spm.vocab"
# special ids that are not the vocabulary's control pieces (SentencePiece's defaults, bos 1 and
# eos 2, read with this corpus's): refused (a word was appended as EOS, silently)
expect "spm.vocab:3: the piece <s> is id 2, but data.bos_id is 3 (set data.bos_id: 2)" \
  "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --set data.bos_id=3 --set data.eos_id=2 --steps 1
expect "spm.vocab:4: the piece </s> is id 3, but data.eos_id is 5 (set data.eos_id: 3)" \
  "$srcdir/models/transformer-lm.yaml" "${lm[@]}" --set data.eos_id=5 --steps 1
# a decoding limit below one piece still decodes one (the documented floor): one word a line
"$train" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --steps 1 --batch-size 16 --quiet \
  --set data.decode_len_a=0 --set data.decode_len_b=0 --translations "$tmp/one.txt" \
  >/dev/null 2>"$tmp/one.err" || fail "decode_len 0: $(cat "$tmp/one.err")"
[ "$(wc -l < "$tmp/one.txt")" = 96 ] && awk 'NF > 1 { exit 1 }' "$tmp/one.txt" ||
  fail "decode_len 0: $(head -3 "$tmp/one.txt")"
# a special id past a vocabulary that lacks its piece names the file (it was 'tokens: bos_id 20
# must be in [0, vocab 20)')
v=$tmp/nos; mkdir -p "$v"; cp "$d"/*.ids "$d"/*.es "$d"/*.en "$v/"
sed 's/^<s>\t/<x>\t/' "$d/spm.vocab" > "$v/spm.vocab"
expect "nos/spm.vocab: holds 20 pieces (ids 0 to 19), but data.bos_id is 20" \
  "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --set data.path="$v" --set data.bos_id=20 --steps 1
mv "$d/valid.es" "$tmp/valid.es"; mkdir "$d/valid.es"
expect "valid.es: not a regular file" "$srcdir/models/transformer-nmt.yaml" "${small[@]}" --steps 1
rmdir "$d/valid.es"; mv "$tmp/valid.es" "$d/valid.es"
echo "7 99 4" >> "$d/valid.en.ids"
expect "valid.en.ids:65:3: id 99 is >= the vocabulary size 20" "$srcdir/models/transformer-nmt.yaml" \
  "${small[@]}" --steps 1
echo "translation ok: copy BLEU $bleu, LM perplexity $ppl"
