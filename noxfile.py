"""Sessions: ``unit`` (the fast loop: every test that needs no control plane, no Go), ``tests``
(the whole suite on the real control plane, the CI-sized chaos run included), ``lint``,
``typing``; ``chaos`` (the chaos test alone), ``flake`` (each model test run N times under
distinct seeds, counted), ``soak`` (the model tests at 50,000 steps, a long
chaos run and the kubeconfig fuzzers at 100,000 examples each) and ``bench`` (the fleet
benchmark) run only when asked for."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typing", "unit", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session(python="3.11")
def unit(session: nox.Session) -> None:
    """The tests marked ``cluster`` (by fixture use, in tests/conftest.py) are left out: nothing
    here builds or starts a server, so Go is not needed."""
    session.install("-e", ".[test]")
    session.run(
        "pytest",
        "-m",
        "not cluster",
        "--hypothesis-profile=unit",
        *session.posargs,
        # The model test at 15 examples instead of 90: every rule still runs; `tests` runs 90.
        env={"MODEL_EXAMPLES": session.env.get("MODEL_EXAMPLES", "15")},
    )


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    session.install("-e", ".[test]")
    # Build (or find in the cache) kube-apiserver, kube-controller-manager and etcd first, so their
    # build time is not charged to the first test.
    session.run("python", "-m", "kokumi.testing", "build")
    session.run("pytest", *session.posargs)


@nox.session(python="3.11")
def chaos(session: nox.Session) -> None:
    """The chaos test on the real hub: CHAOS_SEED replays a seed, CHAOS_OPS sets its length."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "kokumi.testing", "build")
    session.run("pytest", "tests/chaos", "-s", "--timeout=0", *session.posargs)


@nox.session(python="3.11")
def soak(session: nox.Session) -> None:
    """The actor-layer model tests, one replica and two with shards, at 2,200 examples each (at
    least 50,000 steps each, counted and asserted, with faults injected), the kubeconfig fuzzers
    at 100,000 examples each, and a chaos run of 2,000 operations."""
    session.install("-e", ".[test]")
    session.run(
        "pytest",
        "tests/test_model.py",
        "tests/test_model_shards.py",
        "-s",
        "--timeout=0",  # as long as its steps take
        *session.posargs,
        env={
            "MODEL_EXAMPLES": session.env.get("MODEL_EXAMPLES", "2200"),
            "MODEL_MIN_STEPS": session.env.get("MODEL_MIN_STEPS", "50000"),
        },
    )
    session.run(
        "pytest",
        "tests/core/kubeconfig/test_kubeconfig.py",
        "--timeout=0",
        "-k",
        "connection_or_a_refusal",
        "--hypothesis-show-statistics",
        *session.posargs,
        env={"KUBECONFIG_FUZZ_EXAMPLES": session.env.get("KUBECONFIG_FUZZ_EXAMPLES", "100000")},
    )
    session.run("python", "-m", "kokumi.testing", "build")
    session.run(
        "pytest",
        "tests/chaos",
        "-s",
        "--timeout=0",
        *session.posargs,
        env={
            "CHAOS_OPS": session.env.get("CHAOS_OPS", "2000"),
            "CHAOS_KILLS": session.env.get("CHAOS_KILLS", "40"),
        },
    )


@nox.session(python="3.11")
def flake(session: nox.Session) -> None:
    """Each model test at its CI settings, N times under distinct Hypothesis seeds (default 30,
    two at a time): the passes, the fails and the seeds of the fails, to replay. A test that
    fails some runs is a failing test; this is how often. ``nox -s flake -- --runs 10``."""
    session.install("-e", ".[test]")
    session.run("python", "tools/flake.py", *session.posargs)


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install("ruff==0.17.6")  # pinned: a new release may add rules overnight
    # import-linter reads the installed package: the layers of docs/architecture.md.
    session.install("-e", ".", "import-linter==2.17")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")


@nox.session(python="3.11")
def typing(session: nox.Session) -> None:
    session.install("-e", ".[test]", "mypy==2.4.1", "types-PyYAML")
    # The tests are held to the same strict settings as the product.
    session.run("mypy", "kokumi", "tests")


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """The fleet benchmark (benchmarks/fleet): ``nox -s bench -- --clusters 1000``.

    Not part of ``tests``: it takes minutes and the whole machine, and its figures belong in
    benchmarks/README.md, never in an assertion.
    """
    session.install("-e", ".[test]")
    session.run("python", "-m", "kokumi.testing", "build")
    session.run("python", "benchmarks/fleet/run.py", *session.posargs)
