"""The prompt list for self-distillation (drafter training data) and for decoder benchmarks.

Written in the project, nothing downloaded: hand-written questions, chit-chat and instructions,
plus topic x template combinations for volume, plus multi-turn conversations whose earlier
assistant turns are short canned replies (the model answers the last user turn). Every
conversation is a list of chat messages as `ChatSession.generate` takes them.

`conversations("train")` and `conversations("heldout")` split the list deterministically (one in
ten held out, by a stable hash of the text), so benchmarks measure drafts on prompts the drafter
never saw; `conversations("unseen")` drops the held-out ones that repeat a training question.
"""

from __future__ import annotations

import hashlib
import itertools

Message = dict[str, str]

QUESTIONS = [
    "What is the capital of France?",
    "Why is the sky blue?",
    "How do airplanes stay in the air?",
    "What causes the seasons on Earth?",
    "How many legs does a spider have?",
    "What is the difference between weather and climate?",
    "Why do cats purr?",
    "How does a refrigerator keep food cold?",
    "What is photosynthesis?",
    "Who wrote Romeo and Juliet?",
    "How far away is the Moon?",
    "What is the tallest mountain in the world?",
    "Why do we dream?",
    "How do vaccines work?",
    "What is the speed of light?",
    "Why is the ocean salty?",
    "How does the internet work, in simple terms?",
    "What is a black hole?",
    "How do bees make honey?",
    "What is inflation?",
    "Why do leaves change color in autumn?",
    "What does DNA stand for?",
    "How does a compass work?",
    "What is the largest planet in our solar system?",
    "Why do onions make you cry?",
    "How long does it take to boil an egg?",
    "What is the difference between a virus and a bacterium?",
    "Why do we have leap years?",
    "How does a rainbow form?",
    "What is machine learning?",
    "What is the boiling point of water?",
    "Why does ice float?",
    "How do solar panels make electricity?",
    "What is the Pythagorean theorem?",
    "Who painted the Mona Lisa?",
    "How many continents are there?",
    "What is the longest river in the world?",
    "Why do birds migrate?",
    "How does coffee wake you up?",
    "What is a prime number?",
    "How do earthquakes happen?",
    "What is the difference between a crocodile and an alligator?",
    "Why is exercise good for you?",
    "What language is spoken in Brazil?",
    "How do I know if an egg is fresh?",
    "What is gravity?",
    "How does a microwave oven heat food?",
    "Why do we yawn?",
    "What is a good way to remember names?",
    "What is the difference between a lake and a pond?",
    "How do plants know which way is up?",
    "What are clouds made of?",
    "Why do some people snore?",
    "How is glass made?",
    "What is the smallest country in the world?",
    "How do batteries work?",
    "What does a CPU do?",
    "Why is sleep important?",
    "How many hours of sleep does an adult need?",
    "What is the water cycle?",
    "How do you make a paper airplane?",
    "What is the meaning of the word serendipity?",
    "Is a tomato a fruit or a vegetable?",
    "What's the best way to learn a new language?",
    "How do noise cancelling headphones work?",
    "What is a haiku?",
    "How hot is the surface of the Sun?",
    "Why do we get goosebumps?",
    "What is compound interest?",
    "How do you calculate the area of a circle?",
]

CHITCHAT = [
    "Hi there!",
    "Hello, how are you today?",
    "Good morning!",
    "I'm bored. Any ideas?",
    "Tell me a joke.",
    "Tell me something interesting.",
    "What should I cook for dinner tonight?",
    "I can't sleep. What should I do?",
    "I had a long day at work.",
    "What's your favorite color?",
    "Do you like music?",
    "Can you recommend a good book?",
    "I just got a puppy!",
    "It's raining again today.",
    "I'm feeling a bit nervous about my exam tomorrow.",
    "What do you do for fun?",
    "Thanks for your help!",
    "Can you cheer me up?",
    "What's a fun thing to do on a weekend?",
    "I want to start running. Where do I begin?",
    "Say something nice.",
    "Who are you?",
    "What can you help me with?",
    "Do you have a name?",
    "I'm planning a trip to Italy.",
    "My plants keep dying. Help!",
    "I'm thinking about learning the guitar.",
    "What's a good movie for a rainy evening?",
    "Give me a fun fact about octopuses.",
    "I'm hungry.",
    "Good night!",
    "How was your day?",
    "I finally finished my project!",
    "Can you tell me a short story?",
    "What's the weather usually like in spring?",
    "I need some motivation.",
    "Let's play a word game.",
    "What is your opinion on pineapple on pizza?",
    "I'm trying to drink more water.",
    "My friend's birthday is tomorrow. Gift ideas?",
]

INSTRUCTIONS = [
    "Write a short poem about the sea.",
    "Give me three tips for staying focused.",
    "Summarize the plot of Cinderella in two sentences.",
    "Explain recursion to a beginner.",
    "List five fruits that are high in vitamin C.",
    "Write a friendly email inviting a colleague to lunch.",
    "Translate 'good morning' into Spanish, French and German.",
    "Describe a sunset in one paragraph.",
    "Give me a simple recipe for pancakes.",
    "Write a haiku about autumn.",
    "Explain how to tie a tie, step by step.",
    "Make a packing list for a weekend camping trip.",
    "Write a Python function that reverses a string.",
    "Suggest a name for a small coffee shop.",
    "Explain what a noun is, with examples.",
    "Write a limerick about a cat.",
    "Give me a 10 minute workout I can do at home.",
    "Describe the taste of chocolate to someone who has never had it.",
    "Write a thank-you note to a teacher.",
    "List the planets in order from the Sun.",
    "Explain the rules of tic-tac-toe.",
    "Give me a riddle and its answer.",
    "Write a short motivational speech for a sports team.",
    "Explain the difference between 'their', 'there' and 'they're'.",
    "Write a two-sentence horror story.",
    "Plan a simple three-day meal plan for a vegetarian.",
    "Explain what an API is in plain words.",
    "Write a short product description for a reusable water bottle.",
    "Give me a checklist for moving to a new apartment.",
    "Explain how to change a flat tire.",
    "Write a short bedtime story about a dragon.",
    "Give me five questions to ask at a job interview.",
    "Explain the difference between RAM and storage.",
    "Write a tweet announcing a bake sale.",
    "Describe your ideal city in three sentences.",
    "Give me tips for a good night's sleep.",
    "Explain what a budget is and how to make one.",
    "Write a short dialogue between a cat and a dog.",
    "Give me three easy houseplants for beginners.",
    "Explain how a bill becomes a law, briefly.",
]

TOPICS = [
    "volcanoes", "the Roman Empire", "black holes", "coffee", "honey bees", "climate change",
    "the human heart", "electric cars", "chess", "jazz music", "the Great Wall of China",
    "dinosaurs", "the moon landing", "rainforests", "penguins", "the stock market",
    "photosynthesis", "bread baking", "the Olympic Games", "earthquakes", "the printing press",
    "sharks", "recycling", "meditation", "the solar system", "vitamins", "tea", "sleep",
    "the French Revolution", "wind power", "bicycles", "the immune system", "elephants",
    "the Internet", "glaciers", "chocolate", "the pyramids of Egypt", "owls", "yoga",
    "artificial intelligence", "the ocean tides", "mushrooms", "the violin", "deserts",
    "the brain", "rockets", "coral reefs", "gardening", "the Renaissance", "thunderstorms",
    "wolves", "cheese", "the water cycle", "public speaking", "origami", "the Amazon river",
    "bats", "vaccines", "soccer", "the printing of money", "trains", "the Eiffel Tower",
    "whales", "saving money", "time zones", "bridges", "hurricanes", "the piano",
    "ancient Greece", "butterflies", "3D printing", "first aid", "the Arctic", "tomatoes",
    "video games", "the Milky Way", "camels", "friendship", "the telephone", "snow",
    "octopuses", "running a marathon", "the Silk Road", "bamboo", "lightning", "robots",
    "the alphabet", "olive oil", "Mars", "cooking rice", "the Vikings", "dolphins",
    "solar energy", "libraries", "maps", "composting", "the human eye", "kites", "rivers",
    "jellyfish", "the moon", "spices", "airplanes", "castles", "cats", "dogs", "birdsong",
]  # fmt: skip

TEMPLATES = [
    "Tell me about {t}.",
    "What is the most interesting thing about {t}?",
    "Explain {t} to a ten year old.",
    "Give me three fun facts about {t}.",
    "Why should I care about {t}?",
    "Can you give me a short introduction to {t}?",
    "What are some common misconceptions about {t}?",
    "Write a short poem about {t}.",
    "How would you describe {t} in one sentence?",
    "What's the history of {t}, briefly?",
    "I want to learn about {t}. Where should I start?",
    "What do scientists still not know about {t}?",
    "Give me a quick summary of {t}.",
    "What are the pros and cons of {t}?",
    "Tell me a short story that involves {t}.",
    "Quiz me with a question about {t}.",
    "How does {t} affect everyday life?",
    "What is a surprising fact about {t}?",
    "Describe {t} like a tour guide would.",
    "What's one thing everyone should know about {t}?",
]

# (user, canned assistant reply, follow-up): the model answers the follow-up.
FOLLOW_UPS = [
    ("What's a good name for a cat?", "How about Miso? It's short and cute.", "Why that one?"),
    ("Recommend a sci-fi book.", "Try Dune by Frank Herbert.", "What is it about?"),
    ("I want to bake something easy.", "Banana bread is a great start.", "What do I need for it?"),
    ("What's the capital of Japan?", "The capital of Japan is Tokyo.", "And how big is it?"),
    ("Should I learn Python or JavaScript?", "Python is a gentle first language.", "Why?"),
    ("I'm going hiking tomorrow.", "Sounds fun! Where are you going?", "Just a local trail."),
    (
        "Tell me a joke.",
        "Why did the scarecrow win an award? He was outstanding in his field.",
        "Another one, please.",
    ),
    ("What's 12 times 12?", "12 times 12 is 144.", "And 13 times 13?"),
    (
        "Who was Albert Einstein?",
        "A physicist famous for the theory of relativity.",
        "What is relativity, simply?",
    ),
    ("I need a gift for my mom.", "Does she have a hobby she loves?", "She loves gardening."),
    (
        "How do I make tea?",
        "Boil water, pour it over a tea bag, steep for three minutes.",
        "How about green tea?",
    ),
    (
        "What's the weather like on Mars?",
        "Cold and dusty, around minus 60 degrees Celsius.",
        "Could people live there?",
    ),
    ("Can you help me study?", "Of course. What subject?", "Biology, the cell."),
    ("I feel tired all the time.", "That's rough. How much are you sleeping?", "About five hours."),
    ("What's a good houseplant?", "A pothos is very forgiving.", "How often do I water it?"),
    ("Let's talk about space.", "Sure! What would you like to know?", "How many stars are there?"),
    ("Teach me a new word.", "Petrichor: the smell of rain on dry earth.", "Use it in a sentence."),
    (
        "What's a healthy breakfast?",
        "Oatmeal with fruit and nuts is a good choice.",
        "Something quicker?",
    ),
    ("I'm learning to cook.", "Great! What have you made so far?", "Only pasta."),
    ("Who invented the telephone?", "Alexander Graham Bell is usually credited.", "When was that?"),
    ("Recommend a movie.", "How about Spirited Away?", "Is it good for kids?"),
    (
        "How do I stay calm before a presentation?",
        "Slow breathing helps a lot.",
        "Any other tricks?",
    ),
    ("What's the biggest animal?", "The blue whale.", "How big does it get?"),
    (
        "Can you write me a haiku?",
        "Quiet morning light / steam rising from a warm cup / the day begins slow",
        "Now one about winter.",
    ),
    (
        "Where should I travel in Europe?",
        "Portugal is lovely and affordable.",
        "What should I see there?",
    ),
    ("My laptop is slow.", "Have you tried closing unused programs?", "Yes, still slow."),
    ("What's your favorite season?", "I like autumn, with its colors.", "Why not summer?"),
    (
        "How do I start saving money?",
        "Begin by tracking what you spend.",
        "What's next after that?",
    ),
    (
        "Explain gravity.",
        "Gravity is the pull between masses.",
        "Why don't we feel the Earth spinning then?",
    ),
    ("I'm adopting a dog.", "Congratulations! What breed?", "A beagle."),
]

SYSTEM_VOICE = (
    "You are a friendly voice assistant. Answer in a few short spoken sentences, no lists."
)


def _all() -> list[list[Message]]:
    convs: list[list[Message]] = []
    for text in itertools.chain(QUESTIONS, CHITCHAT, INSTRUCTIONS):
        convs.append([{"role": "user", "content": text}])
    for i, topic in enumerate(TOPICS):
        # Each topic gets 8 of the 20 templates (a stride walk), so pairs vary without repeating.
        for j in range(8):
            tpl = TEMPLATES[(i * 7 + j * 3) % len(TEMPLATES)]
            convs.append([{"role": "user", "content": tpl.format(t=topic)}])
    for user, reply, follow in FOLLOW_UPS:
        convs.append(
            [
                {"role": "user", "content": user},
                {"role": "assistant", "content": reply},
                {"role": "user", "content": follow},
            ]
        )
    # The voice agent's own system prompt on a slice of the single-turn prompts.
    for text in itertools.chain(QUESTIONS[::2], CHITCHAT[::2], INSTRUCTIONS[::3]):
        convs.append(
            [{"role": "system", "content": SYSTEM_VOICE}, {"role": "user", "content": text}]
        )
    return convs


def _held_out(conv: list[Message]) -> bool:
    key = "\x1f".join(m["content"] for m in conv).encode()
    return hashlib.sha1(key).digest()[0] % 10 == 0


def conversations(split: str = "all") -> list[list[Message]]:
    """All conversations, or the deterministic 'train' (~90%) / 'heldout' (~10%) part, or
    'unseen': the held-out ones none of whose user turns occurs in a training conversation
    (the same question also comes with the voice system prompt or as a follow-up's first turn;
    17 of the 123 held-out conversations repeat a training question that way)."""
    if split not in ("all", "train", "heldout", "unseen"):
        raise ValueError(f"split must be all|train|heldout|unseen, got {split!r}")
    convs = _all()
    if split == "all":
        return convs
    if split == "unseen":
        seen = {m["content"] for c in convs if not _held_out(c) for m in c if m["role"] == "user"}
        return [
            c
            for c in convs
            if _held_out(c) and not any(m["content"] in seen for m in c if m["role"] == "user")
        ]
    return [c for c in convs if _held_out(c) == (split == "heldout")]
