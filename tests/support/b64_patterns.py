"""Regular expressions over base64 text that see what the text decodes to.

Kubernetes' CEL has no base64 decoder, and a Secret's ``data`` reaches a ValidatingAdmissionPolicy
as base64 text. So kokumi-argocd-secret-integrity asks its questions of the decoded config and
server with regular expressions over the encoding, generated here:

- ``contains(word)``: the decoded bytes contain ``word``, ASCII letters in any case (Go's JSON
  decoder matches field names case-insensitively). A word starts at byte offset 0, 1 or 2 of a
  3-byte group; each case gives a fixed run of base64 characters, each a class of the values the
  free bits (the neighbours' bytes, each letter's case bit) allow, anchored at a 4-character
  boundary. The three runs are the alternatives.
- ``starts_with(word)``: the same, at offset 0 only.
- ``ASCII``: every decoded byte is below 0x80.

``python -m tests.support.b64_patterns`` prints them; tests/deploy/test_b64_patterns.py checks
them against Python's own base64 with Hypothesis, and that the policy carries exactly these.
"""

from __future__ import annotations

import itertools

__all__ = ["ALPHABET", "ASCII", "contains", "starts_with"]

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
ANY = "[A-Za-z0-9+/]"


def _class(values: set[int]) -> str:
    if len(values) == 64:
        return ANY
    chars = "".join(sorted((ALPHABET[v] for v in values), key=ALPHABET.index))
    if len(chars) == 1:
        return chars if chars not in "+/" else "[" + chars + "]"
    return "[" + chars + "]"


def _run(word: bytes, offset: int, fold_case: bool) -> str:
    """The base64 characters of the groups that hold ``word`` at ``offset`` in its first group."""
    length = offset + len(word)
    groups = -(-length // 3)
    out: list[str] = []
    for char in range(groups * 4):
        choices: list[list[int]] = []
        for bit in range(char * 6, char * 6 + 6):
            index, shift = divmod(bit, 8)
            position = 7 - shift  # bit position in the byte, 7 = high
            inside = offset <= index < length
            if not inside:
                choices.append([0, 1])
                continue
            byte = word[index - offset]
            letter = chr(byte).isascii() and chr(byte).isalpha()
            if fold_case and letter and position == 5:
                choices.append([0, 1])
            else:
                choices.append([(byte >> position) & 1])
        values = {
            sum(b << (5 - i) for i, b in enumerate(combo)) for combo in itertools.product(*choices)
        }
        out.append(_class(values))
    while out and out[-1] == ANY:
        out.pop()  # after the word: unconstrained, and may be padding
    return "".join(out)


def contains(word: bytes, *, fold_case: bool = True) -> str:
    runs = [_run(word, offset, fold_case) for offset in range(3)]
    return f"^(?:{ANY}{{4}})*(?:{'|'.join(runs)})"


def starts_with(word: bytes, *, fold_case: bool = True) -> str:
    return f"^{_run(word, 0, fold_case)}"


def _ascii() -> str:
    first = _class({v for v in range(64) if v < 32})  # the high bit of byte 1
    second = _class({v for v in range(64) if not v & 8})  # of byte 2
    third = _class({v for v in range(64) if not v & 2})  # of byte 3
    return f"^(?:{first}{second}{third}{ANY})*(?:{first}{second}==|{first}{second}{third}=)?$"


ASCII = _ascii()

if __name__ == "__main__":
    for word in (b"execproviderconfig", b"awsauthconfig"):
        print(f"contains {word.decode()}: {contains(word)}")
    escape = contains(b"\\u", fold_case=False)
    print(f"contains a backslash-u: {escape}")
    for prefix in (b"https://kubernetes.default", b"http://kubernetes.default"):
        print(f"starts with {prefix.decode()}: {starts_with(prefix)}")
    print(f"ascii: {ASCII}")
