"""A synthetic conversational memory set: planted facts in everyday transcripts, labelled by design.

    python eval/convo.py --labels            # eval/convo/{queries.jsonl,qrels.tsv,labels.tsv,negatives.tsv}
    python eval/convo.py --out DIR           # the workspace (40 transcripts, daily notes, MEMORY.md)

Deterministic (``SEED``): 40 sessions between a user and an assistant on distinct days from
2026-08-17 to 2026-11-18, one ``sessions/<uuid>.jsonl`` each (session header, timestamped
messages), built from filler chat on varied everyday and work topics (cooking, running, the
garden, budgeting, films, sprint planning, ...) with the facts below planted at fixed sessions.
A few daily notes and a MEMORY.md hold related but non-answering text (distractors).

Questions (English), each labelled with the session file(s) holding the answer (2 = the main
evidence, 1 = partial), by category:

* ``paraphrase``: a fact asked in other words than it was stated (the vector side matters);
* ``entity``: a rare name, id or number that keyword search finds;
* ``multi``: the answer needs two sessions (both labelled);
* ``update``: a later session supersedes an earlier one (newer 2, older 1);
* ``day``: the question names the session's day ("on 14 September", "September 14th", ISO);
* ``negative``: no answer anywhere (labelled nothing; also in ``negatives.tsv``), including a
  named day with no session.

Labels come from the plan, not from search.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "convo"
SEED = 20261126
N_SESSIONS = 40
FIRST, LAST = date(2026, 8, 17), date(2026, 11, 18)

# ---------------------------------------------------------------------------------------------
# Planted facts: session index -> [(user text, assistant reply)]
# ---------------------------------------------------------------------------------------------
FACTS: dict[int, list[tuple[str, str]]] = {
    1: [("My sister Ines keeps raving about a place called Trattoria Nonna Pia, she says the carbonara "
         "is the best in town and I have to try it.",
         "Sounds like a strong recommendation. Want me to remind you when you plan a dinner out?")],
    2: [("Big news: my sister Ines had her baby on Tuesday, a little boy, they named him Teodor.",
         "Congratulations, you're an aunt! How are Ines and the baby doing?")],
    3: [("The repair service gave me a reference for the broken dishwasher: ticket WX-58213. "
         "They'll send a technician next week.",
         "Noted: WX-58213 for the dishwasher repair.")],
    4: [("From Monday I'm leaving the car at home and taking the 7:40 commuter train to the office.",
         "Good plan, you can read on the way."),
        ("Also went for a check-up: my dentist, Dr. Alvarez, says the old filling needs a crown.",
         "Crowns usually take two visits. Did Dr. Alvarez give you a date?")],
    5: [("The landlord wrote: the rent goes up by 120 euros a month starting in October.",
         "That's a sizeable increase. Do you want to redo the monthly budget?")],
    6: [("We're renting the mountain cabin again, the wifi there is called Fjellstua_5G and the code is on the fridge.",
         "Handy to know before you arrive.")],
    7: [("For the record, I'm allergic to penicillin, I found out the hard way when I was seven.",
         "Important to know; always mention it to doctors and pharmacists."),
        ("I pay 45 a month for the FitBox gym, which hurts given how rarely I go.",
         "Maybe track your visits for a month and see if it's worth it.")],
    8: [("The new home insurance is active, policy number HLV-2291-0457, covers water damage too.",
         "Good, keep the policy number HLV-2291-0457 handy.")],
    9: [("We did it, we adopted a three-legged greyhound from the shelter! Her name is Pickle.",
         "Pickle! Greyhounds are famously gentle couch potatoes. How is she settling in?")],
    10: [("Rough day at work: the deploy of billing-svc v4.18.2 broke the invoice export and we had to roll back.",
          "Ouch. Was the rollback clean?")],
    11: [("My manager approved the four-day week trial, so I'm off every Friday until the end of the year.",
          "Three-day weekends! What will you do with the Fridays?"),
         ("And for context, my team lead is Priyanka, she pushed for the trial.",
          "Nice of Priyanka to back it.")],
    12: [("Finished Olga Tokarczuk's 'Flights' — honestly too fragmented for me, I gave it three stars.",
          "It's an unusual structure; plenty of readers feel the same.")],
    13: [("Booked the flights to Porto! We fly out on the 12th of December and come back on the 19th.",
          "Lovely, Porto in December is mild and quiet.")],
    14: [("The plumber, Zdravko Kovačević, quoted 640 to fix the leak behind the bathroom wall.",
          "That's within the usual range for hidden leaks."),
         ("Book club is at Lena's flat on the first Monday of each month, I'm hosting snacks next time.",
          "Fun, what are you reading?")],
    15: [("Pharmacy health check: blood pressure 142 over 91. The nurse told me to cut down on salt.",
          "Worth following up; small changes in salt intake make a real difference.")],
    16: [("I lent my cordless drill to Hamid from the third floor, he's putting up shelves.",
          "Good neighbourly deed. Hopefully it comes back charged.")],
    17: [("We finally went to Trattoria Nonna Pia. The carbonara was bland and overpriced, "
          "honestly not going back, sorry Ines.",
          "Shame it didn't live up to the hype.")],
    19: [("Update on the commute: they cut the 7:40 train from the timetable, so now I take the 7:25 express bus.",
          "Annoying, but at least the bus is direct."),
         ("At the pediatrician today, Dr. Okonkwo-Hale said the rash is eczema and to use the oat cream twice a day.",
          "Good that it's nothing serious.")],
    20: [("I've started Portuguese lessons with a tutor, Wednesday evenings on video call.",
          "Perfect timing before the trip.")],
    21: [("I started a sourdough starter today, flour and water in a jar, I named it Bubbles.",
          "Feed it daily and keep it somewhere warm.")],
    22: [("Our anniversary dinner is booked at a tiny place in the old town called Casa Lume.",
          "Romantic! Is it a special anniversary?")],
    23: [("Read the electricity meter (number 0049-7731-EL): 18342 kWh, for the supplier switch.",
          "Noted the reading for the switch.")],
    24: [("The postmortem for the invoice export outage is done: root cause was a missing database migration in the release.",
          "Good that it's understood; maybe add a migration check to CI.")],
    25: [("Sold my old road bike on the marketplace for 380, the buyer picked it up tonight.",
          "Nice, that funds part of the new one.")],
    26: [("I switched dentists: I'm with Dr. Chen at the clinic near work now, Alvarez was too far away.",
          "Makes sense to have it close to the office."),
         ("Ordered the folding bike: a Brompton C Line in racing green.",
          "Classic choice.")],
    27: [("My mother's hip surgery went well, she's in rehab for three weeks and already walking with a frame.",
          "That's great news, wish her a good recovery.")],
    28: [("Pickle had her vet check-up: healthy, but she needs a dental cleaning under anaesthesia.",
          "Common for greyhounds, their teeth need care.")],
    29: [("Work news: Priyanka moved to the platform team, our new team lead is Jonas Weber.",
          "Changes! How is Jonas so far?"),
         ("The Q3 numbers are in the shared folder FIN-OKR-2026-Q3, I have to present them Monday.",
          "Want to rehearse the key slides?")],
    30: [("New rule: no coffee after 2 pm, my sleep has been terrible.",
          "A good experiment; give it two weeks."),
         ("Also cancelled FitBox and joined the municipal pool instead, 28 a month.",
          "Cheaper, and swimming is easy on the joints.")],
    31: [("Making kimchi jjigae tonight: two tablespoons of gochugaru, aged kimchi, pork belly and tofu.",
          "Add a splash of the kimchi brine for depth.")],
    32: [("Teodor's christening is on the 6th and Ines asked me to be his godmother!",
          "What an honour. Congratulations, godmother.")],
    33: [("We painted the nursery a pale sage green this weekend.",
          "Sage is calming, good choice."),
         ("Book club moved: we now meet at the library café on Thursdays.",
          "More neutral ground, fewer dishes.")],
    34: [("Bubbles didn't make it: mould on top, I threw the starter away.",
          "It happens; you can start fresh with rye flour.")],
    35: [("Picking up my father tonight, his flight LX 1364 from Zurich lands at 21:05.",
          "Check the arrivals board before leaving, it might be early.")],
    36: [("The car failed its inspection because of worn brake pads.",
          "Better found now; brake pads are a quick fix.")],
    37: [("Booked the Porto hotel: Casa das Laranjeiras, near the Ribeira.",
          "Great location for walking.")],
    38: [("Signed up for the city half marathon on the 29th of November, aiming to finish under 1:55.",
          "Ambitious but doable with your training.")],
}

# Questions: (category, text, {session index: relevance}); "{d:N}" is the day of session N.
QUESTIONS: list[tuple[str, str, dict[int, int]]] = [
    ("paraphrase", "What is my nephew called?", {2: 2}),
    ("paraphrase", "Did my sibling's baby arrive, and is it a boy or a girl?", {2: 2}),
    ("paraphrase", "How much more will my flat cost each month?", {5: 2}),
    ("paraphrase", "Which antibiotic must doctors never give me?", {7: 2}),
    ("paraphrase", "What kind of dog did we bring home?", {9: 2}),
    ("paraphrase", "Which day of the week am I not working?", {11: 2}),
    ("paraphrase", "What did I think of the Polish author's novel I read?", {12: 2}),
    ("paraphrase", "Where are we flying for the winter holiday?", {13: 2}),
    ("paraphrase", "What dietary change did the nurse suggest after my health check?", {15: 2}),
    ("paraphrase", "Who has my power tool at the moment?", {16: 2}),
    ("paraphrase", "Which language am I learning, and when are the lessons?", {20: 2}),
    ("paraphrase", "Where are we celebrating our anniversary?", {22: 2}),
    ("paraphrase", "How much did I get for the bicycle I sold?", {25: 2}),
    ("paraphrase", "How is mum doing after her operation?", {27: 2}),
    ("paraphrase", "What rule did I set myself about caffeine?", {30: 2}),
    ("paraphrase", "What colour are the walls in the baby's room?", {33: 2}),
    ("paraphrase", "Why didn't my vehicle pass the safety check?", {36: 2}),
    ("paraphrase", "What finishing time am I aiming for in the race?", {38: 2}),
    ("paraphrase", "When is dad's plane arriving tonight?", {35: 2}),
    ("paraphrase", "What did the children's doctor say about the skin problem?", {19: 2}),
    ("paraphrase", "How much will it cost to repair the hidden bathroom leak?", {14: 2}),
    ("paraphrase", "What did we get done at home over the weekend with paint?", {33: 2}),
    ("entity", "What was ticket WX-58213 about?", {3: 2}),
    ("entity", "Where is the Fjellstua_5G network?", {6: 2}),
    ("entity", "What does policy HLV-2291-0457 cover?", {8: 2}),
    ("entity", "What went wrong with billing-svc v4.18.2?", {10: 2}),
    ("entity", "How many stars did I give Tokarczuk's Flights?", {12: 2}),
    ("entity", "How much did Zdravko Kovačević quote?", {14: 2}),
    ("entity", "What did Dr. Okonkwo-Hale recommend?", {19: 2}),
    ("entity", "What was the reading on meter 0049-7731-EL?", {23: 2}),
    ("entity", "Which colour Brompton did I order?", {26: 2}),
    ("entity", "What is in FIN-OKR-2026-Q3?", {29: 2}),
    ("entity", "How much gochugaru goes in my kimchi jjigae?", {31: 2}),
    ("entity", "When does LX 1364 land?", {35: 2}),
    ("entity", "What is the name of our greyhound?", {9: 2}),
    ("entity", "What did the vet say about Pickle?", {28: 2, 9: 1}),
    ("entity", "What did I name the sourdough starter?", {21: 2, 34: 1}),
    ("entity", "Which hotel did we book in Porto?", {37: 2}),
    ("multi", "Which restaurant did my sister recommend, and did I end up liking it?", {1: 2, 17: 2}),
    ("multi", "When did I start my sourdough starter and what became of it?", {21: 2, 34: 2}),
    ("multi", "What did the vet find at the check-up of the dog we adopted from the shelter?", {28: 2, 9: 1}),
    ("multi", "What was the root cause of the outage after the billing release?", {24: 2, 10: 1}),
    ("multi", "For the December trip, when are the flights and where are we staying?", {13: 2, 37: 2}),
    ("multi", "What role do I have at my nephew's ceremony, and what is his name?", {32: 2, 2: 2}),
    ("multi", "Is the Italian place Ines loves worth going to?", {17: 2, 1: 1}),
    ("multi", "How did the bike swap go: what did I sell the old one for and what did I buy?", {25: 2, 26: 2}),
    ("update", "Who is my dentist now?", {26: 2, 4: 1}),
    ("update", "How do I get to the office these days?", {19: 2, 4: 1}),
    ("update", "How much do I pay for my exercise membership now?", {30: 2, 7: 1}),
    ("update", "Who leads my team at the moment?", {29: 2, 11: 1}),
    ("update", "Where does my book club meet now?", {33: 2, 14: 1}),
    ("update", "Which train do I take to work?", {19: 2, 4: 1}),
    ("update", "Do I still go to the FitBox gym?", {30: 2, 7: 1}),
    ("day", "What did we talk about on {d:16}?", {16: 2}),
    ("day", "On {d:22}, what did I book?", {22: 2}),
    ("day", "What did I tell you on {d:36} about the car?", {36: 2}),
    ("day", "What was I cooking on {d:31}?", {31: 2}),
    ("day", "Which policy did I mention on {d:8}?", {8: 2}),
    ("day", "What did we discuss on {d:25}?", {25: 2}),
    ("day", "On {d:34}, what did I say about the starter?", {34: 2}),
    ("day", "What did I decide on {d:30}?", {30: 2}),
    ("day", "What happened at work on {d:10}?", {10: 2}),
    ("day", "What news did I share on {d:2}?", {2: 2}),
    ("day", "What did I note on {d:23}?", {23: 2}),
    ("day", "Who did I lend something to on {d:16}?", {16: 2}),
    ("paraphrase", "What health issue should I mention to every pharmacist?", {7: 2}),
    ("entity", "What is the Casa Lume booking for?", {22: 2}),
    ("multi", "How has my way to work changed since the summer?", {4: 2, 19: 2}),
    ("update", "Who takes care of my teeth these days?", {26: 2, 4: 1}),
    ("negative", "What is my brother-in-law's job?", {}),
    ("negative", "When does my passport expire?", {}),
    ("negative", "What is our cat called?", {}),
    ("negative", "Which ski resort did we book for February?", {}),
    ("negative", "What did the electrician charge for the kitchen wiring?", {}),
    ("negative", "How many stitches did I get after the cycling accident?", {}),
    ("negative", "What is my employee ID at work?", {}),
    ("negative", "Which piano teacher did we hire for the kids?", {}),
    ("negative", "What is my landlord's phone number?", {}),
    ("negative", "What did we talk about on {x}?", {}),
    ("negative", "Which vaccine did the pharmacist give me in the spring?", {}),
]

# ---------------------------------------------------------------------------------------------
# Filler: topics of everyday and work chat, without the planted facts' words
# ---------------------------------------------------------------------------------------------
TOPICS: dict[str, list[tuple[str, str]]] = {
    "running": [
        ("Did an easy {n} km along the river this morning, legs felt {feel}.",
         "Easy runs build the base; keep most of them conversational."),
        ("My left calf gets tight after hill repeats, any stretch you'd suggest?",
         "Try eccentric calf raises on a step and a foam roller after the session."),
        ("Thinking about new shoes, the current pair has about {n}00 km on them.",
         "Around 600-800 km most shoes lose cushioning; rotate two pairs if you can."),
        ("Intervals today: {n} times 800 metres, the last two were rough.",
         "That's a solid workout; take an easy day tomorrow."),
    ],
    "garden": [
        ("The tomatoes on the balcony are finally turning red, about {n} of them.",
         "Pick them when fully coloured, and keep watering evenly to avoid splitting."),
        ("Something is eating the basil leaves, little holes everywhere.",
         "Probably caterpillars or slugs; check the undersides in the evening."),
        ("Should I cut back the lavender now or wait until spring?",
         "A light trim after flowering, never into the old wood."),
        ("Planted {n} tulip bulbs in the window boxes today.",
         "Pointy end up, about three times their height deep."),
    ],
    "cooking": [
        ("Made a {dish} tonight, it came out {feel}.",
         "Nice! The trick is usually to season in layers while it cooks."),
        ("How long do cooked lentils keep in the fridge?",
         "About four to five days in a closed container."),
        ("Any idea what to do with half a cabbage and some leftover rice?",
         "Fried rice with shredded cabbage, soy, ginger and a fried egg on top."),
        ("Baked {n} muffins for the neighbours, blueberry and lemon.",
         "Lucky neighbours."),
    ],
    "budget": [
        ("I want to put aside {n}0 a week for the emergency fund.",
         "Automate it on payday so it happens before you spend."),
        ("Groceries were way over plan this month, mostly snacks.",
         "Try a shopping list and a weekly cap; it usually helps quickly."),
        ("Is it worth refinancing the car loan at a lower rate?",
         "Compare the total interest saved against any fees before switching."),
        ("Cancelled two streaming subscriptions, saving about {n} a month.",
         "Small recurring cuts add up over a year."),
    ],
    "films": [
        ("Watched an old {genre} film last night, the ending was {feel}.",
         "Older films often take their time; the payoff can be worth it."),
        ("Can you suggest something light for a Friday movie night?",
         "A warm comedy or an animated film usually works for mixed company."),
        ("The cinema near us now has reclining seats, prices went up though.",
         "Matinees are often cheaper."),
        ("We binged {n} episodes of a detective series this weekend.",
         "That's dedication. Any good twists?"),
    ],
    "sprint": [
        ("Sprint planning ran two hours again, we committed to {n} tickets.",
         "Maybe timebox the estimation part and park the long debates."),
        ("Code review backlog is huge, {n} pull requests waiting.",
         "A daily review slot right after standup can drain it quickly."),
        ("We're migrating the dashboards to the new charting library.",
         "Do the busiest dashboards first so feedback comes early."),
        ("Wrote the onboarding doc for the new hire, {n} pages.",
         "Add a first-week checklist; new people love concrete steps."),
    ],
    "home": [
        ("The hallway light flickers again, probably the bulb.",
         "Try a new bulb first; if it persists, check the fitting."),
        ("Finally sorted the storage room, filled {n} bags for donation.",
         "That feels good; label the boxes you keep."),
        ("The window in the bedroom lets in a draft, any quick fix?",
         "Self-adhesive foam strips along the frame are cheap and fast."),
        ("Washing machine smells musty, what do I do?",
         "Run an empty hot cycle with vinegar or soda and leave the door open afterwards."),
    ],
    "reading": [
        ("Started a history of the Silk Road, {n} pages in and hooked.",
         "Good narrative history is hard to put down."),
        ("I read slower on the e-reader than on paper, weird.",
         "Some people do; font size and margins can change the pace."),
        ("Looking for a short novel for the weekend, under {n}00 pages.",
         "Novellas are perfect for that; pick something with a single storyline."),
        ("Gave up on a fantasy trilogy halfway through the second book.",
         "Life's too short for books that don't grab you."),
    ],
    "music": [
        ("Practised the guitar for {n} minutes, barre chords still buzz.",
         "Press closer to the fret and roll the index finger slightly."),
        ("Went to a small jazz gig in a basement bar, great trio.",
         "Small venues are the best way to hear jazz."),
        ("Made a playlist for cooking, mostly bossa nova.",
         "Perfect kitchen music."),
        ("Our choir starts rehearsing the winter programme next week.",
         "Exciting, any pieces you're looking forward to?"),
    ],
    "weather": [
        ("It's been raining for {n} days straight, everything is damp.",
         "A dehumidifier or airing twice a day helps with the damp."),
        ("Lovely crisp morning, first frost on the cars.",
         "Autumn is properly here."),
        ("The heat wave finally broke, slept with the window open.",
         "What a relief."),
        ("Strong wind knocked over the bins again.",
         "A bungee cord around the lids helps."),
    ],
}
DISHES = ["mushroom risotto", "chickpea curry", "lemon pasta", "shakshuka", "ratatouille", "miso soup"]
FEELS = ["great", "a bit heavy", "surprisingly good", "fine", "slow", "strong"]
GENRES = ["noir", "western", "science fiction", "romance", "war", "heist"]
OPENERS = [("Hi!", "Hi, good to hear from you. What's on your mind?"),
           ("Evening.", "Good evening! How was the day?"),
           ("Morning, quick chat before work.", "Morning! Go ahead."),
           ("Hey, got a minute?", "Always. What's up?")]


def session_days(rng: random.Random) -> list[date]:
    span = (LAST - FIRST).days
    return sorted(FIRST + timedelta(days=d) for d in rng.sample(range(span + 1), N_SESSIONS))


def fill(text: str, rng: random.Random) -> str:
    return text.format(n=rng.randint(3, 12), feel=rng.choice(FEELS), dish=rng.choice(DISHES),
                       genre=rng.choice(GENRES))


# variant -> (topics per session, (fewest, most) exchanges per topic)
VARIANTS = {"short": (2, (2, 3)), "long": (6, (3, 4))}


def plan(variant: str = "short") -> dict[str, Any]:
    """Sessions (day, file name, turns) and questions, all from the seed.

    ``short``: 2 topics a session (1-3 chunks; the labelled files in eval/convo/). ``long``: 6
    topics of 3-4 exchanges (about 5-8 chunks a session, like LoCoMo's), so the planted fact is
    one chunk among many of its session and retrieval must find it inside a long conversation."""
    n_topics, (lo, hi) = VARIANTS[variant]
    rng = random.Random(SEED)
    days = session_days(rng)
    sessions = []
    for i, day in enumerate(days):
        topics = rng.sample(sorted(TOPICS), n_topics)
        turns = [rng.choice(OPENERS)]
        for t in topics:
            turns += [(fill(u, rng), a) for u, a in rng.sample(TOPICS[t], rng.randint(lo, hi))]
        for fact in FACTS.get(i, []):
            turns.insert(rng.randint(1, len(turns)), fact)
        name = str(uuid.UUID(int=rng.getrandbits(128), version=4)) + ".jsonl"
        start = datetime(day.year, day.month, day.day, rng.randint(7, 20), rng.randint(0, 59), tzinfo=UTC)
        sessions.append({"day": day, "file": name, "start": start, "turns": turns, "topics": topics})
    taken = set(days)
    free = [d for d in (FIRST + timedelta(days=k) for k in range((LAST - FIRST).days)) if d not in taken]
    no_session_day = free[len(free) // 2]
    formats = [lambda d: f"{d.day} {d:%B}", lambda d: f"{d:%B} {ordinal(d.day)}", lambda d: d.isoformat()]
    questions = []
    for n, (cat, text, rels) in enumerate(QUESTIONS, 1):
        if "{d:" in text:
            k = int(text.split("{d:")[1].split("}")[0])
            text = text.replace(f"{{d:{k}}}", formats[n % 3](days[k]))
        text = text.replace("{x}", formats[0](no_session_day))
        questions.append({"_id": f"c{n:02d}", "text": text, "category": cat,
                          "rels": {f"sessions/{sessions[k]['file']}": r for k, r in rels.items()},
                          "days": {f"sessions/{sessions[k]['file']}": days[k].isoformat() for k in rels}})
    return {"sessions": sessions, "questions": questions, "no_session_day": no_session_day}


def ordinal(n: int) -> str:
    return f"{n}{'th' if 11 <= n % 100 <= 13 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def transcript(s: dict[str, Any]) -> str:
    t = s["start"]

    def iso(x: datetime) -> str:
        return x.strftime("%Y-%m-%dT%H:%M:%S.000Z")

    sid = s["file"].removesuffix(".jsonl")
    recs: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": sid, "timestamp": iso(t),
                                   "cwd": "/home/user"}]
    for n, (u, a) in enumerate(s["turns"]):
        for role, text, gap in (("user", u, 2 + n % 3), ("assistant", a, 1)):
            t += timedelta(minutes=gap)
            recs.append({"type": "message", "id": f"{sid[:8]}-{len(recs):03d}", "timestamp": iso(t),
                         "message": {"role": role, "content": [{"type": "text", "text": text}],
                                     "timestamp": int(t.timestamp() * 1000)}})
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in recs) + "\n"


NOTES = {
    "2026-08-24": "# 2026-08-24\n\n- Groceries: oats, lemons, rye flour, tofu.\n- Call the bank about the card limit.\n",
    "2026-09-21": "# 2026-09-21\n\n- Sprint retro: fewer meetings, more pairing.\n- Ideas for the team offsite: "
                  "hiking day, cooking class.\n",
    "2026-10-19": "# 2026-10-19\n\n- Long run 16 km, negative split.\n- Balcony: bring the chilli plants inside "
                  "before frost.\n",
    "2026-11-09": "# 2026-11-09\n\n- Winter tyres booked for Saturday.\n- Choir rehearsal moved to 19:30.\n",
}
MEMORY_MD = """# Memory

## About me
- Works as a backend engineer on the billing and reporting services.
- Runs three times a week; likes cooking vegetarian food on weekdays.
- Prefers short answers with concrete steps.

## Standing preferences
- Budget reviews on the first Sunday of the month.
- Reads mostly non-fiction; book club once a month.
"""
TOML = 'sources = ["memory", "sessions"]\nprovider = "local"\n'


def build_workspace(dest: Path, variant: str = "short") -> Path:
    """Write the workspace into *dest* (replaced if it exists)."""
    p = plan(variant)
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "sessions").mkdir(parents=True)
    (dest / "memory").mkdir()
    for s in p["sessions"]:
        (dest / "sessions" / s["file"]).write_text(transcript(s), encoding="utf-8")
    for day, text in NOTES.items():
        (dest / "memory" / f"{day}.md").write_text(text, encoding="utf-8")
    (dest / "MEMORY.md").write_text(MEMORY_MD, encoding="utf-8")
    (dest / "memory-core.toml").write_text(TOML, encoding="utf-8")
    return dest


def labels(variant: str = "short") -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """(query id -> text, query id -> {corpus id: relevance}) of a variant, from its plan."""
    qs = plan(variant)["questions"]
    return {q["_id"]: q["text"] for q in qs}, {q["_id"]: dict(q["rels"]) for q in qs if q["rels"]}


def write_labels(out: Path = HERE) -> dict[str, int]:
    p = plan()
    out.mkdir(parents=True, exist_ok=True)
    qs = p["questions"]
    with open(out / "queries.jsonl", "w", encoding="utf-8") as fh:
        for q in qs:
            rec = {"_id": q["_id"], "text": q["text"], "category": q["category"]}
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
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
    with open(out / "negatives.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\ttext\n")
        for q in qs:
            if not q["rels"]:
                fh.write(f"{q['_id']}\t{q['text']}\n")
    cats: dict[str, int] = {}
    for q in qs:
        cats[q["category"]] = cats.get(q["category"], 0) + 1
    return {"questions": len(qs), "labelled": sum(1 for q in qs if q["rels"]), **cats}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labels", action="store_true", help="write eval/convo/ (queries, qrels, labels, negatives)")
    ap.add_argument("--out", type=Path, help="write the workspace to OUT")
    a = ap.parse_args(argv)
    if not a.labels and not a.out:
        ap.error("nothing to do: give --labels and/or --out")
    if a.labels:
        print(write_labels())
    if a.out:
        build_workspace(a.out)
        print(f"workspace: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
