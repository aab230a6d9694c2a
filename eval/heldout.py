"""Independent held-out conversational retrieval set (two sub-sets), generated deterministically.

    python eval/heldout.py [OUT_DIR]     # default: eval/heldout

Writes, for each sub-set ``assist`` (a user and an assistant, ~52 sessions over 3 months, a trip
with another UTC offset, sessions past midnight) and ``chat`` (four friends, a group chat and 1:1
chats, 3 weeks, one file per chat per day, evenings running past midnight):

    <OUT>/<sub>/ws/sessions/*.jsonl      the workspace (index it with --sessions)
    <OUT>/<sub>/queries.jsonl            BEIR queries with a question that has an answer
    <OUT>/<sub>/qrels.tsv                query-id, corpus-id (path in the workspace), score (2 answer, 1 partial)
    <OUT>/<sub>/evidence.tsv             query-id, corpus-id, JSONL line, grade of the answering messages
    <OUT>/<sub>/categories.tsv           query-id, category, text
    <OUT>/<sub>/negatives.jsonl          questions nothing answers (no qrels)

Labels come from the plan (which message was planted where), never from a search. Pure Python,
seeded, no network.

Why it exists (issue 37, the fortieth session): every other conversational set here was written by
the sessions that tuned the ranking on it. This one was written by a helper session told not to
read those sets, their generators, ``memory_core/query/`` or docs/search.md until its labels were
frozen (it read only the transcript format), with other people, topics and question forms: a
user and an assistant over three months (a job change, health, a garden, a candle shop, a trip
in another time zone) and four friends' group and one-to-one chats (short messages, emoji,
typos, nicknames). Categories: ``single`` (the question in other words than the message),
``name_variant`` (nicknames, misspellings, full names), ``update`` (the fact changed later: qrels
2 the latest, 1 the old value), ``temporal`` (a day in many forms, "last Tuesday", "before the
trip", "in early February"), ``aggregation`` (2-4 sessions), ``preference``, and negatives.
Its known biases: questions are paraphrased on purpose (it favours the vector side), and plain
BM25 reads no date. ``eval/run_sets.py --sets heldout-assist,heldout-chat`` measures it; the
labels are committed in ``eval/heldout/<sub>/`` and the runner checks that this generator still
writes them (``python eval/heldout.py --labels`` writes them again).
"""

from __future__ import annotations

import json
import random
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

SEED = 20260403


# ---------------------------------------------------------------------------------------------
# shared machinery
class Msg:
    __slots__ = ("when", "role", "name", "text", "key")

    def __init__(self, when, role, text, name=None, key=None):
        self.when, self.role, self.text, self.name, self.key = when, role, text, name, key


class Session:
    def __init__(self, fname, start, tz):
        self.fname, self.start, self.tz = fname, start, tz
        self.msgs: list[Msg] = []
        self.slots: list[tuple] = []  # (role/name, text, key) planned before timing


def write_session(ws: Path, s: Session, rng: random.Random, header_extra: dict) -> dict:
    """Writes one transcript; returns {key: [line numbers]} of planted messages."""
    out = ws / "sessions" / s.fname
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    sid = f"{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}"
    head = {"type": "session", "version": 3, "id": sid, "timestamp": s.start.isoformat(timespec="seconds")}
    head.update(header_extra)
    lines.append(json.dumps(head, ensure_ascii=False))
    where: dict[str, list[int]] = {}
    prev = None
    for i, m in enumerate(s.msgs):
        mid = f"m{i + 1:03d}"
        content = m.text if rng.random() < 0.5 else [{"type": "text", "text": m.text}]
        msg = {"role": m.role, "content": content}
        if m.name:
            msg["name"] = m.name
        rec = {"type": "message", "id": mid, "parentId": prev, "timestamp": m.when.isoformat(timespec="seconds"),
               "message": msg}
        prev = mid
        lines.append(json.dumps(rec, ensure_ascii=False))
        if m.key:
            for k in m.key.split("|"):
                where.setdefault(k, []).append(len(lines))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return where


def ordinal(n):
    return str(n) + ("th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th"))


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def date_form(d: date, form: str) -> str:
    if form == "month_ord":
        return f"on {MONTHS[d.month - 1]} {ordinal(d.day)}"
    if form == "slash":
        return f"on {d.month}/{d.day}"
    if form == "dotted":
        return f"on {d.day:02d}.{d.month:02d}.{d.year}"
    if form == "day_month":
        return f"on the {ordinal(d.day)} of {MONTHS[d.month - 1]}"
    if form == "weekday_date":
        return f"on {WEEKDAYS[d.weekday()]}, {MONTHS[d.month - 1][:3]} {d.day}"
    if form == "iso":
        return f"on {d.isoformat()}"
    raise ValueError(form)


def typo(text: str, rng: random.Random, p=0.25) -> str:
    """Chat-style noise: one swapped/dropped letter in a word, sometimes."""
    if rng.random() > p:
        return text
    words = text.split(" ")
    idx = [i for i, w in enumerate(words) if len(w) > 4 and w.isalpha()]
    if not idx:
        return text
    i = rng.choice(idx)
    w = words[i]
    j = rng.randrange(1, len(w) - 2)
    w = w[:j] + w[j + 1] + w[j] + w[j + 2:] if rng.random() < 0.5 else w[:j] + w[j + 1:]
    words[i] = w
    return " ".join(words)


class Labels:
    def __init__(self):
        self.queries = []   # (qid, cat, text, [(key, grade)])
        self.negatives = []

    def add(self, cat, text, keys):
        qid = f"{cat}-{sum(1 for q in self.queries if q[1] == cat) + 1:03d}"
        self.queries.append((qid, cat, text, keys))

    def neg(self, text):
        self.negatives.append((f"negative-{len(self.negatives) + 1:03d}", "negative", text))

    def write(self, out: Path, located: dict[str, list[tuple[str, int]]]):
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "queries.jsonl", "w") as fq, open(out / "qrels.tsv", "w") as fr, \
                open(out / "evidence.tsv", "w") as fe, open(out / "categories.tsv", "w") as fc:
            fr.write("query-id\tcorpus-id\tscore\n")
            fe.write("query-id\tcorpus-id\tline\tgrade\n")
            fc.write("query-id\tcategory\ttext\n")
            for qid, cat, text, keys in self.queries:
                fq.write(json.dumps({"_id": qid, "text": text, "metadata": {"category": cat}}) + "\n")
                fc.write(f"{qid}\t{cat}\t{text}\n")
                files: dict[str, int] = {}
                for key, grade in keys:
                    if key not in located:
                        raise SystemExit(f"{qid}: key {key} never planted")
                    for path, line in located[key]:
                        files[path] = max(files.get(path, 0), grade)
                        fe.write(f"{qid}\t{path}\t{line}\t{grade}\n")
                for path, grade in sorted(files.items()):
                    fr.write(f"{qid}\t{path}\t{grade}\n")
            for qid, cat, text in self.negatives:
                fc.write(f"{qid}\t{cat}\t{text}\n")
        with open(out / "negatives.jsonl", "w") as fn:
            for qid, _, text in self.negatives:
                fn.write(json.dumps({"_id": qid, "text": text}) + "\n")


# ---------------------------------------------------------------------------------------------
# sub-set "assist": a user (Noor) and an assistant
HOME = timezone(timedelta(hours=1))
TRIP = timezone(timedelta(hours=-4))
TRIP_START, TRIP_END = date(2026, 3, 12), date(2026, 3, 19)
A_START, A_END = date(2026, 1, 5), date(2026, 4, 2)

NAMES_A = {  # canonical -> variants used in questions (nicknames, misspellings)
    "Maren": ["Mare", "Marin"], "Tobias": ["Tobi", "Tobais"], "Priyanka": ["Priya", "Pryanka"],
    "Gerald": ["Gerry", "Gerold"], "Mr. Okafor": ["Okafur", "Mr Okafo"], "Lucille": ["Lucy", "Lucile"],
    "Jonah": ["Jonas", "Jo"], "Ilse": ["Ilsa", "Ilsie"], "Ravi": ["Ravee", "Rav"],
    "Dr. Haddad": ["Dr Hadad", "Haddat"], "Mrs. Brandt": ["Mrs Brant", "Brand"], "Adaeze": ["Ada", "Adeze"],
    "Biscuit": ["Biskit", "Bisquit"],
}

# single facts: (message, question with {P} for the person, person or None, window)
SINGLE_A = [
    ("Maren finally told me the baby is due in the second week of August, we're all over the moon.",
     "When is {P}'s child expected to arrive?", "Maren", None),
    ("Tobias got his pilot's licence renewed, he's flying the little Cessna out of Egelsbach again.",
     "What kind of aircraft does {P} fly?", "Tobias", None),
    ("Priyanka recommended a book called The Quiet Ledger, she says it changed how she runs meetings.",
     "Which book did {P} suggest I read?", "Priyanka", None),
    ("Mr. Okafor next door offered to lend us his pressure washer for the patio this weekend.",
     "What equipment was {P} going to lend us?", "Mr. Okafor", None),
    ("Lucille's restaurant is called Ferment & Flame, she opened it on Canal Street in the autumn.",
     "What's the name of {P}'s eatery?", "Lucille", None),
    ("Jonah lost his first tooth today, the bottom front one, and he's demanding a visit from the tooth fairy.",
     "Which of {P}'s teeth came out first?", "Jonah", None),
    ("Ilse's swimming teacher is a guy called Bastian and she absolutely adores him.",
     "Who gives {P} her swim lessons?", "Ilse", None),
    ("Ravi's mum is coming to stay with us for ten days at the end of February.",
     "How long will {P}'s mother be staying with us?", "Ravi", (date(2026, 1, 5), date(2026, 2, 15))),
    ("Dr. Haddad thinks the knee pain is patellar tendinopathy, not a meniscus tear like I feared.",
     "What did {P} say is wrong with my knee?", "Dr. Haddad", None),
    ("Mrs. Brandt said the boiler is fourteen years old and she'll get it replaced in spring.",
     "How old is the heating unit according to {P}?", "Mrs. Brandt", None),
    ("We collected for Gerald's leaving present, a fountain pen, I put in 20 euros.",
     "What gift did the team get {P} when he left?", "Gerald", (date(2026, 1, 5), date(2026, 2, 27))),
    ("My donor card came back, blood type A negative.", "What blood group do I have?", None, None),
    ("The raised bed I built is 2.4 metres by 1.2 and about 40 cm deep.",
     "How big is the vegetable box I constructed in the garden?", None, None),
    ("Just so you know, I'm allergic to penicillin, found out as a kid.",
     "Which antibiotic must I avoid?", None, None),
    ("The router is the Fritzbox in the hallway cupboard, the wifi password is on the sticker underneath.",
     "Where is our internet modem kept?", None, None),
    ("The shop's best seller by far is the Fig & Cedar scent.",
     "Which fragrance sells best in my candle business?", None, None),
    ("I get my soy wax from a supplier in Ghent called Waxworks Flanders.",
     "Who supplies the wax for my candles?", None, None),
    ("Our wedding anniversary is June 14th, we married in 2015.",
     "In which year did Ravi and I tie the knot?", None, None),
    ("The kids' school starts at 8:10 and the gate closes at 8:20 sharp.",
     "What time do lessons begin for the children in the morning?", None, None),
    ("We planted a dwarf cherry tree by the back fence, the variety is Stella.",
     "Which fruit tree cultivar did we put in the yard?", None, None),
    ("Work sent my new laptop, a ThinkPad X1 Carbon.", "What computer model did my employer give me?", None,
     (date(2026, 3, 2), A_END)),
    ("The flight to Montreal is AC 837, leaving Frankfurt at 13:05 on March 12.",
     "What's my flight number to Canada?", None, (date(2026, 2, 1), date(2026, 3, 10))),
    ("We're staying at the Hotel Nelligan in Old Montreal for the wedding week.",
     "Which hotel did we book in Quebec?", None, (date(2026, 2, 1), date(2026, 3, 10))),
    ("My cousin Adaeze's wedding is at a sugar shack outside the city, very rustic.",
     "Where is {P}'s wedding ceremony being held?", "Adaeze", (date(2026, 1, 20), date(2026, 3, 10))),
    ("I finally cancelled my FitLoft membership, it was costing me 39 a month.",
     "How much was I paying each month for the gym?", None, None),
    ("Our vet is Dr. Lindqvist at the Parkside clinic, she's great with nervous dogs.",
     "Who is our animal doctor?", None, None),
    ("Biscuit is a beagle mix, about four years old, we adopted him from the shelter.",
     "What breed is {P}?", "Biscuit", None),
    ("After the blood test I started vitamin D, 1000 IU every morning.",
     "What supplement am I taking and at what dose?", None, None),
    ("The compost needs turning every two weeks, I set a reminder on my phone.",
     "How often should the compost heap be mixed?", None, None),
    ("The Brightwater interview was a panel of three, including their CTO Helga Smit.",
     "Who was on the interview panel at the company I applied to?", None, (date(2026, 1, 10), date(2026, 2, 5))),
    ("My notice period at Halden is two months, so my last day is the end of February.",
     "How long is the notice period at my old employer?", None, (date(2026, 1, 10), date(2026, 2, 20))),
    ("Jonah's best friend is a boy called Teo from football practice.",
     "Who is {P}'s closest buddy?", "Jonah", None),
    ("Ilse is scared of the dark, she wants the hallway light left on at night.",
     "What is {P} afraid of?", "Ilse", None),
    ("Lucille's daughter is starting university in Utrecht in September.",
     "Where is {P}'s kid going to study?", "Lucille", None),
    ("Priyanka is running the Rotterdam marathon in April, her first one.",
     "What race is {P} training for?", "Priyanka", None),
    ("Mr. Okafor grows chillies in his greenhouse, he gave us a jar of his hot sauce.",
     "What does {P} cultivate in his glasshouse?", "Mr. Okafor", None),
    ("The Etsy fees are eating roughly 11 percent of every sale.",
     "What share of each sale goes to marketplace charges?", None, None),
    ("Ravi won the raffle at his office party, a weekend in a cabin in the Ardennes!",
     "What prize did {P} get at the work do?", "Ravi", None),
    ("Dr. Haddad gave me three exercises: wall sits, step-downs and calf raises.",
     "Which exercises did {P} prescribe me?", "Dr. Haddad", None),
    ("The car's TÜV inspection is due in May, need to book it.",
     "When does the car have to go for its roadworthiness check?", None, None),
]

# updates: question, [(message, window)], last is current
UPDATE_A = [
    ("Where do I work now?", [
        ("I've been a data analyst at Halden Logistics for six years now.", (A_START, date(2026, 1, 25))),
        ("I signed the offer from Brightwater Analytics! I start on March 2.", (date(2026, 2, 1), date(2026, 2, 20)))]),
    ("What does my sister do for a living these days?", [
        ("Maren is still teaching at the Montessori school, she says the new head is tough.", (A_START, date(2026, 1, 31))),
        ("Maren quit teaching, she's doing the bookkeeping for a chain of vet practices now.", (date(2026, 2, 20), A_END))]),
    ("What's my current dose of the blood pressure tablet?", [
        ("I'm on lisinopril 5 mg for my blood pressure.", (A_START, date(2026, 1, 31))),
        ("The GP bumped my lisinopril up to 10 mg since the readings were still high.", (date(2026, 2, 15), A_END))]),
    ("What price do I charge for a large candle at the moment?", [
        ("Large candles are 18 euros in the shop.", (A_START, date(2026, 1, 31))),
        ("Raised the large candles to 22 euros, the wax got more expensive.", (date(2026, 2, 25), A_END))]),
    ("Which town does Lucille live in now?", [
        ("Lucille lives in Leiden, right by the canal.", (A_START, date(2026, 1, 31))),
        ("Lucille moved to Haarlem last weekend, much closer to the restaurant.", (date(2026, 2, 20), A_END))]),
    ("What does the dog eat currently?", [
        ("Biscuit eats the salmon kibble from Acana.", (A_START, date(2026, 1, 31))),
        ("We switched Biscuit to the lamb kibble because the salmon made him itchy.", (date(2026, 2, 15), A_END))]),
    ("How do I get to the office these days?", [
        ("I take the 7:42 train to Halden every morning, it's 50 minutes door to door.", (A_START, date(2026, 2, 20))),
        ("Now I cycle to the Brightwater office, just twenty minutes along the river path.", (date(2026, 3, 3), A_END))]),
    ("What position is Jonah playing in football now?", [
        ("Jonah plays defender on his football team.", (A_START, date(2026, 1, 31))),
        ("The coach moved Jonah to goalkeeper and he's thrilled.", (date(2026, 2, 20), A_END))]),
    ("How often do I see the physio at this point?", [
        ("Physio is twice a week for now.", (A_START, date(2026, 2, 5))),
        ("Dr. Haddad says I'm down to one physio session every two weeks.", (date(2026, 3, 1), A_END))]),
    ("Where do I sell the candles now?", [
        ("For now I only sell the candles on Etsy.", (A_START, date(2026, 1, 31))),
        ("I moved the whole candle shop over to my own Shopify site.", (date(2026, 3, 1), A_END))]),
    ("What time does Ilse go to bed now?", [
        ("Ilse's bedtime is 7:30.", (A_START, date(2026, 1, 31))),
        ("We moved Ilse's bedtime to 8 now that it's lighter in the evenings.", (date(2026, 3, 1), A_END))]),
    ("What car is Ravi driving now?", [
        ("Ravi still drives his old VW Golf.", (A_START, date(2026, 1, 31))),
        ("Ravi traded in the Golf for a second-hand Kia Niro EV.", (date(2026, 2, 20), A_END))]),
    ("How many tomato seedlings do I still have?", [
        ("I sowed six tomato plants on the windowsill.", (date(2026, 2, 1), date(2026, 2, 15))),
        ("Lost two of the tomato seedlings to damping off, four left.", (date(2026, 2, 25), A_END))]),
    ("Who is my manager now?", [
        ("My manager is Gerald, he's retiring soon.", (A_START, date(2026, 1, 20))),
        ("My new manager at Brightwater is Sunita Rao, she seems very organised.", (date(2026, 3, 3), A_END))]),
]

# temporal events: kind -> (message template, question template, values)
TEMPORAL_A = {
    "run": ("Did {v} this morning along the river, legs feel fine.",
            "How far did I run {d}?",
            ["5 km", "6.5 km", "7 km", "8.2 km", "4 km", "10 km", "5.5 km", "9 km"]),
    "dinner": ("Made {v} for dinner tonight, the kids actually ate it.",
               "What did I cook for dinner {d}?",
               ["a lentil dal", "mushroom risotto", "chicken tray bake", "fish tacos", "shakshuka",
                "pumpkin soup", "beef stew", "pad thai"]),
    "garden": ("In the garden today I {v}.",
               "What did I do in the garden {d}?",
               ["pruned the apple tree", "spread mulch on the borders", "repotted the fig",
                "fixed the fence panel", "sowed sweet peas", "cleared the pond"]),
    "orders": ("Shipped {v} today.",
               "How many candle orders went out {d}?",
               ["14 orders, one of them to Norway", "9 orders", "21 orders, a record", "6 orders",
                "12 orders including a wholesale box"]),
}

# multi-session aggregation: question, [messages]
AGG_A = [
    ("What sports has Jonah tried so far?", [
        "Jonah had his first judo class, he loved the throwing part.",
        "We took Jonah ice skating and he only fell twice.",
        "Jonah did a trial hockey session today."]),
    ("What repairs has the landlady arranged for the flat?", [
        "Mrs. Brandt sent a plumber to fix the dripping kitchen tap.",
        "Mrs. Brandt had the bedroom window seal replaced, no more draught.",
        "An electrician came round from Mrs. Brandt and fixed the bathroom fan."]),
    ("Which vegetables have I sown this year?", [
        "Sowed a row of broad beans in the raised bed.",
        "Put in peas and radishes along the fence.",
        "Started rainbow chard in modules on the windowsill."]),
    ("What presents did Ilse get for her birthday?", [
        "Maren sent Ilse a scooter for her birthday.",
        "Ravi's mum knitted Ilse a yellow cardigan for her birthday.",
        "We gave Ilse a kids' microscope for her birthday, she's looking at everything."]),
    ("What side effects have I had from the blood pressure medication?", [
        "I've had a dry tickly cough since starting the blood pressure pills.",
        "Got dizzy standing up too fast again, might be the tablets."]),
    ("Which new scents have I added to the candle range?", [
        "New scent in the range: Rhubarb & Ginger.",
        "Added a Sea Salt & Sage candle to the range.",
        "Launched the Smoked Vanilla scent this week."]),
    ("Which places did we visit in Montreal?", [
        "Spent the morning at Jean-Talon market, so much maple everything.",
        "We hiked up Mount Royal to the lookout, freezing but beautiful.",
        "Took the kids to the Biodome, Ilse loved the penguins."]),
    ("How much did the Montreal trip cost us altogether?", [
        "Flights for the four of us came to 1,240 euros.",
        "The hotel bill was 980 Canadian dollars for the week.",
        "The car rental in Montreal was another 310 dollars."]),
    ("Why has Biscuit been to the vet this year?", [
        "Biscuit had an ear infection, he's on drops for a week.",
        "Biscuit got his annual booster jab.",
        "Biscuit ate half a sock and we had to rush him in, he's fine."]),
    ("Which books have I read this winter?", [
        "Finished reading Piranesi, what a strange lovely book.",
        "Just finished The Remains of the Day, quietly devastating.",
        "Read Braiding Sweetgrass on the plane, loved it."]),
    ("What has the physio told me to avoid?", [
        "Dr. Haddad says no running downhill for now.",
        "I'm not allowed deep squats until the tendon settles, says Dr. Haddad."]),
    ("What did Priyanka tell me about Brightwater before I joined?", [
        "Priyanka says Brightwater has a four-day week in summer.",
        "Priyanka warned me the Brightwater onboarding is chaotic for the first month."]),
]

PREF_A = [
    ("I really can't stand cilantro, it tastes like soap to me.", "Which herb should you leave out of recipes for me?"),
    ("I always pick an aisle seat, my legs get restless on flights.", "What seat should you book for me on a plane?"),
    ("I drink my coffee black, dark roast, no sugar.", "How do I take my coffee?"),
    ("For anything under five hours I'd rather take the train than fly.", "Would I rather go by rail or plane to Paris?"),
    ("On the bike I prefer podcasts over audiobooks.", "What should you recommend I listen to while cycling?"),
    ("Ravi hates horror films, we stick to comedies or documentaries.", "What kind of movie should we pick for a date night?"),
    ("I like my emails short and without exclamation marks.", "What style should you use when drafting emails for me?"),
    ("For the business I prefer being paid by bank transfer, not PayPal.", "Which payment method do I want customers to use?"),
    ("Gift-wise, Maren loves anything with lavender.", "What would make a good present for my sister?"),
    ("I'm trying to eat less red meat, chicken and fish are fine.", "What protein should dinner suggestions for me use?"),
    ("I'm a morning person, anything important should be scheduled before 11.", "When is the best time to put my meetings?"),
    ("Jonah will only eat pasta with plain butter, no sauce at all.", "How does my son like his noodles?"),
    ("I like hotels that have a gym, even a tiny one.", "What facility do I look for when choosing accommodation?"),
    ("At bedtime Ilse wants the Pippi Longstocking audiobook, every single night.", "What story does my daughter fall asleep to?"),
    ("Please use metric units with me, never cups.", "Which measurement system should recipes be in?"),
]

NEG_A = [
    "What's the name of my cat?", "When did I visit Japan?", "How much does Tobias earn?",
    "What did the dentist say about my crown?", "Which marathon did Ravi run last year?",
    "Where does Ilse take ballet lessons?", "How much did the new roof cost?", "What is Gerald's wife called?",
    "Which hotel did we stay at in Lisbon?", "What's the PIN for the garage door?", "What car does Maren drive?",
    "When is Lucille's wedding?", "How many candles did I sell at the Christmas market?",
    "What's Priyanka's phone number?", "What grade did Jonah get in maths?", "Where did we go skiing?",
    "What did Mr. Okafor say about his new motorbike?", "Which piano teacher does Jonah have?",
    "What did I cook on January 1st?", "How much is our home insurance premium?",
]

# filler: (user, assistant) generic tasks; and look-alike user chatter with topic words
FILLER_A = [
    ("Can you suggest a quick weeknight dinner with chickpeas?", "Try a chickpea and spinach curry: onion, garlic, a tin of tomatoes, garam masala, then the chickpeas and a few handfuls of spinach. About 25 minutes."),
    ("What's a good substitute for buttermilk in pancakes?", "Stir a tablespoon of lemon juice into 250 ml of milk and let it sit for five minutes; it works the same way."),
    ("How do I make a pivot table group dates by month?", "Right-click a date in the row area, choose Group, and select Months (and Years if the data spans more than one)."),
    ("Convert 180 Celsius to Fahrenheit please.", "180 °C is about 356 °F, so most recipes round it to 350 °F."),
    ("Give me three name ideas for a candle with orange and clove.", "How about Winter Orchard, Clove Harbour, or Ember Grove?"),
    ("What's a gentle stretch for tight hamstrings?", "Lie on your back and loop a towel around one foot, then raise the straight leg until you feel a stretch. Hold 30 seconds, three times a side."),
    ("How do I get rid of aphids on roses without chemicals?", "Spray them off with a strong jet of water, then follow with diluted soap spray; ladybirds and lacewings will finish the job."),
    ("Suggest a rainy-day activity for a five and an eight year old.", "Build a blanket fort and run a torchlight reading session, or set up a kitchen science experiment with baking soda and vinegar."),
    ("What should I pack for a week in a very cold city?", "Layers: thermal base, fleece, a windproof shell, warm hat, gloves, and waterproof boots with good grip."),
    ("Pros and cons of a standing desk?", "Pros: more movement, less stiffness. Cons: standing all day is tiring too; alternate every 30-60 minutes."),
    ("How long do I boil an egg for a jammy yolk?", "Six and a half minutes from boiling, then straight into iced water."),
    ("Draft a polite reminder to a customer who hasn't paid an invoice.", "Hi, just a friendly reminder that invoice 1043 is now past due. Could you let me know when payment will be made? Thanks."),
    ("How do I calculate a markup of 60 percent?", "Multiply the cost by 1.6; for a cost of 10 euros the price is 16 euros."),
    ("What's a good way to explain fractions to an eight-year-old?", "Use pizza or chocolate bars: cut them into equal pieces and let them count how many pieces make half or a quarter."),
    ("Any tips for getting a toddler to sleep in her own bed?", "Keep a short consistent routine, a night light, and return her calmly to bed each time without much talk."),
    ("Explain what a 401k is in one paragraph.", "It is an employer-sponsored retirement account in the US where contributions come from your salary before tax, often with an employer match."),
    ("What's the difference between baking soda and baking powder?", "Baking soda is pure sodium bicarbonate and needs an acid; baking powder already contains the acid."),
    ("Write a short LinkedIn headline for a data analyst.", "Data analyst turning messy logistics data into clear decisions."),
    ("How should I water seedlings on a windowsill?", "Water from below by standing the tray in a little water for 20 minutes, and let the surface dry between waterings."),
    ("What's the best way to clean a cast iron pan?", "Hot water and a brush, dry it on the hob, then wipe a thin layer of oil on while it is warm."),
    ("Suggest a 20 minute bodyweight workout.", "Four rounds: 10 squats, 10 push-ups, 20 second plank, 10 lunges per leg, 30 seconds rest."),
    ("How do I remove a red wine stain from a carpet?", "Blot, don't rub; pour on cold water and blot again, then a paste of baking soda and water, and vacuum when dry."),
    ("Help me plan a week of packed lunches for the kids.", "Monday wraps, Tuesday pasta salad, Wednesday cheese and crackers, Thursday leftover soup in a flask, Friday mini pizzas."),
    ("What are the symptoms of vitamin B12 deficiency?", "Tiredness, pins and needles, a sore tongue and trouble concentrating are common; a blood test confirms it."),
    ("Is it worth getting a heat pump dryer?", "They cost more up front but use roughly half the electricity, so with daily use they usually pay back in a few years."),
    ("How do I write a product description for a handmade candle?", "Lead with the scent and mood, then the facts: wax type, burn time, wick, size, and care instructions."),
    ("What's a polite way to decline a meeting?", "Thank them, say you can't make it, and offer an alternative: an async update or another time."),
    ("Give me a simple bread recipe without a machine.", "500 g flour, 7 g yeast, 10 g salt, 350 ml warm water; knead 10 minutes, rise an hour, shape, rise 30 minutes, bake at 220 °C for 30 minutes."),
    ("How do I keep cut flowers fresh longer?", "Trim the stems at an angle, change the water every two days and keep them away from fruit and direct sun."),
    ("How do I set up a shared family calendar?", "Create a shared calendar in your calendar app, invite each adult with edit rights, and colour-code each person."),
]
LOOKALIKE_A = [
    "Maren called earlier, we mostly talked about her in-laws and the weather.",
    "Priyanka sent me a meme about spreadsheets, made my day.",
    "Went past the river again today but didn't track anything.",
    "The tomato leaves look a bit pale, should I be worried?",
    "Biscuit has been extra clingy today.",
    "I need to reply to Mrs. Brandt about the meter reading.",
    "Thinking about candle packaging, kraft boxes or white ones?",
    "Dr. Haddad's clinic moved my appointment by an hour.",
    "Jonah has football again on Saturday, early start.",
    "Ilse drew a picture of the dog and the cherry tree.",
    "Ravi is working late again this week.",
    "Lucille sent photos of the new kitchen at the restaurant.",
    "The Montreal forecast looks brutally cold.",
    "Gerald forwarded me an old shipping report, no idea why.",
    "Mr. Okafor's hedge is growing over the fence again.",
    "The gym near the new office looks decent.",
    "I should really sort out the garden shed this weekend.",
    "Tobias and Maren might come for lunch on Sunday.",
    "My knee was a bit stiff after sitting all day.",
    "The candle orders are slow this week.",
    "Need to renew Ilse's passport before the summer.",
    "Adaeze sent the seating plan for the wedding, we're at table 7.",
    "Brightwater sent me a welcome pack with a hoodie.",
    "Did the weekly shop, forgot the dog food again.",
    "Cooked too much rice again, leftovers for days.",
]
ACK_A = ["Noted, thanks for telling me.", "That's good to know, I'll remember it.", "Got it.",
         "Thanks for the update!", "Good to know. Anything you'd like me to do with that?",
         "Sounds good.", "Oh nice, thanks for sharing.", "Understood, I'll keep that in mind for later."]
CHAT_REPLY_A = ["Sounds like a busy day.", "Anything I can help with there?", "Ha, fair enough.",
                "Want me to add that to your to-do list?", "That happens!", "Hope it settles down soon."]


def build_assist(out: Path, rng: random.Random):
    ws = out / "ws"
    # session days: 48 days, 4 of them with two sessions
    days = sorted(rng.sample([A_START + timedelta(i) for i in range((A_END - A_START).days)], 47) + [A_END])
    days = sorted(set(days) | {TRIP_START + timedelta(1), TRIP_START + timedelta(3), TRIP_START + timedelta(5)})
    doubles = set(rng.sample(days[2:-2], 4))
    sessions: list[Session] = []
    for d in days:
        tz = TRIP if TRIP_START <= d <= TRIP_END else HOME
        hours = [rng.choice([7, 8, 12, 13, 18, 19, 20, 21, 22])]
        if d in doubles:
            hours = [rng.choice([7, 8, 9]), rng.choice([19, 20, 21])]
        if rng.random() < 0.13 and d not in doubles:
            hours = [23]
        for h in hours:
            minute = rng.randrange(15, 55) if h == 23 else rng.randrange(0, 60)
            start = datetime(d.year, d.month, d.day, h, minute, rng.randrange(60), tzinfo=tz)
            sessions.append(Session(f"{d.isoformat()}-{h:02d}{minute:02d}.jsonl", start, tz))
    sessions.sort(key=lambda s: s.start)
    # force one past-midnight session in the trip
    for s in sessions:
        if s.start.date() == TRIP_START + timedelta(3):
            s.start = s.start.replace(hour=23, minute=31)
            s.fname = f"{s.start.date().isoformat()}-2331.jsonl"
            break
    plants: dict[int, list[tuple[str, str]]] = {i: [] for i in range(len(sessions))}
    labels = Labels()

    def pick(window, avoid=()):
        lo, hi = window or (A_START, A_END)
        cands = [i for i, s in enumerate(sessions) if lo <= s.start.date() <= hi and i not in avoid]
        cands.sort(key=lambda i: len(plants[i]))
        best = [i for i in cands if len(plants[i]) <= len(plants[cands[0]]) + 1]
        return rng.choice(best)

    for n, (msg, q, person, window) in enumerate(SINGLE_A):
        key = f"single{n}"
        plants[pick(window)].append((msg, key))
        if person:
            labels.add("single", q.format(P=person), [(key, 2)])
            for v in NAMES_A[person][:1 if n % 2 else 2]:
                labels.add("name_variant", q.format(P=v), [(key, 2)])
        else:
            labels.add("single", q, [(key, 2)])
    for n, (q, vals) in enumerate(UPDATE_A):
        keys = []
        for k, (msg, window) in enumerate(vals):
            key = f"update{n}_{k}"
            plants[pick(window)].append((msg, key))
            keys.append(key)
        labels.add("update", q, [(k, 1) for k in keys[:-1]] + [(keys[-1], 2)])
    # temporal: one event of a kind per day
    [s for s in sessions if TRIP_START <= s.start.date() <= TRIP_END]
    for kind, (tmpl, q, values) in TEMPORAL_A.items():
        used_days = set()
        idxs = []
        last_tue = A_END - timedelta((A_END.weekday() - 1) % 7 or 7)
        for vn, v in enumerate(values):
            for _ in range(200):
                i = pick(None)
                if kind == "run" and vn == 0:
                    i = next((x for x, s in enumerate(sessions) if s.start.date() == last_tue), i)
                d = sessions[i].start.date()
                if d not in used_days:
                    break
            used_days.add(d)
            idxs.append((i, v))
        evts = sorted(idxs, key=lambda t: sessions[t[0]].start)
        for j, (i, v) in enumerate(evts):
            key = f"t_{kind}{j}"
            plants[i].insert(0, (tmpl.format(v=v), key))  # first in the session: before midnight
            d = sessions[i].start.date()
            forms = ["month_ord", "slash", "dotted", "day_month", "weekday_date"]
            phrase = date_form(d, forms[(j + len(kind)) % len(forms)])
            days_of_kind = [sessions[x].start.date() for x, _ in evts]
            # relative forms where they are unambiguous
            last_tue = A_END - timedelta((A_END.weekday() - 1) % 7 or 7)
            before = [x for x in days_of_kind if x < TRIP_START]
            early = [x for x in days_of_kind if x.month == d.month and x.day <= 10]
            if d == last_tue:
                phrase = "last Tuesday"
            elif before and d == before[-1] and j % 2 == 0:
                phrase = "the last time before the trip"
            elif early == [d] and j % 3 == 0:
                phrase = f"in early {MONTHS[d.month - 1]}"
            labels.add("temporal", q.replace("{d}", phrase) if "{d}" in q else q.format(d=phrase), [(key, 2)])
    for n, (q, msgs) in enumerate(AGG_A):
        keys = []
        used = set()
        for k, msg in enumerate(msgs):
            key = f"agg{n}_{k}"
            window = (TRIP_START, TRIP_END) if "Montreal" in q and "places" in q else None
            i = pick(window, avoid=used)
            used.add(i)
            plants[i].append((msg, key))
            keys.append(key)
        labels.add("aggregation", q, [(k, 2) for k in keys])
    for n, (msg, q) in enumerate(PREF_A):
        key = f"pref{n}"
        plants[pick(None)].append((msg, key))
        labels.add("preference", q, [(key, 2)])
    for q in NEG_A:
        labels.neg(q)

    # lay out each session: filler exchanges with the planted ones in between
    located: dict[str, list[tuple[str, int]]] = {}
    for i, s in enumerate(sessions):
        items = []
        n_fill = rng.randint(5, 11)
        for _ in range(n_fill):
            if rng.random() < 0.35:
                items.append(("look", rng.choice(LOOKALIKE_A), rng.choice(CHAT_REPLY_A), None))
            else:
                u, a = rng.choice(FILLER_A)
                items.append(("task", u, a, None))
        planted = plants[i]
        first = None
        if planted and planted[0][1].startswith("t_"):
            first = planted[0]
            planted = planted[1:]
        for msg, key in planted:
            items.insert(rng.randrange(len(items) + 1), ("plant", msg, rng.choice(ACK_A), key))
        if first:
            items.insert(0, ("plant", first[0], rng.choice(ACK_A), first[1]))
        t = s.start + timedelta(seconds=rng.randrange(5, 40))
        for _kind, u, a, key in items:
            s.msgs.append(Msg(t, "user", u, key=key))
            t += timedelta(seconds=rng.randrange(4, 25))
            s.msgs.append(Msg(t, "assistant", a))
            t += timedelta(seconds=rng.randrange(30, 400))
        where = write_session(ws, s, rng, {"cwd": "/home/noor", "channel": "app"})
        for k, lines in where.items():
            located.setdefault(k, []).extend(("sessions/" + s.fname, ln) for ln in lines)
    labels.write(out, located)
    return sessions, labels


# ---------------------------------------------------------------------------------------------
# sub-set "chat": four friends, group and 1:1 chats
B_TZ = timezone(timedelta(hours=2))
B_START, B_END = date(2026, 5, 4), date(2026, 5, 24)
PEOPLE_B = ["Kasia", "Dom", "Femi A.", "Ines"]
NAMES_B = {  # display name -> (full / canonical name in questions, variants)
    "Kasia": ("Katarzyna", ["Kasha", "Kaśka", "Kat"]),
    "Dom": ("Dominik", ["Dominic", "Domi"]),
    "Femi A.": ("Femi", ["Oluwafemi", "Fems", "Femmy"]),
    "Ines": ("Ines", ["Inés", "Nessa", "Inez"]),
}

# (speaker, message, question with {P}, person the question is about or None, day window)
SINGLE_B = [
    ("Dom", "GOT THE JOB at the brewery!!! start june 1st 🍺🍺", "When does {P} start his new job?", "Dom", None),
    ("Femi A.", "my sis is visiting from lagos next wk, she lands tues morning", "Where is {P}'s sister flying in from?", "Femi A.", None),
    ("Ines", "booked the dentist for the 28th finally 😬 its the wisdom tooth", "What is {P}'s dentist appointment for?", "Ines", None),
    ("Kasia", "the mechanic says its the clutch, 600 quid 😭", "What's wrong with {P}'s car?", "Kasia", (B_START, date(2026, 5, 9))),
    ("Dom", "my landlord is finally putting in a new shower lol only took 8 months", "What is {P}'s landlord installing?", "Dom", None),
    ("Ines", "new plant alert: a monstera called Gerald 🌿", "What did {P} name her new houseplant?", "Ines", None),
    ("Femi A.", "pub quiz team name this time is Quizteama Aguilera, dont @ me", "What's our pub quiz team called?", None, None),
    ("Kasia", "my mum's 60th is on the 30th, she wants a garden party", "How old is {P}'s mother turning?", "Kasia", None),
    ("Dom", "sprained my wrist at 5-a-side, nothing broken tho", "How did {P} hurt his wrist?", "Dom", None),
    ("Ines", "got promoted to senior designer!!! 🎉", "What's {P}'s new job title?", "Ines", None),
    ("Femi A.", "the new flat is on Albion Rd, 3rd floor no lift 💀", "What street is {P}'s new flat on?", "Femi A.", (date(2026, 5, 12), B_END)),
    ("Kasia", "pls remember the wifi at mine is KASIA_5G pw sunflower88", "What's the wifi password at {P}'s place?", "Kasia", None),
    ("Dom", "my bro is getting married in porto in september, guess whos best man 😎", "Where is {P}'s brother getting married?", "Dom", None),
    ("Ines", "im doing the half marathon in hackney in june, send help", "Which race has {P} signed up for?", "Ines", None),
    ("Femi A.", "just adopted a cat!! her name is Pepper and she hates me already", "What's the name of {P}'s cat?", "Femi A.", None),
    ("Kasia", "started pottery classes on wednesdays, made a wonky bowl", "What class does {P} take on Wednesdays?", "Kasia", None),
    ("Dom", "the van rental for the move is from Enterprise, £89 for the day", "Where did we rent the van for the move from?", None, None),
    ("Ines", "my parents are coming over from Seville for the long wknd", "Where are {P}'s parents visiting from?", "Ines", None),
    ("Femi A.", "allergic reaction to the kiwi lol my lips r huge", "What fruit is {P} allergic to?", "Femi A.", None),
    ("Kasia", "my train to edinburgh is the 7:30 from kings x on friday", "What time is {P}'s train to Scotland?", "Kasia", None),
    ("Dom", "lent my drill to femi, if anyone needs it ask him", "Who has {P}'s drill?", "Dom", None),
    ("Ines", "the spare key for mine is under the blue pot by the door", "Where is the spare key to {P}'s flat hidden?", "Ines", None),
    ("Femi A.", "ordered a sofa from made.com, delivery in 6 wks ugh", "Where did {P} buy his sofa?", "Femi A.", None),
    ("Kasia", "my sister had the baby!! a boy, Leo, 3.4kg 💙", "What is the name of {P}'s new nephew?", "Kasia", None),
    ("Dom", "work xmas do is at the Ivy this year apparently, in may?? they booked early", "Where will {P}'s office party be?", "Dom", None),
    ("Ines", "I'm learning portuguese on duolingo, 40 day streak", "Which language is {P} learning?", "Ines", None),
    ("Femi A.", "my bday drinks are at the Spread Eagle, sat 23rd", "Which pub are {P}'s birthday drinks at?", "Femi A.", (B_START, date(2026, 5, 20))),
    ("Kasia", "the vet said milo needs a tooth out, poor baby", "What did the vet say about {P}'s dog Milo?", "Kasia", None),
    ("Dom", "new phone finally, went with the pixel 9", "Which phone did {P} get?", "Dom", None),
    ("Ines", "joined a choir!! we rehearse tuesdays in the church hall", "When does {P}'s choir rehearse?", "Ines", None),
]

UPDATE_B = [
    ("Where is the BBQ happening now?", [
        ("Kasia", "bbq at mine on the 23rd? garden is finally tidy", (B_START, date(2026, 5, 10))),
        ("Dom", "change of plan, bbq moves to Victoria Park, kasias garden is flooded 🌧️", (date(2026, 5, 14), date(2026, 5, 20)))]),
    ("Which restaurant is booked for Ines's birthday dinner?", [
        ("Ines", "booked Dishoom for my bday dinner, 8pm", (B_START, date(2026, 5, 8))),
        ("Ines", "dishoom cancelled on me 🙄 moved the bday dinner to Padella, same time", (date(2026, 5, 10), date(2026, 5, 15)))]),
    ("Is Kasia's car fixed now?", [
        ("Kasia", "car is at the garage, no idea when ill get it back", (B_START, date(2026, 5, 8))),
        ("Kasia", "got the car back!! runs like new", (date(2026, 5, 10), date(2026, 5, 14))),
        ("Kasia", "car broke down AGAIN on the m25. towed. crying", (date(2026, 5, 18), B_END))]),
    ("What shift is Dom working these days?", [
        ("Dom", "on earlies all month, up at 5 😩", (B_START, date(2026, 5, 8))),
        ("Dom", "they switched me to nights from this week, vampire mode 🧛", (date(2026, 5, 14), B_END))]),
    ("What time is Saturday football now?", [
        ("Femi A.", "saturday footy is 10am at the astro", (B_START, date(2026, 5, 8))),
        ("Femi A.", "footy moved to 11:30 from now on, pitch got double booked", (date(2026, 5, 12), B_END))]),
    ("Has Femi signed for the flat?", [
        ("Femi A.", "viewing a flat on albion rd tmrw, fingers crossed", (B_START, date(2026, 5, 8))),
        ("Femi A.", "SIGNED THE LEASE 🔑🔑 moving on the 20th", (date(2026, 5, 10), date(2026, 5, 12)))]),
    ("How many people are coming to the BBQ at this point?", [
        ("Kasia", "bbq headcount so far: 8", (B_START, date(2026, 5, 10))),
        ("Kasia", "ok bbq headcount is 14 now, need more sausages", (date(2026, 5, 15), B_END))]),
    ("Which gym is Ines going to now?", [
        ("Ines", "gym at puregym is fine but always rammed", (B_START, date(2026, 5, 9))),
        ("Ines", "cancelled puregym, joined the climbing-free leisure centre pool instead 🏊", (date(2026, 5, 13), B_END))]),
]

TEMPORAL_B = {
    "takeaway": ("{s}", "What did we order for food {d}?", [
        ("Dom", "ordered pizza from Franco Manca for everyone 🍕"), ("Ines", "thai from Rosa's is on its way"),
        ("Femi A.", "got jollof and suya from the place on Mare St"), ("Kasia", "pierogi delivery from Mamuśka!! 🥟"),
        ("Dom", "went with burgers from Honest tonight"), ("Ines", "sushi from Sushi Atelier, sorry for the bill")]),
    "gamenight": ("{s}", "Who won game night {d}?", [
        ("Kasia", "femi won catan AGAIN. rigged."), ("Dom", "ines smashed everyone at codenames 😤"),
        ("Femi A.", "dom won ticket to ride, first time ever lol"), ("Ines", "kasia wins monopoly, friendship over 💔")]),
    "film": ("{s}", "What film did we watch {d}?", [
        ("Ines", "watched past lives, im in pieces 😭"), ("Dom", "dune 2 at the imax was unreal"),
        ("Kasia", "we put on paddington 2 and femi cried lol"), ("Femi A.", "knives out again, still slaps")]),
    "run": ("{s}", "How far did Ines run {d}?", [
        ("Ines", "did 8k this morning by the canal 🏃‍♀️"), ("Ines", "12k long run done, knees ok"),
        ("Ines", "easy 5k today"), ("Ines", "10k in 52 mins!! PB"), ("Ines", "15k, never again (until sunday)")]),
}

AGG_B = [
    ("Who is bringing what to the BBQ?", [
        ("Dom", "ill bring the charcoal and a crate of beer for the bbq"),
        ("Ines", "im doing halloumi skewers + salad for bbq"),
        ("Femi A.", "bbq: im on speakers and the jollof"),
        ("Kasia", "i'll get the sausages and buns for the bbq")]),
    ("What has Femi complained about at his new place?", [
        ("Femi A.", "new flat update: the boiler makes a noise like a dying goose"),
        ("Femi A.", "neighbours upstairs practising tap dancing at midnight?? new flat problems"),
        ("Femi A.", "theres mould in the bathroom of the new flat, messaged the agent")]),
    ("Which bars did we go to this month?", [
        ("Kasia", "the Dove was packed but worth it 🍻"),
        ("Dom", "the Chesham Arms garden tonight was perfect"),
        ("Ines", "ending up at Bar Kick every time is a lifestyle")]),
    ("What has Dom said about his new job?", [
        ("Dom", "brewery job is 4 days a week, fridays off!!"),
        ("Dom", "the brewery gives staff a free case every month 🍻 best perk"),
        ("Dom", "my new boss at the brewery is this guy called Rhys, seems sound")]),
    ("What gifts are we getting Ines for her birthday?", [
        ("Kasia", "(dm) for ines bday i got her that ceramic planter she liked"),
        ("Femi A.", "(dm) im getting ines the concert tickets, Mitski"),
        ("Dom", "(dm) i'll chip in for the mitski tix and get her flowers")]),
    ("What's gone wrong with Kasia's car this month?", [
        ("Kasia", "the mechanic says its the clutch, 600 quid 😭"),
        ("Kasia", "flat tyre this morning, brilliant"),
        ("Kasia", "car broke down AGAIN on the m25. towed. crying")]),
    ("Which places have Ines's parents visited?", [
        ("Ines", "took my parents to kew gardens, dad loved the palm house"),
        ("Ines", "parents did the tower of london today, mum bought ALL the fridge magnets")]),
]

PREF_B = [
    ("Ines", "reminder im veggie so no meat on my side of the grill pls", "Does Ines eat meat?"),
    ("Femi A.", "no coriander in anything for me, it tastes like soap", "Which herb should we avoid when cooking for Femi?"),
    ("Dom", "i only drink IPAs, lager is just fizzy water", "What beer should we get Dom?"),
    ("Kasia", "pls text dont call, i never pick up", "How does Kasia prefer to be contacted?"),
    ("Ines", "i hate horror, pick anything else for film night", "What kind of film should we avoid for Ines?"),
    ("Femi A.", "im not a morning person, nothing before 10 on weekends pls", "What time is too early to plan something with Femi on a weekend?"),
    ("Dom", "i'd rather sit outside, indoor pubs make me claustrophobic", "Does Dom prefer sitting inside or in a beer garden?"),
    ("Kasia", "I'm team tea, coffee makes me jittery", "What hot drink should we make Kasia?"),
    ("Ines", "window seat or i riot", "Which seat does Ines want on the plane?"),
    ("Femi A.", "spicy is life, the hotter the better 🌶️", "How spicy does Femi like his food?"),
]

NEG_B = [
    "When is Dom's wedding?", "What did Kasia's dentist say?", "Where did Femi go skiing?",
    "Which university did Ines go to?", "What's Dom's cat called?", "How much was the holiday in Greece?",
    "Who won the pub quiz?", "What did we eat on May 1st?", "What is Femi's middle name?",
    "When is Kasia moving to Manchester?", "What's the name of Ines's boyfriend?", "Who broke the TV at Dom's?",
    "What colour is Femi's new car?", "Which concert did Kasia go to in April?", "What did Dom cook for the BBQ last year?",
    "Where is Ines's new tattoo?",
]

FILLER_B = [
    "lol", "😂😂😂", "omg", "haha classic", "same", "k", "yesss", "nooo", "ugh mondays", "who's up for coffee later?",
    "running late sry 🙏", "traffic is insane", "did anyone watch the match last night", "send pics!!", "brb",
    "that's so dom", "i'm dead 💀", "anyone seen my black jacket? think i left it somewhere", "gm ☀️",
    "cant tonight, work stuff", "what time are we meeting?", "on my way", "here!", "where r u guys",
    "tbh i'm knackered", "need a holiday", "rain again 🙄", "lmaooo", "ok fair", "i'm in", "count me out this time",
    "my boss is driving me up the wall", "anyone got a charger?", "omw", "10 mins", "sorry was in a meeting",
    "that's wild", "can't believe it's nearly june", "ngl that's a good idea", "night all 😴", "morning!!",
    "did u get my voice note", "i'll call u later", "ha no way", "🙌", "👍", "❤️", "wait what", "true true",
    "shall we do sunday roast this week?", "the roast at the Albion was mid tbh", "going to the big tesco, need anything?",
    "i owe someone a fiver i think", "forgot my keys again", "who's got netflix login",
]
LOOKALIKE_B = [
    "bbq prep is stressing me out already", "the car is making a weird noise again", "femi how's the flat hunt",
    "pizza or thai? can't decide", "game night this week?", "film night ideas pls", "ines ur so fast omg",
    "dom's new job sounds amazing", "happy to help with the move", "who's doing ines's bday cake?",
    "football later?", "my shift tomorrow is long", "need to book the dentist myself tbh", "kasia's mum is so sweet",
    "the pub quiz was brutal", "femi's cat pics pls", "gym was dead today", "ines ur parents r so cute",
    "the brewery has a taproom right? we should go", "anyone free to water my plants?",
]


def build_chat(out: Path, rng: random.Random):
    ws = out / "ws"
    days = [B_START + timedelta(i) for i in range((B_END - B_START).days + 1)]
    sessions: list[Session] = []
    for d in days:
        late = d.weekday() in (4, 5) or rng.random() < 0.2
        if rng.random() < 0.88:
            s = Session(f"{d.isoformat()}-group.jsonl", datetime(d.year, d.month, d.day, rng.randint(7, 12), rng.randrange(60), tzinfo=B_TZ), B_TZ)
            s.chat, s.late, s.who = "group", late, PEOPLE_B
            sessions.append(s)
        if rng.random() < 0.45:
            other = rng.choice(["Dom", "Ines", "Femi A."])
            s = Session(f"{d.isoformat()}-dm-{other.split()[0].lower()}.jsonl",
                        datetime(d.year, d.month, d.day, rng.randint(9, 20), rng.randrange(60), tzinfo=B_TZ), B_TZ)
            s.chat, s.late, s.who = "dm", late and rng.random() < 0.5, ["Kasia", other]
            sessions.append(s)
    sessions.sort(key=lambda s: s.start)
    group = [i for i, s in enumerate(sessions) if s.chat == "group"]
    plants: dict[int, list[tuple[str, str, str, bool]]] = {i: [] for i in range(len(sessions))}  # speaker, msg, key, late
    labels = Labels()

    def pick(window, speaker=None, dm=False, avoid=(), day_avoid=()):
        lo, hi = window or (B_START, B_END)
        cands = [i for i, s in enumerate(sessions) if lo <= s.start.date() <= hi and i not in avoid
                 and s.start.date() not in day_avoid and (speaker is None or speaker in s.who)
                 and (s.chat == "dm") == dm]
        cands.sort(key=lambda i: len(plants[i]))
        best = [i for i in cands if len(plants[i]) <= len(plants[cands[0]]) + 1]
        return rng.choice(best)

    def person_q(q, person, variant):
        return q.format(P=variant if variant else NAMES_B[person][0])

    for n, (sp, msg, q, person, window) in enumerate(SINGLE_B):
        key = f"single{n}"
        plants[pick(window, sp)].append((sp, msg, key, False))
        if person:
            labels.add("single", person_q(q, person, None), [(key, 2)])
            for v in NAMES_B[person][1][n % 2: n % 2 + 2]:
                labels.add("name_variant", person_q(q, person, v), [(key, 2)])
        else:
            labels.add("single", q, [(key, 2)])
    # name variants from the chat: nicknames as friends write them
    for n, (q, vals) in enumerate(UPDATE_B):
        keys = []
        for k, (sp, msg, window) in enumerate(vals):
            key = f"update{n}_{k}"
            plants[pick(window, sp)].append((sp, msg, key, False))
            keys.append(key)
        labels.add("update", q, [(k, 1) for k in keys[:-1]] + [(keys[-1], 2)])
    end = B_END
    for kind, (_, q, values) in TEMPORAL_B.items():
        used = set()
        evts = []
        for j, (sp, msg) in enumerate(values):
            late = kind in ("takeaway", "gamenight", "film") and j % 2 == 0
            cands_ok = [i for i in group if sessions[i].start.date() not in used]
            if late:
                cands_ok = [i for i in cands_ok if sessions[i].late] or cands_ok
            i = rng.choice(cands_ok)
            used.add(sessions[i].start.date())
            evts.append((i, sp, msg, late))
        evts.sort(key=lambda t: sessions[t[0]].start)
        for j, (i, sp, msg, late) in enumerate(evts):
            key = f"t_{kind}{j}"
            late = late and sessions[i].late
            plants[i].append((sp, msg, key, late))
            d = sessions[i].start.date()
            forms = ["weekday_date", "slash", "dotted", "month_ord", "day_month"]
            phrase = date_form(d, forms[(j + len(kind)) % len(forms)])
            if d == end - timedelta(1):
                phrase = "last Saturday"
            elif d == end - timedelta(2) and j % 2 == 0:
                phrase = "on Friday night"
            elif d < B_START + timedelta(7) and [x for x in evts if sessions[x[0]].start.date() < B_START + timedelta(7)] == [evts[j]]:
                phrase = "in the first week"
            elif late and j % 2 == 1:
                phrase = f"on the night of {MONTHS[d.month - 1]} {ordinal(d.day)}"
            labels.add("temporal", q.format(d=phrase), [(key, 2)])
    for n, (q, parts) in enumerate(AGG_B):
        keys, used = [], set()
        for k, (sp, msg) in enumerate(parts):
            key = f"agg{n}_{k}"
            dm = msg.startswith("(dm) ")
            msg = msg[5:] if dm else msg
            # the car's clutch message is the single fact's; reuse its key
            if "clutch" in msg:
                keys.append("single3")
                continue
            if "AGAIN on the m25" in msg:
                keys.append("update2_2")
                continue
            window = (date(2026, 5, 12), B_END) if "new flat" in msg else None
            i = pick(window, sp, dm=dm and sp != "Kasia" and False, avoid=used)
            if dm:
                cands = [x for x, s in enumerate(sessions) if s.chat == "dm" and sp in s.who and x not in used]
                if cands:
                    i = rng.choice(cands)
            used.add(i)
            plants[i].append((sp, msg, key, False))
            keys.append(key)
        labels.add("aggregation", q, [(k, 2) for k in keys])
    for n, (sp, msg, q) in enumerate(PREF_B):
        key = f"pref{n}"
        plants[pick(None, sp)].append((sp, msg, key, False))
        labels.add("preference", q, [(key, 2)])
    for q in NEG_B:
        labels.neg(q)

    located: dict[str, list[tuple[str, int]]] = {}
    for i, s in enumerate(sessions):
        n = rng.randint(14, 40) if s.chat == "group" else rng.randint(8, 22)
        items = []
        for _ in range(n):
            sp = rng.choice(s.who)
            text = rng.choice(LOOKALIKE_B) if rng.random() < 0.2 else rng.choice(FILLER_B)
            items.append((sp, typo(text, rng), None, False))
        late_items = []
        for sp, msg, key, late in plants[i]:
            sp = sp if sp in s.who else s.who[0]
            if late:
                late_items.append((sp, msg, key, True))
            else:
                items.insert(rng.randrange(len(items) + 1), (sp, msg, key, False))
        # the evening: a burst that runs past midnight when the day is late
        t = s.start
        for sp, text, key, _ in items:
            t += timedelta(seconds=rng.randrange(10, 1500))
            s.msgs.append(Msg(t, "user", text, name=sp, key=key))
        if s.late:
            t = max(t, datetime(s.start.year, s.start.month, s.start.day, 22, rng.randrange(60), tzinfo=B_TZ))
            burst = [(rng.choice(s.who), typo(rng.choice(FILLER_B), rng), None) for _ in range(rng.randint(6, 12))]
            pos = len(burst) // 2 + 1
            for sp, msg, key, _ in late_items:
                burst.insert(pos, (sp, msg, key))
            for sp, text, key in burst:
                t += timedelta(seconds=rng.randrange(60, 900))
                s.msgs.append(Msg(t, "user", text, name=sp, key=key))
            if t.date() == s.start.date():  # make sure it crosses midnight
                t = datetime(s.start.year, s.start.month, s.start.day, 23, 59, tzinfo=B_TZ)
                for sp in s.who[:2]:
                    t += timedelta(minutes=rng.randrange(5, 40))
                    s.msgs.append(Msg(t, "user", typo(rng.choice(FILLER_B), rng), name=sp))
        else:
            for sp, msg, key, _ in late_items:
                t += timedelta(seconds=rng.randrange(60, 600))
                s.msgs.append(Msg(t, "user", msg, name=sp, key=key))
        where = write_session(ws, s, rng, {"channel": "whatsapp-export", "chat": s.chat,
                                           "participants": list(s.who)})
        for k, lines in where.items():
            located.setdefault(k, []).extend(("sessions/" + s.fname, ln) for ln in lines)
    labels.write(out, located)
    return sessions, labels


LABEL_FILES = ("queries.jsonl", "qrels.tsv", "evidence.tsv", "categories.tsv", "negatives.jsonl")
BUILDERS = {"assist": "build_assist", "chat": "build_chat"}


def generate(sub: str, out: Path):
    """The sub-set ``sub`` (labels and ``ws/``) written into ``out``."""
    d = out
    if (d / "ws" / "sessions").exists():
        for p in (d / "ws" / "sessions").glob("*.jsonl"):
            p.unlink()
    return globals()[BUILDERS[sub]](d, random.Random(f"{SEED}-{sub}"))


def write_workspace(sub: str, dest: Path) -> None:
    """The workspace of ``sub`` into ``dest`` (eval/run_sets.py); its labels are the committed ones,
    checked to be what this generator writes."""
    import shutil
    import tempfile

    here = Path(__file__).resolve().parent / "heldout" / sub
    with tempfile.TemporaryDirectory() as tmp:
        generate(sub, Path(tmp))
        for name in LABEL_FILES:
            if (Path(tmp) / name).read_bytes() != (here / name).read_bytes():
                raise SystemExit(f"eval/heldout/{sub}/{name} is not what eval/heldout.py writes: run"
                                 " `python eval/heldout.py --labels` and say why in the commit")
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copytree(Path(tmp) / "ws", dest, dirs_exist_ok=True)
    (dest / "memory-core.toml").write_text('sources = ["sessions"]\nprovider = "local"\n', encoding="utf-8")


def main():
    args = sys.argv[1:]
    labels = args == ["--labels"]
    if labels:
        import tempfile

        out = Path(tempfile.mkdtemp())
    else:
        out = Path(args[0]) if args else Path(__file__).resolve().parent / "heldout"
    for sub in BUILDERS:
        d = out / sub
        sessions, lab = generate(sub, d)
        cats = {}
        for q in lab.queries:
            cats[q[1]] = cats.get(q[1], 0) + 1
        print(sub, len(sessions), "sessions", sum(len(s.msgs) for s in sessions), "messages",
              len(lab.queries), "questions", dict(cats), "negatives", len(lab.negatives))
        if labels:
            import shutil

            dest = Path(__file__).resolve().parent / "heldout" / sub
            dest.mkdir(parents=True, exist_ok=True)
            for name in LABEL_FILES:
                shutil.copyfile(d / name, dest / name)


if __name__ == "__main__":
    main()
