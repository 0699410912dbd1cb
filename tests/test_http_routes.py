"""The one route table convention of kafkalite's HTTP apps
(kafkalite/http_routes.py): what each app's 404, 405 and path segments
rest on. The apps' own tests (tests/registry, tests/rest_proxy,
tests/iceberg_rest, tests/webconsole) check their tables over HTTP."""
from __future__ import annotations

import pytest

from kafkalite.http_routes import NoRoute, Router, WrongMethod, segment_names

ROUTER = Router([
    ("GET", "/", "root"),
    ("GET", "/subjects/{subject}/versions/{version}", "get"),
    ("DELETE", "/subjects/{subject}/versions/{version}", "delete"),
    ("POST", "/subjects/{subject}/versions", "register"),
])


def test_segments_come_decoded_in_the_templates_order():
    # the server hands PATH_INFO as Latin-1 text with an encoded slash kept as %2F
    path = "/subjects/" + "é-a%2Fb".encode().decode("latin-1") + "/versions/3/"
    assert ROUTER.find("GET", path) == ("get", ["é-a/b", "3"])
    assert segment_names("/subjects/{subject}/versions/{version}") == ["subject", "version"]


def test_head_is_get_and_a_trailing_slash_the_same_path():
    assert ROUTER.find("HEAD", "") == ("root", [])
    assert ROUTER.find("POST", "/subjects/s/versions/") == ("register", ["s"])


def test_another_method_is_405_with_the_methods_the_path_has_and_no_path_404():
    with pytest.raises(WrongMethod) as caught:
        ROUTER.find("PUT", "/subjects/s/versions/1")
    assert caught.value.allowed == ["GET", "DELETE"]
    with pytest.raises(NoRoute):
        ROUTER.find("GET", "/subjects//versions/1")      # a segment is never empty
    with pytest.raises(NoRoute):
        ROUTER.find("GET", "/subjects/s/versions/1/more")
