"""The documentation site (mkdocs.yml, docs/, the README as its home page)
builds with ``mkdocs build --strict``: no warning, so no link to a page, an
anchor or a file of the checkout that does not exist, and no page of docs/
left out of the nav (issue 41).

The strict build is first shown to fail on each of those, planted in a
small site made with the real mkdocs.yml's theme, hooks and validation
(``test_the_strict_build_fails_on_a_planted_fault``): a check that cannot
fail would pass a broken site.
"""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--config-file", str(config), "--site-dir", str(site)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.processes
def test_the_site_builds_without_a_warning(tmp_path):
    r = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, r.stderr
    assert "WARNING" not in r.stderr, r.stderr
    home = (tmp_path / "site" / "index.html").read_text()
    assert "<h1 id=\"kafkalite\">kafkalite</h1>" in home      # the README
    assert 'href="security/"' in home                         # docs/security.md, as the site has it
    # every page of docs/ is on the site
    for page in (ROOT / "docs").glob("*.md"):
        assert (tmp_path / "site" / page.stem / "index.html").exists(), page.name


def test_every_page_is_in_the_nav():
    """Said by the build too (a warning); here it names the page."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav):
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            yield from (pages(value) if isinstance(value, list) else [value])
    listed = set(pages(config["nav"]))
    assert sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name not in listed) == []
    assert "index.md" in listed


# A small site that builds cleanly: a README linking into docs/ and out of it,
# and two pages linking to each other, to an anchor and to a file of the checkout.
CLEAN = {
    "README.md": "# Home\n\nSee [one](docs/one.md) and [the tools](tools/mkdocs_hooks.py).\n",
    "docs/one.md": "# One\n\n## Part\n\n[two](two.md), [its part](two.md#part), "
                   "[the README](../README.md), [hooks](../tools/mkdocs_hooks.py).\n",
    "docs/two.md": "# Two\n\n## Part\n\n[one](one.md#part)\n",
}
NAV = [{"Home": "index.md"}, {"One": "one.md"}, {"Two": "two.md"}]


def small_site(root: Path, files: dict, nav: list) -> Path:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config["nav"] = nav
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "tools").mkdir(exist_ok=True)
    (root / "tools" / "mkdocs_hooks.py").write_text(
        (ROOT / "tools" / "mkdocs_hooks.py").read_text())
    (root / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return root / "mkdocs.yml"


@pytest.mark.processes
def test_the_small_site_builds(tmp_path):
    r = build(small_site(tmp_path, CLEAN, NAV), tmp_path / "site")
    assert r.returncode == 0, r.stderr
    one = (tmp_path / "site" / "one" / "index.html").read_text()
    assert "<code>tools/mkdocs_hooks.py</code>" in one      # a file of the checkout: its path
    assert '<a href="../">the README</a>' in one             # the README is the home page
    home = (tmp_path / "site" / "index.html").read_text()
    assert 'href="one/"' in home


PLANTED = {   # fault -> (files changed, nav, the build's warning)
    "a link to no page": ({"docs/two.md": "# Two\n\n## Part\n\n[gone](three.md)\n"}, NAV,
                          "contains a link 'three.md', but the target is not found"),
    "a link to no anchor": ({"docs/two.md": "# Two\n\n## Part\n\n[one](one.md#nowhere)\n"}, NAV,
                            "does not contain an anchor '#nowhere'"),
    "a page left out of the nav": ({}, NAV[:2], "exist in the docs directory, but are not "
                                                "included in the \"nav\" configuration:\n  - two.md"),
    "a nav entry for no page": ({}, NAV + [{"Three": "three.md"}],
                                "A reference to 'three.md' is included in the 'nav' configuration"),
    "a link to no file of the checkout": (
        {"docs/two.md": "# Two\n\n## Part\n\n[plot](../benchmarks/plot.png)\n"}, NAV,
        "two.md links to benchmarks/plot.png, which is not in the checkout"),
    "the README's link to no page": ({"README.md": "# Home\n\n[gone](docs/three.md)\n"}, NAV,
                                     "contains a link 'three.md', but the target is not found"),
}


@pytest.mark.processes
@pytest.mark.parametrize("fault", PLANTED)
def test_the_strict_build_fails_on_a_planted_fault(tmp_path, fault):
    files, nav, warning = PLANTED[fault]
    r = build(small_site(tmp_path, {**CLEAN, **files}, nav), tmp_path / "site")
    assert r.returncode == 1, f"{fault}: built\n{r.stderr}"
    assert warning in r.stderr, r.stderr
