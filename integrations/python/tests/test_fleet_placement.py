"""Placement of work on images (no Ray): a planned row on an image is placed by its canonical reference, a node
that lists the image is warm for it, and an image is never fetched through the layer cache."""

from __future__ import annotations

from minisandbox.fleet.placement import NodeState, Placement, is_image, placement_key

REF = "docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
KEY = "a" * 64


def test_planned_rows_on_images_are_placed_by_their_image() -> None:
    assert placement_key({"env_key": KEY, "image": REF}) == REF
    assert placement_key({"env_key": KEY}) == KEY
    assert is_image(REF)
    assert not is_image(KEY)
    assert not is_image(None)


def test_a_node_holding_the_image_is_warm_for_it_and_a_source_of_it() -> None:
    p = Placement()
    p.add(NodeState("n0", "n0", "http://127.0.0.1:1", "t0", slots=2, layers={KEY: "d"}))
    p.add(NodeState("n1", "n1", "http://127.0.0.1:2", "t1", slots=2, layers={REF: None}))
    node, warm = p.choose(REF)  # type: ignore[misc]
    assert (node.name, warm) == ("n1", True)
    assert p.held_anywhere(REF)
    assert [s["url"] for s in p.sources(REF, exclude="n0")] == ["http://127.0.0.1:2"]
    p.done("n1", REF, ok=True)
    node, warm = p.choose(KEY)  # type: ignore[misc]
    assert (node.name, warm) == ("n0", True)
