"""deploy/monitoring: the PrometheusRule and the Grafana dashboard read what the manager exports.

A manager runs as install.yaml's ServiceAccount with a Cluster and an Environment to serve; every
metric each alert and panel selects, every label it matches, groups by or shows in a legend,
and every label value it matches exactly must be in that manager's real /metrics (a Reason
Kokumi writes, for ``reason``). The expressions are written with a selector in braces on every
metric, so each one is found; a bare name fails the test. Prometheus' own ``promtool check
rules`` then parses the rules and every panel's expression (as a recording rule), as Prometheus
would load them.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kokumi.core import api
from kokumi.core.reasons import Reason
from kokumi.testing import canary
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import (
    DEPLOY,
    _remove_workspace,
    bind_manager_secrets,
    install,
    replicas,
    run,
    unreachable_kubeconfig,
    wait,
)

MONITORING = DEPLOY / "monitoring"
DOCS = DEPLOY.parent / "docs"
RUNBOOKS = "https://github.com/kokumi-dev/kokumi-clusters/blob/main/docs/runbooks/"
# promtool's unit tests of the rules: input series and the alerts expected of them.
RULE_TESTS = Path(__file__).with_name("prometheus-rule-tests.yaml")
# Labels Prometheus adds when it scrapes, not the manager: a legend may show them.
TARGET_LABELS = {"pod", "instance", "job"}
SELECTOR = re.compile(r"\b(kokumi_[a-z_]+)(\{[^}]*\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def expressions() -> list[tuple[str, str, str]]:
    """(where, expression, legend) of every alert and every dashboard target."""
    rule = yaml.safe_load((MONITORING / "prometheus-rule.yaml").read_text())
    found = [
        (f"alert {r['alert']}", r["expr"], "")
        for group in rule["spec"]["groups"]
        for r in group["rules"]
    ]
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    found += [
        (f"panel {p['title']!r}", t["expr"], t.get("legendFormat", ""))
        for p in dashboard["panels"]
        for t in p["targets"]
    ]
    return found


Samples = dict[str, list[dict[str, str]]]


def problems(where: str, expr: str, legend: str, samples: Samples) -> list[str]:
    """What in one expression the /metrics given does not have."""
    out: list[str] = []
    labels_here: set[str] = set()
    selectors = SELECTOR.findall(expr)
    if not selectors:
        out.append(f"{where}: selects no kokumi_ metric")
    for name, braces in selectors:
        if not braces:
            out.append(f"{where}: {name} has no {{}} selector")
        if name not in samples:
            out.append(f"{where}: {name} is not in /metrics")
            continue
        names = {label for series in samples[name] for label in series}
        labels_here |= names
        for label, op, value in MATCHER.findall(braces):
            if label in TARGET_LABELS and op == "=~":
                continue  # a dashboard variable ($job) on a label the scrape adds
            if label not in names:
                out.append(f"{where}: {name} has no label {label}")
            elif op in ("=", "!=") and label == "reason":
                if value not in set(map(str, Reason)):
                    out.append(f"{where}: reason {value!r} is not a Reason Kokumi writes")
            elif op in ("=", "!=") and value not in {s[label] for s in samples[name]}:
                out.append(f"{where}: {name}{{{label}}} never is {value!r}")
    for group in GROUPING.findall(expr):
        for label in filter(None, (part.strip() for part in group.split(","))):
            if label not in labels_here:
                out.append(f"{where}: groups by {label}, which its metrics do not have")
    for label in LEGEND.findall(legend):
        if label not in labels_here | TARGET_LABELS:
            out.append(f"{where}: the legend shows {label}, which its metrics do not have")
    return out


def series(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def test_the_checker_finds_what_is_wrong() -> None:
    samples: Samples = {
        "kokumi_clusters": [{"reason": "Ready"}],
        "kokumi_checks_due": [{"within": "overdue"}],
    }
    assert problems("ok", 'sum by (reason) (kokumi_clusters{reason!="Ready"})', "", samples) == []
    assert problems("x", "sum(kokumi_clusters)", "", samples) == [
        "x: kokumi_clusters has no {} selector"
    ]
    assert problems("x", "kokumi_nope{}", "", samples) == ["x: kokumi_nope is not in /metrics"]
    assert problems("x", 'kokumi_clusters{reasn="Ready"}', "", samples) == [
        "x: kokumi_clusters has no label reasn"
    ]
    assert problems("x", 'kokumi_clusters{reason="Redy"}', "", samples) == [
        "x: reason 'Redy' is not a Reason Kokumi writes"
    ]
    assert problems("x", 'kokumi_checks_due{within="late"}', "", samples) == [
        "x: kokumi_checks_due{within} never is 'late'"
    ]
    assert problems("x", "sum by (verb) (kokumi_clusters{})", "", samples) == [
        "x: groups by verb, which its metrics do not have"
    ]
    assert problems("x", "kokumi_clusters{}", "{{code}}", samples) == [
        "x: the legend shows code, which its metrics do not have"
    ]
    assert problems("x", "vector(1)", "", samples) == ["x: selects no kokumi_ metric"]


def test_every_alert_and_panel_reads_the_managers_real_metrics(
    hub: APIServer, admission_policies: object, tmp_path: Path
) -> None:
    lease, workspace, suffix = install(hub, tmp_path)
    try:
        with replicas(hub, tmp_path, lease) as start:
            manager = start("monitored")
            wait(manager.leading, "the manager leads")
            kubeconfig = unreachable_kubeconfig(
                f"https://kokumi-monitoring-{suffix}.invalid:6443", canary.token(), hub.ca_pem
            )
            bind_manager_secrets(hub, workspace)
            objects: list[dict[str, Any]] = [
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "edge-kubeconfig", "namespace": workspace},
                    "data": {"value": base64.b64encode(kubeconfig.encode()).decode()},
                },
                {
                    "apiVersion": api.API_VERSION,
                    "kind": "Cluster",
                    "metadata": {"name": "edge", "namespace": workspace, "labels": {"env": "edge"}},
                    "spec": {
                        "connection": "Kubeconfig",
                        "kubeconfig": {"secretRef": {"name": "edge-kubeconfig"}},
                    },
                },
                {
                    "apiVersion": api.API_VERSION,
                    "kind": "Environment",
                    "metadata": {"name": "edge", "namespace": workspace},
                    "spec": {
                        "delivery": "ArgoCD",
                        "clusterSelector": {"matchLabels": {"env": "edge"}},
                    },
                },
            ]
            run(
                hub.admin_kubeconfig,
                "apply",
                "-f",
                "-",
                input="\n---\n".join(map(json.dumps, objects)),
            )

            def reported() -> bool:
                got = series(manager.get("/metrics").text)
                return (
                    {"reason": "Unreachable"} in got.get("kokumi_clusters", [])
                    and "kokumi_cluster_ready_flips_last_hour" in got
                    and "kokumi_checks_due" in got
                    and "kokumi_check_wait_seconds_bucket" in got
                )

            wait(reported, "the manager reports the Cluster edge on /metrics", timeout=90)
            samples = series(httpx.get(f"http://127.0.0.1:{manager.port}/metrics", timeout=5).text)
    finally:
        _remove_workspace(hub, workspace)
        run(hub.admin_kubeconfig, "-n", "kokumi", "delete", "lease", lease, check=False)
    found = expressions()
    assert len(found) >= 20
    wrong = [p for where, expr, legend in found for p in problems(where, expr, legend, samples)]
    assert not wrong, "\n".join(wrong)


def test_the_rule_and_dashboard_are_well_formed() -> None:
    rule = yaml.safe_load((MONITORING / "prometheus-rule.yaml").read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    names = [r["alert"] for r in alerts]
    assert len(names) == len(set(names))
    for wanted in (
        "KokumiClusterNotReady",
        "KokumiClusterRegistrationFailed",
        "KokumiClusterConflict",
        "KokumiChecksOverdue",
        "KokumiNoLeader",
        "KokumiShardUnheld",
        "KokumiLeaderFlapping",
        "KokumiWritesRefused",
    ):
        assert wanted in names
    for alert in alerts:
        assert alert["labels"]["severity"] in ("info", "warning", "critical"), alert["alert"]
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
        assert re.fullmatch(r"\d+[smh]", alert["for"]), alert["alert"]
        # Each runbook is a page of docs/runbooks named after its alert.
        runbook = alert["annotations"]["runbook_url"]
        assert runbook == RUNBOOKS + f"{alert['alert']}.md", alert["alert"]
        assert (DOCS / "runbooks" / f"{alert['alert']}.md").is_file(), alert["alert"]
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"] == "kokumi-clusters"


def promtool_check(promtool: Path, groups: list[dict[str, Any]], path: Path) -> Any:
    path.write_text(yaml.safe_dump({"groups": groups}))
    return subprocess.run(
        [str(promtool), "check", "rules", str(path)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def test_prometheus_parses_every_alert_and_panel(promtool: Path, tmp_path: Path) -> None:
    """The PrometheusRule's groups as Prometheus loads a rules file, and each dashboard
    expression as a recording rule beside them: promtool parses every one, and refuses a broken
    one, naming it."""
    rule = yaml.safe_load((MONITORING / "prometheus-rule.yaml").read_text())
    groups: list[dict[str, Any]] = list(rule["spec"]["groups"])
    panels = [expr for where, expr, _ in expressions() if where.startswith("panel ")]
    recorded = [{"record": f"kokumi:panel_{i}", "expr": e} for i, e in enumerate(panels)]
    groups.append({"name": "kokumi-clusters-dashboard", "rules": recorded})
    checked = promtool_check(promtool, groups, tmp_path / "rules.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    total = sum(len(g["rules"]) for g in groups)
    assert f"SUCCESS: {total} rules found" in checked.stdout, checked.stdout

    broken = json.loads(json.dumps(groups))
    first = broken[0]["rules"][0]
    first["expr"] = first["expr"].replace(")", "", 1)
    refused = promtool_check(promtool, broken, tmp_path / "broken.yaml")
    assert refused.returncode != 0
    assert first["alert"] in refused.stdout + refused.stderr, refused.stdout + refused.stderr


def rule_unit_tests(promtool: Path, rules: dict[str, Any], where: Path) -> Any:
    """``promtool test rules`` of RULE_TESTS against ``rules`` (a PrometheusRule's groups)."""
    (where / "rules.yaml").write_text(yaml.safe_dump({"groups": rules["spec"]["groups"]}))
    (where / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    return subprocess.run(
        [str(promtool), "test", "rules", RULE_TESTS.name],
        cwd=where, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def test_every_alert_fires_when_it_should_and_only_then(promtool: Path, tmp_path: Path) -> None:
    """Prometheus' own rule unit tests: each alert fires on its input series, naming what it
    names, and stays quiet where it must (a Cluster in RegistrationFailed or ClusterConflict is
    never KokumiClusterNotReady too; a single leader's Lease unheld is KokumiNoLeader alone)."""
    rule = yaml.safe_load((MONITORING / "prometheus-rule.yaml").read_text())
    names = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]}
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    firing = {c["alertname"] for c in cases if c["exp_alerts"]}
    quiet = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert firing == names, "alerts without a case where they fire"
    assert quiet == names, "alerts without a case where they do not fire"

    ran = rule_unit_tests(promtool, rule, tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "SUCCESS" in ran.stdout, ran.stdout

    # And they catch a rule that fires twice: NotReady without its exclusions.
    loose = json.loads(json.dumps(rule))
    (not_ready,) = [
        r
        for group in loose["spec"]["groups"]
        for r in group["rules"]
        if r["alert"] == "KokumiClusterNotReady"
    ]
    not_ready["expr"] = re.sub(r"\{reason!~[^}]*\}", "{}", not_ready["expr"])
    refused = rule_unit_tests(promtool, loose, tmp_path)
    assert refused.returncode != 0
    assert "KokumiClusterNotReady" in refused.stdout + refused.stderr
