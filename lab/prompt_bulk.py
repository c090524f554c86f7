"""Bulk prompts for self-distillation: many different conversations, written in the project.

The n-gram store and the drafter learn the base model's habits from its own answers, and what
they learn carries to new questions in proportion to how many DIFFERENT conversations the
answers came from, not how many times each was answered: stores of equal size (BENCHMARKS.md,
free drafts simulated on the `unseen` held-out answers) made from all 982 training
conversations with half their sampled answers beat ones made from half the conversations with
all of theirs (1.71 vs 1.66 tokens/step, 568K vs 549K tokens). prompts.py holds ~1100
hand-made conversations; this module multiplies them: per category, topics x templates that
suit them ("What do {t} eat?" for animals, "How do I {t}?" for chores), each once with no
system message and once with the voice agent's own (the app's default `system_prompt`: what
the product actually sends). The questions are written here, not by the base model: at 135M
parameters its "questions" were mostly not questions.

`conversations()` is deterministic and shuffled (seeded), so the first N of it are spread over
every category; it leaves out every topic a held-out conversation of prompts.py mentions,
so benchmarks on held-out prompts stay unseen.
"""

from __future__ import annotations

import random
import re

from lab.prompts import Message
from lab.prompts import conversations as base_conversations

# The app's default lm system prompt (app/conversation/config.py; a test keeps the two equal).
SYSTEM_APP = "You are a helpful voice assistant. Reply briefly in plain English."

CATEGORIES: dict[str, tuple[list[str], list[str]]] = {
    "science": (
        ["gravity", "magnetism", "electricity", "sound waves", "static electricity", "evaporation",
         "friction", "nuclear fusion", "the greenhouse effect", "plate tectonics", "erosion",
         "radio waves", "lasers", "batteries", "a microwave oven", "GPS", "x-rays", "fermentation",
         "osmosis", "buoyancy", "rust", "the tides", "the Big Bang", "cloud formation",
         "a solar eclipse", "the northern lights", "antibiotics", "the periodic table",
         "evolution", "atoms", "a thermostat", "a hydroelectric dam", "wind", "the speed of sound",
         "air pressure", "carbon dating", "genes", "the ozone layer", "fossils", "sunburn"],
        ["How does {t} work?", "Can you explain {t} simply?", "What is {t}, in plain words?",
         "Why does {t} matter?", "Give me an everyday example of {t}.",
         "Who figured out {t}?", "What's a common misunderstanding about {t}?",
         "Explain {t} in two sentences.", "How would you teach {t} to a kid?",
         "How do scientists study {t}?", "What's the coolest fact about {t}?"],
    ),
    "animals": (
        ["giraffes", "otters", "hedgehogs", "crows", "parrots", "koalas", "pandas", "frogs",
         "turtles", "snakes", "ants", "spiders", "horses", "cows", "goats", "rabbits",
         "hamsters", "foxes", "bears", "lions", "tigers", "zebras", "kangaroos", "seals",
         "squirrels", "raccoons", "beavers", "eagles", "hummingbirds", "flamingos",
         "crocodiles", "chameleons", "salmon", "starfish", "lobsters", "moths", "ladybugs",
         "mosquitoes", "gorillas", "sloths"],
        ["What do {t} eat?", "Where do {t} live?", "How long do {t} live?", "Are {t} smart?",
         "How do {t} communicate?", "Tell me something surprising about {t}.",
         "Are {t} endangered?", "How do {t} sleep?", "Would {t} make good pets?",
         "How big do {t} get?", "How do baby {t} grow up?", "What are {t} afraid of?"],
    ),
    "food": (
        ["pasta", "rice", "lentils", "chickpeas", "salmon", "eggs", "tofu", "potatoes",
         "sweet potatoes", "broccoli", "spinach", "avocado", "pancakes", "vegetable soup",
         "chicken breast", "oatmeal", "quinoa", "cookies", "pizza dough", "curry", "tacos",
         "a green salad", "apples", "bananas", "strawberries", "yogurt", "garlic", "ginger",
         "carrots", "cauliflower", "black beans", "noodles", "dumplings", "an omelette",
         "a smoothie", "pumpkin", "corn on the cob", "mushroom risotto", "hummus", "lemonade"],
        ["How do I make {t}?", "What goes well with {t}?", "Is {t} healthy?",
         "How should I store {t}?", "What's a quick recipe with {t}?",
         "Where does {t} come from?", "Can I freeze {t}?", "What's the best way to reheat {t}?",
         "Give me a simple dinner idea with {t}.", "What's a common mistake when cooking {t}?"],
    ),
    "places": (
        ["Paris", "Rome", "Tokyo", "Kyoto", "New York", "London", "Barcelona", "Lisbon",
         "Istanbul", "Cairo", "Marrakech", "Cape Town", "Nairobi", "Mumbai", "Bangkok",
         "Singapore", "Sydney", "New Zealand", "Iceland", "Norway", "Scotland", "Ireland",
         "Mexico City", "Peru", "Buenos Aires", "Rio de Janeiro", "Vancouver", "Chicago",
         "San Francisco", "Hawaii", "Alaska", "Vienna", "Prague", "Amsterdam", "Berlin",
         "Greece", "Croatia", "Vietnam", "Seoul", "Morocco"],
        ["What should I see in {t}?", "When is the best time to visit {t}?",
         "What is {t} famous for?", "What food should I try in {t}?",
         "Is {t} expensive to visit?", "How do people get around in {t}?",
         "What's the weather like in {t}?", "Tell me a bit of history about {t}.",
         "What language do people speak in {t}?", "Plan me one day in {t}.",
         "What should I pack for a trip to {t}?"],
    ),
    "hobbies": (
        ["drawing", "painting", "playing guitar", "singing", "photography", "swimming",
         "running", "cycling", "knitting", "woodworking", "baking", "writing poetry",
         "journaling", "learning a language", "coding", "dancing", "rock climbing", "fishing",
         "camping", "bird watching", "pottery", "calligraphy", "skateboarding", "surfing",
         "playing the piano", "juggling", "sewing", "hiking", "tennis", "basketball",
         "board games", "jigsaw puzzles", "magic tricks", "podcasting", "chess", "gardening",
         "stand-up comedy", "kayaking", "baking bread", "playing the drums"],
        ["How can I get better at {t}?", "What do I need to start {t}?",
         "How long does it take to learn {t}?", "What are common beginner mistakes in {t}?",
         "Is {t} a good hobby for a busy person?",
         "Give me a simple plan to practice {t} this week.",
         "How do I stay motivated with {t}?", "What's the hardest part of {t}?",
         "Can I learn {t} online?", "Why do people enjoy {t}?"],
    ),
    "how_to": (
        ["clean an oven", "fix a leaky faucet", "unclog a drain", "iron a shirt", "tie a tie",
         "change a flat tire", "jump-start a car", "make a budget", "write a cover letter",
         "prepare for a job interview", "ask for a raise", "fall asleep faster",
         "wake up earlier", "drink more water", "stop procrastinating", "organize my closet",
         "pack for a trip", "train a puppy", "get a stain out of a shirt", "hang a picture",
         "paint a room", "back up my phone", "make a strong password", "speed up my computer",
         "take better photos with my phone", "write a thank-you note", "plan a birthday party",
         "make friends in a new city", "keep houseplants alive", "start running",
         "save for a vacation", "negotiate my rent", "cut down my screen time",
         "meal prep for the week", "get rid of fruit flies", "sharpen a kitchen knife",
         "care for a cast iron pan", "memorize a speech", "apologize to a friend",
         "read more books"],
        ["How do I {t}?", "What's the easiest way to {t}?", "I need to {t}. Where do I begin?",
         "Any tips to {t}?", "What should I avoid when I try to {t}?",
         "Can you walk me through how to {t}?", "Is it hard to {t}?",
         "What do I need to {t}?", "I keep failing to {t}. What am I doing wrong?"],
    ),
    "people": (
        ["Leonardo da Vinci", "Marie Curie", "Isaac Newton", "Cleopatra", "Napoleon",
         "Abraham Lincoln", "Nelson Mandela", "Martin Luther King Jr.", "Mahatma Gandhi",
         "Ada Lovelace", "Charles Darwin", "Galileo", "William Shakespeare", "Mozart",
         "Beethoven", "Frida Kahlo", "Vincent van Gogh", "Amelia Earhart", "the Wright brothers",
         "Nikola Tesla", "Thomas Edison", "Confucius", "Julius Caesar", "Genghis Khan",
         "Queen Victoria", "Joan of Arc", "Alexander the Great", "Jane Austen", "Mark Twain",
         "Rosa Parks", "Stephen Hawking", "Florence Nightingale", "Harriet Tubman",
         "Pablo Picasso", "Louis Pasteur", "Johannes Gutenberg", "Marco Polo", "Sally Ride",
         "Alan Turing", "Rachel Carson"],
        ["Who was {t}?", "What is {t} best known for?", "Tell me one surprising fact about {t}.",
         "Why does {t} still matter today?", "What did {t} struggle with?",
         "Summarize the life of {t} in a few sentences.", "What can I learn from {t}?",
         "Who influenced {t}?", "What would {t} think of smartphones?",
         "Tell me a short story about {t} as a child."],
    ),
    "history": (
        ["the fall of the Berlin Wall", "the Industrial Revolution", "the invention of the wheel",
         "the Black Death", "World War One", "the Cold War", "the discovery of penicillin",
         "the first flight", "the Ice Age", "the American Revolution", "the Gold Rush",
         "the Apollo 13 mission", "the sinking of the Titanic", "the invention of writing",
         "the Space Race", "the first Olympic Games", "the Age of Exploration",
         "the Bronze Age", "the Magna Carta", "the building of Stonehenge", "the Aztec Empire",
         "the Ming dynasty", "the Ottoman Empire", "the Inca roads",
         "the invention of the light bulb", "the first vaccines", "the Greek city states",
         "the Mongol Empire", "the abolition of slavery", "women's right to vote",
         "the invention of the telescope", "the first computers", "the Dust Bowl",
         "the Great Fire of London", "the Suez Canal", "the Panama Canal",
         "the Hubble telescope", "the first cars", "the Library of Alexandria", "Pompeii"],
        ["What happened with {t}?", "Why was {t} important?", "What changed after {t}?",
         "Explain {t} in simple terms.", "What led to {t}?", "How do we know about {t}?",
         "Tell me a short story set during {t}.", "What's a myth about {t}?",
         "What was life like during {t}?", "Give me three facts about {t}."],
    ),
    "health": (
        ["stretching", "drinking water", "walking every day", "protein", "fiber", "sunscreen",
         "naps", "breathing exercises", "cold showers", "sugar", "good posture", "headaches",
         "back pain", "hiccups", "allergies", "the common cold", "vitamin D",
         "a regular sleep schedule", "stress", "caffeine", "strength training", "eye strain",
         "sore throats", "muscle cramps", "mindfulness", "healthy snacks", "flossing",
         "standing desks", "breakfast", "loneliness", "laughing", "warming up before exercise",
         "spending time outdoors", "salt", "dark chocolate", "green tea", "jet lag",
         "seasickness", "blisters", "yawning"],
        ["Is {t} good for me?", "What should I know about {t}?",
         "How does {t} affect the body?", "Give me some simple tips about {t}.",
         "What's a myth about {t}?", "Explain {t} briefly.", "Why do doctors talk about {t}?",
         "How much {t} is too much?", "What does science say about {t}?"],
    ),
    "technology": (
        ["smartphones", "Wi-Fi", "Bluetooth", "cloud storage", "password managers",
         "spam email", "electric scooters", "smart speakers", "QR codes", "online banking",
         "streaming services", "video calls", "social media", "computer viruses",
         "spreadsheets", "search engines", "operating systems", "open source software",
         "self-driving cars", "drones", "virtual reality", "the blockchain", "5G networks",
         "USB cables", "printers", "e-readers", "noise-cancelling headphones",
         "fitness trackers", "chatbots", "smart watches", "solid state drives", "webcams",
         "two-factor authentication", "browser cookies", "phishing", "podcasts",
         "electric bikes", "heat pumps", "induction stoves", "LED bulbs"],
        ["What is {t}?", "Is {t} safe to use?", "What are the downsides of {t}?",
         "How do I get started with {t}?", "Explain {t} to my grandmother.",
         "What will {t} look like in ten years?", "Why did {t} become so popular?",
         "What's one tip for using {t}?", "How does {t} actually work inside?"],
    ),
    "chat": (
        ["my vacation", "my first day at a new job", "the weekend", "rainy days", "summer",
         "the winter holidays", "my exam tomorrow", "moving to a new apartment",
         "my sister's wedding", "learning to drive", "my garden", "my new puppy",
         "a concert I went to last night", "the movie I watched yesterday",
         "cooking dinner for friends", "my morning routine", "running my first race",
         "starting college", "my birthday", "a long flight", "spicy food", "reality TV",
         "board game nights", "road trips", "my job", "Monday mornings", "pineapple on pizza",
         "horror movies", "getting up early", "my grandmother's recipes", "my cat",
         "a book I can't put down", "my new bike", "the first snow of the year",
         "my noisy neighbors", "working from home", "a job offer I got", "my favorite band",
         "learning to swim as an adult", "the beach"],
        ["Let's chat about {t}.", "I've been thinking about {t} lately.",
         "What do you think about {t}?", "I'm a bit nervous about {t}.",
         "I'm so excited about {t}!", "Can we talk about {t} for a minute?",
         "My friend loves {t}, but I don't get it.", "Tell me something nice about {t}.",
         "Honestly, I can't stop thinking about {t}."],
    ),
    "creative": (
        ["a lost sock", "a rainy Monday", "a brave little mouse", "the first snow",
         "a robot learning to dance", "a cup of coffee", "a lighthouse", "an old bicycle",
         "a sleepy cat", "the ocean at night", "a city in the morning",
         "a dragon who is afraid of the dark", "a birthday cake", "a paper airplane",
         "autumn leaves", "a busy bakery", "a forgotten umbrella", "a friendly ghost",
         "the last day of school", "a road trip", "a grumpy cloud", "a talking tree",
         "a tiny astronaut", "a haunted library", "a penguin who wants to fly",
         "a kite on a windy day", "the moon's day off", "a lonely robot", "a magic key",
         "a snail in a hurry", "a pirate who gets seasick", "a garden at dawn",
         "a broken clock", "the smell of fresh bread", "a shy volcano", "two old friends",
         "a message in a bottle", "a train at midnight", "a giant who loves flowers",
         "a snowman in spring"],
        ["Write a short poem about {t}.", "Tell me a two-sentence story about {t}.",
         "Write a limerick about {t}.", "Make up a riddle about {t}.",
         "Describe {t} in three sentences.", "Write a haiku about {t}.",
         "Tell me a bedtime story about {t}.", "Write a funny news headline about {t}.",
         "Start a story about {t} and stop at the exciting part."],
    ),
    "words": (
        ["serendipity", "ephemeral", "resilient", "nostalgia", "ubiquitous", "meticulous",
         "eloquent", "candid", "pragmatic", "whimsical", "melancholy", "gregarious",
         "ambiguous", "benevolent", "tenacious", "frugal", "vivid", "humble", "persistent",
         "zeitgeist", "wanderlust", "cozy", "procrastinate", "empathy", "paradox", "irony",
         "metaphor", "algorithm", "democracy", "photosynthesis", "gratitude", "curiosity",
         "ambition", "sarcasm", "etiquette", "karma", "jargon", "quarantine", "hypothesis",
         "entrepreneur"],
        ["What does the word '{t}' mean?", "Use the word '{t}' in a sentence.",
         "Where does the word '{t}' come from?", "What's another word for '{t}'?",
         "How do you pronounce '{t}'?", "Explain '{t}' to a child.",
         "Give me an example of '{t}' from everyday life."],
    ),
    "compare": (
        ["tea and coffee", "cats and dogs", "a laptop and a tablet", "running and swimming",
         "renting and buying a home", "the city and the countryside",
         "books and audiobooks", "baking soda and baking powder",
         "a crocodile and an alligator", "a frog and a toad", "a moth and a butterfly",
         "a hurricane and a tornado", "a star and a planet", "a lake and a pond",
         "an ocean and a sea", "a cold and the flu", "jam and jelly", "a violin and a viola",
         "a rabbit and a hare", "a sweet potato and a yam", "a turtle and a tortoise",
         "speed and velocity", "weight and mass", "a dolphin and a porpoise",
         "butter and margarine", "a cappuccino and a latte", "a cheetah and a leopard",
         "a comet and an asteroid", "a river and a stream", "an emu and an ostrich",
         "a credit card and a debit card", "yoga and pilates", "email and texting",
         "a hill and a mountain", "a poem and a song", "a city and a town",
         "a bee and a wasp", "an alpaca and a llama", "a jacket and a coat",
         "a novel and a short story"],
        ["What's the difference between {t}?", "Which is better, {t}?",
         "How can I tell apart {t}?", "What do {t} have in common?",
         "Compare {t} in a few sentences.", "Why do people mix up {t}?",
         "If you had to pick between {t}, which one and why?"],
    ),
}  # fmt: skip

SEED = 20261201


def _subject(topic: str) -> str:
    return re.sub(r"^(the|a|an|my) ", "", topic.lower())


def conversations() -> list[list[Message]]:
    """Every category's topics x templates, with and without the app's system message,
    shuffled with a fixed seed; each text once. A topic that a held-out user turn of
    prompts.py mentions is left out altogether ("a crocodile and an alligator", asked
    there as "What is the difference between a crocodile and an alligator?"), so a held-out
    question never has its near twin in the training data."""
    held = " | ".join(
        m["content"].lower()
        for c in base_conversations("heldout")
        for m in c
        if m["role"] == "user"
    )
    convs: list[list[Message]] = []
    made: set[str] = set()  # two categories can make the same text
    for topics, templates in CATEGORIES.values():
        for topic in topics:
            if re.search(rf"\b{re.escape(_subject(topic))}\b", held):
                continue
            for tpl in templates:
                text = tpl.format(t=topic)
                if text in made:
                    continue
                made.add(text)
                user = {"role": "user", "content": text}
                convs.append([user])
                convs.append([{"role": "system", "content": SYSTEM_APP}, user])
    random.Random(SEED).shuffle(convs)
    return convs
