"""The Kubernetes manifests in deploy/kubernetes: every object validates (strict: no unknown
fields) against a pinned Kubernetes version's published schemas with kubernetes-validate, and the
objects agree with each other and with gw: every Secret key and ConfigMap they name exists, probes
name declared ports, the autoscaler and disruption budgets select what exists, the proxy's spool
is on a per-replica volume mounted where its configuration spools, pods outlive their shutdown
grace, migrations go straight to the primary, and the configuration loads in gw itself."""

import os
import subprocess
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import ROOT, bin_dir

KUBERNETES_VERSION = "1.33.0"
DEPLOY = ROOT / "deploy" / "kubernetes"


def documents(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def manifests():
    return sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def objects():
    return [d for p in manifests() for d in documents(p)]


def by_kind(kind):
    return {o["metadata"]["name"]: o for o in objects() if o["kind"] == kind}


def pod_specs():
    """(workload name, pod template) of every workload."""
    out = []
    for o in objects():
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            out.append((o["metadata"]["name"], o["spec"]["template"]))
    return out


def gw_toml():
    return by_kind("ConfigMap")["gw-config"]["data"]["gw.toml"]


@pytest.mark.parametrize("path", manifests(), ids=lambda p: p.name)
def test_every_object_validates_against_the_pinned_kubernetes_schemas(path):
    docs = documents(path)
    assert docs, f"{path.name} holds no object"
    for doc in docs:
        # Raises ValidationError naming the field; strict refuses fields the schema lacks.
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_a_broken_manifest_is_refused():
    """The validator really checks: a misspelled field and a wrong type are both refused."""
    deployment = by_kind("Deployment")["gw-admin"]
    bad = yaml.safe_load(yaml.safe_dump(deployment))
    bad["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)
    bad = yaml.safe_load(yaml.safe_dump(deployment))
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_the_kustomization_applies_every_manifest_but_the_example_secret():
    k = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    want = {p.name for p in manifests()} - {"secret.example.yaml"}
    assert set(k["resources"]) == want


def test_every_secret_key_and_config_map_named_exists():
    secrets, config_maps = by_kind("Secret"), by_kind("ConfigMap")
    for name, template in pod_specs():
        for c in template["spec"]["containers"]:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] in secrets, (name, ref)
                    assert ref["key"] in secrets[ref["name"]]["stringData"], (name, ref)
        for v in template["spec"].get("volumes", []):
            if "configMap" in v:
                assert v["configMap"]["name"] in config_maps, (name, v)


def test_probes_name_declared_ports_and_paths_gw_serves():
    served = {"/healthz", "/readyz"}
    for name, template in pod_specs():
        for c in template["spec"]["containers"]:
            ports = {p["name"] for p in c.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                if probe in c:
                    get = c[probe]["httpGet"]
                    assert get["port"] in ports, (name, probe, get)
                    assert get["path"] in served, (name, probe, get)
        if name in ("gw-proxy", "gw-admin"):
            c = template["spec"]["containers"][0]
            assert "readinessProbe" in c and "livenessProbe" in c, name


def test_services_autoscaler_and_budgets_select_the_pods_that_exist():
    workloads = {o["metadata"]["name"]: o for o in objects() if o["kind"] in ("Deployment", "StatefulSet")}

    def selects(selector, labels):
        return all(labels.get(k) == v for k, v in selector.items())

    for pdb in by_kind("PodDisruptionBudget").values():
        hits = [w for w in workloads.values()
                if selects(pdb["spec"]["selector"]["matchLabels"], w["spec"]["template"]["metadata"]["labels"])]
        assert len(hits) == 1, pdb["metadata"]["name"]
    for svc in by_kind("Service").values():
        hits = [w for w in workloads.values()
                if selects(svc["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])]
        assert len(hits) == 1, svc["metadata"]["name"]
        ports = {p["name"] for c in hits[0]["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in ports, (svc["metadata"]["name"], p)
    (hpa,) = by_kind("HorizontalPodAutoscaler").values()
    target = hpa["spec"]["scaleTargetRef"]
    assert workloads[target["name"]]["kind"] == target["kind"] == "StatefulSet"
    proxy = workloads["gw-proxy"]
    assert proxy["spec"]["serviceName"] in by_kind("Service")
    assert by_kind("Service")[proxy["spec"]["serviceName"]]["spec"]["clusterIP"] == "None"
    assert hpa["spec"]["minReplicas"] >= 2 and by_kind("PodDisruptionBudget")["gw-proxy"]["spec"]["maxUnavailable"] == 1


def test_the_proxy_spools_on_a_volume_of_its_own_and_outlives_its_shutdown():
    cfg = tomllib.loads(gw_toml())
    proxy = by_kind("StatefulSet")["gw-proxy"]
    claims = {c["metadata"]["name"] for c in proxy["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in proxy["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts.get(cfg["proxy"]["audit_spool_dir"]) in claims, "the spool is not on a per-replica volume"
    grace = proxy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    pre_stop = int(proxy["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][1])
    # gw-proxy's own shutdown: up to shutdown_grace_secs, then up to 5 s for its runtimes.
    assert grace > cfg["proxy"]["shutdown_grace_secs"] + 5 + pre_stop
    assert cfg["proxy"]["listen"].startswith("0.0.0.0:") and cfg["proxy"]["metrics_listen"].startswith("0.0.0.0:")


def test_migrations_go_straight_to_the_primary():
    (job,) = by_kind("Job").values()
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "database-direct-url"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["gw-admin", "migrate"]


def test_the_configuration_loads_in_gw(tmp_path):
    path = tmp_path / "gw.toml"
    path.write_text(gw_toml())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_", "GW_"))}
    env.update(GW_CONFIG=str(path), DATABASE_URL="postgres://gw@pgbouncer:6432/gw",
               DATABASE_DIRECT_URL="postgres://gw@postgres:5432/gw",
               DATABASE_READ_URL="postgres://gw@replica:5432/gw",
               REDIS_URL="redis://redis:6379", GW_JWT_SECRET="x" * 40)
    r = subprocess.run([str(bin_dir() / "gw-admin"), "check-config"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "configuration ok" in r.stdout, r.stdout
    # And a file gw would refuse is refused (the check is real).
    path.write_text(gw_toml().replace("[proxy]", "[proxy]\nno_such_setting = 1"))
    r = subprocess.run([str(bin_dir() / "gw-admin"), "check-config"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "no_such_setting" in r.stdout + r.stderr, r.stdout + r.stderr
