#!/usr/bin/env python3
"""Non-repeating natural text for the tokenizer's cold/warm benchmark (bench/tokenizer/cold-warm.sh).

    make_natural_corpus.py --out DIR [--mb-per-kind 4] [--root /]

Writes, for each of four kinds of text, two halves made of *different files* of that kind:
DIR/{man,code,prose,cjk}.{warm,timed}.txt, and DIR/manifest.json (per file: the sources it was
cut from, bytes, SHA-256; the machine's files decide the bytes, so the manifest is what identifies
a corpus). The benchmark times the `timed` half; the `warm` half is the "first pass over different
text of the same kind" after which warm speed is measured. Nothing is repeated on purpose: no
source file contributes twice (files with equal bytes are taken once), and every file goes to one
half only (alternating in path order, so both halves have the same mix).

  man    English manual pages, groff source as installed (/usr/share/man/man[1-8]/*.gz; `.so`
         redirections skipped)
  code   C and C++ headers (/usr/include) alternating with this Python's standard library
         sources (.py, tests excluded)
  prose  English documentation: Vim's manual (/usr/share/vim/vim*/doc/*.txt) alternating with
         Node.js' API reference (/usr/share/doc/nodejs/api/*.md), then other package docs
  cjk    Chinese (simplified, traditional), Japanese and Korean: the translated messages of the
         installed programs (msgstr of /usr/share/locale/{zh_CN,zh_TW,ja,ko}/LC_MESSAGES/*.mo;
         each distinct message once), then the manual pages and Vim tutors in those languages

These are the files of a Debian 12 development image (the GPU machine's minimal image lacks
them, so the corpus is built where quill is built and carried there). Each half is cut at a file
boundary once it reaches --mb-per-kind MB (10^6 bytes).
"""

import argparse
import glob
import gzip
import hashlib
import json
import os
import struct
import sys
import sysconfig


def read_man(path):
    try:
        data = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    except (OSError, EOFError):
        return None
    if data.startswith(b".so ") or len(data) < 512:
        return None  # a redirection to another page, or a stub
    return data


def read_plain(path):
    try:
        data = open(path, "rb").read()
    except OSError:
        return None
    if b"\0" in data[:4096]:
        return None
    return data


def mo_messages(path):
    """The translations (msgstr, plural forms apart) of a GNU .mo file, as UTF-8 byte strings."""
    try:
        data = open(path, "rb").read()
    except OSError:
        return []
    if len(data) < 28:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if order is None:
        return []
    _, n, _, trans_off = struct.unpack(order + "4I", data[4:20])
    out = []
    for k in range(n):
        length, off = struct.unpack(order + "2I", data[trans_off + 8 * k:trans_off + 8 * k + 8])
        s = data[off:off + length]
        if k == 0 and b"Content-Type" in s:  # the header entry: not text; say whether it is UTF-8
            if b"charset=UTF-8" not in s and b"charset=utf-8" not in s:
                return []
            continue
        out.extend(part for part in s.split(b"\0") if part)
    return out


def valid_utf8(data):
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def alternate(*lists):
    """The lists' items interleaved: a0, b0, a1, b1, ..., then the longer lists' rest."""
    out = []
    for k in range(max((len(x) for x in lists), default=0)):
        out.extend(x[k] for x in lists if k < len(x))
    return out


class Kind:
    """Fills the two halves of one kind from (source, bytes) items, each item to one half."""

    def __init__(self, name, limit):
        self.name, self.limit = name, limit
        self.halves = {"warm": [bytearray(), []], "timed": [bytearray(), []]}
        self.seen = set()
        self.turn = 0

    def full(self):
        return all(len(h[0]) >= self.limit for h in self.halves.values())

    def add(self, source, data):
        if data is None or not valid_utf8(data):
            return
        digest = hashlib.sha256(data).digest()
        if digest in self.seen:
            return
        self.seen.add(digest)
        order = ["timed", "warm"] if self.turn % 2 == 0 else ["warm", "timed"]
        self.turn += 1
        for half in order:
            buf, sources = self.halves[half]
            if len(buf) < self.limit:
                buf += data
                if not data.endswith(b"\n"):
                    buf += b"\n"
                sources.append(source)
                return


def build(root, limit):
    def under(pattern):
        return sorted(glob.glob(os.path.join(root, pattern.lstrip("/")), recursive=True))

    kinds = []

    man = Kind("man", limit)
    for path in under("/usr/share/man/man[1-8]/*"):
        if man.full():
            break
        man.add(os.path.relpath(path, root), read_man(path))
    kinds.append(man)

    code = Kind("code", limit)
    stdlib = sysconfig.get_paths()["stdlib"]
    py = [p for p in sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True))
          if os.sep + "test" not in p[len(stdlib):] and "site-packages" not in p]
    for path in alternate(under("/usr/include/**/*.h"), py):
        if code.full():
            break
        code.add(path if path.startswith(stdlib) else os.path.relpath(path, root), read_plain(path))
    kinds.append(code)

    prose = Kind("prose", limit)
    docs = alternate(under("/usr/share/vim/vim*/doc/*.txt"), under("/usr/share/doc/nodejs/api/*.md"))
    docs += under("/usr/share/doc/*/README*") + under("/usr/share/doc/*/*.md")
    for path in docs:
        if prose.full():
            break
        prose.add(os.path.relpath(path, root), read_man(path) if path.endswith(".gz") else read_plain(path))
    kinds.append(prose)

    cjk = Kind("cjk", limit)
    langs = ["zh_CN", "ja", "ko", "zh_TW"]
    seen_messages = set()
    for lang_files in alternate(*[under(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo") for lang in langs]):
        if cjk.full():
            break
        messages = [m for m in mo_messages(lang_files) if m not in seen_messages]
        seen_messages.update(messages)
        if messages:
            cjk.add(os.path.relpath(lang_files, root), b"\n".join(messages) + b"\n")
    pages = alternate(*[under(f"/usr/share/man/{lang}/man*/*") for lang in langs])
    pages += under("/usr/share/vim/vim*/tutor/tutor.ja.utf-8") + under("/usr/share/vim/vim*/tutor/tutor.ko.utf-8")
    pages += under("/usr/share/vim/vim*/tutor/tutor.zh*.utf-8")
    for path in pages:
        if cjk.full():
            break
        cjk.add(os.path.relpath(path, root), read_man(path))
    kinds.append(cjk)
    return kinds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for the corpus files and manifest.json")
    ap.add_argument("--mb-per-kind", type=float, default=4, help="MB (10^6 bytes) of each half of each kind")
    ap.add_argument("--root", default="/", help="where the source files are looked for (tests)")
    args = ap.parse_args()
    limit = int(args.mb_per_kind * 1e6)
    kinds = build(args.root, limit)
    os.makedirs(args.out, exist_ok=True)
    manifest = {"mb_per_kind": args.mb_per_kind, "kinds": {}}
    short = []
    for kind in kinds:
        entry = {}
        for half, (buf, sources) in kind.halves.items():
            path = os.path.join(args.out, f"{kind.name}.{half}.txt")
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(buf)
            os.replace(tmp, path)
            entry[half] = {"file": os.path.basename(path), "bytes": len(buf), "files": len(sources),
                           "sha256": hashlib.sha256(buf).hexdigest(), "sources": sources}
            if len(buf) < limit:
                short.append(f"{kind.name}.{half}: {len(buf)} of {limit} bytes")
        manifest["kinds"][kind.name] = entry
    manifest["short"] = short
    tmp = os.path.join(args.out, "manifest.json.tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, os.path.join(args.out, "manifest.json"))
    for kind, entry in manifest["kinds"].items():
        print(f"{kind:6} " + "  ".join(f"{h} {e['bytes'] / 1e6:.2f} MB from {e['files']} files"
                                       for h, e in entry.items()))
    for s in short:
        print(f"make_natural_corpus.py: short of text: {s}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
