"""The held-out prompts of the local model's tool-use eval (`benchmarks/local_eval.py --set heldout`).

Written before any tuning of this round and never used for it: prompt and tool-protocol changes are tried on
the development set (`CASES` in local_eval.py, the 45 prompts of earlier rounds) and only then measured here.
Two kinds are new: `live` (live facts the tools answer, asked indirectly: "Is it raining in Lima?") and
`related` (general knowledge next to tools that look related: "What is the boiling point of water?" next to
a weather tool and a unit converter; no tool may be called). The others add fresh prompts to the old kinds.
The tools, the fixed clock (2026-03-14 09:30 UTC) and the scoring are local_eval.py's.
"""

from __future__ import annotations

from local_eval import ABSENT, C, Case, E, T, U, W

HELDOUT: list[Case] = [
    # live facts the tools answer, asked indirectly
    Case("live", "Is it raining in Lima?", (W("Lima"),), (("cloud", "not raining", "no rain"),)),
    Case("live", "Should I pack an umbrella for London today?", (W("London"),), ("overcast",)),
    Case("live", "Do I need a warm coat in Oslo right now?", (W("Oslo"),), (("-5", "snow"),)),
    Case("live", "Is it snowing in Berlin?", (W("Berlin"),), (("wind", "5"),)),
    Case("live", "How hot is it in Cairo at the moment?", (W("Cairo"),), ("35",)),
    Case("live", "Are the skies clear over Tokyo?", (W("Tokyo"),), ("clear",)),
    Case("live", "What's the weather like in New York this morning?", (W("New York"),), ("25",)),
    Case("live", "Is it colder in Oslo or in Berlin right now?", (W("Oslo"), W("Berlin")), ("Oslo",)),
    Case("live", "Is it still morning in Los Angeles?", (T("America/Los_Angeles"),), ("2:30",)),
    Case(
        "live",
        "Would it be rude to phone someone in Tokyo right now?",
        (T("Asia/Tokyo"),),
        (("18:30", "6:30"),),
    ),
    Case("live", "What's today's date in Sydney?", (T("Australia/Sydney"),), ("14",)),
    Case("live", "What time is it for our team in Kolkata?", (T("Asia/Kolkata"),), (("15:00", "3:00"),)),
    Case(
        "live",
        "Who is Lars Nilsson, what does he do here?",
        (E("Lars Nilsson", ("title", ABSENT)),),
        ("Finance Director",),
    ),
    Case("live", "Where is Maria Gonzalez based?", (E("Maria Gonzalez", ("office", ABSENT)),), ("Madrid",)),
    # general knowledge next to tools that look related: no call
    Case("related", "What is the capital of Japan?", (), ("Tokyo",)),
    Case("related", "What is the boiling point of water in Celsius?", (), ("100",)),
    Case("related", "What is the freezing point of water in Fahrenheit?", (), ("32",)),
    Case("related", "Why is the sky blue?", (), (("scatter", "Rayleigh"),)),
    Case("related", "What causes thunderstorms?", (), ()),
    Case("related", "What's the difference between weather and climate?", (), ()),
    Case("related", "How many centimeters are in a meter?", (), ("100",)),
    Case("related", "How many grams are in a kilogram?", (), ("1000",)),
    Case("related", "How many minutes are in an hour?", (), ("60",)),
    Case("related", "What is the formula for the area of a circle?", (), (("πr", "pi", "π"),)),
    Case("related", "What does a Finance Director do?", (), ()),
    Case("related", "What is a time zone?", (), ()),
    Case("related", "Who invented the telephone?", (), ("Bell",)),
    Case("related", "What is the largest ocean on Earth?", (), ("Pacific",)),
    Case("related", "What continent is Kenya in?", (), ("Africa",)),
    Case("related", "Who was the first person to walk on the Moon?", (), ("Armstrong",)),
    Case("related", "Name the planets of the solar system.", (), ("Mars",)),
    Case("related", "What's the plural of 'mouse'?", (), ("mice",)),
    Case("related", "Explain what an API is in one sentence.", (), ()),
    Case("related", "Recommend a good book about weather forecasting.", (), ()),
    Case(
        "related",
        "Write a SQL query that counts the rows in a table named users.",
        (),
        ("COUNT",),
        code=True,
    ),
    Case("related", "Translate 'good night' into French.", (), ("bonne nuit",)),
    # no tool: conversation
    Case("none", "Good morning!", (), ()),
    Case("none", "Can you tell me what you can help me with?", (), ()),
    Case("none", "Great, thank you very much.", (), ()),
    # one tool, stated plainly, and arguments to extract
    Case("one", "What is 981 minus 123?", (C("subtract", 981, 123),), ("858",)),
    Case("one", "Divide 7 by 4", (C("divide", 7, 4),), ("1.75",)),
    Case("one", "What is 12 squared?", (C("power", 12, 2),), ("144",)),
    Case("one", "How many pounds is 3 kilograms?", (U(3, "kilograms", "pounds"),), ("6.61",)),
    Case("one", "What time is it in Chicago?", (T("America/Chicago"),), (("04:30", "4:30"),)),
    Case(
        "one",
        "What's Lars Nilsson's email?",
        (E("Lars Nilsson", ("email", ABSENT)),),
        ("lars.nilsson@example.com",),
    ),
    Case("args", "Convert 1500 meters into miles.", (U(1500, "meters", "miles"),), ("0.93",)),
    Case(
        "args",
        "How many kilometers is a half marathon of 13.1 miles?",
        (U(13.1, "miles", "kilometers"),),
        ("21.08",),
    ),
    Case("args", "Get me the phone number for Aisha Okafor.", (E("Aisha Okafor", "phone"),), ("555 0142",)),
    Case("args", "Temperature in Sydney in fahrenheit?", (W("Sydney", "fahrenheit"),), ("86",)),
    Case("args", "What is -8 plus 3.5?", (C("add", -8, 3.5),), ("-4.5",)),
    Case("args", "Calculate 2.5 times 4.2", (C("multiply", 2.5, 4.2),), ("10.5",)),
    Case("args", "What is 9 to the power of 3?", (C("power", 9, 3),), ("729",)),
    # several calls at once
    Case("parallel", "What's the weather in Tokyo and in Cairo?", (W("Tokyo"), W("Cairo")), ("20", "35")),
    Case(
        "parallel",
        "Add 45 and 55, and multiply 6 by 7.",
        (C("add", 45, 55), C("multiply", 6, 7)),
        ("100", "42"),
    ),
    Case(
        "parallel",
        "What time is it in Berlin, and what's the weather there?",
        (T("Europe/Berlin"), W("Berlin")),
        ("10:30", "5"),
    ),
    Case(
        "parallel",
        "Which offices do Maria Gonzalez and Lars Nilsson work in?",
        (E("Maria Gonzalez", ("office", ABSENT)), E("Lars Nilsson", ("office", ABSENT))),
        ("Madrid", "Stockholm"),
    ),
    Case(
        "parallel",
        "Convert 10 miles to kilometers and 10 kilograms to pounds.",
        (U(10, "miles", "kilometers"), U(10, "kilograms", "pounds")),
        ("16.09", "22.05"),
    ),
    Case(
        "parallel",
        "What's the time in London and in Kolkata?",
        (T("Europe/London"), T("Asia/Kolkata")),
        ("09:30", "15:00"),
    ),
]

# A second held-out set, written on 2026-11-29 after the first set's misses had been read and one more change
# (a rejected forced call asked once more without its tool) had been chosen on development prompts only;
# committed before its first run and never used to choose anything (`--set heldout2`).
HELDOUT_2: list[Case] = [
    # live facts, asked indirectly (advice and comparisons among them)
    Case("live", "Will it be chilly in London this evening?", (W("London"),), ("10",)),
    Case("live", "Can I go swimming outdoors in Cairo today?", (W("Cairo"),), ("35",)),
    Case("live", "Is Sydney warmer than New York right now?", (W("Sydney"), W("New York")), ("30", "25")),
    Case("live", "Is it wet outside in Paris?", (W("Paris"),), ("rain",)),
    Case("live", "Should I wear a hat in Cairo?", (W("Cairo"),), ("35",)),
    Case("live", "Is it freezing in Oslo?", (W("Oslo"),), ("-5",)),
    Case("live", "Has the sun set in Sydney yet?", (T("Australia/Sydney"),), ("20:30",)),
    Case("live", "Is it lunchtime in New York?", (T("America/New_York"),), ("5:30",)),
    Case("live", "Is it too late to call Kolkata?", (T("Asia/Kolkata"),), ("15:00",)),
    Case("live", "Who is Lars Nilsson?", (E("Lars Nilsson", ("title", ABSENT)),), ("Finance Director",)),
    # general knowledge next to tools that look related: no call is right
    Case("related", "What is the capital of Norway?", (), ("Oslo",)),
    Case("related", "What is the average temperature on Mars?", (), ()),
    Case("related", "How many feet are in a mile?", (), (("5280", "5,280"),)),
    Case("related", "What does a Staff Engineer do?", (), ()),
    Case("related", "What is Tokyo's time zone called?", (), (("JST", "Japan Standard"),)),
    Case("related", "Who discovered penicillin?", (), ("Fleming",)),
    Case("related", "Why do we have seasons?", (), ("tilt",)),
    Case("related", "What language is spoken in Brazil?", (), ("Portuguese",)),
    Case("related", "How many hours are in a day?", (), ("24",)),
    Case("related", "What is a kilogram?", (), ()),
    # the old kinds
    Case("one", "What is 64 divided by 8?", (C("divide", 64, 8),), ("8",)),
    Case("one", "Weather in Berlin please", (W("Berlin"),), ("5",)),
    Case("one", "What time is it in Paris?", (T("Europe/Paris"),), ("10:30",)),
    Case("one", "Convert 42 kilometers to miles", (U(42, "kilometers", "miles"),), ("26.1",)),
    Case("args", "What is Lars Nilsson's phone number?", (E("Lars Nilsson", "phone"),), ("555 3190",)),
    Case("args", "Compute 15.5 minus 20", (C("subtract", 15.5, 20),), ("-4.5",)),
    Case("parallel", "What's the weather in Lima and in Cairo?", (W("Lima"), W("Cairo")), ("20", "35")),
    Case(
        "parallel",
        "Multiply 8 by 9 and divide 81 by 3.",
        (C("multiply", 8, 9), C("divide", 81, 3)),
        ("72", "27"),
    ),
    Case("none", "Hello there!", (), ()),
    Case("none", "Write a limerick about a cat.", (), ()),
]
