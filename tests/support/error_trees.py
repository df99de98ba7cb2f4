"""The one convention for exceptions, checked per package by its ``test_errors.py``.

Every public exception class of a package is defined in ``<package>.errors`` under the package's one
root, and that module's docstring draws the real tree: every class once, under its real parent,
with a few words on when it is raised. Private control-flow exceptions (an underscore name, or a
named signal such as the importers' ``Skip``) may live where they are used, if the package's test
lists them as exempt.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Mapping
from types import ModuleType

_NODE = re.compile(r"^(?P<lead>[ │]*)[├└]── (?P<name>\w+)(?P<rest>.*)$")


def exception_classes(package: str) -> dict[str, type[BaseException]]:
    """Every exception class defined in `package` (its modules and its subpackages' modules, all
    imported), by ``module.QualName`` of its definition."""
    root = importlib.import_module(package)
    modules = [root] + [importlib.import_module(info.name)
                        for info in pkgutil.walk_packages(root.__path__, f"{package}.")]
    found = {}
    for module in modules:
        for value in vars(module).values():
            if (inspect.isclass(value) and issubclass(value, BaseException)
                    and value.__module__.split(".")[0] == package):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def check_defined_in_errors(package: str, root: type[BaseException],
                            exempt: Mapping[str, str]) -> dict[str, type[BaseException]]:
    """Assert that every exception class of `package` but the `exempt` ones (``module.Name``: why)
    is defined in ``<package>.errors`` and is a `root`; returns the public classes by name."""
    found = exception_classes(package)
    assert set(exempt) <= set(found), f"exempt but gone: {sorted(set(exempt) - set(found))}"
    errors_module = f"{package}.errors"
    public = {}
    for where, cls in found.items():
        if where in exempt:
            assert cls.__module__ != errors_module, f"{where} is listed as exempt but lives in errors"
            continue
        assert cls.__module__ == errors_module, f"{where} is not defined in {errors_module}"
        assert not cls.__name__.startswith("_"), f"{where}: a private class in {errors_module}"
        assert issubclass(cls, root), f"{where} is not a {root.__name__}"
        public[cls.__name__] = cls
    return public


def drawn_tree(doc: str) -> dict[str, tuple[str | None, str]]:
    """The first tree a docstring draws in a ``::`` block: each class name -> (its parent, the
    text after the name on its line). The first line of the block is the root (parent None)."""
    block = doc.split("::\n", 1)[1].splitlines()
    lines = [line for line in block if line.strip()]
    first = lines[0].split(maxsplit=1)
    tree: dict[str, tuple[str | None, str]] = {first[0]: (None, first[1] if len(first) > 1 else "")}
    stack: list[tuple[int, str]] = [(-1, first[0])]
    for line in lines[1:]:
        if not line.startswith(" "):  # the block ended
            break
        node = _NODE.match(line)
        if node is None:  # a continuation line of the text above
            continue
        column, name = len(node["lead"]), node["name"]
        while stack[-1][0] >= column:
            stack.pop()
        assert name not in tree, f"{name} is drawn twice"
        tree[name] = (stack[-1][1], node["rest"].strip())
        stack.append((column, name))
    return tree


def check_drawn_tree(errors: ModuleType, root: type[BaseException]) -> None:
    """Assert that ``errors.__doc__`` draws exactly the exception classes `errors` defines, each
    under its real parent (its base defined in `errors`), with words on when it is raised, and that
    each is exported in ``__all__``."""
    defined = {name: value for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, BaseException)
               and value.__module__ == errors.__name__}
    assert set(defined) <= set(errors.__all__), sorted(set(defined) - set(errors.__all__))
    tree = drawn_tree(errors.__doc__)
    assert set(tree) == set(defined), (sorted(set(defined) - set(tree)), sorted(set(tree) - set(defined)))
    for name, (parent, text) in tree.items():
        cls = defined[name]
        own = [base.__name__ for base in cls.__bases__ if base.__module__ == errors.__name__]
        if parent is None:
            assert cls is root and own == [], name
        else:
            assert own == [parent], f"{name} is drawn under {parent}; its bases are {own}"
        words = re.sub(r"^\([\w, ]+\)", "", text).strip()  # the extra bases, "(ValueError)"
        assert len(words.split()) >= 2, f"{name}: the tree says nothing about when it is raised"
        extra = re.match(r"^\(([\w, ]+)\)", text)
        if extra:  # "(ValueError)" after a name is a promise: the class is one
            for base in extra[1].split(", "):
                assert any(b.__name__ == base for b in cls.__mro__), f"{name} is not a {base}"
