"""The package's error classes are the server's error tree (src/errors.ts, generated into ``_generated.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import minisandbox
import pytest
from minisandbox import errors
from minisandbox._generated import CODE_CLASSES, ERROR_PARENTS, HTTP_STATUS
from minisandbox.errors import CLASSES, MinisandboxError, class_of, error_for

PACKAGE = Path(minisandbox.__file__).parent


def _tree_parent(cls: type[MinisandboxError]) -> str | None:
    """The nearest base of a Python class that is itself a class of the tree."""
    for base in cls.__mro__[1:]:
        if base.__name__ in CLASSES and CLASSES[base.__name__] is base:
            return base.__name__
    return None


def test_every_class_of_the_package_has_the_tree_s_name_and_parent() -> None:
    assert set(CLASSES) <= set(ERROR_PARENTS)
    for name, cls in CLASSES.items():
        assert _tree_parent(cls) == ERROR_PARENTS[name], name
    assert len(CLASSES) >= 20, "the package tells the server's error classes apart"
    assert all(issubclass(c, MinisandboxError) for c in CLASSES.values())


def test_a_class_the_package_lacks_raises_its_nearest_ancestor_s() -> None:
    parents = {**ERROR_PARENTS, "ImageNotFoundError": "NotFoundError", "OddError": "ImageNotFoundError"}
    with pytest.MonkeyPatch.context() as m:
        m.setattr(errors, "ERROR_PARENTS", parents)
        assert class_of("OddError") is errors.NotFoundError
        assert class_of("SandboxNotFoundError") is errors.SandboxNotFoundError
        assert class_of("NoSuchClass") is MinisandboxError


def test_the_package_exports_every_class_of_the_tree_it_defines() -> None:
    exported = set(minisandbox.__all__)
    missing = {name for name in CLASSES if name not in exported and name != "NotImplementedError"}
    assert missing == set()
    assert set(errors.__all__) >= set(CLASSES)


@pytest.mark.parametrize("code", sorted(HTTP_STATUS))
def test_an_answer_with_a_code_raises_that_code_s_class(code: str) -> None:
    status = HTTP_STATUS[code]
    e = error_for(status, {"detail": "what happened", "code": code}, "POST /x")
    assert type(e) is class_of(CODE_CLASSES[code])
    assert CODE_CLASSES[code] not in CLASSES or type(e).__name__ == CODE_CLASSES[code]
    assert (e.code, e.status, e.detail) == (code, status, "what happened")
    assert str(e) == f"POST /x: what happened (HTTP {status})"


def test_an_answer_without_a_known_code_means_the_first_code_of_its_status() -> None:
    validation = error_for(422, {"detail": [{"loc": ["body", "n"], "type": "missing"}]}, "POST /x")
    assert isinstance(validation, errors.RequestValidationError)
    assert validation.code == "validation_failed"
    assert isinstance(validation.detail, list)
    assert "loc" in str(validation)
    assert type(error_for(503, {"detail": "shutting down"}, "x")) is errors.UnavailableError
    assert type(error_for(404, {"detail": "Not Found"}, "x")) is errors.NotFoundError
    assert type(error_for(403, {"detail": "Not authenticated", "code": "someone_else"}, "x")) is errors.ForbiddenError
    assert error_for(403, {"code": "someone_else"}, "x").code == "someone_else", "an unknown code is kept"
    odd = error_for(502, "<html>bad gateway</html>", "GET /y")
    assert type(odd) is MinisandboxError
    assert odd.code == "http_502"
    assert "bad gateway" in str(odd)


def test_error_classes_are_also_the_python_exceptions_they_mean() -> None:
    assert issubclass(errors.InvalidInputError, ValueError)
    assert issubclass(errors.AuthError, PermissionError)
    assert issubclass(errors.NotFoundError, LookupError)
    assert issubclass(errors.ServerUnreachableError, ConnectionError)
    assert issubclass(errors.NotImplementedError, NotImplementedError)
    assert issubclass(errors.SandboxLostError, errors.SandboxError)


def _compared_codes() -> list[tuple[str, int, str]]:
    """Every string the package compares an error's ``.code`` with (``e.code == "..."``, ``in (...)``)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute)):
                continue
            if node.left.attr != "code":
                continue
            for comparator in node.comparators:
                values = comparator.elts if isinstance(comparator, (ast.Tuple, ast.List, ast.Set)) else [comparator]
                for v in values:
                    if isinstance(v, ast.Constant) and isinstance(v.value, str):
                        found.append((str(path.relative_to(PACKAGE)), node.lineno, v.value))
    return found


def test_every_code_the_package_compares_with_is_a_code_of_the_server() -> None:
    compared = _compared_codes()
    assert len(compared) >= 3, "the fleet's comparisons were found"
    unknown = [c for c in compared if c[2] not in HTTP_STATUS]
    assert unknown == []
