"""A long list and a fleet's overview against the real hub: pages, orders, filters and counts.

The UI runs as the hub's admin (local mode) through httpx against the ASGI app; the Clusters are
on the hub with the statuses a manager writes (tests/support/fleet.py), so that the API server's
paging, its counts and its label selectors are what the pages are checked against.
"""

from __future__ import annotations

import datetime
import html
import re
import urllib.parse

import httpx
import pytest

from kokumi.core import clusterview
from kokumi.core.sources.spec import SOURCE_LABEL
from kokumi.kube.client import Client
from kokumi.kube.config import Config, StaticToken
from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from kokumi.ui import pages
from kokumi.ui.app import create_app
from kokumi.ui.pages import UI, Lists
from kokumi.ui.security import Session, Sessions
from tests.support.fleet import (
    ORIGIN,
    LocalUI,
    Member,
    count_line,
    listed,
    local_ui,
    make_fleet,
    make_source,
)
from tests.support.ui import in_cluster_app, install_ui_account, user

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
    # At most ``bytes`` in all: the least recently used goes first.
    size = pages.row_bytes(row)
    lists = Lists(ttl=30, size=10, bytes=5 * size, clock=lambda: now[0])
    lists.put(alice, "a", "", [row] * 3, "a")
    lists.put(alice, "b", "", [row] * 2, "b")
    assert lists.get(alice, "a", "") is not None and lists.held == 5 * size
    lists.put(alice, "c", "", [row] * 2, "c")  # 7 rows: the least recently used (b) goes
    assert lists.get(alice, "b", "") is None and lists.get(alice, "a", "") is not None
    lists.put(bob, "d", "", [row] * 5, "d")
    assert lists.get(bob, "d", "") is not None and lists.get(alice, "a", "") is None
    # An expired list is dropped when another is kept, not only when it is asked for.
    now[0] += 31
    lists.put(alice, "e", "", [row], "e")
    assert list(lists._kept) == [(Lists.owner(alice), "e", "", ())]


def _sessions_of(user: str, count: int) -> list[Session]:
    return [Session(csrf=f"{user}-{i}".ljust(43, "x"), expires=0, user=user) for i in range(count)]


def test_a_users_lists_are_bounded_in_bytes_however_many_sessions_and_large_their_labels() -> None:
    now = [0.0]
    when = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    # 31 Clusters of 9,000 labels each (a tenth of the 90,000 that made 1.44 MB objects).
    labels = {f"l{i:05d}": "v" * 8 for i in range(9000)}
    large = [
        clusterview.row({"metadata": {"name": f"c{i}", "namespace": "p", "labels": labels}}, when)
        for i in range(31)
    ]
    size = sum(pages.row_bytes(r) for r in large)
    assert size > 31 * 9000 * 100  # each label costs its strings and its pair
    lists = Lists(bytes_per_user=size // 2, bytes=size * 4, clock=lambda: now[0])
    for session in _sessions_of("mallory", 16):
        listed = lists.put(session, "p", "", large, "p")
        assert listed.rows == tuple(large)  # shown all the same, whether kept or not
    assert lists.held_by("mallory") <= size // 2 and lists.held <= size // 2
    # Ordinary lists: each user keeps at most their share in lists and bytes, the oldest first.
    small = clusterview.row({"metadata": {"name": "x", "namespace": "p"}}, when)
    lists = Lists(per_user=3, bytes_per_user=10 * pages.row_bytes(small), clock=lambda: now[0])
    mallory = _sessions_of("mallory", 16)
    for session in mallory:
        lists.put(session, "p", "", [small] * 4, "p")
    assert lists.held_by("mallory") <= 10 * pages.row_bytes(small)
    assert [lists.get(s, "p", "") is not None for s in mallory[-3:]] == [False, True, True]
    alice = _sessions_of("alice", 1)[0]
    lists.put(alice, "p", "", [small], "p")
    assert lists.get(alice, "p", "") is not None and lists.get(mallory[-1], "p", "") is not None


def _sections(page: str) -> dict[str, list[tuple[str, int, str]]]:
    """Each count table of the overview: (title as text, count, the link's path and query)."""
    found: dict[str, list[tuple[str, int, str]]] = {}
    for part in page.split('<section class="card tile')[1:]:
        section = part.split("</section>", 1)[0]
        head = re.search(r'id="([a-z]+)"', section.split(">", 1)[0])
        label = re.search(r"<h2>By label <code>([^<]+)</code></h2>", section)
        name = head.group(1) if head else f"label {label.group(1) if label else '?'}"
        rows = re.findall(
            r'<tr><td>(.*?)</td><td class="count"><a href="([^"]+)">([0-9,]+)</a>', section
        )
        found[name] = [
            (re.sub(r"<[^>]+>", "", title).strip(), int(count.replace(",", "")),
             html.unescape(href))
            for title, href, count in rows
        ]  # fmt: skip
    return found


async def _every_listed(app: LocalUI, href: str) -> tuple[list[tuple[str, str]], str]:
    """The Clusters the list at ``href`` shows over all its pages, and its count line."""
    names: list[tuple[str, str]] = []
    first_line = ""
    assert href.startswith(app.base + "/clusters"), href
    while True:
        page, _ = await app.view(ORIGIN + href)
        first_line = first_line or count_line(page)
        names.extend(
            (ns, name)
            for ns, name in re.findall(
                r'<tr id="cluster-[^"]*"[^>]*>\s*<td><a href="[^"]*/clusters/([^/"]+)/([^/"]+)">',
                page,
            )
        )
        nxt = re.search(r'<a rel="next" href="([^"]+)">', page)
        if nxt is None:
            return names, first_line
        href = html.unescape(nxt.group(1))


async def test_the_overview_counts_what_the_hub_holds_and_each_count_lists_exactly_those(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    other = f"{namespace}-b"
    kubectl(hub, "create", "namespace", other)
    try:
        run = {"fleet-run": namespace}
        fleet = [
            Member(namespace if i % 3 else other, f"c{i:03d}",
                   {**run, "region": ("eu", "us", "ap", "eu")[i % 4],
                    **({"tier": "prod"} if i % 5 else {})},
                   REASONS[i % 6])
            for i in range(75)
        ]  # fmt: skip
        source_made = [Member(namespace, f"s{i}", {**run, SOURCE_LABEL: "capi"}) for i in range(2)]
        everything = fleet + source_made
        async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
            await make_fleet(admin, everything)
            await make_source(admin, namespace, "capi")
        scope = urllib.parse.quote(f"fleet-run={namespace}")
        async with local_ui(hub) as app:
            page, requests = await app.view(f"/overview?selector={scope}&labels=region,tier")
            assert requests == 2  # the Clusters (one list), the ClusterSources
            assert (
                f"{len(everything)} Clusters matching fleet-run={namespace} in all namespaces"
                in page
            )
            sections = _sections(page)
            assert set(sections) == {"ready", "reasons", "namespaces", "label region", "label tier"}

            def expected(group: str, title: str) -> set[tuple[str, str]]:
                def value(m: Member) -> str:
                    if group == "ready":
                        return "Unknown" if m.reason is None else str(m.reason == "Ready")
                    if group == "reasons":
                        return m.reason or clusterview.CHECKING
                    if group == "namespaces":
                        return m.namespace
                    key = group.removeprefix("label ")
                    return m.labels.get(key, f"without {key}")

                return {(m.namespace, m.name) for m in everything if value(m) == title}

            for group, counts in sections.items():
                assert sum(n for _, n, _ in counts) == len(everything), group
                for title, count, href in counts:
                    want = expected(group, title)
                    assert count == len(want), (group, title)
                    shown, line = await _every_listed(app, href)
                    assert set(shown) == want and len(shown) == count, (group, title, href)
                    assert line.split(" of ")[1].split(" ")[0] == f"{count:,}", line
            assert [t for t, _, _ in sections["label tier"]] == ["prod", "without tier"]
            headline = re.search(r'<p class="big"><a href="([^"]+)">([0-9,]+)</a>', page)
            assert headline is not None
            ready = {(m.namespace, m.name) for m in everything if m.reason == "Ready"}
            assert int(headline.group(2)) == len(ready)
            assert set((await _every_listed(app, html.unescape(headline.group(1))))[0]) == ready

            # The ClusterSource: its counts, what it could not import, and its Clusters.
            sources = page.split('id="sources"', 1)[1]
            assert "capi" in sources and "NotAllImported" in sources
            assert "Secret <code>broken-kubeconfig</code>" in sources
            assert "the kubeconfig has no current context" in sources
            assert "and 3 more (status.more)" in sources
            # Its own row: the overview lists every namespace's ClusterSources, and a test that
            # failed before this one may have left its own "capi" behind.
            row = next(r for r in sources.split("<tr") if f"<td>capi</td><td>{namespace}</td>" in r)
            made = re.search(r'<td><a href="([^"]+)">2</a></td>', row)
            assert made is not None
            shown, _ = await _every_listed(app, html.unescape(made.group(1)))
            assert set(shown) == {(namespace, "s0"), (namespace, "s1")}

            # Unasked, the few-valued keys are counted: region (3 values), tier, fleet-run.
            page, requests = await app.view(f"/overview?selector={scope}")
            assert requests == 1  # the Clusters were listed for this session a moment ago
            assert {"label region", "label tier", "label fleet-run"} <= set(_sections(page))
            # One namespace's overview: its counts only, and its links keep it.
            page, _ = await app.view(f"/overview?namespace={other}&selector={scope}")
            ours = [m for m in everything if m.namespace == other]
            assert (
                f"{len(ours)} Clusters matching fleet-run={namespace} in namespace {other}" in page
            )
            for _, _, href in _sections(page)["reasons"]:
                assert f"namespace={other}" in href
    finally:
        kubectl(hub, "delete", "namespace", other, "--wait=false", check=False)


async def test_an_overview_the_page_cannot_count_is_a_one_line_400(
    hub: APIServer, crds: object
) -> None:
    async with local_ui(hub) as app:
        for query, said in (
            ("labels=Not%20A%20Key", "labels"),
            ("labels=" + ",".join(f"k{i}" for i in range(21)), "at most 20 label keys"),
            ("namespace=..", "namespace"),
        ):
            response = await app.browser.get(f"/overview?{query}")
            assert response.status_code == 400, query
            assert said in response.text
        assert app.requests.verbs == []


async def test_a_namespace_user_sees_the_overview_of_their_namespace_as_their_rbac_allows(
    hub: APIServer, crds: object, namespace: str
) -> None:
    """A ServiceAccount that may list Clusters, not ClusterSources, in its namespace: its counts,
    and one line on the sources it may not list, never an error page or another's Clusters."""
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
        await make_fleet(admin, members(namespace, 7))
    own = install_ui_account(hub)
    bearer = user(hub, namespace, "carol", verbs="get,list")
    async with in_cluster_app(own) as app:
        signed = await app.browser.post(
            "/signin", data={"token": bearer}, headers={"Sec-Fetch-Site": "same-origin"}
        )
        assert signed.status_code == 303, signed.text
        page = await app.browser.get(f"/overview?namespace={namespace}")
        assert page.status_code == 200, page.text[:2000]
        assert f"7 Clusters in namespace {namespace}" in page.text
        assert f"you may not list ClusterSources in namespace {namespace}" in page.text
        counts = _sections(page.text)
        assert {t: n for t, n, _ in counts["ready"]} == {"True": 3, "False": 3, "Unknown": 1}
        for _, _, href in counts["reasons"]:
            listed_page = await app.browser.get(href)
            assert listed_page.status_code == 200
            assert f"namespace={namespace}" in href
    assert bearer not in page.text


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (404, "ClusterSources are not installed on this hub (no clustersources resource)"),
        (403, "you may not list ClusterSources in platform"),
        (500, "cannot list ClusterSources: "),
    ],
)
async def test_an_overview_without_the_cluster_sources_says_why_in_one_line(
    code: int, said: str
) -> None:
    """The Clusters are counted whatever the ClusterSources' answer: a hub without their CRD, a
    user who may not list them (then asked in each namespace of the Clusters), a failure."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if request.url.path.endswith("/clustersources"):
            reason = {404: "NotFound", 403: "Forbidden", 500: "InternalError"}[code]
            status = {"kind": "Status", "status": "Failure", "reason": reason, "code": code}
            return httpx.Response(code, json={**status, "message": "no"})
        item = {"metadata": {"name": "edge", "namespace": "platform"}, "spec": {}}
        return httpx.Response(200, json={"kind": "ClusterList", "metadata": {}, "items": [item]})

    config = Config(server="https://hub.invalid:6443", token=StaticToken("x"), namespace="p")
    async with Client(config, transport=httpx.MockTransport(answer), max_retries=0) as client:
        sessions = Sessions()
        app = create_app(UI(client, sessions))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as browser:
            signed = await browser.get(f"/signin?token={sessions.sign_in_token}")
            base = signed.headers["location"].removesuffix("/clusters")
            page = await browser.get(f"{base}/overview")
    assert page.status_code == 200
    assert "1 Cluster in all namespaces" in page.text
    note = page.text.split('<section class="card" id="sources">', 1)[1]
    line = note.split('<p class="muted">', 1)[1].split("</p>", 1)[0]
    assert line.startswith(said) and "\n" not in line
    sources = [p for p in asked if p.endswith("/clustersources")]
    # Refused everywhere: asked again in the one namespace the Clusters are in.
    assert len(sources) == (2 if code == 403 else 1)
