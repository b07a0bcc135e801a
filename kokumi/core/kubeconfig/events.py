"""A kubeconfig's text as a document, built from the YAML parser's events, within limits.

The text is anybody's: a general YAML loader follows aliases, recurses without a limit in C and
resolves base-60 numbers in quadratic time. Only libyaml's parser is used; the document is built
here with what a kubeconfig needs, its depth, size and CPU time bounded, a key given twice refused,
and an error located without quoting what could be a token.
"""

from __future__ import annotations

import json
import re
import time
from typing import Final, NoReturn

import yaml

from kokumi.core.kubeconfig.connection import FLATTEN, MAX_SIZE, Code, refuse
from kokumi.core.text import quoted

__all__ = ["MAX_DEPTH", "MAX_EVENTS", "MAX_NUMBER", "PARSE_BUDGET", "load", "too_complex"]

_Loader: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Only its parser is used (libyaml's is ten times faster): _compose builds the document.

_QUOTED: Final = re.compile(r"'(?!<)[^']*'|\"[^\"]*\"")


def load(text: str | bytes) -> object:
    """The document of ``text``, within the bounds above, or refused; the reader's one way in."""
    size = len(text) if isinstance(text, bytes) or text.isascii() else _utf8_size(text)
    if size > MAX_SIZE:
        refuse(
            Code.TOO_LARGE,
            "the kubeconfig is larger than 1 MiB: keep only the context Kokumi uses, with its "
            "cluster and user, e.g. with kubectl config view --minify --flatten",
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError:
            refuse(Code.NOT_YAML, "the kubeconfig is not UTF-8 text: save it as UTF-8")
    document: object
    if text.lstrip().startswith("{"):
        # client-go reads JSON as JSON; PyYAML's YAML 1.1 rejects some valid JSON (tabs, "\/").
        repeated: list[bool] = []

        def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
            mapping = dict(pairs)
            if len(mapping) != len(pairs):
                repeated.append(True)
            return mapping

        try:
            document = json.loads(text, object_pairs_hook=unique)
            # A \ud800 escape alone is no character; libyaml refuses it, and so does minimise.
            json.dumps(document, ensure_ascii=False).encode()
        except (ValueError, RecursionError):
            pass  # a YAML flow mapping, or broken: YAML says which
        else:
            if repeated:
                _repeated_json_key(text)
            return _nonempty(document)
    try:
        document = _compose(text)
    except yaml.MarkedYAMLError as error:
        refuse(
            Code.NOT_YAML,
            f"the kubeconfig is not valid YAML or JSON{_where(error)}: fix its syntax",
        )
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError):
        refuse(
            Code.NOT_YAML,
            "the kubeconfig is not valid YAML or JSON (a value cannot be read): fix its syntax",
        )
    return _nonempty(document)


MAX_DEPTH: Final = 64
"""A kubeconfig nests five or six levels; libyaml's composer recurses in C without a limit, so
Kokumi builds the document from the events itself and refuses one nested deeper than this."""

PARSE_BUDGET: Final = 2.0
"""Seconds of CPU a parse may take (of the thread it runs on). The typical kubeconfig costs a
fraction of a millisecond and a 1 MiB one of many tiny values about a second; a parse in a worker
thread cannot be cancelled from outside, so it stops itself here, whatever the text holds."""

_BUDGET_EVERY: Final = 256  # events between two looks at the clock

MAX_EVENTS: Final = 100_000
"""YAML events (values, mappings, lists and their ends) a kubeconfig may hold: the budget of a
parse that does not depend on the machine or its load. A kubeconfig of 2,000 contexts, each
with its own cluster and user, holds about 62,000; 1 MiB of tiny values (``[a,a,…]``) 500,000,
which took 2 s of CPU. Refused at the event past it, after about 0.2 s."""

MAX_NUMBER: Final = 100
"""Characters of the longest number read as one: no kubeconfig field is a number that long, and
converting a long one costs time quadratic in its length."""

_STR: Final = "tag:yaml.org,2002:str"

_MAP: Final = "tag:yaml.org,2002:map"

_SEQ: Final = "tag:yaml.org,2002:seq"

_NULLS: Final = frozenset({"", "~", "null", "Null", "NULL"})

_TRUE: Final = frozenset({"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})

_FALSE: Final = frozenset({"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})

# YAML 1.1's integers and floats as PyYAML resolves them, without the base-60 forms (1:20:30),
# whose conversion is quadratic, and which no kubeconfig field holds.
_INT: Final = re.compile(
    r"[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+"
)

_FLOAT: Final = re.compile(
    r"[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)

_TAGGED: Final = {
    "tag:yaml.org,2002:null": type(None),
    "tag:yaml.org,2002:bool": bool,
    "tag:yaml.org,2002:int": int,
    "tag:yaml.org,2002:float": float,
}


def _compose(text: str) -> object:
    """The document, built from the parser's events with only what a kubeconfig needs.

    A kubeconfig is strings, booleans and a few numbers in mappings and lists. YAML's extras
    are refused as their events come, before they cost anything: anchors and aliases (an alias
    bomb multiplies a few hundred bytes into gigabytes), merge keys (which copy), explicit tags
    other than the core schema's, and nesting deeper than :data:`MAX_DEPTH`. Scalars resolve as
    PyYAML's safe loader would, except base-60 numbers and timestamps, which stay strings (as
    kubectl reads them into its string fields). A key repeated in a mapping is refused at its
    second place, which a dict would silently keep instead of the first. Iterative, so depth
    costs no recursion.
    """
    started = time.thread_time()
    stack: list[list[object] | dict[object, object]] = []
    keys: list[object] = []  # per open mapping: the key waiting for its value, or _NO_KEY
    documents = 0
    result: object = None
    for count, event in enumerate(yaml.parse(text, Loader=_Loader)):
        if count >= MAX_EVENTS:
            refuse(
                Code.TOO_COMPLEX,
                f"the kubeconfig holds more than {MAX_EVENTS:,} YAML values, mappings and "
                f"lists: keep only the contexts Kokumi uses, with their clusters and users, "
                f"{FLATTEN}",
            )
        if count % _BUDGET_EVERY == 0 and time.thread_time() - started > PARSE_BUDGET:
            too_complex()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            refuse(
                Code.NOT_YAML,
                f"the kubeconfig uses YAML anchors or aliases (&, *){_at(event)}, which a "
                "kubeconfig has no need of: write each value out",
            )
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                _syntax(
                    event, "expected a single document in the stream but found another document"
                )
            continue
        value: object
        if isinstance(event, yaml.ScalarEvent):
            value = _scalar(event)
        elif isinstance(event, yaml.CollectionStartEvent):
            _check_tag(event, _MAP if isinstance(event, yaml.MappingStartEvent) else _SEQ)
            if len(stack) >= MAX_DEPTH:
                refuse(
                    Code.NOT_YAML,
                    f"the kubeconfig nests deeper than {MAX_DEPTH} levels: a kubeconfig is a "
                    "few levels deep; write it as kubectl config view --minify --flatten does",
                )
            container: list[object] | dict[object, object] = (
                {} if isinstance(event, yaml.MappingStartEvent) else []
            )
            stack.append(container)
            keys.append(_NO_KEY)
            continue
        elif isinstance(event, yaml.CollectionEndEvent):
            value = stack.pop()
            keys.pop()
        else:
            continue  # stream and document boundaries
        if not stack:
            result = value
            continue
        parent = stack[-1]
        if isinstance(parent, list):
            parent.append(value)
        elif keys[-1] is _NO_KEY:
            if isinstance(value, list | dict):
                _syntax(event, "found a mapping or a list as a key")
            if value == "<<" and isinstance(event, yaml.ScalarEvent) and not event.style:
                refuse(
                    Code.NOT_YAML,
                    f"the kubeconfig uses a YAML merge key (<<){_at(event)}, which a kubeconfig "
                    "has no need of: write the mapping out",
                )
            if value in parent:  # one hash lookup: linear in the keys, whatever they are
                _repeated_key(value, _at(event))
            keys[-1] = value
        else:
            parent[keys[-1]] = value
            keys[-1] = _NO_KEY
    return result


_NO_KEY: Final = object()


def too_complex() -> NoReturn:
    """Refuse a read past :data:`PARSE_BUDGET`: the backstop beside the deterministic bounds."""
    refuse(
        Code.TOO_COMPLEX,
        f"reading the kubeconfig took more than {PARSE_BUDGET:g} s of CPU: keep only the "
        f"context Kokumi uses, with its cluster and user, {FLATTEN}",
    )


def _at(event: yaml.Event) -> str:
    mark = event.start_mark
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _syntax(event: yaml.Event, problem: str) -> NoReturn:
    """Refused as PyYAML's composer would have: where, and its words (never the value)."""
    mark = event.start_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    refuse(
        Code.NOT_YAML,
        f"the kubeconfig is not valid YAML or JSON ({where}{problem}): fix its syntax",
    )


# The keys of client-go's kubeconfig types (v1.Config and what it holds): a repeated key is named
# only if it is one of these, since any other key is text of the tenant's that could be anything.
_FIELDS: Final = frozenset(
    {
        *("apiVersion", "kind", "preferences", "clusters", "contexts", "users"),
        *("current-context", "extensions", "extension", "colors", "name", "cluster", "context"),
        *("user", "namespace", "server", "tls-server-name", "insecure-skip-tls-verify"),
        *("certificate-authority", "certificate-authority-data", "proxy-url"),
        *("disable-compression", "client-certificate", "client-certificate-data", "client-key"),
        *("client-key-data", "token", "tokenFile", "as", "as-uid", "as-groups", "as-user-extra"),
        *("username", "password", "auth-provider", "config", "exec", "command", "args", "env"),
        *("value", "installHint", "provideClusterInfo", "interactiveMode"),
    }
)


def _repeated_key(key: object, where: str) -> NoReturn:
    """Refuse a key given twice in one mapping, wherever it is: YAML forbids it and JSON leaves
    it open, so readers of the same text disagree (a dict, and client-go, keep the last value;
    yaml.v3, ruamel.yaml and js-yaml refuse the text). Read the last, Kokumi and Argo CD could
    reach another server than the next reader of the Secret does.
    """
    named = f"the key {quoted(key)}" if isinstance(key, str) and key in _FIELDS else "a key"
    refuse(
        Code.DUPLICATE_KEY,
        f"the kubeconfig has {named} twice in one mapping{where}, and readers differ on which "
        "value counts: keep one",
    )


_JSON_TOKEN: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],]')


def _repeated_json_key(text: str) -> NoReturn:
    """Refuse the first key that ``text``, valid JSON with a repeated key, repeats, and say where.

    Python's JSON parser tells that an object repeats a key, but not where; one pass over the
    strings and brackets (linear: the string pattern never backtracks) finds it in text order, as
    the YAML reader would.
    """
    open_keys: list[set[str] | None] = []  # per open object its keys so far; None for a list
    key_next = False
    for token in _JSON_TOKEN.finditer(text):
        lexeme = token.group()
        if lexeme == "{":
            open_keys.append(set())
            key_next = True
        elif lexeme == "[":
            open_keys.append(None)
            key_next = False
        elif lexeme in ("}", "]"):
            open_keys.pop()
            key_next = False
        elif lexeme == ",":
            key_next = open_keys[-1] is not None
        elif key_next:
            keys = open_keys[-1]
            assert keys is not None
            key = json.loads(lexeme)
            if key in keys:
                start = token.start()
                line = text.count("\n", 0, start) + 1
                column = start - text.rfind("\n", 0, start)
                _repeated_key(key, f" (line {line}, column {column})")
            keys.add(key)
            key_next = False
    raise RuntimeError("JSON with a repeated key, but none found")  # a bug: InternalError


def _check_tag(event: yaml.NodeEvent, own: str) -> None:
    tag = getattr(event, "tag", None)
    if tag is not None and tag not in ("!", own):
        _syntax(event, "could not determine a constructor for the tag …")


def _scalar(event: yaml.ScalarEvent) -> object:
    value: str = event.value
    tag = event.tag
    if event.style or tag in ("!", _STR):  # quoted or a block scalar: libyaml says "" for plain
        if tag not in (None, "!", _STR):
            _check_tag(event, _STR)
        return value  # quoted, or tagged as a string
    resolved = _resolve(value)
    if tag is None:
        return resolved
    wanted = _TAGGED.get(tag)
    if wanted is None or type(resolved) is not wanted:
        _check_tag(event, _STR)
    return resolved


def _resolve(value: str) -> object:
    """A plain scalar as YAML 1.1's core schema reads it, minus base-60 and timestamps."""
    if value in _NULLS:
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    if not value or value[0] not in "+-.0123456789":
        return value
    if len(value) > MAX_NUMBER and (_INT.fullmatch(value) or _FLOAT.fullmatch(value)):
        refuse(
            Code.NOT_YAML,
            f"the kubeconfig holds a number longer than {MAX_NUMBER} characters, which no "
            "kubeconfig field is: quote it if it is text",
        )
    if _INT.fullmatch(value):
        digits = value.replace("_", "")
        sign = -1 if digits[0] == "-" else 1
        digits = digits.lstrip("+-")
        if digits.startswith("0b"):
            return sign * int(digits[2:], 2)
        if digits.startswith("0x"):
            return sign * int(digits[2:], 16)
        if digits != "0" and digits.startswith("0"):
            return sign * int(digits, 8)
        return sign * int(digits)
    if _FLOAT.fullmatch(value):
        lowered = value.replace("_", "").lower()
        if lowered.endswith(".inf"):
            return float("-inf") if lowered.startswith("-") else float("inf")
        if lowered == ".nan":
            return float("nan")
        return float(lowered)
    return value


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _nonempty(document: object) -> object:
    if document is None:
        refuse(Code.EMPTY, "the kubeconfig is empty: store the kubeconfig itself in the Secret")
    return document


def _where(error: yaml.MarkedYAMLError) -> str:
    """Line, column and the parser's words, minus anything quoted: a quote could hold a token."""
    parts = []
    if error.problem_mark is not None:
        parts.append(f"line {error.problem_mark.line + 1}, column {error.problem_mark.column + 1}")
    problem = error.problem or ""
    if problem.startswith("but ") and error.context:
        problem = f"{error.context} {problem}"  # "expected a single document … but found another"
    problem = _QUOTED.sub("…", problem)[:120].strip()
    if problem and problem.isprintable():
        parts.append(problem)
    return f" ({': '.join(parts)})" if parts else " (a value cannot be read)"
