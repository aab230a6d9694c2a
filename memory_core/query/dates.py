"""When a chunk was written, and which day a query names.

Chunk dates (``chunk_date``), in order:

* a daily note ``memory/YYYY-MM-DD.md``, or another dated note (``memory/daily/2026-01-16.md``,
  ``memory/2026-01-16-vendor-pitch.md``, ``memory/2026/01/16.md``: :func:`date_from_path`): the
  date in its file name;
* a transcript chunk: the earliest message time in its JSONL lines (the record's
  ``timestamp``, else its ``message.timestamp``), else the session header's timestamp;
* any other file: its modification time (local date).

A transcript chunk's times are recorded when it is indexed (``chunk_days``: its earliest message
time on each UTC day it has a message of, :func:`memory_core.sources.sessions.chunk_stamps`), so a
search dates its candidates, finds a named day's chunks and knows the memory's conversation days
without reading a transcript (:class:`Dater`). An index written before schema 6 has no such
table: its candidates are dated from the transcripts (opened as ``get`` opens them:
:func:`memory_core.query.reading.indexed_transcript_dates`, kept per file version) until the next
run rebuilds it.

Query dates (``query_date_range``): numeric days in any common order (``2024-01-17``,
``17.01.2024``, ``17/01/24``, ``1/17``, ``17.01``; an ambiguous ``01/02`` reads in the order the
question's other days prove, else ``query.date_order``'s unless only the other reading is near the
memory's days; ``1/7`` is a day after a day's word, ``1/2 cup`` a fraction, ``the 16/9 ratio`` and
``12/15 of patients`` no day),
written months (``on 4 December``, ``Dec 4th``, ``December 4, 2026``, ``the 4th of December``),
Chinese (``5月4号``, ``2026年5月4日``), ``today``, ``yesterday``, ``the day before yesterday``,
``N days ago``, ``last week`` (the 7 days before today), ``this week`` (Monday to today), ``last
month``, weekday names (``on Monday``, ``last Friday``: the latest such day before today), a
conversation named by its place (``our first conversation``, ``the last time we talked``,
``第一次对话``: the memory's oldest conversation day, or its newest before today;
:func:`conversation_days`), and ranges of them (``between X and Y``, ``from X to Y``, ``before X``, ``until X``, ``after X``,
``since X``). "Today" is the memory's own (the day after its newest indexed day,
:func:`timeline_end`, when that is earlier than the clock's); a year-less day is the latest such
day not after it, or up to ``QUERY_AHEAD_DAYS`` after it (plans), and ``the 13th`` alone the latest 13th
up to it (``the 1st and 2nd``, ``the 3rd, 4th and 5th``: the span of them in one month). The range is inclusive.

What search does with them (all decided here, called by the query modules): the chunks written on a
named day that neither retrieval side found (``dated_chunk_rows``, from
``memory_core.query.retrieval``), each candidate's date (``Dater.date``), each candidate's nearness to the range
(``note_nearness``: every message time of a transcript chunk, ``query.day_tolerance_hours`` past the
range's end), the named day's lift after fusion, a ranking signal and not a filter
(``lift_named_days``, ``DATE_MATCH_BONUS``, from ``memory_core.query.rank``) and a transcript snippet's
``[YYYY-MM-DD HH:MM UTC]`` stamp (``said_at``). Which paths are dated and which are evergreen
(``date_from_path``, ``is_evergreen``) is decided here too; temporal decay, in
``memory_core.query.ranking``, reads them.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import weakref
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import apsw

from memory_core.errors import PathError
from memory_core.sources.sessions import DEFAULT_MAX_LINE_BYTES, _iter_raw_lines, in_utc, record_stamp
from memory_core.storage.store import has_table
from memory_core.storage.textsearch import LazyPattern  # day patterns: compiled when a query names a day

__all__ = ["DATE_MATCH_BONUS", "DateRange", "Dater", "chunk_date", "chunk_days", "date_from_path", "dated_chunk_rows",
           "is_evergreen", "lift_named_days", "nearness", "note_nearness", "once_per_file", "query_date_range",
           "said_at", "conversation_days", "latest_day", "timeline_end", "transcript_dates"]

_MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
                "november", "december")
_MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES)}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
# months as people misspell them in a hurry (a letter swapped, left out or doubled): read as the month
# wherever its name would be ("on 17 Janaury", "Feburary 3rd"); a misspelling that is itself a word
# ("march" has none; "augest", "set") is not listed
_MONTHS.update(dict.fromkeys(("janaury", "januray", "janurary", "jaunary", "janury"), 1))
_MONTHS.update(dict.fromkeys(("febuary", "feburary", "februray", "febraury", "feburay", "febrary", "febuarry"), 2))
_MONTHS.update(dict.fromkeys(("apirl", "aprli"), 4))
_MONTHS.update(dict.fromkeys(("agust", "augsut", "augst"), 8))
_MONTHS.update(dict.fromkeys(("septmber", "setpember", "septemer", "sepetember", "septemeber", "sepember"), 9))
_MONTHS.update(dict.fromkeys(("ocotber", "octobor", "octber", "otcober"), 10))
_MONTHS.update(dict.fromkeys(("novmber", "novemeber", "novembre", "noveber"), 11))
_MONTHS.update(dict.fromkeys(("decmber", "decemeber", "decembre", "deceber"), 12))
_WEEKDAYS = {d: i for i, d in enumerate(["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"])}


def calendar_word(word: str) -> bool:
    """A month's or a weekday's name, a short form or a common misspelling of one (``May``,
    ``Aug``, ``Sun``, ``Janaury``): a day's word, never a person's, however a question writes it."""
    w = word.lower()
    return w in _MONTHS or w in _WEEKDAYS or (len(w) >= 3 and any(d.startswith(w) for d in _WEEKDAYS))


def _trie_re(words: Iterable[str]) -> str:
    """A regular expression matching exactly ``words``, longest first, written as a trie
    (``jan(?:aury|uary)?``): Python's ``re`` tries each alternative of a flat ``a|b|c`` at every
    position, so the months' 60 spellings would cost every word of a question 60 tries."""
    trie: dict[str, Any] = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        end = "" in node
        parts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not parts:
            return ""
        body = parts[0] if len(parts) == 1 and not end else "(?:" + "|".join(parts) + ")"
        return body + ("?" if end else "")

    return emit(trie)


_MONTH_RE = "(" + _trie_re(_MONTHS) + r")\.?"
_DAY_RE = r"(\d{1,2})(?:st|nd|rd|th)?"
_MONTH_WORD_RE = "(" + _trie_re(_MONTHS) + ")"
# a month's name between separators, with its year (17-Jan-2024, 17/Jan/24, 17.Jan.2024; 2024-Jan-17)
_DAY_MON_YEAR = LazyPattern(rf"(?<![\w.,/-])(\d{{1,2}})([-/.]){_MONTH_WORD_RE}\2(\d{{4}}|\d{{2}})(?![\w/-]|[.,]\d)",
                            re.IGNORECASE)
_YEAR_MON_DAY = LazyPattern(rf"(?<![\w.,/-])(\d{{4}})([-/.]){_MONTH_WORD_RE}\2(\d{{1,2}})(?![\w/-]|[.,]\d)",
                            re.IGNORECASE)
# after a day and a month's name: 2024, '24, or 24 right after the month's name that ends the day's
# words or joins it to another day ("on 17 Jan 24?", "between 17 Jan 24 and 19 Jan 24"; not "3 June
# 10:30", "17 Jan 24 hours", "Jan 17, 24", "3 May 10, 4 May 12")
_YEAR_AFTER = (r"(\d{4}|['\u2019]\d{2}\b|(?<=[a-z.] )\d{2}(?=\s*(?:$|[?!;)\]]|,(?!\s*\d)|[.:](?!\d))"
               r"|\s+(?:and|to|until|till|through)\s+\d|\s*[-–]\s*\d))")
# year first, any of - / . (2024-01-17, 2024/01/17, 2024.01.17)
_ISO = LazyPattern(r"(?<![\d.])(\d{4})([-/.])(\d{1,2})\2(\d{1,2})(?![\d])")
# day and month in either order with a year (17.01.2024, 17/01/24, 01-17-2024): the same separator twice
_NUM_YEAR = LazyPattern(r"(?<![\w.,/-])(\d{1,2})([./-])(\d{1,2})\2(\d{4}|\d{2})(?![\w/-]|[.,]\d)")
# without a year: 17.01 / 17.1. (day first), 1/17 / 17/01 (either order); never with "-" (3-4 people)
_NUM_DOT = LazyPattern(r"(?<![\w.,/$€£:-])(\d{1,2})\.(\d{2}|\d\.)(?![\w/]|[.,]\d)")
_NUM_SLASH = LazyPattern(r"(?<![\w.,/$€£:-])(\d{1,2})/(\d{1,2})(?![\w/]|[.,]\d)")
_DAY_MONTH = LazyPattern(rf"\b{_DAY_RE}\s+(?:of\s+)?{_MONTH_RE}(?:,?\s+{_YEAR_AFTER})?(?!\w)", re.IGNORECASE)
_MONTH_DAY = LazyPattern(rf"\b{_MONTH_RE}\s+(?:the\s+)?{_DAY_RE}\b(?:,?\s+{_YEAR_AFTER})?", re.IGNORECASE)
# "the 13th" alone (a month named after it is _DAY_MONTH's: "the 13th of May"); the suffix is required
_SPAN_JOIN = r"\s*(and|to|until|till|through|-|–)\s*(?:the\s+)?"
# "12-16 January", "between 12 and 16 January", "12th to the 16th of Jan 2026": two days, one month
_DAY_SPAN_MONTH = LazyPattern(rf"(\bbetween\s+(?:the\s+)?)?\b{_DAY_RE}{_SPAN_JOIN}{_DAY_RE}\s+(?:of\s+)?{_MONTH_RE}"
                              r"(?:,?\s+(\d{4}))?\b", re.IGNORECASE)
# "January 12-16", "between Jan 12 and 16", "Jan 12th to 16th, 2026"
_MONTH_DAY_SPAN = LazyPattern(rf"(\bbetween\s+)?\b{_MONTH_RE}\s+(?:the\s+)?{_DAY_RE}{_SPAN_JOIN}{_DAY_RE}\b"
                              r"(?:,?\s+(\d{4}))?", re.IGNORECASE)
_ORDINAL_NOUN = r"\s+(?:of\s+)?(?:century|time|floor|row|place|birthday|anniversary)"  # what an ordinal numbers
_ORDINAL_DAY = LazyPattern(rf"\bthe\s+(\d{{1,2}})(?:st|nd|rd|th)\b(?!{_ORDINAL_NOUN})", re.IGNORECASE)
# several days of the month listed: "the 1st and 2nd", "the 3rd, 4th and 5th", "the 1st or the 2nd",
# "the 3rd, 4th and 5th of May" (two of one month joined by "and" / "to" are _DAY_SPAN_MONTH's)
_ORDINAL = r"\d{1,2}(?:st|nd|rd|th)"
_ORDINAL_LIST = LazyPattern(rf"\b(the\s+)?{_ORDINAL}(?:(?:\s*,\s*(?:(?:and|or|&)\s+)?|\s+(?:and|or|&)\s+)(?:the\s+)?"
                            rf"{_ORDINAL})+\b(?:\s+(?:of\s+)?{_MONTH_RE}(?:,?\s+(\d{{4}}))?\b)?", re.IGNORECASE)
_ORDINAL_NUMBER = re.compile(r"(\d{1,2})(?:st|nd|rd|th)")
_ORDINAL_WORDS = {w: i + 1 for i, w in enumerate((
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh",
    "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth"))}
_ORDINAL_WORDS.update({"twentieth": 20, "thirtieth": 30})
# a day of the month spelled out ("the seventeenth", "twenty-first", "thirty first")
_SPELLED_ORDINAL = LazyPattern(r"\b(?:(twenty|thirty)[\s-]?)?(" + "|".join(sorted(_ORDINAL_WORDS, key=len, reverse=True))
                               + r")\b")
# a month beside a spelled-out day is named whole ("Jan first said no": Jan is a name too)
_FULL_MONTH_RE = "(" + _trie_re(m for m in _MONTHS if len(m) > 4 or m in _MONTH_NAMES) + ")"
_SPELLED_MONTH_AFTER = LazyPattern(rf"\s+(of\s+)?{_FULL_MONTH_RE}\b")
_SPELLED_MONTH_BEFORE = LazyPattern(rf"\b{_FULL_MONTH_RE}\s+(the\s+)?$")
_SPELLED_THE_BEFORE = LazyPattern(r"\bthe\s+$")
# "the fifth" that is no day: the idiom ("I'll take the fifth"), an item of a list asked for
# ("which was the fifth?")
_SPELLED_NOT_DAY_BEFORE = LazyPattern(r"\b(?:take|takes|took|taking|plead|pleads|pleaded|pleading|"
                                      r"which\s+(?:one\s+)?(?:was|is|were|are))\s+the\s+$")
_SPELLED_YEAR_AFTER = LazyPattern(r",?\s+\d{4}\b")  # "second march 2023": the month, whatever the ordinal
# what a month's ordinal after it numbers instead of a day: "in October third week"
_SPELLED_NOT_DAY_AFTER = LazyPattern(r"\s+(?:weeks?|weekends?|times?|days?|quarters?|terms?|rounds?|sessions?|places?|"
                                     r"grades?|floors?|periods?|innings?|halfs?|halves|years?|months?)\b")
# what joins spelled-out days into one list or span ("the fourth, fifth and sixth", "the fifth or
# sixth", "the seventeenth to the twentieth")
_SPELLED_JOIN = LazyPattern(r"(?:\s*,\s*(?:(?:and|or|&)\s+)?|\s+(?:and|or|&|to|through|until|till)\s+|\s*[-–]\s*)"
                            r"(?:the\s+)?$")
# three or more days of one month written after it: "May 3rd, 4th and 5th", "May 3, 4 and 5, 2026"
# (two are _MONTH_DAY_SPAN's: "May 3rd and 5th")
_LIST_JOIN = r"(?:\s*,\s*(?:(?:and|or|&)\s+)?|\s+(?:and|or|&)\s+)(?:the\s+)?"
_MONTH_DAY_LIST = LazyPattern(rf"\b{_MONTH_RE}\s+(?:the\s+)?(\d{{1,2}}(?:st|nd|rd|th)?(?:{_LIST_JOIN}\d{{1,2}}"
                              rf"(?:st|nd|rd|th)?\b(?![.:/]\d)){{2,}})(?:,?\s+(\d{{4}}))?\b", re.IGNORECASE)
_LISTED_DAY = re.compile(r"(\d{1,2})(?:st|nd|rd|th)?\b")
_CJK_DAY = LazyPattern(r"(?:(\d{4})\s*年\s*)?(\d{1,2})\s*月\s*(\d{1,2})\s*[日号號]")
_AGO = LazyPattern(r"\b(\d{1,3})\s+days?\s+ago\b", re.IGNORECASE)
_WEEKDAY = LazyPattern(r"\b(on|last|this|past|previous)\s+(" + "|".join(_WEEKDAYS) + r")\b", re.IGNORECASE)
# the words a bare weekday may be followed by and still name a day ("Wednesday evening", "Monday
# about the car", "Tuesday when we met"); any other word makes it a name's part ("Friday drinks",
# "the Tuesday rehearsal": an event, maybe every week's, maybe one to come)
_AFTER_BARE_WEEKDAY = ("(?:morning|afternoon|evening|night|noon|about|at|with|when|while|after|before|and|or|to|"
                       "i|we|you|he|she|they|it|that|this|did|was|were|had|last|again)")
# a weekday alone in a question ("what did Kate say Tuesday?", "what did we discuss Wednesday
# evening?", "Friday?", "Tuesday's meeting"), or its short form after a word that names a day ("on
# Tues?", "since Wed", "last Fri"; the question is read lower-cased, and "sun" and "sat" alone are
# words): read as "on Tuesday" is. Not a plural ("Mondays": every Monday); not in a text (a
# message's bare weekday is a plan as often as a past day)
_BARE_WEEKDAY = LazyPattern(r"\b(?:(" + "|".join(_WEEKDAYS) + r")|(?:on|last|this|since|before|after|until|till)\s+"
                            r"(mon|tues?|wed|thu(?:rs?)?|fri|sat))\b(?![\w-]|['\u2019](?!s\b))"
                            r"(?!\s+(?!" + _AFTER_BARE_WEEKDAY + r"\b)[a-z])")
_WEEKDAY_SHORT = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5}
_WEEKDAY_BOUND = LazyPattern(r"\b(?:since|before|after|until|till)\s+(" + "|".join(_WEEKDAYS) + r")\b", re.IGNORECASE)
"""A weekday after a range's word ("since Monday", "before Friday"): the day alone is the span, the
word before it :data:`_BOUND`'s (the latest such weekday before the reference day, as ``on``)."""
_WEEKDAY_SPAN = LazyPattern(r"\b(?:between|from)\s+(" + "|".join(_WEEKDAYS) + r")\s*(?:and|to|until|till|through|-|–)\s*("
                            + "|".join(_WEEKDAYS) + r")\b", re.IGNORECASE)
"""Two weekdays joined as a range ("between Monday and Wednesday", "from Monday to Wednesday"):
the second the latest such weekday before the reference day (as ``on``), the first the latest
before that."""
_WEEKDAY_BEFORE_DAY = re.compile(r"[\s,]*")
"""What may stand between a weekday and the day it names ("on Sunday, 7 January", "last Friday
12/01"): the day is the span, the weekday only says which day of its week it is."""
_CLAUSE_END = re.compile(r"[.!?;\n]|[:,](?!\d)")
"""Where a clause of a text ends, for the tense of a weekday's clause (:func:`_clause_of`): "Noted:
call mum on Sunday" is a plan after a past word, and so are "Kate booked the escape room, see you
on the 17th!" and "I called the vet, appointment is on the 17th" (a comma too, since the
twenty-first session's audit)."""
_RELATIVE = (  # (pattern, days back of the reference day's start, of its end); None: computed below
    (LazyPattern(r"\b(?:the\s+)?day\s+before\s+yesterday\b"), 2, 2),
    (LazyPattern(r"\byesterday\b"), 1, 1),
    (LazyPattern(r"\btoday\b"), 0, 0),
    (LazyPattern(r"\b(?:last|past|previous)\s+week\b"), 7, 1),
)
_RELATIVE_WORD = LazyPattern(r"yesterday|today|tomorrow|\bago\b|week|month|day\b|" + "|".join(_WEEKDAYS))
# a count of days or weeks: "a few", "a couple of", "several" are not read (MemoryBank's "a few days
# ago, I mentioned ..." means some day before the question, which a window of the last days missed)
_COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
           "nine": 9, "ten": 10}
_COUNT_RE = r"(\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten)"
# "two weeks ago", "a couple of days ago", "3 months ago" (days: the day; weeks and months: about then)
_UNITS_AGO = LazyPattern(rf"\b{_COUNT_RE}\s+(day|week|month)s?\s+ago\b")
# "the past 3 days", "the last few days", "the past two weeks": up to "today"
_PAST_UNITS = LazyPattern(rf"\b(?:the\s+)?(?:past|last|previous)\s+{_COUNT_RE}\s+(day|week)s\b")
_LAST_NIGHT = LazyPattern(r"\blast\s+night\b")  # yesterday; what was said past midnight counts (the tolerance)
_THIS_PART = LazyPattern(r"\b(?:this\s+(?:morning|afternoon|evening)|tonight)\b")  # "today" itself: _RELATIVE
# "last weekend", "this weekend": a Saturday and its Sunday ("over the weekend", "the weekend after her
# birthday" name some weekend, not the last one: convo's "what did we get done over the weekend?")
_WEEKEND = LazyPattern(r"\b(last|past|previous|this)\s+weekend\b")
# days to come, for a question about plans: "tomorrow", "the day after tomorrow", "next week", "next
# Friday", "in 3 days"; "today" is the memory's (the day after its last conversation)
_TOMORROW = LazyPattern(r"\b(?:the\s+day\s+after\s+)?tomorrow\b")
_NEXT_WEEK = LazyPattern(r"\bnext\s+week\b")
_NEXT_WEEKDAY = LazyPattern(r"\bnext\s+(" + "|".join(_WEEKDAYS) + r")\b")
# a weekday of a named calendar week: "on Tuesday last week", "Tuesday of next week", "last week on
# Tuesday" (that week's Tuesday, not the whole week nor the latest Tuesday)
_WEEKDAY_OF_WEEK = LazyPattern(r"\b(?:on\s+)?(" + "|".join(_WEEKDAYS) + r")\s+(?:of\s+)?(last|this|next)\s+week\b"
                               r"|\b(last|this|next)\s+week\s+on\s+(" + "|".join(_WEEKDAYS) + r")\b")
_FORTNIGHT_AGO = LazyPattern(r"\b(?:a\s+|one\s+)?fortnight\s+ago\b")  # "two weeks ago"
# a holiday of a fixed day named as when something was ("at Christmas", "on Christmas Eve", "over New
# Year's"); "for Christmas" is what a plan or a present is for (talked about before it), not the day
_HOLIDAY = LazyPattern(r"\b(?:on|at|over|during)\s+(christmas\s+eve|christmas(?:\s+day)?|xmas|boxing\s+day"
                       r"|new\s+year['\u2019]?s\s+eve|new\s+year['\u2019]?s(?:\s+day)?)\b(?:,?\s+((?:19|20)\d\d)\b)?")
_HOLIDAYS = {"christmas eve": (12, 24), "christmas": (12, 25), "christmas day": (12, 25), "xmas": (12, 25),
             "boxing day": (12, 26), "new year's eve": (12, 31), "new year's": (1, 1), "new year's day": (1, 1)}
_IN_UNITS = LazyPattern(rf"\bin\s+{_COUNT_RE}\s+days?\b")
# a year: "last year", "this year", "in 2025"
_YEAR_WORDS = LazyPattern(r"\b(last|this)\s+year\b|\b(?:in|during|throughout)\s+((?:19|20)\d\d)\b(?![\s,.]*\d)")
_THIS_WEEK = LazyPattern(r"\bthis\s+week\b")
# a conversation named by its place in the memory's timeline: its first one, or the last one before today
_TALK = r"(?:conversation|chat)s?"
_TALKED = r"(?:talked|spoke|chatted|met|discussed)"
_WE = r"(?:we|you\s+and\s+i|i\s+and\s+you)"
_FIRST_TALK = LazyPattern(r"\b(?:our|the|my|your|their)\s+(?:very\s+)?first\s+" + _TALK + r"\b"
                          r"|\b(?:the\s+)?first\s+time\s+" + _WE + r"\s+(?:ever\s+)?" + _TALKED + r"\b"
                          r"|\bwhen\s+we\s+first\s+" + _TALKED + r"\b"
                          r"|第一次(?:的)?(?:对话|聊天|谈话|交谈|说话|见面)|(?:最开始|一开始|最初)(?:的)?(?:对话|聊天|谈话|交谈)")
_LAST_TALK = LazyPattern(r"\b(?:our|the|my|your|their)\s+(?:last|latest|most\s+recent|previous)\s+" + _TALK + r"\b"
                         r"|\b(?:the\s+)?last\s+time\s+" + _WE + r"\s+" + _TALKED + r"\b"
                         r"|(?:上次|上一次|最近一次)(?:的)?(?:对话|聊天|谈话|交谈)")
_LAST_MONTH = LazyPattern(r"\blast\s+month\b")
_THIS_MONTH = LazyPattern(r"\bthis\s+month\b")
# a month named as a whole: "in March", "during the month of May", "in early June 2025", "March 2025"
_IN_MONTH = LazyPattern(rf"\b(?:in|during|over|throughout)\s+(?:the\s+month\s+of\s+)?(?:(?:early|late|mid)[\s-]+)?"
                        rf"{_MONTH_RE}(?:,?\s+(\d{{4}}))?\b(?![\s,]*\d)", re.IGNORECASE)
_MONTH_YEAR = LazyPattern(rf"\b{_MONTH_RE},?\s+(\d{{4}})\b", re.IGNORECASE)
# "between X and Y", "from X to Y": the words between two named days
_JOIN = LazyPattern(r"^\s*(?:and|to|until|till|through|-|–)\s*(?:the\s+)?$")
_OPEN = LazyPattern(r"\b(between|from)\s+(?:the\s+)?$")
_BOUND = LazyPattern(r"\b(before|after|since|until|till)\s+(?:the\s+)?$")  # "notes from Nov 2": that day

DATE_ORDERS = ("dmy", "mdy")
"""How a numeric day whose parts are both 12 or less reads (``01/02``): ``query.date_order``."""
DEFAULT_DATE_ORDER = "dmy"
DEFAULT_DAY_TOLERANCE_HOURS = 6.0
"""Hours past the end of a named day in which a message still counts as that day's, less and less
(a conversation that runs past midnight; a time zone behind UTC): ``query.day_tolerance_hours``."""


# -- paths ---------------------------------------------------------------------------------------
_MEMORY_DIR_RE = re.compile(r"(?:^|/)memory/")
_DAY_NAME_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[-_ ,][^/]*)?\.md")
_DAY_OF_MONTH_RE = re.compile(r"([0-9]{2})(?:[-_ ,][^/]*)?\.md")
_YEAR_RE = re.compile(r"(?:19|20|21)[0-9]{2}")
_CALENDAR_FOLDER_RE = re.compile(r"(?:19|20|21)[0-9]{2}(?:-[0-9]{2})?|[0-9]{2}")
JOURNAL_FOLDERS = frozenset({
    "daily", "dailies", "day", "days", "daily-notes", "daily_notes", "dailynotes", "journal", "journals", "diary",
    "diaries", "log", "logs", "notes", "meetings", "meeting-notes", "standups", "standup", "sessions",
    "session-notes", "summaries", "conversations", "chats", "archive"})
"""Folders under ``memory/`` whose notes named for a day are that day's notes, as a daily note is
(``memory/daily/2026-01-16-standup.md``); besides these, years and months
(``memory/2026/2026-01-16-call.md``, ``memory/2026-01/...``, ``memory/2026/01/16.md``)."""
_DATED_GLOB = "*memory/*[0-9][0-9]*.md"
"""A cheap look, in SQL, for the paths :func:`date_from_path` may date."""


def _normalize_path(path: str) -> str:
    p = path.replace("\\", "/")
    return p[2:] if p.startswith("./") else p


def date_from_path(path: str) -> date | None:
    """The day of a dated note, ``None`` if undated or not a day (``2026-02-30``). Dated: a Markdown
    file under a ``memory/`` folder named for its day alone (``memory/2026-01-16.md``, the seeds'
    daily note, in any subfolder: ``memory/work/2026-01-16.md``); one whose name starts with its
    day followed by ``-``, ``_``, a space or a comma (``memory/2026-01-16-vendor-pitch.md``, the
    name OpenClaw's session summaries take) in ``memory/`` itself or in year, month or journal
    folders (:data:`JOURNAL_FOLDERS`: ``memory/daily/2026-01-16_standup.md``, not
    ``memory/people/1990-05-17 alice birthday.md``: a reference note named for a date is no
    conversation); and ``memory/YYYY/MM/DD.md`` (or ``DD-retro.md``) in year and month folders."""
    p = _normalize_path(path)
    m = _MEMORY_DIR_RE.search(p)
    if m is None:
        return None
    *folders, name = p[m.end():].split("/")
    parts: tuple[str, str, str] | None = None
    if (d := _DAY_NAME_RE.fullmatch(name)) is not None:
        if len(name) == 13 or all(_journal(f) for f in folders):  # "YYYY-MM-DD.md" anywhere
            parts = d.group(1), d.group(2), d.group(3)
    elif ((d := _DAY_OF_MONTH_RE.fullmatch(name)) is not None and len(folders) >= 2
          and _YEAR_RE.fullmatch(folders[-2]) and re.fullmatch(r"[0-9]{2}", folders[-1])
          and all(_journal(f) for f in folders[:-2])):
        parts = folders[-2], folders[-1], d.group(1)
    if parts is None:
        return None
    try:
        return date(int(parts[0]), int(parts[1]), int(parts[2]))
    except ValueError:
        return None


def _journal(folder: str) -> bool:
    """Whether a folder under ``memory/`` holds its notes by day: a year, a month, or a journal's name."""
    return folder.lower() in JOURNAL_FOLDERS or _CALENDAR_FOLDER_RE.fullmatch(folder) is not None


def is_evergreen(path: str) -> bool:
    """``MEMORY.md`` / ``memory.md`` at the root, or an undated file under ``memory/``: no decay."""
    p = _normalize_path(path)
    if p in ("MEMORY.md", "memory.md"):
        return True
    return p.startswith("memory/") and date_from_path(p) is None


@dataclass(frozen=True, slots=True)
class DateRange:
    start: date
    end: date  # inclusive
    phrase: str = field(default="", compare=False)  # the words of the query that name the day(s)
    tolerance: float = field(default=0.0, compare=False)  # hours past its end a message still counts
    # per candidate row id: how near its days are to the range (1 inside, less for a neighbour; see
    # :func:`nearness`), set by the searcher when it dates the candidates (:func:`note_nearness`)
    near: dict[int, float] = field(default_factory=dict, compare=False, repr=False)
    order: str = field(default=DEFAULT_DATE_ORDER, compare=False)  # how a day written in a chunk reads
    # words of the phrase still searched as text: a month named whole ("in February"), which a plan
    # made before it names in its text ("the wedding is on 14 February"); a day's words are matched
    # by date alone (their numbers would match every number)
    kept: str = field(default="", compare=False)

    def strip(self, query: str, *, keep: bool = True) -> str:
        """The query without the words naming the day (they are matched by date, not as text), but
        :attr:`kept` (unless not ``keep``: a word no chunk holds would only lower the query's
        coverage)."""
        if not self.phrase:
            return query
        i = query.lower().find(self.phrase)
        kept = self.kept if keep else ""
        return query if i < 0 else " ".join(w for w in (query[:i].strip(), kept, query[i + len(self.phrase):].strip()) if w)

    def __contains__(self, d: object) -> bool:
        if isinstance(d, str):
            try:
                d = date.fromisoformat(d[:10])
            except ValueError:
                return False
        return isinstance(d, date) and self.start <= d <= self.end

    def widened(self) -> DateRange:
        """The range with the days its tolerance reaches into (the days whose chunks are fetched), bounded."""
        if self.tolerance <= 0:
            return self
        return DateRange(self.start, _shift(self.end, math.ceil(self.tolerance / 24)), self.phrase)

    def is_open(self) -> bool:
        """"before X", "after X", "since X": one end is the edge of time."""
        return self.start == _FIRST_DAY or self.end == _LAST_DAY


def _latest(month: int, day: int, year: int | None, today: date) -> date | None:
    """The day ``month``/``day`` of ``year``, or without one the latest such day not after
    ``today`` (29 February: the latest leap year's); None for a day no calendar has."""
    if year is not None:
        try:
            return date(year, month, day)
        except ValueError:
            return None
    for y in range(today.year, max(0, today.year - 8), -1):
        try:
            d = date(y, month, day)
        except ValueError:
            continue
        if d <= today:
            return d
    return None


def _latest_of_month(day: int, today: date) -> date | None:
    """The latest day numbered ``day`` (1-31) of a month, not after ``today`` (a month without it is
    skipped: "the 31st" asked on 10 May is 31 March)."""
    return _nth_of_month(day, today, -1)


def _next_of_month(day: int, today: date) -> date | None:
    """The first day numbered ``day`` (1-31) of a month, not before ``today`` (a month without it
    is skipped: "the 31st" written on 10 April is 31 May); ``today`` itself when it is that day."""
    return _nth_of_month(day, today, 1)


def _nth_of_month(day: int, today: date, step: int) -> date | None:
    """The day numbered ``day`` nearest ``today`` in the direction ``step`` (-1: back, 1: ahead),
    ``today`` included, within 13 months and the days a range may hold."""
    if not 1 <= day <= 31:
        return None
    y, m = today.year, today.month
    for _ in range(13):
        try:
            d = date(y, m, day)
        except ValueError:
            d = None
        if d is not None and (d <= today if step < 0 else d >= today):
            return d if _FIRST_DAY <= d <= _LAST_DAY else None
        y, m0 = divmod(y * 12 + m - 1 + step, 12)
        m = m0 + 1
        if not 1 <= y <= 9999:
            return None
    return None


QUERY_AHEAD_DAYS = 31
"""A year-less day a question not in the past tense names (``what happens on Feb 1st?``, ``what is
on 14 February?``) is the one up to this many days after the memory's "today" when there is one
(conversations plan the weeks ahead: asked of a memory ending 25 January, 1 February is the coming
one), else the latest one before; in a past-tense question (``what did we decide on 4
December?``) always the latest one before (:func:`looks_ahead`). A day of the month alone (``the
13th``) and relative days (``yesterday``, ``on Friday``) only look back."""
_PAST = LazyPattern(r"\b(?:did|didn't|was|wasn't|were|weren't|had|went|said|told|got|made|came|took|gave|saw|"
                   r"thought|brought|bought|sent|left|ate|won|lost|"
                   r"(?!(?:need|feed|seed|speed|breed|bleed|proceed|exceed|succeed|indeed)\b)\w{2,}ed)\b")
_PAST_TOLD = LazyPattern(r"\b(?:met|ran|felt|found|heard|kept|paid|sat|slept|spent|stood|taught|wrote|spoke|drove|"
                         r"flew|fell|forgot|began|broke|chose|drank|knew|rode|sang|swam|threw|woke|wore|built|caught|"
                         r"fought|held|led|lent|meant|sold|shot|lay|grew|drew|ago|yesterday|last)\b")
"""Past-tense words :data:`_PAST` leaves out (irregular verbs, "ago", "yesterday"), for the tense of
a message's clause (:func:`_single_days`' ``plans``): "I met Kate on Tuesday" is the Tuesday before."""
_AHEAD = LazyPattern(r"\b(?:will|won't|going|gonna|is|isn't|are|aren't|am|happens|happening|upcoming|coming|"
                    r"next|plans?|planning|due|scheduled)\b")


def looks_ahead(question: str) -> bool:
    """Whether a question may ask about days to come (:data:`QUERY_AHEAD_DAYS`): it has a present or
    future word (``is``, ``will``, ``happens``, ``due``), or no past-tense word at all."""
    q = question.lower()
    return bool(_AHEAD.search(q)) or not _PAST.search(q)


Anchor = date | Callable[[], date | None] | None
"""The memory's own "today" for year-less and relative days: a day, or a function giving it (called
only when the query needs it), or None (today's clock)."""

Timeline = Iterable[date] | Callable[[], Iterable[date]] | None
"""The memory's conversation days (:func:`conversation_days`), or a function giving them (called only
when a query names a conversation by its place: "our first conversation"), or None (none known)."""


def query_date_range(query: str, today: date | None = None, *, anchor: Anchor = None,
                     date_order: str = DEFAULT_DATE_ORDER, tolerance: float = 0.0,
                     timeline: Timeline = None, days_in: DaysIn | None = None) -> DateRange | None:
    """The day (or days) a query names, or ``None`` (see the module docstring).

    Year-less and relative days ("17 January", "yesterday", "on Friday", "last week") resolve
    against ``anchor`` (the memory's newest indexed day, :func:`timeline_end`) when it gives one,
    else against ``today`` (default: the local date). ``date_order``: how ``01/02`` reads.
    ``timeline``: the memory's conversation days, for a conversation named by its place ("our first
    conversation": the oldest; "the last time we talked": the newest before today), and for an
    ambiguous numeric day (``1/7``), read in the other order when only that reading is within a day
    of the memory's days; ``days_in`` answers that for the memory without listing its days
    (:func:`memory_has_days`), else ``timeline`` does."""
    q = query[:MAX_DATE_SCAN_CHARS].lower()
    if not _MAYBE_DAY.search(q):
        return None  # no digit, month, weekday or day word: nothing to resolve (the anchor is not read)
    order = date_order if date_order in DATE_ORDERS else DEFAULT_DATE_ORDER
    # a numeric day the question writes unambiguously (1/20: January) says how its others read (1/10)
    order = _proven_order(q) or order
    ref = _Ref(today, anchor, timeline)
    ahead = QUERY_AHEAD_DAYS if looks_ahead(q) else 0
    found = _find(q, ref, order, ahead)
    if found is None:
        return None
    if (days_in is not None or timeline is not None) and _slash_days(found[1], read=True):
        # an ambiguous numeric day (1/7) read as the memory's timeline holds it: the configured
        # order unless that reading names days memory has nothing near and the other reading does
        other = "mdy" if order == "dmy" else "dmy"
        alt = _find(q, ref, other, ahead)
        if alt is not None and alt[0] != found[0]:
            has = days_in or (lambda lo, hi: _listed_in(ref.talks(), lo, hi))
            if not has(*_widened(*found[0])) and has(*_widened(*alt[0])):
                found, order = alt, other
    if not ahead and (days_in is not None or timeline is not None) and _WRITTEN_DAY.search(found[1]) \
            and not _has_year(found[1]):
        # a year-less day asked in the past tense ("what did Kate say about 12 December?" on 30
        # November) is the latest such day, unless memory holds nothing near it and the coming one
        # is within QUERY_AHEAD_DAYS: then it is the plan memory talked about (a year-old day of a
        # memory that began this autumn is no day it holds)
        alt = _find(q, ref, order, QUERY_AHEAD_DAYS)
        if alt is not None and alt[0] != found[0] and alt[0][0] > found[0][1]:
            has = days_in or (lambda lo, hi: _listed_in(ref.talks(), lo, hi))
            if not has(*_widened(*found[0])) and has(*_widened(found[0][0], ref())):
                found = alt
    (start, end), phrase = found
    if not (_FIRST_DAY <= start <= end <= _LAST_DAY):
        return None  # "9999-12-31", "1 January 0001": no day before or after it to compute with
    named = _IN_MONTH.fullmatch(phrase) or _MONTH_YEAR.fullmatch(phrase)
    return DateRange(start, end, phrase, max(0.0, float(tolerance)), order=order,
                     kept=named.group(1) if named is not None else "")


_WRITTEN_DAY = LazyPattern(r"\d|\b(?:" + "|".join(sorted({m[:3] for m in _MONTHS})) + r")")
"""A day written as a date (digits or a month's name), not a relative one ("on Friday", "yesterday")."""

MAX_DATE_SCAN_CHARS = 4096
"""A question's days are read in its first this many characters (a question naming a day names it
there; a 100 KB query of "1/1 " is not read for 4,000 days)."""
_BEHIND = 48
"""How far before a day the words that qualify it ("on", "between", "before", "version") are looked for."""

# a range's neighbours (the day after its end, local midnight as a timestamp) must exist
_FIRST_DAY, _LAST_DAY = date(1, 1, 2), date(9999, 12, 30)
_MAYBE_DAY = re.compile(r"\d|day|week|month|year|night|morning|afternoon|evening|tomorrow|\b(?:mon|tues?|wed|thu(?:rs?)?|fri|sat)\b|\b(?:"
                        + "|".join(sorted({m[:3] for m in _MONTHS})) + ")"
                        r"|second|third|enth\b|ieth\b|fourth|fifth|sixth|eighth|ninth|twelfth"
                        r"|first|last|latest|recent|previous|christmas|xmas|boxing|fortnight|第一次|最开始|一开始|最初|上次|上一次|最近一次")


class _Ref:
    """The day year-less and relative days count back from ("today" in the question): the day after
    the anchor (the memory's newest day: the question is asked after its last conversation), or
    ``today`` (default: the local date) when that is earlier or there is no anchor. Read once, and
    only when a day needs it."""

    def __init__(self, today: date | None, anchor: Anchor, timeline: Timeline = None) -> None:
        self.today, self.anchor, self.timeline = today, anchor, timeline
        self.day: date | None = None
        self.days: list[date] | None = None

    def talks(self) -> list[date]:
        """The memory's conversation days, oldest first (``timeline``; [] without one). Read once."""
        if self.days is None:
            got = self.timeline() if callable(self.timeline) else self.timeline
            self.days = sorted(set(got or ()))
        return self.days

    def first_talk(self) -> date | None:
        days = self.talks()
        return days[0] if days else None

    def last_talk(self) -> date | None:
        """The newest conversation day before the clock's today (today's is the one going on)."""
        now = self.today or datetime.now().astimezone().date()
        return next((d for d in reversed(self.talks()) if d < now), None)

    def __call__(self) -> date:
        if self.day is None:
            now = self.today or datetime.now().astimezone().date()
            got = self.anchor() if callable(self.anchor) else self.anchor
            self.day = day = now if got is None or got >= _LAST_DAY else min(now, got + timedelta(days=1))
            return day
        return self.day


Span = tuple[int, int, date, date]  # (start, end) in the query, (first day, last day)


# what may follow "the 13th" named without a day word before it ("what did we do the 13th?", "the
# 13th at the pub"): the end, a punctuation mark or a word that cannot be the noun it numbers
_ORDINAL_ENDS = LazyPattern(r"\s*(?:$|[?!.,;:)\]\"'])|\s+(?:and(?!\s+(?:final|last)\b)|or|at|in|when|while|because|as|we|i|you|"
                            r"he|she|they)\b",
                            re.IGNORECASE)
# a number pair that is not a day: after a version's or a score's word, before a unit
_NOT_DAY_BEFORE = LazyPattern(r"\b(?:version|ver|v|python|node|java|ruby|php|perl|go|rust|ios|android|macos|windows|"
                              r"release|score|scored|got|get|rated|rating|ratio|grade|level|chapter|section|verse|"
                              r"page|pages|pp|step|rule|item|size|aspect)\s*$")
_NOT_DAY_AFTER = LazyPattern(r"\s*(?:%|(?:km|kms|mi|miles?|kg|kgs|g|mg|ml|l|lbs?|oz|x|h|hrs?|hours?|mins?|minutes?|"
                             r"s|secs?|seconds?|m|cm|mm|gb|mb|tb|kb|k|kph|mph|pts|points?|stars?|out\s+of|"
                             r"ratios?|aspect|odds|split|format|widescreen)\b)")
# a ratio or a score stated with a verb or "of" between ("the ratio is 16/9", "aspect ratio of 16/9",
# "my score was 12/15"), where the word right before the pair is not the ratio's own
_RATIO_LINK = r"(?:of|is|was|were|are|be|been|at|about|around|roughly|approximately|exactly|just|only|a|an|the)"
_RATIO_BEFORE = LazyPattern(rf"\b(?:ratios?|aspect|odds|scores?|scored|grades?|graded|rating|rated)"
                            rf"(?:\s*[:=]|\s+{_RATIO_LINK}\b)(?:\s+{_RATIO_LINK}\b)*\s*$")
# a pair that counts part of a whole, followed by "of" and what it counts ("12/15 of patients",
# "12/15 of them"); "12/15 of this year", "16/9 of 2025", "of last month" still name a day
_PART_OF = LazyPattern(r"\s+of\s+(?!(?:the\s+)?(?:this|last|next|that|same|current|previous|coming)\s+(?:year|month)\b"
                       r"|(?:the\s+)?year\b|'?\d{2}\b|\d{4}\b)")
# a pair that counts part of a whole, followed by the plural it counts and more words ("12/15
# patients recovered", "9/10 dentists agree"), with no determiner before it: "the 12/15 meeting",
# "our 12/15 sales" name a day, and so does a plural that ends the question ("12/15 plans?");
# a plural is a word ending in -s that is not -ss, -us, -is ("12/15 was", "this", "plus") nor one of
# the function words that end in -s
_COUNTED = LazyPattern(r"\s+(?!(?:does|goes|always|perhaps|afterwards|towards|besides|whereas|sometimes|nowadays|"
                       r"anyways|backwards|forwards|upwards|downwards|hers|ours|yours|theirs|"
                       r"days|weeks|months|years|times)\b)"
                       r"(?:[a-z]{3,}(?<!s)(?<!u)(?<!i)s|people|children|men|women|persons)\s+[a-z]")
_DETERMINER_BEFORE = LazyPattern(r"\b(?:the|a|an|my|our|your|their|his|her|its|this|that|these|those)\s+$")
# the word before a numeric day that makes "1/7" a day, not a fraction ("to 1/2" and "by 1/3"
# alone are amounts: "cut it to 1/2", "up by 1/3"; after "between 3/1" a day)
_DAY_WORD_BEFORE = LazyPattern(r"\b(?:on|before|after|since|until|till|from|between|through"
                               r"|(?:between|from)\s+\d{1,2}/\d{1,2}\s+(?:and|to))\s+$")


def _not_a_day(q: str, m: re.Match[str], dots: bool) -> bool:
    """Whether the year-less numeric pair ``m`` (``1/7``, ``17.01``) of ``q`` is no day, unless a
    day's word comes before it (``on 1/7``, ``between 3/1 and 5/1``): two single digits with ``/``
    (``1/2 cup``: a fraction), ``24/7`` (all the time), after a version's, a score's or a section's
    word (``python 3.12``, ``I got 9/10``) or a ratio's or score's word and a verb or ``of``
    (``the ratio is 16/9``, ``aspect ratio of 16/9``, ``my score was 12/15``), before a unit or a
    ratio's word (``5.10 km``, ``16/9 ratio``), or before ``of`` and what it counts (``12/15 of
    patients``; ``of this year`` and ``of 2025`` still name a day) or before the plural it counts
    and more words, with no determiner before it (``12/15 patients recovered``; ``the 12/15
    meeting``, ``our 12/15 sales``, ``12/15 plans?`` and ``12/15 was busy`` name a day)."""
    i = m.start()
    if _DAY_WORD_BEFORE.compiled.search(q, max(0, i - _BEHIND), i) is not None:
        return False
    a_s, b_s = m.group(1), m.group(2).rstrip(".")
    return bool((not dots and ((len(a_s) == 1 and len(b_s) == 1) or (a_s, b_s) == ("24", "7")))
                or _NOT_DAY_BEFORE.compiled.search(q, max(0, i - _BEHIND), i)
                or _RATIO_BEFORE.compiled.search(q, max(0, i - _BEHIND), i)
                or _NOT_DAY_AFTER.compiled.match(q, m.end())
                or _PART_OF.compiled.match(q, m.end())
                or (_COUNTED.compiled.match(q, m.end()) is not None
                    and _DETERMINER_BEFORE.compiled.search(q, max(0, i - _BEHIND), i) is None))


_MONTH_AFTER = LazyPattern(rf"\s+(?:of\s+)?{_MONTH_RE}\b", re.IGNORECASE)
_MONTH_BEFORE = LazyPattern(rf"\b{_MONTH_RE}\.?,?\s+$", re.IGNORECASE)
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # the most a month has (February: a leap year's)


def _impossible_in_named_month(q: str, m: re.Match[str]) -> bool:
    """Whether the ordinal day ``m`` ("the 31st") is of a month named right after it ("of
    February") or right before it ("February the 30th") that has no such day. Such a day is read as
    none, as ``31 February`` is (the thirty-ninth session's audit F: it was read as the latest 31st)."""
    after = _MONTH_AFTER.compiled.match(q, m.end())
    before = _MONTH_BEFORE.compiled.search(q[max(0, m.start() - 16):m.start()])
    named = after or before
    if named is None:
        return False
    mon = _MONTHS.get(named.group(1).lower().rstrip("."))
    return mon is not None and int(m.group(1)) > _MONTH_DAYS[mon - 1]


def _ordinal_is_day(q: str, m: re.Match[str], day_word: bool) -> bool:
    """Whether the ordinals ``m`` (``the 1st and 2nd``) name days of the month: after a day's word
    (``on``), or after ``the`` with nothing they could number after them (:data:`_ORDINAL_ENDS`);
    never before a noun an ordinal numbers (``century``, ``time``, ``floor``, ...)."""
    if re.match(_ORDINAL_NOUN, q[m.end():m.end() + 40], re.IGNORECASE):
        return False
    if day_word:
        return True
    return bool(m.group(1)) and _ORDINAL_ENDS.compiled.match(q, m.end()) is not None


def _slash_days(q: str, *, read: bool = False) -> list[tuple[int, int]]:
    """The two leading numbers of each numeric day in ``q`` whose order a setting decides: ``a/b``,
    ``a/b/year``, ``a-b-year`` (a dotted day is day first; "12-25 people" is no day). Unless ``read``
    (``q`` is the words already read as a day), not a pair :func:`_not_a_day` refuses: "I got 12/15"
    proves no order."""
    pairs = [(m.group(1), m.group(2)) for m in _NUM_SLASH.finditer(q) if read or not _not_a_day(q, m, False)]
    pairs += [(m.group(1), m.group(3)) for m in _NUM_YEAR.finditer(q) if m.group(2) != "."]
    return [(int(a), int(b.rstrip("."))) for a, b in pairs]


def _proven_order(q: str) -> str | None:
    """The order the question's own numeric days prove ("dmy" for 17/01, "mdy" for 1/17: one part
    over 12), when they all prove the same one; else None."""
    proven = set()
    for a, b in _slash_days(q):
        if a > 12 >= b >= 1 and a <= 31:
            proven.add("dmy")
        elif b > 12 >= a >= 1 and b <= 31:
            proven.add("mdy")
    return proven.pop() if len(proven) == 1 else None


DaysIn = Callable[[date, date], bool]
"""Whether the memory has a conversation day from the first day to the second (:func:`memory_has_days`)."""


def _widened(start: date, end: date) -> tuple[date, date]:
    """``start..end`` and a day either side (within the calendar)."""
    return (start - timedelta(days=1) if start > _FIRST_DAY else start,
            end + timedelta(days=1) if end < _LAST_DAY else end)


def _listed_in(days: list[date], lo: date, hi: date) -> bool:
    """Whether any of ``days`` (sorted) lies in ``lo..hi``."""
    i = bisect_left(days, lo)
    return i < len(days) and days[i] <= hi


def _pick_order(a: int, b: int, order: str, dots: bool, year: bool) -> tuple[int, int] | None:
    """(month, day) of the numeric ``a<sep>b``: the order the numbers prove (one of them > 12), else
    ``order``; a dotted day without a year is read day first only (``10.30`` is no date)."""
    if dots and not year:
        return (b, a) if 1 <= b <= 12 and 1 <= a <= 31 else None
    if a > 12 and b <= 12:
        return b, a
    if b > 12 and a <= 12:
        return a, b
    return (b, a) if order == "dmy" else (a, b)


def _spelled_out(q: str) -> tuple[str, list[tuple[int, int]]]:
    """``q`` with each day of the month spelled out as an ordinal written in digits, in the same
    number of characters ("the seventeenth of may" -> "the 17th        of may"), and where each
    was (start, end): so every day pattern reads it, and a span found in the result is a span of
    ``q``. Ordinals listed together ("the fourth, fifth and sixth of May", "the fifth or sixth
    time") are read or left as one. Only where they name days: with a month's whole name after
    the last ("the first of May", "seventeenth January") or before the first ("January the
    first", not "October third week"), or, from "fourth" on, after "the" (not "I'll take the
    fifth", "which was the fifth?": :data:`_SPELLED_NOT_DAY_BEFORE`) with nothing after them an
    ordinal could number (:data:`_ORDINAL_ENDS`: "on the seventeenth?", "what happened the
    seventeenth?", not "after the fifth session", "on the fourth day of the trip", "the fifth or
    sixth time", "the fifth and final season"). "May" and "March" as the month after an ordinal
    need "of" or a year after them ("the second march on Washington" is none, "on second March
    2023" is a day), "March" after one from "fourth" on neither ("the seventeenth march");
    "May" before one "the" or "fourth" on ("the first may be", "you may first ask" are no days);
    "first", "second" and "third" alone never name one ("our first conversation")."""
    found = []
    for m in _SPELLED_ORDINAL.compiled.finditer(q):
        n = _ORDINAL_WORDS[m.group(2)] + {"twenty": 20, "thirty": 30}.get(m.group(1) or "", 0)
        found.append((m.start(), m.end(), n if n <= 31 and not (m.group(1) and _ORDINAL_WORDS[m.group(2)] > 9) else 0))
    if not found:
        return q, []
    groups: list[list[tuple[int, int, int]]] = []
    for hit in found:  # ordinals joined by "," / "and" / "or" / "to" are one list
        if groups and _SPELLED_JOIN.compiled.fullmatch(q, groups[-1][-1][1], hit[0]):
            groups[-1].append(hit)
        else:
            groups.append([hit])
    out, regions, last = [], [], 0
    for group in groups:
        if any(n == 0 for _, _, n in group):
            continue  # "thirty-second", "twenty tenth": no day of a month
        i, j, low = group[0][0], group[-1][1], min(n for _, _, n in group)
        after = _SPELLED_MONTH_AFTER.compiled.match(q, j)
        before = _SPELLED_MONTH_BEFORE.compiled.search(q, max(0, i - 16), i)
        day = bool((after and (after.group(2) not in ("may", "march") or after.group(1)
                               or (after.group(2) == "march" and low >= 4)
                               or _SPELLED_YEAR_AFTER.compiled.match(q, after.end())))
                   or (before and (before.group(1) != "may" or before.group(2) or low >= 4)
                       and not _SPELLED_NOT_DAY_AFTER.compiled.match(q, j))
                   or (low >= 4 and _SPELLED_THE_BEFORE.compiled.search(q, max(0, i - 8), i)
                       and not _SPELLED_NOT_DAY_BEFORE.compiled.search(q, max(0, i - 24), i)
                       and _ORDINAL_ENDS.compiled.match(q, j)))
        if not day:
            continue
        for a, b, n in group:
            out += [q[last:a], f"{n}{_suffix(n)}".ljust(b - a)]
            regions.append((a, b))
            last = b
    return ("".join(out) + q[last:], regions) if regions else (q, [])


def _suffix(n: int) -> str:
    """An ordinal's suffix in digits: ``st`` (1, 21, 31), ``nd``, ``rd``, else ``th`` (11-13 too)."""
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _snapped(spans: list[Span], regions: list[tuple[int, int]]) -> list[Span]:
    """``spans`` with each end that falls inside a spelled-out ordinal's ``regions`` moved to the
    region's end (a span ends after the digits' suffix; the padding is the word's rest)."""
    if not regions:
        return spans
    out = []
    for i, j, d0, d1 in spans:
        for a, b in regions:
            if a < j < b:
                j = b
            if a < i < b:
                i = a
        out.append((i, j, d0, d1))
    return out


def _single_days(q: str, ref: Callable[[], date], order: str, ahead: int = 0, plans: bool = False) -> list[Span]:
    """Every expression naming one day (or one span: "last week") in ``q``, left to right, none
    overlapping (earlier patterns claim their text first). A year-less day is the latest such day
    not after ``ref() + ahead`` days (``ahead`` > 0: a text that may speak of days to come).
    ``plans``: ``q`` is a text written on ``ref()`` (not a question), where "on Friday" in a clause
    with no past-tense word is the Friday to come. A day of the month may be spelled out
    (:func:`_spelled_out`)."""
    q, regions = _spelled_out(q)
    return _snapped(_read_days(q, ref, order, ahead, plans), regions)


def _read_days(q: str, ref: Callable[[], date], order: str, ahead: int, plans: bool) -> list[Span]:
    """:func:`_single_days` of a text whose days are written in digits."""

    def yearless() -> date:
        return _shift(ref(), ahead) if ahead else ref()

    got: list[Span] = []
    starts: list[int] = []  # the claimed spans, none overlapping: sorted by start, so by end too
    ends: list[int] = []

    def add(i: int, j: int, d0: date | None, d1: date | None = None) -> None:
        if d0 is None:
            return
        k = bisect_left(starts, i)
        if (k > 0 and ends[k - 1] > i) or (k < len(starts) and starts[k] < j):
            return  # overlaps a span an earlier pattern claimed
        starts.insert(k, i)
        ends.insert(k, j)
        got.append((i, j, d0, d1 or d0))

    def day_word_before(i: int) -> bool:
        return _DAY_WORD_BEFORE.compiled.search(q, max(0, i - _BEHIND), i) is not None

    def make(y: int, m: int, d: int) -> date | None:
        try:
            return date(y, m, d)
        except ValueError:
            return None

    for m in _ISO.finditer(q):
        add(m.start(), m.end(), make(int(m.group(1)), int(m.group(3)), int(m.group(4))))
    for m in _NUM_YEAR.finditer(q):
        a, b, y = int(m.group(1)), int(m.group(3)), m.group(4)
        md = _pick_order(a, b, order, m.group(2) == ".", True)
        if md:
            add(m.start(), m.end(), make(_century(int(y)) if len(y) == 2 else int(y), *md))
    for rx, day_first in ((_DAY_MON_YEAR, True), (_YEAR_MON_DAY, False)):
        for m in rx.finditer(q):
            y, mon_s, d = (m.group(4), m.group(3), m.group(1)) if day_first else (m.group(1), m.group(3), m.group(4))
            add(m.start(), m.end(), make(_year_of(y), _MONTHS[mon_s.lower()], int(d)))
    for m in _CJK_DAY.finditer(q):  # 5月4号, 4月27日, 2026年5月4日
        add(m.start(), m.end(), _latest(int(m.group(2)), int(m.group(3)), int(m.group(1)) if m.group(1) else None, yearless()))
    listed: list[tuple[int, int]] = []  # where ordinals are listed (read as days or not), in order

    def ordinal_lists(many: bool) -> None:
        """Days of the month listed ("on the 1st and 2nd", "the 3rd, 4th and 5th of May"): the span
        of them, in a month named after them or else the latest month holding them up to the
        reference day. ``many``: only lists of three or more days with a month (read before two of
        one month joined by "and" or "to", which are _DAY_SPAN_MONTH's and may follow "between")."""
        for m in _ORDINAL_LIST.finditer(q):
            if not many:
                listed.append((m.start(), m.end()))
            nums = [int(n) for n in _ORDINAL_NUMBER.findall(q, m.start(), m.end())]
            if many and (len(nums) < 3 or not m.group(2)):
                continue
            lo, hi = min(nums), max(nums)
            if m.group(2):  # a month named after them: those days of it
                mon, y = _MONTHS[m.group(2).lower().rstrip(".")], int(m.group(3)) if m.group(3) else None
                d1 = _latest(mon, hi, y, yearless())
                d0 = _latest(mon, lo, d1.year if d1 is not None else y, yearless() if d1 is None else d1)
                if d0 is not None and d1 is not None and d0 <= d1:
                    add(m.start(), m.end(), d0, d1)
                continue
            opener = _OPEN.compiled.search(q, max(0, m.start() - _BEHIND), m.start())
            if not _ordinal_is_day(q, m, opener is not None or day_word_before(m.start())):
                continue  # "the 1st and 2nd drafts", "the 2nd or 3rd time": ordinals of something else
            d1 = _latest_of_month(hi, ref())
            # "between the 1st and 5th": the range's words are the list's too
            add(m.start() if opener is None else opener.start(), m.end(),
                d1.replace(day=lo) if d1 is not None else None, d1)

    ordinal_lists(True)  # "the 3rd, 4th and 5th of May" (else "4th and 5th of May" is read alone)
    for m in _MONTH_DAY_LIST.finditer(q):  # "May 3rd, 4th and 5th": the span of them in that month
        days = [int(n) for n in _LISTED_DAY.findall(m.group(2))]
        mon, y = _MONTHS[m.group(1).lower().rstrip(".")], int(m.group(3)) if m.group(3) else None
        if not all(1 <= d <= 31 for d in days):
            continue
        d1 = _latest(mon, max(days), y, yearless())
        d0 = _latest(mon, min(days), d1.year if d1 is not None else y, yearless() if d1 is None else d1)
        if d0 is not None and d1 is not None and d0 <= d1:
            add(m.start(), m.end(), d0, d1)
    for rx, day_first in ((_DAY_SPAN_MONTH, True), (_MONTH_DAY_SPAN, False)):  # days of one month written once
        for m in rx.finditer(q):
            # "on the 12th and 16th of May" names two days: the span of both is the nearest one range
            # says (the 12th alone would be read as the latest 12th, of another month)
            groups = m.groups()[1:]
            if day_first:
                day0, _join, day1, mon_s, year = groups
            else:
                mon_s, day0, _join, day1, year = groups
            mon, y = _MONTHS[mon_s.lower().rstrip(".")], int(year) if year else None
            d1 = _latest(mon, int(day1), y, yearless())
            d0 = _latest(mon, int(day0), d1.year if d1 is not None else y, yearless() if d1 is None else d1)
            if d0 is not None and d1 is not None and d0 <= d1:
                add(m.start(), m.end(), d0, d1)
    ordinal_lists(False)  # "the 1st or 2nd of May", "on the 1st and 2nd", "the 3rd, 4th and 5th"
    for rx, day_first in ((_DAY_MONTH, True), (_MONTH_DAY, False)):
        for m in rx.finditer(q):
            day_s, mon_s = (m.group(1), m.group(2)) if day_first else (m.group(2), m.group(1))
            mon = _MONTHS[mon_s.lower().rstrip(".")]
            got_day = _latest(mon, int(day_s), _year_of(m.group(3)) if m.group(3) else None, yearless())
            if got_day is None and day_first and m.group(3) and m.group(3)[0].isdigit() and len(m.group(3)) == 2:
                # "on 29 Feb 23": no such day that year, so 23 was no year ("23" is not then the day)
                add(m.start(), m.end(2), _latest(mon, int(day_s), None, yearless()))
                continue
            add(m.start(), m.end(), got_day)
    for rx, dots in ((_NUM_DOT, True), (_NUM_SLASH, False)):
        for m in rx.finditer(q):
            if _not_a_day(q, m, dots):
                continue
            a_s, b_s = m.group(1), m.group(2).rstrip(".")
            md = _pick_order(int(a_s), int(b_s), order, dots, False)
            if md:
                add(m.start(), m.end(), _latest(md[0], md[1], None, yearless()))
    for m in _ORDINAL_DAY.finditer(q):  # "on the 13th": the latest 13th up to the reference day
        if _impossible_in_named_month(q, m):
            continue  # "the 31st of February": no day (it was read as the latest 31st, of another month)
        if not day_word_before(m.start()) and not _ORDINAL_ENDS.compiled.match(q, m.end()):
            continue  # "the 3rd option", "the 5th floor": an ordinal of something else, not a day
        k = bisect_right(listed, (m.start(), len(q) + 1)) - 1
        if k >= 0 and listed[k][1] > m.start():
            continue  # one of a list, which the list's own rule read or refused ("the 1st and 2nd drafts")
        # in a text, "see you on the 17th" with no past-tense word in its clause is a plan: the 17th to
        # come, or that very day when written on the 17th (it was the next month's)
        clause = _clause_of(q, m.start(), m.end()) if plans else ""
        soon = bool(clause) and not _PAST.compiled.search(clause) and not _PAST_TOLD.compiled.search(clause)
        add(m.start(), m.end(), _next_of_month(int(m.group(1)), ref()) if soon else _latest_of_month(int(m.group(1)), ref()))
    for m in _WEEKDAY_OF_WEEK.finditer(q):  # "on Tuesday last week": before "last week" is read
        wd, which = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        monday = ref() - timedelta(days=ref().weekday()) + timedelta(days={"last": -7, "this": 0, "next": 7}[which])
        add(m.start(), m.end(), monday + timedelta(days=_WEEKDAYS[wd]))
    for m in _HOLIDAY.finditer(q):
        mon, day = _HOLIDAYS[re.sub(r"\s+", " ", m.group(1)).replace("\u2019", "'")]
        add(m.start(), m.end(), _latest(mon, day, int(m.group(2)) if m.group(2) else None, yearless()))
    for m in _FORTNIGHT_AGO.finditer(q):  # as "two weeks ago": about then
        mid = ref() - timedelta(days=14)
        add(m.start(), m.end(), mid - timedelta(days=3), min(ref(), mid + timedelta(days=3)))
    for rx, back0, back1 in _RELATIVE:
        for m in rx.finditer(q):
            add(m.start(), m.end(), ref() - timedelta(days=back0), ref() - timedelta(days=back1))
    for m in _THIS_WEEK.finditer(q):
        add(m.start(), m.end(), ref() - timedelta(days=ref().weekday()), ref())
    for m in _LAST_MONTH.finditer(q):
        last = ref().replace(day=1) - timedelta(days=1)
        add(m.start(), m.end(), last.replace(day=1), last)
    for m in _THIS_MONTH.finditer(q):
        add(m.start(), m.end(), ref().replace(day=1), ref())
    for rx in (_IN_MONTH, _MONTH_YEAR):  # a whole month: the latest such month begun by the reference day
        for m in rx.finditer(q):
            mon, year = _MONTHS[m.group(1).lower().rstrip(".")], m.group(2)
            first = _latest(mon, 1, int(year) if year else None, yearless())
            if first is not None:
                nxt = first.replace(day=28) + timedelta(days=4)
                add(m.start(), m.end(), first, nxt - timedelta(days=nxt.day))
    for m in _AGO.finditer(q):
        add(m.start(), m.end(), ref() - timedelta(days=int(m.group(1))))
    for m in _UNITS_AGO.finditer(q):
        n, unit = _count(m.group(1)), m.group(2)
        if unit == "day":
            add(m.start(), m.end(), ref() - timedelta(days=n))
        else:  # about then: a week or a month either side of it, by halves
            width = 7 if unit == "week" else 30
            mid = ref() - timedelta(days=n * width)
            add(m.start(), m.end(), mid - timedelta(days=width // 2), min(ref(), mid + timedelta(days=width // 2)))
    for m in _PAST_UNITS.finditer(q):
        n = _count(m.group(1)) * (7 if m.group(2) == "week" else 1)
        add(m.start(), m.end(), ref() - timedelta(days=n), ref())
    for m in _LAST_NIGHT.finditer(q):
        add(m.start(), m.end(), ref() - timedelta(days=1))
    for m in _THIS_PART.finditer(q):
        add(m.start(), m.end(), ref())
    for m in _WEEKEND.finditer(q):
        add(m.start(), m.end(), *_weekend(ref(), m.group(1), ahead > 0))
    for m in _TOMORROW.finditer(q):
        add(m.start(), m.end(), ref() + timedelta(days=2 if m.group(0).startswith("the") else 1))
    for m in _NEXT_WEEK.finditer(q):
        monday = ref() + timedelta(days=7 - ref().weekday())
        add(m.start(), m.end(), monday, monday + timedelta(days=6))
    for m in _NEXT_WEEKDAY.finditer(q):
        add(m.start(), m.end(), ref() + timedelta(days=(_WEEKDAYS[m.group(1)] - ref().weekday()) % 7 or 7))
    for m in _IN_UNITS.finditer(q):
        add(m.start(), m.end(), ref() + timedelta(days=_count(m.group(1))))
    for m in _YEAR_WORDS.finditer(q):
        year = int(m.group(2)) if m.group(2) else ref().year - (m.group(1) == "last")
        if year < 1:
            continue  # "last year" asked in year 1 (a transcript stamped with Go's zero time)
        end = ref() if m.group(1) == "this" else date(year, 12, 31)
        add(m.start(), m.end(), date(year, 1, 1), end)
    weekdays: set[int] = set()  # where a weekday's span starts
    # (a question's range words; in a text, "before Saturday" is a plan's deadline as often as not)
    for m in () if plans else _WEEKDAY_SPAN.finditer(q):  # "between Monday and Wednesday"
        last = ref() - timedelta(days=(ref().weekday() - _WEEKDAYS[m.group(2).lower()]) % 7 or 7)
        first = last - timedelta(days=(last.weekday() - _WEEKDAYS[m.group(1).lower()]) % 7 or 7)
        add(m.start(1), m.end(1), first)  # (the range's words are _find's to read)
        add(m.start(2), m.end(2), last)
        weekdays.update((m.start(1), m.start(2)))
    for m in () if plans else _WEEKDAY_BOUND.finditer(q):  # "since Monday", "before Friday"
        add(m.start(1), m.end(1), ref() - timedelta(days=(ref().weekday() - _WEEKDAYS[m.group(1).lower()]) % 7 or 7))
        weekdays.add(m.start(1))
    for m in _WEEKDAY.finditer(q):
        # "on Friday", "last Friday": the latest Friday before the reference day; in a text
        # (``plans``) a bare "on Friday" in a clause with no past-tense word is a plan ("remind me
        # to call her on Sunday", "see you on Friday"): the next Friday after the day it was written
        # "this Saturday" is the coming one (today's on a Saturday) in a question that may look ahead
        # ("what are we doing this Saturday?") or a text's clause with no past word, else the latest
        wd = _WEEKDAYS[m.group(2).lower()]
        word = m.group(1).lower()
        clause = _clause_of(q, m.start(), m.end()) if plans and word in ("on", "this") else ""
        soon = bool(clause) and not _PAST.compiled.search(clause) and not _PAST_TOLD.compiled.search(clause)
        if word == "this" and (soon or (ahead and not plans)):
            add(m.start(), m.end(), ref() + timedelta(days=(wd - ref().weekday()) % 7))
        elif soon:
            add(m.start(), m.end(), ref() + timedelta(days=(wd - ref().weekday()) % 7 or 7))
        else:
            back = (ref().weekday() - wd) % 7 or (0 if m.group(1) == "this" else 7)
            add(m.start(), m.end(), ref() - timedelta(days=back))
        weekdays.add(m.start())
    for m in () if plans else _BARE_WEEKDAY.finditer(q):  # "what did Kate say Tuesday?" (add() skips a
        # weekday read above: "on Tuesday", "next Friday", "since Monday")
        k = 1 if m.group(1) else 2
        wd = _WEEKDAYS[m.group(1)] if m.group(1) else _WEEKDAY_SHORT[m.group(2)]
        add(m.start(k), m.end(k), ref() - timedelta(days=(ref().weekday() - wd) % 7 or 7))
        weekdays.add(m.start(k))
    if isinstance(ref, _Ref):  # a conversation named by its place in the memory's own timeline
        for rx, which in ((_FIRST_TALK, ref.first_talk), (_LAST_TALK, ref.last_talk)):
            for m in rx.finditer(q):
                add(m.start(), m.end(), which())
    got.sort()
    # a weekday written before the day it names ("on Sunday 7 January", "last Friday, 12/01/2024"):
    # the day, its words the weekday's too (the weekday alone would be read as another day)
    out: list[Span] = []
    for span in got:
        if out and out[-1][0] in weekdays and out[-1][0] != span[0] and span[0] not in weekdays \
                and _WEEKDAY_BEFORE_DAY.fullmatch(q, out[-1][1], span[0]):
            span = (out.pop()[0], *span[1:])
        out.append(span)
    return out


def _clause_of(q: str, i: int, j: int) -> str:
    """The clause of ``q`` holding ``q[i:j]``: from the last :data:`_CLAUSE_END` before it (within
    200 characters) to the next after it."""
    lo = max(0, i - 200)
    start = lo
    for m in _CLAUSE_END.finditer(q, lo, i):
        start = m.end()
    end = _CLAUSE_END.search(q, j)
    return q[start:end.start() if end is not None else len(q)]


TWO_DIGIT_YEARS_AHEAD = 20
"""A two-digit year is this century's unless that is more than this many years after the clock's
year, then the last century's (in 2026: ``24`` is 2024, ``46`` 2046, ``95`` 1995)."""


def _year_of(text: str) -> int:
    """A year as written after a day: ``2024``, or two digits (``24``, ``'24``: :func:`_century`)."""
    digits = text.lstrip("'\u2019")
    return _century(int(digits)) if len(digits) == 2 else int(digits)


def _century(yy: int) -> int:
    """The year of a two-digit ``yy`` (:data:`TWO_DIGIT_YEARS_AHEAD`)."""
    return 2000 + yy if 2000 + yy <= date.today().year + TWO_DIGIT_YEARS_AHEAD else 1900 + yy


def _count(word: str) -> int:
    """A count written as digits or a word (``a``: 1, ``two``: 2)."""
    return int(word) if word.isdigit() else _COUNTS.get(word.strip(), 1)


def _weekend(today: date, which: str, ahead: bool) -> tuple[date, date]:
    """A Saturday and its Sunday: ``last`` / ``past`` / ``previous`` weekend, the latest one before
    today's (on a weekday: the one just gone); ``this`` weekend, today's when today is Saturday or
    Sunday, else the coming one for a question about plans and the one just gone for any other."""
    saturday = today - timedelta(days=(today.weekday() - 5) % 7)  # the latest Saturday up to today
    in_it = today.weekday() >= 5
    if which in ("last", "past", "previous"):
        if in_it:
            saturday -= timedelta(days=7)
    elif not in_it and ahead:
        saturday += timedelta(days=7)
    return saturday, saturday + timedelta(days=1)


def _find(q: str, today: Callable[[], date], order: str = DEFAULT_DATE_ORDER,
          ahead: int = 0) -> tuple[tuple[date, date], str] | None:
    """The range the query names and the words naming it: "between X and Y" / "from X to Y";
    "before X" (up to the day before), "until X" (up to X), "after X" (from the day after),
    "since X" / "from X" (from X); else the first day named. ``ahead``: as :func:`_single_days`'s."""
    try:
        days = _single_days(q, today, order, ahead)
    except (OverflowError, ValueError):  # a relative day, or year, counted back from (or past) the calendar's edge
        return None
    if not days:
        return None
    for (i1, j1, a0, _a1), (i2, j2, _b0, b1) in zip(days, days[1:], strict=False):
        if _JOIN.match(q[j1:i2]):
            opener = _OPEN.compiled.search(q, max(0, i1 - _BEHIND), i1)
            joint = q[j1:i2].strip()
            if opener is not None or joint not in ("and", "-", "–") or (
                    joint != "and" and _whole_day(q[i1:j1]) and _whole_day(q[i2:j2])):  # "Jan 5 - Jan 9"
                i = opener.start() if opener is not None else i1
                if a0 <= b1:
                    lo, hi = a0, b1
                elif a0 == _a1 and _b0 == b1 and not _has_year(q[i1:j1]) and not _has_year(q[i2:j2]):
                    lo, hi = _yearless_span(a0, b1)
                else:
                    lo, hi = _b0, _a1  # "between 20 Jan 2025 and 3 Jan 2025": either order
                return (lo, hi), q[i:j2]
    i, j, d0, d1 = days[0]
    bound = _BOUND.compiled.search(q, max(0, i - _BEHIND), i)
    if bound is not None:
        word, phrase = bound.group(1), q[bound.start():j]
        if word == "before":
            return ((_FIRST_DAY, d0 - timedelta(days=1)), phrase) if d0 > _FIRST_DAY else None
        if word in ("until", "till"):
            return (_FIRST_DAY, d1), phrase
        if word == "after":
            return ((d1 + timedelta(days=1), _LAST_DAY), phrase) if d1 < _LAST_DAY else None
        return (d0, _LAST_DAY), phrase  # since
    return (d0, d1), q[i:j]


_YEAR_IN = re.compile(r"\d{4}|\d{1,2}[./-]\d{1,2}[./-]\d{2}|['\u2019]\d{2}\b|[a-z][./-]\d{2}\b")
_MONTH_WORD = re.compile(r"[a-z]{3}")


def _has_year(text: str) -> bool:
    """Whether a day's words carry its year (``2025``, ``17.01.24``)."""
    return _YEAR_IN.search(text) is not None


def _whole_day(text: str) -> bool:
    """A day written whole (a month with it, or numbers with separators), which a dash can join to
    another into a range ("Jan 5 - Jan 9", "2026-11-01 - 2026-11-05"), unlike a bare number."""
    return _MONTH_WORD.search(text) is not None or len(re.findall(r"\d+", text)) >= 2


def _yearless_span(a: date, b: date) -> tuple[date, date]:
    """Two year-less days named in this order, each resolved on its own to the latest such day,
    which put ``a`` after ``b``: in the order written within ``a``'s year ("between Nov 25 and Dec
    5" asked on 29 November: the days from the 25th on, not from last December); else a span across
    New Year ("between Dec 28 and Jan 3": from the latest 28 December into the January after it)
    or the days written backwards ("between 20 Jan and 3 Jan"), whichever is shorter."""
    if (a.month, a.day) <= (b.month, b.day):
        for y in (a.year, b.year):  # (29 February: the year that has it)
            with contextlib.suppress(ValueError):
                return a.replace(year=y), b.replace(year=y)
    try:
        wrap: tuple[date, date] | None = (a, b.replace(year=a.year + 1))
    except ValueError:  # 29 February in a year without it, or the calendar's end
        wrap = None
    try:
        back = (b.replace(year=a.year), a)
    except ValueError:
        back = (b, a)
    if wrap is not None and wrap[1] - wrap[0] < back[1] - back[0]:
        return wrap
    return back


# -- transcripts ---------------------------------------------------------------------------------
_CACHE: OrderedDict[tuple[str, int, int], tuple[str | None, list[tuple[int, str]]]] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_FILES = 256


def _when(ts: str) -> datetime | None:
    try:
        return datetime.fromisoformat(ts)
    except ValueError:
        return None


def _lived(t: datetime) -> datetime:
    """A transcript's UTC time (naive, as :func:`_when` reads it) as this process's local clock
    shows it, naive, as a file's modification time and "today" are read: a message stamped 23:30
    UTC is 08:30 the next morning in Tokyo, 18:30 the same evening in New York (the tolerance past a
    named day's end counts local hours). Unchanged in UTC."""
    if in_utc():
        return t
    try:
        return t.replace(tzinfo=UTC).astimezone().replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return t


def transcript_dates(path: str | int, *, name: str | None = None) -> tuple[str | None, list[tuple[int, str]]]:
    """(the session header's timestamp, [(JSONL line, message timestamp), ...]) of a transcript,
    read once per file version. Timestamps are ``YYYY-MM-DDTHH:MM`` in UTC. ``path`` may be an
    open file descriptor (left open; ``name`` keys the cache)."""
    try:
        st = os.fstat(path) if isinstance(path, int) else os.stat(path)
    except OSError:
        return None, []
    key = (name or str(path), st.st_size, st.st_mtime_ns)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    header: str | None = None
    stamps: list[tuple[int, str]] = []
    try:
        with open(path, "rb", closefd=not isinstance(path, int)) as f:
            if isinstance(path, int):
                f.seek(0)
            for n, raw in enumerate(_iter_raw_lines(f, DEFAULT_MAX_LINE_BYTES), 1):
                got = record_stamp(raw)
                if got is None:
                    continue
                is_message, ts = got
                if is_message:
                    stamps.append((n, ts))
                elif header is None:
                    header = ts
    except OSError:
        return None, []
    value = (header, stamps)
    with _CACHE_LOCK:
        _CACHE[key] = value
        while len(_CACHE) > _CACHE_FILES:
            _CACHE.popitem(last=False)
    return value


def chunk_date(path: str, source: str, start_line: int, end_line: int, mtime_ms: int | None,
               real_path: str | None = None, *,
               dates: tuple[str | None, list[tuple[int, str]]] | None = None) -> str | None:
    """``YYYY-MM-DD`` (daily notes, other files) or ``YYYY-MM-DDTHH:MM`` UTC (transcripts).
    ``dates``: the transcript's :func:`transcript_dates`, when the caller read them."""
    d = date_from_path(path)
    if d is not None:
        return d.isoformat()
    if source == "sessions" and (real_path or dates):
        header, stamps = dates if dates is not None else transcript_dates(real_path or "")
        for line, ts in stamps:
            if start_line <= line <= end_line:
                return ts
        if header:
            return header
    if mtime_ms:
        return datetime.fromtimestamp(mtime_ms / 1000).date().isoformat()
    return None


Stamps = tuple[str | None, list[tuple[int, str]]]
"""A transcript's :func:`transcript_dates`: (its header's timestamp, [(JSONL line, timestamp), ...])."""


def once_per_file(stamps_of: Callable[[str], Stamps]) -> Callable[[str], Stamps]:
    """``stamps_of`` read once per path (its PathError too): one query dates hundreds of candidates,
    most of them from a few transcripts, and each read opens the file as ``get`` does."""
    seen: dict[str, Stamps | PathError] = {}

    def read(path: str) -> Stamps:
        got = seen.get(path)
        if got is None:
            try:
                got = stamps_of(path)
            except PathError as exc:
                got = exc
            seen[path] = got
        if isinstance(got, PathError):
            raise got
        return got

    return read


# a clock time a daily note states for what follows: a heading holding one at its start or in
# brackets ("## 23:40 call with Mo", "## Chat with Jorge (00:45)"), or a line that starts with one
# ("00:45 Jorge: ...", "- [00:45] ...", "- 12:45am ..."); "## Score 3:2" states none
_NOTE_CLOCK = LazyPattern(r"^\s*(?:#{1,6}\s+(?:[^\n]*?[(\[])?|[-*+]\s+\[?|\[)?"
                          r"([01]?\d|2[0-3]):([0-5]\d)(?::[0-5]\d)?(?:\s*([ap])\.?m\b\.?)?(?=[\s)\]|,;-]|$)",
                          re.IGNORECASE)


def _note_clock(line: str) -> time | None:
    """The clock time ``line`` states for the lines after it (:data:`_NOTE_CLOCK`), else None."""
    m = _NOTE_CLOCK.match(line)
    if m is None:
        return None
    hour, minute, half = int(m.group(1)), int(m.group(2)), (m.group(3) or "").lower()
    if half:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if half == "p" else 0)
    return time(hour, minute)


class Dater:
    """When each search candidate was written (:func:`chunk_days`, :func:`chunk_date`), read for a
    query's candidates at once: a daily note's day (its name), another file's modification time,
    and a transcript chunk's message days from the index (``chunk_days``, recorded at indexing
    time: schema 6), so a search never reads a transcript to date it. An index written before it
    has no such table: its transcript chunks are dated from the files (``stamps_of``, read as
    ``get`` opens them: :func:`memory_core.query.reading.indexed_transcript_dates`; PathError when
    one may not be read) until the next run rebuilds it."""

    def __init__(self, conn: Any, stamps_of: Callable[[str], Stamps]) -> None:
        self.conn = conn
        self.stamps_of = stamps_of
        self.stored = has_table(conn, "chunk_days")
        self._stamps: dict[int, list[tuple[str, int, str]]] = {}  # rid -> (first, line, day), oldest first
        self._clocks: dict[str, list[tuple[int, time]]] = {}  # daily note path -> (line, clock time) stated

    def load(self, hits: Iterable[Any]) -> None:
        """Read the recorded days of these candidates' transcript chunks (one statement per 500)."""
        if not self.stored:
            return
        need = [h.rid for h in hits if h.source == "sessions" and h.rid not in self._stamps]
        for i in range(0, len(need), 500):
            part = need[i:i + 500]
            for rid in part:
                self._stamps[rid] = []
            for rid, first, line, day in self.conn.execute(
                    f"SELECT rid, first, line, day FROM chunk_days WHERE rid IN ({','.join('?' * len(part))})"
                    " ORDER BY rid, first, day", part):
                self._stamps[rid].append((first, line, day))

    def _recorded(self, h: Any) -> list[tuple[str, int, str]] | None:
        """A transcript chunk's recorded (time, JSONL line, day) per day (UTC and, for a timestamp
        with another offset, local), oldest first; None where the index records none (a note, an
        index of schema 5)."""
        if h.source != "sessions" or not self.stored or date_from_path(h.path) is not None:
            return None
        if h.rid not in self._stamps:
            self.load((h,))
        return self._stamps[h.rid]

    def day_start(self, h: Any, dates: DateRange) -> tuple[str, int] | None:
        """Where a transcript chunk that began before the named range has its first message of the
        range: (that message's time, its JSONL line), for a snippet that shows the day asked about
        rather than the evening before; None when the chunk begins in the range (or after it, or
        has no message in it)."""
        got = self._recorded(h)
        start, end = dates.start.isoformat(), dates.end.isoformat()
        if not got or _when(got[0][0]) is None or min(day for _, _, day in got) >= start:
            return None
        return next(((ts, n) for ts, n, day in got if start <= day <= end), None)

    def day_starts(self, h: Any) -> tuple[tuple[str, int], ...]:
        """A transcript chunk's messages that begin a new UTC day after its first: (time, JSONL
        line) of each later day's earliest message; () for a chunk of one day (or a note)."""
        got = self._recorded(h)
        if not got or len(got) == 1 or got[0][0][:10] == got[-1][0][:10]:  # (oldest first: one UTC day)
            return ()
        firsts: dict[str, tuple[str, int]] = {}
        for ts, n, _day in got:
            if _when(ts) is not None and len(ts) >= 16:
                utc = ts[:10]
                if utc not in firsts or (ts, n) < firsts[utc]:
                    firsts[utc] = (ts, n)
        days = sorted(firsts)
        return tuple(firsts[d] for d in days[1:])

    def note_clocks(self, path: str, start_line: int, end_line: int, day: date) -> list[datetime]:
        """The clock times a daily note states for lines ``start_line``..``end_line`` (on its
        ``day``): the time in force at the first line (the last timed heading or line above it,
        :data:`_NOTE_CLOCK`) and every time stated inside. Read from the index's chunks of the note
        (each note parsed once per search), so a note written past midnight ("## Chat with Jorge
        (00:45)" in the next day's note) can count as the evening before, as a transcript's
        message does."""
        clocks = self._clocks.get(path)
        if clocks is None:
            lines: dict[int, str] = {}
            for first, text in self.conn.execute(
                    "SELECT start_line, text FROM chunks WHERE path = ? ORDER BY start_line", (path,)):
                for i, line in enumerate(str(text).split("\n")):
                    lines.setdefault(int(first) + i, line)
            clocks = [(n, t) for n in sorted(lines) if (t := _note_clock(lines[n])) is not None]
            self._clocks[path] = clocks
        in_force = [t for n, t in clocks if n <= start_line][-1:]
        inside = [t for n, t in clocks if start_line < n <= end_line]
        return [datetime.combine(day, t) for t in in_force + inside]

    def _file_stamps(self, path: str) -> Stamps | None:
        try:
            return self.stamps_of(path)
        except PathError:
            return None

    def when(self, h: Any) -> list[datetime | date]:
        """:func:`chunk_days` of candidate ``h``."""
        got = self._recorded(h)
        if got is not None:  # the days (each message's UTC and local day), then its times on the local clock (the tolerance)
            days: list[datetime | date] = []
            for ts, _, day in got:
                with contextlib.suppress(ValueError):
                    days.append(date.fromisoformat(day))
                if (t := _when(ts)) is not None:
                    days.append(_lived(t))
            return days or chunk_days(h.path, "", h.start_line, h.end_line, h.mtime_ms, None)
        stamps = self._file_stamps(h.path) if h.source == "sessions" else None
        return chunk_days(h.path, h.source, h.start_line, h.end_line, h.mtime_ms, stamps)

    def date(self, h: Any) -> str | None:
        """:func:`chunk_date` of candidate ``h``: a transcript chunk's earliest message time."""
        got = self._recorded(h)
        if got is not None:
            return got[0][0] if got else chunk_date(h.path, "", h.start_line, h.end_line, h.mtime_ms)
        stamps = self._file_stamps(h.path) if h.source == "sessions" else None
        return chunk_date(h.path, h.source, h.start_line, h.end_line, h.mtime_ms, dates=stamps)


# -- search: a query naming a day ------------------------------------------------------------------
DATE_MATCH_BONUS = 0.5
"""A chunk written in the range a query names that matches the query's words (relevance at least
``WORDS_MATCH``) gets ``relevance + (1 - relevance) * 0.5 * nearness`` (at least 0.5 inside the range);
another day's chunk is capped at 0.5; a chunk of the range that matches only on its date scores just
below 0.5 (``DATE_ONLY_BAND``), after every chunk that matches the words clearly."""
WORDS_MATCH = 0.15
"""The relevance from which a chunk matches the query's words (``ranking.DEFAULT_MIN_SCORE``: the
calibrated scores are absolute, so the default threshold is what "relevant" means)."""
DATE_ONLY_BAND = 0.001
"""A chunk of the range below ``WORDS_MATCH`` scores ``0.5 - DATE_ONLY_BAND * (1 - relevance / WORDS_MATCH)``
(at least ``min_score``): shown, after whatever matches the words clearly."""
MENTIONED = 0.9
"""The nearness of a chunk whose text names a day of the range (:func:`mentions`) but that was
written on another day: lifted as the day's own, a little less."""
MAX_DATED_CANDIDATES = 200
MAX_FETCHED_DAYS = 31
"""An open range ("before 17 January", "since Monday") fetches the chunks of this many days next to
its bound; a closed one of up to 62 days all of its days."""


def chunk_days(path: str, source: str, start_line: int, end_line: int, mtime_ms: int | None,
               stamps: Stamps | None) -> list[datetime | date]:
    """When a chunk was written: a daily note's day (its name: a day, no clock); the time of every
    message of a transcript chunk (else the session header's), on the local clock (:func:`_lived`);
    another file's modification time (local)."""
    d = date_from_path(path)
    if d is not None:
        return [d]
    if source == "sessions" and stamps is not None:
        header, lines = stamps
        times: list[datetime | date] = [_lived(t) for n, ts in lines if start_line <= n <= end_line and (t := _when(ts)) is not None]
        if times:
            return times
        first = _when(header) if header else None
        if first is not None:
            return [_lived(first)]
    if mtime_ms:
        try:
            return [datetime.fromtimestamp(mtime_ms / 1000)]
        except (ValueError, OverflowError, OSError):
            return []
    return []


def nearness(when: Iterable[datetime | date], dates: DateRange) -> float:
    """1 when one of ``when`` falls in the range; a clock time ``h`` hours past its end, ``h`` below
    the tolerance: ``1 - h / tolerance`` (a message sent past midnight, or from a time zone behind
    UTC, is stamped the next day); else 0. A daily note's day is its name (a day, no clock: no
    tolerance), but a clock time the next day's note states counts (:meth:`Dater.note_clocks`)."""
    best = 0.0
    after = datetime.combine(dates.end + timedelta(days=1), datetime.min.time()) if dates.end < _LAST_DAY else None
    for t in when:
        d = t.date() if isinstance(t, datetime) else t
        if dates.start <= d <= dates.end:
            return 1.0
        if isinstance(t, datetime) and after is not None and dates.tolerance > 0:
            h = (t - after).total_seconds() / 3600
            if 0 <= h < dates.tolerance:
                best = max(best, 1 - h / dates.tolerance)
    return best


def mentions(text: str, written: date | None, dates: DateRange) -> bool:
    """Whether ``text`` names a day of the range in words (``see you on 17.01``, ``yesterday``): a
    single day; relative ones read from ``written`` (the day the text was written), a year-less one
    as the nearest such day (within half a year either side of it: a plan or a memory)."""
    low = text.lower()
    if not _MAYBE_DAY.search(low):
        return False
    # "see you on the seventeenth": its number for the cheap look below, and read once (the full
    # read below takes the rewritten text as is: its spans are not used, only its days)
    low = _spelled_out(low)[0]
    ref = written or datetime.now().astimezone().date()
    # a cheap look first: one of the range's day numbers, or (written within a week either side of
    # the range: "yesterday" after it, "see you tomorrow" before it) a relative day; the full read
    # costs ~1 ms a chunk
    span = (dates.end - dates.start).days
    numbers = {(dates.start + timedelta(days=i)).day for i in range(min(span, 31) + 1)}
    near = span < 31 and timedelta(days=-7) <= ref - dates.start <= timedelta(days=span + 8)
    if not (any(re.search(rf"(?<!\d)0?{n}(?!\d)", low) for n in numbers) or (near and _RELATIVE_WORD.search(low))):
        return False
    try:
        days = _read_days(low, lambda: ref, dates.order, 182, plans=True)
    except (OverflowError, ValueError):  # written at the calendar's edge ("last year" in year 1)
        return False
    return any(d0 == d1 and dates.start <= d0 <= dates.end for _, _, d0, d1 in days)


def note_nearness(dates: DateRange, hits: Iterable[Any], dater: Dater) -> None:
    """Record each candidate's :func:`nearness` in ``dates.near`` (by row id), for
    :func:`lift_named_days`; a chunk whose text names a day of the range (:func:`mentions`) is as
    near as one written on it."""
    for h in hits:
        if h.rid in dates.near:
            continue
        when = dater.when(h)
        near = nearness(when, dates)
        if (near < 1 and dates.tolerance > 0 and dates.end < _LAST_DAY and h.source == "memory"
                and (day := date_from_path(h.path)) == dates.end + timedelta(days=1)):
            # the next day's note: what it states was written just past midnight counts as a
            # transcript's message would (its heading's or line's clock time, the tolerance)
            near = max(near, nearness(dater.note_clocks(h.path, h.start_line, h.end_line, day), dates))
        if near < 1 and h.text and (dates.end - dates.start).days < 7:
            first = min((t.date() if isinstance(t, datetime) else t for t in when), default=None)
            if mentions(h.text, first, dates):
                near = max(near, MENTIONED)
        dates.near[h.rid] = near


def _fetched(dates: DateRange) -> DateRange:
    """The days whose chunks :func:`dated_chunk_rows` fetches: the range and its tolerance, an open
    range's ``MAX_FETCHED_DAYS`` next to its bound."""
    if dates.start == _FIRST_DAY and dates.end != _LAST_DAY:
        dates = DateRange(_shift(dates.end, 1 - MAX_FETCHED_DAYS), dates.end, tolerance=dates.tolerance)
    elif dates.end == _LAST_DAY and dates.start != _FIRST_DAY:
        dates = DateRange(dates.start, _shift(dates.start, MAX_FETCHED_DAYS - 1), tolerance=dates.tolerance)
    return dates


def _shift(d: date, days: int) -> date:
    """``d`` moved by ``days``, kept within the days a range may hold."""
    if days < 0:
        return d + timedelta(days=days) if (d - _FIRST_DAY).days > -days else _FIRST_DAY
    return d + timedelta(days=days) if (_LAST_DAY - d).days > days else _LAST_DAY


_NOTES_SEEN: weakref.WeakKeyDictionary[Any, tuple[tuple[int, int], list[tuple[date, str]]]] = \
    weakref.WeakKeyDictionary()
_NOTES_LOCK = threading.Lock()


def dated_notes(conn: Any) -> list[tuple[date, str]]:
    """Every indexed dated note (:func:`date_from_path`) as (day, path), in day order: one walk of
    the files' paths (a glob in SQL, the exact rule on what it lets through), kept per connection
    until the index changes (``PRAGMA data_version``, the connection's own changes)."""
    try:
        version = (conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes())
    except (AttributeError, TypeError, apsw.Error):  # not an apsw connection: read every time
        version = None
    if version is not None:
        with _NOTES_LOCK:
            got = _NOTES_SEEN.get(conn)
        if got is not None and got[0] == version:
            return got[1]
    notes = sorted((d, p) for (p,) in conn.execute("SELECT path FROM files WHERE path GLOB ?", (_DATED_GLOB,))
                   if (d := date_from_path(p)) is not None)
    if version is not None:
        with contextlib.suppress(TypeError), _NOTES_LOCK:  # a connection that takes no weak reference
            _NOTES_SEEN[conn] = (version, notes)
    return notes


def _notes_between(conn: Any, lo: date, hi: date) -> list[tuple[date, str]]:
    """:func:`dated_notes` of the days ``lo..hi``."""
    notes = dated_notes(conn)
    return notes[bisect_left(notes, (lo, "")):bisect_left(notes, (hi + timedelta(days=1), ""))] \
        if hi < _LAST_DAY else notes[bisect_left(notes, (lo, "")):]


def dated_chunk_rows(conn: Any, dates: DateRange, sources: tuple[str, ...] | None, seen: set[int],
                     dater: Dater) -> list[tuple[Any, ...]]:
    """Chunks written in ``dates`` (with its tolerance) that neither side found: the day's dated
    notes (:func:`dated_notes`; a range's first 62 days), transcript chunks with a message of that
    day (the index's ``chunk_days``: every transcript, whatever its modification time), other
    undated files modified that day (at most 200).
    Rows as the retrieval sides select them (``rid, 0, id, path, source, start_line, end_line, text, mtime``);
    ``seen`` (the row ids already found) gets theirs."""
    if dates.start == _FIRST_DAY and dates.end == _LAST_DAY:
        return []
    named = _fetched(dates)
    days = min(62, (named.end - named.start).days + 1)
    daily = [p for _, p in _notes_between(conn, named.start, named.start + timedelta(days=days - 1))]  # exact days
    dates = named.widened()  # stamped chunks: the tolerance too
    start_ms = int(datetime.combine(dates.start, datetime.min.time()).astimezone().timestamp() * 1000)
    end_ms = int(datetime.combine(dates.end + timedelta(days=1), datetime.min.time()).astimezone().timestamp() * 1000)
    sql = ("SELECT c.rid, 0, c.id, c.path, c.source, c.start_line, c.end_line, c.text, fl.mtime FROM chunks c"
           " JOIN files fl ON fl.path = c.path WHERE")
    # in path and line order (equal scores keep it), not the table's: after incremental runs that
    # is another order, and past the cap another set, than after a full build of the same files.
    # fl.path: files are walked in their path index and the walk stops at the cap (~90 ms with
    # every file of 1M chunks on that day, as before; the loop below stops reading at it);
    # c.path made SQLite sort them all (9.8 s).
    by_place = " ORDER BY fl.path, c.start_line"
    rows = []
    for i in range(0, len(daily), 500):  # (SQLite's variables per statement)
        part = daily[i:i + 500]
        rows += conn.execute(sql + f" c.path IN ({','.join('?' * len(part))})" + by_place, part)
    # other files modified on those days: a dated note is its name's day's, whenever it was
    # modified (a clone or a sync gives every file one modification day). The files first, in path
    # order, without their text; each has a chunk, so the cap's worth of them is enough.
    dated = {p for _, p in dated_notes(conn)}
    touched: list[str] = []
    for (p,) in conn.execute("SELECT path FROM files WHERE source != 'sessions' AND mtime >= ? AND mtime < ?"
                             " ORDER BY path", (start_ms, end_ms)):
        if p not in dated:
            touched.append(p)
            if len(touched) >= MAX_DATED_CANDIDATES:
                break
    if touched:
        rows += conn.execute(sql + f" c.path IN ({','.join('?' * len(touched))})" + by_place + " LIMIT ?",
                             (*touched, MAX_DATED_CANDIDATES)).fetchall()
    if dater.stored:  # transcript chunks with a message of those days (their UTC day; the tolerance too)
        rows += conn.execute(sql + " c.rid IN (SELECT rid FROM chunk_days WHERE day >= ? AND day <= ?)"
                             + by_place + " LIMIT ?",
                             (dates.start.isoformat(), dates.end.isoformat(), MAX_DATED_CANDIDATES + len(seen))).fetchall()
    rows += _mentioning_rows(conn, named, sql)
    out = []
    for r in rows:
        if r[0] in seen or (sources and r[4] not in sources):
            continue
        seen.add(r[0])
        out.append(r)
        if len(out) >= MAX_DATED_CANDIDATES:
            break
    return out


_SPELLED_DAYS = {n: w for w, n in _ORDINAL_WORDS.items()}
_SPELLED_DAYS.update({20 + n: f"twenty {w}" for w, n in _ORDINAL_WORDS.items() if n <= 9})
_SPELLED_DAYS[31] = "thirty first"


def _mention_match(dates: DateRange) -> str | None:
    """An FTS5 query for chunks that may name a day of a short range in words: its day number and
    its month (as a number or a name), e.g. ``("17" OR "17th" OR "seventeenth") AND ("01" OR "1" OR "jan" OR
    "january" OR "janaury" ...)``."""
    if (dates.end - dates.start).days >= 7:
        return None
    names = dict(enumerate(_MONTH_NAMES, 1))
    alts = []
    for i in range((dates.end - dates.start).days + 1):
        d = dates.start + timedelta(days=i)
        days = {str(d.day), f"{d.day:02d}", f"{d.day}{_suffix(d.day)}", _SPELLED_DAYS[d.day]}
        months = {str(d.month), f"{d.month:02d}", names[d.month], names[d.month][:3],
                  *(m for m, k in _MONTHS.items() if k == d.month and len(m) > 4)}
        alts.append("(" + " OR ".join(f'"{t}"' for t in sorted(days)) + ") AND ("
                    + " OR ".join(f'"{t}"' for t in sorted(months)) + ")")
    return " OR ".join(f"({a})" for a in alts)


def _mentioning_rows(conn: Any, dates: DateRange, sql: str) -> list[tuple[Any, ...]]:
    """Chunks whose text names a day of a short range in words (:func:`mentions`, read against the
    range's end), found through the FTS index (at most ``MAX_DATED_CANDIDATES`` looked at)."""
    match = _mention_match(dates)
    if match is None:
        return []
    try:
        rids = [r for (r,) in conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?",
                                           (match, MAX_DATED_CANDIDATES))]
    except apsw.Error:  # an index without the FTS table, or a tokenizer that refuses the query
        return []
    if not rids:
        return []
    rows = conn.execute(sql + f" c.rid IN ({','.join('?' * len(rids))}) ORDER BY fl.path, c.start_line", rids)
    return [r for r in rows if mentions(r[7] or "", dates.end, dates)]


def _timeline_limit(today: date | None) -> date:
    """The newest day a memory's timeline may end on: the day after ``today`` (default: the local
    date; a day ahead for another time zone's stamps). A day past it is a plan's note or a message
    stamped by a wrong clock, not the memory's last conversation."""
    return _shift(today or datetime.now().astimezone().date(), 1)


def latest_day(days: list[date], today: date | None = None) -> date | None:
    """The newest of ``days`` (sorted) not after :func:`_timeline_limit`: :func:`timeline_end`'s
    rule for a list of days (the LanceDB export's)."""
    i = bisect_right(days, _timeline_limit(today))
    return days[i - 1] if i else None


def timeline_end(conn: Any, today: date | None = None) -> date | None:
    """The memory's newest day: the latest dated note's day or the latest day a transcript has a
    message of, whichever is later; ``None`` when neither exists (an undated file's modification
    day is not a conversation's day). Year-less and relative days in a question resolve against it
    (:func:`query_date_range`'s ``anchor``). A day after ``today`` + 1 (default: the local date) is
    left out: one message stamped in 2099 by a wrong clock, or a note named for a day to come, would
    otherwise end an old memory's timeline in the future, and "yesterday" would be the clock's."""
    best: date | None = None
    limit = _timeline_limit(today)
    notes = dated_notes(conn)
    if i := bisect_left(notes, (limit + timedelta(days=1), "")):
        best = notes[i - 1][0]
    if has_table(conn, "chunk_days"):
        row = conn.execute("SELECT max(day) FROM chunk_days WHERE day <= ?", (limit.isoformat(),)).fetchone()
        with contextlib.suppress(TypeError, ValueError):
            d = date.fromisoformat(row[0])
            best = d if best is None or d > best else best
    return best


def memory_has_days(conn: Any, lo: date, hi: date) -> bool:
    """Whether the memory has a conversation day (as :func:`conversation_days` lists them) in
    ``lo..hi``: a dated note named for one (:func:`dated_notes`, kept per connection), or a
    transcript message of one (one index seek), not a list of every day (an ambiguous numeric day
    in a question asks this of both its readings)."""
    a, b = lo.isoformat(), hi.isoformat()
    if _notes_between(conn, lo, hi):
        return True
    return has_table(conn, "chunk_days") and conn.execute(
        "SELECT 1 FROM chunk_days WHERE day BETWEEN ? AND ? LIMIT 1", (a, b)).fetchone() is not None


def conversation_days(conn: Any) -> list[date]:
    """The memory's conversation days, for a conversation named by its place ("our first
    conversation", "the last time we talked"): every dated note's day and every day a transcript
    has a message of (the index's ``chunk_days``)."""
    days = {d for d, _ in dated_notes(conn)}
    if has_table(conn, "chunk_days"):
        for (day,) in conn.execute("SELECT DISTINCT day FROM chunk_days"):
            with contextlib.suppress(TypeError, ValueError):
                days.add(date.fromisoformat(day))
    return sorted(days)


def lift_named_days(hits: list[Any], dates: DateRange, min_score: float) -> bool:
    """The query names a day (or a range): a ranking signal, not a filter. Fused hits (their
    ``score`` the relevance), changed in place and re-sorted (relevance, then BM25, best first):

    * matching the query's words (relevance >= ``WORDS_MATCH``) and written in the range:
      ``relevance + (1 - relevance) * 0.5 * nearness``, at least 0.5 (so a neighbour day's word match,
      the answer sent past midnight, ranks above the named day's chunks that match only on their date);
    * another day's: capped at 0.5 (it stays, after the range's own);
    * written in the range, matching only on its date: just below 0.5 (``DATE_ONLY_BAND``), so after
      every chunk that matches the words clearly (relevance 0.5 or more: half the query's
      information) and after the range's own word matches, before weak matches of other days
      (a question whose other words are generic, "what did we talk about on 4 May", is answered
      by its day); a neighbour day's such chunk is not lifted.

    Nearness: ``dates.near`` (:func:`note_nearness`), else 1 when ``h.date`` is in the range. When no
    candidate is near the range (nothing of those days is in memory: "what is everyone doing in
    February?" asked in January), nothing is lifted or capped: capping every score at 0.5 would
    only tie the best matches), and the ranking goes on as for a query naming no day: False."""
    floor = max(min_score, WORDS_MATCH)
    nears = [dates.near.get(h.rid, 1.0 if (h.date is not None and h.date in dates) else 0.0) for h in hits]
    if not any(n > 0 for n in nears):
        return False
    for h, near in zip(hits, nears, strict=True):
        s = h.score
        if near <= 0:  # another day's note on the topic stays, below the named day's own
            h.score = min(s, DATE_MATCH_BONUS)
        elif s >= WORDS_MATCH:  # a neighbour day's word match: at least level with the capped other days
            h.score = max(DATE_MATCH_BONUS, s + (1 - s) * DATE_MATCH_BONUS * near)
        elif near >= MENTIONED:  # the range's own chunk (or one naming it) matching only on its date
            h.score = max(floor, DATE_MATCH_BONUS - DATE_ONLY_BAND * (1 - s / WORDS_MATCH) - DATE_ONLY_BAND * (1 - near))
        # a neighbour day's chunk that does not match the words is no evidence of anything: unchanged
        h.relevance = h.score
        h.date_lifted = s < min_score <= h.score  # found for its day, not its words
    hits.sort(key=lambda h: (h.score, h.bm25), reverse=True)
    return True


def said_at(source: str, when: str | None) -> str:
    """A transcript snippet's prefix saying when it was said (``[2026-11-02 15:20 UTC] ``); ""
    for any other chunk or an undated one."""
    if source != "sessions" or not when:
        return ""
    return f"[{when.replace('T', ' ')}{' UTC' if 'T' in when else ''}] "
