"""Every relative link of the README and the docs pages points at a file that exists."""
import glob
import os
import re

from helpers.running import REPO

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _pages():
    return ["README.md", "BENCHMARKS.md", "RELIABILITY.md", "hostfiles/README.md",
            *sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))]


def test_relative_links_resolve():
    broken = []
    for page in _pages():
        with open(os.path.join(REPO, page)) as handle:
            text = handle.read()
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor on the same page
            path = os.path.normpath(os.path.join(REPO, os.path.dirname(page), target.split("#", 1)[0]))
            if not os.path.exists(path):
                broken.append(f"{page}: {target}")
    assert not broken, broken


def test_the_readme_is_a_front_page():
    """What it is, the two quick-start commands and where each topic lives, in under 150 lines."""
    with open(os.path.join(REPO, "README.md")) as handle:
        text = handle.read()
    assert len(text.splitlines()) < 150
    assert "make demo" in text and "make test" in text
    for page in glob.glob(os.path.join(REPO, "docs", "*.md")):
        assert f"docs/{os.path.basename(page)}" in text, f"README does not point at {page}"
