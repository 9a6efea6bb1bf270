"""tests/eval/wer_reference.py — an independent reference for bora's word error rate.

Normalisation as core/eval/wer.h states it, written with Python's unicodedata: NFKD, every mark
(category M*) dropped, str.casefold(), NFKC; the apostrophes ' ‘ ’ ʼ dropped; every other code
point that is not a letter (L*) or number (N*) a word separator. The distance is the textbook
Levenshtein recurrence over words with a full (n+1)×(m+1) table. Random sentence pairs (seeded)
mix case, punctuation, accents, ligatures, full-width letters, curly quotes and non-Latin words,
with hypotheses made by random substitutions, deletions and insertions, and unrelated pairs of
very different lengths; every normalised text, distance and the corpus totals must match exactly.

usage: wer_reference.py TEST_WER WORKDIR
"""
import os
import random
import subprocess
import sys
import unicodedata

APOSTROPHES = {"'", "\u2018", "\u2019", "\u02bc"}


def normalize(text):
    s = unicodedata.normalize("NFKD", text)
    s = "".join(c for c in s if not unicodedata.category(c).startswith("M"))
    s = unicodedata.normalize("NFKC", s.casefold())
    out = []
    for c in s:
        if c in APOSTROPHES:
            continue
        out.append(c if unicodedata.category(c)[0] in "LN" else " ")
    return " ".join("".join(out).split())


def levenshtein(a, b):
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(a)][len(b)]


WORDS = ("the a of and to in is was he for it with as his on be at by had not are but from or "
         "have an they which one you were her all she there would their we him been has when who "
         "will more no if out so said what up its about into than them can only other new some "
         "could time these two may then do first any my now such like our over man me even most "
         "Fulton County Grand Jury Friday Atlanta's don't it's o'clock well-known U.S. Mr. 1961 "
         "3.5 $100 50% café naïve Ångström Straße ﬁne ＡＢＣ Ωmega Привет мир naïveté résumé "
         "coöperate jalapeño Zoë 東京 ½ x² ").split()
PUNCT = [",", ".", ";", ":", "!", "?", "``", "''", "--", "\u2014", "\u2026", "(", ")", "\"",
         "\u2018", "\u2019", "-", "/", "&"]
SPACES = [" ", "  ", "\x0b", " \u00a0", "\u2003", "\u3000"]  # no tab: it separates the pair


def sentence(rng, n):
    parts = []
    for _ in range(n):
        w = rng.choice(WORDS)
        r = rng.random()
        if r < 0.2:
            w = w.upper()
        elif r < 0.35:
            w = w.capitalize()
        if rng.random() < 0.2:
            w = w + rng.choice(PUNCT)
        if rng.random() < 0.05:
            w = rng.choice(PUNCT) + w
        parts.append(w)
    out = ""
    for i, p in enumerate(parts):
        out += (rng.choice(SPACES) if i else "") + p
    return out


def corrupt(rng, words):
    out = list(words)
    for _ in range(rng.randint(0, 4)):
        op = rng.random()
        if op < 0.33 and out:
            out[rng.randrange(len(out))] = rng.choice(WORDS)
        elif op < 0.66 and out:
            del out[rng.randrange(len(out))]
        else:
            out.insert(rng.randint(0, len(out)), rng.choice(WORDS))
    return out


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = random.Random(20261127)
    pairs = []
    for i in range(1500):
        ref = sentence(rng, rng.randint(0, 25))
        if i % 10 == 9:  # unrelated, of very different lengths (either the longer)
            hyp = sentence(rng, rng.randint(0, 60))
        else:
            hyp = " ".join(corrupt(rng, ref.split()))
            if rng.random() < 0.5:
                hyp = hyp.lower()
        pairs.append((ref, hyp))
    path = os.path.join(work, "pairs.tsv")
    with open(path, "w", encoding="utf-8") as f:
        for ref, hyp in pairs:
            f.write(ref + "\t" + hyp + "\n")
    got = subprocess.run([exe, "--pairs", path], check=True, capture_output=True)
    lines = got.stdout.decode("utf-8").split("\n")
    bad = 0
    total_edits = total_words = 0
    for k, (ref, hyp) in enumerate(pairs):
        nr, nh = normalize(ref), normalize(hyp)
        e = levenshtein(nr.split(), nh.split())
        w = len(nr.split())
        total_edits += e
        total_words += w
        want = f"{nr}\t{nh}\t{e}\t{w}"
        if lines[k] != want:
            bad += 1
            if bad <= 5:
                print(f"pair {k}: {ref!r} / {hyp!r}\n  bora: {lines[k]!r}\n  want: {want!r}")
    want = f"corpus\t{total_edits}\t{total_words}"
    if lines[len(pairs)] != want:
        bad += 1
        print(f"corpus: bora {lines[len(pairs)]!r}, want {want!r}")
    print(f"{len(pairs)} pairs, {total_words} reference words, corpus WER "
          f"{total_edits / total_words:.4f}: {bad} mismatches")
    sys.exit(1 if bad else 0)


main()
