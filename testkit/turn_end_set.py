"""A labeled set for end-of-turn scoring: user transcripts, complete or not yet.

Complete turns are questions, requests and statements as Whisper writes them (capitalized,
punctuated). Incomplete turns are what a transcript at a mid-turn pause looks like: each
complete turn cut after a word that cannot end an English sentence (an article, preposition,
conjunction, auxiliary, possessive: "What is the capital of"), ending as Whisper ends a cut
(nothing, a comma, "...", and as often a "?" or "." it hears in the falling pitch: "What is
the capital of?"), and hesitations ("So my question is, um"). ``labeled()`` is
deterministic: the same seed gives the same set; ``roc_auc()`` is how well a score separates
its complete turns from the rest (bench/end_of_turn.py, tests/model/test_end_of_turn.py).
"""

from __future__ import annotations

import random

from testkit.questions import QUESTIONS

COMPLETE = (
    *QUESTIONS[:12],  # the voice benchmark's first questions
    "How do I cook rice on the stove?",
    "Tell me a joke.",
    "Why is the sky blue?",
    "How many planets are in the solar system?",
    "What is the speed of light?",
    "Explain how photosynthesis works.",
    "What is the tallest mountain in the world?",
    "How high is it?",
    "Can you describe the water cycle?",
    "What language do they speak in Brazil?",
    "Who painted the Mona Lisa?",
    "What time is it in Tokyo right now?",
    "How do airplanes stay in the air?",
    "What is the best way to learn a new language?",
    "Can you help me plan a trip to Italy?",
    "I need a name for my new puppy.",
    "What does a honey bee eat?",
    "How long should I boil an egg?",
    "Tell me something interesting about octopuses.",
    "What is the difference between weather and climate?",
    "How do I change a flat tire?",
    "Why do leaves change color in the fall?",
    "What are the health benefits of green tea?",
    "How many bones are in the human body?",
    "Can you explain what a black hole is?",
    "What is the largest ocean on Earth?",
    "How do vaccines work?",
    "Recommend a movie for a rainy evening.",
    "What is the population of Canada?",
    "How do I make a good cup of coffee?",
    "Who was the first person to walk on the moon?",
    "What causes thunder?",
    "How can I be more productive in the morning?",
    "What is the square root of one hundred forty four?",
    "Tell me about the history of the Roman Empire.",
    "How do I keep my houseplants alive?",
    "What is the fastest land animal?",
    "Can you give me a recipe for pancakes?",
    "Why do we dream?",
    "What is the meaning of the word serendipity?",
    "How does the internet work?",
    "What should I pack for a beach holiday?",
    "How much water should I drink every day?",
    "Which is bigger, a lion or a tiger?",
    "What is the longest river in Africa?",
    "How do I start running if I have never run before?",
    "Can you translate good morning into Spanish?",
    "What is a good gift for my mother's birthday?",
    "I'm feeling a bit stressed about work.",
    "Thanks, that was really helpful.",
    "My flight got cancelled this morning.",
    "I just finished reading a great novel.",
    "Set a reminder for my dentist appointment tomorrow.",
    "Play some relaxing music.",
    "What's the weather like in London?",
    "How do I reset my password?",
    "Tell me a story about a dragon and a knight.",
    "What is the distance between the Earth and Mars?",
    "How are rainbows formed?",
    "What is the capital of Australia?",
    "Do dogs see in color?",
    "How long does it take to fly to New York?",
    "What is the main ingredient in guacamole?",
    "Why is the ocean salty?",
    "Can you suggest a name for a coffee shop?",
    "What year did the Second World War end?",
    "How does a refrigerator keep food cold?",
    "I want to learn to play the guitar.",
    "What is the chemical symbol for gold?",
    "How do I write a good cover letter?",
    "Which planet has the most moons?",
    "How can I save money on groceries?",
    "What is the best time of year to visit Japan?",
    "Tell me more about that.",
    "What do you think about electric cars?",
    "How tall is the Eiffel Tower?",
    "Why do onions make you cry?",
    "What's a healthy snack I can make quickly?",
    "Can you explain the rules of chess?",
    "What is the hottest planet in the solar system?",
    "How do bees make honey?",
    "I'd like to order a pizza.",
    "What are some fun things to do on a rainy day?",
    "How many continents are there?",
    "Can you tell me how to get rid of hiccups?",
    "What is the smallest country in the world?",
    "How does a compass work?",
    "What should I name my goldfish?",
    "Is it safe to swim after eating?",
    "How do I fall asleep faster?",
    "What is the difference between a frog and a toad?",
    "Tell me a riddle.",
    "How do solar panels make electricity?",
    "Why do birds fly south for the winter?",
    "What are the symptoms of a cold?",
    "How do I make my bread rise better?",
    "Can you recommend a podcast about history?",
    "What is the most spoken language in the world?",
)

# Words after which an English sentence is not over.
NON_FINAL = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "about",
        "from",
        "into",
        "by",
        "as",
        "than",
        "and",
        "or",
        "but",
        "so",
        "if",
        "because",
        "is",
        "are",
        "was",
        "were",
        "do",
        "does",
        "did",
        "can",
        "could",
        "should",
        "would",
        "will",
        "have",
        "has",
        "my",
        "your",
        "his",
        "her",
        "our",
        "their",
        "its",
        "what",
        "how",
        "why",
        "where",
        "when",
        "which",
        "who",
        "whose",
        "that",
        "this",
        "these",
        "those",
        "i",
        "you",
        "we",
    ]
)

HESITATIONS = (
    "So my question is, um",
    "I was wondering if",
    "Um, so",
    "Okay, so what I want to know is",
    "Can you tell me, uh",
    "And then",
    "Well, I think that",
    "The thing is, um",
    "So basically",
    "What I'm trying to figure out is",
    "I have a question about",
    "Let me think, um",
    "Actually, could you",
    "Hmm, what about",
    "So, the reason I ask is",
    "Uh, how do I",
    "I'm looking for a, um",
    "Could you maybe",
    "Right, and also",
    "My question is whether",
    "I'd like to know, um",
    "So yesterday I was",
    "You know how",
    "Is it true that",
    "Tell me about, uh",
    "What's the, um",
    "I need help with, uh",
    "So I was thinking",
    "Just one more thing,",
    "Before I forget,",
)

CUT_ENDINGS = ("", ",", "...", "?", ".")  # how Whisper ends a cut transcript


def cut(sentence: str, rng: random.Random) -> str | None:
    """``sentence`` cut after a randomly chosen non-final word (None where there is none)."""
    words = sentence.rstrip(".?!").split()
    points = [
        i
        for i in range(1, len(words) - 1)
        if words[i].lower().strip(",'") in NON_FINAL or words[i].lower().endswith("'s")
    ]
    if not points:
        return None
    i = rng.choice(points)
    return " ".join(words[: i + 1]).rstrip(",") + rng.choice(CUT_ENDINGS)


def labeled(seed: int = 0) -> list[tuple[str, bool]]:
    """(transcript, complete) pairs: every complete turn, a cut of each, the hesitations."""
    rng = random.Random(seed)
    out = [(s, True) for s in COMPLETE]
    out += [(c, False) for s in COMPLETE if (c := cut(s, rng)) is not None]
    out += [(h if h.endswith(",") else h + rng.choice(CUT_ENDINGS), False) for h in HESITATIONS]
    return out


def roc_auc(scores: list[float], labels: list[bool]) -> float:
    """P(a complete turn scores above an incomplete one), ties counted half."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))
