"""MkDocs hooks of the documentation site (mkdocs.yml): the README is the
site's home page, and a link is resolved where its Markdown file lies in
the checkout.

The site is built from docs/ alone. The README, at the top of the checkout
with its links written for a reader of the repository (``docs/security.md``),
becomes the site's ``index.md``, its links to pages rewritten to the site's
(``security.md``); a page's link to the README (``../README.md#tests``) goes
to the home page. A link to any other file of the checkout outside docs/
(``../benchmarks/README.md``, a plot) has nothing to point at on the site,
so there it is shown as the file's path; such a link to a file that is not
in the checkout is logged as a warning, which ``mkdocs build --strict``
(tests/test_docs_site.py) fails on, as MkDocs fails a broken link between
pages. Links inside fenced code blocks are code, left alone.

Who calls: MkDocs, once per build (``on_files``) and once per page
(``on_page_markdown``).
"""
from __future__ import annotations

import logging
import os
import re

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.kafkalite")

HOME = "README.md"                         # beside mkdocs.yml
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)     # http:, mailto:, ...


def on_files(files, config):
    if files.get_file_from_path("index.md") is None:
        files.append(File.generated(config, "index.md",
                                    abs_src_path=os.path.join(_root(config), HOME)))
    return files


def on_page_markdown(markdown, page, config, files):
    source_dir = os.path.dirname(page.file.abs_src_path)
    site_dir = os.path.join(config.docs_dir, os.path.dirname(page.file.src_uri))

    def resolve(m: re.Match) -> str:
        image, text, target = m.groups()
        if EXTERNAL.match(target) or target.startswith("#"):
            return m.group(0)
        path, sep, anchor = target.partition("#")
        real = os.path.normpath(os.path.join(source_dir, path))
        if real == os.path.join(_root(config), HOME):
            real = os.path.join(os.path.abspath(config.docs_dir), "index.md")
        if _inside(real, config.docs_dir):
            return f"{image}[{text}]({os.path.relpath(real, site_dir)}{sep}{anchor})"
        shown = os.path.relpath(real, _root(config))
        if not os.path.exists(real):
            log.warning("%s links to %s, which is not in the checkout", page.file.src_uri, shown)
            return m.group(0)
        if text.strip("`") == shown:
            return f"`{shown}`"
        return f"{text} (`{shown}`)"

    out, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            line = LINK.sub(resolve, line)
        out.append(line)
    return "\n".join(out)


def _root(config) -> str:
    return os.path.dirname(os.path.abspath(config.config_file_path))


def _inside(path: str, directory: str) -> bool:
    return os.path.commonpath([path, os.path.abspath(directory)]) == os.path.abspath(directory)
