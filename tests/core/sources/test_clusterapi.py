"""A ClusterSource's rules without a server: which Secrets, which Clusters, which status."""

from __future__ import annotations

import base64
from typing import Any

import hypothesis.strategies as st
from hypothesis import given

from kokumi.cmd.cluster.describe import describe_text
from kokumi.core.reasons import Reason
from kokumi.core.sources import clusterapi
from kokumi.core.sources.plan import (
    Existing,
    OwnerRef,
    cluster_body,
    controller_of,
    existing_of,
    kubeconfig_problem,
)
from kokumi.core.sources.spec import SOURCE_LABEL, ClusterSource, SourceInvalid, parse_source
from kokumi.core.sources.status import MAX_LISTED, status_of, status_patch
from kokumi.testing import canary
from tests.support.sources import applied
from tests.support.strategies import dump, kubeconfig

UID = "uid-capi"


def source(**spec: Any) -> ClusterSource:
    parsed = parse_source(
        {
            "metadata": {"name": "capi", "namespace": "platform", "uid": UID, "generation": 3},
            "spec": {"from": "ClusterAPI", **spec},
        }
    )
    assert isinstance(parsed, ClusterSource), parsed
    return parsed


def secret(value: str | None) -> dict[str, Any]:
    data = {} if value is None else {"value": base64.b64encode(value.encode()).decode()}
    return {"metadata": {"name": "w-kubeconfig"}, "data": data}


def capi_ref(cluster: str, uid: str | None = None) -> OwnerRef:
    """The controller ownerReference Cluster API puts on its cluster's kubeconfig Secret."""
    return OwnerRef("cluster.x-k8s.io/v1beta1", "Cluster", cluster, uid or f"uid-{cluster}")


def good(cluster: str, problem: tuple[Reason, str] | None = None) -> clusterapi.SecretView:
    """A kubeconfig Secret as Cluster API writes it: controlled by its cluster."""
    return clusterapi.SecretView(f"{cluster}-kubeconfig", cluster, problem, capi_ref(cluster))


def capi_of(*names: str, **labels: dict[str, str]) -> clusterapi.CapiView:
    """Cluster API's clusters ``names`` and those of ``labels``, readable, each with its uid."""
    clusters: dict[str, dict[str, str]] = {**{n: {} for n in names}, **labels}
    return clusterapi.CapiView(True, clusters, {n: f"uid-{n}" for n in clusters})


def made(name: str, labels: dict[str, str], owner: str = UID) -> Existing:
    return Existing(name, ("capi", owner), labels, f"{name}-kubeconfig")


def test_only_the_kubeconfig_secret_of_a_capi_cluster_matches() -> None:
    label = {clusterapi.CAPI_CLUSTER_NAME: "work"}
    assert clusterapi.capi_cluster_of("work-kubeconfig", label) == "work"
    assert clusterapi.capi_cluster_of("work-ca", label) is None  # Cluster API's other Secrets
    assert clusterapi.capi_cluster_of("work-kubeconfig", {}) is None
    assert clusterapi.capi_cluster_of("other-kubeconfig", label) is None


def test_usability_is_the_clusters_own_check_and_never_quotes_the_secret() -> None:
    token = canary.token("capi-admin")
    text = dump(kubeconfig(user={"token": token}))
    assert kubeconfig_problem(secret(text)) is None
    reason, message = kubeconfig_problem(secret(None)) or (None, "")
    assert reason is Reason.SECRET_KEY_NOT_FOUND
    assert "no key value" in message
    reason, message = kubeconfig_problem(secret("{{{ not yaml " + token)) or (None, "")
    assert reason is Reason.INVALID_KUBECONFIG
    assert token not in message
    assert "\n" not in message


def test_a_secret_becomes_a_cluster_with_both_labels_marked_and_owned() -> None:
    src = source(labels={"fleet": "edge"})
    capi = capi_of(work={"env": "prod", "fleet": "capi"})
    decided = clusterapi.plan(src, [good("work")], capi, {})
    assert [d.name for d in decided.create] == ["work"]
    body = cluster_body(src, decided.create[0])
    assert body["metadata"]["labels"] == {
        "env": "prod",
        "fleet": "edge",  # the source's labels win
        SOURCE_LABEL: "capi",
    }
    assert body["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "delivery.kokumi.dev/v1alpha1",
            "kind": "ClusterSource",
            "name": "capi",
            "uid": UID,
            "controller": True,
        }
    ]
    assert body["spec"]["kubeconfig"]["secretRef"] == {"name": "work-kubeconfig", "key": "value"}
    described = describe_text(body, [body], [], None, [])
    assert "ClusterSource capi (from Cluster API's Secret work-kubeconfig)" in described
    hand = describe_text({**body, "metadata": {"name": "work"}}, [], [], None, [])
    assert "Source:" not in hand
    assert existing_of(body) == Existing(
        "work", ("capi", UID), body["metadata"]["labels"], "work-kubeconfig"
    )
    status = status_of(src, decided, {})
    assert (status.ready, status.reason, status.matched, status.made) == (
        True,
        Reason.READY,
        1,
        1,
    )


def test_the_selector_is_over_the_capi_clusters_labels() -> None:
    src = source(selector={"matchLabels": {"env": "prod"}})
    capi = capi_of(a={"env": "prod"}, b={"env": "dev"}, c={})
    decided = clusterapi.plan(src, [good("a"), good("b"), good("c")], capi, {})
    assert [d.name for d in decided.create] == ["a"]
    assert decided.matched == 1
    # b stops matching: its Cluster goes, a's stays.
    labels = {"env": "prod", SOURCE_LABEL: "capi"}
    existing = {"a": made("a", labels), "b": made("b", {"env": "dev", SOURCE_LABEL: "capi"})}
    decided = clusterapi.plan(src, [good("a"), good("b")], capi, existing)
    assert (decided.create, decided.update, decided.delete, decided.kept) == (
        (),
        (),
        ("b",),
        ("a",),
    )


def test_capi_clusters_not_readable_change_nothing_with_or_without_a_selector() -> None:
    """Which Secret is Cluster API's needs its clusters: a missing permission deletes nothing."""
    existing = {"a": made("a", {SOURCE_LABEL: "capi"})}
    for src, names_selector in (
        (source(selector={"matchLabels": {"env": "prod"}}), True),
        (source(), False),
    ):
        # a's Secret is still there, b's is new, c's lost its owner: none of it is acted on.
        secrets = [good("a"), good("b"), clusterapi.SecretView("c-kubeconfig", "c")]
        decided = clusterapi.plan(src, secrets, clusterapi.CapiView(False), existing)
        assert (decided.create, decided.update, decided.delete) == ((), (), ())
        assert decided.kept == ("a",)
        status = status_of(src, decided, {})
        assert (status.reason, status.made) == (Reason.CLUSTER_API_NOT_READABLE, 1)
        assert "clusters.cluster.x-k8s.io" in status.message
        assert "controls it" in status.message
        assert ("spec.selector" in status.message) is names_selector
        assert "\n" not in status.message


def test_cluster_api_not_installed_says_so_and_when_it_is_picked_up() -> None:
    """A missing CRD is no permission to grant: the message says what is missing and that the
    manager picks it up once it is applied; a refusal still names the permission."""
    existing = {"a": made("a", {SOURCE_LABEL: "capi"})}
    secrets = [good("a"), good("b")]
    missing = clusterapi.view_of(False, [], installed=False)
    decided = clusterapi.plan(source(), secrets, missing, existing)
    assert (decided.create, decided.delete, decided.kept) == ((), (), ("a",))
    status = status_of(source(), decided, {})
    assert status.reason == Reason.CLUSTER_API_NOT_READABLE
    assert status.message.startswith(
        "Cluster API is not installed (no CRD clusters.cluster.x-k8s.io)"
    )
    assert "picked up within seconds of the CRD being applied" in status.message
    assert "grant" not in status.message
    refused = clusterapi.plan(source(), secrets, clusterapi.view_of(False, []), existing)
    message = status_of(source(), refused, {}).message
    assert "grant it get, list and watch on clusters.cluster.x-k8s.io" in message
    assert "not installed" not in message


def test_secrets_not_listable_change_nothing_and_say_so() -> None:
    existing = {"a": made("a", {SOURCE_LABEL: "capi"})}
    for listable, message in ((False, "Kokumi may not list"), (None, "not listed")):
        decided = clusterapi.plan(
            source(),
            [],
            capi_of("a"),
            existing,
            secrets_listable=listable,
            not_listable_message="Kokumi may not list Secrets here: bind ...",
        )
        assert (decided.create, decided.delete, decided.kept) == ((), (), ("a",))
        status = status_of(source(), decided, {})
        assert status.reason is Reason.SECRET_NOT_READABLE
        assert message in status.message


def test_a_hand_made_cluster_is_never_touched_and_is_a_conflict() -> None:
    hand = Existing("work", None, {}, "other")
    other_source = Existing("work", ("second", "uid-2"), {}, "work-kubeconfig")
    for there, who in ((hand, "not made by this ClusterSource"), (other_source, "second made")):
        decided = clusterapi.plan(source(), [good("work")], capi_of("work"), {"work": there})
        assert (decided.create, decided.update, decided.delete) == ((), (), ())
        status = status_of(source(), decided, {})
        assert (status.reason, status.conflicts, status.made) == (Reason.NOT_ALL_IMPORTED, 1, 0)
        entry = status.not_imported[0]
        assert (entry.secret, entry.cluster, entry.reason) == (
            "work-kubeconfig",
            "work",
            Reason.CLUSTER_CONFLICT,
        )
        assert who in entry.message


def test_an_unusable_secret_makes_no_cluster_but_keeps_one_it_made() -> None:
    broken = good("w", (Reason.INVALID_KUBECONFIG, "user x uses exec"))
    decided = clusterapi.plan(source(), [broken], capi_of("w"), {})
    assert decided.create == ()
    status = status_of(source(), decided, {})
    assert (status.not_usable, status.made, status.reason) == (1, 0, Reason.NOT_ALL_IMPORTED)
    assert status.not_imported[0].message == "user x uses exec"
    existing = {"w": made("w", {SOURCE_LABEL: "capi"})}
    decided = clusterapi.plan(source(), [broken], capi_of("w"), existing)
    assert (decided.delete, decided.kept) == ((), ("w",))
    assert status_of(source(), decided, {}).made == 1


# --- whose the Secret is -----------------------------------------------------------------------


def test_controller_of_reads_the_one_controller_reference() -> None:
    capi = {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": "w", "uid": "u"}
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c"}
    assert controller_of(None) is None
    assert controller_of("not a list") is None
    assert controller_of([capi]) is None  # an owner, not the controller
    assert controller_of([{**capi, "controller": False}]) is None
    assert controller_of([other, {**capi, "controller": True}]) == OwnerRef(
        "cluster.x-k8s.io/v1beta1", "Cluster", "w", "u"
    )


FIX = (
    "set that ownerReference (apiVersion cluster.x-k8s.io/v1beta1, kind Cluster, name w, "
    "uid uid-w, controller true)"
)
NOT_ITS_OWN = [
    ("no controller", None, "it has no controller ownerReference"),
    (
        "another kind",
        OwnerRef("v1", "ConfigMap", "w", "uid-w"),
        'its controller is "ConfigMap" "w" of "v1", not Cluster API\'s cluster w',
    ),
    (
        "another group",
        OwnerRef("delivery.kokumi.dev/v1alpha1", "Cluster", "w", "uid-w"),
        "not Cluster API's cluster w",
    ),
    ("another name", capi_ref("other"), 'its controller is Cluster API\'s cluster "other", not w'),
    (
        "another uid",
        capi_ref("w", "uid-before"),
        'with uid "uid-before", and the cluster w here has uid uid-w',
    ),
]


def test_only_a_secret_its_capi_cluster_controls_is_imported() -> None:
    """Name and label are anybody's to write who may create Secrets; the controller is not."""
    capi = capi_of("w", "other")
    assert clusterapi.owner_problem(good("w"), capi) is None
    assert [d.name for d in clusterapi.plan(source(), [good("w")], capi, {}).create] == ["w"]
    for case, ref, text in NOT_ITS_OWN:
        secret = clusterapi.SecretView("w-kubeconfig", "w", None, ref)
        decided = clusterapi.plan(source(), [secret], capi, {})
        assert (decided.create, decided.update, decided.delete) == ((), (), ()), case
        status = status_of(source(), decided, {})
        assert (status.ready, status.reason, status.matched, status.made, status.not_usable) == (
            False,
            Reason.NOT_ALL_IMPORTED,
            1,
            0,
            1,
        ), case
        (entry,) = status.not_imported
        assert (entry.secret, entry.cluster, entry.reason) == (
            "w-kubeconfig",
            "w",
            Reason.SECRET_NOT_OWNED,
        ), case
        assert text in entry.message, (case, entry.message)
        assert FIX in entry.message, (case, entry.message)  # the fix, as Cluster API writes it
        assert "\n" not in entry.message
    # No Cluster API cluster w at all: a Secret of its name is anybody's, whatever it says.
    decided = clusterapi.plan(source(), [good("w")], capi_of("other"), {})
    assert decided.create == ()
    (entry,) = decided.not_imported
    assert entry.reason is Reason.SECRET_NOT_OWNED
    assert entry.message.startswith("no Cluster API cluster w exists in this namespace")


def test_the_uid_counts_where_known_and_odd_owners_stay_on_one_line() -> None:
    unknown = clusterapi.CapiView(True, {"w": {}})
    assert (
        clusterapi.owner_problem(
            clusterapi.SecretView("w-kubeconfig", "w", None, capi_ref("w", "x")), unknown
        )
        is None
    )
    reason, message = clusterapi.owner_problem(
        clusterapi.SecretView("w-kubeconfig", "w"), unknown
    ) or (None, "")
    assert reason is Reason.SECRET_NOT_OWNED
    assert "(apiVersion cluster.x-k8s.io/v1beta1, kind Cluster, name w, controller true)" in message
    odd = clusterapi.SecretView(
        "w-kubeconfig", "w", None, OwnerRef("v1\nx", "Config\nMap", "a\rb", "u")
    )
    _, message = clusterapi.owner_problem(odd, capi_of("w")) or (None, "")
    assert "\n" not in message and "\r" not in message
    assert '"Config\\nMap"' in message


def test_a_cluster_whose_secret_stops_being_its_capi_clusters_goes_as_if_unmatched() -> None:
    """As when its Secret stops matching: the Cluster is deleted (its registration released as
    for any deleted Cluster), and the Secret is listed with why."""
    existing = {"w": made("w", {SOURCE_LABEL: "capi"})}
    capi = capi_of("w")
    assert clusterapi.plan(source(), [good("w")], capi, existing).kept == ("w",)
    unmatched = clusterapi.plan(
        source(selector={"matchLabels": {"env": "prod"}}), [good("w")], capi, existing
    )
    assert unmatched.delete == ("w",)
    for case, secret, now in (
        ("the owner removed", clusterapi.SecretView("w-kubeconfig", "w"), capi),
        ("the Cluster API cluster gone", good("w"), capi_of()),
        (
            "made again under the name",
            good("w"),
            clusterapi.CapiView(True, {"w": {}}, {"w": "uid-new"}),
        ),
    ):
        decided = clusterapi.plan(source(), [secret], now, existing)
        assert (decided.create, decided.update, decided.delete, decided.kept) == (
            (),
            (),
            ("w",),
            (),
        ), case
        status = status_of(source(), decided, {})
        assert status.made == 0, case
        assert [e.reason for e in status.not_imported] == [Reason.SECRET_NOT_OWNED], case
    # A Cluster the source did not make is never touched, whoever's the Secret is.
    hand = {"w": Existing("w", None, {}, "w-kubeconfig")}
    decided = clusterapi.plan(source(), [clusterapi.SecretView("w-kubeconfig", "w")], capi, hand)
    assert (decided.create, decided.update, decided.delete) == ((), (), ())


def test_a_refused_create_is_listed_and_not_counted() -> None:
    decided = clusterapi.plan(source(), [good("a"), good("b")], capi_of("a", "b"), {})
    status = status_of(source(), decided, {"a": "Forbidden: quota"})
    assert (status.made, status.reason) == (1, Reason.NOT_ALL_IMPORTED)
    assert [(e.cluster, e.reason) for e in status.not_imported] == [
        ("a", Reason.CLUSTER_WRITE_FAILED)
    ]


def test_invalid_specs_say_what_to_fix() -> None:
    base = {"metadata": {"name": "s", "namespace": "n"}}
    cases = [
        ({"from": "Rancher"}, Reason.INVALID_SPEC, "write ClusterAPI, Secrets or VCluster"),
        ({"from": "ClusterAPI", "selector": 3}, Reason.INVALID_SELECTOR, "spec.selector"),
        ({"from": "ClusterAPI", "labels": {"a": 1}}, Reason.INVALID_SPEC, "spec.labels"),
        (
            {"from": "ClusterAPI", "labels": {SOURCE_LABEL: "x"}},
            Reason.INVALID_SPEC,
            "Kokumi's own",
        ),
        ({"from": "ClusterAPI", "labels": {"a b": "x"}}, Reason.INVALID_SPEC, "spec.labels"),
    ]
    for spec, reason, text in cases:
        parsed = parse_source({**base, "spec": spec})
        assert isinstance(parsed, SourceInvalid), spec
        assert parsed.reason is reason
        assert text in parsed.message, parsed.message
        status = status_of(parsed, None, {})
        assert (status.ready, status.reason) == (False, reason)


def test_the_status_is_bounded_and_written_only_when_it_changes() -> None:
    broken = [good(f"c{i:03}", (Reason.SECRET_KEY_NOT_FOUND, "no key")) for i in range(120)]
    capi = capi_of(*(f"c{i:03}" for i in range(120)))
    status = status_of(source(), clusterapi.plan(source(), broken, capi, {}), {})
    patch = status_patch({}, status, "2026-01-01T00:00:00Z")
    assert patch is not None
    assert len(patch["notImported"]) == MAX_LISTED
    assert patch["more"] == 120 - MAX_LISTED
    assert patch["notImported"][0]["secret"] == "c000-kubeconfig"
    assert status_patch(patch, status, "2026-02-02T00:00:00Z") is None
    fixed = status_of(source(), clusterapi.plan(source(), [], capi, {}), {})
    cleared = status_patch(patch, fixed, "2026-02-02T00:00:00Z")
    assert cleared is not None
    assert cleared["more"] is None  # the merge patch removes it
    assert cleared["conditions"][0]["lastTransitionTime"] == "2026-02-02T00:00:00Z"


# --- properties ---------------------------------------------------------------------------------

cluster_names = st.sampled_from(["a", "b", "c", "d", "e"])
label_sets = st.dictionaries(st.sampled_from(["env", "tier"]), st.sampled_from(["prod", "dev"]))


World = tuple[ClusterSource, list[clusterapi.SecretView], clusterapi.CapiView, dict[str, Existing]]


def controllers(cluster: str) -> st.SearchStrategy[OwnerRef | None]:
    """A Secret's controller: mostly its Cluster API cluster, else none or somebody else."""
    return st.sampled_from(
        [
            capi_ref(cluster),
            capi_ref(cluster),
            None,
            OwnerRef("v1", "ConfigMap", cluster, f"uid-{cluster}"),
            capi_ref("a" if cluster != "a" else "b"),
            capi_ref(cluster, "uid-before"),
        ]
    )


@st.composite
def worlds(draw: st.DrawFn) -> World:
    selector = draw(st.sampled_from([{}, {"matchLabels": {"env": "prod"}}]))
    src = source(selector=selector, labels=draw(st.sampled_from([{}, {"fleet": "edge"}])))
    secrets = [
        clusterapi.SecretView(
            f"{n}-kubeconfig",
            n,
            draw(st.sampled_from([None, (Reason.INVALID_KUBECONFIG, "bad")])),
            draw(controllers(n)),
        )
        for n in draw(st.sets(cluster_names))
    ]
    labels = draw(st.dictionaries(cluster_names, label_sets))
    capi = clusterapi.CapiView(draw(st.booleans()), labels, {n: f"uid-{n}" for n in labels})
    existing = {}
    for n in draw(st.sets(cluster_names)):
        owner = draw(st.sampled_from([None, ("capi", UID), ("other", "uid-o")]))
        existing[n] = Existing(n, owner, draw(label_sets), f"{n}-kubeconfig")
    return src, secrets, capi, existing


@given(worlds())
def test_the_plan_never_touches_what_is_not_the_sources(world: World) -> None:
    src, secrets, capi, existing = world
    decided = clusterapi.plan(src, secrets, capi, existing)
    touched = {d.name for d in (*decided.create, *decided.update)} | set(decided.delete)
    for name in touched:
        there = existing.get(name)
        assert there is None or there.owner == ("capi", UID)
    assert not {d.name for d in decided.create} & set(existing)


@given(worlds())
def test_one_step_reaches_the_fixed_point(world: World) -> None:
    """After its writes, the source plans nothing more: 0 writes when nothing changes."""
    src, secrets, capi, existing = world
    decided = clusterapi.plan(src, secrets, capi, existing)
    after = applied(src, decided, existing)
    again = clusterapi.plan(src, secrets, capi, after)
    assert (again.create, again.update, again.delete) == ((), (), ())
    first = status_of(src, decided, {})
    second = status_of(src, again, {})
    assert first == second
    patch = status_patch({}, second, "t0")
    assert patch is not None and status_patch(patch, second, "t1") is None


@given(worlds())
def test_every_matched_secret_has_its_cluster_or_a_reason(world: World) -> None:
    src, secrets, capi, existing = world
    decided = clusterapi.plan(src, secrets, capi, existing)
    if decided.blocked is not None:
        assert (decided.create, decided.update, decided.delete) == ((), (), ())
        return
    after = applied(src, decided, existing)
    listed = {e.secret for e in decided.not_imported}
    for s in secrets:
        labels = capi.labels.get(s.cluster, {}) if capi.readable else {}
        if not src.selector.matches(labels):
            assert after.get(s.cluster) is None or after[s.cluster].owner != ("capi", UID)
            continue
        ours = s.cluster in after and after[s.cluster].owner == ("capi", UID)
        assert ours or s.name in listed
        assert (s.problem is None and ours) or s.name in listed


def cluster_apis_own(secret: clusterapi.SecretView, capi: clusterapi.CapiView) -> bool:
    """The rule, said again without the code under test: Cluster API's cluster of the Secret's
    name exists, and is the Secret's controller, uid and all."""
    ref = secret.controller
    return (
        secret.cluster in capi.labels
        and ref is not None
        and (ref.api_version, ref.kind, ref.name)
        == ("cluster.x-k8s.io/v1beta1", "Cluster", secret.cluster)
        and ref.uid == capi.uids[secret.cluster]
    )


@given(worlds())
def test_only_secrets_their_capi_cluster_controls_keep_a_cluster(world: World) -> None:
    src, secrets, capi, existing = world
    decided = clusterapi.plan(src, secrets, capi, existing)
    if not capi.readable:  # which Secrets are Cluster API's is unknown: nothing moves
        assert (decided.create, decided.update, decided.delete) == ((), (), ())
        assert decided.blocked is not None and decided.blocked[0] is Reason.CLUSTER_API_NOT_READABLE
        return
    after = applied(src, decided, existing)
    reasons = {e.secret: e.reason for e in decided.not_imported}
    for s in secrets:
        ours = s.cluster in after and after[s.cluster].owner == ("capi", UID)
        if not cluster_apis_own(s, capi):
            assert not ours, s
            if src.selector.matches(capi.labels.get(s.cluster, {})):
                assert reasons[s.name] is Reason.SECRET_NOT_OWNED, s
    kept = {n for n, e in after.items() if e.owner == ("capi", UID)}
    assert kept <= {s.cluster for s in secrets if cluster_apis_own(s, capi)}


def test_a_capi_cluster_over_the_bounds_is_listed_and_its_cluster_stays_as_it_is() -> None:
    """The manager keeps no labels of a Cluster API cluster over the metadata bounds, so no
    selector can be judged on it: its Secret is listed as ObjectTooLarge (counts, never a
    label), no Cluster is made for it, and one made before stays, labels and all, untouched."""
    why = "metadata.labels has 90000 entries of 1439932 bytes (at most 64 entries of 16384 bytes)"
    over = clusterapi.CapiView(True, {"w": {}}, {"w": "uid-w"}, {"w": why})
    src = source(selector={"matchLabels": {"env": "prod"}})
    decided = clusterapi.plan(src, [good("w")], over, {})
    assert decided.create == ()
    (entry,) = decided.not_imported
    assert entry.reason is Reason.OBJECT_TOO_LARGE
    assert entry.message == f"its Cluster API cluster w: {why}"
    existing = {"w": made("w", {SOURCE_LABEL: "capi", "env": "prod"})}
    decided = clusterapi.plan(src, [good("w")], over, existing)
    assert (decided.create, decided.update, decided.delete) == ((), (), ())
    assert decided.kept == ("w",)
    assert [e.reason for e in decided.not_imported] == [Reason.OBJECT_TOO_LARGE]
