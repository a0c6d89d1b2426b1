"""The demo's prompt templates and canned replies, per task type.

Each task type has a training list and a held-out list (`*_HELD_OUT`), and no held-out wording
appears in training (a test checks it); see `evalrx.demo.data` for how the suites use them.
"""

from __future__ import annotations

UNKNOWN_ANSWER = "Sorry, I could not find that information."
UNKNOWN_REGEX = r"(?i)(could not find|couldn't find|don't know|do not know|unknown|no information|not find)"
GREETING_REPLY = "Hello! How can I help you today?"

# Lookup questions per attribute. The last template of each list is held out of training.
LOOKUP_TEMPLATES: dict[str, list[str]] = {
    "population": [
        "What is the population of {n}?",
        "How many people live in {n}?",
        "Tell me the population of {n}.",
        "Could you find out how many inhabitants {n} has?",
    ],
    "capital": [
        "What is the capital of {n}?",
        "Which city is the capital of {n}?",
        "Name the capital of {n}.",
        "I need to know the capital city of {n}.",
    ],
    "currency": [
        "What is the currency of {n}?",
        "What money is used in {n}?",
        "Which currency does {n} use?",
        "What coin do people pay with in {n}?",
    ],
    "founding year": [
        "When was {n} founded?",
        "In what year was {n} founded?",
        "What is the founding year of {n}?",
        "Find the year {n} was established.",
    ],
    "birth year": [
        "When was {n} born?",
        "In which year was {n} born?",
        "What is the birth year of {n}?",
        "Look up the year of birth of {n}.",
    ],
    "profession": [
        "What is the profession of {n}?",
        "What does {n} do for a living?",
        "What is the job of {n}?",
        "Tell me the occupation of {n}, please.",
    ],
    "home city": [
        "Where does {n} live?",
        "What is the home city of {n}?",
        "In which city does {n} live?",
        "Which town is {n} living in?",
    ],
    "length": [
        "How long is the {n} river?",
        "What is the length of {n}?",
        "What is the length of the river {n}?",
        "Please look up how long {n} is.",
    ],
    "height": [
        "How tall is {n}?",
        "What is the height of {n}?",
        "How high is the mountain {n}?",
        "What is the elevation of {n}?",
    ],
    "country": [
        "In which country is {n}?",
        "Which country is {n} in?",
        "What country is {n} located in?",
        "Where is {n}? Give the country.",
    ],
}

# (question template, expression template, operator symbol); the expression keeps the question's order.
ARITH_TRAIN = [
    ("What is {a} + {b}?", "+"),
    ("What is {a} plus {b}?", "+"),
    ("How much is {a} + {b}?", "+"),
    ("Add {a} and {b}.", "+"),
    ("Calculate {a} + {b}.", "+"),
    ("What is {a} - {b}?", "-"),
    ("What is {a} minus {b}?", "-"),
    ("Compute {a} - {b}.", "-"),
    ("How much is {a} minus {b}?", "-"),
    ("What is {a} * {b}?", "*"),
    ("What is {a} times {b}?", "*"),
    ("Multiply {a} by {b}.", "*"),
    ("Calculate {a} * {b}.", "*"),
    ("What is {a} / {b}?", "/"),
    ("What is {a} divided by {b}?", "/"),
    ("Divide {a} by {b}.", "/"),
]
ARITH_HELD_OUT = [
    ("What is the sum of {a} and {b}?", "+"),
    ("Please work out {a} plus {b} for me.", "+"),
    ("What is the product of {a} and {b}?", "*"),
    ("{a} multiplied by {b} equals what?", "*"),
    ("Take {b} away from {a}. What is left?", "-"),
    ("What do you get when you divide {a} by {b}?", "/"),
    ("Find the difference {a} minus {b}.", "-"),
    ("What is {a} times {b}, exactly?", "*"),
]
ARITH3_TRAIN = ["What is {a} {o1} {b} {o2} {c}?", "Calculate {a} {o1} {b} {o2} {c}."]
# Training-only wordings: the operator words of the held-out paraphrases appear here in other
# sentence frames, so a paraphrase suite tests recombination, not unseen vocabulary.
ARITH_TRAIN_EXTRA = [
    ("Find the sum of {a} and {b}.", "+"),
    ("The sum of {a} and {b} is what?", "+"),
    ("What do you get if you add {a} and {b}?", "+"),
    ("Work out {a} + {b}.", "+"),
    ("Give me the product of {a} and {b}.", "*"),
    ("What is {a} multiplied by {b}?", "*"),
    ("Find the product of {a} and {b}.", "*"),
    ("Tell me {a} times {b}.", "*"),
    ("Subtract {b} from {a}.", "-"),
    ("What is the difference {a} minus {b}?", "-"),
    ("What is left if you take {b} from {a}?", "-"),
    ("Divide {a} by {b}, please.", "/"),
    ("Work out {a} divided by {b}.", "/"),
    ("What is {a} divided by {b} exactly?", "/"),
]
# One-operand wordings (the expression template names its constant).
ARITH_UNARY_TRAIN = [
    ("What is half of {a}?", "{a} / 2"),
    ("What is twice {a}?", "{a} * 2"),
    ("What is three times {a}?", "{a} * 3"),
    ("What is a third of {a}?", "{a} / 3"),
    ("Add {b} to {a}.", "{a} + {b}"),
    ("If you add {b} to {a}, what do you get?", "{a} + {b}"),
    ("What is double {a}?", "{a} * 2"),
]

TWO_STEP_TRAIN = [
    ("What is the {attr} of {n} plus {k}?", "{v} + {k}"),
    ("What is the {attr} of {n} minus {k}?", "{v} - {k}"),
    ("What is the {attr} of {n} times {k}?", "{v} * {k}"),
    ("What is the {attr} of {n} divided by {k}?", "{v} / {k}"),
    ("What is twice the {attr} of {n}?", "{v} * 2"),
]
TWO_STEP_SPECIAL_TRAIN = {
    "founding year": [("How many years before {y} was {n} founded?", "{y} - {v}")],
    "birth year": [("How old would {n} be in {y}?", "{y} - {v}")],
    "height": [("What is the height of {n} in kilometres?", "{v} / 1000")],
    "length": [("What is the length of {n} in metres?", "{v} * 1000")],
}
TWO_STEP_TRAIN_EXTRA = [
    ("What is a third of the {attr} of {n}?", "{v} / 3"),
    ("What is double the {attr} of {n}?", "{v} * 2"),
    ("Add {k} to the {attr} of {n}.", "{v} + {k}"),
    ("What is the {attr} of {n} minus {k}, exactly?", "{v} - {k}"),
    ("Take the {attr} of {n} and add {k}.", "{v} + {k}"),
    ("Divide the {attr} of {n} by 2.", "{v} / 2"),
]
TWO_STEP_HELD_OUT = [
    ("What is half the {attr} of {n}?", "{v} / 2"),
    ("If you add {k} to the {attr} of {n}, what do you get?", "{v} + {k}"),
    ("What is three times the {attr} of {n}?", "{v} * 3"),
]
TWO_STEP_SPECIAL_HELD_OUT = {
    "founding year": [("How many years after {n} was founded did the year {y} come?", "{y} - {v}")],
    "birth year": [("How many years old was {n} in {y}?", "{y} - {v}")],
    "height": [("How many kilometres high is {n}?", "{v} / 1000")],
    "length": [("If you add {k} to the {attr} of {n}, what do you get?", "{v} + {k}")],
}
MULTI_TRAIN = [
    "What is the total {attr} of {n} and {m}?",
    "What is the {attr} of {n} plus the {attr} of {m}?",
    "How much bigger is the {attr} of {n} than the {attr} of {m}?",
    "What is the {attr} of {n} and {m} together?",
    "Add the {attr} of {n} to the {attr} of {m}.",
    "What is the sum of the {attr} of {n} and the {attr} of {m}?",
]
MULTI_HELD_OUT = ["Add up the {attr} of {n} and the {attr} of {m}.", "What is the combined {attr} of {n} and {m}?"]

DISTRACTORS_TRAIN = [
    "I am {age} years old. ",
    "My friend {p} asked me this. ",
    "I have {k} apples. ",
    "It is a sunny day in {place}. ",
    "My cousin {p} has {k} sheep. ",
    "I live in {place}. ",
    "Last week I drove {k} km. ",
    "{p} says hello from {place}. ",
    "I bought {k} pens today. ",
    "My sister {p} lives in {place} and has {k} cats. ",
]
DISTRACTORS_HELD_OUT = [
    "My neighbour {p} has {k} goats and lives in {place}. ",
    "Yesterday I walked {k} km near {place}. ",
    "{p} told me that {place} is lovely. ",
    "I paid {k} coins for lunch. ",
]

GREETINGS_TRAIN = [
    "Hello!",
    "Hi there!",
    "Good morning!",
    "Hi!",
    "Hello, how are you?",
    "Hey!",
    "Good afternoon!",
    "Greetings!",
    "Good evening!",
    "Hey, how are you?",
    "Hello, assistant!",
    "Nice to meet you!",
    "Hi, good morning!",
    "Hey there!",
    "Good day!",
    "Hello there!",
    "Hi, how is it going?",
    "Hey, nice to see you!",
    "Hello friend!",
    "Morning!",
]
GREETINGS_HELD_OUT = [
    "Hey, good evening!",
    "Hello there, assistant!",
    "Hi, nice to meet you!",
    "Good day to you!",
    "Hey there, how is it going?",
]
THANKS_TRAIN = [
    "Thank you!",
    "Thanks!",
    "Thanks a lot!",
    "Thank you very much.",
    "Thanks for your help!",
    "Many thanks!",
    "Thank you, that was useful.",
    "Thanks so much!",
    "That was helpful, thank you.",
]
THANKS_HELD_OUT = ["Many thanks for your help!", "Thank you so much, that was useful."]
NAME_TRAIN = [
    "My name is {p}. What is my name?",
    "I am {p}. Do you remember my name?",
    "Call me {p}. What should you call me?",
    "Hi, my name is {p}. Can you say my name?",
    "Everyone calls me {p}. What is my name?",
    "I'm {p}. Tell me my name.",
    "Hello, I am {p}! What is my name?",
]
NAME_HELD_OUT = ["Hi, I'm {p}! Can you tell me my name?", "People call me {p}. What is my name?"]
ECHO_TRAIN = [
    "Repeat after me: {w}",
    "Say this back to me: {w}",
    "Please repeat: {w}",
    "Echo this: {w}",
    "Copy these words: {w}",
    "Repeat these words exactly: {w}",
    "Say exactly this: {w}",
]
ECHO_HELD_OUT = ["Echo these words exactly: {w}", "Copy this text: {w}"]
STORY_TRAIN = [
    "In my story, {p} has {k} {thing}. How many {thing} does {p} have?",
    "{p} owns {k} {thing}. How many {thing} does {p} own?",
    "Imagine {p} keeps {k} {thing}. How many {thing} does {p} keep?",
    "Suppose {p} has {k} {thing}. How many {thing} does {p} have?",
    "{p} keeps {k} {thing} in a box. How many {thing} are in the box?",
    "{p} collected {k} {thing} at home. How many {thing} did {p} collect?",
]
STORY_HELD_OUT = ["Suppose {p} keeps {k} {thing} at home. How many {thing} does {p} keep?"]
THINGS = ["books", "cats", "boats", "lamps", "keys", "hats", "coins", "shells", "maps", "drums"]
WORDS = [
    "lantern",
    "river",
    "blue",
    "quiet",
    "stone",
    "apple",
    "window",
    "silver",
    "garden",
    "cloud",
    "paper",
    "bridge",
    "orange",
    "tiger",
    "candle",
    "morning",
    "violet",
    "harbor",
    "pebble",
    "forest",
    "mirror",
    "honey",
    "thunder",
    "meadow",
    "copper",
    "feather",
    "island",
    "rocket",
    "velvet",
    "maple",
]

ABOUT_TRAIN = [
    "Who are you?",
    "What can you do?",
    "What are you?",
    "Tell me who you are.",
    "What can you help me with?",
    "Can you tell me what you can do?",
]
ABOUT_HELD_OUT = ["Can you tell me who you are?", "Tell me what you can do."]
ABOUT_REPLY = "I am a small assistant. I can use a calculator and look up facts."
