"""Kubernetes label selectors, as an Environment's ``spec.clusterSelector`` uses them.

An Environment decides which Clusters Orders deploy to, so the selector must mean exactly what it
means to the API server and to ``kubectl get -l``: a Cluster an admin sees selected there is the one
Kokumi registers with Argo CD. The semantics are apimachinery's ``LabelSelectorAsSelector``:

- every ``matchLabels`` entry and every ``matchExpressions`` requirement must hold;
- ``In`` needs at least one value and holds when the label has one of them;
- ``NotIn`` needs at least one value and holds when the label is missing or has none of them;
- ``Exists`` and ``DoesNotExist`` take no values;
- keys are qualified names (an optional DNS-subdomain prefix and ``/``, then a name of at most 63
  characters) and values are label values (at most 63 characters, possibly empty), as on labels;
- the empty selector ``{}`` selects everything.

An absent selector (``None``) is a :class:`SelectorError`, not a selector. Kubernetes reads a nil
selector as "nothing", the opposite of ``{}``; an error selects nothing as well, and also tells the
author why. The CRD requires ``clusterSelector``, so only an object written before the schema can
lack it.

Parsing is total: an Environment is written by people, and the actor that reads it must never die of
one. ``parse`` returns a :class:`Selector` or a :class:`SelectorError` whose one-line message names
the field and says the fix.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from kokumi.core.text import quoted, type_name

__all__ = [
    "DEFAULT_PATH",
    "EVERYTHING",
    "Operator",
    "Requirement",
    "Selector",
    "SelectorError",
    "parse",
]

DEFAULT_PATH: Final = "spec.clusterSelector"
"""Where an Environment keeps its selector: the field messages name unless told another."""


class Operator(enum.StrEnum):
    """The operators of ``matchExpressions``, spelled exactly as Kubernetes spells them."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


_QUOTED: Final = 80
"""User text longer than this is cut in a message: a selector's field is short."""

_OPERATORS: Final = ", ".join(op.value for op in Operator)


def _sorted_values(values: tuple[str, ...] | list[str] | frozenset[str]) -> tuple[str, ...]:
    """Values are a set to Kubernetes: one order and no duplicates make equal selectors equal."""
    return tuple(sorted(set(values)))


def _sorted_labels(
    labels: Mapping[str, str] | tuple[tuple[str, str], ...],
) -> tuple[tuple[str, str], ...]:
    items = labels.items() if isinstance(labels, Mapping) else labels
    return tuple(sorted(dict(items).items()))


@attrs.frozen
class Requirement:
    """One ``matchExpressions`` entry; ``values`` is empty for Exists and DoesNotExist."""

    key: str
    operator: Operator
    values: tuple[str, ...] = attrs.field(default=(), converter=_sorted_values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        match self.operator:
            case Operator.IN:
                return self.key in labels and labels[self.key] in self.values
            case Operator.NOT_IN:
                return self.key not in labels or labels[self.key] not in self.values
            case Operator.EXISTS:
                return self.key in labels
            case Operator.DOES_NOT_EXIST:
                return self.key not in labels

    def __str__(self) -> str:
        match self.operator:
            case Operator.IN:
                return f"{self.key} in ({','.join(self.values)})"
            case Operator.NOT_IN:
                return f"{self.key} notin ({','.join(self.values)})"
            case Operator.EXISTS:
                return self.key
            case Operator.DOES_NOT_EXIST:
                return f"!{self.key}"

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"key": self.key, "operator": self.operator.value}
        if self.values:
            body["values"] = list(self.values)
        return body


def _requirements(
    requirements: tuple[Requirement, ...] | list[Requirement],
) -> tuple[Requirement, ...]:
    return tuple(requirements)


@attrs.frozen
class Selector:
    """A parsed, valid label selector.

    Build one with :func:`parse`; the constructor trusts its arguments. ``match_labels`` is kept as
    sorted pairs so that a Selector is hashable and two equal selectors compare equal.
    """

    match_labels: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_sorted_labels)
    match_expressions: tuple[Requirement, ...] = attrs.field(default=(), converter=_requirements)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with ``labels`` is selected: every entry and requirement holds."""
        return all(
            key in labels and labels[key] == value for key, value in self.match_labels
        ) and all(requirement.matches(labels) for requirement in self.match_expressions)

    @property
    def selects_everything(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def __str__(self) -> str:
        """The form ``kubectl get -l`` and the API's ``labelSelector`` parameter read.

        matchLabels first, sorted by key, then the requirements in their order; values sorted.
        The empty selector gives the empty string, which selects everything there too. Valid keys
        and values need no quoting in this form, the keys ``in`` and ``notin`` included.
        """
        parts = [f"{key}={value}" for key, value in self.match_labels]
        parts.extend(str(requirement) for requirement in self.match_expressions)
        return ",".join(parts)

    def to_json(self) -> dict[str, Any]:
        """The selector as the API writes it, for objects Kokumi creates and for tests."""
        body: dict[str, Any] = {}
        if self.match_labels:
            body["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            body["matchExpressions"] = [r.to_json() for r in self.match_expressions]
        return body


EVERYTHING: Final = Selector()
"""The selector ``{}``."""


@attrs.frozen
class SelectorError:
    """Why a selector cannot be used: one line that names the field and says the fix.

    A value rather than an exception, like a kubeconfig ``Refusal``: callers keep it in a status
    condition, and a ``Selector | SelectorError`` return makes mypy insist that they look.
    """

    message: str

    def __str__(self) -> str:
        return self.message


def parse(obj: object, path: str = DEFAULT_PATH) -> Selector | SelectorError:
    """Read a label selector from its JSON form; ``path`` is where it sits, for messages.

    Total on purpose: any value, of any type, gives a Selector or a SelectorError, and even a bug
    here becomes a SelectorError rather than an exception in the actor that called it.
    """
    try:
        return _selector(obj, path)
    except _Invalid as invalid:
        return SelectorError(str(invalid))
    except Exception as error:
        return SelectorError(
            f"{path} could not be read ({type(error).__name__}), which is a bug in Kokumi, not in "
            "the selector: report it with Kokumi's version"
        )


# --- reading ------------------------------------------------------------------------------------


class _Invalid(Exception):
    """Carries a message out of nested checks; never leaves this module."""


def _selector(obj: object, path: str) -> Selector:
    if obj is None:
        raise _Invalid(
            f"{path} is missing, so it selects nothing: set it to {{}} to select everything, "
            "or to matchLabels and matchExpressions"
        )
    if not isinstance(obj, Mapping):
        raise _Invalid(
            f"{path} must be an object with matchLabels and matchExpressions, not "
            f"{type_name(obj)}: write {{}} to select everything, or e.g. "
            "{matchLabels: {fleet: edge}}"
        )
    for field in obj:
        if field not in ("matchLabels", "matchExpressions"):
            raise _Invalid(
                f"{_field(path, field)} is not a field of a label selector: "
                "use matchLabels and matchExpressions"
            )
    labels = _match_labels(obj.get("matchLabels"), f"{path}.matchLabels")
    expressions = _match_expressions(obj.get("matchExpressions"), f"{path}.matchExpressions")
    return Selector(labels, expressions)


def _match_labels(obj: object, path: str) -> tuple[tuple[str, str], ...]:
    if obj is None:
        return ()
    if not isinstance(obj, Mapping):
        raise _Invalid(
            f"{path} must be an object of label keys and values, such as {{fleet: edge}}, "
            f"not {type_name(obj)}"
        )
    pairs = []
    for key, value in obj.items():
        if not isinstance(key, str):
            raise _Invalid(
                f"{path} has the key {quoted(str(key), _QUOTED)}, which is {type_name(key)}, not a "
                "string: quote it"
            )
        problem = _key_problem(key)
        if problem is not None:
            raise _Invalid(f"{path} key {quoted(key, _QUOTED)} is not a valid label key: {problem}")
        pairs.append((key, _label_value(value, f"{path}[{quoted(key, _QUOTED)}]")))
    return tuple(pairs)


def _match_expressions(obj: object, path: str) -> tuple[Requirement, ...]:
    if obj is None:
        return ()
    if not isinstance(obj, list | tuple):
        raise _Invalid(
            f"{path} must be a list of requirements with key, operator and values, "
            f"not {type_name(obj)}: write it as a list"
        )
    return tuple(_requirement(item, f"{path}[{index}]") for index, item in enumerate(obj))


def _requirement(obj: object, path: str) -> Requirement:
    if not isinstance(obj, Mapping):
        raise _Invalid(
            f"{path} must be an object with key, operator and values, not {type_name(obj)}: "
            "write it as {key: fleet, operator: In, values: [edge]}"
        )
    for field in obj:
        if field not in ("key", "operator", "values"):
            raise _Invalid(
                f"{_field(path, field)} is not a field of a requirement: "
                "use key, operator and values"
            )
    key = obj.get("key")
    if key is None:
        raise _Invalid(f"{path}.key is missing: name the label the requirement is about")
    if not isinstance(key, str):
        raise _Invalid(f"{path}.key must be a string, not {type_name(key)}: quote it")
    problem = _key_problem(key)
    if problem is not None:
        raise _Invalid(f"{path}.key {quoted(key, _QUOTED)} is not a valid label key: {problem}")

    raw_operator = obj.get("operator")
    if raw_operator is None:
        raise _Invalid(f"{path}.operator is missing: use one of {_OPERATORS}")
    if not isinstance(raw_operator, str):
        raise _Invalid(
            f"{path}.operator must be a string, not {type_name(raw_operator)}: "
            f"write one of {_OPERATORS}"
        )
    try:
        operator = Operator(raw_operator)
    except ValueError:
        raise _Invalid(
            f"{path}.operator {quoted(raw_operator, _QUOTED)} is not one of {_OPERATORS}: "
            f"{_operator_fix(raw_operator)}"
        ) from None

    values = _values(obj.get("values"), f"{path}.values")
    if operator in (Operator.IN, Operator.NOT_IN) and not values:
        raise _Invalid(
            f"{path}.values must hold at least one value for operator {operator}: add the label "
            f"values to match, or use {'Exists' if operator is Operator.IN else 'DoesNotExist'} "
            "to test only the key"
        )
    if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
        raise _Invalid(
            f"{path}.values must be empty for operator {operator}: remove values, or use "
            f"{'In' if operator is Operator.EXISTS else 'NotIn'} to match them"
        )
    return Requirement(key, operator, values)


def _values(obj: object, path: str) -> tuple[str, ...]:
    if obj is None:
        return ()
    if not isinstance(obj, list | tuple):
        example = f"[{_plain(obj)}]" if isinstance(obj, str | int | float) else "[eu, us]"
        raise _Invalid(
            f"{path} must be a list of label values, not {type_name(obj)}: write it as a "
            f"list, such as {example}"
        )
    values = []
    for index, value in enumerate(obj):
        values.append(_label_value(value, f"{path}[{index}]"))
    return tuple(values)


def _operator_fix(operator: str) -> str:
    for known in Operator:
        if operator.strip().lower() == known.value.lower():
            return f"write {known.value}, with this spelling"
    if operator.strip().lower() in ("=", "==", "equals", "eq"):
        return "use In with one value, or matchLabels"
    if operator.strip().lower() in ("!=", "notequals", "ne"):
        return "use NotIn with one value"
    return "pick one, such as In to match values or Exists to require the key"


# --- Kubernetes' rules for label keys and values (apimachinery validation) ----------------------

_NAME: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_VALUE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

_NAME_RULE: Final = (
    "alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
)


def _key_problem(key: str) -> str | None:
    """What is wrong with a label key by ``IsQualifiedName``, or None when it is valid."""
    parts = key.split("/")
    if len(parts) > 2:
        return (
            "use at most one '/', between an optional DNS subdomain prefix and the name, "
            "such as example.com/tier"
        )
    if len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return (
                "the prefix before '/' is empty: remove the '/' or write a DNS subdomain before it"
            )
        if len(prefix) > 253:
            return "the prefix before '/' is longer than 253 characters, shorten it"
        if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return (
                "the prefix before '/' must be a DNS subdomain of lower-case alphanumeric "
                "characters, '-' and '.', such as example.com"
            )
    else:
        name = parts[0]
    if not name:
        return "the name is empty: write one of " + _NAME_RULE
    if len(name) > 63:
        return "the name is longer than 63 characters, shorten it"
    if not _NAME.fullmatch(name):
        return f"the name must consist of {_NAME_RULE}"
    return None


def _label_value(value: object, where: str) -> str:
    """``value`` as a label value, or the reason it is none, said at ``where``."""
    if not isinstance(value, str):
        raise _Invalid(
            f"{where} must be a string, not {type_name(value)}: quote the value, "
            f'such as "{_plain(value)}"'
        )
    problem = _value_problem(value)
    if problem is not None:
        raise _Invalid(f"{where} {quoted(value, _QUOTED)} is not a valid label value: {problem}")
    return value


def _value_problem(value: str) -> str | None:
    """What is wrong with a label value by ``IsValidLabelValue``, or None when it is valid."""
    if len(value) > 63:
        return "it is longer than 63 characters, shorten it"
    if not _VALUE.fullmatch(value):
        return f"write it empty or with {_NAME_RULE}"
    return None


# --- messages -----------------------------------------------------------------------------------


def _field(path: str, field: object) -> str:
    if isinstance(field, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", field):
        return f"{path}.{field}"
    return f"{path}[{quoted(str(field), _QUOTED)}]"


def _plain(value: object) -> str:
    """A scalar as it would read inside quotes in a fix, such as ``"1"`` for the number 1."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return quoted(str(value), _QUOTED)[1:-1]
    return "..."
