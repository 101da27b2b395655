#!/usr/bin/env python3
"""Deterministic mixed-text corpus for the tokenizer tests and benchmarks.

    make_corpus.py --out FILE [--bytes N] [--seed S]           text (UTF-8), at least N bytes
    make_corpus.py --out FILE --invalid [--bytes N] [--seed S] text with ill-formed UTF-8 mixed in
    make_corpus.py --out FILE --jsonl --from CORPUS [--seed S]  conversations (one JSON per line)
                                                                cut from a corpus, for `quill data build`

The text mixes, paragraph by paragraph (chosen by a SplitMix64 stream, so any Python 3 gives the
same bytes): English prose with every contraction in several casings (including the long s,
U+017F, which a case-insensitive 's matches); sentences in ~30 languages and scripts; random words
drawn from letter ranges of many scripts; combining marks; emoji (ZWJ sequences, skin tones,
flags, keycaps, variation selectors); source code (Python, C++, JavaScript, JSON, HTML, SQL,
shell) with tabs and deep indentation; numbers of every length, in several digit systems; long
and odd whitespace runs (spaces, tabs, CR, CRLF, NBSP, U+3000, U+0085, U+2028, thousands of
spaces); special-token spellings such as <|endoftext|>; punctuation runs; random code points from
long-assigned blocks. Letters first assigned after Unicode 14 are avoided on purpose: the PCRE2
of Debian 12 knows Unicode 14 (see src/data/pre_split.h).

The committed fixture tests/data/fixtures/tokenizer/o200k_corpus.txt is
    make_corpus.py --out o200k_corpus.txt --bytes 1100000 --seed 5
and o200k_invalid_utf8.bin is
    make_corpus.py --out o200k_invalid_utf8.bin --invalid --bytes 20000 --seed 7
"""

import argparse
import json
import sys

MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n  # the tiny bias does not matter for a corpus

    def choice(self, seq):
        return seq[self.below(len(seq))]

    def chance(self, num, den):
        return self.below(den) < num


WORDS = """the of and to in is was for that with as on be at by this had not are but from or have an they
which one you were her all she there would their we him been has when who will more no if out so said
what up its about into than them can only other new some could time these two may then do first any my
now such like our over man me even most made after also did many before must through back years where
much your way well down should because each just those people how too little state good very make
world still own see men work long get here between both life being under never day same another know
while last might us great old year off come since against go came right used take three weather
tokenizer merge byte pair encoding rank vocabulary piece whitespace newline paragraph sentence python
function variable compile kernel gradient optimizer learning rate batch sequence attention expert router
international unbelievable antidisestablishmentarianism supercalifragilistic pneumonoultramicroscopic""".split()

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Re", "'rE", "'VE", "'Ve",
                "'M", "'LL", "'Ll", "'lL", "'D", "'\u017f", "'x", "'", "''", "’s", "’ll"]

CAPS = ["McDonald", "iPhone", "HTTPServer", "XMLHttpRequest", "NASA", "OpenAI", "GPT", "USB-C", "eBay", "PhD",
        "LaTeX", "macOS", "O'Neill", "DiCaprio", "CamelCaseWord", "snake_case_word", "ALLCAPS", "Ünïcödé", "ÆSIR",
        "ǅemal", "ǈubljana", "ǋeto", "ᾈδης"]

SENTENCES = [
    "Le renard brun rapide saute par-dessus le chien paresseux, n'est-ce pas ?",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
    "El pingüino Wenceslao hizo kilómetros bajo exhaustiva lluvia y frío, añoraba a su querido cachorro.",
    "À noite, vovô Kowalsky vê o ímã cair no pé do pinguim queixoso e vovó põe açúcar no chá de tâmaras.",
    "Quel vituperabile xenofobo zelante assaggia il whisky ed esclama: alleluja!",
    "Pchnąć w tę łódź jeża lub ośm skrzyń fig.",
    "Pijamalı hasta yağız şoföre çabucak güvendi.",
    "Tiếng Việt có dấu: Chữ Quốc ngữ được dùng rộng rãi từ thế kỷ 20.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Чуєш їх, доцю, га? Кумедна ж ти, прощайся без ґольфів!",
    "Τάχιστη αλώπηξ βαφής ψημένη γη, δρασκελίζει υπέρ νωθρού κυνός.",
    "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ومغلف بجلد أزرق.",
    "דג סקרן שט בים מאוכזב ולפתע מצא חברה.",
    "به نام خداوند جان و خرد، کزین برتر اندیشه برنگذرد.",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम।",
    "আমি বাংলায় গান গাই, আমি বাংলার গান গাই।",
    "யாமறிந்த மொழிகளிலே தமிழ்மொழி போல் இனிதாவது எங்கும் காணோம்.",
    "ఏమి చెప్పను, తెలుగు భాష చాలా మధురమైనది.",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "我能吞下玻璃而不伤身体。机器学习模型需要大量的训练数据和计算资源。",
    "我能吞下玻璃而不傷身體。繁體中文與簡體中文的轉換並不總是一對一的。",
    "いろはにほへと ちりぬるを わかよたれそ つねならむ。トークナイザーは文章を分割します。",
    "다람쥐 헌 쳇바퀴에 타고파. 한국어 문장은 띄어쓰기를 사용합니다.",
    "გთხოვთ ახლავე გაიაროთ რეგისტრაცია Unicode-ის მეათე საერთაშორისო კონფერენციაზე.",
    "Բարեւ, ինչպե՞ս ես։ Հայերենը ունի իր սեփական այբուբենը։",
    "ሰላም ለዓለም፤ የአማርኛ ፊደል ግዕዝ ይባላል።",
    "Habari ya asubuhi? Ninafurahi kukutana nawe leo.",
    "Saya suka makan nasi goreng dengan telur mata sapi setiap pagi.",
    "Ví dụ: 'Tôi là người Việt Nam' — câu này có 6 từ.",
    "Þú getur lesið íslensku ef þú æfir þig á hverjum degi.",
    "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Árvíztűrő tükörfúrógép és ŐŰ betűk.",
]

# (first, last) code point ranges of letters, digits and marks assigned by Unicode 6.0 or earlier,
# without holes that later versions filled.
SCRIPT_RANGES = {
    "latin_ext": [(0x00C0, 0x00D6), (0x00D8, 0x00F6), (0x0100, 0x017F), (0x0180, 0x024F)],
    "ipa": [(0x0250, 0x02AF)],
    "greek": [(0x0391, 0x03A1), (0x03A3, 0x03A9), (0x03B1, 0x03C9)],
    "cyrillic": [(0x0410, 0x044F), (0x0400, 0x040F), (0x0450, 0x045F)],
    "armenian": [(0x0531, 0x0556), (0x0561, 0x0586)],
    "hebrew": [(0x05D0, 0x05EA)],
    "arabic": [(0x0621, 0x063A), (0x0641, 0x064A), (0x064B, 0x0652)],
    "devanagari": [(0x0905, 0x0939), (0x093E, 0x094C), (0x0966, 0x096F)],
    "bengali": [(0x0995, 0x09A8), (0x09BE, 0x09C4)],
    "tamil": [(0x0B95, 0x0B95), (0x0B99, 0x0B9A), (0x0BAE, 0x0BB9), (0x0BBE, 0x0BC2)],
    "thai": [(0x0E01, 0x0E30), (0x0E31, 0x0E3A), (0x0E40, 0x0E4E)],
    "georgian": [(0x10D0, 0x10FA)],
    "hangul_jamo": [(0x1100, 0x1159)],
    "ethiopic": [(0x1200, 0x1248)],
    "cherokee": [(0x13A0, 0x13F4)],
    "hiragana": [(0x3041, 0x3094)],
    "katakana": [(0x30A1, 0x30FA)],
    "cjk": [(0x4E00, 0x9FA5)],
    "hangul": [(0xAC00, 0xD7A3)],
    "math_alnum": [(0x1D400, 0x1D454), (0x1D456, 0x1D49C)],
    "cjk_ext_b": [(0x20000, 0x2A6D6)],
    "fullwidth": [(0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0xFF10, 0xFF19)],
}

DIGIT_SYSTEMS = [(0x30, 10), (0x660, 10), (0x6F0, 10), (0x966, 10), (0x9E6, 10), (0xE50, 10), (0xFF10, 10)]
NUMERIC_SYMBOLS = "²³¹¼½¾⅓⅔ⅠⅡⅢⅣⅫↀ①②③⑩⓵"

EMOJI = ["😀", "😂", "🥲", "🤖", "🚀", "🌍", "🔥", "✨", "❤️", "👍🏽", "👩🏻‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵",
         "🇺🇸", "1️⃣", "#️⃣", "☺️", "✌🏿", "🧑‍🚀", "🐈‍⬛", "🫠", "🍕", "🎉", "💯", "🙏", "👀", "🤔", "😅"]

WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", " \t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\t\n",
              "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f", "\u205f", "\u1680", "\u0085", "\u2028", "\u2029",
              "\x0b", "\x0c", "\u200b", "  \n  ", " \u00a0 ", "\n \n"]

SPECIALS = ["<|endoftext|>", "<|endofprompt|>", "<|message_user|>", "<|message_model|>", "<|end_message|>",
            "<|content_text|>", "<|content_model_end_sampling|>", "<|im_start|>", "<|fim_prefix|>", "<s>", "</s>",
            "[INST]", "<<SYS>>", "<|unused_200054|>"]

PUNCT = ["!!!", "...", "?!", "—", "–", "«", "»", "„", "“", "”", "‘", "’", "【", "】", "《", "》", "、", "。", "，",
         "/*", "*/", "//", "\\n", "::", "->", "=>", "!=", "===", "...", "(", ")", "[", "]", "{", "}", "<", ">",
         "@@", "##", "$$", "%%", "^^", "&&", "||", "~~", "``", "''", "\"", ";", ":", ",", ".", "?", "¿", "¡", "§",
         "©", "®", "™", "°", "±", "×", "÷", "€", "£", "¥", "₹", "∑", "∫", "√", "∞", "≈", "≠", "≤", "≥", "→", "⇒",
         "♠", "♥", "★", "☆", "✓", "✗", "\u2060", "\ufeff", "\u00ad", "\u200d", "\u200e"]

CODE = [
    '''def merge(parts, ranks):
    """Repeatedly merge the lowest-ranked adjacent pair."""
    while True:
        best = min(range(len(parts) - 1), key=lambda i: ranks.get(parts[i] + parts[i + 1], float("inf")), default=None)
        if best is None or (parts[best] + parts[best + 1]) not in ranks:
            return parts
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
''',
    '''#include <vector>
template <typename T>
static inline T clamp(T v, T lo, T hi) { return v < lo ? lo : (v > hi ? hi : v); }

int main(int argc, char** argv) {
\tstd::vector<uint32_t> ids{0x1F600u, 42u, 7u};
\tfor (size_t i = 0; i < ids.size(); ++i) {
\t\tif (ids[i] >= 0xFFFF'FFFFu) { return -1; }  // unreachable
\t}
\treturn argc > 1 ? std::atoi(argv[1]) : 0;
}
''',
    '''const fetchRows = async (url, { retries = 3 } = {}) => {
  for (let i = 0; i < retries; i++) {
    try { return await (await fetch(`${url}?page=${i}&limit=100`)).json(); }
    catch (e) { console.error(`retry ${i}:`, e?.message ?? e); }
  }
  throw new Error("unreachable: " + url);
};
''',
    '''{"model": {"type": "BPE", "dropout": null, "vocab": {"!": 0, "\\"": 1, "#": 2}, "merges": [["Ġ", "t"], ["i", "n"]]},
 "added_tokens": [{"id": 199999, "content": "<|endoftext|>", "special": true}], "version": "1.0", "ok": true, "x": -1.5e-7}
''',
    '''<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Tokens &amp; Pieces</title></head>
<body>
    <div class="row" data-id='42'>&lt;|endoftext|&gt; &#x1F600; &nbsp;</div>
    <script>window.onload = () => document.querySelectorAll("div.row").forEach(d => d.hidden = false);</script>
</body></html>
''',
    '''SELECT u.id, COUNT(*) AS n_rows, SUM(t.tokens) / 1e6 AS m_tokens
FROM users u LEFT JOIN tokens t ON t.user_id = u.id
WHERE u.created_at >= '2024-01-01' AND u.name NOT LIKE '%test%'
GROUP BY u.id HAVING COUNT(*) > 10 ORDER BY n_rows DESC LIMIT 50;
''',
    '''#!/usr/bin/env bash
set -euo pipefail
for f in /usr/local/lib/*.so.[0-9]*; do
  [[ -e "$f" ]] || continue
  echo "${f##*/}: $(stat -c %s "$f") bytes" | tee -a "${LOG:-/tmp/log.txt}"
done 2>&1 | sort -k2 -n | awk '{s += $2} END {print s/1024/1024 " MiB"}'
''',
    '''    if (x_TD.rows() != w13_EFD.cols()) {
        throw std::runtime_error(fmt::format("shape mismatch: {}x{} vs {}x{}", a, b, c, d));
    }
                                                                        // deeply indented comment
''',
]


class Gen:
    def __init__(self, seed):
        self.r = SplitMix64(seed)

    def code_point(self, ranges):
        lo, hi = self.r.choice(ranges)
        return chr(lo + self.r.below(hi - lo + 1))

    def word(self):
        r = self.r
        w = r.choice(WORDS)
        k = r.below(10)
        if k == 0:
            w = w.capitalize()
        elif k == 1:
            w = w.upper()
        elif k == 2:
            w = r.choice(CAPS)
        if r.chance(1, 7):
            w += r.choice(CONTRACTIONS)
        return w

    def english(self):
        r = self.r
        out = []
        for _ in range(1 + r.below(6)):
            n = 3 + r.below(18)
            words = [self.word() for _ in range(n)]
            words[0] = words[0][:1].upper() + words[0][1:]
            s = " ".join(words)
            if r.chance(1, 4):
                s = s.replace(" ", ", ", 1)
            if r.chance(1, 6):
                s += " " + str(r.below(100000))
            out.append(s + r.choice([".", ".", ".", "?", "!", "...", ":", ";", "!?"]))
        return " ".join(out)

    def languages(self):
        r = self.r
        return r.choice([" ", "\n", " "]).join(r.choice(SENTENCES) for _ in range(1 + r.below(4)))

    def script_words(self):
        r = self.r
        name = r.choice(sorted(SCRIPT_RANGES))
        ranges = SCRIPT_RANGES[name]
        parts = []
        for _ in range(2 + r.below(12)):
            parts.append("".join(self.code_point(ranges) for _ in range(1 + r.below(9))))
        sep = "" if name in ("cjk", "hiragana", "katakana", "thai", "cjk_ext_b") and r.chance(1, 2) else " "
        return sep.join(parts)

    def combining(self):
        r = self.r
        out = []
        for _ in range(5 + r.below(20)):
            base = r.choice("aeiouAEIOUnscyzq")
            marks = "".join(chr(0x300 + r.below(0x70)) for _ in range(r.below(4)))
            out.append(base + marks)
            if r.chance(1, 3):
                out.append(" ")
        return "".join(out)

    def emoji(self):
        r = self.r
        out = []
        for _ in range(3 + r.below(15)):
            k = r.below(4)
            if k == 0:
                out.append(chr(0x1F600 + r.below(0x50)))
            elif k == 1:
                out.append(chr(0x1F300 + r.below(0x100)))
            else:
                out.append(r.choice(EMOJI))
            if r.chance(1, 3):
                out.append(r.choice([" ", "", "\n", self.word()]))
        return "".join(out)

    def code(self):
        r = self.r
        c = r.choice(CODE)
        if r.chance(1, 3):
            c = c.replace("\n", "\r\n")
        if r.chance(1, 4):
            c = c.replace("    ", "\t")
        return c

    def numbers(self):
        r = self.r
        out = []
        for _ in range(3 + r.below(15)):
            k = r.below(9)
            if k == 0:
                out.append("".join(str(r.below(10)) for _ in range(1 + r.below(20))))
            elif k == 1:
                out.append(f"{r.below(10**6)}.{r.below(10**4):04d}")
            elif k == 2:
                out.append(f"{r.below(1000)},{r.below(1000):03d},{r.below(1000):03d}")
            elif k == 3:
                out.append(f"20{r.below(30):02d}-{1 + r.below(12):02d}-{1 + r.below(28):02d}T{r.below(24):02d}:{r.below(60):02d}")
            elif k == 4:
                out.append(f"+1 ({r.below(1000):03d}) {r.below(1000):03d}-{r.below(10000):04d}")
            elif k == 5:
                out.append(f"0x{r.next() & 0xFFFFFFFF:08X}")
            elif k == 6:
                base, n = r.choice(DIGIT_SYSTEMS)
                out.append("".join(chr(base + r.below(n)) for _ in range(1 + r.below(8))))
            elif k == 7:
                out.append(r.choice(NUMERIC_SYMBOLS) * (1 + r.below(3)))
            else:
                out.append(f"{r.below(100)}%" if r.chance(1, 2) else f"${r.below(10**5)}.{r.below(100):02d}")
            out.append(r.choice([" ", ", ", "; ", "\n", "x", "-", "/", ""]))
        return "".join(out)

    def whitespace(self):
        r = self.r
        out = []
        for _ in range(3 + r.below(12)):
            k = r.below(6)
            if k == 0:
                out.append(" " * (1 + r.below(2000 if r.chance(1, 8) else 40)))
            elif k == 1:
                out.append("\t" * (1 + r.below(12)))
            elif k == 2:
                out.append("".join(r.choice(WHITESPACE) for _ in range(1 + r.below(8))))
            else:
                out.append(self.word())
            if r.chance(1, 2):
                out.append(r.choice(WHITESPACE))
        return "".join(out)

    def specials(self):
        r = self.r
        return "".join(r.choice(SPECIALS) + r.choice(["", " ", "\n", self.word(), r.choice(PUNCT)])
                       for _ in range(2 + r.below(6)))

    def punctuation(self):
        r = self.r
        return "".join(r.choice(PUNCT) + (r.choice([" ", "", self.word()]) if r.chance(1, 2) else "")
                       for _ in range(5 + r.below(25)))

    def ascii_noise(self):
        r = self.r
        return "".join(chr(32 + r.below(95)) for _ in range(10 + r.below(120)))

    def random_code_points(self):
        r = self.r
        all_ranges = [rg for name in sorted(SCRIPT_RANGES) for rg in SCRIPT_RANGES[name]]
        extra = [(0x2000, 0x206F), (0x2190, 0x23FF), (0x2500, 0x27BF), (0xE000, 0xE0FF), (0x0080, 0x009F),
                 (0x0001, 0x0008), (0x000E, 0x001F), (0x1F000, 0x1F02B)]
        ranges = all_ranges + extra
        return "".join(self.code_point(ranges) for _ in range(5 + r.below(60)))

    def paragraph(self):
        kinds = [(self.english, 24), (self.languages, 14), (self.script_words, 10), (self.combining, 3),
                 (self.emoji, 5), (self.code, 8), (self.numbers, 8), (self.whitespace, 8), (self.specials, 3),
                 (self.punctuation, 4), (self.ascii_noise, 3), (self.random_code_points, 4)]
        total = sum(w for _, w in kinds)
        pick = self.r.below(total)
        for fn, w in kinds:
            if pick < w:
                return fn()
            pick -= w
        raise AssertionError

    def text(self, min_bytes):
        r = self.r
        parts, size = [], 0
        while size < min_bytes:
            p = self.paragraph() + r.choice(["\n", "\n\n", "\n\n", " ", "\r\n", "\n\n\n", "  \n", ""])
            parts.append(p)
            size += len(p.encode("utf-8"))
        return "".join(parts)


INVALID = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2", b"\xe0\x80\x80", b"\xe0\xa0", b"\xed\xa0\x80",
           b"\xed\xbf\xbf", b"\xef\xbf", b"\xf0\x80\x80\x80", b"\xf0\x90\x80", b"\xf4\x90\x80\x80", b"\xf5\x80",
           b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff", b"\xe2\x82", b"\xe2\x28\xa1", b"\xf0\x9f\x98", b"\xc3\x28",
           b"\xa0\xa1", b"\xe1\x80\xe2\x82\xac", b"\xf1\x80\x80\xc3\xa9"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bytes", type=int, default=1_100_000)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--invalid", action="store_true", help="mix ill-formed UTF-8 into the text")
    ap.add_argument("--jsonl", action="store_true", help="write conversations cut from --from")
    ap.add_argument("--from", dest="source", help="the corpus the conversations are cut from (with --jsonl)")
    args = ap.parse_args()
    g = Gen(args.seed)
    if args.jsonl:
        if not args.source:
            sys.exit("make_corpus.py: --jsonl needs --from CORPUS")
        text = open(args.source, "rb").read().decode("utf-8")
        write_conversations(g.r, text, args.out)
        return
    if args.invalid:
        out = bytearray()
        while len(out) < args.bytes:
            out += g.paragraph().encode("utf-8")[:400]
            out += g.r.choice(INVALID)
            if g.r.chance(1, 3):
                out += g.r.choice(INVALID)
        out += b"\xe2\x82"  # a truncated sequence at the very end
        data = bytes(out)
    else:
        data = g.text(args.bytes).encode("utf-8")
    with open(args.out, "wb") as f:
        f.write(data)


def write_conversations(r, text, path):
    """Conversations with system/user/assistant turns, reasoning and tool calls, cut from text."""
    pos, n = 0, 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        while pos < len(text):
            def take(k):
                nonlocal pos
                s = text[pos:pos + k]
                pos += k
                return s
            msgs = []
            if r.chance(1, 4):
                msgs.append({"role": "system", "content": take(50 + r.below(200))})
            for _ in range(1 + r.below(3)):
                msgs.append({"role": "user", "content": take(100 + r.below(1500))})
                m = {"role": "assistant", "content": take(200 + r.below(4000))}
                if r.chance(1, 3):
                    m["reasoning_content"] = take(100 + r.below(2000))
                msgs.append(m)
                if r.chance(1, 8):
                    call_id = f"call_{n}"
                    msgs[-1]["tool_calls"] = [{"id": call_id, "type": "function",
                                               "function": {"name": "search", "arguments": {"q": take(30)}}}]
                    msgs.append({"role": "tool", "tool_call_id": call_id, "content": take(100 + r.below(800))})
                    msgs.append({"role": "assistant", "content": take(100 + r.below(1000))})
            f.write(json.dumps({"messages": msgs}, ensure_ascii=False) + "\n")
            n += 1


if __name__ == "__main__":
    main()
