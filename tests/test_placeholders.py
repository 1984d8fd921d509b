"""The recovery's matcher (rllm_renderers/bridging/placeholders.py) against the regular expression
it replaced: the same matches, ends and placeholder texts, on random renders and texts."""

from __future__ import annotations

import random
import re

from rllm_renderers.bridging.placeholders import NEEDLE, SearchedText, needle

BOUNDARIES = ["<e>", "<s>"]
ALPHABET = ["a", "b", "x", "<e>", "<s>", "<"]


def regex_match(rendered: str, text: str, whole: bool):
    """The match as the regular expression finds it: placeholders are lazy captures that hold no
    boundary; one written again must be the same text."""
    capture = f"(?:(?!{'|'.join(map(re.escape, BOUNDARIES))}).)*?"
    parts, seen, position = [], set(), 0
    for found in NEEDLE.finditer(rendered):
        parts.append(re.escape(rendered[position : found.start()]))
        number = found.group(1)
        parts.append(f"(?P=n{number})" if number in seen else f"(?P<n{number}>{capture})")
        seen.add(number)
        position = found.end()
    parts.append(re.escape(rendered[position:]))
    pattern = re.compile("".join(parts), re.DOTALL)
    match = pattern.fullmatch(text) if whole else pattern.match(text)
    return None if match is None else (match.end(), {int(name[1:]): value for name, value in match.groupdict().items()})


def random_render(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 5)):
        if rng.random() < 0.5:
            pieces.append(needle(rng.randint(0, 2)))
        else:
            pieces.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 3))))
    return "".join(pieces)


def test_the_matcher_finds_what_the_regular_expression_finds():
    rng = random.Random(33)
    compared = 0
    for _ in range(3000):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))
        rendered = random_render(rng)
        searched = SearchedText(text, BOUNDARIES)
        for whole in (False, True):
            found = searched.match(rendered, whole=whole)
            assert (None if found is None else (found.end, found.values)) == regex_match(rendered, text, whole), (
                text,
                rendered,
                whole,
            )
            compared += found is not None
    assert compared > 300  # (the random cases do match, not only fail)


def test_a_match_goes_on_from_an_earlier_one():
    text = "<s>user\nhello<e><s>assistant\nhi<e><s>user\nbye<e>"
    searched = SearchedText(text, BOUNDARIES)
    first = searched.match(f"<s>user\n{needle(0)}<e><s>assistant\n")
    assert first is not None and first.values == {0: "hello"}
    longer = f"<s>user\n{needle(0)}<e><s>assistant\nhi<e><s>user\n{needle(1)}<e>"
    assert searched.match(longer, whole=True, after=first) == searched.match(longer, whole=True)
    assert searched.match(longer, whole=True, after=first).values == {0: "hello", 1: "bye"}
    assert searched.match(f"<s>user\n{needle(0)}<e><s>user\n", after=first) is None  # (not its extension: from the start)
