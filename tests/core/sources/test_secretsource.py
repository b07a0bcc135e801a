"""A ``from: Secrets`` (and ``from: VCluster``) source's rules without a server."""

from __future__ import annotations

import base64
from typing import Any

import attrs
import hypothesis.strategies as st
from hypothesis import given

from kokumi.core.reasons import Reason
from kokumi.core.sources import secretplan as sp
from kokumi.core.sources import secretsource as ss
from kokumi.core.sources import vcluster as vcl
from kokumi.core.sources.plan import (
    Existing,
    OwnerRef,
    cluster_body,
    existing_of,
    kubeconfig_problem,
)
from kokumi.core.sources.spec import SOURCE_LABEL, ClusterSource, SourceInvalid, parse_source
from kokumi.core.sources.status import status_of
from kokumi.testing import canary
from tests.support.sources import applied
from tests.support.strategies import dump, kubeconfig

UID = "uid-team"
MARK = {"kokumi.dev/kubeconfig": "true"}


def source(**spec: Any) -> ClusterSource:
    body = {"from": "Secrets", "secretSelector": {"matchLabels": MARK}, **spec}
    parsed = parse_source(
        {"metadata": {"name": "team", "namespace": "p", "uid": UID, "generation": 2}, "spec": body}
    )
    assert isinstance(parsed, ClusterSource), parsed
    return parsed


def vcluster(**spec: Any) -> ClusterSource:
    parsed = parse_source(
        {
            "metadata": {"name": "vc", "namespace": "p", "uid": UID},
            "spec": {"from": "VCluster", **spec},
        }
    )
    assert isinstance(parsed, ClusterSource), parsed
    return parsed


def invalid(**spec: Any) -> SourceInvalid:
    parsed = parse_source({"metadata": {"name": "s", "namespace": "p"}, "spec": spec})
    assert isinstance(parsed, SourceInvalid), parsed
    return parsed


def made(name: str, secret: str, labels: dict[str, str], key: str = "value") -> Existing:
    return Existing(name, ("team", UID), labels, secret, key)


def test_naming_by_label_by_trimmed_name_or_by_the_secret_name() -> None:
    assert ss.cluster_name(source().shape, "edge-1", MARK) == "edge-1"  # type: ignore[arg-type]
    trimmed = source(naming={"trimPrefix": "kc-", "trimSuffix": "-admin-kubeconfig"}).shape
    assert trimmed is not None
    assert ss.cluster_name(trimmed, "kc-edge-admin-kubeconfig", MARK) == "edge"
    assert ss.cluster_name(trimmed, "edge", MARK) == "edge"  # trimmed only where present
    labelled = source(naming={"label": "crossplane.io/claim-name"}).shape
    assert labelled is not None
    assert ss.cluster_name(labelled, "x", {**MARK, "crossplane.io/claim-name": "db"}) == "db"
    missing = ss.cluster_name(labelled, "x", MARK)
    assert isinstance(missing, tuple) and missing[0] is Reason.INVALID_CLUSTER_NAME
    assert "label it crossplane.io/claim-name=<cluster>" in missing[1]
    assert ss.cluster_name(labelled, "x", {}) is None  # not matched at all


def test_a_name_that_makes_no_cluster_name_says_how_to_fix_it() -> None:
    shape = source().shape
    assert shape is not None
    for name in ("Edge_1", "a" * 64):
        problem = ss.cluster_name(shape, name, MARK)
        assert isinstance(problem, tuple) and problem[0] is Reason.INVALID_CLUSTER_NAME, name
        assert "rename the Secret or change spec.naming" in problem[1]
        assert "\n" not in problem[1]


def test_the_vcluster_preset_is_vc_name_labelled_key_config() -> None:
    shape = vcluster().shape
    assert shape is not None and shape.key == "config"
    labels = {"app": "vcluster", "vcluster-name": "dev"}
    assert ss.cluster_name(shape, "vc-dev", labels) == "dev"
    # vcluster's other Secrets, and a look-alike of another name, are not its kubeconfig.
    assert ss.cluster_name(shape, "vc-config-dev", labels) is None
    assert ss.cluster_name(shape, "dev-certs", {"app": "vcluster"}) is None
    assert ss.cluster_name(shape, "vc-dev", {"vcluster-name": "dev"}) is None
    narrowed = vcluster(secretSelector={"matchLabels": {"team": "a"}}).shape
    assert narrowed is not None
    assert ss.cluster_name(narrowed, "vc-dev", labels) is None
    assert ss.cluster_name(narrowed, "vc-dev", {**labels, "team": "a"}) == "dev"


def test_invalid_secrets_specs_say_what_to_fix() -> None:
    cases: list[tuple[dict[str, Any], Reason, str]] = [
        ({"from": "Secrets"}, Reason.INVALID_SELECTOR, "spec.secretSelector is required"),
        ({"from": "Secrets", "secretSelector": {}}, Reason.INVALID_SELECTOR, "must select"),
        (
            {"from": "Secrets", "secretSelector": {"matchLabels": MARK}, "key": "a b"},
            Reason.INVALID_SPEC,
            "is not a Secret key",
        ),
        (
            {
                "from": "Secrets",
                "secretSelector": {"matchLabels": MARK},
                "naming": {"label": "x", "trimSuffix": "-k"},
            },
            Reason.INVALID_SPEC,
            "set one or the other",
        ),
        ({"from": "VCluster", "key": "x"}, Reason.INVALID_SPEC, "vcluster's own"),
        ({"from": "VCluster", "selector": {}}, Reason.INVALID_SPEC, "spec.secretSelector"),
        ({"from": "ClusterAPI", "key": "x"}, Reason.INVALID_SPEC, "remove it"),
    ]
    for spec, reason, text in cases:
        parsed = invalid(**spec)
        assert parsed.reason is reason, spec
        assert text in parsed.message and "\n" not in parsed.message, parsed.message


def test_a_secret_becomes_a_cluster_with_its_labels_and_key() -> None:
    src = source(key="kubeconfig", labels={"fleet": "edge"})
    secret = sp.Labelled("edge-1", {**MARK, "env": "prod", "delivery.kokumi.dev/x": "y"})
    decided = sp.plan_secrets(src, [secret], {})
    (desired,) = decided.create
    assert (desired.name, desired.secret, desired.key) == ("edge-1", "edge-1", "kubeconfig")
    body = cluster_body(src, desired)
    assert body["metadata"]["labels"] == {
        **MARK,
        "env": "prod",
        "fleet": "edge",
        SOURCE_LABEL: "team",
    }
    assert body["spec"]["kubeconfig"]["secretRef"] == {"name": "edge-1", "key": "kubeconfig"}
    assert body["spec"]["description"] == "kubeconfig Secret edge-1, from ClusterSource team"
    status = status_of(src, decided, {})
    assert (status.ready, status.message) == (
        True,
        "1 kubeconfig Secrets matched, each with its Cluster",
    )
    vc = vcluster()
    vdesired = sp.plan_secrets(
        vc,
        [sp.Labelled("vc-dev", {"app": "vcluster", "vcluster-name": "dev"})],
        {},
        vclusters=vcl.VClusterView(True, {"dev": "uid-svc"}),
    ).create[0]
    assert cluster_body(vc, vdesired)["spec"]["kubeconfig"]["secretRef"] == {
        "name": "vc-dev",
        "key": "config",
    }
    assert (
        "no vcluster kubeconfig Secret"
        in status_of(vc, sp.plan_secrets(vc, [], {}, vclusters=vcl.VClusterView(True)), {}).message
    )


def test_a_secret_that_stops_matching_deletes_its_cluster_and_a_hand_made_one_stays() -> None:
    src = source()
    existing = {
        "edge-1": made("edge-1", "edge-1", {**MARK, SOURCE_LABEL: "team"}),
        "hand": Existing("hand", None, {}, "mine"),
    }
    decided = sp.plan_secrets(src, [sp.Labelled("edge-1", {}), sp.Labelled("hand", MARK)], existing)
    assert decided.delete == ("edge-1",)
    assert decided.create == () and decided.update == ()
    (entry,) = decided.not_imported
    assert (entry.secret, entry.cluster, entry.reason) == ("hand", "hand", Reason.CLUSTER_CONFLICT)
    assert "not made by this ClusterSource" in entry.message


def test_secrets_not_listable_change_nothing() -> None:
    src = source()
    existing = {"edge-1": made("edge-1", "edge-1", {**MARK, SOURCE_LABEL: "team"})}
    for listable in (None, False):
        decided = sp.plan_secrets(
            src, [], existing, secrets_listable=listable, not_listable_message="bind it"
        )
        assert (decided.create, decided.update, decided.delete) == ((), (), ())
        assert decided.kept == ("edge-1",)
        status = status_of(src, decided, {})
        assert (status.reason, status.made) == (Reason.SECRET_NOT_READABLE, 1)


def test_a_rotation_to_another_key_or_a_broken_kubeconfig_keeps_the_cluster() -> None:
    src = source(key="kubeconfig")
    labels = {**MARK, SOURCE_LABEL: "team"}
    existing = {"edge-1": made("edge-1", "edge-1", labels)}  # key value: a spec.key change
    broken = (Reason.INVALID_KUBECONFIG, "an exec plugin")
    decided = sp.plan_secrets(src, [sp.Labelled("edge-1", MARK, broken)], existing)
    assert [d.key for d in decided.update] == ["kubeconfig"]
    assert decided.delete == ()
    assert [e.reason for e in decided.not_imported] == [Reason.INVALID_KUBECONFIG]


def test_two_secrets_naming_one_cluster_the_first_has_it() -> None:
    src = source(naming={"trimSuffix": "-kubeconfig"})
    decided = sp.plan_secrets(
        src, [sp.Labelled("edge-kubeconfig", MARK), sp.Labelled("edge", MARK)], {}
    )
    assert [(d.name, d.secret) for d in decided.create] == [("edge", "edge")]
    (entry,) = decided.not_imported
    assert (entry.secret, entry.reason) == ("edge-kubeconfig", Reason.CLUSTER_CONFLICT)
    assert "Secret edge of this source has Cluster edge, made from it (or first by name" in (
        entry.message
    )
    assert "Secret edge-kubeconfig names it too and waits" in entry.message


def test_the_secret_a_cluster_was_made_from_keeps_it_and_a_newcomer_waits() -> None:
    """A Secret that sorts first, written later by anybody who may write Secrets, never takes
    over a Cluster the source made: with trimmed names, with naming.label, with contexts All.
    Once the holder goes, the newcomer takes the Cluster over in place."""
    labels = {**MARK, SOURCE_LABEL: "team"}
    trimmed = source(naming={"trimSuffix": "-kubeconfig"})
    by_label = source(naming={"label": "name"})
    contexts = all_contexts()
    cases: list[tuple[ClusterSource, Existing, sp.Labelled, sp.Labelled, str]] = [
        (
            trimmed,
            made("prod", "prod-kubeconfig", labels),
            sp.Labelled("prod-kubeconfig", MARK),
            sp.Labelled("prod", MARK),
            "Secret prod-kubeconfig of this source has Cluster prod",
        ),
        (
            by_label,
            made("prod", "real", {**labels, "name": "prod"}),
            sp.Labelled("real", {**MARK, "name": "prod"}),
            sp.Labelled("planted", {**MARK, "name": "prod"}),
            "Secret real of this source has Cluster prod",
        ),
        (
            contexts,
            Existing("prod", ("team", UID), labels, "real", "kubeconfig", "prod"),
            sp.Labelled("real", MARK, None, (("prod", None),)),
            sp.Labelled("evil", MARK, None, (("prod", None),)),
            "context prod of Secret real of this source has Cluster prod",
        ),
    ]
    for src, held, holder, newcomer, says in cases:
        existing = {"prod": held}
        decided = sp.plan_secrets(src, [newcomer, holder], existing)
        assert (decided.create, decided.update, decided.delete) == ((), (), ()), src
        assert decided.kept == ("prod",)
        (entry,) = decided.not_imported
        assert (entry.secret, entry.cluster, entry.reason) == (
            newcomer.name,
            "prod",
            Reason.CLUSTER_CONFLICT,
        )
        assert says in entry.message and f"Secret {newcomer.name}" in entry.message
        assert f"waits until {says.split(' of this source')[0]} goes or stops matching" in (
            entry.message
        )
        assert "\n" not in entry.message
        status = status_of(src, decided, {})
        assert (status.reason, status.conflicts, status.made) == (Reason.NOT_ALL_IMPORTED, 1, 1)
        # The holder broken by a rotation: it still holds the Cluster.
        broken = attrs.evolve(holder, problem=(Reason.INVALID_KUBECONFIG, "bad"))
        if src.shape is not None and src.shape.all_contexts:
            broken = attrs.evolve(broken, contexts=())
        still = sp.plan_secrets(src, [newcomer, broken], existing)
        assert (still.create, still.update, still.delete) == ((), (), ())
        # The holder gone: the newcomer takes the Cluster over, an update in place.
        handed = sp.plan_secrets(src, [newcomer], existing)
        assert (handed.create, handed.delete) == ((), ())
        assert [(d.name, d.secret) for d in handed.update] == [("prod", newcomer.name)]


VC = {"app": "vcluster", "vcluster-name": "evil"}


def service_owner(name: str, uid: str) -> OwnerRef:
    """The ownerReference vcluster puts on vc-<name>: its Service, controller false."""
    return OwnerRef("v1", "Service", name, uid)


def test_a_vc_secret_without_vclusters_service_beside_it_makes_no_cluster() -> None:
    """Name and labels are anybody's to write who may create Secrets: vc-evil labelled as
    vcluster labels its Secret is taken only while vcluster's Service evil runs beside it, and
    its ownerReferences, if any, name that Service with its uid."""
    vc = vcluster()
    planted = sp.Labelled("vc-evil", VC)
    none_here = sp.plan_secrets(vc, [planted], {}, vclusters=vcl.VClusterView(True, {"dev": "u"}))
    assert none_here.create == ()
    (entry,) = none_here.not_imported
    assert (entry.secret, entry.cluster, entry.reason) == (
        "vc-evil",
        "evil",
        Reason.SECRET_NOT_OWNED,
    )
    assert entry.message.startswith("no vcluster evil runs in this namespace")
    assert "imported once vcluster evil runs here, else delete it" in entry.message
    status = status_of(vc, none_here, {})
    assert (status.reason, status.not_usable, status.made) == (Reason.NOT_ALL_IMPORTED, 1, 0)

    running = vcl.VClusterView(True, {"evil": "uid-svc"})
    cases: list[tuple[tuple[OwnerRef, ...], str | None]] = [
        ((service_owner("evil", "uid-svc"),), None),  # as vcluster writes it
        ((), None),  # vcluster with setOwner: false
        ((service_owner("evil", "uid-old"),), 'uid "uid-old", and the Service evil here'),
        ((OwnerRef("v1", "ConfigMap", "x", "u"),), '"ConfigMap" "x" of "v1", not vcluster'),
        ((service_owner("dev", "u"),), '"Service" "dev" of "v1"'),
    ]
    for owners, says in cases:
        decided = sp.plan_secrets(vc, [attrs.evolve(planted, owners=owners)], {}, vclusters=running)
        if says is None:
            assert [d.name for d in decided.create] == ["evil"], owners
            continue
        assert decided.create == (), owners
        (entry,) = decided.not_imported
        assert entry.reason is Reason.SECRET_NOT_OWNED and says in entry.message, entry.message
        assert "set that ownerReference (apiVersion v1, kind Service, name evil, uid uid-svc)" in (
            entry.message
        )
        assert "\n" not in entry.message

    # A Cluster the source made goes once its Secret has no vcluster beside it.
    existing = {"evil": made("evil", "vc-evil", {**VC, SOURCE_LABEL: "vc"}, "config")}
    gone = sp.plan_secrets(vc, [planted], existing, vclusters=vcl.VClusterView(True))
    assert gone.delete == ("evil",)
    # The manager may not list the Services: nothing is created or deleted.
    for view in (None, vcl.VClusterView(False)):
        blocked = sp.plan_secrets(vc, [planted], existing, vclusters=view)
        assert (blocked.create, blocked.delete, blocked.kept) == ((), (), ("evil",))
        assert blocked.blocked is not None
        assert blocked.blocked[0] is Reason.VCLUSTER_NOT_READABLE
        assert "grant it list and watch on services" in blocked.blocked[1]
    # A from: Secrets source needs no Service: its selector is its author's choice.
    assert sp.plan_secrets(source(), [sp.Labelled("vc-evil", MARK)], {}).create != ()


def test_the_owners_vcluster_writes_are_read_whatever_their_controller_flag() -> None:
    refs = [
        {"apiVersion": "v1", "kind": "Service", "name": "dev", "uid": "u", "controller": False},
        "not a reference",
    ]
    assert vcl.owners_of(refs) == (service_owner("dev", "u"),)
    assert vcl.owners_of(None) == ()
    view = vcl.view_of(True, [{"name": "dev", "uid": "u"}, {"uid": "nameless"}])
    assert view.services == {"dev": "u"}


@given(
    st.sampled_from(["dev", "evil"]),
    st.lists(
        st.builds(
            OwnerRef,
            st.sampled_from(["v1", "apps/v1"]),
            st.sampled_from(["Service", "StatefulSet", "ConfigMap"]),
            st.sampled_from(["dev", "evil"]),
            st.sampled_from(["uid-dev", "uid-evil", ""]),
        ),
        max_size=3,
    ),
    st.dictionaries(st.sampled_from(["dev", "other"]), st.sampled_from(["uid-dev", "uid-o"])),
)
def test_a_vc_secret_is_a_cluster_only_beside_its_vclusters_service(
    name: str, owners: list[OwnerRef], services: dict[str, str]
) -> None:
    """Whatever owners and Services are drawn: a Cluster only for a Secret whose vcluster's
    Service runs in the namespace and, if it has owners, is one of them with its uid."""
    secret = sp.Labelled(
        f"vc-{name}", {"app": "vcluster", "vcluster-name": name}, None, (), owners=tuple(owners)
    )
    view = vcl.VClusterView(True, services)
    decided = sp.plan_secrets(vcluster(), [secret], {}, vclusters=view)
    vouched = name in services and (
        not owners
        or any(
            (o.api_version, o.kind, o.name, o.uid) == ("v1", "Service", name, services[name])
            for o in owners
        )
    )
    assert bool(decided.create) == vouched
    assert bool(decided.not_imported) == (not vouched)


def test_usability_reads_the_sources_key() -> None:
    good = dump(kubeconfig(user={"token": canary.token("team-admin")}))
    data = {"kubeconfig": base64.b64encode(good.encode()).decode()}
    shape = source(key="kubeconfig").shape
    assert kubeconfig_problem({"data": data}, shape) is None
    missing = kubeconfig_problem({"data": data}, source().shape)
    assert missing is not None and missing[0] is Reason.SECRET_KEY_NOT_FOUND
    assert "its keys: kubeconfig" in missing[1] and "set spec.key" in missing[1]
    vc = kubeconfig_problem({"data": data}, vcluster().shape)
    assert vc is not None and "vcluster writes the kubeconfig there" in vc[1]


# --- properties ---------------------------------------------------------------------------------

names = st.sampled_from(["a", "b", "c", "d"])
World = tuple[ClusterSource, list[sp.Labelled], dict[str, Existing], bool | None]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    naming = draw(
        st.sampled_from([{}, {"trimSuffix": "-kc"}, {"label": "name"}, {"trimPrefix": "x"}])
    )
    src = source(naming=naming, labels=draw(st.sampled_from([{}, {"fleet": "edge"}])))
    secrets = []
    for n in draw(st.sets(st.sampled_from(["a", "b", "a-kc", "b-kc", "xc", "X", "d"]))):
        labels = draw(st.sampled_from([{}, MARK, {**MARK, "env": "prod"}]))
        if draw(st.booleans()):
            labels = {**labels, "name": draw(names)}
        problem = draw(st.sampled_from([None, (Reason.INVALID_KUBECONFIG, "bad")]))
        secrets.append(sp.Labelled(n, labels, problem))
    existing = {}
    for n in draw(st.sets(names)):
        owner = draw(st.sampled_from([None, ("team", UID), ("other", "uid-o")]))
        labels = draw(st.sampled_from([{}, {**MARK, SOURCE_LABEL: "team"}]))
        existing[n] = Existing(n, owner, labels, draw(st.sampled_from([n, "a", "b-kc"])))
    return src, secrets, existing, draw(st.sampled_from([True, True, True, None, False]))


@given(worlds())
def test_the_plan_touches_only_the_sources_clusters_and_settles_in_one_step(world: World) -> None:
    src, secrets, existing, listable = world
    decided = sp.plan_secrets(src, secrets, existing, secrets_listable=listable)
    touched = {d.name for d in (*decided.create, *decided.update)} | set(decided.delete)
    for name in touched:
        there = existing.get(name)
        assert there is None or there.owner == ("team", UID)
    if listable is not True:
        # A missing permission, or not listed yet: nothing is created or deleted.
        assert touched == set() and decided.blocked is not None
        return
    after = applied(src, decided, existing)
    again = sp.plan_secrets(src, secrets, after)
    assert (again.create, again.update, again.delete) == ((), (), ())
    assert status_of(src, decided, {}) == status_of(src, again, {})


@given(worlds())
def test_every_matched_secret_has_its_cluster_or_a_reason_and_no_other_keeps_one(
    world: World,
) -> None:
    src, secrets, existing, _ = world
    assert src.shape is not None
    decided = sp.plan_secrets(src, secrets, existing)
    after = applied(src, decided, existing)
    listed = {e.secret for e in decided.not_imported}
    kept_for: dict[str, str] = {}
    for s in secrets:
        named = ss.cluster_name(src.shape, s.name, s.labels)
        if named is None:
            continue
        if isinstance(named, tuple):
            assert s.name in listed
            continue
        ours = named in after and after[named].owner == ("team", UID)
        if ours and after[named].secret == s.name:
            kept_for[named] = s.name
        assert (ours and after[named].secret == s.name) or s.name in listed
        assert s.problem is None or s.name in listed
    # Every Cluster of the source reads a Secret that matches and names it.
    for name, there in after.items():
        if there.owner == ("team", UID):
            assert kept_for.get(name) == there.secret, (name, there)


@given(worlds(), st.lists(st.sampled_from(["a", "b", "a-kc", "b-kc", "xc", "d"]), max_size=3))
def test_a_clusters_secret_never_changes_while_that_secret_still_matches(
    world: World, planted: list[str]
) -> None:
    """Whatever Secrets appear beside it (planted with the labels and names that sort first),
    a Cluster the source made keeps reading the Secret it was made from while that Secret
    matches and names it: never updated to another, never deleted."""
    src, secrets, existing, _ = world
    assert src.shape is not None
    decided = sp.plan_secrets(src, secrets, existing)
    after = applied(src, decided, existing)
    present = {s.name for s in secrets}
    newcomers = [
        sp.Labelled(n, {**MARK, "name": n.removesuffix("-kc")}) for n in planted if n not in present
    ]
    for world_secrets, before in ((secrets, existing), ([*secrets, *newcomers], after)):
        plan = sp.plan_secrets(src, world_secrets, before)
        for name, there in before.items():
            if there.owner != ("team", UID):
                continue
            holder = [
                s
                for s in world_secrets
                if s.name == there.secret and ss.cluster_name(src.shape, s.name, s.labels) == name
            ]
            if not holder:
                continue
            assert name not in plan.delete, (name, there)
            assert all(d.secret == there.secret for d in plan.update if d.name == name)
            assert name not in {d.name for d in plan.create}


# --- contexts All -------------------------------------------------------------------------------


def merged(*contexts: str, exec_in: str = "") -> str:
    """A kubeconfig with these contexts, each its own cluster and user (``exec_in``'s an exec)."""
    docs = [
        kubeconfig(
            context=c,
            cluster_name=f"{c}-cluster",
            user_name=f"{c}-user",
            user={"exec": {"command": "x"}} if c == exec_in else None,
        )
        for c in contexts
    ]
    first = docs[0]
    for other in docs[1:]:
        for field in ("clusters", "contexts", "users"):
            first[field] = first[field] + other[field]
    return dump(first)


def all_contexts() -> ClusterSource:
    return source(key="kubeconfig", contexts="All")


def test_each_context_has_its_verdict_and_a_broken_secret_has_one() -> None:
    shape = all_contexts().shape
    assert shape is not None and shape.all_contexts
    text = merged("edge-1", "edge-2", exec_in="edge-2")
    data = {"kubeconfig": base64.b64encode(text.encode()).decode()}
    whole, each = sp.context_verdicts({"data": data}, shape)
    assert whole is None
    assert [c for c, _ in each] == ["edge-1", "edge-2"]
    assert each[0][1] is None
    problem = each[1][1]
    assert problem is not None and problem[0] is Reason.INVALID_KUBECONFIG
    assert "exec" in problem[1]
    broken = {"kubeconfig": base64.b64encode(b"{{{ not yaml").decode()}
    whole, each = sp.context_verdicts({"data": broken}, shape)
    assert whole is not None and whole[0] is Reason.INVALID_KUBECONFIG and each == ()
    whole, _ = sp.context_verdicts({"data": {}}, shape)
    assert whole is not None and whole[0] is Reason.SECRET_KEY_NOT_FOUND


def test_one_cluster_per_context_named_after_it_and_a_context_removed_goes() -> None:
    src = all_contexts()
    both = sp.Labelled("fleet", MARK, None, (("edge-1", None), ("edge-2", None)))
    decided = sp.plan_secrets(src, [both], {})
    assert [(d.name, d.secret, d.context) for d in decided.create] == [
        ("edge-1", "fleet", "edge-1"),
        ("edge-2", "fleet", "edge-2"),
    ]
    body = cluster_body(src, decided.create[0])
    assert body["spec"]["kubeconfig"] == {
        "secretRef": {"name": "fleet", "key": "kubeconfig"},
        "context": "edge-1",
    }
    assert status_of(src, decided, {}).matched == 2
    after = {d.name: existing_of(cluster_body(src, d)) for d in decided.create}
    assert after["edge-2"].context == "edge-2"
    # A third context appears: a third Cluster. One goes: its Cluster goes.
    three = sp.Labelled("fleet", MARK, None, (("edge-1", None), ("edge-3", None)))
    again = sp.plan_secrets(src, [three], after)
    assert [d.name for d in again.create] == ["edge-3"]
    assert again.delete == ("edge-2",)
    # The whole kubeconfig broken by a rotation: every Cluster of it stays.
    broken = sp.Labelled("fleet", MARK, (Reason.INVALID_KUBECONFIG, "not YAML"))
    kept = sp.plan_secrets(src, [broken], after)
    assert (kept.create, kept.delete) == ((), ())
    assert sorted(e.cluster for e in kept.not_imported) == ["edge-1", "edge-2"]
    # A context that makes no Cluster name is listed, and makes none.
    odd = sp.Labelled("fleet", MARK, None, (("kind-Edge_1", None),))
    listed = sp.plan_secrets(src, [odd], {})
    assert listed.create == ()
    (entry,) = listed.not_imported
    assert entry.reason is Reason.INVALID_CLUSTER_NAME
    assert "kubectl config rename-context" in entry.message


def test_contexts_takes_current_or_all_and_not_naming_beside_all() -> None:
    base = {"from": "Secrets", "secretSelector": {"matchLabels": MARK}}
    assert "not Current or All" in invalid(**base, contexts="Some").message
    assert "remove spec.naming" in invalid(**base, contexts="All", naming={"label": "x"}).message
    assert "vcluster's own" in invalid(**{"from": "VCluster", "contexts": "All"}).message
    assert source(contexts="Current").shape == source().shape


contexts_drawn = st.lists(st.sampled_from(["a", "b", "c", "Bad_1"]), unique=True, max_size=3)


@given(st.lists(contexts_drawn, min_size=1, max_size=3), st.booleans())
def test_contexts_all_settles_in_one_step_and_keeps_only_present_contexts(
    rounds: list[list[str]], broken_last: bool
) -> None:
    """Contexts come and go over rotations: each plan settles at once, and the source's
    Clusters are exactly the present, nameable contexts (all kept while the Secret is broken)."""
    src = all_contexts()
    existing: dict[str, Existing] = {}
    for i, names in enumerate(rounds):
        broken = broken_last and i == len(rounds) - 1 and i > 0
        secret = (
            sp.Labelled("fleet", MARK, (Reason.INVALID_KUBECONFIG, "bad"))
            if broken
            else sp.Labelled("fleet", MARK, None, tuple((n, None) for n in sorted(names)))
        )
        before = set(existing)
        decided = sp.plan_secrets(src, [secret], existing)
        existing = applied(src, decided, existing)
        again = sp.plan_secrets(src, [secret], existing)
        assert (again.create, again.update, again.delete) == ((), (), ())
        if broken:
            assert set(existing) == before
        else:
            assert set(existing) == {n for n in names if ss.name_problem(n) is None}
            assert all(e.context == e.name for e in existing.values())


@given(
    st.lists(
        st.tuples(st.sampled_from(["s1", "s2", "s3"]), st.lists(st.sampled_from(["a", "b"]))),
        min_size=1,
        max_size=5,
    )
)
def test_with_contexts_all_a_clusters_secret_and_context_never_change_while_they_match(
    rounds: list[tuple[str, list[str]]],
) -> None:
    """Secrets come with contexts of the same names, one per round: each Cluster keeps the
    Secret and context it was made from while that Secret still has the context."""
    src = all_contexts()
    present: dict[str, list[str]] = {}
    existing: dict[str, Existing] = {}
    for secret, names in rounds:
        present[secret] = sorted(set(names))
        secrets = [
            sp.Labelled(n, MARK, None, tuple((c, None) for c in cs_)) for n, cs_ in present.items()
        ]
        decided = sp.plan_secrets(src, secrets, existing)
        after = applied(src, decided, existing)
        for name, there in existing.items():
            if there.context in present.get(there.secret or "", []):
                assert (after[name].secret, after[name].context) == (there.secret, there.context)
        existing = after
