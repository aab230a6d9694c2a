"""Secret redaction, compatible with OpenClaw's ``logging/redact.ts``.

``redact(text)`` masks credentials before text reaches chunking, the index, the
embedding cache or an embedding provider.  The patterns are the reference's
``DEFAULT_REDACT_PATTERNS``, applied case-insensitively and in the same order:

1. env/config-style assignments ``NAME = value`` / ``NAME: value`` where NAME ends in
   KEY, TOKEN, SECRET, PASSWORD or PASSWD (``OPENAI_API_KEY=sk-...``, ``password: x``,
   ``secret='x'``);
2. JSON fields ``"apiKey"|"token"|"secret"|"password"|"passwd"|"accessToken"|"refreshToken"``;
3. CLI flags ``--api-key|--token|--secret|--password|--passwd X``;
4. ``Authorization: Bearer X``;
5. ``Bearer X`` where X has 18+ characters;
6. PEM private key blocks;
7. prefixed tokens: ``sk-`` (incl. ``sk-proj-``), ``ghp_``, ``github_pat_``,
   ``xox[baprs]-``, ``xapp-``, ``gsk_``, ``AIza``, ``pplx-``, ``npm_`` and Telegram bot
   tokens.

Masking: the secret (the last non-empty capture group, or the whole match) becomes
``"***"`` when shorter than 18 characters, else ``first6 + "…" + last4``.  A PEM block
becomes its first line, ``"…redacted…"`` and its last line (``"***"`` if the block has
no line breaks, e.g. after whitespace was collapsed).

Choices and deviations from the reference, all deliberate:

* Regex semantics follow JavaScript: ``\\b``, ``\\d`` and case folding are ASCII-only
  (``re.ASCII``), and ``\\s`` is spelled out as JavaScript's whitespace set.
* The assignment pattern is kept as in the reference, so *any* word ending in
  key/token/secret/password/passwd followed by ``=`` or ``:`` masks the next
  whitespace-free run.  This is the safe side for credentials (``password: hunter2``
  -> ``password: ***`` is a reference example) at the price of some prose such as
  ``monkey: banana`` -> ``monkey: ***``. One exception keeps notes' prose intact: a bare
  ``Key``/``token`` (no name before it), then ``=`` or ``:`` and a space, then one plain word
  of at most 12 letters
  (``Key = API key for ...``, ``Key: the idea``) is not a credential and stays.
  Words *not* followed by ``=``/``:`` are never touched, so "the token bucket
  algorithm" or "password reset flow was discussed" stay intact.
* JSON field names also accept snake/kebab-case spellings (``api_key``,
  ``access_token``, ``refresh-token``, ...) and ``client_secret`` / ``auth_token`` /
  ``id_token``; the reference only knew the camelCase names.
* ``--password=X`` / ``--api-key=X`` need no CLI rule: the assignment pattern
  already masks ``password=X`` / ``key=X`` (the value after the ``=``).
* Telegram bot tokens use the real format ``\\d{8,10}:[A-Za-z0-9_-]{35}``; the
  reference's looser ``\\d{6,}:[A-Za-z0-9_-]{20,}`` also hit ordinary ids.
* The mask replaces the captured span itself; the reference used
  ``match.replace(token, masked)``, which hit the *first* occurrence of the token
  text (``password: password`` became ``***: password``).
* PEM blocks are matched with a linear scan instead of ``[\\s\\S]+?`` so a text with
  many BEGIN markers and no END cannot go quadratic.

Speed: patterns are precompiled and each pattern only runs when one of its literal
anchors occurs in the (lower-cased) text, so ordinary lines cost one ``lower()`` plus
a few substring tests.  Every match starts at (or, for Telegram tokens, 8-10
characters before) an anchor, so ``pattern.match`` is tried only at those positions
instead of letting the regex engine scan the whole text.  Masks never introduce an
anchor, so gating on the original text is exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

__all__ = [
    "REDACT_MODES",
    "mask_token",
    "redact",
    "redact_lines",
    "should_redact",
]

REDACT_MIN_LENGTH: Final = 18
REDACT_KEEP_START: Final = 6
REDACT_KEEP_END: Final = 4
ELLIPSIS: Final = "\u2026"

#: Allowed values of the indexer's ``redact`` setting ("auto" is resolved when settings load).
REDACT_MODES: Final = ("auto", "sessions", "all", "off")
#: Providers that embed on this machine: with them (and no other fallback) nothing leaves it.
LOCAL_PROVIDERS: Final = frozenset({"local", "none"})

# JavaScript's \s (ECMA-262 WhiteSpace + LineTerminator); with re.ASCII, \s inside the
# class is exactly [ \t\n\r\f\v].
_WS_CLASS: Final = r"\s\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_S: Final = f"[{_WS_CLASS}]"

_FLAGS: Final = re.IGNORECASE | re.ASCII

_SECRET_NAMES: Final = ("key", "token", "secret", "passw")


class _Rule:
    """One redaction pattern plus the literals that locate its candidate matches.

    Every match of ``pattern`` starts ``offset`` characters before an occurrence of one
    of ``anchors`` (lower-case literals) in the lower-cased text, so instead of letting
    the regex engine scan every position we only try ``pattern.match`` at those
    candidates.  ``also_any_of`` adds a second gate (e.g. an assignment needs ``=`` or
    ``:`` somewhere).  With more than ``_MAX_CANDIDATES`` candidates the rule falls
    back to a plain ``pattern.sub`` so adversarial input stays linear.
    """

    __slots__ = ("name", "pattern", "anchors", "offsets", "any_of", "also_any_of", "scan")

    def __init__(
        self,
        name: str,
        pattern: str,
        anchors: tuple[str, ...],
        *,
        any_of: tuple[str, ...] = (),
        also_any_of: tuple[str, ...] = (),
        offsets: tuple[int, ...] = (0,),
        scan: bool = False,
    ) -> None:
        self.name = name
        self.scan = scan  # anchors only gate the rule; matches start anywhere (regex scan)
        self.pattern = re.compile(pattern, _FLAGS)
        self.anchors = anchors
        self.offsets = offsets
        self.any_of = frozenset(any_of or anchors)
        self.also_any_of = frozenset(also_any_of)

    def triggered(self, present: frozenset[str] | set[str]) -> bool:
        """*present*: the trigger strings found in the lower-cased text."""
        if self.any_of.isdisjoint(present):
            return False
        return not self.also_any_of or not self.also_any_of.isdisjoint(present)

    def candidates(self, lowered: str, present: set[str]) -> list[int] | None:
        """Sorted candidate start offsets, or ``None`` when there are too many.

        Anchors that are also gate triggers and absent from *present* are not searched.
        """
        if self.scan:
            return None
        if self.offsets != (0,):
            return _telegram_candidates(lowered)
        out: list[int] = []
        find = lowered.find
        for anchor in self.anchors:
            if anchor in self.any_of and anchor not in present:
                continue
            idx = find(anchor)
            while idx != -1:
                out.append(idx)
                idx = find(anchor, idx + 1)
            if len(out) > _MAX_CANDIDATES:
                return None
        if len(self.anchors) > 1:
            out.sort()
        return out


def _telegram_candidates(lowered: str) -> list[int] | None:
    """Starts of possible ``[0-9]{8,10}:[A-Za-z0-9_-]{35}`` matches: 8-10 characters
    before a ':' that has 8 digits before it and at least 35 characters after it."""
    if lowered.count(":") > _MAX_TELEGRAM_COLONS:
        return None  # many colons: let the regex scan instead of splitting
    out: list[int] = []
    parts = lowered.split(":")
    pos = 0
    last = len(parts) - 1
    for i, part in enumerate(parts):
        colon = pos + len(part)
        pos = colon + 1
        if i == last:
            break
        if len(part) >= 8 and len(parts[i + 1]) >= 35 and part[-8:].isdigit():
            out.extend((colon - 10, colon - 9, colon - 8))
            if len(out) > _MAX_CANDIDATES:
                return None
    return out


_MAX_CANDIDATES: Final = 64
_MAX_TELEGRAM_COLONS: Final = 4096

_RULES_BEFORE_PEM: Final = (
    _Rule(
        "assignment",
        # Reference: \b[A-Z0-9_]*(?:KEY|...)\b... -- the prefix only extends the match to
        # the start of the word and is never masked, so anchoring on the keyword gives
        # the same output while keeping the candidates cheap to find.
        # ... except prose: a bare "Key"/"token" (no name before it), a separator with a space
        # after it and one plain word of at most 12 letters ("Key = API key for ...", "Key: the
        # idea") is kept; "token=abc" (a config line) is not prose.
        rf"(?=[kstp])(?!(?<![A-Za-z0-9_])(?:key|token){_S}*[=:][{_WS_CLASS}]+[A-Za-z]{{1,12}}[.,;:)]?(?:(?=[{_WS_CLASS}])|$))"
        rf"(?:key|token|secret|passw(?:or)?d)\b[\"']?{_S}*[=:]{_S}*"
        rf"([\"']?)([^{_WS_CLASS}\"'\\]+)\1",
        _SECRET_NAMES,
        also_any_of=("=", ":"),
    ),
    _Rule(
        "json_field",
        rf"\"(?:api[_-]?key|token|secret|password|passwd|access[_-]?token|refresh[_-]?token"
        rf"|auth[_-]?token|id[_-]?token|client[_-]?secret)\"{_S}*:{_S}*\"([^\"\u2026]+)\"",
        ('"api', '"token', '"secret', '"passw', '"access', '"refresh', '"auth', '"id', '"client'),
        any_of=_SECRET_NAMES,
        also_any_of=('"',),
    ),
    _Rule(
        "cli_flag",
        rf"--(?:api[-_]?key|token|secret|password|passwd){_S}+([\"']?)([^{_WS_CLASS}\"']+)\1",
        ("--api", "--token", "--secret", "--passw"),
        any_of=("--",),
        also_any_of=_SECRET_NAMES,
    ),
    _Rule(
        "authorization",
        rf"Authorization{_S}*[:=]{_S}*Bearer{_S}+([A-Za-z0-9._\-+=]+)",
        ("authorization",),
        also_any_of=("bearer",),
    ),
    _Rule("bearer", rf"\bBearer{_S}+([A-Za-z0-9._\-+=]{{18,}})\b", ("bearer",)),
)

_RULES_AFTER_PEM: Final = (
    # Rules added by issue 17 (what an outside attack got through). Every quantifier over a
    # token is possessive or bounded and every start is at an anchor or a token boundary, so
    # each character is scanned a bounded number of times: linear on any line.
    _Rule("aws_access_key_id", r"(?<![A-Za-z0-9])((?-i:(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}))(?![A-Za-z0-9])",
          ("akia", "asia", "abia", "acca")),
    _Rule("stripe", r"(?<![A-Za-z0-9_])((?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}+)",
          ("sk_live_", "sk_test_", "rk_live_", "rk_test_")),
    _Rule("gitlab", r"(?<![A-Za-z0-9_])(gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_-]{20,}+)",
          ("glpat-", "gldt-", "glrt-", "glptt-")),
    _Rule("jwt", r"(?<![A-Za-z0-9_-])((?-i:eyJ)[A-Za-z0-9_-]{5,}+\.(?-i:eyJ)[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{5,}+)",
          ("eyj",)),
    # user:password@host in a URL (postgres://admin:...@db, https://u:p@host): the password
    _Rule("url_password", r"://[^\s:/@]{1,256}+:([^\s/@]{1,256}+)@", ("://",)),
    # prose: "the password is hunter2hunter2" (only a value with a digit or a symbol: "the
    # password is required" stays)
    _Rule("password_prose",
          rf"pass(?:w(?:or)?d|phrase){_S}{{1,3}}(?:is|was|will be|=|:){_S}{{1,3}}(?:now{_S}{{1,3}})?"
          rf"[\"'`]?([^{_WS_CLASS}\"'`*\u2026]{{0,64}}?[0-9!@#$%^&_+=~?][^{_WS_CLASS}\"'`*\u2026]{{0,64}}+)",
          ("passw", "passphrase")),
    # a bare 40-character AWS secret access key, when "aws" or "secret" is in the same text:
    # mixed case and a digit (a 40-hex git hash has no capitals)
    _Rule("aws_secret_key", r"(?<![A-Za-z0-9/+=])((?-i:(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
          r"(?=[A-Za-z0-9/+]{0,39}[0-9])[A-Za-z0-9/+]{40}))(?![A-Za-z0-9/+=])",
          ("aws", "secret"), scan=True),
    _Rule("sk", r"\b(sk-[A-Za-z0-9_-]{8,})\b", ("sk-",)),
    _Rule("ghp", r"\b(ghp_[A-Za-z0-9]{20,})\b", ("ghp_",)),
    _Rule("github_pat", r"\b(github_pat_[A-Za-z0-9_]{20,})\b", ("github_pat_",)),
    _Rule("slack", r"\b(xox[baprs]-[A-Za-z0-9-]{10,})\b", ("xox",)),
    _Rule("slack_app", r"\b(xapp-[A-Za-z0-9-]{10,})\b", ("xapp-",)),
    _Rule("groq", r"\b(gsk_[A-Za-z0-9_-]{10,})\b", ("gsk_",)),
    _Rule("google", r"\b(AIza[0-9A-Za-z\-_]{20,})\b", ("aiza",)),
    _Rule("perplexity", r"\b(pplx-[A-Za-z0-9_-]{10,})\b", ("pplx-",)),
    _Rule("npm", r"\b(npm_[A-Za-z0-9]{10,})\b", ("npm_",)),
    # Telegram bot token: the match starts 8-10 digits before the ':'.
    _Rule(
        "telegram",
        r"(?<![A-Za-z0-9_])([0-9]{8,10}:[A-Za-z0-9_-]{35})(?![A-Za-z0-9_-])",
        (":",),
        offsets=(10, 9, 8),
        any_of=(":",),
    ),
)

_PEM_TRIGGER: Final = "private key-----"
_PEM_BEGIN: Final = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----", _FLAGS)
_PEM_END: Final = re.compile(r"-----END [A-Z ]*PRIVATE KEY-----", _FLAGS)
_PEM_LINE_SPLIT: Final = re.compile(r"\r?\n")

# Trigger substrings (lower-case) for the gates, grouped behind a one-character
# sentinel: substrings containing '-' or '_' are only searched for when that character
# occurs at all (a memchr-speed test), which keeps ordinary prose cheap.
_ALL_TRIGGERS: Final = frozenset(
    {t for r in (*_RULES_BEFORE_PEM, *_RULES_AFTER_PEM) for t in (*r.any_of, *r.also_any_of)} | {_PEM_TRIGGER}
)
_DASH_TRIGGERS: Final = tuple(sorted(t for t in _ALL_TRIGGERS if "-" in t and len(t) > 1))
_UNDERSCORE_TRIGGERS: Final = tuple(
    sorted(t for t in _ALL_TRIGGERS if "_" in t and "-" not in t and len(t) > 1)
)
_PLAIN_TRIGGERS: Final = tuple(sorted(_ALL_TRIGGERS.difference(_DASH_TRIGGERS, _UNDERSCORE_TRIGGERS)))


def _present_triggers(lowered: str) -> set[str]:
    present = {t for t in _PLAIN_TRIGGERS if t in lowered}
    if "-" in lowered:
        present.update(t for t in _DASH_TRIGGERS if t in lowered)
    if "_" in lowered:
        present.update(t for t in _UNDERSCORE_TRIGGERS if t in lowered)
    return present


def mask_token(token: str) -> str:
    """Mask one secret: ``"***"`` below 18 characters, else ``first6…last4``."""
    if len(token) < REDACT_MIN_LENGTH:
        return "***"
    return f"{token[:REDACT_KEEP_START]}{ELLIPSIS}{token[-REDACT_KEEP_END:]}"


def _mask_pem(block: str) -> str:
    lines = [ln for ln in _PEM_LINE_SPLIT.split(block) if ln]
    if len(lines) < 2:
        return "***"
    return f"{lines[0]}\n{ELLIPSIS}redacted{ELLIPSIS}\n{lines[-1]}"


def _mask_match(m: re.Match[str]) -> str:
    """Mask the last non-empty group of *m* (or the whole match) in place."""
    for idx in range(m.re.groups, 0, -1):
        value = m.group(idx)
        if value:
            start, end = m.span(idx)
            base = m.start()
            whole = m.group(0)
            return whole[: start - base] + mask_token(value) + whole[end - base :]
    return mask_token(m.group(0))


def _mask_pem_keep_lines(block: str) -> str:
    """A PEM block masked with its line count kept: first line, ``…redacted…``, empty lines,
    last line (so the line numbers of a note's chunks stay those of the file)."""
    lines = block.split("\n")
    if len(lines) < 3:
        return _mask_pem(block) if len(lines) == 1 else f"{lines[0]}\n{lines[-1]}"
    return "\n".join([lines[0], f"{ELLIPSIS}redacted{ELLIPSIS}", *([""] * (len(lines) - 3)), lines[-1]])


def _redact_pem(text: str, mask: Callable[[str], str] = _mask_pem) -> str:
    """Linear-time equivalent of ``BEGIN ... PRIVATE KEY-----[\\s\\S]+?-----END ...``."""
    out: list[str] = []
    pos = 0
    while True:
        begin = _PEM_BEGIN.search(text, pos)
        if begin is None:
            break
        # [\s\S]+? needs at least one character between the markers.
        end = _PEM_END.search(text, begin.end() + 1)
        if end is None:
            # No END after this BEGIN means none after any later BEGIN either.
            break
        out.append(text[pos : begin.start()])
        out.append(mask(text[begin.start() : end.end()]))
        pos = end.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _apply(rule: _Rule, text: str, lowered: str | None, present: set[str]) -> str:
    """``rule.pattern.sub(_mask_match, text)``, trying only the anchored candidates.

    *lowered* must be ``text.lower()`` with the same length (positions line up), or
    ``None`` to use the plain regex scan.
    """
    cands = rule.candidates(lowered, present) if lowered is not None else None
    if cands is None:
        return rule.pattern.sub(_mask_match, text)
    match = rule.pattern.match
    parts: list[str] = []
    last = 0
    for pos in cands:
        if pos < last:  # inside the previous match (or before the text)
            continue
        m = match(text, pos)
        if m is None:
            continue
        parts.append(text[last : m.start()])
        parts.append(_mask_match(m))
        last = m.end()
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


def _positional_lower(text: str) -> str | None:
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else None


def redact(text: str) -> str:
    """Return *text* with credentials masked (see the module docstring for the rules).

    Safe on arbitrary input: no pattern backtracks super-linearly, and text without
    any trigger substring is returned unchanged after a single ``lower()`` pass.
    """
    if not text:
        return text
    lowered = text.lower()
    present = _present_triggers(lowered)
    if not present:
        return text
    # Positions in ``lowered`` must line up with ``text`` (a few non-ASCII characters
    # change length when lower-cased; then the rules use a plain regex scan).
    pos_lower: str | None = lowered if len(lowered) == len(text) else None
    for rule in _RULES_BEFORE_PEM:
        if rule.triggered(present):
            new = _apply(rule, text, pos_lower, present)
            if new is not text:
                text = new
                pos_lower = _positional_lower(text) if pos_lower is not None else None
    if _PEM_TRIGGER in present:
        new = _redact_pem(text)
        if new is not text:
            text = new
            pos_lower = _positional_lower(text) if pos_lower is not None else None
    for rule in _RULES_AFTER_PEM:
        if rule.triggered(present):
            new = _apply(rule, text, pos_lower, present)
            if new is not text:
                text = new
                pos_lower = _positional_lower(text) if pos_lower is not None else None
    return text


def redact_lines(text: str) -> str:
    """Redact a Markdown note and keep its line count: multi-line PEM private keys are found
    across lines first (a note redacted line by line never saw one whole), then every line
    goes through :func:`redact`."""
    if _PEM_TRIGGER in text.lower():
        text = _redact_pem(text, _mask_pem_keep_lines)
    return "\n".join(redact(line) for line in text.split("\n"))


def resolve_redact_mode(data: dict[str, object]) -> dict[str, object]:
    """Settings data with ``redact = "auto"`` (the default) made concrete.

    The rule: secrets are redacted whenever text leaves the machine. A hosted provider (or
    ``auto``, which may pick one, or a hosted fallback) receives every chunk: then Markdown
    notes are redacted too (``"all"``); with ``local``/``none`` only transcripts are
    (``"sessions"``). The index meta records the concrete mode, so a change rebuilds.
    """
    if data.get("redact", "auto") != "auto":
        return data
    fallback = data.get("fallback")
    if isinstance(fallback, dict):
        fallback = fallback.get("provider")
    names = {str(data.get("provider", "auto")), *([str(fallback)] if fallback else [])}
    return {**data, "redact": "sessions" if names <= LOCAL_PROVIDERS else "all"}


def should_redact(source: str, mode: str) -> bool:
    """Whether text of *source* (``"memory"`` or ``"sessions"``) must be redacted.

    ``mode`` is the ``redact`` setting: ``"sessions"`` (transcripts only), ``"all"``
    (every source) or ``"off"``; ``"auto"`` (the default) is resolved by
    :func:`resolve_redact_mode` when settings load.  Unknown modes raise ``ValueError``
    rather than silently disabling redaction.
    """
    if mode == "off":
        return False
    if mode in ("all", "auto"):  # "auto" is resolved at load time; unresolved, the safe side
        return True
    if mode == "sessions":
        return source == "sessions"
    raise ValueError(f"unknown redact_mode {mode!r}; expected one of {', '.join(REDACT_MODES)}")
