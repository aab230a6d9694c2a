"""A real-chat-like labelled set: 21 days of messaging between a few people, labelled by design.

    python eval/chats.py --labels      # eval/chats/{queries.jsonl,qrels.tsv,labels.tsv,negatives.tsv,evidence.tsv,
                                       #             qrels-notes.tsv,evidence-notes.tsv}
    python eval/chats.py --out DIR [--notes]   # the workspace (sessions/<uuid>.jsonl; --notes: memory/<day>.md)
    python eval/chats.py --dense ...           # the same for chats-dense (eval/chats-dense/)

Deterministic (``SEED``). The memory's owner, Ben, chats from Monday 2026-01-05 to Sunday
2026-01-25 with Kate (Katherine), Mo (Muhammad, in Dubai: his threads are stamped ``+04:00``),
Jorge, Anneliese, and a band group (Ben, Jorge, Siobhan). Each thread's day is one transcript
(a session header, then timestamped messages in the JSONL format ``memory_core/sources/sessions.py``
indexes; Ben's messages are ``user``, the others' ``assistant``, every text starting with its
sender's name: ``Kate: omw``). Messages are short, with slang, emoji and typos; names appear in
variants (Kate / Kat, Mo / Muhammad, Liese / Anneliese) and questions use others the
transcripts never do (Katherine, Kathryn, Muhhamed, Mohammed, Shivaun, Jorje); some evenings run past
midnight and go on in a new session stamped the next calendar day; dates are written in the
text in several forms (``24.01.2026``, ``1/30``, ``28/01/26``, ``2026-02-01``, ``Jan 31st``,
``14 February``).

Planted facts (:data:`EVENTS`) sit in fixed sessions, between filler drawn from per-thread pools
(other people, topics and words than ``eval/convo.py``). Recurring activities (band rehearsals,
bouldering, flat viewings, the garage, five-a-side, birthday planning) happen on several days
with a different outcome each time, so a question naming a day has one right session among
look-alikes. Labels follow from the plan (which session holds which message), never from
running a search: 2 = holds the answer, 1 = partial or context. ``evidence.tsv`` names the
JSONL line of each answering message. ``chats-notes``: the same conversations as daily Markdown
notes (:func:`daily_notes`), labelled from the same plan (``qrels-notes.tsv``,
``evidence-notes.tsv``).

Categories (``queries.jsonl``): ``fact`` (one session, the question's own words or close),
``paraphrase`` (other words), ``name`` (a name spelled as the transcript never does),
``date-numeric`` (17.01.2026, 1/17, 17/01/26, 2026-01-17), ``date-written`` (Jan 17th, 17
January), ``date-next`` (the day named is the evening's, the answer is stamped after midnight,
or in another time zone), ``date-text`` (a date written in the messages, asked in another
form), ``range`` (before / after / since / between), ``weekday`` ("on Friday": the latest such
day of the conversation's own timeline, which ends on Sunday 2026-01-25; "last Tuesday" the
same), ``multi`` (evidence in 2-4 sessions, often in none of the question's words: "What are
Kate's hobbies?"), ``edge`` (the answer comes seven messages after the one the question's words
match, "hang on", side talk and "found it" between, placed so that no chunk holds both at the default local
model's 200/40-token chunks: the answer starts the chunk after the question's), ``negative`` (nothing answers).

``chats-dense`` (``--dense``; :func:`plan_dense`, ``eval/chats-dense/``, issue 37: ``chats`` scored
far above the held-out real chats): the same people, timeline, planted messages and questions in
about 4x the messages (129 transcripts, 5,204 messages, 161-353 a day; chats: 46 and 1,273). The
planted sessions get 40-65 filler messages, 25 new planted sessions (:data:`DENSE_SESSIONS`) and
filler-only ones (``f-<thread>-<dd>``) fill most threads on most days, with a sixth thread, the
friends' group ``crew``. Filler comes from larger pools: 40 % look-alikes about the threads'
recurring topics (:data:`LOOKALIKES`: "rehearsal sat? i can do 7ish", "car's making that noise
again", "which pub this time?"), which share the questions' topic words but never state an
outcome or a fact a question asks for; names in variants (Kat, Moe, Jorgito, Shiv, Liese); common
words shortened (u, r, tmrw, abt: :data:`ABBREV`) and typos in a third of the messages, planted ones
included (:func:`roughen`). Questions: chats' 189, then 12 more ``multi`` (new planted facts in 2-3
sessions, in none of the question's words: "What food have my friends been cooking lately?"), 15
more ``paraphrase``, and ``edge-next`` (12): the answer is the very next message after the one the
question's words match, placed by :func:`place_next` with the real chunker so that the question's
message is the last line of a chunk and the answer the first line the next chunk adds (that
chunk starts with the overlap, which always carries the question's line).
``chats-dense-notes``: the same as daily notes.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "chats"
SEED = 20261128
FIRST = date(2026, 1, 5)  # a Monday
N_DAYS = 21
LAST = FIRST + timedelta(days=N_DAYS - 1)  # Sunday 2026-01-25
OWNER = "Ben"
CHUNK_TOKENS, CHUNK_OVERLAP = 200, 40  # the local model's chunking (edge placement)

# thread -> (people besides Ben, UTC offset in hours of its stamps)
THREADS: dict[str, tuple[tuple[str, ...], int]] = {
    "kate": (("Kate",), 0),
    "mo": (("Muhammad",), 4),
    "band": (("Siobhan", "Jorge"), 0),
    "jorge": (("Jorge",), 0),
    "anne": (("Anneliese",), 0),
    "crew": (("Kate", "Muhammad", "Jorge", "Anneliese"), 0),  # chats-dense only: the friends' group
}

GENERIC = [
    "lol", "haha", "hahaha stop", "omg", "yeah", "yep", "nope", "ok", "k", "sounds good", "👍", "same",
    "ugh", "no way", "tbh idk", "sry was in a meeting", "brb", "back", "thx!", "np", "wdym", "true", "fair",
    "mornin", "gn x", "im so tired", "cant tmrw", "maybe later?", "on the bus rn", "what r u up to",
    "nothing much", "just got home", "coffee?", "in a bit", "did u eat", "traffic is awful",
    "its freezing today", "raining again", "love that", "how was ur day", "long day", "sure",
    "call u later", "yes pls", "wait what", "hm", "ill check", "honestly same", "😂😂", "omw",
    "running late sorry", "ha classic", "ok cool", "see u then", "noted", "will do", "aww",
]
POOLS: dict[str, list[str]] = {
    "kate": ["work was chaos today", "my manager is off so its quiet for once", "watched 2 episodes of that baking show",
             "Biscuit knocked a plant off the shelf again", "need new trainers, mine have a hole", "mum called for an hour",
             "the printer at work is possessed", "made soup, too much salt", "bus driver skipped my stop lol",
             "got a parking ticket grr", "cant decide what to watch", "my sister sent the worst meme"],
    "mo": ["deadline friday, im drowning", "cricket on tv later", "its 30 degrees here lol", "boss wants the report by 5",
           "my sister's wedding prep is insane", "the aircon in the office broke", "went for shawarma at midnight",
           "so much traffic on sheikh zayed rd", "the new intern is great tbh", "fasting till sunset today",
           "bought a new phone case", "internet is super slow tonight"],
    "band": ["who has the setlist", "ill bring the extension cable", "can we start 10 min later",
             "practice the intro pls", "tuning at 7", "does anyone have a spare pick", "my capo is missing again",
             "the rehearsal room smells of old beer", "can someone bring the tuner", "i recorded it on my phone",
             "we should do more covers", "who's got the key to the room"],
    "jorge": ["thesis chapter 3 is killing me", "board games sat?", "my supervisor finally replied",
              "ordered new boots", "the library closes at 6 now, so annoying", "catan rematch soon",
              "my flatmate ate my leftovers", "the heating in the lab is broken", "played padel, terrible at it"],
    "anne": ["language exchange was fun", "wie geht's", "made pretzels, wonky but good", "my German class moved to wed",
             "the tram was packed", "reading a crime novel, cant put it down", "tried the new bakery on the corner",
             "my plants are dying lol", "yoga was brutal", "our office has a new coffee machine"],
}

# ---------------------------------------------------------------------------------------------
# Sessions: key -> (thread, day, start "HH:MM" local to the thread's offset)
# "-late" sessions go on after midnight: stamped the next calendar day.
# ---------------------------------------------------------------------------------------------
def d(day: int) -> date:
    """The day of January 2026."""
    return date(2026, 1, day)


SESSIONS: dict[str, tuple[str, date, str]] = {
    # the band: rehearsals on Thursdays (and one Monday), the gig on Saturday 24th
    "band-08": ("band", d(8), "18:40"), "band-12": ("band", d(12), "19:10"), "band-15": ("band", d(15), "21:30"),
    "band-16": ("band", d(16), "00:20"), "band-22": ("band", d(22), "18:50"), "band-25": ("band", d(25), "00:05"),
    "band-05": ("band", d(5), "20:00"), "band-19": ("band", d(19), "12:30"),
    # Kate: bouldering on Wednesdays, flat viewings, pottery, cello
    "kate-07": ("kate", d(7), "20:05"), "kate-09": ("kate", d(9), "17:45"), "kate-12": ("kate", d(12), "21:00"),
    "kate-14": ("kate", d(14), "20:30"), "kate-16": ("kate", d(16), "18:15"), "kate-19": ("kate", d(19), "22:10"),
    "kate-20": ("kate", d(20), "13:00"), "kate-21": ("kate", d(21), "20:40"), "kate-23": ("kate", d(23), "19:30"),
    "kate-06": ("kate", d(6), "08:10"), "kate-10": ("kate", d(10), "11:00"), "kate-17": ("kate", d(17), "10:20"),
    "kate-25": ("kate", d(25), "16:00"),
    # Mo (stamps +04:00): the car, travel, his sister's wedding
    "mo-06": ("mo", d(6), "19:30"), "mo-10": ("mo", d(10), "16:00"), "mo-13": ("mo", d(13), "21:00"),
    "mo-18": ("mo", d(18), "01:10"), "mo-19": ("mo", d(19), "18:20"), "mo-22": ("mo", d(22), "02:30"),
    "mo-08": ("mo", d(8), "09:00"), "mo-15": ("mo", d(15), "17:40"), "mo-25": ("mo", d(25), "15:00"),
    # Jorge: five-a-side on Tuesdays, a charity match, his thesis, board games
    "jorge-06": ("jorge", d(6), "22:00"), "jorge-13": ("jorge", d(13), "22:15"), "jorge-17": ("jorge", d(17), "18:30"),
    "jorge-20": ("jorge", d(20), "17:05"), "jorge-11": ("jorge", d(11), "14:00"), "jorge-23": ("jorge", d(23), "23:30"),
    "jorge-24": ("jorge", d(24), "00:45"), "jorge-09": ("jorge", d(9), "12:00"),
    # Anneliese: baking, her birthday on the 25th
    "anne-05": ("anne", d(5), "19:00"), "anne-11": ("anne", d(11), "20:20"), "anne-14": ("anne", d(14), "12:45"),
    "anne-18": ("anne", d(18), "10:30"), "anne-21": ("anne", d(21), "09:15"), "anne-23": ("anne", d(23), "23:20"),
    "anne-24": ("anne", d(24), "00:30"), "anne-07": ("anne", d(7), "18:00"),
}

# Planted messages: session key -> [(sender, text, tag)]; a tag names the message for labels.
# Questions refer to tags ("band-08:bridge"); an "edge" tag pair is placed at a chunk edge.
EVENTS: dict[str, list[tuple[str, str, str]]] = {
    "band-05": [("Siobhan", "gig confirmed!! The Crooked Anchor, 24.01.2026, doors 8pm, we're on at 9:30", "gig"),
                ("Jorge", "amazing. we need a 45 min set then", "set")],
    "band-08": [("Jorge", "rehearsal verdict: we FINALLY nailed the bridge in Harbour Lights", "bridge"),
                ("Siobhan", "took us 3 weeks lol, Ben's harmony on the last chorus was lovely", "harmony")],
    "band-12": [("Siobhan", "my amp just died mid song, smells like burnt toast", "amp"),
                ("Ben", "borrowed the studio's old Fender for the rest, sounded fine tbh", "fender")],
    "band-15": [("Jorge", "everyone still up? lets talk about tonight", "ctx"),
                ("Siobhan", "tonight was rough, we ran out of time before the new one", "rough")],
    "band-16": [("Siobhan", "ok decision made: Copper Moon goes in the setlist and we OPEN with it", "copper"),
                ("Jorge", "agreed, and we drop the Oasis cover", "oasis")],
    "band-22": [("Jorge", "broke the snare skin during the last run through, need a new one before saturday", "snare"),
                ("Siobhan", "i can pick one up at Rimmers tmrw, 18 quid", "rimmers")],
    "band-25": [("Siobhan", "what a night!! sold 23 tshirts and the landlord wants us back in March", "tshirts"),
                ("Ben", "my hands are still shaking haha", "shaking")],
    "band-19": [("Siobhan", "reminder the sound check is at 6 on the day, dont be late", "soundcheck"),
                ("Jorge", "can we do one more run on thursday?", "ask")],
    "kate-07": [("Kate", "SENT IT. my first V4, the orange one on the prow", "v4"),
                ("Ben", "the prow!! proud of u Kat", "proud")],
    "kate-09": [("Kate", "the Elm Street flat was grim, tiny kitchen and damp all over the bathroom ceiling", "elm"),
                ("Kate", "def a no", "no")],
    "kate-12": [("Kate", "pottery tonight: glazing. my bowl cracked in the kiln 😭", "pottery"),
                ("Ben", "noooo the blue one?", "blue")],
    "kate-14": [("Kate", "twisted my ankle on the slab wall, ice pack on, no climbing for a bit", "ankle"),
                ("Ben", "ouch, do u need anything from the shop", "shop")],
    "kate-16": [("Kate", "Carver Road flat: 2 bed, 1150 a month, and a BALCONY. loved it", "carver"),
                ("Ben", "apply apply apply", "apply")],
    "kate-19": [("Kate", "practised the Bach prelude for an hour, neighbours banged on the wall lol", "cello"),
                ("Kate", "my bow needs rehairing too", "bow")],
    "kate-20": [("Kate", "Carver Rd landlord wants 2 months deposit up front. deadline 1/30", "deposit"),
                ("Ben", "thats steep but doable?", "steep")],
    "kate-21": [("Kate", "tried the new gym Rockhaus, day pass was 14 quid, walls are amazing", "rockhaus"),
                ("Ben", "was ur ankle ok?", "ankleq"),
                ("Kate", "bit stiff but fine", "fine")],
    "kate-23": [("Kate", "SIGNED!!! Carver Road is mine, moving in on 2026-02-01", "signed"),
                ("Ben", "we celebrate tonight, dinner at Sakura Ramen? my treat", "sakura"),
                ("Kate", "yesss 8pm", "8pm")],
    "kate-17": [("Kate", "my job interview at Halden & Co is on Jan 29th, the panel has 3 people", "interview"),
                ("Ben", "u will smash it", "smash")],
    "kate-25": [("Kate", "can u help me move on 1 Feb? Mo said he can bring his brother's van", "van"),
                ("Ben", "of course", "ofc")],
    "mo-06": [("Muhammad", "car is making a grinding noise when i brake, sounds expensive", "grinding"),
              ("Ben", "get it looked at Mo, dont drive far", "look")],
    "mo-10": [("Muhammad", "garage says brake pads are worn out, quote is 380 dirhams", "pads"),
              ("Ben", "not too bad", "notbad")],
    "mo-13": [("Muhammad", "booked my flight to Lisbon for the conference, 28/01/26, back on the 31st", "lisbon"),
              ("Ben", "jealous. eat all the pasteis de nata", "nata")],
    "mo-18": [("Muhammad", "garage bill came to 620 in the end, the discs were shot too 🙄", "bill"),
              ("Muhammad", "its past 1am here, cant sleep", "late")],
    "mo-19": [("Muhammad", "got the car back, drives like new. also sold the old roof box for 150", "roofbox"),
              ("Ben", "nice one", "nice")],
    "mo-22": [("Muhammad", "my sister's wedding is set: 14 February in Sharjah, youre all invited", "wedding"),
              ("Ben", "wow congrats to her!! ill check flights", "flights")],
    "mo-08": [("Muhammad", "weekend in Muscat was great, did the wadi hike with my cousins", "muscat"),
              ("Ben", "pics pls", "pics")],
    "mo-15": [("Muhammad", "started learning to play the oud, first lesson was humbling", "oud"),
              ("Ben", "haha respect", "respect")],
    "mo-25": [("Muhammad", "sorry i missed the gig!! Siobhan sent me the video, sounded great", "missed"),
              ("Ben", "next time", "next")],
    "jorge-06": [("Jorge", "lost 7-4 tonight, our keeper was asleep", "lost"),
                 ("Ben", "ouch", "ouch")],
    "jorge-13": [("Jorge", "WON 5-2!! i scored a hat trick, first one ever", "hattrick"),
                 ("Ben", "legend", "legend")],
    "jorge-17": [("Jorge", "charity match vs the fire brigade ended 3-3, raised 410 for the food bank", "charity"),
                 ("Ben", "great cause", "cause")],
    "jorge-20": [("Jorge", "5 a side cancelled tonight, the pitch is frozen solid", "frozen"),
                 ("Ben", "boo", "boo")],
    "jorge-11": [("Jorge", "submitted chapter 3 of the thesis to my supervisor!! 94 pages", "chapter"),
                 ("Ben", "huge!", "huge")],
    "jorge-09": [("Jorge", "board games at mine on 17/01? bringing Wingspan", "wingspan"),
                 ("Ben", "in", "in")],
    "jorge-23": [("Jorge", "cant sleep, nervous about tmrw. what if i mess up the drum fill in Copper Moon", "nervous"),
                 ("Ben", "u wont, uve played it 100 times", "wont")],
    "jorge-24": [("Jorge", "ok real talk, my supervisor said the thesis defence is 2026-03-12", "defence"),
                 ("Ben", "thats soon! u got this", "soon")],
    "anne-05": [("Anneliese", "my rye sourdough collapsed in the oven, flat as a pancake", "rye"),
                ("Ben", "starter too young maybe?", "young")],
    "anne-07": [("Anneliese", "signed up for a Spanish course on Tuesdays, starts next week", "spanish"),
                ("Ben", "que bien", "quebien")],
    "anne-11": [("Ben", "ok birthday gift ideas for Liese?", "giftq"),
                ("Jorge", "she mentioned she wants a Moka pot, her old one broke", "moka")],
    "anne-14": [("Anneliese", "made Franzbrötchen for the office, gone in 10 min", "franz"),
                ("Ben", "save me one next time!", "save")],
    "anne-18": [("Ben", "booked a table at Lumière for Anneliese's birthday, friday 7pm, 8 people", "lumiere"),
                ("Anneliese", "wait are u planning something 👀", "planning")],
    "anne-21": [("Anneliese", "going to my parents in Freiburg for the weekend after my birthday", "freiburg"),
                ("Ben", "say hi to them", "hi")],
    "anne-23": [("Anneliese", "best birthday ever, thank you all so much", "best"),
                ("Ben", "happy birthday again!!", "hb")],
    "anne-24": [("Anneliese", "still cant believe u got me the Moka pot. and the lemon drizzle cake was perfect", "cake"),
                ("Ben", "Kate baked it!", "katebaked")],
}
# planted pairs to place at a chunk edge: (session key, [(sender, question-side text, tag), (sender, answer, tag)])
EDGES: list[tuple[str, list[tuple[str, str, str]]]] = [
    ("kate-10", [("Ben", "whats the door code for ur pottery studio again? im dropping off the clay", "q"),
                 ("Kate", "4471 then hash", "a")]),
    ("kate-06", [("Kate", "which platform does the Brighton train go from", "q"),
                 ("Ben", "9b, the one at the far end", "a")]),
    ("mo-15", [("Ben", "whats the name of that restaurant u keep recommending in Deira", "q"),
               ("Muhammad", "Al Ustad Special Kabab", "a")]),
    ("jorge-11", [("Ben", "who's ur external examiner gonna be?", "q"),
                  ("Jorge", "prof Achterberg from Utrecht", "a")]),
    ("anne-14", [("Ben", "what flour did u use for the Franzbrötchen", "q"),
                 ("Anneliese", "type 550 and lots of butter", "a")]),
    ("band-19", [("Jorge", "how much is the venue paying us for the gig", "q"),
                 ("Siobhan", "200 plus free drinks", "a")]),
    ("kate-17", [("Ben", "what time does ur train to the interview leave", "q"),
                 ("Kate", "7:52 from Kings X", "a")]),
    ("mo-25", [("Ben", "when r u flying back from Lisbon", "q"),
               ("Muhammad", "sat morning, TP 1234", "a")]),
    ("jorge-09", [("Ben", "what's ur flatmate's name again, the one who eats ur food", "q"),
                  ("Jorge", "Piotr, the menace", "a")]),
    ("anne-21", [("Ben", "which train are u taking to Freiburg", "q"),
                 ("Anneliese", "the ICE at 8:13", "a")]),
]

# Questions: (category, text, {"session" or "session:tag": relevance}); a session named without a
# tag is labelled with its planted messages as evidence.
Q = tuple[str, str, dict[str, int]]
QUESTIONS: list[Q] = [
    # -- fact: one session, the question's own words or close
    ("fact", "Where is the band's gig?", {"band-05:gig": 2}),
    ("fact", "Which song did we finally nail the bridge of?", {"band-08:bridge": 2}),
    ("fact", "What happened to Siobhan's amp?", {"band-12:amp": 2}),
    ("fact", "Which song do we open the set with?", {"band-16:copper": 2}),
    ("fact", "Which cover did the band drop?", {"band-16:oasis": 2}),
    ("fact", "Where can Siobhan get a new snare skin and how much is it?", {"band-22:rimmers": 2}),
    ("fact", "How many t-shirts did we sell at the gig?", {"band-25:tshirts": 2}),
    ("fact", "When is the sound check on the gig day?", {"band-19:soundcheck": 2}),
    ("fact", "What was wrong with the Elm Street flat?", {"kate-09:elm": 2}),
    ("fact", "What happened to Kate's bowl at pottery?", {"kate-12:pottery": 2}),
    ("fact", "How much is the rent of the Carver Road flat?", {"kate-16:carver": 2}),
    ("fact", "How much deposit does the Carver Road landlord want?", {"kate-20:deposit": 2}),
    ("fact", "How much was the day pass at Rockhaus?", {"kate-21:rockhaus": 2}),
    ("fact", "Where did Kate and I go to celebrate the flat?", {"kate-23:sakura": 2}),
    ("fact", "When is Kate's job interview at Halden & Co?", {"kate-17:interview": 2}),
    ("fact", "Whose van will help Kate move?", {"kate-25:van": 2}),
    ("fact", "What did the garage say about Mo's brakes?", {"mo-10:pads": 2}),
    ("fact", "How much was the final garage bill?", {"mo-18:bill": 2}),
    ("fact", "How much did Mo sell the roof box for?", {"mo-19:roofbox": 2}),
    ("fact", "When and where is Mo's sister's wedding?", {"mo-22:wedding": 2}),
    ("fact", "What instrument is Mo learning?", {"mo-15:oud": 2}),
    ("fact", "What was the score of the charity match against the fire brigade?", {"jorge-17:charity": 2}),
    ("fact", "Why was five-a-side cancelled?", {"jorge-20:frozen": 2}),
    ("fact", "How many pages is chapter 3 of Jorge's thesis?", {"jorge-11:chapter": 2}),
    ("fact", "Which board game is Jorge bringing?", {"jorge-09:wingspan": 2}),
    ("fact", "When is Jorge's thesis defence?", {"jorge-24:defence": 2}),
    ("fact", "Why did Anneliese's rye sourdough fail?", {"anne-05:rye": 2, "anne-05:young": 1}),
    ("fact", "Where did we book Anneliese's birthday dinner?", {"anne-18:lumiere": 2}),
    ("fact", "What course did Anneliese sign up for?", {"anne-07:spanish": 2}),
    ("fact", "Which cake did Anneliese get for her birthday?", {"anne-24:cake": 2}),
    # -- paraphrase: other words than the messages
    ("paraphrase", "Which venue booked us to play live?", {"band-05:gig": 2}),
    ("paraphrase", "Whose guitar amplifier broke down during practice?", {"band-12:amp": 2}),
    ("paraphrase", "What did the drummer damage before the show?", {"band-22:snare": 2}),
    ("paraphrase", "How did merchandise sales go at our concert?", {"band-25:tshirts": 2}),
    ("paraphrase", "What was Kate's climbing achievement on the overhang?", {"kate-07:v4": 2}),
    ("paraphrase", "How did Kate hurt her foot?", {"kate-14:ankle": 2}),
    ("paraphrase", "Which apartment did Kate end up renting?", {"kate-23:signed": 2, "kate-16:carver": 1}),
    ("paraphrase", "What piece of classical music is Kate working on?", {"kate-19:cello": 2}),
    ("paraphrase", "Why was Mo's car noisy when stopping?", {"mo-06:grinding": 2, "mo-10:pads": 1}),
    ("paraphrase", "Where did Mo go hiking with his family?", {"mo-08:muscat": 2}),
    ("paraphrase", "Which city is Mo travelling to for work?", {"mo-13:lisbon": 2}),
    ("paraphrase", "Who scored three goals in one football game?", {"jorge-13:hattrick": 2}),
    ("paraphrase", "How much money did the football fundraiser make?", {"jorge-17:charity": 2}),
    ("paraphrase", "What pastries did Anneliese bring to work?", {"anne-14:franz": 2}),
    ("paraphrase", "What coffee maker did Anneliese want as a present?", {"anne-11:moka": 2}),
    ("paraphrase", "Where will Anneliese spend the weekend after she turns a year older?", {"anne-21:freiburg": 2}),
    ("paraphrase", "What was Jorge worried about the night before the show?", {"jorge-23:nervous": 2}),
    # -- name: a name spelled as the transcripts never do
    ("name", "What did Muhhamed say about his brakes?", {"mo-10:pads": 2, "mo-06:grinding": 1}),
    ("name", "How much did Mohammed pay the garage in the end?", {"mo-18:bill": 2}),
    ("name", "When is Mohamed's sister getting married?", {"mo-22:wedding": 2}),
    ("name", "Where is Muhamad flying for the conference?", {"mo-13:lisbon": 2}),
    ("name", "What is Mohammad learning to play?", {"mo-15:oud": 2}),
    ("name", "Did Muhammed make it to the gig?", {"mo-25:missed": 2}),
    ("name", "What did Katherine climb on the prow?", {"kate-07:v4": 2}),
    ("name", "How did Kathryn twist her ankle?", {"kate-14:ankle": 2}),
    ("name", "What cracked in Catherine's pottery class?", {"kate-12:pottery": 2}),
    ("name", "When does Katie move into the new flat?", {"kate-23:signed": 2}),
    ("name", "When is Katharine's job interview?", {"kate-17:interview": 2}),
    ("name", "What happened to Shivaun's amp?", {"band-12:amp": 2}),
    ("name", "What did Siobhán say about the sound check?", {"band-19:soundcheck": 2}),
    ("name", "How many goals did Jorje score on the 13th?", {"jorge-13:hattrick": 2}),
    ("name", "When is George's thesis defence?", {"jorge-24:defence": 2}),
    ("name", "What happened to Annelise's rye bread?", {"anne-05:rye": 2}),
    ("name", "What did Anna-Lise bake for the office?", {"anne-14:franz": 2}),
    ("name", "Where is Annaliese going after her birthday?", {"anne-21:freiburg": 2}),
    ("name", "Which gift did Liese want?", {"anne-11:moka": 2}),
    ("name", "What did Shiv decide about the setlist?", {"band-16:copper": 2}),
    # -- date-numeric / date-written: the day of a recurring activity
    ("date-numeric", "How did band practice go on 08.01.2026?", {"band-08:bridge": 2}),
    ("date-numeric", "What went wrong at rehearsal on 12/01/26?", {"band-12:amp": 2}),
    ("date-numeric", "What broke at rehearsal on 2026-01-22?", {"band-22:snare": 2}),
    ("date-numeric", "How was climbing with Kate on 1/7?", {"kate-07:v4": 2}),
    ("date-numeric", "What happened when Kate went bouldering on 14.01.2026?", {"kate-14:ankle": 2}),
    ("date-numeric", "Which climbing gym did Kate try on 21/01/26?", {"kate-21:rockhaus": 2}),
    ("date-numeric", "What did Kate think of the flat she viewed on 2026-01-09?", {"kate-09:elm": 2}),
    ("date-numeric", "Which flat did Kate see on 1/16?", {"kate-16:carver": 2}),
    ("date-numeric", "What did the landlord ask for on 20.01.2026?", {"kate-20:deposit": 2}),
    ("date-numeric", "What did Mo say about his car on 06/01/26?", {"mo-06:grinding": 2}),
    ("date-numeric", "What did the garage tell Mo on 2026-01-10?", {"mo-10:pads": 2}),
    ("date-numeric", "What was the football score on 1/6?", {"jorge-06:lost": 2}),
    ("date-numeric", "How did five-a-side go on 13.01.2026?", {"jorge-13:hattrick": 2}),
    ("date-numeric", "What happened with football on 20/01/26?", {"jorge-20:frozen": 2}),
    ("date-numeric", "What did Anneliese bake on 2026-01-05?", {"anne-05:rye": 2}),
    ("date-numeric", "What did Anneliese bring to the office on 1/14?", {"anne-14:franz": 2}),
    ("date-numeric", "What did Jorge submit on 11.01.2026?", {"jorge-11:chapter": 2}),
    ("date-numeric", "What did we decide about birthday gifts on 11/01/26?", {"anne-11:moka": 2}),
    ("date-written", "How did rehearsal go on Jan 8th?", {"band-08:bridge": 2}),
    ("date-written", "What went wrong at band practice on 12 January?", {"band-12:amp": 2}),
    ("date-written", "What did Kate climb on 7 January?", {"kate-07:v4": 2}),
    ("date-written", "How did Kate hurt herself on Jan 14th?", {"kate-14:ankle": 2}),
    ("date-written", "Which flat did Kate view on January 16th?", {"kate-16:carver": 2}),
    ("date-written", "What news did Kate have on 23 January?", {"kate-23:signed": 2}),
    ("date-written", "What did Mo tell me on Jan 10th?", {"mo-10:pads": 2}),
    ("date-written", "What did Mo say about the car on 19 January?", {"mo-19:roofbox": 2}),
    ("date-written", "What was the football result on Jan 13th?", {"jorge-13:hattrick": 2}),
    ("date-written", "What happened at the charity match on 17 January?", {"jorge-17:charity": 2}),
    ("date-written", "What did I book for Anneliese on Jan 18th?", {"anne-18:lumiere": 2}),
    # -- date-next: the evening's day named, the answer stamped after midnight or in another zone
    ("date-next", "What did the band decide about the setlist after rehearsal on 15.01.2026?", {"band-16:copper": 2}),
    ("date-next", "What did we decide on the night of Jan 15th about the Oasis cover?", {"band-16:oasis": 2}),
    ("date-next", "How was the gig on 24 January, sales-wise?", {"band-25:tshirts": 2}),
    ("date-next", "What happened after the gig on 24 January?", {"band-25:tshirts": 2}),
    ("date-numeric", "What was Jorge nervous about on the night of 1/23?", {"jorge-23:nervous": 2}),
    ("date-next", "What did Jorge tell me late on 23/01/26 about his defence?", {"jorge-24:defence": 2}),
    ("date-next", "What did Anneliese say about the cake on her birthday, 23 January?", {"anne-24:cake": 2}),
    ("date-next", "What did Anneliese thank me for on 2026-01-23?", {"anne-24:cake": 2, "anne-23:best": 2}),
    ("date-next", "What did Mo tell me about the garage bill on 17 January?", {"mo-18:bill": 2}),
    ("date-next", "What did Mo announce on Jan 21st about his sister?", {"mo-22:wedding": 2}),
    ("date-next", "Why couldn't Mo sleep on 17.01.2026?", {"mo-18:late": 2, "mo-18:bill": 1}),
    # -- date-text: a date written in the messages, asked in another form
    ("date-text", "What is happening on 24/01/26?", {"band-05:gig": 2, "band-25:tshirts": 1, "band-19:soundcheck": 1}),
    ("date-text", "What is due on 30.01.2026?", {"kate-20:deposit": 2}),
    ("date-text", "What happens on Feb 1st?", {"kate-23:signed": 2, "kate-25:van": 2}),
    ("date-text", "Who is flying somewhere on 2026-01-28?", {"mo-13:lisbon": 2}),
    ("date-text", "What is on 14.02.2026?", {"mo-22:wedding": 2}),
    ("date-text", "What is planned for 17 January at Jorge's place?", {"jorge-09:wingspan": 2}),
    ("date-text", "What's happening on 12/03/26?", {"jorge-24:defence": 2}),
    ("date-text", "What is on 29.01.2026?", {"kate-17:interview": 2}),
    # -- range: before / after / since / between
    ("range", "Which flats did Kate look at before Jan 15?", {"kate-09:elm": 2}),
    ("range", "What has happened with the Carver Road flat since 18 January?", {"kate-20:deposit": 2, "kate-23:signed": 2}),
    ("range", "How did the rehearsals go between 1/10 and 1/20?", {"band-12:amp": 2, "band-15:rough": 2, "band-16:copper": 2}),
    ("range", "What went wrong at rehearsals after January 20th?", {"band-22:snare": 2}),
    ("range", "What happened with Mo's car before 12 January?", {"mo-06:grinding": 2, "mo-10:pads": 2}),
    ("range", "What happened with Mo's car after the 15th?", {"mo-18:bill": 2, "mo-19:roofbox": 2}),
    ("range", "What were the five-a-side results before 2026-01-15?", {"jorge-06:lost": 2, "jorge-13:hattrick": 2}),
    ("range", "Which climbing sessions did Kate have after 10.01.2026?", {"kate-14:ankle": 2, "kate-21:rockhaus": 2}),
    ("range", "What did Anneliese bake between 01/01/26 and 15/01/26?", {"anne-05:rye": 2, "anne-14:franz": 2}),
    ("range", "What did we plan for Anneliese's birthday before the 20th?", {"anne-11:moka": 2, "anne-18:lumiere": 2}),
    ("range", "Since Jan 20th, what has Jorge said about his thesis?", {"jorge-24:defence": 2}),
    ("range", "What did Mo tell me between 12 and 16 January?", {"mo-13:lisbon": 2, "mo-15:oud": 2}),
    ("range", "What did Kate tell me about pottery and music after Jan 10th?", {"kate-12:pottery": 2, "kate-19:cello": 2}),
    ("range", "What band news came after 20/01/26?", {"band-22:snare": 2, "band-25:tshirts": 2}),
    # -- weekday: the latest such day of the conversation's timeline (it ends on Sunday 2026-01-25)
    ("weekday", "How did rehearsal go on Thursday?", {"band-22:snare": 2}),
    ("weekday", "What did Kate and I do on Friday?", {"kate-23:sakura": 2, "kate-23:signed": 2}),
    ("weekday", "Where did Kate go climbing on Wednesday?", {"kate-21:rockhaus": 2}),
    ("weekday", "What happened with football on Tuesday?", {"jorge-20:frozen": 2}),
    ("weekday", "What did Mo tell me on Monday?", {"mo-19:roofbox": 2}),
    ("weekday", "How did the gig go on Saturday?", {"band-25:tshirts": 2}),
    ("weekday", "What did Anneliese say on Wednesday about her plans?", {"anne-21:freiburg": 2}),
    ("weekday", "What did Kate ask me on Sunday?", {"kate-25:van": 2}),
    ("weekday", "What did the landlord want on Tuesday?", {"kate-20:deposit": 2}),
    ("weekday", "What did Kate practise on Monday night?", {"kate-19:cello": 2}),
    ("weekday", "What was the last Thursday rehearsal problem?", {"band-22:snare": 2}),
    ("weekday", "What did Jorge and I talk about late on Friday night?", {"jorge-23:nervous": 2, "jorge-24:defence": 1}),
    # -- multi: evidence in 2-4 sessions, often in none of the question's words
    ("multi", "What are Kate's hobbies?", {"kate-12:pottery": 2, "kate-19:cello": 2, "kate-07:v4": 2, "kate-21:rockhaus": 1}),
    ("multi", "What has Kate been up to in her free time?", {"kate-12:pottery": 2, "kate-19:cello": 2, "kate-07:v4": 2}),
    ("multi", "Which flats did Kate consider and which did she take?",
     {"kate-09:elm": 2, "kate-16:carver": 2, "kate-23:signed": 2}),
    ("multi", "How did the whole saga with Mo's car go?",
     {"mo-06:grinding": 2, "mo-10:pads": 2, "mo-18:bill": 2, "mo-19:roofbox": 2}),
    ("multi", "Where has Mo travelled or planned to travel this month?", {"mo-08:muscat": 2, "mo-13:lisbon": 2, "mo-22:wedding": 1}),
    ("multi", "What trips is Muhammad planning?", {"mo-13:lisbon": 2, "mo-22:wedding": 2}),
    ("multi", "How did the band get ready for the gig?",
     {"band-08:bridge": 2, "band-16:copper": 2, "band-22:snare": 2, "band-19:soundcheck": 1}),
    ("multi", "What gear problems did the band have?", {"band-12:amp": 2, "band-22:snare": 2}),
    ("multi", "What were all the five-a-side results this month?",
     {"jorge-06:lost": 2, "jorge-13:hattrick": 2, "jorge-17:charity": 2, "jorge-20:frozen": 1}),
    ("multi", "How is Jorge's PhD going?", {"jorge-11:chapter": 2, "jorge-24:defence": 2}),
    ("multi", "What has Anneliese been baking?", {"anne-05:rye": 2, "anne-14:franz": 2}),
    ("multi", "How did we organise Anneliese's birthday, from the gift to the dinner?",
     {"anne-11:moka": 2, "anne-18:lumiere": 2, "anne-24:cake": 2}),
    ("multi", "What is Anneliese learning or studying?", {"anne-07:spanish": 2}),
    ("multi", "What injuries or health issues came up among my friends?", {"kate-14:ankle": 2, "kate-21:fine": 1}),
    ("multi", "What is everyone doing in February?", {"kate-23:signed": 2, "kate-25:van": 2, "mo-22:wedding": 2}),
    ("multi", "What does Mo do in his spare time?", {"mo-15:oud": 2, "mo-08:muscat": 2}),
    ("multi", "Which events raised or made money for us or friends?",
     {"band-25:tshirts": 2, "jorge-17:charity": 2, "mo-19:roofbox": 1}),
    ("multi", "Who is helping Kate with the move, and when is it?", {"kate-25:van": 2, "kate-23:signed": 2}),
    ("multi", "What did Jorge go through around the gig?", {"jorge-23:nervous": 2, "band-22:snare": 2, "band-25:tshirts": 1}),
    ("multi", "What celebrations happened this month?", {"kate-23:sakura": 2, "anne-23:best": 2, "band-25:tshirts": 1}),
    # -- edge: the answer is the message after the one the question's words match
    ("edge", "What is the door code for Kate's pottery studio?", {"kate-10:edge-a": 2}),
    ("edge", "Which platform does the Brighton train leave from?", {"kate-06:edge-a": 2}),
    ("edge", "What's the name of the restaurant Mo recommends in Deira?", {"mo-15:edge-a": 2}),
    ("edge", "Who is Jorge's external examiner?", {"jorge-11:edge-a": 2}),
    ("edge", "What flour did Anneliese use for the Franzbrötchen?", {"anne-14:edge-a": 2}),
    ("edge", "How much is the venue paying the band for the gig?", {"band-19:edge-a": 2}),
    ("edge", "What time does Kate's train to the interview leave?", {"kate-17:edge-a": 2}),
    ("edge", "When is Mo flying back from Lisbon?", {"mo-25:edge-a": 2}),
    ("edge", "What's the name of Jorge's flatmate?", {"jorge-09:edge-a": 2}),
    ("edge", "Which train is Anneliese taking to Freiburg?", {"anne-21:edge-a": 2}),
    # -- negative: nothing answers
    ("negative", "What did Priya say about the gig?", {}),
    ("negative", "When is Jorge's dentist appointment?", {}),
    ("negative", "What is Kate's cat's vet called?", {}),
    ("negative", "How much did Siobhan pay for her new car?", {}),
    ("negative", "What did Mo's brother study at university?", {}),
    ("negative", "Which hotel did I book in Porto?", {}),
    ("negative", "What did Anneliese say about her Japanese lessons?", {}),
    ("negative", "How did rehearsal go on 2026-01-11?", {}),
    ("negative", "What was the football score on 03.01.2026?", {}),
    ("negative", "What is the wifi password at the Crooked Anchor?", {}),
    ("negative", "Who won the chess tournament?", {}),
    ("negative", "What did Kate's dentist say?", {}),
    ("negative", "When is Ben's passport renewal?", {}),
    ("negative", "What did Jorge say about the ski trip?", {}),
    ("negative", "How much did the drum kit insurance cost?", {}),
    ("negative", "What did Mohammed say about the marathon?", {}),
    ("negative", "Which film did Katherine and I watch at the cinema?", {}),
    ("negative", "What did Siobhan's landlord say about the rent increase?", {}),
]


# ---------------------------------------------------------------------------------------------
# Building the plan
# ---------------------------------------------------------------------------------------------
def typo(word: str, rng: random.Random) -> str:
    """One realistic slip: two letters swapped, one dropped or one doubled."""
    if len(word) < 4 or not word.isalpha():
        return word
    i = rng.randrange(1, len(word) - 1)
    kind = rng.randrange(3)
    if kind == 0:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == 1:
        return word[:i] + word[i + 1:]
    return word[:i] + word[i] + word[i:]


def filler(thread: str, rng: random.Random) -> str:
    text = rng.choice(POOLS[thread]) if rng.random() < 0.45 else rng.choice(GENERIC)
    if rng.random() < 0.2:
        words = text.split(" ")
        j = rng.randrange(len(words))
        words[j] = typo(words[j], rng)
        text = " ".join(words)
    return text


def render(sender: str, text: str) -> tuple[str, str]:
    """(role, text) of a message as a transcript records it."""
    return ("user" if sender == OWNER else "assistant"), f"{sender}: {text}"


def content_lines(msgs: list[tuple[str, str, str]]) -> list[str]:
    """The lines memory-core indexes for these messages (sources/sessions.py: ``User: ...``)."""
    out = []
    for sender, text, _ in msgs:
        role, body = render(sender, text)
        out.append(("User: " if role == "user" else "Assistant: ") + " ".join(body.split()))
    return out


HOLD = ["hang on", "one sec", "lemme check", "scrolling up", "found it"]


def place_at_edge(msgs: list[tuple[str, str, str]], pair: list[tuple[str, str, str]],
                  rng: random.Random) -> list[tuple[str, str, str]]:
    """``msgs`` with ``pair`` inserted, a few messages between its question and its answer (as
    chats go: "hang on", side talk, "found it"), where one chunk (the local model's 200/40 chunks)
    holds the question and no chunk holds both: the answer starts the next chunk past the
    overlap. As near the middle as possible; else in the middle."""
    sys.path.insert(0, str(HERE.parent.parent))
    from memory_core.index.chunking import chunk_markdown

    (qs, qt, qtag), (as_, at, atag) = pair
    hold = [(as_, h, "") for h in rng.sample(HOLD, 2)]
    side = [(qs, t, "") for t in rng.sample([t for pool in POOLS.values() for t in pool], 4)]
    block = [(qs, qt, qtag), hold[0], *side, hold[1], (as_, at, atag)]
    best: tuple[int, int] | None = None
    for i in range(1, len(msgs)):
        trial = msgs[:i] + block + msgs[i:]
        chunks = chunk_markdown("\n".join(content_lines(trial)), CHUNK_TOKENS, CHUNK_OVERLAP)
        q_line, a_line = i + 1, i + len(block)  # 1-based content lines
        if (any(c.start_line <= q_line <= c.end_line for c in chunks)
                and not any(c.start_line <= q_line and a_line <= c.end_line for c in chunks)):
            dist = abs(i - len(msgs) // 2)
            if best is None or dist < best[0]:
                best = (dist, i)
    i = best[1] if best else len(msgs) // 2
    return msgs[:i] + block + msgs[i:]


def plan() -> dict[str, Any]:
    """Sessions (key, file, thread, start, messages) and questions with labels, from the seed."""
    rng = random.Random(SEED)
    edges = dict(EDGES)
    sessions: dict[str, dict[str, Any]] = {}
    keys = sorted(SESSIONS, key=lambda k: (SESSIONS[k][1], SESSIONS[k][2], k))
    for key in keys:
        thread, day, hhmm = SESSIONS[key]
        people, offset = THREADS[thread]
        talkers = [OWNER, *people]
        n = rng.randint(14, 26) if key not in edges else rng.randint(30, 40)
        msgs: list[tuple[str, str, str]] = [(rng.choice(talkers), filler(thread, rng), "") for _ in range(n)]
        for ev in EVENTS.get(key, []):
            msgs.insert(rng.randint(2, len(msgs) - 2), ev)
        if key in edges:
            pair = [(s, t, "edge-" + tag) for s, t, tag in edges[key]]
            msgs = place_at_edge(msgs, pair, rng)
        tz = timezone(timedelta(hours=offset))
        hh, mm = map(int, hhmm.split(":"))
        start = datetime(day.year, day.month, day.day, hh, mm, tzinfo=tz)
        name = str(uuid.UUID(int=rng.getrandbits(128), version=4)) + ".jsonl"
        sessions[key] = {"key": key, "file": name, "thread": thread, "start": start, "msgs": msgs,
                         "gaps": [rng.choice((0, 1, 1, 2, 3, 5, 9)) for _ in msgs]}
    return _finish_plan(sessions, QUESTIONS)


def _finish_plan(sessions: dict[str, dict[str, Any]], question_list: list[Q]) -> dict[str, Any]:
    """The plan's lines, stamps, daily notes and labelled questions, from its sessions."""
    # the JSONL line of every tagged message (line 1 is the session header)
    for s in sessions.values():
        s["lines"] = {tag: n + 2 for n, (_, _, tag) in enumerate(s["msgs"]) if tag}
        t = s["start"]
        stamps = []
        for gap in s["gaps"]:
            t += timedelta(minutes=gap)
            stamps.append(t)
        s["stamps"] = stamps
    notes = daily_notes(sessions)
    questions = []
    for n, (cat, text, rels) in enumerate(question_list, 1):
        files: dict[str, int] = {}
        evidence: list[tuple[str, int]] = []
        notes_rels: dict[str, int] = {}
        notes_evidence: list[tuple[str, int]] = []
        days: dict[str, str] = {}
        for ref, r in rels.items():
            key, _, tag = ref.partition(":")
            s = sessions[key]
            cid = f"sessions/{s['file']}"
            files[cid] = max(files.get(cid, 0), r)
            days[cid] = s["start"].date().isoformat()
            tags = [tag] if tag else [t for t in s["lines"] if not t.startswith("edge-")]
            evidence += [(cid, s["lines"][t]) for t in tags if r >= 2]
            note = s["note"]
            notes_rels[note] = max(notes_rels.get(note, 0), r)
            notes_evidence += [(note, s["note_lines"][t]) for t in tags if r >= 2]
        questions.append({"_id": f"k{n:03d}", "text": text, "category": cat, "rels": files,
                          "evidence": evidence, "days": days, "rels_notes": notes_rels,
                          "evidence_notes": list(dict.fromkeys(notes_evidence))})
    return {"sessions": sessions, "questions": questions, "notes": notes}


def daily_notes(sessions: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The same conversations as daily Markdown notes (the ``chats-notes`` variant): one
    ``memory/YYYY-MM-DD.md`` per UTC day a thread starts on (so Mo's 01:10 at ``+04:00`` and an
    evening's after-midnight session go where a note-taker in UTC would put them), a ``#`` day
    heading, a ``##`` heading per thread (who, start time), one line per message. Sets each
    session's ``note`` (path) and ``note_lines`` (tag -> 1-based line)."""
    by_day: dict[date, list[dict[str, Any]]] = {}
    for s in sessions.values():
        by_day.setdefault(s["start"].astimezone(UTC).date(), []).append(s)
    out: dict[str, str] = {}
    for day, day_sessions in sorted(by_day.items()):
        path = f"memory/{day.isoformat()}.md"
        lines = [f"# {day.isoformat()}", ""]
        for s in sorted(day_sessions, key=lambda x: x["start"]):
            who = ", ".join(THREADS[s["thread"]][0])
            lines += [f"## Chat with {who} ({s['start'].astimezone(UTC):%H:%M})", ""]
            s["note"], s["note_lines"] = path, {}
            for sender, text, tag in s["msgs"]:
                lines.append(f"{sender}: {text}")
                if tag:
                    s["note_lines"][tag] = len(lines)
            lines.append("")
        out[path] = "\n".join(lines)
    return out


def transcript(s: dict[str, Any]) -> str:
    start: datetime = s["start"]

    def iso(x: datetime) -> str:
        if x.utcoffset() == timedelta(0):
            return x.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        return x.isoformat(timespec="milliseconds")

    sid = s["file"].removesuffix(".jsonl")
    recs: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": sid, "timestamp": iso(start),
                                   "cwd": "/home/ben"}]
    for (sender, text, _), t in zip(s["msgs"], s["stamps"], strict=True):
        role, body = render(sender, text)
        recs.append({"type": "message", "id": f"{sid[:8]}-{len(recs):03d}", "timestamp": iso(t),
                     "message": {"role": role, "content": [{"type": "text", "text": body}],
                                 "timestamp": int(t.timestamp() * 1000)}})
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in recs) + "\n"


# ---------------------------------------------------------------------------------------------
# chats-dense: the same people, plan and questions, about 5x the messages (issue 37)
# ---------------------------------------------------------------------------------------------
DENSE_HERE = HERE.parent / "chats-dense"
DENSE_SEED = SEED + 37

NAMES = {"kate": ["Kate", "Kat", "kate", "Katie", "K"], "mo": ["Mo", "Muhammad", "mo", "Moe", "Mo"],
         "jorge": ["Jorge", "J", "jorge", "Jorgito"], "anne": ["Liese", "Anneliese", "Anne", "liese"],
         "shiv": ["Siobhan", "Shiv", "shiv", "Siobhan"], "ben": ["Ben", "Benny", "ben", "B"]}
SLOTS = {"when": ["tmrw", "tonight", "later", "sat", "on thurs", "next week", "this wknd", "fri", "sun", "mon"],
         "time": ["6", "7ish", "half 7", "8", "6:30", "after work"], "n": [str(i) for i in range(2, 10)],
         "colour": ["green", "yellow", "purple", "black", "pink", "white"],
         "wall": ["slab", "overhang", "cave", "arete", "comp wall"],
         "city": ["Lisbon", "Muscat", "London", "Cairo", "Istanbul"],
         "thing": ["focaccia", "cinnamon buns", "rye", "a lemon tart", "brioche", "bagels", "pretzels"]}
ABBREV = {"you": "u", "your": "ur", "are": "r", "tomorrow": "tmrw", "tonight": "2nite", "because": "bc",
          "probably": "prob", "though": "tho", "really": "rly", "please": "pls", "thanks": "thx",
          "people": "ppl", "about": "abt", "something": "smth", "before": "b4", "great": "gr8",
          "minutes": "mins", "don't": "dont", "i'm": "im", "what": "wat", "with": "w", "going": "goin"}
# look-alikes: the recurring topics' words, never an outcome or a fact a question asks for
LOOKALIKES: dict[str, list[str]] = {
    "band": ["rehearsal {when}? i can do {time}", "are we still on for rehearsal {when}", "the bridge still feels rushed",
             "we need to work on the bridge again", "setlist draft v{n} is in the drive", "should we open with smth faster",
             "gig nerves already lol", "amp is humming again, ignore it", "need new strings before the gig",
             "snare sounds a bit flat", "the sound guy at the venue hasnt replied", "shall we print tshirts for the gig",
             "ask {shiv} abt the setlist", "{jorge} can u send the voice memo from rehearsal", "harmony on the chorus is off",
             "the new song needs a proper ending", "how long is our set again", "who's doing the poster for the gig",
             "cover or no cover, we keep going back and forth", "practice the outro pls", "drums too loud in the room",
             "rehearsal room booked {when} from {time}", "{shiv} ur mic stand is broken", "gig countdown: {n} days",
             "Copper Moon needs a capo or smth", "who's driving to the gig?", "the Crooked Anchor has no parking lol"],
    "kate": ["climbing {when}?", "bouldering {when}? the {colour} one on the {wall} is calling me",
             "forearms are dead from climbing", "flat hunting is soul destroying", "another viewing {when}, fingers crossed",
             "landlord still hasnt replied", "rent round here is insane", "pottery {when}, making a mug this time",
             "cello practice then bed", "interview prep all evening", "{kate} r u climbing {when}",
             "the {colour} problem on the {wall} is so hard", "new chalk bag arrived", "the estate agent called again",
             "so many flats on the list", "wheel throwing is harder than it looks", "my bow arm hurts",
             "viewing at {time}, wanna come?", "the gym was packed", "cant find a flat with a decent kitchen",
             "need to book the van for the Carver Rd move", "my climbing partner cancelled again"],
    "mo": ["car's making that noise again", "garage {when}, pray for me", "quote seems high tbh",
           "flight prices to {city} are crazy", "wedding stuff all weekend", "conference slides not done",
           "oud practice, fingers hurt", "hiking {when}?", "still waiting for the garage to call",
           "my sister wants me to sort the wedding music", "{mo} here, landed", "car is at the garage again",
           "brakes feel soft, or im imagining it", "visa stuff for the trip ugh", "packing for {city}",
           "the mechanic said he'd call {when}", "my cousins want to go to the wadi again", "that {city} trip was fun",
           "hotels in {city} are so pricey", "the garage messed up my booking again",
           "my sister's fiancé is coming to dinner {when}"],
    "jorge": ["5 a side {when}?", "we need a keeper for {when}", "thesis writing day {n}", "supervisor meeting moved to {when}",
              "board games {when}? ill bring smth new", "drum practice, my neighbours hate me",
              "the pitch was like ice last time", "chapter {n} needs a rewrite", "match {when} at {time}",
              "{jorge} r u playing {when}", "scored an own goal in my dreams lol", "lab meeting ran 2 hours",
              "anyone got a spare shin pad", "my supervisor wants more plots", "defence prep is scary",
              "football then pub?", "the team chat is chaos", "{n} pages to go", "kick off times keep changing",
              "the thesis formatting is a nightmare"],
    "anne": ["baking {thing} {when}", "my starter smells weird", "birthday plans?? dont tell me anything",
             "German class {when}", "Spanish homework ugh", "going home to see my parents soon", "new cake recipe to try",
             "the oven at work is tiny", "{anne} here, made {thing}", "flour everywhere", "proofing takes forever",
             "my birthday is coming up, scary", "the bakery was out of {thing}", "train tickets home are so expensive",
             "who wants {thing}", "office loved the {thing}", "dough didnt rise again",
             "miss the bakeries back home", "need new shoes, mine are falling apart"],
    "crew": ["who's around {when}?", "pub {when}?", "drinks for {anne}'s bday?", "{kate} when is the flat warming",
             "{mo} when r u back", "pics from the gig pls", "anyone seen my jacket", "brunch sun?",
             "{jorge} r u coming {when}", "group pic or it didnt happen", "whose turn to book the table",
             "ill be late, start without me", "{ben} owes me a pint", "can someone share the photos",
             "quiz night {when}?", "who's got the big speaker", "which pub this time?", "drinks {when}? usual pub?"],
}
DENSE_GENERIC = GENERIC + [
    "lmao", "ikr", "omg same", "ya", "nah", "ok ok", "hahah", "yess", "noo", "fr", "deffo", "pls", "ty", "xx",
    "ugh mondays", "so tired tbh", "on my way", "5 mins", "wait", "what", "seen", "lol ok", "🙈", "🔥", "❤️",
    "sorry just saw this", "can we talk later", "brb food", "ok back", "busy day", "not rn", "maybe", "idk tbh",
    "wdym lol", "that's wild", "no wayyy", "legit", "sure sure", "will let u know", "ill text u", "cool cool",
]
DENSE_THREADS = ("kate", "mo", "band", "jorge", "anne", "crew")

# sessions only chats-dense has, with planted messages (key -> (thread, day, start))
DENSE_SESSIONS: dict[str, tuple[str, date, str]] = {
    "x-kate-08": ("kate", d(8), "12:40"), "x-kate-13": ("kate", d(13), "19:00"), "x-kate-18": ("kate", d(18), "11:30"),
    "x-kate-22": ("kate", d(22), "20:10"), "x-kate-24": ("kate", d(24), "10:00"),
    "x-mo-07": ("mo", d(7), "20:30"), "x-mo-11": ("mo", d(11), "18:00"), "x-mo-16": ("mo", d(16), "19:45"),
    "x-mo-20": ("mo", d(20), "21:15"), "x-mo-23": ("mo", d(23), "17:30"),
    "x-jorge-07": ("jorge", d(7), "19:20"), "x-jorge-10": ("jorge", d(10), "11:45"), "x-jorge-14": ("jorge", d(14), "20:00"),
    "x-jorge-18": ("jorge", d(18), "16:30"), "x-jorge-21": ("jorge", d(21), "13:10"),
    "x-anne-06": ("anne", d(6), "18:30"), "x-anne-09": ("anne", d(9), "20:45"), "x-anne-12": ("anne", d(12), "19:40"),
    "x-anne-16": ("anne", d(16), "08:50"), "x-anne-20": ("anne", d(20), "18:10"),
    "x-band-10": ("band", d(10), "15:00"), "x-band-18": ("band", d(18), "19:30"),
    "x-crew-09": ("crew", d(9), "17:00"), "x-crew-15": ("crew", d(15), "12:10"), "x-crew-21": ("crew", d(21), "18:40"),
}
DENSE_EVENTS: dict[str, list[tuple[str, str, str]]] = {
    "x-kate-08": [("Kate", "made a massive lasagne, leftovers for days", "lasagne"),
                  ("Kate", "got my dad a fancy thermos for his bday", "thermos")],
    "x-kate-13": [("Kate", "boiler packed in, cold shower this morning 🥶", "boiler"),
                  ("Kate", "binged all of Slow Horses in 2 days, no regrets", "slowhorses")],
    "x-kate-18": [("Kate", "rent plus deposit means im eating beans till feb", "beans"),
                  ("Kate", "going to my nan's for sunday lunch", "nan")],
    "x-kate-22": [("Kate", "cant find my keys, been locked out for an hour", "keys")],
    "x-mo-07": [("Muhammad", "tried making machboos from my mum's recipe, not bad at all", "machboos"),
                ("Muhammad", "watched the cricket final, UAE lost by 4 wickets", "cricket")],
    "x-mo-11": [("Muhammad", "picked up perfume for my sister at duty free", "perfume")],
    "x-mo-16": [("Muhammad", "got promoted to team lead!! starting in feb", "promoted"),
                ("Muhammad", "went to see the new Dune in IMAX, sand everywhere lol", "dune")],
    "x-mo-20": [("Muhammad", "my parents land on thursday, the spare room is ready", "parents")],
    "x-jorge-07": [("Jorge", "attempted paella, the rice burnt at the bottom", "paella"),
                   ("Jorge", "stipend is late again, 12 quid in my account", "stipend")],
    "x-jorge-10": [("Jorge", "ordered Siobhan a new guitar strap as a thank you", "strap"),
                   ("Jorge", "washing machine flooded the kitchen, towels everywhere", "washing")],
    "x-jorge-14": [("Jorge", "played padel with Kate, she destroyed me", "padel"),
                   ("Jorge", "rewatched the extended Lord of the Rings, 11 hours", "lotr")],
    "x-jorge-18": [("Jorge", "left my wallet on the 73 bus", "wallet")],
    "x-jorge-21": [("Jorge", "full on flu, 39 degrees, in bed all day", "flu")],
    "x-anne-06": [("Anneliese", "up at 4am again, my brain wont switch off", "4am")],
    "x-anne-09": [("Anneliese", "went skating on the frozen lake in the park", "skating")],
    "x-anne-12": [("Anneliese", "handed in my notice at the agency today!", "notice"),
                  ("Anneliese", "the oven door came off its hinge mid bake", "oven")],
    "x-anne-16": [("Anneliese", "tonsillitis again, on antibiotics", "tonsils")],
    "x-anne-20": [("Anneliese", "spent way too much on the party, budget mode now", "budget")],
    "x-band-18": [("Siobhan", "lost my in-ear monitors somewhere in the van", "inear")],
}
# edge-next: the answer is the very next message; placed so the question's message ends a chunk
EDGE_NEXT: list[tuple[str, list[tuple[str, str, str]]]] = [
    ("x-kate-24", [("Ben", "whats the house number of the Carver Rd flat again, need it for the van booking", "q"),
                   ("Kate", "14b, top floor, the blue door", "a")]),
    ("x-mo-23", [("Ben", "which hotel are u staying at in Lisbon", "q"),
                 ("Muhammad", "the Memmo Alfama, right by the castle", "a")]),
    ("x-band-10", [("Jorge", "what key are we doing Copper Moon in now", "q"),
                   ("Siobhan", "down to D, my voice cant do E anymore", "a")]),
    ("x-jorge-18", [("Ben", "what time is kick off for 5 a side next week", "q"),
                    ("Jorge", "8:15, pitch 3", "a")]),
    ("x-anne-16", [("Ben", "whats the name of that bakery u love in Freiburg", "q"),
                   ("Anneliese", "Bäckerei Pfeffer, best Laugenbrezel ever", "a")]),
    ("x-kate-13", [("Ben", "whats ur climbing partner's name, the tall one", "q"),
                   ("Kate", "Ingrid, she's a machine", "a")]),
    ("x-mo-11", [("Ben", "what was the garage called again, my car needs a service", "q"),
                 ("Muhammad", "Al Futtaim service centre, ask for Rashid", "a")]),
    ("x-band-18", [("Siobhan", "who's driving the gear to the Crooked Anchor", "q"),
                   ("Jorge", "me, borrowing my uncle's estate car", "a")]),
    ("x-jorge-10", [("Ben", "what's the title of ur thesis again", "q"),
                    ("Jorge", "Thermal drift in low-cost soil sensors", "a")]),
    ("x-anne-09", [("Ben", "what size are ur feet, asking for a birthday reason", "q"),
                   ("Anneliese", "39, sometimes 40", "a")]),
    ("x-crew-21", [("Kate", "which pub for the friday drinks", "q"),
                   ("Muhammad", "The Bell on Frith St, upstairs room", "a")]),
    ("x-mo-20", [("Ben", "what's ur sister's fiancé called", "q"),
                 ("Muhammad", "Tariq, an engineer, nice guy", "a")]),
]
DENSE_QUESTIONS: list[Q] = [
    # -- edge-next
    ("edge-next", "What is the house number of Kate's new flat on Carver Road?", {"x-kate-24:edge-a": 2}),
    ("edge-next", "Which hotel is Mo staying at in Lisbon?", {"x-mo-23:edge-a": 2}),
    ("edge-next", "Which key are we playing Copper Moon in?", {"x-band-10:edge-a": 2}),
    ("edge-next", "What time does five-a-side kick off next week?", {"x-jorge-18:edge-a": 2}),
    ("edge-next", "What's the name of the bakery Anneliese loves in Freiburg?", {"x-anne-16:edge-a": 2}),
    ("edge-next", "What is the name of Kate's climbing partner?", {"x-kate-13:edge-a": 2}),
    ("edge-next", "Which garage did Mo use for his car?", {"x-mo-11:edge-a": 2}),
    ("edge-next", "Who is driving the band's gear to the Crooked Anchor?", {"x-band-18:edge-a": 2}),
    ("edge-next", "What is the title of Jorge's thesis?", {"x-jorge-10:edge-a": 2}),
    ("edge-next", "What shoe size is Anneliese?", {"x-anne-09:edge-a": 2}),
    ("edge-next", "Which pub are we going to for Friday drinks?", {"x-crew-21:edge-a": 2}),
    ("edge-next", "What is Mo's sister's fiancé called?", {"x-mo-20:edge-a": 2}),
    # -- multi: evidence in 2-4 sessions, in other words than the question
    ("multi", "What food have my friends been cooking lately?",
     {"x-kate-08:lasagne": 2, "x-mo-07:machboos": 2, "x-jorge-07:paella": 2}),
    ("multi", "Which of my friends are having trouble sleeping?",
     {"x-anne-06:4am": 2, "mo-18:late": 2, "jorge-23:nervous": 2}),
    ("multi", "What presents have people bought for someone recently?",
     {"x-kate-08:thermos": 2, "x-mo-11:perfume": 2, "x-jorge-10:strap": 2}),
    ("multi", "Who is short of money this month?",
     {"x-kate-18:beans": 2, "x-jorge-07:stipend": 2, "x-anne-20:budget": 2}),
    ("multi", "What sports did my friends watch or play apart from five-a-side?",
     {"x-mo-07:cricket": 2, "x-jorge-14:padel": 2, "x-anne-09:skating": 2}),
    ("multi", "Which of my friends had career news?",
     {"x-mo-16:promoted": 2, "x-anne-12:notice": 2, "kate-17:interview": 2}),
    ("multi", "What broke at people's homes this month?",
     {"x-kate-13:boiler": 2, "x-jorge-10:washing": 2, "x-anne-12:oven": 2}),
    ("multi", "What have people been watching on screen?",
     {"x-kate-13:slowhorses": 2, "x-mo-16:dune": 2, "x-jorge-14:lotr": 2}),
    ("multi", "Who is seeing their family soon?",
     {"x-mo-20:parents": 2, "x-kate-18:nan": 2, "anne-21:freiburg": 2}),
    ("multi", "What did people lose or misplace?",
     {"x-jorge-18:wallet": 2, "x-kate-22:keys": 2, "x-band-18:inear": 2}),
    ("multi", "Who was ill this month?", {"x-jorge-21:flu": 2, "x-anne-16:tonsils": 2}),
    ("multi", "What new things are Mo and Anneliese learning?", {"mo-15:oud": 2, "anne-07:spanish": 2}),
    # -- paraphrase: other words than the messages
    ("paraphrase", "Why did Kate reject the place with the mould problem?", {"kate-09:elm": 2}),
    ("paraphrase", "What does the apartment with the outdoor space cost?", {"kate-16:carver": 2}),
    ("paraphrase", "Which piece of band equipment gave off a burning smell?", {"band-12:amp": 2}),
    ("paraphrase", "What did the mechanic find wrong with Mo's vehicle?", {"mo-10:pads": 2}),
    ("paraphrase", "What did Mo get rid of once his car was fixed?", {"mo-19:roofbox": 2}),
    ("paraphrase", "Which emirate is hosting the family celebration in February?", {"mo-22:wedding": 2}),
    ("paraphrase", "What did Jorge send his academic advisor?", {"jorge-11:chapter": 2}),
    ("paraphrase", "How did the game against the firefighters end?", {"jorge-17:charity": 2}),
    ("paraphrase", "Why couldn't the team play outdoors this week?", {"jorge-20:frozen": 2}),
    ("paraphrase", "What did Kate rehearse that made the people next door complain?", {"kate-19:cello": 2}),
    ("paraphrase", "What went wrong with Anneliese's loaf?", {"anne-05:rye": 2}),
    ("paraphrase", "Where are we taking the birthday girl to eat?", {"anne-18:lumiere": 2}),
    ("paraphrase", "What did the pub owner say after our performance?", {"band-25:tshirts": 2}),
    ("paraphrase", "Which tune will kick off our performance?", {"band-16:copper": 2}),
    ("paraphrase", "What part of the drumming is Jorge anxious about?", {"jorge-23:nervous": 2}),
]


def roughen(text: str, rng: random.Random, typo_p: float, lower_p: float = 0.0) -> str:
    """Chat-style text: common words shortened (``you`` -> ``u``), a typo in a lower-case word
    with probability ``typo_p`` (a second one at half of it), everything lower-cased with ``lower_p``.
    Capitalised words (names, places) and numbers keep their spelling."""
    words = text.split(" ")
    words = [ABBREV[w.lower()] if w.lower() in ABBREV and rng.random() < 0.6 else w for w in words]
    for p in (typo_p, typo_p / 2):
        if rng.random() < p:
            cands = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha() and w.islower()]
            if cands:
                i = rng.choice(cands)
                words[i] = typo(words[i], rng)
    out = " ".join(words)
    return out.lower() if rng.random() < lower_p else out


def fill(template: str, rng: random.Random) -> str:
    out = template
    for key, values in {**SLOTS, **NAMES}.items():
        while "{" + key + "}" in out:
            out = out.replace("{" + key + "}", rng.choice(values), 1)
    return out


def filler_dense(thread: str, rng: random.Random) -> str:
    """Filler from larger pools: a look-alike about the thread's recurring topics (filled
    template), one of the thread's base lines (the crew's: any thread's), or generic talk."""
    r = rng.random()
    if r < 0.4:
        text = fill(rng.choice(LOOKALIKES[thread]), rng)
    elif r < 0.62:
        pool = POOLS[thread] if thread in POOLS else [t for k in sorted(POOLS) for t in POOLS[k]]
        text = rng.choice(pool)
    else:
        text = rng.choice(DENSE_GENERIC)
    return roughen(text, rng, 0.35, 0.1)


def place_next(msgs: list[tuple[str, str, str]], pair: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``msgs`` with ``pair`` (question-side message, its answer) inserted next to each other so
    that the question's message is the last line of a chunk (the local model's 200/40 chunks)
    and the answer the first line past that chunk's end (the next chunk repeats the question's
    line as its overlap, then starts its own lines with the answer). As near the middle as
    possible; an AssertionError when no place does it."""
    sys.path.insert(0, str(HERE.parent.parent))
    from memory_core.index.chunking import chunk_markdown

    best: tuple[int, int] | None = None
    for i in range(2, len(msgs) - 2):
        trial = msgs[:i] + pair + msgs[i:]
        chunks = chunk_markdown("\n".join(content_lines(trial)), CHUNK_TOKENS, CHUNK_OVERLAP)
        if any(c.end_line == i + 1 for c in chunks[:-1]):
            dist = abs(i - len(msgs) // 2)
            if best is None or dist < best[0]:
                best = (dist, i)
    assert best is not None, f"no chunk edge for {pair[0][1]!r}"
    return msgs[:best[1]] + pair + msgs[best[1]:]


def dense_sessions() -> dict[str, tuple[str, date, str]]:
    """Every chats-dense session: the base ones, :data:`DENSE_SESSIONS` and filler-only ones
    (``f-<thread>-<dd>[b]``): on each day, most threads that have no session that day get one,
    some a second."""
    rng = random.Random(DENSE_SEED + 1)
    out = {**SESSIONS, **DENSE_SESSIONS}
    taken = {(t, day) for t, day, _ in out.values()}
    for n in range(N_DAYS):
        day = FIRST + timedelta(days=n)
        for thread in DENSE_THREADS:
            if (thread, day) not in taken and rng.random() < 0.55:
                out[f"f-{thread}-{day.day:02d}"] = (thread, day, f"{rng.randint(7, 21):02d}:{rng.randrange(60):02d}")
            if rng.random() < 0.2:
                out[f"f-{thread}-{day.day:02d}b"] = (thread, day, f"{rng.randint(7, 21):02d}:{rng.randrange(60):02d}")
    return out


def plan_dense() -> dict[str, Any]:
    """The chats-dense plan, as :func:`plan` (same keys): the base sessions with 40-65 filler
    messages each instead of 14-26, :data:`DENSE_SESSIONS` (35-55), filler-only sessions (15-35),
    planted messages roughened (shortened words, typos), the base edge pairs placed as
    :func:`place_at_edge` does, the :data:`EDGE_NEXT` pairs by :func:`place_next`;
    questions :data:`QUESTIONS` + :data:`DENSE_QUESTIONS`."""
    rng = random.Random(DENSE_SEED)
    all_sessions = dense_sessions()
    edges, nexts = dict(EDGES), dict(EDGE_NEXT)
    events = {**EVENTS, **DENSE_EVENTS}
    sessions: dict[str, dict[str, Any]] = {}
    for key in sorted(all_sessions, key=lambda k: (all_sessions[k][1], all_sessions[k][2], k)):
        thread, day, hhmm = all_sessions[key]
        people, offset = THREADS[thread]
        talkers = [OWNER, *people]
        n = rng.randint(40, 65) if key in SESSIONS else rng.randint(35, 55) if key in DENSE_SESSIONS \
            else rng.randint(15, 35)
        msgs: list[tuple[str, str, str]] = [(rng.choice(talkers), filler_dense(thread, rng), "") for _ in range(n)]
        for sender, text, tag in events.get(key, []):
            msgs.insert(rng.randint(2, len(msgs) - 2), (sender, roughen(text, rng, 0.3), tag))
        if key in edges:
            msgs = place_at_edge(msgs, [(s, t, "edge-" + tag) for s, t, tag in edges[key]], rng)
        if key in nexts:
            msgs = place_next(msgs, [(s, t, "edge-" + tag) for s, t, tag in nexts[key]])
        tz = timezone(timedelta(hours=offset))
        hh, mm = map(int, hhmm.split(":"))
        start = datetime(day.year, day.month, day.day, hh, mm, tzinfo=tz)
        name = str(uuid.UUID(int=rng.getrandbits(128), version=4)) + ".jsonl"
        sessions[key] = {"key": key, "file": name, "thread": thread, "start": start, "msgs": msgs,
                         "gaps": [rng.choice((0, 0, 1, 1, 1, 2, 3, 5)) for _ in msgs]}
    return _finish_plan(sessions, [*QUESTIONS, *DENSE_QUESTIONS])


TOML = 'sources = ["sessions"]\nprovider = "local"\n'


TOML_NOTES = 'sources = ["memory"]\nprovider = "local"\n'


def daily_transcripts(dense: bool = False) -> tuple[dict[str, str], dict[str, tuple[str, int]]]:
    """The same sessions as one transcript a day (``daily``: the shape of an agent whose session
    resets each day, or of a chat export cut by day): ``sessions/<YYYY-MM-DD>.jsonl`` by the day
    each session starts (its header's date), sessions in time order, one session header a file (the first's).
    Returns the files' texts and, for each session's corpus id, its new corpus id and the offset to
    add to its JSONL line numbers."""
    p = plan_dense() if dense else plan()
    texts = sorted((transcript(s) for s in p["sessions"].values()),
                   key=lambda t: json.loads(t.split("\n", 1)[0])["timestamp"])
    files: dict[str, list[str]] = {}
    where: dict[str, tuple[str, int]] = {}
    for text in texts:
        lines = text.splitlines()
        head = json.loads(lines[0])
        name = f"sessions/{head['timestamp'][:10]}.jsonl"
        out = files.setdefault(name, [])
        # the session's line n is line n of a new file, or line len(out) + n - 1 once its header is dropped
        where[f"sessions/{head['id']}.jsonl"] = (name, 0 if not out else len(out) - 1)
        out.extend(lines if not out else lines[1:])
    return {n: "\n".join(ls) + "\n" for n, ls in files.items()}, where


def build_workspace(dest: Path, variant: str = "sessions", dense: bool = False) -> Path:
    """Write the workspace into *dest* (replaced if it exists): the transcripts, or (``notes``)
    the same conversations as daily notes, or (``daily``) as one transcript a day
    (:func:`daily_transcripts`); ``dense``: chats-dense's."""
    p = plan_dense() if dense else plan()
    if dest.exists():
        shutil.rmtree(dest)
    if variant == "daily":
        (dest / "sessions").mkdir(parents=True)
        for name, text in daily_transcripts(dense)[0].items():
            (dest / name).write_text(text, encoding="utf-8")
        (dest / "memory-core.toml").write_text(TOML, encoding="utf-8")
        return dest
    if variant == "notes":
        (dest / "memory").mkdir(parents=True)
        for path, text in p["notes"].items():
            (dest / path).write_text(text, encoding="utf-8")
        (dest / "memory-core.toml").write_text(TOML_NOTES, encoding="utf-8")
        return dest
    (dest / "sessions").mkdir(parents=True)
    for s in p["sessions"].values():
        (dest / "sessions" / s["file"]).write_text(transcript(s), encoding="utf-8")
    (dest / "memory-core.toml").write_text(TOML, encoding="utf-8")
    return dest


def labels(dense: bool = False) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    qs = (plan_dense() if dense else plan())["questions"]
    return {q["_id"]: q["text"] for q in qs}, {q["_id"]: dict(q["rels"]) for q in qs if q["rels"]}


def write_labels(out: Path | None = None, dense: bool = False) -> dict[str, int]:
    """Write the label files into *out* (default: eval/chats/, or eval/chats-dense/ with ``dense``)."""
    p = plan_dense() if dense else plan()
    out = out or (DENSE_HERE if dense else HERE)
    out.mkdir(parents=True, exist_ok=True)
    qs = p["questions"]
    with open(out / "queries.jsonl", "w", encoding="utf-8") as fh:
        for q in qs:
            fh.write(json.dumps({"_id": q["_id"], "text": q["text"], "category": q["category"]}, ensure_ascii=False) + "\n")
    with open(out / "qrels.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q in qs:
            for cid, r in q["rels"].items():
                fh.write(f"{q['_id']}\t{cid}\t{r}\n")
    with open(out / "labels.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcategory\ttext\tcorpus-id\tsession-day\trelevance\n")
        for q in qs:
            for cid, r in q["rels"].items():
                fh.write(f"{q['_id']}\t{q['category']}\t{q['text']}\t{cid}\t{q['days'][cid]}\t{r}\n")
    with open(out / "evidence.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tjsonl-line\n")
        for q in qs:
            for cid, line in q["evidence"]:
                fh.write(f"{q['_id']}\t{cid}\t{line}\n")
    with open(out / "qrels-notes.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q in qs:
            for cid, r in q["rels_notes"].items():
                fh.write(f"{q['_id']}\t{cid}\t{r}\n")
    with open(out / "evidence-notes.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tline\n")
        for q in qs:
            for cid, line in q["evidence_notes"]:
                fh.write(f"{q['_id']}\t{cid}\t{line}\n")
    with open(out / "negatives.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\ttext\n")
        for q in qs:
            if not q["rels"]:
                fh.write(f"{q['_id']}\t{q['text']}\n")
    cats: dict[str, int] = {}
    for q in qs:
        cats[q["category"]] = cats.get(q["category"], 0) + 1
    return {"sessions": len(p["sessions"]), "questions": len(qs), "labelled": sum(1 for q in qs if q["rels"]), **cats}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labels", action="store_true", help="write eval/chats/ (queries, qrels, labels, evidence, negatives)")
    ap.add_argument("--out", type=Path, help="write the workspace to OUT")
    ap.add_argument("--notes", action="store_true", help="with --out: the conversations as daily notes")
    ap.add_argument("--dense", action="store_true", help="the chats-dense set (eval/chats-dense/)")
    a = ap.parse_args(argv)
    if not a.labels and not a.out:
        ap.error("nothing to do: give --labels and/or --out")
    if a.labels:
        print(write_labels(dense=a.dense))
        p = plan_dense() if a.dense else plan()
        print(f"messages: {sum(len(s['msgs']) for s in p['sessions'].values())}")
    if a.out:
        build_workspace(a.out, "notes" if a.notes else "sessions", dense=a.dense)
        print(f"workspace: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
