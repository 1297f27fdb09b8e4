"""What the documentation site's tests check its pages for, shared by tests/test_docs_pages.py (the Markdown
sources, no browser) and tests/test_docs_site.py (the built site, in Chromium)."""

import re

# The pages under "Topics" in docs/mkdocs.yml: each opens with what it is for and an example.
TOPICS = ("encodings.md", "attention.md", "long-context.md", "squares-lab.md", "length-lab.md", "scale-out.md",
          "differences.md", "promises.md", "where-things-are.md")
# Where measurement history belongs (commits, timing histories, benchmark invocations): not user pages.
DEVELOPMENT_PAGES = ("benchmarks.md", "development.md")
# The pages that show a picture, and which (files docs/site_figures.py draws into figures/).
FIGURE_PAGES = {
    "encodings.md": ("encodings-sinusoidal.png", "encodings-alibi.png"),
    "attention.md": ("attention-query-and-keys.png",),
    "length-lab.md": ("length-lab-ruoss2023.png", "length-lab-kazemnejad2023.png"),
}

# A commit: 7 to 40 hexadecimal characters with a letter and a digit among them, standing alone (not part
# of a longer word, a number, a path, an address or `owner/repo@hash`, a paper's reference code pinned at
# a version); or digits alone right after the word commit.
COMMIT = re.compile(r"(?<![\w.@/#+-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])"
                    r"|\bcommits?\s+`?([0-9a-f]{7,40})\b")


def commits(text: str) -> list[str]:
    """Every commit ``text`` names."""
    return [m.group(1) or m.group(0) for m in COMMIT.finditer(text)]
