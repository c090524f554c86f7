"""The scripted conversations of bench/conversation.py.

A conversation is a voice, optional ``--set`` overrides and its user turns. A turn is its text
(a monologue: several sentences, synthesized apart and joined by short pauses), its kind and,
for new questions, a few topic keywords the answer should mention. ``at_ms`` makes a turn talk
over the agent: that many ms after the agent began speaking its latest answer, or, with
``after_previous``, after the previous turn began (backchannels in a row).

Kinds: ``question`` (a new topic), ``follow_up`` (refers back: "And what about Germany?"),
``barge_in`` (interrupts the answer with a new question), ``backchannel`` ("mm-hmm" during an
answer: must not interrupt it), ``monologue`` (15-45 s of speech, then a question).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Turn:
    sentences: tuple[str, ...]
    kind: str = "question"
    keywords: tuple[str, ...] = ()
    at_ms: int | None = None
    after_previous: bool = False
    gap_ms: int | None = None  # silence between its sentences (None: the bench's default)

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


@dataclass(frozen=True)
class Script:
    name: str
    voice: str
    turns: tuple[Turn, ...]
    overrides: tuple[str, ...] = ()


def q(text: str, *keywords: str) -> Turn:
    return Turn((text,), "question", keywords)


def follow(text: str, *keywords: str) -> Turn:
    return Turn((text,), "follow_up", keywords)


def barge(at_ms: int, text: str, *keywords: str) -> Turn:
    return Turn((text,), "barge_in", keywords, at_ms)


def lead(at_ms: int, lead_in: str, gap_ms: int, text: str, *keywords: str) -> Turn:
    """An interruption that starts with a lead-in, pauses ``gap_ms`` (longer than a pause
    inside a sentence), then asks: one turn, whose answer must wait for the request."""
    return Turn((lead_in, text), "barge_in", keywords, at_ms, gap_ms=gap_ms)


def back(at_ms: int, text: str, after_previous: bool = False) -> Turn:
    return Turn((text,), "backchannel", (), at_ms, after_previous)


def mono(sentences: tuple[str, ...], *keywords: str) -> Turn:
    return Turn(sentences, "monologue", keywords)


# Each voice ending in /48k goes 48 kHz -> 16 kHz the way the web page sends a microphone.
VOICES = (
    "piper",
    "espeak:en-us",
    "espeak:en+f3/48k",
    "piper-slow",
    "espeak:en",
    "espeak:en+m3/48k",
    "piper/48k",
    "espeak:en-us/48k",
)

DOG = (
    "My partner and I just moved into a house with a big garden.",
    "We both work from home most days, so someone is always around.",
    "We have two kids, one is six and the other is nine years old.",
    "The kids have been asking for a dog for about two years now.",
    "We go hiking most weekends and would love a dog that can come along.",
    "My partner is a little allergic, so a dog that sheds less would be better.",
    "We do not mind training it, and we have time for long walks every morning.",
    "I grew up with a big friendly dog, and I would love the kids to have that too.",
    "So what breed of dog would you recommend for us?",
)
ICELAND = (
    "Next month I am going on a trip to Iceland for a whole week.",
    "I will drive around the island and stay in small guest houses.",
    "I want to see waterfalls, glaciers and maybe the northern lights.",
    "I only want to bring one backpack and no big suitcase.",
    "What should I pack for a week in Iceland?",
)
DINNER = (
    "I am having six friends over for dinner on Saturday.",
    "Two of them do not eat meat and one does not eat nuts.",
    "I am not a great cook, and I only have about two hours after work to get ready.",
    "My kitchen is small, with one oven and two burners that work.",
    "Last time I made a lasagna and it took much longer than I had planned.",
    "What can I cook that is vegetarian and easy?",
)
WORK = (
    "Work has been really stressful for the last few weeks.",
    "I have three projects due at the same time and my manager keeps adding more.",
    "I answer emails all day and never get to the real work until the evening.",
    "I also feel tired because I stay up late to catch up.",
    "Meetings take up most of my mornings, and half of them do not need me at all.",
    "I tried using a planner, but I stopped writing in it after a week.",
    "My team is small, so it is hard to hand work to anyone else.",
    "How can I manage my time better?",
)
LANGUAGES = (
    "I have always wanted to learn a second language.",
    "In school I took a little French, but I forgot almost all of it.",
    "My company has an office in Madrid and another one in Berlin.",
    "I might get the chance to work abroad for a year or two.",
    "I also love to travel, and last year I spent two weeks in Mexico.",
    "I can study for about thirty minutes every evening after work.",
    "I like apps, but I learn best when I can talk to real people.",
    "A friend of mine says German grammar is very hard for beginners.",
    "Another friend told me that Spanish is the easiest language for English speakers.",
    "I do not want to give up after a month like I did with the guitar.",
    "My grandmother spoke Italian, and I always wished I could talk with her in it.",
    "I would also like to read books and watch films without subtitles one day.",
    "Which language should I learn first?",
)
GARDEN = (
    "This spring I want to start a small vegetable garden behind my house.",
    "I have never grown anything before, not even a house plant.",
    "The spot gets sun most of the afternoon and the soil looks good.",
    "I can water it every morning before I leave for work.",
    "I would like things we can eat in salads and that my kids might enjoy picking.",
    "What vegetables are easy to grow?",
)

_SCRIPTS = [
    (
        "qa-france-cooking-joke",
        (
            q("What is the capital of France?", "paris"),
            q("How do I cook rice on the stove?", "rice", "water", "boil", "simmer", "cook"),
            q("Tell me a joke.", "why", "joke", "what do you call", "because"),
        ),
    ),
    (
        "barge-800-dragons",
        (
            q("Tell me about the history of the Roman Empire.", "rom", "empire"),
            barge(800, "Actually, never mind that. Tell me about dragons.", "dragon"),
        ),
    ),
    (
        "backchannels-mars",
        (
            q("Tell me about the planet Mars.", "mars", "planet"),
            back(1500, "Mm-hmm."),
            back(2500, "Yeah.", after_previous=True),
            back(2500, "Okay.", after_previous=True),
            q("What about Jupiter?", "jupiter"),
        ),
    ),
    (
        "follow-germany",
        (
            q("What is the capital of France?", "paris"),
            follow("And what about Germany?", "berlin"),
            follow("Which of the two cities is bigger?", "berlin", "paris", "larg", "bigg"),
        ),
    ),
    (
        "monologue-dog-past-max-turn",
        (mono(DOG, "dog", "breed", "retriever", "labrador", "poodle", "terrier", "beagle"),),
    ),
    (
        "barge-1500-everest",
        (
            q("Explain how photosynthesis works.", "photosynthesis", "light", "plant", "sun"),
            barge(1500, "Stop, stop. What is the tallest mountain in the world?", "everest"),
            follow("How high is it?", "meter", "metre", "feet", "8", "29"),
        ),
    ),
    (
        "barge-3000-spain",
        (
            q("Can you describe the water cycle?", "water", "evaporat", "rain", "cloud"),
            barge(3000, "Wait, tell me about Spain instead.", "spain", "madrid", "spanish"),
            follow("What language do they speak there?", "spanish"),
        ),
    ),
    (
        "monologue-iceland-max-turn-5s",
        (mono(ICELAND, "pack", "jacket", "layer", "warm", "coat", "boot", "cloth"),),
        ("vad.max_turn_s=5",),
    ),
    (
        "qa-science",
        (
            q("Why is the sky blue?", "light", "scatter", "blue"),
            q("How many planets are in the solar system?", "eight", "8"),
            q("What is the speed of light?", "300", "186", "kilomet", "mile"),
        ),
    ),
    (
        "barge-800-then-question",
        (
            q("Tell me a long story about a brave knight.", "knight"),
            barge(800, "Actually, never mind that. What is two plus two?", "four", "4"),
            q("Who painted the Mona Lisa?", "leonardo", "vinci"),
        ),
    ),
    (
        "backchannel-then-barge",
        (
            q("Tell me about the ocean.", "ocean", "sea", "water"),
            back(1500, "Mm-hmm."),
            Turn(("Actually, tell me about castles.",), "barge_in", ("castle",), 2000, True),
        ),
    ),
    (
        "follow-shakespeare",
        (
            q("Who wrote Romeo and Juliet?", "shakespeare"),
            follow("When did he live?", "15", "16", "century"),
            follow("What other plays did he write?", "hamlet", "macbeth", "othello", "lear"),
        ),
    ),
    (
        "monologue-dinner",
        (mono(DINNER, "vegeta", "pasta", "salad", "bean", "tofu", "rice", "curry", "soup"),),
    ),
    (
        "barge-1500-guitar",
        (
            q("What is the history of jazz music?", "jazz", "music"),
            barge(1500, "Never mind. How do I learn to play the guitar?", "guitar", "chord"),
            q("Tell me a joke about cats.", "cat"),
        ),
    ),
    (
        "qa-health",
        (
            q("How much water should I drink each day?", "water", "glass", "lit", "cup", "ounce"),
            q("What are some good exercises for beginners?", "walk", "squat", "push", "yoga"),
            q("How many hours should an adult sleep?", "seven", "nine", "7", "8", "9"),
        ),
    ),
    (
        "barge-3000-then-two-questions",
        (
            q("Explain how a car engine works.", "engine", "fuel", "piston", "combustion"),
            barge(3000, "Okay, stop. How do airplanes fly?", "wing", "lift", "air"),
            q("What is the fastest animal?", "cheetah", "falcon"),
        ),
    ),
    (
        "backchannels-internet",
        (
            q("How does the internet work?", "internet", "computer", "network", "data"),
            back(2000, "Yeah."),
            back(3000, "Right.", after_previous=True),
            q("Thanks. What is a computer virus?", "virus", "program", "software"),
        ),
    ),
    (
        "follow-elephants",
        (
            q("How long do elephants live?", "elephant", "year"),
            follow("And what do they eat?", "grass", "plant", "fruit", "leav", "bark"),
            follow("What about giraffes?", "giraffe"),
        ),
    ),
    (
        "monologue-work",
        (mono(WORK, "time", "priorit", "schedul", "list", "task", "plan"),),
    ),
    (
        "barge-800-twice",
        (
            q("Tell me about the French Revolution.", "revolution", "france", "french"),
            barge(800, "Sorry, different question. What is the biggest ocean?", "pacific"),
            barge(1500, "Wait, which ocean is the smallest?", "arctic"),
        ),
    ),
    (
        "qa-tech-books",
        (
            q("What is machine learning?", "learn", "data", "computer", "algorithm"),
            q("What is the difference between a laptop and a tablet?", "laptop", "tablet"),
            q("Can you recommend a good book to read?", "book", "novel", "read"),
        ),
    ),
    (
        "barge-1500-penguins",
        (
            q("What causes thunderstorms?", "thunder", "storm", "air", "cloud", "warm"),
            barge(1500, "Actually, never mind that. Tell me about penguins.", "penguin"),
            follow("Where do they live?", "antarctic", "south", "ice", "cold"),
        ),
    ),
    (
        "monologue-languages-past-max-turn",
        (mono(LANGUAGES, "language", "spanish", "french", "german", "learn"),),
    ),
    (
        "backchannel-bees",
        (
            q("How do bees make honey?", "bee", "honey", "nectar", "flower"),
            back(2500, "Okay."),
            follow("Why are bees important?", "pollinat", "plant", "flower", "crop", "food"),
        ),
    ),
    (
        "follow-rivers",
        (
            q("What is the longest river in the world?", "nile", "amazon"),
            follow("And in Europe?", "volga", "danube", "europe"),
            q("What is the capital of Japan?", "tokyo"),
        ),
    ),
    (
        "barge-3000-moon",
        (
            q("Who was Albert Einstein?", "einstein", "relativity", "physic"),
            barge(3000, "Stop. Tell me about the moon landing.", "moon", "apollo", "1969"),
            follow("Who was the first person to walk on it?", "armstrong", "neil"),
        ),
    ),
    (
        "qa-everyday",
        (
            q("How do I make a cup of tea?", "tea", "water", "boil", "bag"),
            q("What is a good name for a puppy?", "name", "max", "buddy", "bella", "charlie"),
            q("Tell me something fun to do on a rainy day.", "read", "movie", "game", "bak"),
        ),
    ),
    (
        "barge-800-math",
        (
            q("Explain the Pythagorean theorem.", "triangle", "square", "hypotenuse"),
            barge(800, "Never mind. What is ten times ten?", "hundred", "100"),
            q("What is a prime number?", "prime", "divis"),
        ),
    ),
    (
        "monologue-garden",
        (mono(GARDEN, "tomato", "lettuce", "bean", "pea", "radish", "carrot", "vegetable"),),
    ),
    (
        "backchannels-great-wall",
        (
            q("Tell me about the Great Wall of China.", "wall", "china", "chinese"),
            back(1000, "Uh-huh."),
            back(3000, "I see.", after_previous=True),
            follow("How long is it?", "mile", "kilomet", "km", "13", "21"),
        ),
    ),
    (
        "barge-1500-after-follow-up",
        (
            q("What is the capital of Italy?", "rome"),
            follow("What food is it famous for?", "pasta", "pizza", "food", "italian"),
            barge(1500, "Actually, never mind that. How do volcanoes erupt?", "volcan", "magma"),
        ),
    ),
    (
        "qa-five-questions",
        (
            q("What is the biggest planet?", "jupiter"),
            q("How hot is the sun?", "degree", "million", "celsius", "fahrenheit", "kelvin"),
            q("What is gravity?", "gravity", "force", "mass", "attract"),
            q("Why do leaves change color in autumn?", "chlorophyll", "leaf", "leaves", "colo"),
            q("Tell me a joke about computers.", "computer"),
        ),
    ),
    # Interruptions that lead in, pause 400-800 ms, then ask.
    (
        "lead-in-never-mind-moon",
        (
            q("Tell me about the history of the printing press.", "print", "press", "gutenberg"),
            lead(
                1200,
                "Actually, never mind that.",
                600,
                "How far away is the moon?",
                "moon",
                "kilomet",
                "mile",
                "384",
                "238",
            ),
        ),
    ),
    (
        "lead-in-wait-tea",
        (
            q("Explain how a rainbow forms.", "rainbow", "light", "refract", "color", "colour"),
            lead(1500, "Wait.", 500, "How do I make a good cup of tea?", "tea", "water", "boil"),
        ),
    ),
    (
        "lead-in-hold-on-sharks",
        (
            q("What is the history of the bicycle?", "bicycle", "bike", "wheel"),
            lead(900, "Hold on a second.", 700, "Do sharks sleep?", "shark", "sleep", "swim"),
        ),
    ),
    (
        "lead-in-sorry-bread",
        (
            q("Tell me about the Amazon rainforest.", "amazon", "rainforest", "forest"),
            lead(
                2000,
                "Sorry, one more thing.",
                450,
                "How do I bake bread at home?",
                "bread",
                "flour",
                "yeast",
                "dough",
                "oven",
            ),
        ),
    ),
    (
        "lead-in-okay-stop-chess",
        (
            q("Describe how the internet works.", "internet", "network", "data", "computer"),
            lead(1000, "Okay, stop.", 550, "Who invented chess?", "chess", "india", "game"),
        ),
    ),
    (
        "lead-in-hmm-coffee",
        (
            q("Tell me a long story about a dragon.", "dragon"),
            lead(
                2500, "Hmm, you know what?", 650, "Tell me about coffee instead.", "coffee", "bean"
            ),
        ),
    ),
    (
        "lead-in-forget-it-whales",
        (
            q("How are mountains formed?", "mountain", "plate", "tectonic", "rock"),
            lead(
                1300,
                "Oh, forget it.",
                500,
                "How big is a blue whale?",
                "whale",
                "meter",
                "metre",
                "feet",
                "ton",
            ),
        ),
    ),
    (
        "lead-in-hang-on-olympics",
        (
            q("Explain the rules of soccer.", "soccer", "football", "goal", "ball"),
            lead(
                800,
                "Hang on.",
                800,
                "When did the Olympic Games start?",
                "olympic",
                "greece",
                "776",
                "1896",
            ),
        ),
    ),
    (
        "lead-in-let-me-think-honey",
        (
            q("What is the history of the violin?", "violin", "instrument", "string"),
            lead(
                1800,
                "Let me think.",
                600,
                "Why do bees make honey?",
                "bee",
                "honey",
                "nectar",
                "food",
            ),
        ),
    ),
    (
        "lead-in-no-wait-pyramids",
        (
            q("Tell me about the deep ocean.", "ocean", "deep", "sea"),
            lead(1100, "No, wait.", 400, "Who built the pyramids?", "egypt", "pyramid", "pharaoh"),
        ),
    ),
]

SCRIPTS = tuple(
    Script(name, VOICES[i % len(VOICES)], turns, *rest)
    for i, (name, turns, *rest) in enumerate(_SCRIPTS)
)
