"""Spoken questions for the voice tests and benchmarks: one copy of each list.

``QUESTIONS``: whole questions with short spoken answers, asked in turn by bench/voice.py,
bench/live.py, bench/soak.py and bench/load.py, scored whole by bench/end_of_turn.py.
``PAUSED``: questions the user pauses in mid-sentence (bench/voice.py, bench/end_of_turn.py).
lab/train_turn_audio.py keeps both out of its training sentences. ``ASR_QUESTIONS``: the set the
streaming final is scored on against one whole Whisper pass (tests/audio/test_asr_accuracy.py,
bench/speech.py).
"""

QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "Tell me a fun fact about the moon.",
    "What color is the sky on a clear day?",
    "Can you recommend a good book to read?",
    "Why do cats purr?",
    "What is the boiling point of water?",
    "Give me a quick tip for sleeping better.",
    "Who wrote Romeo and Juliet?",
    "How far away is the sun?",
    "What should I cook for dinner tonight?",
    "Is it going to be a good day today?",
    "How do airplanes stay in the air?",
    "What is the largest ocean on Earth?",
    "Tell me a joke about computers.",
    "How do I make a good cup of coffee?",
    "What causes thunder?",
    "Which planet has the most moons?",
    "How tall is the Eiffel Tower?",
    "What is the fastest land animal?",
    "Why is the ocean salty?",
    "Can you explain what a black hole is?",
    "How do bees make honey?",
    "What year did the Second World War end?",
]
# (first part, second part): the user pauses mid-sentence between them.
PAUSED = [
    ("What is the capital of", "Germany?"),
    ("Tell me a fun fact about", "the moon."),
    ("What is the boiling point of", "water?"),
    ("How many legs does a", "spider have?"),
    ("Who wrote the", "Odyssey?"),
    ("How far is the", "sun from the Earth?"),
    ("What should I cook for", "dinner tonight?"),
    ("Why do", "cats purr?"),
    ("What is the tallest", "mountain in the world?"),
    ("Give me a quick tip for", "sleeping better."),
    ("How do I", "cook rice on the stove?"),
    ("What is the speed of", "light?"),
    ("Which planet has the", "most moons?"),
    ("Can you tell me how to", "get rid of hiccups?"),
    ("What is the difference between a frog and a", "toad?"),
    ("I would like to", "learn to play the guitar."),
    ("How long should I", "boil an egg?"),
    ("What are the symptoms of", "a cold?"),
    ("So my question is, um,", "how do vaccines work?"),
    ("Could you explain why the", "sky is blue?"),
]
ASR_QUESTIONS = (
    "What is the capital of France?",
    "How far away is the moon?",
    "Who wrote Romeo and Juliet?",
    "What time is it in Tokyo right now?",
    "Can you tell me a joke about cats?",
    "How do I boil an egg?",
    "What is the weather like tomorrow?",
    "Why is the sky blue?",
    "How many legs does a spider have?",
    "What is the tallest mountain in the world?",
    "Who painted the Mona Lisa?",
    "Where do penguins live?",
    "How do airplanes stay in the air?",
    "What should I cook for dinner tonight?",
    "Which planet is closest to the sun?",
    "Can you recommend a good book?",
    "What is the longest river in Africa?",
    "How does a rainbow form?",
)
