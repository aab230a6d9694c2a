"""Keyword side of memory search: FTS5 tokenizer choice, CJK segmentation, safe MATCH queries.

Everything here is pure (no I/O) and shared by the index writer (``segment_many``, the batch
form of ``segment_for_index``; ``FTS_TOKENIZER``) and the query module (``build_match_query``, ``query_terms``,
``keyword_tokens``).

Index side
    The FTS5 table ``chunks_fts(text, content='', contentless_delete=1)`` is created with
    ``tokenize='<FTS_TOKENIZER>'`` and indexes ``segment_for_index(chunk.text)`` as its ``text``
    (contentless: the index keeps the tokens and each row's length, not the segmented text).
    FTS5's unicode61 tokenizer does not segment CJK (a whole Chinese sentence is one token), so
    every CJK character (Han, kana, Hangul) is surrounded by spaces and becomes its own token.
    Snippets are cut from the original chunk text (``chunks.text``); the column reads as NULL.

Query side
    ``build_match_query`` turns free user text into a MATCH expression in which every term is a
    double-quoted FTS5 string, so user text is always data and never syntax (no operators, column
    filters, prefixes or NEAR groups can be injected). Terms are OR'ed (BM25 ranks documents that
    contain more / rarer terms first; the reference's strict AND matched nothing for long
    natural-language queries, openclaw #15226/#39484). Stop words are dropped unless the query has
    nothing else. A CJK run becomes a phrase of single characters, which is an exact substring
    match against the segmented index; runs of 3+ Han characters become OR'ed bigram phrases so
    a partial match still ranks. Korean words lose their trailing particle ("서버에서" -> "서버")
    and a common predicate ending ("발생한" -> "발생"); the phrase of the stem still matches the
    inflected forms in documents, since a phrase is a substring match on the segmented text.

Tokenizer choice (``FTS_TOKENIZER``), measured in tests/test_textsearch.py on a labelled set of
60 short notes (48 English incl. distractors, 4 Chinese, 2 Japanese, 3 Korean, 3 Spanish) and
36 queries (30 English natural-language questions, 6 CJK/Korean/Spanish), real FTS5, nDCG@10
(mean rows matched per query in brackets, a proxy for the work FTS5 does):

    reference strict AND, unicode61, unsegmented index        0.258   (0.3)
    strict AND (mode="all"), unicode61, segmented             0.458   (0.5)
    OR, stop words kept, unicode61                            0.958  (13.2)
    OR, stop words dropped, unicode61                         0.954   (2.7)
    OR, stop words kept, porter unicode61                     0.967  (13.7)
    OR, stop words dropped, porter unicode61  (default)       0.970   (3.2)

OR semantics is the big win. Porter adds a little on English inflections ("deploying" ~
"deployment", "crash" ~ "crashes", "roles", "logs") and changes nothing for CJK/Korean (it only
rewrites ASCII tokens; CJK tokens are single characters). Dropping stop words is quality-neutral
on this set (+-0.005) but makes a query match ~4x fewer rows, which is what BM25 has to score on
a 100k-chunk index. Changing ``FTS_TOKENIZER`` requires rebuilding the FTS table.

Confirmed on the larger sets of docs/search.md (600 docstring queries over 6,459 chunks; the 62
example queries): porter +1.7 / +0.7 nDCG@10 points over plain unicode61; dropping stop words
-0.5 / +2.7 points with 2.4x fewer rows matched; OR 0.776 vs the reference's strict AND 0.106.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported when a batch holds non-ASCII text
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "FTS_TOKENIZER",
    "MAX_QUERY_TERMS",
    "STOP_WORDS",
    "build_fts_query_reference",
    "build_match_query",
    "extract_keywords",
    "is_stop_word",
    "keyword_tokens",
    "query_terms",
    "segment_for_index",
    "segment_many",
]

FTS_TOKENIZER: str = "porter unicode61 remove_diacritics 2"
"""Value of ``tokenize=`` for ``CREATE VIRTUAL TABLE chunks_fts USING fts5(...)``."""

MAX_QUERY_TERMS = 32
"""At most this many unique terms (words or phrases) go into one MATCH expression."""

MAX_QUERY_SCAN_CHARS = 16_384
"""Only this many leading characters of a query are scanned for terms (bounds CPU for 100 KB)."""

MAX_TERM_CHARS = 256
"""Longer "words" (base64 blobs, minified code) are ignored: they never equal a document token."""

CJK_PHRASE_MAX = 2
"""Han runs up to this length are one phrase; longer runs become OR'ed bigram phrases."""

# ---------------------------------------------------------------------------------------------
# Character classes
# ---------------------------------------------------------------------------------------------
_HAN = "\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f\U00030000-\U0003134f"
_HIRAGANA = "\u3041-\u309f"
_KATAKANA = "\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9f"
_HANGUL = "\u1100-\u11ff\u3131-\u318e\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uffa0-\uffdc"
_CJK = _HAN + _HIRAGANA + _KATAKANA + _HANGUL



class _Lazy:
    """A pattern compiled on first use. ``re`` compiles a class of CJK ranges by walking every code
    point of them (1-5 ms a pattern, ~25 ms for this module's): a process that meets no CJK text
    (an English query, ``--version``) should not pay that at import."""

    __slots__ = ("_pattern", "_flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._pattern, self._flags = pattern, flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:  # two threads may both compile it: the same pattern either way
            self._compiled = re.compile(self._pattern, self._flags)
        return self._compiled

    def search(self, text: str) -> re.Match[str] | None:
        return self.compiled.search(text)

    def match(self, text: str) -> re.Match[str] | None:
        return self.compiled.match(text)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return self.compiled.fullmatch(text)

    def findall(self, text: str) -> list[Any]:
        return self.compiled.findall(text)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(text)

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        return self.compiled.sub(repl, text)


LazyPattern = _Lazy  # for other modules' patterns that most processes never use (query/dates.py)


_CJK_CHAR_RE = _Lazy(f"[{_CJK}]")
_CJK_RUN_RE = _Lazy(f"[{_CJK}]+")
_HAN_KANA_RE = _Lazy(f"[{_HAN}{_HIRAGANA}{_KATAKANA}]")
_HANGUL_RE = _Lazy(f"[{_HANGUL}]")
_HANGUL_SYLLABLE_RE = _Lazy("[\uac00-\ud7af]")
# One query word: letters/digits (any script, incl. CJK), with inner underscores kept so that
# "FOO_bar" stays one term (FTS5 then reads it as the phrase "foo bar").
_WORD_RE = re.compile(r"[^\W_]+(?:_+[^\W_]+)*")
# Script runs inside one word.
_RUN_RE = _Lazy(
    f"(?P<han>[{_HAN}]+)|(?P<kata>[{_KATAKANA}]+)|(?P<hira>[{_HIRAGANA}]+)"
    f"|(?P<hangul>[{_HANGUL}]+)|(?P<other>(?:(?![{_CJK}])\\w)+)"
)
# Token sets for similarity: a CJK run, or a word without CJK characters.
_SIM_TOKEN_RE = _Lazy(f"(?P<cjk>[{_CJK}]+)|(?P<word>(?:(?![{_CJK}])[^\\W_])+)")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# ---------------------------------------------------------------------------------------------
# Stop words (EN, ES, PT, AR, KO, JA, ZH). Lower-case; accented and unaccented Spanish/Portuguese
# spellings both listed where users commonly drop accents.
# ---------------------------------------------------------------------------------------------
STOP_WORDS_EN = _words(
    """
    a an the this that these those some any each every all both either neither no nor not
    i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves one ones
    is am are was were be been being have has had having do does did doing done
    will would shall should can could may might must ought
    in on at to for of with by from about into onto through during before after above below
    between under over up down out off around against among across along upon within without
    via per than too very so such only own same also just again further once here there
    and or but if then else because as while when where what which who whom whose how why
    until unless though although whether
    yesterday today tomorrow earlier later recently ago now soon already still ever never
    thing things stuff something anything everything nothing someone anyone everyone
    please help find show get tell give let lets know remember recall want need
    don doesn didn isn aren wasn weren hasn haven hadn couldn shouldn wouldn
    """
)

STOP_WORDS_ES = _words(
    """
    el la lo los las un una unos unas este esta esto estos estas ese esa eso esos esas
    aquel aquella aquellos aquellas
    yo me mi mis mío mía nosotros nosotras nos nuestro nuestra nuestros nuestras tu tus tú te ti
    usted ustedes vosotros vosotras él ella ellos ellas le les se su sus
    de del a al en con sin por para sobre entre hacia hasta desde durante según contra
    y e o u ni pero sino si porque como que pues
    es son fue fueron era eran ser estar está están estaba haber ha han había hay tener
    tiene tienen hacer hizo
    ayer hoy mañana antes despues después ahora luego recientemente ya
    qué cómo cuando cuándo donde dónde cual cuál cuales quien quién porqué
    favor ayuda muy más menos también algo nada todo todos
    """
)

STOP_WORDS_PT = _words(
    """
    o a os as um uma uns umas este esta isto estes estas esse essa isso esses essas aquele aquela
    eu me meu minha meus minhas nos nós nosso nossa você vocês ele ela eles elas lhe seu sua
    de do da dos das em no na nos nas num numa com sem por pelo pela para sobre entre até desde
    e ou mas se porque como que nem
    é são foi foram era ser estar está estão estava ter tem têm tinha fazer fez há
    ontem hoje amanhã antes depois agora recentemente já
    quê quando onde qual quais quem porquê favor ajuda muito mais menos também algo nada tudo
    """
)

STOP_WORDS_AR = _words(
    """
    ال و أو او لكن ثم بل أنا انا نحن أنت انت أنتم هو هي هم هن هذا هذه ذلك تلك هنا هناك الذي التي الذين
    من إلى الى في على عن مع بين ل ب ك حتى منذ عند لدى
    كان كانت يكون تكون صار أصبح يمكن ممكن قد لقد ليس
    بالأمس امس أمس اليوم غدا الآن الان قبل بعد مؤخرا
    لماذا كيف ماذا ما متى أين اين هل فضلك فضلا ساعد
    """
)

STOP_WORDS_KO = _words(
    """
    은 는 이 가 을 를 의 에 에서 로 으로 와 과 도 만 까지 부터 한테 에게 께 처럼 같이 보다 마다 밖에 대로
    나 나는 내가 나를 너 우리 저 저희 그 그녀 그들 이것 저것 그것 여기 저기 거기
    있다 없다 하다 되다 이다 아니다 주다 오다 가다
    것 거 등 수 때 곳 중 분
    잘 더 또 매우 정말 아주 많이 너무 좀
    그리고 하지만 그래서 그런데 그러나 또는 그러면
    왜 어떻게 뭐 언제 어디 누구 무엇 어떤
    어제 오늘 내일 최근 지금 아까 나중 전에
    제발 부탁
    """
)

STOP_WORDS_JA = _words(
    """
    これ それ あれ この その あの ここ そこ あそこ こちら そちら
    する した して します しました です でした ます いる いた ある あった なる なった できる
    の こと もの ため そして しかし また でも から まで より だけ など について
    なぜ どう 何 いつ どこ 誰 どれ どの
    昨日 今日 明日 最近 今 さっき 前 後
    """
)

STOP_WORDS_ZH = _words(
    """
    我 我们 你 你们 他 她 它 他们 她们 这 那 这个 那个 这些 那些 这里 那里
    的 了 着 过 得 地 吗 呢 吧 啊 呀 嘛 啦
    是 有 在 被 把 给 让 用 到 去 来 做 说 看 找 想 要 能 会 可以
    和 与 或 但 但是 因为 所以 如果 虽然 而 也 都 就 还 又 再 才 只 或者 还是 以及 关于 对于
    之前 以前 之后 以后 刚才 现在 昨天 今天 明天 最近
    东西 事情 事 什么 哪个 哪些 怎么 怎样 为什么 多少 一下 一些 一个
    请 帮 帮忙 告诉
    """
)

STOP_WORDS: frozenset[str] = (
    STOP_WORDS_EN
    | STOP_WORDS_ES
    | STOP_WORDS_PT
    | STOP_WORDS_AR
    | STOP_WORDS_KO
    | STOP_WORDS_JA
    | STOP_WORDS_ZH
)
"""Union of all stop-word lists (lower-case)."""

# Single Han characters that are pure function particles: a bigram containing one is noise.
_ZH_PARTICLES = frozenset("的吗呢吧啊呀嘛啦")
_ZH_STOP_CHARS = frozenset(w for w in STOP_WORDS_ZH if len(w) == 1)

# Korean trailing particles, longest first (order within a length as in the reference).
KO_TRAILING_PARTICLES: tuple[str, ...] = tuple(
    sorted(
        _words(
            "에서 으로 에게 한테 처럼 같이 보다 까지 부터 마다 밖에 대로 은 는 이 가 을 를 의 에 로 와 과 도 만"
        ),
        key=lambda p: (-len(p), p),
    )
)
# Common predicate endings on Sino-Korean nouns ("발생한" -> "발생"); used by build_match_query
# only, after particle stripping, and only when a 2+ syllable stem remains.
_KO_PREDICATE_ENDINGS: tuple[str, ...] = tuple(
    sorted(
        _words("했습니다 합니다 했다 한다 하는 하고 해서 했던 하기 했고 된다 되는 됐다 된 한"),
        key=lambda p: (-len(p), p),
    )
)


def is_stop_word(word: str) -> bool:
    """True if ``word`` (any case) is in one of the stop-word lists."""
    return word.lower() in STOP_WORDS


# ---------------------------------------------------------------------------------------------
# Index side
# ---------------------------------------------------------------------------------------------
def _space_run(m: re.Match[str]) -> str:
    return " " + " ".join(m.group()) + " "


def segment_for_index(text: str) -> str:
    """Text to store in the FTS ``text`` column: every CJK character surrounded by spaces.

    Han, Hiragana, Katakana and Hangul characters each become one FTS5 token; CJK punctuation is
    left alone (unicode61 treats it as a separator anyway). Text without CJK characters is
    returned unchanged (the same object). Cost per 1,600-character chunk: ~0.1 µs for ASCII,
    ~20-40 µs for other non-CJK text, ~100-300 µs for CJK text (one regex pass over CJK runs).
    """
    if text.isascii():
        return text
    return _CJK_RUN_RE.sub(_space_run, text)


_WIDE = 0x1100  # no CJK character below this code point (Hangul Jamo start there)
_cjk_table: npt.NDArray[np.bool_] | None = None


def _cjk_lookup() -> npt.NDArray[np.bool_]:
    """A numpy bool table: True at the code points of ``_CJK``."""
    global _cjk_table
    if _cjk_table is None:
        import numpy as np

        spans = [(ord(lo), ord(hi or lo)) for lo, hi in re.findall(r"(.)(?:-(.))?", _CJK, re.S)]
        table = np.zeros(max(hi for _, hi in spans) + 1, dtype=bool)
        for lo, hi in spans:
            table[lo:hi + 1] = True
        _cjk_table = table
    return _cjk_table


def segment_many(texts: Sequence[str]) -> list[str]:
    """:func:`segment_for_index` of every text (the same strings), for an insert batch.

    The regex scans ~15 ns a character; here the batch's non-ASCII texts are encoded once to
    UTF-32 and numpy finds the CJK code points, so only they cost Python time (measured on the
    benchmark corpus, where 39% of chunks hold a few CJK characters: 0.84 s -> 0.3 s for
    99k chunks). ASCII texts are returned as they are (the same objects).
    """
    out = list(texts)
    todo = [i for i, t in enumerate(out) if not t.isascii()]
    if not todo:
        return out
    import numpy as np

    table = _cjk_lookup()
    joined = "\n".join([out[i] for i in todo])
    codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    wide = np.flatnonzero(codes >= _WIDE)
    cand = codes[wide]
    pos = wide[table[np.minimum(cand, len(table) - 1)] & (cand < len(table))]
    if not len(pos):
        return out
    lengths = np.fromiter((len(out[i]) + 1 for i in todo), dtype=np.int64, count=len(todo))
    starts = np.cumsum(lengths) - lengths
    owner = np.searchsorted(starts, pos, side="right") - 1
    local = (pos - starts[owner]).tolist()
    owners = owner.tolist()
    n, j = len(local), 0
    while j < n:
        k = owners[j]
        text = out[todo[k]]
        parts: list[str] = []
        last = 0  # end of the text already copied
        while j < n and owners[j] == k:
            p = local[j]
            # a CJK character: a run starts after a gap (the gap copied), else it continues
            parts.append(text[last:p] + " " + text[p] if p != last else " " + text[p])
            last = p + 1
            j += 1
            if j == n or owners[j] != k or local[j] != last:
                parts.append(" ")  # the run ends
        parts.append(text[last:])
        out[todo[k]] = "".join(parts)
    return out


# ---------------------------------------------------------------------------------------------
# Reference behaviour (kept for comparison and tests)
# ---------------------------------------------------------------------------------------------
_REF_TOKEN_RE = re.compile(r"[^\W]+")  # [\p{L}\p{N}_]+ (Python's \w is letters, digits, "_")


def build_fts_query_reference(query: str) -> str | None:
    """The reference's strict-AND ``buildFtsQuery``: every ``[\\p{L}\\p{N}_]+`` token quoted, AND'ed.

    ``"hello world"`` -> ``'"hello" AND "world"'``; ``"   "`` -> ``None``. Kept to measure
    against; search uses :func:`build_match_query`.
    """
    tokens = [t for t in _REF_TOKEN_RE.findall(query) if t.strip()]
    if not tokens:
        return None
    return " AND ".join('"' + t.replace('"', "") + '"' for t in tokens)


def _is_ref_separator(ch: str) -> bool:
    # JS /[\s\p{P}]/u
    return ch.isspace() or ch == "\ufeff" or unicodedata.category(ch).startswith("P")


def _split_ref_segments(text: str) -> list[str]:
    segments: list[str] = []
    current: list[str] = []
    for ch in text:
        if _is_ref_separator(ch):
            if current:
                segments.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        segments.append("".join(current))
    return segments


def _strip_korean_particle(token: str) -> str | None:
    for particle in KO_TRAILING_PARTICLES:
        if len(token) > len(particle) and token.endswith(particle):
            return token[: -len(particle)]
    return None


def _is_useful_korean_stem(stem: str) -> bool:
    if _HANGUL_SYLLABLE_RE.search(stem):
        return len(stem) >= 2
    return re.fullmatch(r"[a-z0-9_]+", stem, re.IGNORECASE) is not None


_JA_DETECT_RE = re.compile("[\u3040-\u30ff]")
_JA_PARTS_RE = _Lazy("[a-z0-9_]+|[\u30a0-\u30ff]+|[\u4e00-\u9fff]+|[\u3040-\u309f]{2,}")
_ZH_CHAR_RE = _Lazy("[\u4e00-\u9fff]")
_ZH_RUN_RE = _Lazy("[\u4e00-\u9fff]+")
_KO_DETECT_RE = _Lazy("[\uac00-\ud7af\u3131-\u3163]")


def _reference_tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    for segment in _split_ref_segments(text.lower().strip()):
        if _JA_DETECT_RE.search(segment):
            for part in _JA_PARTS_RE.findall(segment):
                tokens.append(part)
                if _ZH_RUN_RE.fullmatch(part):
                    tokens.extend(part[i : i + 2] for i in range(len(part) - 1))
        elif _ZH_CHAR_RE.search(segment):
            chars = [c for c in segment if _ZH_CHAR_RE.match(c)]
            tokens.extend(chars)
            tokens.extend(chars[i] + chars[i + 1] for i in range(len(chars) - 1))
        elif _KO_DETECT_RE.search(segment):
            stem = _strip_korean_particle(segment)
            stem_is_stop = stem is not None and stem in STOP_WORDS_KO
            if segment not in STOP_WORDS_KO and not stem_is_stop:
                tokens.append(segment)
            if stem and stem not in STOP_WORDS_KO and _is_useful_korean_stem(stem):
                tokens.append(stem)
        else:
            tokens.append(segment)
    return tokens


def _is_valid_keyword(token: str) -> bool:
    if not token:
        return False
    if re.fullmatch(r"[a-zA-Z]+", token) and len(token) < 3:
        return False
    if re.fullmatch(r"[0-9]+", token):
        return False
    return not all(unicodedata.category(c)[0] in "PS" for c in token)


def extract_keywords(query: str) -> list[str]:
    """The reference's ``extractKeywords`` (keyword expansion for conversational queries).

    Lower-case; split on whitespace and punctuation; Japanese segments -> ASCII / katakana /
    kanji / 2+ hiragana runs (kanji runs also give bigrams); Chinese segments -> Han unigrams
    then adjacent bigrams; Korean words -> the word (unless it or its stem is a stop word) and
    its particle-stripped stem (when 2+ syllables or ASCII); then drop stop words, ASCII-letter
    tokens shorter than 3, pure digits and pure punctuation/symbols; dedupe keeping order.

    >>> extract_keywords("that thing we discussed about the API")
    ['discussed', 'api']
    """
    keywords: list[str] = []
    seen: set[str] = set()
    for token in _reference_tokenize(query):
        if token in STOP_WORDS or not _is_valid_keyword(token) or token in seen:
            continue
        seen.add(token)
        keywords.append(token)
    return keywords


# ---------------------------------------------------------------------------------------------
# Query side
# ---------------------------------------------------------------------------------------------
def _han_terms(run: str) -> list[tuple[str, bool]]:
    """(term, is_stop) for one Han run: a phrase if short, else its informative bigrams."""
    if run in STOP_WORDS:
        return [(run, True)]
    if len(run) <= CJK_PHRASE_MAX:
        return [(run, all(c in _ZH_STOP_CHARS for c in run))]
    out: list[tuple[str, bool]] = []
    for i in range(len(run) - 1):
        bigram = run[i : i + 2]
        noisy = (
            bigram in STOP_WORDS
            or bigram[0] in _ZH_PARTICLES
            or bigram[1] in _ZH_PARTICLES
            or (bigram[0] in _ZH_STOP_CHARS and bigram[1] in _ZH_STOP_CHARS)
        )
        if not noisy:
            out.append((bigram, False))
    return out or [(run, True)]


def _korean_stem(word: str) -> str:
    stem = _strip_korean_particle(word)
    if stem is None or not _is_useful_korean_stem(stem):
        stem = word
    for ending in _KO_PREDICATE_ENDINGS:
        if len(stem) > len(ending) and stem.endswith(ending):
            candidate = stem[: -len(ending)]
            if _is_useful_korean_stem(candidate) and _HANGUL_SYLLABLE_RE.search(candidate):
                return candidate
            break
    return stem


def _word_terms(word: str) -> Iterator[tuple[str, bool]]:
    """(term, is_stop) pairs for one lower-cased query word."""
    if word in STOP_WORDS:
        yield word, True
        return
    if word.isascii():  # no Hangul, Han, kana (no pattern below to compile for an English query)
        yield word, False
        return
    if _HANGUL_RE.search(word) and not _HAN_KANA_RE.search(word):
        stem = _korean_stem(word)
        if stem in STOP_WORDS:
            yield stem, True
            return
        word = stem
    if not _CJK_CHAR_RE.search(word):
        yield word, False
        return
    for m in _RUN_RE.finditer(word):
        kind, run = m.lastgroup, m.group()
        if kind == "han":
            yield from _han_terms(run)
        elif kind == "hira":
            # Hiragana is overwhelmingly grammatical (particles, okurigana, auxiliaries).
            yield run, True
        elif kind == "kata" or kind == "hangul":
            yield run, run in STOP_WORDS
        else:
            run = run.strip("_")
            if run:
                yield run, run in STOP_WORDS


def _collect_terms(query: str, drop_stop_words: bool) -> list[str]:
    content: dict[str, None] = {}
    stops: dict[str, None] = {}
    for m in _WORD_RE.finditer(query, 0, min(len(query), MAX_QUERY_SCAN_CHARS)):
        word = m.group()
        if len(word) > MAX_TERM_CHARS:
            continue
        for term, is_stop in _word_terms(word.lower()):
            if not any(c.isalnum() for c in term):
                continue
            bucket = stops if (is_stop and drop_stop_words) else content
            if len(bucket) < MAX_QUERY_TERMS:
                bucket.setdefault(term, None)
        if len(content) >= MAX_QUERY_TERMS:
            break
    return list(content or stops)


def query_terms(query: str, *, drop_stop_words: bool = True) -> list[str]:
    """The terms :func:`build_match_query` searches for, in query order, unsegmented.

    Words are lower-cased; CJK terms are plain strings ("金银", "서버"). Stop words are dropped
    unless nothing else remains. At most :data:`MAX_QUERY_TERMS`. Useful for
    ``ranking.make_snippet``.
    """
    return _collect_terms(query, drop_stop_words)


def fts_string(term: str) -> str:
    segmented = " ".join(segment_for_index(term).split())
    return '"' + segmented.replace('"', '""') + '"'


def build_match_query(query: str, *, mode: str = "any", drop_stop_words: bool = True) -> str | None:
    """Safe FTS5 MATCH expression for free user text, or ``None`` when there is nothing to search.

    Every term is emitted as a double-quoted FTS5 string, so quotes, ``*``, ``-``, ``^``, ``:``,
    parentheses, ``NEAR``/``AND``/``OR``/``NOT`` words and column filters in the user text are
    searched as plain words (or dropped as separators), never interpreted. Terms: letter/digit
    words (lower-cased, inner underscores kept, so ``FOO_bar`` is the phrase "foo bar"); CJK runs
    as phrases of single characters (matching ``segment_for_index``); Han runs of 3+ characters
    as their informative bigrams; Korean words without their trailing particle; hiragana runs
    treated as stop words. Stop words are dropped unless the query has only stop words. Unique
    terms are capped at :data:`MAX_QUERY_TERMS` and only the first :data:`MAX_QUERY_SCAN_CHARS`
    characters are read.

    ``mode="any"`` (default) OR's the terms (rank with ``bm25()``); ``mode="all"`` AND's them.

    >>> build_match_query('text:"foo" NEAR(bar*)')
    '"text" OR "foo" OR "near" OR "bar"'
    """
    if mode not in ("any", "all"):
        raise ValueError(f"mode must be 'any' or 'all', not {mode!r}")
    terms = _collect_terms(query, drop_stop_words)
    if not terms:
        return None
    joiner = " OR " if mode == "any" else " AND "
    return joiner.join(fts_string(t) for t in terms)


# ---------------------------------------------------------------------------------------------
# Token sets for similarity (MMR, dedupe)
# ---------------------------------------------------------------------------------------------
def keyword_tokens(text: str) -> frozenset[str]:
    """Token set of ``text`` for Jaccard similarity (MMR, near-duplicate checks).

    Non-CJK words are lower-cased letter/digit runs (underscore separates, as in FTS5). Each CJK
    run (Han, kana, Hangul) contributes its characters and its adjacent-character bigrams, so
    two different Chinese snippets are not "identical" (the reference saw every CJK snippet as an
    empty token set, openclaw #20730/#28000). Stop words are kept.
    """
    tokens: set[str] = set()
    for m in _SIM_TOKEN_RE.finditer(text):
        run = m.group()
        if m.lastgroup == "word":
            tokens.add(run.lower())
        else:
            tokens.update(run)
            tokens.update(run[i : i + 2] for i in range(len(run) - 1))
    return frozenset(tokens)


def well_formed(text: str) -> str:
    """``text`` with each lone surrogate (a non-UTF-8 byte of a command line, decoded by Python as
    ``U+DCxx``; half a pair from a JSON escape) as U+FFFD, and NUL as a space: what a query or a
    path may hold before it reaches SQLite or a tokenizer, which refuse such strings (a traceback
    of the CLI, a raw TypeError or UnicodeEncodeError of the API, before the thirty-ninth session)."""
    text = text.replace("\x00", " ")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
