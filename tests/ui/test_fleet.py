"""A long list and a fleet's overview against the real hub: pages, orders, filters and counts.

The UI runs as the hub's admin (local mode) through httpx against the ASGI app; the Clusters are
on the hub with the statuses a manager writes (tests/support/fleet.py), so that the API server's
paging, its counts and its label selectors are what the pages are checked against.
"""

from __future__ import annotations

import datetime
import html
import urllib.parse

import pytest

from kokumi.core import clusterview
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.testing.controlplane import APIServer
from kokumi.ui.pages import Lists
from kokumi.ui.security import Session
from tests.support.fleet import Member, count_line, listed, local_ui, make_fleet

DASH = "\N{EN DASH}"
REASONS = ("Ready", "Unreachable", "TLSError", "Ready", "ClusterConflict", None)


def members(namespace: str, count: int) -> list[Member]:
    return [
        Member(namespace, f"c{i:03d}", {"region": ("eu", "us", "ap")[i % 3]}, REASONS[i % 6],
               version=f"v1.{30 + i % 7}.0")
        for i in range(count)
    ]  # fmt: skip


async def test_a_long_list_pages_in_the_api_servers_order_and_sorts_by_each_column(
    hub: APIServer, crds: object, namespace: str
) -> None:
    fleet = members(namespace, 120)
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
        await make_fleet(admin, fleet)
    names = sorted(m.name for m in fleet)
    async with local_ui(hub) as app:
        # The first page: one request of a page, and the count of all from the API server.
        first, requests = await app.view(f"/clusters?namespace={namespace}")
        assert requests == 1
        assert count_line(first) == f"1{DASH}50 of 120 in namespace {namespace}"
        assert listed(first) == names[:50]
        assert "Page 1 of 3" in first
        next_link = f'href="{app.base}/clusters?namespace={namespace}&amp;page=2"'
        assert next_link in first

        # Page 2: every Cluster read once, as the user, and kept for the session.
        second, requests = await app.view(f"/clusters?namespace={namespace}&page=2")
        assert requests == 1  # 120 Clusters fit into one list request of 500
        assert count_line(second) == f"51{DASH}100 of 120 in namespace {namespace}"
        assert listed(second) == names[50:100]
        third, requests = await app.view(f"/clusters?namespace={namespace}&page=3")
        assert requests == 0
        assert listed(third) == names[100:]
        assert f"101{DASH}120 of 120" in count_line(third) and 'rel="next"' not in third
        # A page past the last shows the last.
        assert listed((await app.view(f"/clusters?namespace={namespace}&page=9"))[0]) == names[100:]

        # Each column's heading sorts, the filters kept; the same heading again reverses.
        by_name, requests = await app.view(f"/clusters?namespace={namespace}&sort=name&order=desc")
        assert requests == 0
        assert listed(by_name) == names[::-1][:50]
        heading = f'/clusters?namespace={namespace}&amp;sort=name">Name ↓</a>'
        assert heading in by_name, by_name[:3000]
        rows = {m.name: m for m in fleet}
        for column in clusterview.SORTS:
            page, _ = await app.view(f"/clusters?namespace={namespace}&sort={column}")
            shown = listed(page)
            assert len(shown) == 50
            if column == "reason":
                keys = [rows[n].reason or clusterview.CHECKING for n in shown]
                assert keys == sorted(keys)
            if column == "version":
                versions = [int(rows[n].version.split(".")[1]) for n in shown if rows[n].reason]
                assert versions == sorted(versions)

        # A status filter counts what it keeps, in every order.
        unreachable = sorted(m.name for m in fleet if m.reason == "Unreachable")
        page, _ = await app.view(f"/clusters?namespace={namespace}&reason=Unreachable&sort=name")
        assert count_line(page) == f"1{DASH}20 of 20 matching in namespace {namespace}"
        assert listed(page) == unreachable
        not_checked = sorted(m.name for m in fleet if m.reason is None)
        checking = urllib.parse.quote(clusterview.CHECKING)
        page, _ = await app.view(f"/clusters?namespace={namespace}&reason={checking}")
        assert listed(page) == not_checked
        page, _ = await app.view(f"/clusters?namespace={namespace}&ready=True")
        assert listed(page) == sorted(m.name for m in fleet if m.reason == "Ready")[:50]
        assert count_line(page) == f"1{DASH}40 of 40 matching in namespace {namespace}"

        # A label selector goes to the API server, with every filter and the order kept.
        page, requests = await app.view(
            f"/clusters?namespace={namespace}&selector=region%3Deu&sort=name&page=1"
        )
        assert requests == 1
        assert listed(page) == sorted(m.name for m in fleet if m.labels["region"] == "eu")
        # Clear drops the filters and keeps the order; every other link keeps both.
        clear = f"{app.base}/clusters?sort=name"
        assert f'href="{clear}">Clear</a>' in page
        links = [html.unescape(h) for h in _hrefs(page) if "/clusters?" in h]
        kept = [h for h in links if h != clear]
        assert len(kept) == len(clusterview.SORTS)
        assert all(f"namespace={namespace}&selector=region%3Deu" in h for h in kept), kept


def _hrefs(page: str) -> list[str]:
    return [part.split('"', 1)[0] for part in page.split('href="')[1:]]


async def test_a_write_of_the_session_is_seen_at_once_and_reloads_read_nothing_new(
    hub: APIServer, crds: object, namespace: str
) -> None:
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
        await make_fleet(admin, members(namespace, 3))
        async with local_ui(hub) as app:
            sorted_path = f"/clusters?namespace={namespace}&sort=name"
            page, requests = await app.view(sorted_path)
            assert listed(page) == ["c000", "c001", "c002"] and requests == 1
            # Another user's new Cluster shows after the list's half minute; the session's own
            # writes at once (the form, an edit, a delete forget the session's lists).
            await make_fleet(admin, [Member(namespace, "c100")])
            page, requests = await app.view(sorted_path)
            assert "c100" not in listed(page) and requests == 0
            assert "listed 0 s ago" in page or "listed 1 s ago" in page
            app.ui.lists.clock = lambda: 1e12
            page, requests = await app.view(sorted_path)
            assert "c100" in listed(page) and requests == 1
            # The first page in the API's order is always read for the view: one request.
            page, requests = await app.view(f"/clusters?namespace={namespace}")
            assert requests == 1 and "c100" in listed(page)


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("sort=server", "sort must be one of name, namespace, ready, reason, version, age"),
        ("page=0", "page must be a whole number from 1"),
        ("ready=maybe", "ready must be one of True, False, Unknown"),
    ],
)
async def test_an_address_the_list_cannot_follow_is_a_one_line_400(
    hub: APIServer, crds: object, query: str, said: str
) -> None:
    async with local_ui(hub) as app:
        response = await app.browser.get(f"/clusters?{query}")
        assert response.status_code == 400
        assert said in response.text
        assert app.requests.verbs == []


def test_a_sessions_lists_are_its_own_and_end_with_its_writes() -> None:
    now = [0.0]
    lists = Lists(ttl=30, size=2, clock=lambda: now[0])
    alice, bob = Session(csrf="a" * 43, expires=0), Session(csrf="b" * 43, expires=0)
    row = clusterview.row(
        {"metadata": {"name": "x", "namespace": "p"}},
        datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC),
    )
    lists.put(alice, "", "", [row], "all namespaces")
    assert lists.get(alice, "", "") is not None
    assert lists.get(bob, "", "") is None  # another session is never answered from alice's
    assert lists.get(alice, "p", "") is None and lists.get(alice, "", "a=b") is None
    now[0] = 29.9
    assert lists.get(alice, "", "") is not None
    now[0] = 30.0
    assert lists.get(alice, "", "") is None
    lists.put(alice, "", "", [row], "all namespaces")
    lists.forget(alice)
    assert lists.get(alice, "", "") is None
    # At most ``size`` lists, the least recently used dropped first.
    for ns in ("a", "b", "c"):
        lists.put(bob, ns, "", [row], ns)
    assert lists.get(bob, "a", "") is None and lists.get(bob, "c", "") is not None
