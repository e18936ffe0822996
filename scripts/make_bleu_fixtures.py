#!/usr/bin/env python3
"""Writes tests/fixtures/bleu/: hypothesis/reference sets scored by sacreBLEU's default corpus
BLEU (13a, smooth exp, mixed case), sacreBLEU's 13a tokenizer output for every line and for
adversarial strings, and SentencePiece piece lines decoded by spm_decode, for
tests/eval/test_bleu.c and tests/eval/test_spm.c.

Needs `pip install sacrebleu` (2.x) and, for spm_decode.json, spm_train/spm_encode/spm_decode
on PATH (that file is left as it is when they are absent). CI uses the committed files.
Deterministic: the hypotheses are perturbed references from a seeded random.Random."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import sacrebleu
from sacrebleu.metrics import BLEU
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "bleu")

EN = [
    "In the beginning God created the heaven and the earth.",
    "The U.S. economy grew 2.3% in 2019, according to the Commerce Department.",
    "Shares fell 1,234.56 points -- the biggest drop since Oct. 19, 1987.",
    'He said: "I don\'t know what you\'re talking about."',
    "The well-known author (born 1947) wrote 3-4 novels a year.",
    "Prices rose from $4.50 to $5.25, i.e. by 16.7 percent.",
    "Call 555-0123 or e-mail info@example.com for details!",
    "Is it true? Yes, it is; no doubt about it.",
    "The &quot;new&quot; policy takes effect on 1.1.2020 &amp; lasts until 31.12.2021.",
    "She bought apples, pears, and 12,000 grapes.",
    "Temperatures ranged from -5 to 10 degrees, with gusts of 60-80 km/h.",
    "The score was 3-2 after extra time.",
    "Visit https://www.example.org/path?q=1&r=2 now.",
    "It's a 5-star hotel... or so they say.",
    "The ratio is 1:3, not 3:1.",
    "Version 2.0.1 fixed bugs #123 and #456.",
    "They met at 10:30 a.m. on Monday.",
    "The company's revenue was EUR 3.5 billion ($3.9 billion).",
    "\"Stop!\" she shouted, \"don't move.\"",
    "Mr. and Mrs. Smith arrived at 8 p.m.",
    "The 1990s were a decade of change; the 2000s even more so.",
    "A total of 1.5 million people (roughly 10%) voted.",
    "Use the <b>bold</b> tag & the [brackets] {braces} carefully.",
    "What a day!!! Really?!",
    "He was born on 4/5/1960 in St. Louis, Mo.",
    "The team -- tired but happy -- went home.",
    "Follow @user and #hashtag on social media.",
    "Profits: up 20%; costs: down 5%.",
    "The ~tilde~ and ^caret^ and _underscore_ and `backtick` are rare.",
    "Ask yourself: why?",
    "And God said, Let there be light: and there was light.",
    "For God so loved the world, that he gave his only begotten Son.",
    "The quick brown fox jumps over the lazy dog.",
    "Numbers like 3.14159 and 2,718 should stay together.",
    "The end.",
    "OK.",
    "Yes",
    "He paid 5.- francs.",
    "Self-driving cars are coming -- eventually.",
    "They won 7-0, 6-1 and 2-2.",
    "x.5 and 5.x and .5 and 5. and ,5 and 5,",
    "Don't stop believing; hold on to that feeling.",
    "The report (pp. 12-15) cites 'several' sources.",
    "Tom & Jerry vs. the world: round 2.",
    "Email me at a.b@c.de, please.",
]

ES = [
    "En el principio creó Dios los cielos y la tierra.",
    "¿Dónde está la biblioteca? ¡No lo sé!",
    "El niño comió 2,5 kilos de fruta en un día.",
    "La economía creció un 3,4 % en 2019, según el INE.",
    "«Hola», dijo él, «¿cómo estás?»",
    "Mañana iré a la montaña con mi pingüino.",
    "El precio subió de 1.000,50 € a 1.250,75 €.",
    "¡Qué día tan bonito! ¿Verdad?",
    "Él está aquí; ella, allí.",
    "Los años 90 fueron difíciles para la compañía.",
    "Según el artículo 3-B, la ley entra en vigor el 1 de enero.",
    "El señor Núñez llegó a las 10:30 h.",
    "Me gustan el café, el té y el agua.",
    "¿Por qué? Porque sí.",
    "La canción «Cielito lindo» es muy conocida.",
    "Y dijo Dios: Sea la luz; y fue la luz.",
    "Porque de tal manera amó Dios al mundo, que ha dado a su Hijo unigénito.",
    "El pájaro voló sobre el árbol más alto.",
    "Había una vez un niño llamado Íñigo.",
    "¡Atención! El tren sale a las 8.15.",
    "Compré 3 camisas – azul, roja y verde – por 45 euros.",
    "La reunión es el lunes… o el martes.",
    "El 50 % de los encuestados respondió «no sé».",
    "Ésta es la última oportunidad.",
    "Fin.",
    "Sí",
    "¿Qué?",
    "Él dijo: \"Ven aquí\".",
    "La ONU publicó el informe A/RES/70/1.",
    "Cuesta 3,99 $ o 4 €.",
]

FILLER = ["the", "a", "of", "and", "to", "in", "is", "was", "he", "it", "that", "el", "la",
          "de", "y", "que", "en", "un", "said", "very", "also", "not", "new", "one", "1", "2"]


def perturb(rng, line, strength):
    """A deterministic 'translation' of line: word drops, swaps, substitutions, punctuation
    and case changes, in proportion to strength (0..1)."""
    w = line.split(" ")
    out = []
    for tok in w:
        r = rng.random()
        if r < 0.12 * strength:
            continue  # drop
        if r < 0.22 * strength:
            out.append(rng.choice(FILLER))  # substitute
            continue
        if r < 0.28 * strength:
            out.extend([tok, rng.choice(FILLER)])  # insert
            continue
        if r < 0.32 * strength and tok[:1].isalpha():
            tok = tok.lower() if tok[0].isupper() else tok.capitalize()
        if r < 0.36 * strength and tok[-1:] in ".,;:!?":
            tok = tok[:-1]
        out.append(tok)
    for _ in range(int(2 * strength)):
        if len(out) > 2 and rng.random() < 0.5:
            i = rng.randrange(len(out) - 1)
            out[i], out[i + 1] = out[i + 1], out[i]
    return " ".join(out)


# Fragments that exercise each 13a rule and their interactions when glued together.
FRAGS = ["a.b", "1.5", "1,000", "x,", ".5", "5.", "5-", "-5", "5-6", "--", "...", ",,", ".,",
         "&quot;", "&amp;", "&lt;tag&gt;", "&amp;quot;", "&apos;", "<skipped>", "e.g.", "U.S.",
         "$5.00", "(", ")", "[x]", "{y}", "~", "^", "_", "`", "|", "\\", "'", '"', "¿", "¡",
         "«", "»", "—", "–", "…", "€3,50", "٣.٤", "１,２", "ñ.", "é,5", "e\u0301.", "😀.",
         "word", "Word", "WORD", "don't", "o'clock", "3:30", "a/b", "100%", "#1", "@me",
         "x=y+z", "a*b", "!?", "?!", "—5", "5—", "-", ".", ",", "9,", ",9", "9.", ".9", "a-", "-a",
         "7-", "7--8", "Ф.", "中文。", "東京,", "x\u00a0y", "\u3000", "tab\there"]


def synth_line(rng):
    n = rng.randint(1, 14)
    parts = []
    for _ in range(n):
        parts.append(rng.choice(FRAGS))
        parts.append(rng.choice([" ", " ", " ", "", "  "]))
    return "".join(parts).strip(" ")


def bleu_set(name, hyps, refs_streams, note):
    bleu = BLEU()
    s = bleu.corpus_score(hyps, refs_streams)
    sig = str(bleu.get_signature())
    return {
        "name": name,
        "note": note,
        "hyps": hyps,
        "refs": refs_streams,
        "signature": sig,
        "score": s.score,
        "counts": list(s.counts),
        "totals": list(s.totals),
        "precisions": list(s.precisions),
        "bp": s.bp,
        "sys_len": s.sys_len,
        "ref_len": s.ref_len,
        "format": str(s),
    }


def main():
    rng = random.Random(20240508)
    os.makedirs(OUT, exist_ok=True)
    sets = []

    refs = [EN[i % len(EN)] for i in range(3 * len(EN))]
    hyps = [perturb(rng, r, 0.3 + 0.7 * (i // len(EN)) / 2) for i, r in enumerate(refs)]
    sets.append(bleu_set("en", hyps, [refs], "English, punctuation, numbers, quotes, hyphens"))

    refs = [ES[i % len(ES)] for i in range(3 * len(ES))]
    hyps = [perturb(rng, r, 0.3 + 0.7 * (i // len(ES)) / 2) for i, r in enumerate(refs)]
    sets.append(bleu_set("es", hyps, [refs], "Spanish: accents, ¿¡, «», decimal commas"))

    refs = [synth_line(rng) for _ in range(160)]
    hyps = [perturb(rng, r, 0.5) if i % 5 else synth_line(rng) for i, r in enumerate(refs)]
    sets.append(bleu_set("synthetic", hyps, [refs], "glued fragments for every 13a rule"))

    short_refs = ["Yes.", "No way!", "OK", "Thank you.", "Go home now.", "¿Qué?", "Fin.", "a b",
                  "Hello world", "It is 5.5 km."]
    short_hyps = ["Yes.", "No", "", "Thanks you.", "Go now home.", "¿Qué", "", "b a", "world",
                  "It is 5,5 km ."]
    sets.append(bleu_set("short", short_hyps, [short_refs],
                         "very short lines and empty hypotheses: exp smoothing"))
    sets.append(bleu_set("tiny", ["a b", "c", "b a d"], [["a b c", "c d", "b a d e"]],
                         "no hypothesis has 4 tokens: total[3] = 0"))
    sets.append(bleu_set("unigrams", ["the cat", "dog the"], [["the dog", "cat the"]],
                         "only unigram and one bigram match"))
    sets.append(bleu_set("smooth", ["the cat the dog", "a b c d e", "one two three four"],
                         [["the dog the cat", "e d c b a", "four three two one"]],
                         "no 3-gram or 4-gram match: the exp smoothing decides the score"))
    sets.append(bleu_set("perfect", EN[:20], [EN[:20]], "hypotheses equal the references"))
    sets.append(bleu_set("disjoint", ["alpha beta gamma delta", "one two three"],
                         [["uno dos tres cuatro", "eins zwei drei vier"]], "no overlap at all"))
    sets.append(bleu_set("empty_hyps", ["", "", ""], [["a b c", "d e", "f"]],
                         "every hypothesis empty: sys_len 0, BP 0"))
    sets.append(bleu_set("empty_refs", ["a b c", "d"], [["", ""]], "empty references"))
    long_h = [r + " " + r for r in EN[:15]]
    sets.append(bleu_set("long_hyps", long_h, [EN[:15]], "hypotheses longer than references"))

    refs1 = [EN[i] for i in range(25)]
    refs2 = [perturb(rng, r, 0.4) for r in refs1]
    refs3 = [perturb(rng, r, 0.8) if i % 3 else None for i, r in enumerate(refs1)]
    hyps = [perturb(rng, r, 0.6) for r in refs1]
    sets.append(bleu_set("multi_ref", hyps, [refs1, refs2],
                         "two references per sentence"))
    sets.append(bleu_set("ref_len_tie", ["a b c d", "x y", "p q r s t u"],
                         [["a b c", "x", "p q r s t u v"], ["a b c d e", "x y z", "p q r s t"]],
                         "two references equally close: the shorter length counts"))
    sets.append(bleu_set("multi_ref_var", hyps, [refs1, refs2, refs3],
                         "two or three references (null = missing)"))

    odd = ["a\u00a0b c", "x\ty  z", "Ende-\nlich da", "line\nbreak", "&amp;lt;b&amp;gt;",
           "<skipped> text <skipped>", "trailing -\n", "dash-\n\n", "tab\t.\t,", "\u3000全角\u3000",
           "x\u2028y", "p\u0085q", "emoji 😀😀 .", "1\u00a0000,5", "a -\nb", "sp  ace",
           "A\u00a0long\u2003line,\twith\u3000every\u202fkind of  space, &quot;quoted&quot;."]
    oddh = ["a b c", "x y z", "Endlich da", "line break", "<b>", "text", "trailing -",
            "dash", "tab . ,", "全角", "x y", "p q", "emoji 😀😀.", "1 000,5", "a b", "sp ace",
            "A long line, with every kind of space, \"quoted\"."]
    sets.append(bleu_set("whitespace_markup", oddh, [odd],
                         "Unicode whitespace, newlines, -\\n joins, <skipped>, entities"))

    total_lines = sum(len(s["hyps"]) for s in sets)
    assert total_lines >= 200, total_lines
    for s in sets:
        with open(os.path.join(OUT, s["name"] + ".json"), "w", encoding="utf-8") as f:
            json.dump(s, f, ensure_ascii=False, indent=0)
            f.write("\n")

    # the tokenizer, line by line (raw Tokenizer13a, without BLEU's rstrip)
    tok = Tokenizer13a()
    lines = []
    for s in sets:
        lines += s["hyps"]
        for st in s["refs"]:
            lines += [x for x in st if x is not None]
    adversarial = ["", " ", "\n", "-\n", "a-\nb", "<skip<skipped>ped>", "&quot;&amp;&lt;&gt;",
                   "&amp;quot;", "&&quot;", "&quot", "a.b.c", "a..b", "1..2", "1.,2", ",.,.",
                   "a,,5", "x.,5", "5.,x", "-5-", "5--5", "a-5", "5-a", "ß.", "\u00e9.5", "\u0660.5",
                   "a\u2009b", "a\u200bb", "\x1c\x1d\x1e\x1f", "\x0b\x0c\r", "a\rb", "\u2029",
                   "\u1680x\u205f", "\u202f", "\u00ad.", "\ufeff.", "9\u00a0,9", "((x))", "<<>>",
                   "\"'`", "+,-", "a+b-c", "@@", "1-2-3", "1.2.3", "1,2,3", "$1,000,000.00",
                   "3.", ".3", "3,", ",3", "x ." * 40, "long " * 200]
    lines += adversarial
    seen, toks = set(), []
    for line in lines:
        if line in seen:
            continue
        seen.add(line)
        toks.append([line, tok(line)])
    with open(os.path.join(OUT, "tok13a.json"), "w", encoding="utf-8") as f:
        json.dump({"sacrebleu": sacrebleu.__version__, "pairs": toks}, f, ensure_ascii=False,
                  indent=0)
        f.write("\n")
    print(f"{len(sets)} sets, {total_lines} hypotheses, {len(toks)} tokenizer lines")
    for s in sets:
        print(f"  {s['name']:18s} {s['format']}")

    spm_fixture()


def spm_fixture():
    """spm_decode's output for piece lines spm_encode wrote with a small model trained here."""
    tools = [shutil.which(t) for t in ("spm_train", "spm_encode", "spm_decode")]
    if not all(tools):
        print("spm_* not found: spm_decode.json left as it is", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as d:
        train = os.path.join(d, "train.txt")
        with open(train, "w", encoding="utf-8") as f:
            f.write("\n".join(EN + ES) + "\n")
        subprocess.run([tools[0], f"--input={train}", f"--model_prefix={d}/m", "--vocab_size=400",
                        "--hard_vocab_limit=false", "--character_coverage=1.0"],
                       check=True, capture_output=True)
        text = EN + ES + ["Unseen 中文 characters ☃ here", "  leading and   extra spaces  ",
                          "", "x"]
        enc = subprocess.run([tools[1], f"--model={d}/m.model", "--output_format=piece"],
                             input="\n".join(text) + "\n", check=True, capture_output=True,
                             text=True).stdout.split("\n")[:-1]
        # hand-made piece lines: repeated leading pieces, double spaces, a lone ▁. Only
        # pieces of the vocabulary: spm_decode passes an unknown piece through untouched
        # (▁ included), which a decoder without the vocabulary cannot know.
        with open(f"{d}/m.vocab", encoding="utf-8") as f:
            vocab = {ln.split("\t")[0] for ln in f}
        made = ["▁ ▁ in", "▁ ▁ ▁the", "▁", "▁ ▁", "in ▁the", "▁in  ▁the ▁", "▁the  ▁ ▁a",
                "▁▁in ▁the", "▁in ▁the ▁end"]
        made = [m for m in made if all(p in vocab for p in m.split())]
        assert len(made) >= 6, made
        enc += made
        dec = subprocess.run([tools[2], f"--model={d}/m.model", "--input_format=piece"],
                             input="\n".join(enc) + "\n", check=True, capture_output=True,
                             text=True).stdout.split("\n")[:-1]
        assert len(dec) == len(enc)
    ver = subprocess.run([tools[0], "--version"], capture_output=True, text=True).stdout.strip()
    with open(os.path.join(OUT, "spm_decode.json"), "w", encoding="utf-8") as f:
        json.dump({"spm": ver, "pairs": [[p, t] for p, t in zip(enc, dec)]}, f,
                  ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(enc)} spm piece lines ({ver})")


if __name__ == "__main__":
    main()
