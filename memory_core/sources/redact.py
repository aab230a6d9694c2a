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
* A password's value is masked whole before ``assignment`` runs (rule ``password_phrase``): after
  a name ending in password/passwd (or ``p@ssword``, ``pa$$word``, ``passw0rd``) and ``:``, ``=``,
  ``：`` or ``＝``, a quoted string with its spaces (triple quotes too) or the rest of the clause;
  after ``is``/``was`` only a quoted value or one whose first word looks like a password. A value
  an earlier rule masked (``***``, ``abcdef…``) is never masked again.
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

from memory_core.config import REDACT_MODES, should_redact

__all__ = [
    "ends_in_open_private_key",
    "may_mask",
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

    __slots__ = ("name", "pattern", "anchors", "offsets", "any_of", "also_any_of", "scan", "prefilter", "accept")

    def __init__(
        self,
        name: str,
        pattern: str,
        anchors: tuple[str, ...],
        *,
        any_of: tuple[str, ...] | None = None,
        also_any_of: tuple[str, ...] = (),
        offsets: tuple[int, ...] = (0,),
        scan: bool = False,
        prefilter: str | Callable[[str], object] | None = None,
        accept: Callable[[str], bool] | None = None,
    ) -> None:
        self.name = name
        # a check of the secret a match found (a card number's Luhn digit): a match it refuses stays
        self.accept = accept
        # a cheap test every text with a match passes (a literal-led regex every match contains):
        # the rule runs only when it passes
        self.prefilter = re.compile(prefilter).search if isinstance(prefilter, str) else prefilter
        self.scan = scan  # anchors only gate the rule; matches start anywhere (regex scan)
        self.pattern = re.compile(pattern, _FLAGS)
        self.anchors = anchors
        self.offsets = offsets
        self.any_of = frozenset(anchors if any_of is None else any_of)
        self.also_any_of = frozenset(also_any_of)

    def triggered(self, present: frozenset[str] | set[str]) -> bool:
        """*present*: the trigger strings found in the lower-cased text (a rule without
        triggers is gated by its ``prefilter`` alone)."""
        if self.any_of and self.any_of.isdisjoint(present):
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
_TOKEN_PREFIXES: Final = ("gho", "ghs", "ghu", "ghr", "whsec", "hf", "shpat", "shpss", "shpca", "shppa", "dckr",
                          "dop", "doo", "dor")


def _has_token_prefix(text: str) -> bool:
    """Whether an underscore in ``text`` follows one of the ``token_prefix`` rule's prefixes
    (a few ``find`` calls instead of one per prefix over the whole text)."""
    i = text.find("_")
    for _ in range(_MAX_CANDIDATES):
        if i == -1:
            return False
        if text[max(0, i - 5):i].lower().endswith(_TOKEN_PREFIXES):
            return True
        i = text.find("_", i + 1)
    return True  # many underscores: let the rule look
_MAX_TELEGRAM_COLONS: Final = 4096

# a value an earlier rule masked: "***" (before a closing quote, bracket or the end) or "abcdef…wxyz"
# (the ellipsis after 6 characters); password_phrase and assignment leave it
_MASKED: Final = rf"\*\*\*(?![^{_WS_CLASS}\"'`,;|.)\]}}])|[^\r\n]{{6}}\u2026"
# password_phrase (see the rule). The label: a word ending in password/passwd, or the same with "@"
# for "a", "$" for "s" or "0" for "o" (p@ssword, pa$$word, passw0rd), then an optional closing
# quote of a JSON/YAML name and Markdown bold (``**Password:**``)
_PW_LABEL: Final = r"(?:p[a@][s$][s$]w(?:[o0]r)?d|passphrase)(?![A-Za-z0-9_])"
_PW_ANCHORS: Final = ("pass", "p@ss", "pa$s", "pas$", "pa$$", "p@$s", "p@s$", "p@$$")
# horizontal whitespace: the label, its separator and its value are on one line
_PW_H: Final = "[ \\t\\u00a0\\u3000]"
# ":"/"=" or their fullwidth forms ("password：x"), "is:" ("the password is: x"); not "==" (code)
# (and Go's ":=", Ruby's, PHP's and Perl's "=>")
_PW_SEP: Final = (rf"{_PW_H}*+(?:(?:is|was){_PW_H}*+)?[:\uff1a]=?\*{{0,2}}{_PW_H}*+"
                  rf"|{_PW_H}*+[=\uff1d](?![=\uff1d])>?\*{{0,2}}{_PW_H}*+")
# "is"/"was" (prose): a value only when quoted or when its first word looks like one (_PW_FIRST)
_PW_IS: Final = rf"{_PW_H}{{1,3}}(?:is|was)(?:{_PW_H}{{1,3}}now)?{_PW_H}{{1,3}}"
# a quoted value, spaces and all: triple quotes first ('"""hunter2"""'), then "...", '...', `...`, “...”;
# not one that starts with a space (in "`password:` then `x`" the backticks close and open code spans)
_PW_QUOTED: Final = (
    '"""(?![ \\t])((?:(?!""")[^\\r\\n]){1,400}+)"""' "|'''(?![ \\t])((?:(?!''')[^\\r\\n]){1,400}+)'''"
    '|"(?![ \\t])([^"\\r\\n]{1,400}+)"' "|'(?![ \\t])([^'\\r\\n]{1,400}+)'"
    "|`(?![ \\t])([^`\\r\\n]{1,400}+)`" "|\u201c(?![ \\t])([^\u201d\\r\\n]{1,400}+)\u201d"
)
# an unquoted value: the rest of the clause, the words up to the end of the line or up to a "," ";"
# "|" "." ")" "]" "}" or quote that is followed by whitespace or the end ("vpn password: purple monkey
# dishwasher 42, user: bob" masks "purple monkey dishwasher 42"). Not an earlier mask ("***",
# "abcdef…"); not a closing bracket, nor a quote with no value after it (a prompt's end in code:
# ``input("Password: ")``; an empty "")
_PW_CH: Final = rf"(?:[^{_WS_CLASS},;|.)\]}}\"'`]|[,;|.)\]}}\"'`](?=[^{_WS_CLASS}]))"
_PW_CLAUSE: Final = (rf"(?!{_MASKED}|[)\]}}]|[\"'`](?![^{_WS_CLASS}\"'`,;|.)\]}}]))"
                     rf"({_PW_CH}++(?:{_PW_H}++{_PW_CH}++)*+)")
# after "is": a first word like a password (a letter and a digit or a symbol, 4-128 characters, no
# "/", "::" or ".x", not a placeholder: as _PW_STRICT below), so "the password is required" stays
_PW_V: Final = rf"[^{_WS_CLASS}\"'`*\u2026\\]"
_PW_FIRST: Final = (
    rf"(?![$<{{])(?!{_PW_V}{{0,128}}?(?:/|::|\.[A-Za-z]))"
    rf"(?={_PW_V}{{0,127}}?[A-Za-z])"
    rf"(?={_PW_V}{{0,127}}?(?:[0-9]|[!@#$%^&+=~?](?=[^{_WS_CLASS}\"'`*\u2026\\.,;:!?)])))"
    rf"(?={_PW_V}{{4,128}}+(?!{_PW_V}))"
)

# a secret's name may go on past its keyword in an environment variable's upper-case name
# (``SECRET_KEY_BASE``, ``GITHUB_TOKEN_RO``, ``WEBHOOK_SIGNING_SECRET_V2``: the thirty-eighth session's
# audit; and Rails' ``secret_key_base``), but not into what names a property of the secret rather than
# the secret (``API_KEY_ID``, ``KEY_PATH``, ``TOKEN_TTL``, ``SECRET_NAME``), nor in code's lower-case
# identifiers (``key_arg=None``, ``self._token_expired = datetime...`` are no secrets)
_NOT_SECRET_SUFFIX: Final = (
    r"(?:IDS?|NAMES?|PATHS?|FILES?|URLS?|URIS?|TYPES?|COUNT|LEN|LENGTH|SIZE|TTL|EXPIRY|EXPIRES|EXPIRATION"
    r"|EXPIRED|ENV|VAR|HEADER|FIELD|PREFIX|FORMAT|ALG|ALGORITHM|VERSION|INDEX|DIR|HINT|LABEL|REF|ROTATION|USAGE"
    r"|POLICY|SCOPES?|ARN|REGION|LOCATION|STORE|VAULT|MANAGER|PROVIDER|SOURCE|MODE|KIND)"
)

_RULES_BEFORE_PEM: Final = (
    # secrets in markup (the thirty-eighth session's audit): .NET's ``<add key="ApiKey" value="..."/>``
    # (assignment above masked the name and kept the value), an element named for one
    # (``<password>x</password>``, ``<apiKey>x</apiKey>``; not ``<monkey>``, nor a plist's ``<key>``)
    # and a plist's ``<key>Password</key><string>x</string>``
    _Rule(
        "markup_secret",
        rf"<add{_S}+key{_S}*={_S}*\"[^\"\r\n]{{0,128}}?(?:key|token|secret|passw(?:or)?d|pwd|connectionstring)"
        rf"[^\"\r\n]{{0,64}}\"{_S}+value{_S}*={_S}*\"([^\"\r\n]{{1,1024}}+)\""
        rf"|<(?!key>)([A-Za-z0-9_.:-]{{0,64}}?(?:(?<=<)|(?<=[_.:-])|(?-i:(?<=[a-z0-9])(?=[A-Z])))"
        rf"(?:api[_-]?key|key|token|secret|passw(?:or)?d|pwd|passphrase))>([^<\r\n]{{1,400}}+)</\2>"
        rf"|<key>[^<\r\n]{{0,128}}?(?:key|token|secret|passw(?:or)?d|pwd)[^<\r\n]{{0,64}}</key>{_S}*"
        rf"<string>([^<\r\n]{{1,1024}}+)</string>",
        ("<",),
        any_of=_SECRET_NAMES,
        also_any_of=("<",),
        scan=True,
    ),
    # a Markdown table row that names a secret and gives it: ``| api_key | x9Fq... |`` (a value of 8+
    # characters with a letter and a digit: a header row's ``| Key | Value |`` stays)
    _Rule(
        "table_secret",
        rf"\|{_PW_H}*+[A-Za-z0-9_ .-]{{0,40}}?(?<![A-Za-z0-9])(?:api[ _-]?key|key|token|secret|passw(?:or)?d|pwd"
        rf"|passphrase)s?(?![A-Za-z0-9]){_PW_H}*+\|{_PW_H}*+`?"
        rf"((?=[^{_WS_CLASS}|`]{{0,199}}[0-9])(?=[^{_WS_CLASS}|`]{{0,199}}[A-Za-z])[^{_WS_CLASS}|`]{{8,200}}+)`?{_PW_H}*+\|",
        ("|",),
        any_of=_SECRET_NAMES,
        also_any_of=("|",),
        scan=True,
    ),
    # a password's whole value (the twenty-third session's audit: "vpn password: purple monkey
    # dishwasher 42" kept all but its first word; 'password: "correct horse battery staple"',
    # 'password = """hunter2"""', "p@ssword: x" and "password：x" were kept whole). It runs before
    # ``assignment`` (which masks one word) and takes the whole quoted string or, unquoted, the rest
    # of the clause; after "is"/"was" only a quoted value or one whose first word looks like a password
    _Rule(
        "password_phrase",
        rf"{_PW_LABEL}[\"']?\*{{0,2}}"
        rf"(?:(?:{_PW_SEP})(?:{_PW_QUOTED}|{_PW_CLAUSE})|{_PW_IS}(?:{_PW_QUOTED}|{_PW_FIRST}{_PW_CLAUSE}))",
        _PW_ANCHORS,
        any_of=("pass", "p@", "$"),
        also_any_of=("=", ":", "\uff1a", "\uff1d", "is", "was"),
    ),
    _Rule(
        "assignment",
        # Reference: \b[A-Z0-9_]*(?:KEY|...)\b... -- the prefix only extends the match to
        # the start of the word and is never masked, so anchoring on the keyword gives
        # the same output while keeping the candidates cheap to find.
        # ... except prose: a bare "Key"/"token" (no name before it), a separator with a space
        # after it and one plain word of at most 12 letters ("Key = API key for ...", "Key: the
        # idea") is kept; "token=abc" (a config line) is not prose.
        rf"(?=[kstp])(?!(?<![A-Za-z0-9_])(?:key|token){_S}*[=:][{_WS_CLASS}]+[A-Za-z]{{1,12}}[.,;:)]?(?:(?=[{_WS_CLASS}])|$))"
        # (nor .NET's <add key="ApiKey" value="..."/>, whose value markup_secret masked: the name stays)
        rf"(?!key{_S}*={_S}*\"[^\"\r\n]{{0,128}}\"{_S}+value{_S}*=)"
        rf"(?:(?-i:(?:KEY|TOKEN|SECRET|PASSW(?:OR)?D)(?:_(?!{_NOT_SECRET_SUFFIX}(?![A-Za-z0-9]))[A-Z0-9]{{1,16}}){{1,2}})"
        rf"|secret_key_base|key|token|secret|passw(?:or)?d)\b"
        rf"[\"']?{_S}*(?:=>|:=|[=:]){_S}*"
        rf"([\"']?)(?!{_MASKED}|-----BEGIN |[=>])([^{_WS_CLASS}\"'\\]+)\1",
        _SECRET_NAMES,
        also_any_of=("=", ":"),
    ),
    _Rule(
        "json_field",
        rf"\"(?:api[_-]?key|token|secret|password|passwd|access[_-]?token|refresh[_-]?token"
        rf"|auth[_-]?token|id[_-]?token|client[_-]?secret|private[_-]?key(?:[_-]?id)?|pwd|pass)\"{_S}*:{_S}*"
        rf"\"([^\"\u2026]+)\"",
        ('"api', '"token', '"secret', '"passw', '"access', '"refresh', '"auth', '"id', '"client', '"private',
         '"pwd"', '"pass"'),
        any_of=(*_SECRET_NAMES, '"pwd"', '"pass"'),
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
    _Rule("basic_auth", rf"Authorization{_S}*[:=]{_S}*(?:Basic|Token|Digest){_S}+([^{_WS_CLASS}\"']{{1,4096}}+)",
          ("authorization",)),
    # DB_PASS=x, SMTP-PASS: x, MYSQL_PWD=x, pw: x (PASS alone is prose: "boarding pass: gate 12")
    _Rule("pass_assignment",
          rf"(?:[_-]pass|[_-]?pwd|(?<![A-Za-z0-9_-])pw)\b[\"']?{_S}*(?:=>|:=|[=:]){_S}*([\"']?)(?![=>])([^{_WS_CLASS}\"'\\]+)\1",
          ("_pass", "-pass", "_pwd", "-pwd", "pwd", "pw"), any_of=("pass", "pw"), also_any_of=("=", ":")),
    # a passphrase is often several words: the rest of the line
    _Rule("passphrase", rf"passphrase[\"']?{_S}*[=:\uff1a\uff1d][ \t]*([^\r\n]{{1,400}}+)", ("passphrase",),
          also_any_of=("=", ":", "\uff1a", "\uff1d")),
)

# a credential after a bare label (pass_label, wifi_key): never whitespace, a quote, a backtick, "*"
# or "…" (an earlier mask); _H: the horizontal whitespace between a label and its value (one line)
_VAL: Final = rf"[^{_WS_CLASS}\"'`*\u2026\\]"
_H: Final = "[ \\t\\u00a0]"
# a value with a letter and a digit or a symbol inside it ("hunter2", "Tr0ub4dor&3"), 4-128 characters,
# no "/", "::" or ".x" (a path, a test id, a file name), not a placeholder (${X}, $(x), {{x}}, <x>):
# "yes", "12/12", "100%", "test_x.py" and "gate" are not
_PW_STRICT: Final = (
    rf"(?![$<{{])(?!{_VAL}{{0,128}}?(?:/|::|\.[A-Za-z]))"
    rf"(?={_VAL}{{0,127}}?[A-Za-z])"
    rf"(?={_VAL}{{0,127}}?(?:[0-9]|[!@#$%^&+=~?](?=[^{_WS_CLASS}\"'`*\u2026\\.,;:!?)])))"
    rf"({_VAL}{{4,128}}+)(?!{_VAL})"
)
# after a label that names what is logged into ("root pass:"): a value as above, or one word of 3+
# characters that ends the clause (or a quote, or inline code) and is not a prose word ("root pass:
# toor"; "root pass: none", "admin pass: required for login" are not)
_PW_LAX: Final = (
    rf"(?:{_PW_STRICT}|(?!(?:none|n/?a|same|see|ask|tbd|todo|unknown|unset|empty|blank|required|needed|missing"
    rf"|changed|reset|expired|disabled|enabled|the|an?|in|on|off|from|is|was|not|no|yes|ok|okay|please|check"
    rf"|stored|saved|below|above|here|there|default|it|that|this|valid|invalid|works|working|fine|set|sent"
    rf"|given)(?![A-Za-z0-9]))"
    rf"([^{_WS_CLASS}\"'`*\u2026\\,;|)]{{3,64}}+)(?={_H}*+(?:[\r\n,;|)\"'`]|\Z)))"
)
# a Wi-Fi passphrase: 8-63 characters (WPA's limits), a lower-case letter and a digit or a symbol; not
# a mode or a standard (WPA3, 802.11ac), a URL, a Markdown link or a bracketed aside
_WIFI_VALUE: Final = (
    rf"(?!wpa|wep|wps|802\.)(?![(\[<{{$])(?!{_VAL}{{0,63}}?(?:://|\]\())"
    rf"((?-i:(?={_VAL}{{0,62}}?[a-z])(?={_VAL}{{0,62}}?(?:[0-9]|[!@#$%^&*+=~?](?=[^{_WS_CLASS}\"'`*\u2026\\.,;:!?)]))))"
    rf"{_VAL}{{8,63}}+)(?!{_VAL})"
)

_AWS_KEY_ID: Final = r"(?<![A-Za-z0-9])(?-i:(?:AKIA|ASIA)[0-9A-Z]{16})(?![A-Za-z0-9])"
_AWS_SECRET: Final = (r"(?<![A-Za-z0-9/+=])((?-i:(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
                      r"(?=[A-Za-z0-9/+]{0,39}[0-9])[A-Za-z0-9/+]{40}))(?![A-Za-z0-9/+=])")

_RULES_AFTER_PEM: Final = (
    # Rules added by issue 17 (what an outside attack got through). Every quantifier over a
    # token is possessive or bounded and every start is at an anchor or a token boundary, so
    # each character is scanned a bounded number of times: linear on any line.
    # a 40-character AWS secret access key on the same line as an AKIA/ASIA key id, in either order,
    # with no "aws" or "secret" in the text ("AKIA... Xq9v...": the twenty-third session's audit).
    # Before aws_access_key_id masks the id; mixed case and a digit as aws_secret_key (a 40-hex git
    # hash beside a key id stays); at most 400 characters between them
    _Rule("aws_key_pair",
          rf"{_AWS_KEY_ID}[^\r\n]{{0,400}}?{_AWS_SECRET}|{_AWS_SECRET}(?=[^\r\n]{{0,400}}?{_AWS_KEY_ID})",
          ("akia", "asia"), scan=True),
    _Rule("aws_access_key_id", r"(?<![A-Za-z0-9])((?-i:(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}))(?![A-Za-z0-9])",
          ("akia", "asia", "abia", "acca")),
    _Rule("stripe", r"(?<![A-Za-z0-9_])((?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}+)",
          ("sk_live_", "sk_test_", "rk_live_", "rk_test_")),
    _Rule("gitlab", r"(?<![A-Za-z0-9_])(gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_-]{20,}+)",
          ("glpat-", "gldt-", "glrt-", "glptt-")),
    _Rule("jwt", r"(?<![A-Za-z0-9_-])((?-i:eyJ)[A-Za-z0-9_-]{5,}+\.(?-i:eyJ)[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{5,}+)",
          ("eyj",)),
    # user:password@host in a URL (postgres://admin:...@db, https://u:p@host, redis://:pw@host)
    _Rule("url_password", r"://[^\s:/@]{0,256}+:([^\s/@]{1,256}+)@", ("://",)),
    # prose: "the password is hunter2hunter2" (only a value with a digit or a symbol: "the
    # password is required" stays)
    _Rule("password_prose",
          rf"pass(?:w(?:or)?d|phrase){_S}{{1,3}}(?:is|was|will be|=|:){_S}{{1,3}}(?:now{_S}{{1,3}})?"
          rf"[\"'`]?([^{_WS_CLASS}\"'`*\u2026]{{0,64}}?[0-9!@#$%^&_+=~?][^{_WS_CLASS}\"'`*\u2026]{{0,64}}+)(?!\u2026)",
          ("passw", "passphrase")),
    # prose that names a credential and gives it (seventeenth session: a helper's audit got these
    # through): "the api key is 9f8e7d6c5b4a", "the token for the staging API: 9f8e...", "password
    # for the router is Kx9!mPq2", "pw for wifi: hunter2", "use API key 9f8e7d6c for staging",
    # "password hunter2". The name, up to two words of what it is for ("for the staging API"),
    # then "is"/"was"/"="/":" (a key, password or token: nothing), then a value of 6+ characters
    # with a digit or a symbol other than "_" ("the key is user_id" names a field) and not a
    # sentence's last mark ("rehearse the key slides?"): "the key is
    # hard to find", "the token expired",
    # "password reset flow" and "the secret sauce is love" stay
    _Rule("secret_prose",
          rf"(?<![A-Za-z0-9])(?:api{_S}?[_-]?key|access{_S}key|secret{_S}key|private{_S}key|key|token|secret|passw(?:or)?d|passcode"
          rf"|pin{_S}code|pw)(?![A-Za-z0-9_-])"
          rf"(?:{_S}{{1,3}}(?:for|to|of|on|at){_S}{{1,3}}(?:(?:the|my|our|your|this){_S}{{1,3}})?"
          rf"[A-Za-z0-9_.-]{{1,30}}+(?:{_S}{{1,3}}(?![Ii][Ss]\b|[Ww][Aa][Ss]\b)[A-Za-z0-9_.-]{{1,30}}+)?)?"
          rf"(?:{_S}{{1,3}}(?:is|was|will{_S}be)(?:{_S}{{1,3}}now)?{_S}{{1,3}}|{_S}*[=:]{_S}*"
          # nothing between: after an API key, a password or a token named alone ("use API key X",
          # "password hunter2"), not after "key" or "secret" ("the secret block](https://...)")
          rf"|(?:(?<=api key)|(?<=api_key)|(?<=apikey)|(?<=api-key)|(?<=password)|(?<=passwd)|(?<=pw)|(?<=token))"
          rf"{_S}{{1,3}})"
          # a value: no URL, no Markdown link (url_password takes a URL's password)
          rf"[\"'`]?(?=[^{_WS_CLASS}\"'`*\u2026\\]{{6,}})(?![^{_WS_CLASS}]*(?:://|\]\())"
          rf"([^{_WS_CLASS}\"'`*\u2026\\]{{0,64}}?(?:[0-9]|[!@#$%^&+=~?](?=[^{_WS_CLASS}\"'`*\u2026\\.,;:!?)]))"
          rf"[^{_WS_CLASS}\"'`*\u2026\\]{{0,64}}+)(?!\u2026)",
          ("api", "access", "secret", "private", "key", "token", "passw", "passcode", "pin", "pw"),
          offsets=(0,)),
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
    # the eighteenth session's audit: Voyage's own keys (one of memory-core's providers), xAI's,
    # Tailscale's, a Docker config's registry login, a long key given after the word "key", and
    # "set/changed the ... key/password to X"
    _Rule("voyage_key", r"(?<![A-Za-z0-9_-])((?-i:pa-)(?=[A-Za-z0-9_-]{0,63}[0-9])(?=[A-Za-z0-9_-]{0,63}[A-Za-z])"
          r"[A-Za-z0-9_-]{32,64}+)(?![A-Za-z0-9_-])", ("pa-",)),
    _Rule("xai", r"(?<![A-Za-z0-9_-])((?-i:xai-)[A-Za-z0-9]{32,}+)", ("xai-",)),
    _Rule("tailscale", r"(?<![A-Za-z0-9_-])((?-i:tskey-)[A-Za-z0-9-]{16,}+)", ("tskey-",)),
    _Rule("docker_auth", rf"\"auth\"{_S}*:{_S}*\"([A-Za-z0-9+/]{{16,}}+={{0,2}})\"", ('"auth"',)),
    _Rule("key_value", rf"(?<![A-Za-z0-9_-])key{_S}{{1,3}}((?=[A-Za-z0-9_+/=]{{0,127}}[0-9])"
          rf"(?=[A-Za-z0-9_+/=]{{0,127}}[A-Za-z])[A-Za-z0-9_+/=]{{24,128}}+)(?![A-Za-z0-9_+/=.-])", ("key",)),
    _Rule("secret_set",
          rf"(?<![A-Za-z0-9])(?:set|changed?|updated?|rotated?|reset){_S}{{1,3}}(?:(?:the|my|our|your|this){_S}{{1,3}})?"
          rf"(?:[A-Za-z0-9_.-]{{1,30}}+{_S}{{1,3}}){{0,2}}(?:api{_S}?[_-]?key|key|token|secret|passw(?:or)?d|passcode|pin)"
          rf"{_S}{{1,3}}to{_S}{{1,3}}[\"'`]?(?=[^{_WS_CLASS}\"'`*\u2026\\]{{6,}})(?![^{_WS_CLASS}]*(?:://|\]\())"
          rf"([^{_WS_CLASS}\"'`*\u2026\\]{{0,64}}?(?:[0-9]|[!@#$%^&+=~?](?=[^{_WS_CLASS}\"'`*\u2026\\.,;:!?)]))"
          rf"[^{_WS_CLASS}\"'`*\u2026\\]{{0,64}}+)",
          ("set", "change", "update", "rotate", "reset"), also_any_of=("key", "token", "secret", "passw", "pin")),
    # bare labels a credential hides behind (an audit got these through): "pass: hunter2", "root pass:
    # toor", "PIN: 4821", "the door code is 4821", "WPA2 Tr0ub4dor&3", "wifi: HomeNet / Tr0ub4dor&3".
    # A label and its value are on one line (no rule spans a line break: a section read whole never
    # joins "## Pin" to the "2024 plans" under it). Three rules, not five: every rule costs a gate
    # test on every text with a trigger.
    # "pass" alone is prose ("boarding pass: gate 12", "a pass: yes", Go's "--- PASS: TestX"):
    # 1. after what it logs into ("wifi pass: hunter2", "root pass: toor", "db pass = s3cret") or after
    #    a user name ("user: bob, pass: hunter"), any one word that ends the clause (not a prose word:
    #    "admin pass: required for login", "root pass: none") or a value as in 2;
    # 2. starting the line or a clause ("user: bob / pass: x") or after my/our/your/new/old/..., lower-case
    #    or capitalised ("PASS:" is a test runner's), a value with a letter and a digit or a symbol and
    #    no "/", "::" or ".ext" (a path, a test id)
    _Rule("pass_label",
          rf"(?<![A-Za-z0-9_-])"
          rf"(?:(?:(?:wi-?fi|wlan|router|root|admin|db|database|login|user|ssh|sudo|mysql|postgres|redis|s?ftp|smtp"
          rf"|imap|e-?mail|mail|vpn|account|server|nas){_H}{{1,2}}"
          rf"|(?:user(?:name)?|login){_H}{{0,3}}[:=]{_H}{{0,3}}[^{_WS_CLASS}\"'`*\u2026\\,;/|]{{1,64}}+"
          rf"{_H}{{0,3}}[,;/|]?{_H}{{1,3}}(?:and{_H}{{1,3}})?)"
          rf"pass(?![A-Za-z0-9_-])\*{{0,2}}"
          rf"(?:{_H}{{0,3}}[:=]{_H}{{0,3}}[\"'`]?{_PW_LAX}"
          rf"|(?:{_H}{{1,3}}(?:is|was){_H}{{1,3}}|{_H}{{1,3}})[\"'`]?{_PW_STRICT})"
          rf"|(?:(?<![A-Za-z0-9_][ \t])(?<![A-Za-z0-9_][ \t]{{2}})|(?<=\bmy )|(?<=\bour )|(?<=\byour )|(?<=\bnew )"
          rf"|(?<=\bold )|(?<=\btemp )|(?<=\bdefault )|(?<=\binitial )|(?<=\bcurrent )|(?<=\bpc )|(?<=\blaptop ))"
          rf"(?:(?-i:pass|Pass)|(?-i:PASS)(?={_H}{{0,3}}=))(?![A-Za-z0-9_-])\*{{0,2}}"
          rf"(?:{_H}{{0,3}}[:=]{_H}{{0,3}}|{_H}{{1,3}}(?:is|was){_H}{{1,3}})[\"'`]?{_PW_STRICT})",
          ("pass", "wifi", "wi-fi", "wlan", "router", "root", "admin", "db", "database", "login", "user", "ssh",
           "sudo", "mysql", "postgres", "redis", "ftp", "sftp", "smtp", "imap", "email", "e-mail", "mail", "vpn",
           "account", "server", "nas"),
          any_of=("pass",)),
    # PINs and keypad codes: 4-8 digits after pin/PIN code/PIN number/PUK/passcode or a door, alarm,
    # gate, lock, safe, garage, keypad, entry, access, unlock, security or building code. A GPIO
    # "pin 7", "pin 12 of the chip" (under 4 digits), "error code 1234", "status code 4040", "exit
    # code 1" and "HTTP code 500" (no such label) stay
    _Rule("pin_code",
          rf"(?=[pPcC])"
          rf"(?:(?<![A-Za-z0-9_-])(?:pin|puk)(?:[ -]?(?:code|number|no\.?))?"
          rf"|(?:(?<=\bdoor )|(?<=\bdoor-)|(?<=\balarm )|(?<=\bgate )|(?<=\block )|(?<=\bsafe )|(?<=\bgarage )"
          rf"|(?<=\bkeypad )|(?<=\bentry )|(?<=\baccess )|(?<=\bunlock )|(?<=\bsecurity )|(?<=\bbuilding )"
          rf"|(?<=\bpass))code)"
          rf"(?![A-Za-z0-9_-])"
          rf"(?:{_H}{{1,3}}(?:is|was)(?:{_H}{{1,3}}now)?{_H}{{1,3}}|{_H}{{0,3}}[:=]?{_H}{{0,3}})[\"'`#]?"
          rf"([0-9]{{4,8}}+)(?![0-9A-Za-z_]|[.,:/-][0-9])",
          ("pin", "puk", "code")),
    # a Wi-Fi passphrase with no "password" before it (8-63 characters, a lower-case letter and a digit
    # or a symbol):
    # 1. named by its security mode: "WPA2 Tr0ub4dor&3", "WPA2-PSK: x", "PSK x", "WEP key x" ("WPA2
    #    Enterprise", "WPA2 is a protocol", "WPA2 AES-CCMP", "WPA2 802.11ac" stay);
    # 2. after "wifi:", a network's name (kept) and a separator: "wifi: HomeNet / Tr0ub4dor&3", "WLAN:
    #    Office, x" ("wifi: down again", "wifi: on, bt2: off" stay)
    _Rule("wifi_key",
          rf"(?<![A-Za-z0-9_-])"
          rf"(?:(?:(?:wpa[23]?|wep)(?:[-/ ](?:psk|personal|sae|wpa[23]))?(?:[-/ ](?:psk|personal|sae))?|psk)"
          rf"(?![A-Za-z0-9_-])(?:{_H}{{1,3}}(?:key|passphrase|password|pass|pwd|pw)(?![A-Za-z0-9_-]))?"
          rf"(?:{_H}{{1,3}}(?:is|was){_H}{{1,3}}|{_H}{{0,3}}[:=]{_H}{{0,3}}|{_H}{{1,3}})"
          rf"|(?:wi-?fi|wlan|ssid)(?:{_H}{{1,3}}(?:network|name|ssid|login|details|creds|credentials))?"
          rf"{_H}{{0,3}}[:=]{_H}{{0,3}}"
          rf"[^{_WS_CLASS}\"'`*\u2026\\/,;|]{{1,32}}+(?:{_H}{{1,2}}[^{_WS_CLASS}\"'`*\u2026\\/,;|]{{1,32}}+){{0,3}}"
          rf"{_H}{{0,3}}[/,;|]{_H}{{0,3}}"
          rf"(?:(?:pw|pwd|pass|password|key|psk)(?![A-Za-z0-9_-]){_H}{{0,3}}[:=]?{_H}{{0,3}})?"
          rf"(?![\"'`]?{_VAL}{{0,63}}?[:=]))"
          rf"[\"'`]?{_WIFI_VALUE}",
          ("wpa", "wep", "psk", "wifi", "wi-fi", "wlan", "ssid")),
    # issue 22: formats an outside attack got into the index from transcripts
    _Rule("slack_webhook", r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/-]{10,}+)",
          ("hooks.slack.com/",)),
    _Rule("google_oauth_secret", r"(?<![A-Za-z0-9_-])(GOCSPX-[A-Za-z0-9_-]{10,}+)", ("gocspx-",)),
    _Rule("google_oauth_token", r"(?<![A-Za-z0-9_-])(ya29\.[A-Za-z0-9_.-]{10,}+)", ("ya29.",)),
    _Rule("twilio", r"(?<![A-Za-z0-9])((?-i:SK[0-9a-fA-F]{32}))(?![A-Za-z0-9])", ("sk",), any_of=(),
          scan=True, prefilter=r"SK[0-9a-fA-F]{32}"),
    _Rule("sendgrid", r"(?<![A-Za-z0-9])((?-i:SG)\.[A-Za-z0-9_-]{16,}+\.[A-Za-z0-9_-]{16,}+)", ("sg.",)),
    _Rule("pypi", r"(?<![A-Za-z0-9_-])(pypi-[A-Za-z0-9_-]{16,}+)", ("pypi-",)),
    _Rule("discord", r"(?<![A-Za-z0-9_-])((?-i:[MNO])[A-Za-z0-9_-]{23,27}+\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}+)"
          r"(?![A-Za-z0-9_-])", (".",), scan=True, prefilter=r"\.[A-Za-z0-9_-]{6}\."),
    # tokens named by a prefix with an underscore: one rule, one gate ("_" in the text)
    _Rule("token_prefix",
          r"(?<![A-Za-z0-9_])(gh[osur]_[A-Za-z0-9]{20,}+|whsec_[A-Za-z0-9+/=]{10,}+|hf_[A-Za-z0-9]{20,}+"
          r"|shp(?:at|ss|ca|pa)_[A-Za-z0-9]{16,}+|dckr_(?:pat|oat)_[A-Za-z0-9_-]{10,}+"
          r"|do[opr]_v1_[A-Za-z0-9]{16,}+)",
          ("gho_", "ghs_", "ghu_", "ghr_", "whsec_", "hf_", "shpat_", "shpss_", "shpca_", "shppa_", "dckr_",
           "dop_v1_", "doo_v1_", "dor_v1_"), any_of=("_",), prefilter=_has_token_prefix),
    # the thirty-eighth session's audit: more services' tokens, each by its documented prefix and shape
    # (HashiCorp Vault, Databricks, Linear, Notion, Atlassian, Postman, New Relic, Grafana, Doppler,
    # 1Password service accounts, Square, Figma, Mailgun)
    _Rule("service_token",
          r"(?<![A-Za-z0-9_.-])("
          r"hv[sbr]\.[A-Za-z0-9_-]{24,}+|(?-i:dapi)[0-9a-f]{32}(?:-[0-9])?|lin_(?:api|oauth)_[A-Za-z0-9]{32,}+"
          r"|ntn_[A-Za-z0-9]{32,}+|(?-i:secret_)[A-Za-z0-9]{43}(?![A-Za-z0-9])|(?-i:ATATT)[A-Za-z0-9_=-]{32,}+"
          r"|(?-i:PMAK)-[0-9a-f]{24}-[0-9a-f]{34}|(?-i:NRAK)-[A-Z0-9]{27}|gl(?:sa|c)_[A-Za-z0-9_=+/-]{32,}+"
          r"|dp\.(?:st|ct|sa|scim|audit)\.[A-Za-z0-9._-]{32,}+|ops_[A-Za-z0-9_-]{40,}+|sq0(?:atp|csp)-[A-Za-z0-9_-]{22,}+"
          r"|figd_[A-Za-z0-9_-]{32,}+|key-[0-9a-f]{32}(?![0-9a-f]))",
          ("hvs.", "hvb.", "hvr.", "dapi", "lin_api_", "lin_oauth_", "ntn_", "secret_", "atatt", "pmak-", "nrak-",
           "glsa_", "glc_", "dp.", "ops_", "sq0", "figd_", "key-")),
    # a Firebase Cloud Messaging server key ("AAAA" and 7 characters, ":APA91b", then the token)
    _Rule("fcm", r"(?<![A-Za-z0-9_-])([A-Za-z0-9_-]{11}:(?-i:APA91b)[A-Za-z0-9_-]{100,}+)", ("apa91b",), scan=True),
    # a bearer token in a URL-encoded header ("Authorization=Bearer%20...")
    _Rule("bearer_encoded", r"Bearer(?:%20|\+)([A-Za-z0-9._~%+/=-]{18,}+)", ("bearer%20", "bearer+")),
    # a payment card's number (13-19 digits, in groups or not, its Luhn check digit right) and its
    # CVV, where the text says card, Visa, Mastercard, Amex, credit, debit or CVV (the thirty-eighth
    # session's audit: "my card is 4111 1111 1111 1111, cvv 123" was stored and written in clear); an
    # order or tracking number with no such word stays
    # (the words whole: an "electrocardiogram" beside a float's 16 digits is no card; nor is a
    # number with a decimal point)
    _Rule("card_number", r"(?<![0-9.,-])((?:[0-9][ -]?){12,18}[0-9])(?![0-9-]|[.,][0-9])",
          ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9"),
          any_of=("card", "visa", "mastercard", "amex", "credit", "debit", "cvv", "cvc"), scan=True,
          prefilter=re.compile(r"(?<![A-Za-z])(?:cards?|visa|mastercard|amex|credit|debit|cvv|cvc)(?![A-Za-z])",
                               re.IGNORECASE).search,
          accept=lambda v: _luhn(v)),
    _Rule("card_cvv", rf"(?<![A-Za-z])(?:cvv2?|cvc2?|csc|security{_S}code)(?![A-Za-z]){_S}{{0,3}}(?:(?:is|was){_S}{{1,3}})?[:=#]?{_S}{{0,3}}"
          rf"([0-9]{{3,4}})(?![0-9])", ("cvv", "cvc", "csc", "security")),
    _Rule("age", r"(AGE-SECRET-KEY-1[A-Za-z0-9]{10,}+)", ("age-secret-key-",)),
    _Rule("azure_sas", r"(?<=[?&;])sig=([A-Za-z0-9%+/=]{10,}+)", ("sig=",)),
    _Rule("sshpass", rf"sshpass{_S}+-p{_S}*([\"']?)([^{_WS_CLASS}\"']{{1,512}}+)\1", ("sshpass",), any_of=(" -p",)),
    _Rule("mysql_p", rf"(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\r\n]{{0,200}}?{_S}-p([^{_WS_CLASS}\-][^{_WS_CLASS}]{{0,512}}+)",
          ("mysql", "mariadb"), any_of=(" -p",)),
    _Rule("curl_user", rf"(?<![A-Za-z0-9_-])(?:-u|--user)(?:{_S}+|=)([\"']?)[^{_WS_CLASS}:\"']{{1,256}}+:([^{_WS_CLASS}\"']{{1,256}}+)\1",
          ("-u", "--user"), any_of=("-u ", "-u=", "--user"), also_any_of=(":",)),
    # Telegram bot token: the match starts 8-10 digits before the ':'.
    _Rule(
        "telegram",
        r"(?<![A-Za-z0-9_])([0-9]{8,10}:[A-Za-z0-9_-]{35})(?![A-Za-z0-9_-])",
        (":",),
        offsets=(10, 9, 8),
        any_of=(":",),
    ),
)

# private key blocks: PEM's (``-----BEGIN RSA PRIVATE KEY-----``), OpenPGP's armour (``-----BEGIN PGP
# PRIVATE KEY BLOCK-----``, the thirty-eighth session's audit: it reached the index, a provider and a
# ``write`` whole) and PuTTY's ``.ppk`` (its ``Private-Lines: N`` up to its ``Private-MAC:`` line; the
# public lines above them stay)
_PEM_TRIGGERS: Final = ("private key", "private-lines", "private-mac")
_PEM_BEGIN: Final = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|Private-Lines:[ \t]*+[0-9]{1,4}+", _FLAGS)
_PEM_END: Final = re.compile(r"-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|Private-MAC:", _FLAGS)
_PEM_LINE_SPLIT: Final = re.compile(r"\r?\n")

# Trigger substrings (lower-case) for the gates, grouped behind a one-character
# sentinel: substrings containing '-' or '_' are only searched for when that character
# occurs at all (a memchr-speed test), which keeps ordinary prose cheap.
_ALL_TRIGGERS: Final = frozenset(
    {t for r in (*_RULES_BEFORE_PEM, *_RULES_AFTER_PEM) for t in (*r.any_of, *r.also_any_of)} | set(_PEM_TRIGGERS)
)
_DASH_TRIGGERS: Final = tuple(sorted(t for t in _ALL_TRIGGERS if "-" in t and len(t) > 1))
_UNDERSCORE_TRIGGERS: Final = tuple(
    sorted(t for t in _ALL_TRIGGERS if "_" in t and "-" not in t and len(t) > 1)
)
_PLAIN_TRIGGERS: Final = tuple(sorted(_ALL_TRIGGERS.difference(_DASH_TRIGGERS, _UNDERSCORE_TRIGGERS),
                                      key=lambda t: (len(t), t)))
# a plain trigger is looked for only when the longest other trigger inside it is present
# ("passphrase" only where "pass" is): shorter ones come first
_INSIDE: Final = {t: max((o for o in _PLAIN_TRIGGERS if o != t and o in t), key=len, default=None)
                  for t in _PLAIN_TRIGGERS}


# the triggers that are words (3+ letters): what a label before a secret holds
_WORD_TRIGGERS: Final = frozenset(t for t in _ALL_TRIGGERS if sum(c.isalpha() for c in t) >= 3 or t == "pw")

# rules without a trigger substring (gated by their prefilter alone)
_UNGATED_RULES: Final = tuple(r for r in (*_RULES_BEFORE_PEM, *_RULES_AFTER_PEM) if not r.any_of and r.prefilter)


def _present_triggers(lowered: str) -> set[str]:
    present: set[str] = set()
    for t in _PLAIN_TRIGGERS:
        inside = _INSIDE[t]
        if (inside is None or inside in present) and t in lowered:
            present.add(t)
    if "-" in lowered:
        present.update(t for t in _DASH_TRIGGERS if t in lowered)
    if "_" in lowered:
        present.update(t for t in _UNDERSCORE_TRIGGERS if t in lowered)
    return present


def may_mask(text: str) -> bool:
    """Whether ``text`` may name a secret for what follows it: one of the rules' word triggers
    (``key``, ``token``, ``pass``, ``pin``, ``aws``, ``wifi``, ``bearer``, ...; not punctuation
    such as ``:``, which every chat line has) is in it. A transcript's message is redacted once
    more with the one before it as its context only then (:func:`memory_core.sources.sessions`)."""
    return not _WORD_TRIGGERS.isdisjoint(_present_triggers(text.lower()))


def _luhn(number: str) -> bool:
    """Whether a card number's digits (spaces and dashes aside) pass the Luhn check."""
    digits = [int(c) for c in number if c.isdigit()]
    if not 13 <= len(digits) <= 19 or len(set(digits)) == 1:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def mask_token(token: str) -> str:
    """Mask one secret: ``"***"`` below 18 characters or when it holds a space (a passphrase: its
    first 6 and last 4 characters are whole words of it, "purple…r 42"), else ``first6…last4``."""
    if len(token) < REDACT_MIN_LENGTH or any(c.isspace() for c in token):
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


def ends_in_open_private_key(text: str) -> bool:
    """Whether ``text`` ends inside a PEM private key block (its last BEGIN line has no END after
    it): what follows is the key's body, whatever it looks like."""
    begins = list(_PEM_BEGIN.finditer(text))
    return bool(begins) and _PEM_END.search(text, begins[-1].end()) is None


def _mask_pem_keep_lines(block: str) -> str:
    """A PEM block masked with its line count kept: first line, ``…redacted…``, empty lines,
    last line (so the line numbers of a note's chunks stay those of the file)."""
    lines = block.split("\n")
    if len(lines) < 3:
        return _mask_pem(block) if len(lines) == 1 else f"{lines[0]}\n{lines[-1]}"
    return "\n".join([lines[0], f"{ELLIPSIS}redacted{ELLIPSIS}", *([""] * (len(lines) - 3)), lines[-1]])


# the body of a key whose END line is missing (cut off, pasted in part): base64 runs after BEGIN
# (blank lines too: two writes of a note are a blank line apart)
_PEM_OPEN_BODY: Final = re.compile(r"(?:(?:(?:[ \t]*+\r?\n)++[ \t]*+|[ \t]++)[A-Za-z0-9+/=]{16,}+)+")


def _mask_open_pem(block: str) -> str:
    """A BEGIN line and a body with no END: the BEGIN line, ``…redacted…``, the line count kept."""
    lines = block.split("\n")
    if len(lines) == 1:
        return "***"
    return "\n".join([lines[0], f"{ELLIPSIS}redacted{ELLIPSIS}", *([""] * (len(lines) - 2))])


def _redact_pem(text: str, mask: Callable[[str], str] = _mask_pem) -> str:
    """Linear-time equivalent of ``BEGIN ... PRIVATE KEY-----[\\s\\S]+?-----END ...``; a BEGIN
    with no END after it masks the base64 lines that follow it (a key cut short is a key)."""
    out: list[str] = []
    pos = 0
    scan = 0
    no_end = False  # no END after some BEGIN means none after any later BEGIN either
    while True:
        begin = _PEM_BEGIN.search(text, scan)
        if begin is None:
            break
        # [\s\S]+? needs at least one character between the markers.
        end = None if no_end else _PEM_END.search(text, begin.end() + 1)
        if end is None:
            no_end = True
            body = _PEM_OPEN_BODY.match(text, begin.end())
            if body is None:
                scan = begin.end()
                continue
            out.append(text[pos : begin.start()])
            out.append(_mask_open_pem(text[begin.start() : body.end()]))
            pos = scan = body.end()
            continue
        out.append(text[pos : begin.start()])
        out.append(mask(text[begin.start() : end.end()]))
        pos = scan = end.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


_B64_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_PEM_BODY_MAX: Final = 16384  # how far before an END line a key's body is looked for
_PGP_CRC: Final = re.compile(r"(?<=\n)=[A-Za-z0-9+/]{4}[ \t]*+\r?\n[ \t]*+$")


def _orphan_body_start(text: str, lo: int, end: int) -> int | None:
    """The start of the base64 runs (16+ characters each, whitespace between and before ``end``)
    that end just before ``end`` and begin no earlier than ``lo``; None when there are none."""
    first = None
    j = end
    crc = _PGP_CRC.search(text, max(lo, end - 16), end)
    if crc is not None:  # OpenPGP armour's checksum line ("=AbCd") sits between the body and END
        first = j = crc.start()
    while True:
        k = j
        while k > lo and text[k - 1] in " \t\r\n":
            k -= 1
        if k == end:
            return None  # a body ends with a line break (or a space) before its END line
        t = k
        while t > lo and text[t - 1] in _B64_CHARS:
            t -= 1
        if k - t < 16 or (t > lo and text[t - 1] not in " \t\r\n"):
            return first
        first = j = t


_RUN: Final = re.compile(r"[^\s]+(?:[ \t]+[^\s]+)*")


def _mask_body(body: str) -> str:
    """A key's body: its first run of text ``…redacted…``, the others empty, the line breaks kept."""
    first = _RUN.search(body)
    if first is None:
        return body
    return body[:first.start()] + f"{ELLIPSIS}redacted{ELLIPSIS}" + _RUN.sub("", body[first.end():])


def _redact_orphan_pem_end(text: str) -> str:
    """An END line with a key's body before it and no BEGIN (the BEGIN was in an earlier write or
    message, or cut off): the body is masked (first run ``…redacted…``, the line count kept)."""
    out: list[str] = []
    pos = 0
    for m in _PEM_END.finditer(text):
        start = _orphan_body_start(text, max(pos, m.start() - _PEM_BODY_MAX), m.start())
        if start is None:
            continue
        out.append(text[pos:start])
        out.append(_mask_body(text[start:m.start()]))
        pos = m.start()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _apply(rule: _Rule, text: str, lowered: str | None, present: set[str]) -> str:
    """``rule.pattern.sub(_mask_match, text)``, trying only the anchored candidates.

    *lowered* must be ``text.lower()`` with the same length (positions line up), or
    ``None`` to use the plain regex scan.
    """
    accept = rule.accept
    mask = _mask_match if accept is None else \
        (lambda m: _mask_match(m) if accept(m.group(m.lastindex or 0)) else m.group(0))
    cands = rule.candidates(lowered, present) if lowered is not None else None
    if cands is None:
        return rule.pattern.sub(mask, text)
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
        parts.append(mask(m))
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
    if not present and not any(r.prefilter(text) for r in _UNGATED_RULES):  # type: ignore[misc]
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
    if not present.isdisjoint(_PEM_TRIGGERS):
        new = _redact_orphan_pem_end(_redact_pem(text))
        if new != text:
            text = new
            pos_lower = _positional_lower(text) if pos_lower is not None else None
    for rule in _RULES_AFTER_PEM:
        if rule.triggered(present) and (rule.prefilter is None or rule.prefilter(text)):
            new = _apply(rule, text, pos_lower, present)
            if new is not text:
                text = new
                pos_lower = _positional_lower(text) if pos_lower is not None else None
    return text


# a line that ends with a secret's name and its separator: the value is on the next line(s)
# (multi-line JSON or YAML: ``"password":`` / ``api_key: |``)
# (a name, not the end of a word: "turkey:", "monkey:", "hockey:" name nothing; "api_key:", "apiKey:",
# "apikey:", "clientSecret:", "db_password:" do)
_NAME_START: Final = (r"(?:(?<![a-z0-9])|(?-i:(?<=[a-z0-9])(?=[A-Z]))|(?<=api)|(?<=access)|(?<=secret)|(?<=private)"
                      r"|(?<=auth)|(?<=client)|(?<=refresh)|(?<=session)|(?<=master)|(?<=app)|(?<=admin)|(?<=db))")
_KEY_ALONE: Final = re.compile(
    rf"(?:{_NAME_START}(?:key|token|secret|passw(?:or)?d|pwd|passphrase)|[_-]pass)[\"']?{_S}*+[=:]{_S}*+"
    rf"([|>][-+0-9]*+)?+{_S}*+$",
    _FLAGS)
_NEXT_KEY: Final = re.compile(r"^[\w.-]{1,128}+\s*+[:=](?:\s|$)")


def _mask_value_line(line: str) -> str:
    """``  "hunter2",`` -> ``  "***",``: the value masked, its indent, quotes and comma kept;
    the line as it is when it holds no plain value (the next key, a bracket, a list item)."""
    body = line.strip()
    lead = line[: len(line) - len(line.lstrip())]
    tail = line[len(line.rstrip()):]
    comma = ""
    if body.endswith(","):
        body, comma = body[:-1].rstrip(), ","
    quote = body[0] if len(body) >= 2 and body[0] in "\"'" and body[-1] == body[0] else ""
    value = body[1:-1] if quote else body
    if (not value or value[-1] in ":=" or value[0] in "[{#" or value.startswith(("- ", "-----BEGIN "))
            or _NEXT_KEY.match(value) is not None):
        return line
    return f"{lead}{quote}{mask_token(value)}{quote}{comma}{tail}"


def _redact_next_line_values(lines: list[str]) -> list[str]:
    out = list(lines)
    i = 0
    while i < len(out) - 1:
        m = _KEY_ALONE.search(out[i])
        if m is None:
            i += 1
            continue
        indent = len(out[i]) - len(out[i].lstrip())
        if m.group(1):  # a YAML block scalar: every more-indented line after it
            j = i + 1
            while j < len(out) and (not out[j].strip() or len(out[j]) - len(out[j].lstrip()) > indent):
                if out[j].strip():
                    lead = out[j][: len(out[j]) - len(out[j].lstrip())]
                    out[j] = lead + mask_token(out[j].strip())
                j += 1
            i = j
            continue
        j = i + 1
        while j < len(out) and not out[j].strip():
            j += 1
        if j < len(out):
            out[j] = _mask_value_line(out[j])
        i = j
    return out


_HEADING = re.compile(r"^ {0,3}#{1,6}(?:\s|$)")
"""A Markdown heading line: where a note's section starts (:func:`redact_lines`)."""


def redact_lines(text: str) -> str:
    """Redact a Markdown note and keep its line count: multi-line PEM private keys are found
    across lines first (a note redacted line by line never saw one whole), then a value on the
    line after its key (``password:`` then ``  hunter2``), then every line goes through
    :func:`redact`, alone, with the line before it and within its section (from a heading to the
    next: what a transcript's redaction masks in a message, a note's does in a section: a secret
    whose label is on a line above it)."""
    if any(t in text.lower() for t in _PEM_TRIGGERS):
        text = _redact_orphan_pem_end(_redact_pem(text, _mask_pem_keep_lines))
    lines = text.split("\n")
    if len(lines) > 1 and ("=" in text or ":" in text):
        lines = _redact_next_line_values(lines)
    out = [redact(line) for line in lines]
    for i in range(1, len(lines)):
        # and with the line before, as a transcript's text is read: a rule whose context is on
        # the line before the secret ("AWS credentials for the bot:" then the key, "Authorization:
        # Bearer" then the token, "the wifi password is" then the value, ``--api-key`` then its
        # value) masks a line no line alone shows. A value after its name and separator
        # (``password:`` then the value) stays _redact_next_line_values' to judge ("the turkey:"
        # names no secret; a PEM BEGIN line is no value), so that separator is left out here.
        if out[i] != lines[i] or not lines[i].strip() or not lines[i - 1].strip():
            continue
        prev = lines[i - 1].rstrip()
        if prev.endswith((":", "=")):
            prev = prev[:-1]
        got = redact(prev + "\n" + lines[i]).split("\n")
        if len(got) == 2 and got[1] != lines[i]:
            out[i] = got[1]
    # and each section (from a heading to the next) whole, as a transcript's message is read whole:
    # a secret whose label is further up ("AWS credentials for the deploy bot" / "- key id: AKIA..."
    # / "- <secret key>", or "## AWS" over a paragraph holding the key) is masked in a note as in a
    # message
    bounds = [i for i, ln in enumerate(lines) if _HEADING.match(ln)]
    for start, end in zip([0, *bounds], [*bounds, len(lines)], strict=True):
        if end - start <= 1:  # one line: read alone above (two are read whole here too: the pair
            continue            # above leaves the label's separator out, which a label in prose needs)
        block = lines[start:end]
        got = redact("\n".join(block)).split("\n")
        if len(got) == len(block):
            for k in range(len(block)):
                # (a PEM marker line is no value: "Deploy key:" over a BEGIN line keeps the line)
                if got[k] != block[k] and out[start + k] == block[k] and not block[k].lstrip().startswith("-----"):
                    out[start + k] = got[k]
    return "\n".join(out)


def query_for_provider(text: str, mode: str) -> str:
    """A query as the embedding provider is sent it: redacted as notes are (``redact = "all"``, the
    default with a hosted provider, whose queries leave the machine), else as it was typed. A token
    or password pasted into a search is not sent; the keyword side still reads the query as typed
    (it never leaves the machine)."""
    return redact(text) if should_redact("memory", mode) else text


