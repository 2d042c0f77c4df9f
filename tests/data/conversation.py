"""A small made-up conversation between two friends, stored turn by turn in the ranking tests
(``tests/search/test_turns.py``): three sessions of chit-chat, each holding a few facts, and
questions whose answer is one turn (``evidence``, as ``session:turn``)."""

from __future__ import annotations

SPEAKERS = ("Ada", "Ben")
SESSIONS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "2024-03-02T18:30:00",
        [
            ("Ada", "Hey Ben! So good to hear from you, how have you been?"),
            ("Ben", "Hi Ada! Pretty busy, but good. Work has been a lot lately. How about you?"),
            ("Ada", "Same here, honestly. But I have some fun news to share!"),
            ("Ben", "Oh, I love fun news. Tell me everything!"),
            ("Ada", "I signed up for an evening pottery course at the community center."),
            ("Ben", "That's awesome! What made you want to try it?"),
            ("Ada", "I wanted something with my hands after staring at screens all day."),
            ("Ben", "That makes so much sense. I'm really happy for you."),
            ("Ada", "Thanks! How are the kids doing?"),
            ("Ben", "They're great. Milo just started learning the cello at school."),
            ("Ada", "No way, that's so cute! Does he like it?"),
            ("Ben", "He loves it, he practices every evening before dinner."),
            ("Ada", "That's wonderful to hear. Give him a hug from me!"),
            ("Ben", "I will! Talk soon, Ada."),
        ],
    ),
    (
        "2024-04-14T10:05:00",
        [
            ("Ben", "Morning Ada! How did the course go?"),
            ("Ada", "Really well! Last week I finally made a blue bowl that doesn't wobble."),
            ("Ben", "Ha, that's a big step. I'm proud of you!"),
            ("Ada", "Thank you, it means a lot. What have you been up to?"),
            ("Ben", "We went camping by the lake with the whole family last weekend."),
            ("Ada", "That sounds amazing! Was it cold at night?"),
            ("Ben", "Freezing, but the kids didn't care at all. They loved it."),
            ("Ada", "Kids are the best like that. I'm so glad you had fun."),
            ("Ben", "Me too. Any plans for the summer?"),
            ("Ada", "I booked a trip to Lisbon in July with my sister."),
            ("Ben", "Lisbon is beautiful! You'll have a great time."),
            ("Ada", "I hope so! I can't wait to see her again."),
        ],
    ),
    (
        "2024-08-20T20:40:00",
        [
            ("Ada", "Ben! I'm back and I have so many stories."),
            ("Ben", "Welcome back! How was it?"),
            ("Ada", "Honestly magical. We ate pastries every single morning."),
            ("Ben", "That sounds like the dream. Anything else new?"),
            ("Ada", "I adopted a rescue greyhound named Pepper when I got home."),
            ("Ben", "Oh wow, congratulations! How is she settling in?"),
            ("Ada", "She's shy but sweet. She sleeps most of the day."),
            ("Ben", "Greyhounds are famous for that. Milo will want to meet her!"),
            ("Ada", "Anytime! How's his music going?"),
            ("Ben", "He played his first concert last month and didn't miss a note."),
            ("Ada", "That's incredible, tell him I said well done."),
            ("Ben", "I will. Take care, Ada!"),
        ],
    ),
]

#: (question, evidence turn as "session:turn", 1-based, as LoCoMo numbers them).
QUESTIONS: list[tuple[str, str]] = [
    ("What course did Ada sign up for?", "1:5"),
    ("What instrument is Milo learning?", "1:10"),
    ("What did Ada make in her pottery course?", "2:2"),
    ("Where did Ben's family go camping?", "2:5"),
    ("Who is Ada travelling to Lisbon with?", "2:10"),
    ("What did Ada eat every morning on her trip?", "3:3"),
    ("What is the name of Ada's dog?", "3:5"),
    ("When did Milo play his first concert?", "3:10"),
]


def turns() -> list[tuple[str, str, str, str, str]]:
    """Every turn as (``"Speaker: text"``, heading, event time, speaker, id ``session:turn``)."""
    out = []
    for number, (when, said) in enumerate(SESSIONS, start=1):
        for turn, (speaker, text) in enumerate(said, start=1):
            out.append((f"{speaker}: {text}", f"Session {number}, {when[:10]}", when, speaker, f"{number}:{turn}"))
    return out
